//! The postings of a keyword or groupBy dimension of many keys (an address: at a million
//! items, 855,664 keys, nearly every one held by one document) in an FST beside an
//! overlay of the keys changed since it was built. In the persistent map each key cost
//! its map entry (24 bytes), its own allocation (~20 bytes and the allocator's
//! rounding) and its share of the map's nodes: ~45 MB for the address. The FST shares
//! the keys' prefixes and suffixes and holds each key's posting as its output: a lone
//! document's number, or the index of a set held by several (`Base::shared`).
//!
//! An apply changes the overlay only (`Frozen::change`), which shadows the FST: a key in
//! it has the posting it gives there (`None`: no documents any more). Once the overlay
//! outgrows a share of the FST, both are merged into a new FST (`folded`): in the
//! background, off a snapshot (`Snapshot::fold_postings`), or by an apply when the
//! overlay is overdue (`fold_if_overdue`).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use fst::Streamer;
use imbl::OrdMap;
use roaring::RoaringBitmap;

use super::{Key, Posting, PostingRef};

/// A keyword or groupBy dimension with at least this many keys is held frozen. (Small in
/// tests, so that the index tests' keyword dimensions take this path too.)
pub(crate) const FROZEN_MIN_KEYS: usize = if cfg!(test) { 4 } else { 1 << 16 };

/// The overlay is due to be merged into a new FST once it holds more than this share of
/// the FST's keys (and more than `FOLD_MIN`). Making the address's FST of 855,318 keys
/// took ~0.9 s after a 1M bulk load (both cores busy), and a fold of 110,000 changes
/// into 855,000 keys 855 ms: so the engine folds a snapshot's postings in the
/// background and adopts them if no apply changed them meanwhile
/// (`Snapshot::fold_postings`), and an apply folds only an overlay past twice the share
/// (`OVERDUE_SHARE`: applies back to back, whose snapshots a background fold never
/// catches up with).
const FOLD_SHARE: usize = 8;
const OVERDUE_SHARE: usize = 2;
const FOLD_MIN: usize = if cfg!(test) { 2 } else { 4096 };

/// An FST output: a lone document's number, or (low bit set) an index in `shared`.
const SHARED: u64 = 1;

pub(crate) struct Base {
    fst: fst::Map<Vec<u8>>,
    /// The postings of keys held by more than one document.
    shared: Vec<Posting>,
}

impl Base {
    /// The FST of `entries`, in strictly ascending key order.
    fn build<K: AsRef<[u8]>>(entries: impl Iterator<Item = (K, Posting)>) -> Base {
        let mut b = fst::MapBuilder::memory();
        let mut shared = Vec::new();
        for (k, p) in entries {
            let out = match p.get() {
                PostingRef::One(d) => u64::from(d) << 1,
                PostingRef::Many(_) => {
                    shared.push(p);
                    ((shared.len() - 1) as u64) << 1 | SHARED
                }
            };
            b.insert(k, out)
                .expect("keys come from a sorted map, each once");
        }
        let fst = b.into_map().into_fst().into_inner();
        Base {
            fst: fst::Map::new(fst).expect("an FST just built"),
            shared,
        }
    }

    fn posting_ref(&self, out: u64) -> PostingRef<'_> {
        match out & SHARED {
            0 => PostingRef::One((out >> 1) as u32),
            _ => self.shared[(out >> 1) as usize].get(),
        }
    }

    fn posting(&self, out: u64) -> Posting {
        match out & SHARED {
            0 => Posting::one((out >> 1) as u32),
            _ => self.shared[(out >> 1) as usize].clone(),
        }
    }

    fn bytes(&self) -> usize {
        self.fst.as_fst().size()
            + self
                .shared
                .iter()
                .map(|p| 8 + 40 + p.set_bytes())
                .sum::<usize>()
    }
}

/// A dimension's postings as an FST and the keys changed since.
#[derive(Clone)]
pub(crate) struct Frozen {
    base: Arc<Base>,
    /// The keys changed since `base` was built, and their postings now.
    over: OrdMap<Key, Option<Posting>>,
    /// How many keys have documents.
    len: usize,
}

