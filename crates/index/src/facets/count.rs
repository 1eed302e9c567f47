//! Counting a facet's buckets: per dimension type, from the postings (each key's or
//! element's documents intersected with the counted set) or from the counted
//! documents' columns (keyword and groupBy: their key columns; numeric: their range
//! segments), whichever costs less for the set at hand (`way`).

use std::borrow::Cow;
use std::collections::HashMap;

use discern_dimensions::{Dimension, DimensionKind, Element, IndexedValue};
use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::bits::{words_of, Positions};
use crate::columns::{bit, ChunkCols, Col, NOT_A_PATH, NO_ELEMENT, NO_SEGMENT};
use crate::postings::{element_of_key, DimPostings, PostingRef};
use crate::ranges::RangeTable;
use crate::{FastMap, Snapshot};
use std::sync::OnceLock;

/// The documents a facet counts: a roaring bitmap (postings intersect it) and, made when
/// a facet first reads documents one by one, the same set as a plain bitset.
pub(super) struct Counted {
    set: RoaringBitmap,
    words: OnceLock<Vec<u64>>,
}

impl Counted {
    pub(super) fn of(set: RoaringBitmap) -> Counted {
        Counted {
            set,
            words: OnceLock::new(),
        }
    }

    fn len(&self) -> usize {
        self.set.len() as usize
    }

    /// The documents of chunk `c` (`CHUNK / 64` words; fewer or none past the last).
    fn chunk_words(&self, c: usize) -> &[u64] {
        let words = self.words.get_or_init(|| words_of(&self.set));
        const PER_CHUNK: usize = crate::CHUNK / 64;
        let from = (c * PER_CHUNK).min(words.len());
        &words[from..(from + PER_CHUNK).min(words.len())]
    }
}

/// Counts the documents of `counted` chunk by chunk, in parallel tasks of whole chunks:
/// `each` gets a task's accumulator (made by `new`), a chunk and the chunk's counted
/// documents (`Counted::chunk_words`); the tasks' accumulators are then `add`ed up.
fn per_chunk<A: Send>(
    snap: &Snapshot,
    counted: &Counted,
    new: impl Fn() -> A + Sync + Send,
    each: impl Fn(&mut A, usize, &[u64]) + Sync + Send,
    add: impl Fn(A, A) -> A + Sync + Send,
) -> A {
    // (about 32k documents per task, whatever the chunk size)
    const CHUNKS_PER_TASK: usize = 32 * 1024 / crate::CHUNK;
    let chunks = snap.chunks().len();
    (0..chunks.div_ceil(CHUNKS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let mut acc = new();
            let first = task * CHUNKS_PER_TASK;
            for c in first..(first + CHUNKS_PER_TASK).min(chunks) {
                let words = counted.chunk_words(c);
                if words.iter().any(|&w| w != 0) {
                    each(&mut acc, c, words);
                }
            }
            acc
        })
        .reduce(&new, &add)
}

/// Below this many counted documents per keyword key, bumping each counted document's
/// key slots (`key_counts`) costs less than intersecting every key's postings with the
/// counted set (a key's postings span up to 16 roaring containers; a document's keys
/// are read and bumped in a few ns each).
const DOCS_PER_KEY: usize = 64;

pub(super) type Counts = FastMap<String, usize>;

/// How a facet reaches its counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    /// Each key's (element's) postings intersected with the counted set: the cost
    /// follows the dimension's postings, whatever the counted set.
    Postings,
    /// Each counted document's value read from the columns (or its row): the cost
    /// follows the counted documents.
    Documents,
    /// Each key's (element's; a tree element's subtree's) postings size: only when
    /// every live document is counted — an unfiltered collection's facets, a browsing
    /// page's — so no set is intersected and no document read.
    Sizes,
}

/// Counting every document, a keyword dimension's keys are each sized when there are at
/// most one per this many documents (a key is a few dependent reads, a document's key
/// slots in a column a few ns); with more (addresses), its documents are read.
const DOCS_PER_SIZED_KEY: usize = 8;

