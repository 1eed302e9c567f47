//! `Posting`: one key's documents in one word. Most keys of a dimension of unique values
//! are held by one document (at a million items, ~800k of the address dimension's 858k
//! keys): a shared roaring bitmap of one document costs ~90 bytes in three allocations
//! (its count and container list, the container, the array), where the document number
//! fits in the word that would point to it.
//!
//! A large set an apply changes is not copied: the new posting is the old set with the
//! apply's changes beside it (`Overlaid`), merged into a set of its own when a request
//! first reads it. An apply of 1,000 items changes ~6,500 sets, and the large ones (a
//! common word's, a state's, a length class's: ~110 MB at a million items) were copied
//! on every apply, or kept twice (a spare copy brought up to date after each apply).
//!
//! The word is `doc << 1 | 1` (one document), the address of an `Arc<RoaringBitmap>`'s
//! bitmap, or the address of an `Arc<Overlaid>`'s value with bit 1 set. Both addresses
//! are multiples of 8 (an `Arc`'s value follows its two counts), so their two low bits
//! are 0. A posting is never empty: a key without documents is not kept.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, OnceLock};

use roaring::{MultiOps, RoaringBitmap};

use super::apply::{apply_set, change_set};

pub(crate) struct Posting(NonZeroU64);

const ONE: u64 = 1;
const OVERLAID: u64 = 2;

/// A set this large or larger is changed by an overlay, not copied (`Posting::changed`):
/// above one array container's worth, copying costs more than a request's merge. (Tests
/// overlay sets of a few documents, so that every index test takes both paths.)
const OVERLAY_MIN: u64 = if cfg!(test) { 4 } else { 4096 };

/// An overlay is merged into its set once its changes outnumber this fraction of the
/// set: it is applied whole by every merge, and kept for every snapshot until then.
const FOLD_DIVISOR: u64 = if cfg!(test) { 2 } else { 16 };

// (`Send` and `Sync` as a plain number is: right, since what a posting may point to —
// one count of an `Arc<RoaringBitmap>` or of an `Arc<Overlaid>` — is both.)

/// A posting's documents, lent.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PostingRef<'a> {
    One(u32),
    Many(&'a RoaringBitmap),
}

/// A set as an older set and changes to it, merged once read (`merged`).
pub(crate) struct Overlaid {
    /// Until merged: the older set, the documents added and those removed (disjoint).
    /// Emptied once merged, so that the older set is not kept beside the merged one.
    parts: Mutex<Option<Parts>>,
    merged: OnceLock<Arc<RoaringBitmap>>,
}

struct Parts {
    base: Arc<RoaringBitmap>,
    add: RoaringBitmap,
    remove: RoaringBitmap,
}

/// A set and the changes not yet merged into it (added, removed), if any.
type Split = (Arc<RoaringBitmap>, Option<(RoaringBitmap, RoaringBitmap)>);

impl Overlaid {
    fn parts(&self) -> std::sync::MutexGuard<'_, Option<Parts>> {
        self.parts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The documents as one set, merged on the first call.
    fn merged(&self) -> &Arc<RoaringBitmap> {
        self.merged.get_or_init(|| {
            let mut parts = self.parts();
            let p = parts
                .as_ref()
                .expect("the parts are let go only once merged");
            let mut set = p.base.clone();
            apply_set(&mut set, &p.add, &p.remove);
            *parts = None;
            set
        })
    }

    /// The older set and the changes to it (`None` for the changes once merged: the
    /// merged set is then the older set).
    fn split(&self) -> Split {
        let parts = self.parts();
        match parts.as_ref() {
            Some(p) => (p.base.clone(), Some((p.add.clone(), p.remove.clone()))),
            // (merged: `merged` only lets the parts go once it holds the set)
            None => (self.merged().clone(), None),
        }
    }

    /// `split`, taking the parts when this is their only holder.
    fn into_split(self) -> Split {
        let Overlaid { parts, merged } = self;
        match merged.into_inner() {
            Some(m) => (m, None),
            None => {
                let p = parts
                    .into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("the parts are let go only once merged");
                (p.base, Some((p.add, p.remove)))
            }
        }
    }

    /// Estimated bytes, without merging.
    fn bytes(&self) -> usize {
        if let Some(m) = self.merged.get() {
            return m.serialized_size();
        }
        self.parts().as_ref().map_or(0, |p| {
            p.base.serialized_size() + p.add.serialized_size() + p.remove.serialized_size()
        })
    }
}