impl Frozen {
    /// The postings of `entries` (in strictly ascending key order), frozen.
    pub(crate) fn of<K: AsRef<[u8]>>(entries: impl Iterator<Item = (K, Posting)>) -> Frozen {
        let base = Base::build(entries);
        Frozen {
            len: base.fst.len(),
            base: Arc::new(base),
            over: OrdMap::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<PostingRef<'_>> {
        match self.over.get(key) {
            Some(p) => p.as_ref().map(Posting::get),
            None => self.base.fst.get(key).map(|o| self.base.posting_ref(o)),
        }
    }

    fn posting(&self, key: &[u8]) -> Option<Posting> {
        match self.over.get(key) {
            Some(p) => p.clone(),
            None => self.base.fst.get(key).map(|o| self.base.posting(o)),
        }
    }

    /// Key `key`'s documents changed: `add` joined, `remove` left (disjoint).
    pub(crate) fn change(&mut self, key: &Key, add: &RoaringBitmap, remove: &RoaringBitmap) {
        let before = self.posting(key);
        let had = before.is_some();
        let after = Posting::changed(before, add, remove);
        match (had, after.is_some()) {
            (false, true) => self.len += 1,
            (true, false) => self.len -= 1,
            _ => {}
        }
        self.over.insert(key.clone(), after);
    }

    /// Whether the overlay is due to be merged into a new FST (`folded`).
    pub(crate) fn due(&self) -> bool {
        self.overlay_past(FOLD_SHARE)
    }

    fn overlay_past(&self, share: usize) -> bool {
        let over = self.over.len();
        over > FOLD_MIN && over * share > self.base.fst.len()
    }

    /// The FST built anew with the overlay merged in.
    pub(crate) fn folded(&self) -> Frozen {
        Frozen::of(Merged::new(self).map(|(k, out)| {
            let p = match out {
                Source::Base(o) => self.base.posting(o),
                Source::Over(p) => p.clone(),
            };
            (k, p)
        }))
    }

    /// Folds the overlay once it is past twice the share a background fold takes
    /// (`OVERDUE_SHARE`): what an apply does, so that the overlay stays bounded.
    pub(crate) fn fold_if_overdue(&mut self) {
        if self.overlay_past(OVERDUE_SHARE) {
            *self = self.folded();
        }
    }

    /// Every key with documents and its documents, in key order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Cow<'_, [u8]>, PostingRef<'_>)> + '_ {
        Merged::new(self).map(|(k, out)| {
            let p = match out {
                Source::Base(o) => self.base.posting_ref(o),
                Source::Over(p) => p.get(),
            };
            (k, p)
        })
    }

    /// What a saved index keeps of it (`persist`): the FST's bytes, the sets its
    /// outputs index, and the overlay.
    pub(crate) fn parts(&self) -> (&[u8], &[Posting], &OrdMap<Key, Option<Posting>>) {
        (
            self.base.fst.as_fst().as_bytes(),
            &self.base.shared,
            &self.over,
        )
    }

    /// The postings `parts` gave, checked so that no lookup can fail on them: an FST,
    /// every output naming a lone document or one of `shared`, the overlay's keys in
    /// order (a saved index is checksummed; this is what a checksum cannot vouch for).
    /// Decoding the address's 855,000 entries and building its FST again took 2.0-2.5 s
    /// of a core in a 1M restart; loaded as saved, restarts were 0.6-1.9 s faster.
    pub(crate) fn from_parts(
        fst: Vec<u8>,
        shared: Vec<Posting>,
        over: Vec<(Key, Option<Posting>)>,
    ) -> Result<Frozen, &'static str> {
        let fst = fst::Map::new(fst)
            .ok()
            .filter(|m| m.as_fst().verify().is_ok())
            .ok_or("a frozen dimension's FST")?;
        let mut outputs = fst.values();
        while let Some(out) = outputs.next() {
            if out & SHARED != 0 && (out >> 1) as usize >= shared.len() {
                return Err("a frozen dimension's shared sets");
            }
        }
        if over.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("a frozen dimension's overlay keys out of order");
        }
        let mut len = fst.len();
        for (k, p) in &over {
            match (fst.contains_key(k), p.is_some()) {
                (true, false) => len -= 1,
                (false, true) => len += 1,
                _ => {}
            }
        }
        Ok(Frozen {
            base: Arc::new(Base { fst, shared }),
            over: over.into_iter().collect(),
            len,
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        const ENTRY: usize = std::mem::size_of::<(Key, Option<Posting>)>();
        self.base.bytes()
            + self
                .over
                .iter()
                .map(|(k, p)| {
                    let heap = if k.spilled() { k.len() } else { 0 };
                    heap + ENTRY + p.as_ref().map_or(0, Posting::set_bytes)
                })
                .sum::<usize>()
    }
}