/// A counted set holding fewer than one in this many live documents is held in roaring
/// array containers, and intersecting it with a key's postings merges the whole array
/// once per key: over thousands of keys (cities) that costs more than reading the
/// counted documents' keys.
const SPARSE: u64 = 16;

/// The cheaper way to count `counted` in dimension `di`.
fn way(snap: &Snapshot, dim: &Dimension, di: usize, counted: &Counted) -> Way {
    let live = snap.live_docs().len();
    let sparse = (counted.len() as u64) * SPARSE < live;
    // (the counted set is always within the live documents)
    let every = counted.len() as u64 == live;
    match (&dim.kind, snap.postings(di)) {
        (_, None) => Way::Documents,
        (kind, _) if every && kind.elements().is_some() => Way::Sizes,
        (DimensionKind::Keyword | DimensionKind::GroupBy, Some(p))
            if every && p.len() * DOCS_PER_SIZED_KEY <= counted.len() =>
        {
            Way::Sizes
        }
        // per counted document when they outnumber the elements, else per element
        (DimensionKind::Tree(set), _) if counted.len() >= set.elements.len() => Way::Documents,
        (kind, _) if kind.elements().is_some() => Way::Postings,
        (DimensionKind::Keyword | DimensionKind::GroupBy, Some(p))
            if !sparse && p.len() * DOCS_PER_KEY <= counted.len() =>
        {
            Way::Postings
        }
        _ => Way::Documents,
    }
}

/// What of a facet's counts will be shown.
#[derive(Clone, Copy, Default)]
pub(super) struct Shown {
    /// Only this many buckets, those with the largest counts: a keyword or groupBy
    /// dimension's buckets counting less than the `largest`-th largest count may be
    /// left out.
    pub(super) largest: Option<usize>,
    /// A numeric dimension's bounds (without, they are `None`).
    pub(super) bounds: bool,
    /// A tree dimension's deepest level shown (top-level elements are at 1): the
    /// elements below it may be left out.
    pub(super) deepest: Option<u32>,
}

/// Bucket id → number of counted documents in it, for one dimension; and the smallest and
/// largest numeric value among them.
pub(super) fn bucket_counts(
    snap: &Snapshot,
    dim: &Dimension,
    di: usize,
    counted: &Counted,
    shown: Shown,
) -> (Counts, Option<(f64, f64)>) {
    counts_by(snap, dim, di, counted, way(snap, dim, di, counted), shown)
}

