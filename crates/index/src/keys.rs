//! Keyword and groupBy values as numbers, for counting facets. A dimension's keys are
//! numbered in the order first met (`Numbering`: shared by every snapshot of one
//! dimensions document and only ever appended to, so a number means the same key in
//! every column holding it, whichever snapshot built the column), and a chunk's key
//! column (`KeyCol`, built on first use) gives each document's key numbers. A facet
//! then counts a document by bumping an array slot, instead of hashing its strings or
//! intersecting thousands of keys' postings with the counted set.

use std::borrow::Cow;
use std::sync::Arc;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue, StrList};

use crate::numbering::Numbering;
use crate::postings::{DimPostings, PostingRef};
use crate::slots::Slots;

/// Per dimension, the numbers of its keys (keyword and groupBy dimensions only).
pub(crate) fn numbers_for(dims: &Dimensions) -> Arc<[Option<Arc<Numbering>>]> {
    dims.dims
        .iter()
        .map(|d| {
            matches!(d.kind, DimensionKind::Keyword | DimensionKind::GroupBy)
                .then(|| Arc::new(Numbering::default()))
        })
        .collect()
}

/// A chunk's keys in one dimension, as numbers, in the smaller of two forms (`settled`:
/// one form for one content, however the column was made).
#[derive(Clone, Debug)]
pub(crate) enum KeyCol {
    Lists {
        /// Per document: its one key's number, `NONE`, or (with `MANY` set) where its
        /// list starts in `many` (its length, then the numbers).
        k: Box<[u32]>,
        many: Vec<u32>,
    },
    /// Per document a bit per key number: where every number is below 64 and the lists
    /// would take more (a dozen amenities a listing: 8 bytes a document, not ~50).
    Masks(Box<[u64]>),
}

const NONE: u32 = u32::MAX;
const MANY: u32 = 1 << 31;

/// Documents in a block of `KeyCol::from_postings`: a roaring container's span, so that
/// a key's documents in a block are in one container, found by one binary search.
/// (Smaller in tests, so that a few thousand documents make several blocks.)
pub(crate) const BLOCK: usize = if cfg!(test) {
    2 * crate::CHUNK
} else {
    1 << 16
};

/// The postings of a keyword or groupBy dimension read block by block, in document
/// order (`KeyCol::from_postings`): each key's documents are sought once, where the
/// walk starts, not once a block (a city's few hundred documents spread over every
/// block: a seek each was most of the build).
pub(crate) struct KeyWalk<'p> {
    /// Per key, in ascending number: its number, its next document, the ones after.
    keys: Vec<(u32, Option<u32>, Option<roaring::bitmap::Iter<'p>>)>,
}