/// Where a posting's word points.
enum Held {
    One(u32),
    Set(*const RoaringBitmap),
    Overlaid(*const Overlaid),
}

impl Posting {
    pub(crate) fn one(doc: u32) -> Posting {
        Posting(NonZeroU64::new(u64::from(doc) << 1 | ONE).expect("the tag bit is set"))
    }

    /// The posting of `set`'s documents; `None` when it has none.
    pub(crate) fn of(set: RoaringBitmap) -> Option<Posting> {
        match set.len() {
            0 => None,
            1 => set.min().map(Posting::one),
            _ => Some(Posting::shared(Arc::new(set))),
        }
    }

    /// The posting of a shared set's documents; `None` when it has none.
    pub(crate) fn of_shared(set: Arc<RoaringBitmap>) -> Option<Posting> {
        match set.len() {
            0 => None,
            1 => set.min().map(Posting::one),
            _ => Some(Posting::shared(set)),
        }
    }

    fn shared(set: Arc<RoaringBitmap>) -> Posting {
        let raw = Arc::into_raw(set) as u64;
        debug_assert!(
            raw & (ONE | OVERLAID) == 0,
            "an Arc's value is aligned past its counts"
        );
        Posting(NonZeroU64::new(raw).expect("an Arc's address is not null"))
    }

    fn overlaid(o: Overlaid) -> Posting {
        let raw = Arc::into_raw(Arc::new(o)) as u64;
        debug_assert!(
            raw & (ONE | OVERLAID) == 0,
            "an Arc's value is aligned past its counts"
        );
        Posting(NonZeroU64::new(raw | OVERLAID).expect("the tag bit is set"))
    }

    fn held(&self) -> Held {
        let w = self.0.get();
        if w & ONE != 0 {
            Held::One((w >> 1) as u32)
        } else if w & OVERLAID != 0 {
            Held::Overlaid((w & !OVERLAID) as *const Overlaid)
        } else {
            Held::Set(w as *const RoaringBitmap)
        }
    }

    pub(crate) fn get(&self) -> PostingRef<'_> {
        match self.held() {
            Held::One(d) => PostingRef::One(d),
            // SAFETY: a set posting holds one count of the `Arc` whose value is at this
            // address (`shared`), given back only by `drop`/`into_parts`, which take
            // `self`: the bitmap lives at least as long as this borrow, and an `Arc`'s
            // value is never changed while shared (only `Arc::make_mut` on an owned
            // `Arc` changes one, and `into_parts` hands out the `Arc` by value).
            Held::Set(p) => PostingRef::Many(unsafe { &*p }),
            // SAFETY: likewise for an overlaid posting's `Arc<Overlaid>` (`overlaid`);
            // the merged set it lends lives in that value's `OnceLock`, which is set
            // once and taken out only by `into_split`, which owns the value (no posting
            // is left to lend from).
            Held::Overlaid(p) => PostingRef::Many(unsafe { (*p).merged() }),
        }
    }

    /// Whether a change to this posting copies a set too small to overlay (`changed`),
    /// cheaply — or overlays a large one, which may fold its changes in. Told without
    /// merging an overlaid set.
    pub(crate) fn changes_cheaply(&self) -> bool {
        match self.held() {
            Held::One(_) => true,
            // SAFETY: as in `get`.
            Held::Set(p) => unsafe { &*p }.len() < OVERLAY_MIN,
            Held::Overlaid(_) => false,
        }
    }

    /// Estimated bytes of the documents, without merging an overlaid set.
    pub(crate) fn set_bytes(&self) -> usize {
        match self.held() {
            Held::One(_) => 0,
            // SAFETY: as in `get`.
            Held::Set(p) => unsafe { &*p }.serialized_size(),
            // SAFETY: as in `get`.
            Held::Overlaid(p) => unsafe { &*p }.bytes(),
        }
    }

    /// The documents changed: `add` joined and `remove` left (disjoint sets). A large
    /// set is left as it is, with the changes beside it (`Overlaid`), until they grow
    /// past a sixteenth of it (`FOLD_DIVISOR`); a small one is copied when shared and
    /// changed.
    pub(crate) fn changed(
        this: Option<Posting>,
        add: &RoaringBitmap,
        remove: &RoaringBitmap,
    ) -> Option<Posting> {
        let Some(this) = this else {
            return Posting::of(add - remove);
        };
        let (mut base, pending) = this.into_parts();
        if base.len() < OVERLAY_MIN && pending.is_none() {
            apply_set(&mut base, add, remove);
            return Posting::of_shared(base);
        }
        let (mut plus, mut minus) = pending.unwrap_or_default();
        // Each document's last state: in `add` it is in the set, in `remove` out. The
        // changes are not checked against the set (a cache miss per document in a large
        // one): the merge applies them whole, and a document may be added that the set
        // holds, or removed that it does not. (`add` and `remove` are disjoint: each
        // overlay gains one and loses the other, a few documents at a time where the
        // changes are few — `|=` and `-=` would rebuild every container they touch.)
        change_set(&mut plus, add, remove);
        change_set(&mut minus, remove, add);
        // So the set holds at least `base.len() - minus.len()` documents: folded in
        // long before that could reach 0.
        if plus.len() + minus.len() > base.len() / FOLD_DIVISOR {
            apply_set(&mut base, &plus, &minus);
            return Posting::of_shared(base);
        }
        Some(Posting::overlaid(Overlaid {
            parts: Mutex::new(Some(Parts {
                base,
                add: plus,
                remove: minus,
            })),
            merged: OnceLock::new(),
        }))
    }

    /// The documents as a shared set (a set of one is made) with the changes not yet
    /// merged into it.
    fn into_parts(self) -> Split {
        let this = std::mem::ManuallyDrop::new(self);
        match this.held() {
            Held::One(d) => (Arc::new(RoaringBitmap::from_iter([d])), None),
            // SAFETY: the count this posting held (`shared`) moves to the returned `Arc`,
            // and `self` is not dropped (`ManuallyDrop`), so it is given back only once.
            Held::Set(p) => (unsafe { Arc::from_raw(p) }, None),
            Held::Overlaid(p) => {
                // SAFETY: as above, for the `Arc<Overlaid>` (`overlaid`).
                let o = unsafe { Arc::from_raw(p) };
                match Arc::try_unwrap(o) {
                    Ok(o) => o.into_split(),
                    Err(o) => o.split(),
                }
            }
        }
    }
}