/// `bucket_counts` the way given, where the dimension can be counted that way (otherwise
/// the other way: the counts are the same).
fn counts_by(
    snap: &Snapshot,
    dim: &Dimension,
    di: usize,
    counted: &Counted,
    way: Way,
    shown: Shown,
) -> (Counts, Option<(f64, f64)>) {
    let keep = shown.largest;
    let mut counts = Counts::new();
    if counted.set.is_empty() {
        return (counts, None);
    }
    let by_postings = way == Way::Postings;
    match (&dim.kind, snap.postings(di)) {
        (DimensionKind::Numeric(spec), _) => {
            return numeric_counts(snap, spec, di, counted, shown.bounds)
        }
        (kind, Some(p)) if way == Way::Sizes && kind.elements().is_some() => {
            debug_assert_eq!(counted.set, *snap.live_docs(), "sizes count every document");
            // a tree element's documents are its subtree's (their own list for a leaf);
            // the sizes read in one walk over the keys (thousands of lookups, a region's,
            // cost more)
            let elements = kind.elements().map_or(&[][..], |s| &s.elements[..]);
            let tree = matches!(kind, DimensionKind::Tree(_));
            // (a set's size is a few dependent reads: only those of the levels shown)
            let sized = |e: &Element| !tree || shown.deepest.is_none_or(|d| e.depth <= d);
            let (mut own, mut subtree) = (vec![0; elements.len()], vec![0; elements.len()]);
            for (k, b) in p.map.iter() {
                // (an element dimension's postings are never frozen: `freezable`)
                let Some((e, of_subtree)) = element_of_key(k) else {
                    continue;
                };
                let sizes = if of_subtree { &mut subtree } else { &mut own };
                if elements.get(e as usize).is_some_and(sized) {
                    sizes[e as usize] = b.get().len() as usize;
                }
            }
            counts.reserve(elements.len());
            for (e, el) in elements.iter().enumerate() {
                let n = match tree && !el.children.is_empty() {
                    true => subtree[e],
                    false => own[e],
                };
                if n > 0 {
                    counts.insert(el.id.clone(), n);
                }
            }
        }
        (DimensionKind::Keyword | DimensionKind::GroupBy, Some(p)) if way == Way::Sizes => {
            debug_assert_eq!(counted.set, *snap.live_docs(), "sizes count every document");
            let found: Vec<_> = p.entries().map(|(k, b)| (k, b.len() as u32)).collect();
            put_keys(
                found.iter().map(|(k, n)| (&**k, *n)).collect(),
                keep,
                &mut counts,
            );
        }
        (DimensionKind::Tree(set), Some(_)) if !by_postings => {
            tree_counts_by_path(snap, set, di, counted, &mut counts)
        }
        (DimensionKind::Tree(set), Some(p)) => {
            // a document counts once in every element it is tagged with and their ancestors
            fn visit(
                e: u32,
                set: &discern_dimensions::ElementSet,
                p: &DimPostings,
                counted: &RoaringBitmap,
                counts: &mut Counts,
            ) -> RoaringBitmap {
                let mut here = p
                    .get(&e.to_be_bytes())
                    .map(|b| b.and(counted))
                    .unwrap_or_default();
                for &c in &set.elements[e as usize].children {
                    here |= visit(c, set, p, counted, counts);
                }
                let n = here.len() as usize;
                if n > 0 {
                    counts.insert(set.elements[e as usize].id.clone(), n);
                }
                here
            }
            for &r in &set.roots {
                visit(r, set, p, &counted.set, &mut counts);
            }
        }
        (kind, Some(p)) if kind.elements().is_some() => {
            let set = kind.elements().into_iter().flat_map(|s| s.elements.iter());
            for (e, el) in set.enumerate() {
                if let Some(b) = p.get(&(e as u32).to_be_bytes()) {
                    let n = b.intersection_len(&counted.set) as usize;
                    if n > 0 {
                        counts.insert(el.id.clone(), n);
                    }
                }
            }
        }
        (DimensionKind::Keyword | DimensionKind::GroupBy, Some(p)) if by_postings => {
            // (thousands of keys, a city's: intersected on both cores)
            let keys: Vec<(Cow<[u8]>, PostingRef)> = p.entries().collect();
            let found: Vec<(&[u8], u32)> = keys
                .par_iter()
                .filter_map(|(k, b)| {
                    let n = b.intersection_len(&counted.set) as u32;
                    (n > 0).then_some((&**k, n))
                })
                .collect();
            put_keys(found, keep, &mut counts);
        }
        (DimensionKind::Keyword | DimensionKind::GroupBy, _) => {
            key_counts(snap, di, counted, keep, &mut counts)
        }
        // text: each distinct token of a document's value, from its row's numbers
        _ => {
            let mut by: HashMap<u32, usize> = HashMap::new();
            let mut tokens: Vec<u32> = Vec::new();
            for d in &counted.set {
                let value = snap.doc(d).and_then(|d| d.value(di));
                if let Some(IndexedValue::Terms(terms)) = value.as_deref() {
                    tokens.clear();
                    tokens.extend(terms.iter());
                    tokens.sort_unstable();
                    tokens.dedup();
                    tokens.iter().for_each(|&t| *by.entry(t).or_default() += 1);
                }
            }
            if let Some(vocab) = snap.vocab(di) {
                let vocab = vocab.read();
                counts.extend(
                    by.into_iter()
                        .filter_map(|(t, n)| Some((vocab.get(t)?.to_string(), n))),
                );
            }
        }
    }
    (counts, None)
}