impl<'p> KeyWalk<'p> {
    /// The walk over `entries` (`numbered_postings`) from document `from` on.
    pub(crate) fn new(entries: &[(u32, PostingRef<'p>)], from: u32) -> KeyWalk<'p> {
        let keys = entries.iter().map(|&(n, docs)| match docs {
            PostingRef::One(d) => (n, (d >= from).then_some(d), None),
            PostingRef::Many(b) => {
                let mut rest = b.range(from..);
                (n, rest.next(), Some(rest))
            }
        });
        KeyWalk {
            keys: keys.collect(),
        }
    }

    /// Whether every key's number is below 64 (the keys are in ascending number).
    fn numbers_below_64(&self) -> bool {
        self.keys.last().is_none_or(|(n, ..)| *n < 64)
    }

    /// Calls `put(document, number)` for each key of each document in the block of
    /// `BLOCK` documents from `base`, key by key; documents below `base` (of blocks
    /// not asked for) are passed by.
    fn block(&mut self, base: u32, mut put: impl FnMut(u32, u32)) {
        let last = base.saturating_add(BLOCK as u32 - 1);
        for (n, next, rest) in &mut self.keys {
            if next.is_some_and(|d| d < base) {
                *next = rest.as_mut().and_then(|r| {
                    r.advance_to(base);
                    r.next()
                });
            }
            while let Some(d) = next.filter(|&d| d <= last) {
                put(d, *n);
                *next = rest.as_mut().and_then(Iterator::next);
            }
        }
    }
}

/// Working memory of `KeyCol::from_postings`, kept by a thread across the blocks it
/// builds (fresh memory is dear here: zeroing new pages was a sixth of a build).
#[derive(Default)]
pub(crate) struct BlockBufs {
    /// Per document of the block, its first key's number.
    first: Vec<u32>,
    /// (document in the block, number) of each further key.
    more: Vec<(u32, u32)>,
    /// Per document of the block, where its further keys start in `grouped`.
    starts: Vec<u32>,
    /// The further keys' numbers, document by document.
    grouped: Vec<u32>,
    /// Per document of the block, its keys as a mask (every number below 64).
    masks: Vec<u64>,
}

/// The postings of keyword or groupBy dimension `p`, each key numbered (in `numbers`)
/// and given with its documents, in ascending number; `None` if a key is not a string
/// (a keyword's keys are its values' bytes).
pub(crate) fn numbered_postings<'p>(
    p: &'p DimPostings,
    numbers: &Numbering,
) -> Option<Vec<(u32, PostingRef<'p>)>> {
    let (keys, postings): (Vec<Cow<'p, [u8]>>, Vec<PostingRef<'p>>) = p.entries().unzip();
    let keys: Vec<&str> = (keys.iter())
        .map(|k| std::str::from_utf8(k).ok())
        .collect::<Option<_>>()?;
    let numbered = numbers.number(keys.iter().copied());
    let mut entries: Vec<(u32, PostingRef<'p>)> = numbered.into_iter().zip(postings).collect();
    entries.sort_unstable_by_key(|(n, _)| *n);
    Some(entries)
}

impl KeyCol {
    pub(crate) fn bytes(&self) -> usize {
        match self {
            KeyCol::Lists { k, many } => 4 * k.len() + 4 * many.capacity(),
            KeyCol::Masks(m) => 8 * m.len(),
        }
    }

    pub(crate) fn build(docs: &Slots, di: usize, numbers: &Numbering) -> KeyCol {
        let empty = KeyCol::Lists {
            k: vec![NONE; docs.len()].into(),
            many: Vec::new(),
        };
        let all: Vec<usize> = (0..docs.len()).collect();
        empty.patched(docs, di, numbers, &all)
    }

    /// The column of lists `k` and `many` in its form: masks where every number is
    /// below 64 and the lists hold more than a word a document.
    fn settled(k: Box<[u32]>, many: Vec<u32>) -> KeyCol {
        if !masks_pay(k.len(), many.len()) {
            return KeyCol::Lists { k, many };
        }
        let masks: Option<Box<[u64]>> = (k.iter())
            .map(|&x| match x {
                NONE => Some(0),
                x if x & MANY != 0 => {
                    let at = (x & !MANY) as usize;
                    mask_of(&many[at + 1..at + 1 + many[at] as usize])
                }
                x => mask_of(&[x]),
            })
            .collect();
        match masks {
            Some(masks) => KeyCol::Masks(masks),
            None => KeyCol::Lists { k, many },
        }
    }

    /// The column of documents' keys `masks` in its form (`settled`): masks where the
    /// lists would hold more than a word a document.
    fn of_masks(masks: Box<[u64]>) -> KeyCol {
        // (the side list the lists would have: a length and the numbers per document
        // of several keys)
        let side: usize = (masks.iter())
            .map(|m| match m.count_ones() {
                0 | 1 => 0,
                n => 1 + n as usize,
            })
            .sum();
        let docs = masks.len();
        let col = KeyCol::Masks(masks);
        match masks_pay(docs, side) {
            true => col,
            false => {
                let (k, many) = col.lists();
                KeyCol::Lists {
                    k,
                    many: many.into_owned(),
                }
            }
        }
    }

    /// The column as lists (`Lists`' fields): a copy of the per-document numbers, and
    /// the side list lent (or both made, for a column of masks).
    fn lists(&self) -> (Box<[u32]>, Cow<'_, [u32]>) {
        match self {
            KeyCol::Lists { k, many } => (k.clone(), Cow::Borrowed(many)),
            KeyCol::Masks(masks) => {
                let mut many = Vec::new();
                let k = masks
                    .iter()
                    .map(|&m| match m.count_ones() {
                        0 => NONE,
                        1 => m.trailing_zeros(),
                        n => {
                            let at = MANY | many.len() as u32;
                            many.push(n);
                            each_bit(m, |b| many.push(b));
                            at
                        }
                    })
                    .collect();
                (k, Cow::Owned(many))
            }
        }
    }

    /// This column with the documents `changed` lists (ascending) numbered anew from
    /// their rows in `docs`; every other document keeps its numbers.
    pub(crate) fn patched(
        &self,
        docs: &Slots,
        di: usize,
        numbers: &Numbering,
        changed: &[usize],
    ) -> KeyCol {
        let values: Vec<Option<StrList>> = changed
            .iter()
            .map(|&i| match &*docs.value(i, di)? {
                IndexedValue::Strings(s) if !s.is_empty() => Some(s.clone()),
                _ => None,
            })
            .collect();
        let all = values.iter().flatten().flat_map(|s| s.iter());
        let numbered = numbers.number(all);
        if let KeyCol::Masks(masks) = self {
            // (patched as masks while the new numbers fit: read as lists and settled
            // back, they were about half of patching a delta's chunks' columns)
            if let Some(col) = Self::masks_patched(masks, changed, &values, &numbered) {
                return col;
            }
        }
        let mut numbered = numbered.into_iter();
        let (mut k, was) = self.lists();
        // the side list made anew in document order: the kept documents' lists moved
        // over, the changed documents' added
        let mut many = Vec::with_capacity(was.len());
        let mut next = changed.iter().zip(&values).peekable();
        let mut ns: Vec<u32> = Vec::new();
        for (i, slot) in k.iter_mut().enumerate() {
            let Some((_, v)) = next.next_if(|(&c, _)| c == i) else {
                if *slot != NONE && *slot & MANY != 0 {
                    let at = (*slot & !MANY) as usize;
                    let kept = &was[at..at + 1 + was[at] as usize];
                    *slot = MANY | many.len() as u32;
                    many.extend_from_slice(kept);
                }
                continue;
            };
            *slot = NONE;
            let Some(v) = v else { continue };
            ns.clear();
            ns.extend(numbered.by_ref().take(v.len()));
            match ns[..] {
                // (a number with `MANY`'s bit, past two billion keys, goes in a list)
                [one] if one & MANY == 0 => {
                    *slot = one;
                    continue;
                }
                _ => {}
            }
            // (a document counts once per key)
            ns.sort_unstable();
            ns.dedup();
            *slot = MANY | many.len() as u32;
            many.push(ns.len() as u32);
            many.extend_from_slice(&ns);
        }
        KeyCol::settled(k, many)
    }

    /// `patched` for a column of masks: each changed document's mask made from its
    /// numbers (`numbered`, in the order of `values`' keys), the column then in its form
    /// (`of_masks`); `None` when a number does not fit a mask.
    fn masks_patched(
        masks: &[u64],
        changed: &[usize],
        values: &[Option<StrList>],
        mut numbered: &[u32],
    ) -> Option<KeyCol> {
        let mut masks: Box<[u64]> = masks.into();
        for (&i, v) in changed.iter().zip(values) {
            let keys = v.as_ref().map_or(0, |s| s.len());
            let (ns, rest) = numbered.split_at_checked(keys)?;
            masks[i] = mask_of(ns)?;
            numbered = rest;
        }
        Some(KeyCol::of_masks(masks))
    }

    /// The key columns of chunks `chunks` — each as its first document's number and its
    /// length, all within the block of `BLOCK` documents from `base` — from the postings
    /// of their dimension, as `walk` reads them (keys in ascending number). The columns
    /// `build` makes from the rows: a document's keys are the keys whose postings hold
    /// it, met in ascending number (so a list needs no sort), each once. `bufs` is
    /// working memory, reused.
    pub(crate) fn from_postings(
        walk: &mut KeyWalk<'_>,
        base: u32,
        chunks: &[(u32, usize)],
        bufs: &mut BlockBufs,
    ) -> Vec<KeyCol> {
        let BlockBufs {
            first,
            more,
            starts,
            grouped,
            masks,
        } = bufs;
        if walk.numbers_below_64() {
            // each document's keys as a mask, then in the form `settled` gives it
            masks.clear();
            masks.resize(BLOCK, 0);
            walk.block(base, |d, n| masks[(d - base) as usize] |= 1 << n);
            return (chunks.iter())
                .map(|&(from, len)| {
                    let at = (from - base) as usize;
                    KeyCol::of_masks(masks[at..at + len].into())
                })
                .collect();
        }
        // per document of the block: its first key, and its further keys as they come
        first.clear();
        first.resize(BLOCK, NONE);
        more.clear();
        walk.block(base, |d, n| {
            let at = &mut first[(d - base) as usize];
            match *at {
                NONE => *at = n,
                _ => more.push((d - base, n)),
            }
        });
        // the further keys grouped by document, each document's in the order met:
        // document `l`'s from `starts[l]` (a counting sort)
        starts.clear();
        grouped.clear();
        if !more.is_empty() {
            starts.resize(BLOCK + 1, 0);
            more.iter().for_each(|&(l, _)| starts[l as usize + 1] += 1);
            for l in 0..BLOCK {
                starts[l + 1] += starts[l];
            }
            grouped.resize(more.len(), 0);
            for &(l, n) in more.iter() {
                let at = &mut starts[l as usize];
                grouped[*at as usize] = n;
                *at += 1;
            }
            // (each start moved to the next document's: shifted back)
            starts.copy_within(0..BLOCK, 1);
            starts[0] = 0;
        }
        let more_of = |l: usize| match starts.is_empty() {
            true => &[][..],
            false => &grouped[starts[l] as usize..starts[l + 1] as usize],
        };
        chunks
            .iter()
            .map(|&(from, len)| {
                let mut k = Vec::with_capacity(len);
                let mut many = Vec::new();
                let at = (from - base) as usize;
                for (l, &one) in first.iter().enumerate().skip(at).take(len) {
                    match (one, more_of(l)) {
                        (NONE, _) => k.push(NONE),
                        // (a number with `MANY`'s bit, past two billion keys, goes in a list)
                        (one, []) if one & MANY == 0 => k.push(one),
                        (one, more) => {
                            k.push(MANY | many.len() as u32);
                            many.push(1 + more.len() as u32);
                            many.push(one);
                            many.extend_from_slice(more);
                        }
                    }
                }
                KeyCol::settled(k.into(), many)
            })
            .collect()
    }

    /// Calls `f` with each key number of document `i` (none without a value), in
    /// ascending order.
    #[inline]
    pub(crate) fn for_each_key(&self, i: usize, mut f: impl FnMut(u32)) {
        match self {
            KeyCol::Lists { k, many } => match k[i] {
                NONE => {}
                x if x & MANY != 0 => {
                    let at = (x & !MANY) as usize;
                    many[at + 1..at + 1 + many[at] as usize]
                        .iter()
                        .for_each(|&n| f(n))
                }
                x => f(x),
            },
            KeyCol::Masks(masks) => each_bit(masks[i], f),
        }
    }
}

/// A document's key numbers `ns` as a mask, a bit each; `None` when one is 64 or more.
fn mask_of(ns: &[u32]) -> Option<u64> {
    ns.iter()
        .try_fold(0u64, |m, &n| (n < 64).then(|| m | 1 << n))
}

/// Whether a column of `docs` documents whose lists would need a side list of `side`
/// words is smaller as masks (8 bytes a document against 4 a document and 4 a side
/// word): the one rule of `KeyCol::settled` and `KeyCol::of_masks`.
fn masks_pay(docs: usize, side: usize) -> bool {
    side > docs
}

/// Calls `f` with the number of each bit set in `m`, lowest first.
#[inline]
fn each_bit(mut m: u64, mut f: impl FnMut(u32)) {
    while m != 0 {
        f(m.trailing_zeros());
        m &= m - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk gives each block its keys' documents, key by key, and passes by the
    /// documents of a block not asked for: a set's, and a lone document's.
    #[test]
    fn a_walk_passes_by_the_blocks_it_skips() {
        let b = BLOCK as u32;
        let set: roaring::RoaringBitmap = [1, 5, b + 2, 2 * b + 3, 2 * b + 4].into_iter().collect();
        let entries = [
            (0, PostingRef::Many(&set)),
            (1, PostingRef::One(b + 7)),
            (2, PostingRef::One(2 * b)),
        ];
        let mut walk = KeyWalk::new(&entries, 0);
        let mut met = Vec::new();
        walk.block(0, |d, n| met.push((d, n)));
        assert_eq!(met, [(1, 0), (5, 0)]);
        met.clear();
        walk.block(2 * b, |d, n| met.push((d, n)));
        assert_eq!(met, [(2 * b + 3, 0), (2 * b + 4, 0), (2 * b, 2)]);
        // a walk that starts later passes by what is before
        let mut walk = KeyWalk::new(&entries, b + 3);
        met.clear();
        walk.block(b, |d, n| met.push((d, n)));
        assert_eq!(met, [(b + 7, 1)]);
    }

    /// Where most documents hold several keys, all numbered below 64, the column is
    /// masks and gives the same keys; a number past 63 keeps it lists; and a column
    /// patched from masks is the column built whole.
    #[test]
    fn many_keys_below_64_are_masks() {
        let numbers = Numbering::default();
        numbers.number(
            (0..70)
                .map(|n| format!("k{n}"))
                .collect::<Vec<_>>()
                .iter()
                .map(|s| s.as_str()),
        );
        let doc = |s: &[&str]| {
            let values = vec![Some(IndexedValue::Strings(StrList::from_strs(s)))];
            Some(crate::Doc::new("x".into(), values.into()))
        };
        // (a chunk's worth: most documents of two keys)
        let slots = |first: &[&str]| -> Slots {
            let pair = |i: usize| [format!("k{}", i % 60), format!("k{}", (i + 3) % 60)];
            let mut docs: Vec<_> = (0..crate::CHUNK)
                .map(|i| doc(&pair(i).iter().map(|s| s.as_str()).collect::<Vec<_>>()))
                .collect();
            docs[0] = doc(first);
            docs[1] = None;
            docs[2] = doc(&["k7"]);
            docs[3] = doc(&["k2", "k1"]);
            docs.into_iter().collect()
        };
        let docs = slots(&["k5", "k0", "k63"]);
        let keys = |col: &KeyCol, i| {
            let mut ks = Vec::new();
            col.for_each_key(i, |k| ks.push(k));
            ks
        };
        let col = KeyCol::build(&docs, 0, &numbers);
        assert!(matches!(col, KeyCol::Masks(_)));
        assert_eq!(keys(&col, 0), [0, 5, 63]);
        assert_eq!(keys(&col, 1), [] as [u32; 0]);
        assert_eq!(keys(&col, 2), [7]);
        assert_eq!(keys(&col, 3), [1, 2]);
        assert_eq!(keys(&col, 4), [4, 7]);
        // a key numbered 64: lists, the same keys
        let past = slots(&["k5", "k0", "k64"]);
        let lists = col.patched(&past, 0, &numbers, &[0]);
        assert!(matches!(lists, KeyCol::Lists { .. }));
        assert_eq!(keys(&lists, 0), [0, 5, 64]);
        assert_eq!(keys(&lists, 3), [1, 2]);
        assert_eq!(
            format!("{lists:?}"),
            format!("{:?}", KeyCol::build(&past, 0, &numbers))
        );
        // and back: the masks patched from the lists are the masks built whole
        let back = lists.patched(&docs, 0, &numbers, &[0]);
        assert_eq!(format!("{back:?}"), format!("{col:?}"));
    }

    #[test]
    fn a_document_lists_each_key_once() {
        // numbered as met: b 0, a 1, c 2 (`numbering`'s tests), then d 3
        let numbers = Numbering::default();
        numbers.number(["b", "a", "c"].into_iter());
        let doc = |s: &[&str]| {
            let values = vec![Some(IndexedValue::Strings(StrList::from_strs(s)))];
            Some(crate::Doc::new("x".into(), values.into()))
        };
        let col = KeyCol::build(
            &[doc(&["c"]), None, doc(&["d", "a", "d"]), doc(&[])]
                .into_iter()
                .collect(),
            0,
            &numbers,
        );
        let keys = |i| {
            let mut ks = Vec::new();
            col.for_each_key(i, |k| ks.push(k));
            ks
        };
        assert_eq!(keys(0), [2]);
        assert_eq!(keys(1), [] as [u32; 0]);
        assert_eq!(keys(2), [1, 3]);
        assert_eq!(keys(3), [] as [u32; 0]);
        assert_eq!(numbers.len(), 4);
    }
}