/// Where a merged entry's posting is.
enum Source<'a> {
    Base(u64),
    Over(&'a Posting),
}

/// The FST's keys and the overlay's merged, in key order: an overlay key shadows the
/// FST's, and one without documents is left out.
struct Merged<'a> {
    stream: fst::map::Stream<'a>,
    base_next: Option<(Vec<u8>, u64)>,
    over: imbl::ordmap::Iter<'a, Key, Option<Posting>, imbl::shared_ptr::DefaultSharedPtr>,
    over_next: Option<(&'a Key, &'a Option<Posting>)>,
}

impl<'a> Merged<'a> {
    fn new(f: &'a Frozen) -> Merged<'a> {
        let mut stream = f.base.fst.stream();
        let base_next = stream.next().map(|(k, o)| (k.to_vec(), o));
        let mut over = f.over.iter();
        let over_next = over.next();
        Merged {
            stream,
            base_next,
            over,
            over_next,
        }
    }

    fn advance_base(&mut self) -> Option<(Vec<u8>, u64)> {
        let next = self.stream.next().map(|(k, o)| (k.to_vec(), o));
        std::mem::replace(&mut self.base_next, next)
    }
}

impl<'a> Iterator for Merged<'a> {
    type Item = (Cow<'a, [u8]>, Source<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (&self.base_next, self.over_next) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((b, _)), Some((o, _))) => b.as_slice().cmp(&o[..]),
            };
            if order == Ordering::Less {
                let (k, o) = self.advance_base()?;
                return Some((Cow::Owned(k), Source::Base(o)));
            }
            if order == Ordering::Equal {
                self.advance_base(); // (shadowed)
            }
            let (k, p) = self.over_next?;
            self.over_next = self.over.next();
            if let Some(p) = p {
                return Some((Cow::Borrowed(&k[..]), Source::Over(p)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn posting(docs: &[u32]) -> Option<Posting> {
        Posting::of(docs.iter().copied().collect())
    }

    fn listed(f: &Frozen) -> Vec<(Vec<u8>, Vec<u32>)> {
        f.entries()
            .map(|(k, p)| (k.into_owned(), p.bitmap().iter().collect()))
            .collect()
    }

    proptest! {
        /// A frozen dimension changed key by key — folds included — lists, finds and
        /// counts the same keys and documents as a plain map changed the same way.
        #[test]
        fn frozen_postings_are_the_map_they_stand_for(
            start in prop::collection::btree_map(0u16..300, prop::collection::btree_set(0u32..50, 1..4), 0..60),
            changes in prop::collection::vec(
                (0u16..300, prop::collection::btree_set(0u32..50, 0..3), prop::collection::btree_set(0u32..50, 0..3)),
                0..200),
        ) {
            let key = |k: u16| -> Key { format!("k{k}").into_bytes().into() };
            let mut want: BTreeMap<Vec<u8>, std::collections::BTreeSet<u32>> = start
                .iter()
                .map(|(k, d)| (key(*k).to_vec(), d.clone()))
                .collect();
            let entries: Vec<(Key, Posting)> = want
                .iter()
                .map(|(k, d)| (k.clone().into(), posting(&d.iter().copied().collect::<Vec<_>>()).unwrap()))
                .collect();
            let mut f = Frozen::of(entries.into_iter());
            for (k, add, remove) in changes {
                let remove: std::collections::BTreeSet<u32> = remove.difference(&add).copied().collect();
                let (a, r): (RoaringBitmap, RoaringBitmap) =
                    (add.iter().copied().collect(), remove.iter().copied().collect());
                f.change(&key(k), &a, &r);
                if f.due() {
                    f = f.folded();
                }
                f.fold_if_overdue();
                let docs = want.entry(key(k).to_vec()).or_default();
                docs.extend(&add);
                docs.retain(|d| !remove.contains(d));
                if docs.is_empty() {
                    want.remove(&key(k).to_vec());
                }
            }
            let want: Vec<(Vec<u8>, Vec<u32>)> =
                want.into_iter().map(|(k, d)| (k, d.into_iter().collect())).collect();
            // and so is what a saved index keeps of it, loaded again (`from_parts`)
            let (fst, shared, over) = f.parts();
            let over: Vec<(Key, Option<Posting>)> =
                over.iter().map(|(k, p)| (k.clone(), p.clone())).collect();
            let loaded = Frozen::from_parts(fst.to_vec(), shared.to_vec(), over).unwrap();
            for f in [&f, &loaded] {
                prop_assert_eq!(listed(f), want.clone());
                prop_assert_eq!(f.len(), want.len());
                for k in 0..300u16 {
                    let got: Option<Vec<u32>> = f.get(&key(k)).map(|p| p.bitmap().iter().collect());
                    let expected = want.iter().find(|(w, _)| *w == key(k).to_vec()).map(|(_, d)| d.clone());
                    prop_assert_eq!(got, expected, "key {}", k);
                }
            }
        }
    }

    /// Saved parts that a lookup could fail on are refused: bytes that are no FST, an
    /// output naming a shared set that is not there, an overlay out of order.
    #[test]
    fn damaged_parts_are_refused() {
        let key = |k: u32| -> Key { format!("k{k}").into_bytes().into() };
        let two = |d: u32| Posting::of(RoaringBitmap::from_iter([d, d + 1])).unwrap();
        let f = Frozen::of((0..6u32).map(|i| (key(i), two(i * 2))));
        let (fst, shared, _) = f.parts();
        assert_eq!(shared.len(), 6);
        let ok = Frozen::from_parts(fst.to_vec(), shared.to_vec(), vec![]);
        assert_eq!(ok.map(|g| g.len()).ok(), Some(6));
        // a set short: the last key's output names a seventh... of five
        let short = Frozen::from_parts(fst.to_vec(), shared[..5].to_vec(), vec![]);
        assert_eq!(short.err(), Some("a frozen dimension's shared sets"));
        let mut flipped = fst.to_vec();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x5a;
        let bad = Frozen::from_parts(flipped, shared.to_vec(), vec![]);
        assert_eq!(bad.err(), Some("a frozen dimension's FST"));
        let unordered = vec![(key(9), None), (key(7), Some(two(40)))];
        let bad = Frozen::from_parts(fst.to_vec(), shared.to_vec(), unordered);
        assert_eq!(
            bad.err(),
            Some("a frozen dimension's overlay keys out of order")
        );
        // an overlay counted against the FST: one key gone, one new, one changed
        let over = vec![
            (key(1), None),
            (key(3), Some(two(50))),
            (key(8), Some(two(60))),
        ];
        let g = Frozen::from_parts(fst.to_vec(), shared.to_vec(), over).unwrap();
        assert_eq!(g.len(), 6);
        assert!(g.get(&key(1)).is_none());
        assert_eq!(listed(&g).len(), 6);
    }

    /// An overlay past the share is due, a fold leaves it empty, and an apply folds
    /// only an overdue one.
    #[test]
    fn a_large_overlay_is_folded_in() {
        let key = |k: u32| -> Key { format!("k{k:04}").into_bytes().into() };
        let mut f = Frozen::of((0..8u32).map(|i| (key(i), Posting::one(i))));
        let one = |d: u32| RoaringBitmap::from_iter([d]);
        for i in 8..12u32 {
            f.change(&key(i), &one(i), &RoaringBitmap::new());
        }
        assert_eq!(f.over.len(), 4);
        assert!(f.due());
        // (an apply leaves it for a background fold until it is overdue)
        f.fold_if_overdue();
        assert_eq!(f.over.len(), 4);
        let mut f = f.folded();
        assert!(f.over.is_empty() && !f.due());
        assert_eq!(f.base.fst.len(), 12);
        assert_eq!(f.len(), 12);
        assert!(matches!(f.get(&key(11)), Some(PostingRef::One(11))));
        // past twice the share, an apply folds it
        for i in 12..19u32 {
            f.change(&key(i), &one(i), &RoaringBitmap::new());
        }
        f.fold_if_overdue();
        assert!(f.over.is_empty());
        assert_eq!((f.base.fst.len(), f.len()), (19, 19));
    }
}