/// Keyword and groupBy counts from the chunks' key columns, in parallel: each counted
/// document bumps its keys' slots. With `keep` (only that many largest counts are
/// shown), only the keys counting at least the `keep`-th largest count are returned.
fn key_counts(
    snap: &Snapshot,
    di: usize,
    counted: &Counted,
    keep: Option<usize>,
    counts: &mut Counts,
) {
    let Some(numbers) = snap.key_numbers(di) else {
        return;
    };
    snap.build_key_cols(di, |c| counted.chunk_words(c).iter().any(|&w| w != 0));
    // more keys than counted documents (addresses): most slots would stay empty
    let sparse = numbers.len() > counted.len();
    let slots = per_chunk(
        snap,
        counted,
        || Slots::new(sparse),
        |slots, c, words| {
            if let Some(col) = snap.key_col(c, di) {
                Positions::of(words).for_each(|i| col.for_each_key(i, |k| slots.bump(k)));
            }
        },
        Slots::add,
    );
    let mut found = slots.found();
    keep_largest(&mut found, keep);
    let keys = numbers.strings(found.iter().map(|(k, _)| *k));
    counts.extend(
        keys.iter()
            .zip(&found)
            .map(|(key, (_, n))| (key.to_string(), *n as usize)),
    );
}

/// Puts the (key, count) pairs `found` in `counts`, with `keep` only those `keep_largest`
/// leaves.
fn put_keys(mut found: Vec<(&[u8], u32)>, keep: Option<usize>, counts: &mut Counts) {
    keep_largest(&mut found, keep);
    counts.extend(
        found
            .into_iter()
            .map(|(k, n)| (String::from_utf8_lossy(k).into_owned(), n as usize)),
    );
}

/// With `keep`, leaves out of `found` the keys counting less than the `keep`-th largest
/// count: they will not be shown.
fn keep_largest<K>(found: &mut Vec<(K, u32)>, keep: Option<usize>) {
    if let Some(n) = keep.filter(|&n| n > 0 && n < found.len()) {
        let mut by_count: Vec<u32> = found.iter().map(|(_, c)| *c).collect();
        let (_, &mut nth, _) = by_count.select_nth_unstable_by(n - 1, |a, b| b.cmp(a));
        found.retain(|(_, c)| *c >= nth);
    }
}

/// Counts per key number: an array, or a map when few of the numbers will be met.
enum Slots {
    Dense(Vec<u32>),
    Sparse(FastMap<u32, u32>),
}

impl Slots {
    fn new(sparse: bool) -> Slots {
        match sparse {
            true => Slots::Sparse(FastMap::default()),
            false => Slots::Dense(Vec::new()),
        }
    }

    #[inline]
    fn bump(&mut self, k: u32) {
        self.add_to(k, 1)
    }

    #[inline]
    fn add_to(&mut self, k: u32, n: u32) {
        match self {
            Slots::Dense(v) => {
                let k = k as usize;
                if k >= v.len() {
                    v.resize((k + 1).next_power_of_two(), 0);
                }
                v[k] += n;
            }
            Slots::Sparse(m) => *m.entry(k).or_default() += n,
        }
    }

    fn add(mut self, other: Slots) -> Slots {
        match (&mut self, other) {
            (Slots::Dense(a), Slots::Dense(mut b)) => {
                if a.len() < b.len() {
                    std::mem::swap(a, &mut b);
                }
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
            }
            (_, b) => b.found().into_iter().for_each(|(k, n)| self.add_to(k, n)),
        }
        self
    }

    /// Every key number met, with its count.
    fn found(&self) -> Vec<(u32, u32)> {
        match self {
            Slots::Dense(v) => (0..v.len() as u32)
                .zip(v.iter().copied())
                .filter(|(_, n)| *n > 0)
                .collect(),
            Slots::Sparse(m) => m.iter().map(|(k, n)| (*k, *n)).collect(),
        }
    }
}