impl Clone for Posting {
    fn clone(&self) -> Posting {
        match self.held() {
            Held::One(_) => {}
            // SAFETY: `p` came from `Arc::into_raw` and this posting's count keeps it
            // alive: taking one more count for the clone, which `drop` gives back.
            Held::Set(p) => unsafe { Arc::increment_strong_count(p) },
            // SAFETY: as above, for the `Arc<Overlaid>`.
            Held::Overlaid(p) => unsafe { Arc::increment_strong_count(p) },
        }
        Posting(self.0)
    }
}

impl Drop for Posting {
    fn drop(&mut self) {
        match self.held() {
            Held::One(_) => {}
            // SAFETY: gives back the one count this posting holds (from `shared` or
            // `clone`); the word is not used after.
            Held::Set(p) => unsafe { drop(Arc::from_raw(p)) },
            // SAFETY: as above, for the `Arc<Overlaid>` (`overlaid` or `clone`).
            Held::Overlaid(p) => unsafe { drop(Arc::from_raw(p)) },
        }
    }
}

impl std::fmt::Debug for Posting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl<'a> PostingRef<'a> {
    pub(crate) fn len(self) -> u64 {
        match self {
            PostingRef::One(_) => 1,
            PostingRef::Many(b) => b.len(),
        }
    }