/// Range buckets and bounds of a numeric dimension, from the counted documents: one with
/// one value counts in its segment of the ranges' bounds (`RangeTable`, the chunk's
/// `SegmentCol`), rolled up to the ranges at the end; a chunk whose documents are all
/// counted adds its segments' histogram and its span; a document with several values is
/// read from its row. (Intersecting the numeric postings' buckets instead cost more
/// even for a million documents: every bucket a bound cuts is read one by one.)
fn numeric_counts(
    snap: &Snapshot,
    spec: &discern_dimensions::NumericSpec,
    di: usize,
    counted: &Counted,
    bounds: bool,
) -> (Counts, Option<(f64, f64)>) {
    let table = RangeTable::of(spec);
    let ranges = spec.ranges.len();
    // (per segment, per range for documents with several values, lo, hi)
    type Part = (Vec<usize>, Vec<usize>, f64, f64);
    let empty = || -> Part {
        (
            vec![0; table.segments()],
            vec![0; ranges],
            f64::INFINITY,
            f64::NEG_INFINITY,
        )
    };
    let (per_segment, mut per_range, lo, hi) = per_chunk(
        snap,
        counted,
        empty,
        |(seg, multi, lo, hi), c, words| {
            let Some(cols) = snap.chunk_cols(c) else {
                return;
            };
            let column = match cols.col(di) {
                Some(Col::Num { v, multi, lo, hi }) => Some((v, multi, *lo, *hi)),
                _ => None,
            };
            let segments = snap.segment_col(c, di);
            let mut xs: Vec<f64> = Vec::new();
            let mut row = |i: usize, multi: &mut Vec<usize>, lo: &mut f64, hi: &mut f64| {
                let d = (c * crate::CHUNK + i) as u32;
                count_row(snap, spec, di, d, &mut xs, multi, (lo, hi));
            };
            match (column, segments) {
                // every document of the chunk: its histogram and span, and its documents
                // with several values
                (Some((_, m, clo, chi)), Some(sc))
                    if words.iter().map(|w| w.count_ones()).sum::<u32>() == cols.live =>
                {
                    seg.iter_mut()
                        .zip(&sc.histogram)
                        .for_each(|(x, y)| *x += *y as usize);
                    if bounds && !clo.is_nan() {
                        *lo = lo.min(clo);
                        *hi = hi.max(chi);
                    }
                    Positions::of(m).for_each(|i| row(i, multi, lo, hi));
                }
                (Some((v, m, ..)), Some(sc)) => {
                    for i in Positions::of(words) {
                        match sc.segment.get(i) {
                            NO_SEGMENT if bit(m, i) => row(i, multi, lo, hi),
                            NO_SEGMENT => {} // no value
                            s => {
                                seg[s as usize] += 1;
                                if bounds {
                                    *lo = lo.min(v.get(i));
                                    *hi = hi.max(v.get(i));
                                }
                            }
                        }
                    }
                }
                // (no segments: more than 32,000 ranges)
                _ => Positions::of(words).for_each(|i| row(i, multi, lo, hi)),
            }
        },
        |mut a, b| {
            a.0.iter_mut().zip(&b.0).for_each(|(x, y)| *x += y);
            a.1.iter_mut().zip(&b.1).for_each(|(x, y)| *x += y);
            (a.0, a.1, a.2.min(b.2), a.3.max(b.3))
        },
    );
    let counts = range_counts(spec, &table, per_segment, &mut per_range);
    (counts, (bounds && lo <= hi).then_some((lo, hi)))
}

/// A document whose values are read from its row (several, or no column): counted once
/// in every range holding one of them (`per_range`); its values widen the bounds.
fn count_row(
    snap: &Snapshot,
    spec: &discern_dimensions::NumericSpec,
    di: usize,
    d: u32,
    xs: &mut Vec<f64>,
    per_range: &mut [usize],
    (lo, hi): (&mut f64, &mut f64),
) {
    xs.clear();
    match snap.doc(d).and_then(|d| d.value(di)).as_deref() {
        Some(v) if v.ints().is_some() || v.doubles().is_some() => xs.extend(v.numbers()),
        _ => return,
    }
    for &x in xs.iter() {
        *lo = lo.min(x);
        *hi = hi.max(x);
    }
    for (r, n) in spec.ranges.iter().zip(per_range.iter_mut()) {
        if xs.iter().any(|x| r.interval.contains(*x)) {
            *n += 1;
        }
    }
}

/// The facet's counts: per-segment counts rolled up to the ranges holding each segment,
/// added to the per-range ones.
fn range_counts(
    spec: &discern_dimensions::NumericSpec,
    table: &RangeTable,
    per_segment: Vec<usize>,
    per_range: &mut [usize],
) -> Counts {
    for (s, n) in per_segment.into_iter().enumerate() {
        for &r in table.ranges_of(s) {
            per_range[r] += n;
        }
    }
    spec.ranges
        .iter()
        .zip(per_range.iter())
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| (r.id.clone(), *n))
        .collect()
}

/// Tree counts from the columns: a document whose elements lie on one path counts at
/// the deepest of them, rolled up to its ancestors once all are counted; any other is
/// read from its row.
fn tree_counts_by_path(
    snap: &Snapshot,
    set: &discern_dimensions::ElementSet,
    di: usize,
    counted: &Counted,
    counts: &mut Counts,
) {
    let n = set.elements.len();
    // (documents at their deepest element; nodes of documents read from their list, each
    // once per document; the last document that reached a node)
    let (at, mut spread, _) = per_chunk(
        snap,
        counted,
        || (vec![0usize; n], vec![0usize; n], vec![u32::MAX; n]),
        |(at, spread, stamp), c, words| {
            let cols = snap.chunk_cols(c);
            for i in Positions::of(words) {
                let deepest = cols.map_or(NOT_A_PATH, |cc| cc.deepest(di, i));
                if deepest == NO_ELEMENT {
                    continue;
                }
                if deepest != NOT_A_PATH {
                    at[deepest as usize] += 1;
                    continue;
                }
                let d = (c * crate::CHUNK + i) as u32;
                // (the column's list when it has one: no row is read)
                let listed = cols
                    .and_then(|cc| cc.col(di))
                    .and_then(|col| ChunkCols::elements(col, i));
                let row;
                let es = match listed {
                    Some(es) => es,
                    None => {
                        row = snap.doc(d).and_then(|d| d.value(di));
                        match row.as_deref() {
                            Some(IndexedValue::Elements(es)) => &es[..],
                            _ => continue,
                        }
                    }
                };
                for &e in es.iter() {
                    let mut cur = Some(e);
                    while let Some(x) = cur {
                        let x = x as usize;
                        if stamp[x] == d {
                            break; // (and its ancestors, reached from it before)
                        }
                        stamp[x] = d;
                        spread[x] += 1;
                        cur = set.elements[x].parent;
                    }
                }
            }
        },
        |(mut a, mut s, stamp), (b, t, _)| {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
            s.iter_mut().zip(t).for_each(|(x, y)| *x += y);
            (a, s, stamp)
        },
    );
    // roll up: a node's path documents are its own and its descendants'
    fn roll(
        e: u32,
        set: &discern_dimensions::ElementSet,
        at: &[usize],
        total: &mut [usize],
    ) -> usize {
        let mut sum = at[e as usize];
        for &c in &set.elements[e as usize].children {
            sum += roll(c, set, at, total);
        }
        total[e as usize] += sum;
        sum
    }
    for &r in &set.roots {
        roll(r, set, &at, &mut spread);
    }
    for (e, &k) in spread.iter().enumerate() {
        if k > 0 {
            counts.insert(set.elements[e].id.clone(), k);
        }
    }
}

#[cfg(test)]
mod tests;