    pub(crate) fn iter(self) -> impl Iterator<Item = u32> + 'a {
        let (one, many) = match self {
            PostingRef::One(d) => (Some(d), None),
            PostingRef::Many(b) => (None, Some(b.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The documents as a bitmap: the shared one lent, a set of one made.
    pub(crate) fn bitmap(self) -> Cow<'a, RoaringBitmap> {
        match self {
            PostingRef::One(d) => Cow::Owned(RoaringBitmap::from_iter([d])),
            PostingRef::Many(b) => Cow::Borrowed(b),
        }
    }

    /// How many of the documents are in `other`.
    pub(crate) fn intersection_len(self, other: &RoaringBitmap) -> u64 {
        match self {
            PostingRef::One(d) => u64::from(other.contains(d)),
            PostingRef::Many(b) => b.intersection_len(other),
        }
    }

    /// The documents also in `other`.
    pub(crate) fn and(self, other: &RoaringBitmap) -> RoaringBitmap {
        match self {
            PostingRef::One(d) if other.contains(d) => RoaringBitmap::from_iter([d]),
            PostingRef::One(_) => RoaringBitmap::new(),
            PostingRef::Many(b) => b & other,
        }
    }

    /// Adds the documents to `to`.
    pub(crate) fn or_into(self, to: &mut RoaringBitmap) {
        match self {
            PostingRef::One(d) => {
                to.insert(d);
            }
            PostingRef::Many(b) => *to |= b,
        }
    }
}

/// The union of `sets`: the shared ones in one multi-way union (or-ing small arrays one
/// by one copies them each time), the single documents added after.
pub(crate) fn union<'a>(sets: impl IntoIterator<Item = PostingRef<'a>>) -> RoaringBitmap {
    let mut ones = Vec::new();
    let mut shared = Vec::new();
    for s in sets {
        match s {
            PostingRef::One(d) => ones.push(d),
            PostingRef::Many(b) => shared.push(b),
        }
    }
    let mut all = shared.into_iter().union();
    if !ones.is_empty() {
        ones.sort_unstable();
        ones.dedup();
        all |= RoaringBitmap::from_sorted_iter(ones).unwrap_or_default();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A posting holds its set's documents through clones, and a set of one is a
        /// document in place; every count taken is given back.
        #[test]
        fn a_posting_holds_its_set(docs in prop::collection::btree_set(any::<u32>(), 0..40)) {
            let set: RoaringBitmap = docs.iter().copied().collect();
            let Some(p) = Posting::of(set.clone()) else {
                prop_assert!(docs.is_empty());
                return Ok(());
            };
            prop_assert_eq!(matches!(p.get(), PostingRef::One(_)), docs.len() == 1);
            let q = p.clone();
            prop_assert_eq!(&*p.get().bitmap(), &set);
            prop_assert_eq!(q.get().len(), docs.len() as u64);
            prop_assert!(q.get().iter().eq(docs.iter().copied()));
            let (shared, pending) = q.into_parts();
            prop_assert!(pending.is_none());
            prop_assert_eq!(&*shared, &set);
            if docs.len() > 1 {
                // the posting and the `Arc` taken out of its clone: two counts
                prop_assert_eq!(Arc::strong_count(&shared), 2);
                drop(p);
                prop_assert_eq!(Arc::strong_count(&shared), 1);
            }
        }

        /// A posting changed again and again — its earlier versions kept or let go, read
        /// (and so merged) or not in between — holds the documents a plain set given
        /// the same changes holds, and every version still holds its own; each change
        /// is cheap (a copy) exactly when the set is neither overlaid nor large.
        #[test]
        fn changes_overlaid_or_copied_equal_a_plain_set(
            start in prop::collection::btree_set(0u32..300, 0..60),
            steps in prop::collection::vec(
                (prop::collection::btree_set(0u32..300, 0..24),
                 prop::collection::btree_set(0u32..300, 0..24),
                 any::<bool>(), any::<bool>()),
                1..16),
        ) {
            let mut want: RoaringBitmap = start.iter().copied().collect();
            let mut cur = Posting::of(want.clone());
            let mut kept: Vec<(Posting, RoaringBitmap)> = Vec::new();
            for (add, remove, keep, read) in steps {
                let add: RoaringBitmap = add.into_iter().collect();
                let remove = &remove.into_iter().collect::<RoaringBitmap>() - &add;
                if keep {
                    if let Some(p) = &cur {
                        kept.push((p.clone(), want.clone()));
                    }
                }
                // (told without merging: an overlaid set is read only when `read` says)
                let cheap = cur.as_ref().map(|p| {
                    let overlaid = matches!(p.held(), Held::Overlaid(_));
                    (p.changes_cheaply(), !overlaid && p.get().len() < OVERLAY_MIN)
                });
                if let Some((cheap, small)) = cheap {
                    prop_assert_eq!(cheap, small);
                }
                cur = Posting::changed(cur, &add, &remove);
                // a change told cheap is a copy, never an overlay (`apply_to` makes it
                // in place, outside the parallel step that overlays)
                if let (Some((true, _)), Some(p)) = (cheap, &cur) {
                    prop_assert!(!matches!(p.held(), Held::Overlaid(_)));
                }
                want |= &add;
                want -= &remove;
                match &cur {
                    None => prop_assert!(want.is_empty()),
                    Some(p) if read => {
                        prop_assert_eq!(p.get().len(), want.len());
                        prop_assert_eq!(&*p.get().bitmap(), &want);
                    }
                    Some(_) => {}
                }
            }
            if let Some(p) = &cur {
                prop_assert_eq!(&*p.get().bitmap(), &want);
            }
            for (p, was) in &kept {
                prop_assert_eq!(&*p.get().bitmap(), was);
            }
        }

        /// `union` equals the union of the sets as bitmaps, repeats and all.
        #[test]
        fn union_equals_bitmap_union(
            sets in prop::collection::vec(prop::collection::btree_set(0u32..200, 1..6), 0..8)
        ) {
            let postings: Vec<Posting> = sets
                .iter()
                .filter_map(|s| Posting::of(s.iter().copied().collect()))
                .collect();
            let want: RoaringBitmap = sets.iter().flatten().copied().collect();
            prop_assert_eq!(union(postings.iter().map(Posting::get)), want);
        }
    }

    /// `changes_cheaply` draws the line `changed` draws: one document short of
    /// `OVERLAY_MIN`, a one-document change is a copy (told cheap); at it, an overlay
    /// (not cheap). `apply_to` changes the cheap ones in place, outside its parallel step.
    #[test]
    fn cheap_changes_are_the_copies() {
        let added = RoaringBitmap::from_iter([1_000]);
        for n in [1, OVERLAY_MIN as u32 - 1, OVERLAY_MIN as u32, 64] {
            let p = Posting::of((0..n).collect()).expect("a set");
            let cheap = p.changes_cheaply();
            assert_eq!(cheap, u64::from(n) < OVERLAY_MIN, "{n} documents");
            let changed = Posting::changed(Some(p), &added, &RoaringBitmap::new()).expect("a set");
            let overlaid = matches!(changed.held(), Held::Overlaid(_));
            assert_eq!(overlaid, !cheap, "{n} documents");
            assert!(!changed.changes_cheaply() || !overlaid);
        }
    }

    /// A large set changed keeps the older set as it is, shared, with the change beside
    /// it; read, it is merged, and the older set is let go.
    #[test]
    fn a_large_set_is_overlaid_not_copied() {
        let kept = Posting::of((0..64).collect()).expect("a set");
        let (older, _) = kept.clone().into_parts();
        let added = RoaringBitmap::from_iter([100]);
        let changed =
            Posting::changed(Some(kept.clone()), &added, &RoaringBitmap::new()).expect("a set");
        let (base, pending) = changed.clone().into_parts();
        assert!(Arc::ptr_eq(&base, &older));
        assert_eq!(pending, Some((added, RoaringBitmap::new())));
        drop(base);
        // the older set's holders: `kept`, `older` and the overlay
        assert_eq!(Arc::strong_count(&older), 3);
        assert_eq!(changed.get().len(), 65);
        assert_eq!(Arc::strong_count(&older), 2);
        let (merged, pending) = changed.clone().into_parts();
        assert_eq!((merged.len(), pending), (65, None));
        assert_eq!(kept.get().len(), 64);
    }

    /// Requests merging an overlaid set while an apply builds on it (taking its parts or
    /// its merged set, whichever it finds) all see their own version's documents.
    #[test]
    fn merges_and_applies_at_once() {
        let base: RoaringBitmap = (0..2000).collect();
        for round in 0..50u32 {
            let (added, removed) = (
                RoaringBitmap::from_iter([5000 + round]),
                RoaringBitmap::from_iter([round]),
            );
            let p = Posting::changed(Posting::of(base.clone()), &added, &removed).expect("a set");
            let want = &(&base | &added) - &removed;
            let next_want = &want | &RoaringBitmap::from_iter([7000]);
            std::thread::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|| assert_eq!(&*p.get().bitmap(), &want));
                }
                s.spawn(|| {
                    let more = RoaringBitmap::from_iter([7000]);
                    let next = Posting::changed(Some(p.clone()), &more, &RoaringBitmap::new())
                        .expect("a set");
                    assert_eq!(&*next.get().bitmap(), &next_want);
                });
            });
            assert_eq!(&*p.get().bitmap(), &want);
        }
    }

    #[test]
    fn a_word_per_posting() {
        assert_eq!(std::mem::size_of::<Posting>(), 8);
        assert_eq!(std::mem::size_of::<Option<Posting>>(), 8);
        let last = Posting::one(u32::MAX);
        assert!(matches!(last.get(), PostingRef::One(u32::MAX)));
        assert!(last.get().iter().eq([u32::MAX]));
    }
}
