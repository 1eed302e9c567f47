//! Typed columns per chunk: the numeric, geoloc and element values of a chunk's 1,024
//! documents as flat arrays (and for other dimensions which documents have a value),
//! built on first use; when an apply copies a chunk, the copy's are made from the
//! copied chunk's (`ChunkCols::patch`: unchanged columns shared, changed ones in place when no other chunk holds them). A
//! whole-collection scan reads these instead of following every document's pointers;
//! documents with several numbers or points in a dimension are marked and read from
//! their row (several elements are kept in a side list). The rules themselves stay in
//! `criteria/`.

use std::sync::{Arc, OnceLock};

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue};

use crate::geo::GeoPoint;
use crate::keys::KeyCol;
use crate::narrow::{ElemIds, NumValues};
use crate::numbering::Numbering;
use crate::ranges::RangeTable;
use crate::slots::Slots;

#[derive(Clone, Debug)]
pub(crate) enum Col {
    /// NaN: no value.
    Num {
        v: NumValues,
        multi: Box<[u64]>,
        /// Smallest and largest value of any document (NaN when none).
        lo: f64,
        hi: f64,
    },
    /// NaN latitude: no value.
    Geo {
        lat: Box<[f64]>,
        pts: Box<[GeoPoint]>,
        multi: Box<[u64]>,
    },
    /// Tree, ordered and mutex dimensions: the one element of a document (`NO_ELEMENT`:
    /// none); for a document with several (`multi`), where its list starts in `many`
    /// (its length, then the elements). Trees also keep, for facets, the deepest element
    /// of a document whose elements lie on one path from the root (`NOT_A_PATH`
    /// otherwise): its own and its ancestors are then the nodes the document counts in.
    Elem {
        e: ElemIds,
        multi: Box<[u64]>,
        many: Vec<u32>,
        deepest: ElemIds,
    },
    /// Keyword and groupBy dimensions: which documents have a value (the rules for these
    /// read the value itself from postings bitmaps, not from the row).
    Present { bits: Box<[u64]> },
    /// Text dimensions: which documents have a value, and each field's length in tokens
    /// (document-major; `u16::MAX`: that many or more, read from the row), for BM25.
    Text {
        bits: Box<[u64]>,
        lens: Box<[u16]>,
        fields: usize,
    },
}

/// A numeric column's documents by segment of the dimension's facet ranges' bounds
/// (`RangeTable`): a facet counts a document by its segment without searching the
/// bounds, and a chunk whose documents are all counted by its histogram.
#[derive(Clone, Debug)]
pub(crate) struct SegmentCol {
    /// Per document, its segment (`NO_SEGMENT`: no value, or several).
    pub(crate) segment: SegmentIds,
    /// Per segment, how many of the chunk's documents with one value lie in it.
    pub(crate) histogram: Box<[u32]>,
}

pub(crate) const NO_SEGMENT: u16 = u16::MAX;

/// Per document, its segment number: a byte each where the ranges cut the line into
/// fewer than 255 segments (a facet names a few ranges: seven numeric facets' columns
/// took 2 MB each at 1M items), else two.
#[derive(Clone, Debug)]
pub(crate) enum SegmentIds {
    /// `u8::MAX`: `NO_SEGMENT`.
    Narrow(Box<[u8]>),
    Wide(Box<[u16]>),
}

impl SegmentIds {
    /// `len` documents in no segment, for a table of `segments` segments.
    fn none(len: usize, segments: usize) -> SegmentIds {
        if segments < u8::MAX as usize {
            SegmentIds::Narrow(vec![u8::MAX; len].into())
        } else {
            SegmentIds::Wide(vec![NO_SEGMENT; len].into())
        }
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> u16 {
        match self {
            SegmentIds::Narrow(s) => match s[i] {
                u8::MAX => NO_SEGMENT,
                x => x as u16,
            },
            SegmentIds::Wide(s) => s[i],
        }
    }

    /// (`s` is `NO_SEGMENT` or below the table's segment count, which `none` chose the
    /// width for.)
    fn set(&mut self, i: usize, s: u16) {
        match self {
            SegmentIds::Narrow(v) => v[i] = if s == NO_SEGMENT { u8::MAX } else { s as u8 },
            SegmentIds::Wide(v) => v[i] = s,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            SegmentIds::Narrow(s) => s.len(),
            SegmentIds::Wide(s) => 2 * s.len(),
        }
    }
}

impl SegmentCol {
    /// `None` when the column is not numeric or the ranges cut the line into more
    /// segments than a `u16` numbers (over 32,000 ranges).
    pub(crate) fn build(col: &Col, table: &RangeTable) -> Option<SegmentCol> {
        if !matches!(col, Col::Num { .. }) || table.segments() >= NO_SEGMENT as usize {
            return None;
        }
        let mut out = SegmentCol {
            segment: SegmentIds::none(col.len(), table.segments()),
            histogram: vec![0; table.segments()].into(),
        };
        let all: Vec<usize> = (0..col.len()).collect();
        out.update(col, table, &all);
        Some(out)
    }

    /// These segments with the documents `changed` lists placed anew from `col`.
    #[cfg(test)]
    pub(crate) fn patched(&self, col: &Col, table: &RangeTable, changed: &[usize]) -> SegmentCol {
        let mut out = self.clone();
        out.update(col, table, changed);
        out
    }

    fn update(&mut self, col: &Col, table: &RangeTable, changed: &[usize]) {
        let Col::Num { v, multi, .. } = col else {
            return;
        };
        for &i in changed {
            if let Some(h) = self.histogram.get_mut(self.segment.get(i) as usize) {
                *h -= 1;
            }
            let segment = match table.segment(v.get(i)) {
                Some(s) if !bit(multi, i) => {
                    self.histogram[s] += 1;
                    s as u16
                }
                _ => NO_SEGMENT,
            };
            self.segment.set(i, segment);
        }
    }
}

pub(crate) const NO_ELEMENT: u32 = u32::MAX;
pub(crate) const NOT_A_PATH: u32 = u32::MAX - 1;

/// The deepest of `es` if every other one is its ancestor, else `NOT_A_PATH`.
fn path_end(set: &discern_dimensions::ElementSet, es: &[u32]) -> u32 {
    let Some(&end) = es.iter().max_by_key(|&&e| set.elements[e as usize].depth) else {
        return NO_ELEMENT;
    };
    if es.iter().all(|&e| set.is_ancestor_or_self(e, end)) {
        end
    } else {
        NOT_A_PATH
    }
}

/// One document's value as a column gives it.
#[derive(Clone, Copy)]
pub(crate) enum ColValue {
    Num(Option<f64>),
    /// (latitude, the point)
    Point(Option<(f64, GeoPoint)>),
    Elem(Option<u32>),
    Present(bool),
}

/// (A clone shares every column: `patch` copies one only when it changes it.)
#[derive(Clone, Debug)]
pub(crate) struct ChunkCols {
    // (each column shared with the chunk this one was copied from while no document
    // it changed has another value in it)
    dims: Vec<Option<Arc<Col>>>,
    /// Keyword and groupBy dimensions' key numbers, built when a facet first asks
    /// (`Snapshot::key_col`).
    pub(crate) keys: Box<[OnceLock<Arc<KeyCol>>]>,
    /// Numeric dimensions' facet range segments, built when a facet first asks
    /// (`Snapshot::segment_col`).
    pub(crate) segments: Box<[OnceLock<Option<Arc<SegmentCol>>>]>,
    /// How many documents the chunk holds.
    pub(crate) live: u32,
    /// Each document's `Doc::id_key` (0 for an empty slot): ordering ties between
    /// results read these instead of every row.
    id_keys: Arc<[u64]>,
    /// The smallest `Doc::id_key` of the documents it holds (`u64::MAX` when none): a
    /// first page by id skips the chunk by it (`Chunk::min_id_key`).
    pub(crate) min_id_key: u64,
}

/// The smallest of `id_keys` at the slots of `docs` that hold a document.
fn min_held(docs: &Slots, id_keys: &[u64]) -> u64 {
    docs.iter()
        .zip(id_keys)
        .filter(|(d, _)| d.is_some())
        .map(|(_, &k)| k)
        .min()
        .unwrap_or(u64::MAX)
}

#[inline(always)]
pub(crate) fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] >> (i % 64) & 1 == 1
}

/// Calls `f` on every number of a numeric value (integers as doubles).
pub(crate) fn for_each_number(value: Option<&IndexedValue>, mut f: impl FnMut(f64)) {
    if let Some(v) = value {
        v.numbers().for_each(&mut f);
    }
}

impl Col {
    fn bytes(&self) -> usize {
        match self {
            Col::Num { v, multi, .. } => v.bytes() + 8 * multi.len(),
            Col::Geo { lat, pts, multi } => {
                8 * lat.len() + std::mem::size_of::<GeoPoint>() * pts.len() + 8 * multi.len()
            }
            Col::Elem {
                e,
                multi,
                many,
                deepest,
            } => e.bytes() + 8 * multi.len() + 4 * many.capacity() + deepest.bytes(),
            Col::Present { bits } => 8 * bits.len(),
            Col::Text { bits, lens, .. } => 8 * bits.len() + 2 * lens.len(),
        }
    }

    /// How many documents the column has an entry for.
    fn len(&self) -> usize {
        match self {
            Col::Num { v, .. } => v.len(),
            Col::Geo { lat, .. } => lat.len(),
            Col::Elem { e, .. } => e.len(),
            Col::Present { bits } | Col::Text { bits, .. } => bits.len() * 64,
        }
    }

    /// The column of `n` documents without values for a dimension of `kind`.
    fn empty(kind: &DimensionKind, n: usize) -> Col {
        let words = n.div_ceil(64);
        match kind {
            DimensionKind::Numeric(_) => Col::Num {
                v: NumValues::empty(n),
                multi: vec![0; words].into(),
                lo: f64::NAN,
                hi: f64::NAN,
            },
            DimensionKind::Geo(_) => Col::Geo {
                lat: vec![f64::NAN; n].into(),
                pts: vec![GeoPoint::new(0.0, 0.0); n].into(),
                multi: vec![0; words].into(),
            },
            DimensionKind::Tree(_) | DimensionKind::Ordered(_) | DimensionKind::Mutex(_) => {
                let tree = matches!(kind, DimensionKind::Tree(_));
                Col::Elem {
                    e: ElemIds::filled(n, NO_ELEMENT),
                    multi: vec![0; words].into(),
                    many: Vec::new(),
                    deepest: ElemIds::filled(if tree { n } else { 0 }, NO_ELEMENT),
                }
            }
            DimensionKind::Keyword | DimensionKind::GroupBy => Col::Present {
                bits: vec![0; words].into(),
            },
            DimensionKind::Text(spec) => Col::Text {
                bits: vec![0; words].into(),
                lens: vec![0; n * spec.fields.len()].into(),
                fields: spec.fields.len(),
            },
        }
    }

    /// Gives each document `changed` lists (ascending) its entry from its row in
    /// `docs` (dimension `di`, of `kind`); every other document keeps its own. A new
    /// column is an empty one with every document changed; the columns of a chunk an
    /// apply copied are its old columns with the documents it replaced changed.
    fn update(&mut self, kind: &DimensionKind, di: usize, docs: &Slots, changed: &[usize]) {
        fn widen(lo: &mut f64, hi: &mut f64, x: f64) {
            *lo = lo.min(x);
            *hi = hi.max(x);
        }
        fn mark(bits: &mut [u64], i: usize, on: bool) {
            let m = 1u64 << (i % 64);
            if on {
                bits[i / 64] |= m
            } else {
                bits[i / 64] &= !m
            }
        }
        match self {
            Col::Num { v, multi, lo, hi } => {
                // the bounds found anew only when a replaced value may have been one
                let (mut anew, was_lo, was_hi) = (false, *lo, *hi);
                for &i in changed {
                    anew |= bit(multi, i) || v.get(i) == was_lo || v.get(i) == was_hi;
                    let row = docs.value(i, di);
                    let (mut seen, mut first) = (0, f64::NAN);
                    for_each_number(row.as_deref(), |x| {
                        widen(lo, hi, x);
                        if seen == 0 {
                            first = x;
                        }
                        seen += 1;
                    });
                    // anything but exactly one number is read from the row
                    let from_row = row.is_some() && (seen != 1 || first.is_nan());
                    v.set(i, if from_row { f64::NAN } else { first });
                    mark(multi, i, from_row);
                }
                if anew {
                    (*lo, *hi) = (f64::INFINITY, f64::NEG_INFINITY);
                    for (i, x) in v.iter().enumerate() {
                        if bit(multi, i) {
                            for_each_number(docs.value(i, di).as_deref(), |x| widen(lo, hi, x));
                        } else {
                            widen(lo, hi, x); // (NaN, no value: `min` and `max` pass it over)
                        }
                    }
                }
                if lo > hi {
                    (*lo, *hi) = (f64::NAN, f64::NAN);
                }
                v.settle();
            }
            Col::Geo { lat, pts, multi } => {
                for &i in changed {
                    (lat[i], pts[i]) = (f64::NAN, GeoPoint::new(0.0, 0.0));
                    mark(multi, i, false);
                    match docs.value(i, di).as_deref() {
                        Some(IndexedValue::Points(ps)) if ps.len() == 1 && !ps[0].0.is_nan() => {
                            lat[i] = ps[0].0;
                            pts[i] = GeoPoint::new(ps[0].0, ps[0].1);
                        }
                        Some(_) => mark(multi, i, true),
                        None => {}
                    }
                }
            }
            Col::Elem {
                e,
                multi,
                many,
                deepest,
            } => {
                let tree = match kind {
                    DimensionKind::Tree(set) => Some(set),
                    _ => None,
                };
                // the side list is made anew in document order: the lists of the
                // documents kept moved over, the changed documents' added
                let old = std::mem::take(many);
                let mut next = changed.iter().copied().peekable();
                for i in 0..e.len() {
                    if next.next_if_eq(&i).is_none() {
                        if bit(multi, i) && e.get(i) != NO_ELEMENT {
                            let at = e.get(i) as usize;
                            let len = old[at] as usize;
                            e.set(i, many.len() as u32);
                            many.extend_from_slice(&old[at..at + 1 + len]);
                        }
                        continue;
                    }
                    e.set(i, NO_ELEMENT);
                    mark(multi, i, false);
                    if tree.is_some() {
                        deepest.set(i, NO_ELEMENT);
                    }
                    match docs.value(i, di).as_deref() {
                        Some(IndexedValue::Elements(es)) if es.len() == 1 => e.set(i, es[0]),
                        Some(IndexedValue::Elements(es)) => {
                            mark(multi, i, true);
                            e.set(i, many.len() as u32);
                            many.push(es.len() as u32);
                            many.extend_from_slice(es);
                            if let Some(set) = tree {
                                deepest.set(i, path_end(set, es));
                            }
                        }
                        Some(_) => mark(multi, i, true),
                        None => {}
                    }
                    if tree.is_some() && e.get(i) != NO_ELEMENT && !bit(multi, i) {
                        deepest.set(i, e.get(i));
                    }
                }
                e.settle();
                deepest.settle();
            }
            Col::Present { bits } => {
                for &i in changed {
                    mark(bits, i, docs.value(i, di).is_some());
                }
            }
            Col::Text { bits, lens, fields } => {
                let fields = *fields;
                for &i in changed {
                    let v = docs.value(i, di);
                    mark(bits, i, v.is_some());
                    let row = &mut lens[i * fields..(i + 1) * fields];
                    row.fill(0);
                    if let Some(IndexedValue::Terms(terms)) = v.as_deref() {
                        for (len, n) in row.iter_mut().zip(terms.group_lens()) {
                            *len = n.min(u16::MAX as usize) as u16;
                        }
                    }
                }
            }
        }
    }
}

impl ChunkCols {
    /// Bytes the columns hold (a column shared with another chunk counted in each).
    pub(crate) fn bytes(&self) -> usize {
        let dims: usize = self.dims.iter().flatten().map(|c| c.bytes()).sum();
        let keys: usize = self
            .keys
            .iter()
            .filter_map(|k| k.get())
            .map(|k| k.bytes())
            .sum();
        let segments: usize = (self.segments.iter())
            .filter_map(|s| s.get()?.as_ref())
            .map(|s| s.segment.bytes() + 4 * s.histogram.len())
            .sum();
        dims + keys + segments + 8 * self.id_keys.len()
    }

    pub(crate) fn build(dims: &Dimensions, docs: &Slots) -> ChunkCols {
        let n = docs.len();
        let all: Vec<usize> = (0..n).collect();
        let cols = dims.dims.iter().enumerate().map(|(di, dim)| {
            let mut col = Col::empty(&dim.kind, n);
            col.update(&dim.kind, di, docs, &all);
            Some(Arc::new(col))
        });
        let id_keys: Arc<[u64]> = docs
            .iter()
            .map(|d| d.as_ref().map_or(0, |d| d.id_key()))
            .collect();
        ChunkCols {
            dims: cols.collect(),
            keys: dims.dims.iter().map(|_| OnceLock::new()).collect(),
            segments: dims.dims.iter().map(|_| OnceLock::new()).collect(),
            live: docs.iter().flatten().count() as u32,
            min_id_key: min_held(docs, &id_keys),
            id_keys,
        }
    }

    /// The columns of `docs`, a copy of the chunk `was` whose columns these are, with
    /// the slots `changed` lists (ascending) holding other documents: per dimension,
    /// this column kept when no changed document has another value in it (an update
    /// changes a price, not the other twenty values), else changed with the documents
    /// whose value changed read anew — and so with the key and segment columns these
    /// had built. A delta copies most chunks: building their columns whole took more
    /// CPU than the delta itself. A column is changed in place when no other chunk
    /// shares it (`Arc::make_mut`): the columns of a copied chunk that the replaced
    /// snapshot alone held, which the engine patches once that snapshot is let go of
    /// (a copy of each changed column was ~80 MB of fresh memory a 1,000-item delta at
    /// 1M items, freed a moment later among the columns kept); a clone's shared columns
    /// are copied first.
    pub(crate) fn patch(
        mut self,
        dims: &Dimensions,
        was: &Slots,
        docs: &Slots,
        changed: &[usize],
        numbers: &[Option<Arc<Numbering>>],
    ) -> ChunkCols {
        let mut moved: Vec<usize> = Vec::with_capacity(changed.len());
        for (di, (col, dim)) in self.dims.iter_mut().zip(&dims.dims).enumerate() {
            let Some(col) = col else {
                // (no column: nothing its key or segment column could be patched from)
                self.keys[di] = OnceLock::new();
                self.segments[di] = OnceLock::new();
                continue;
            };
            moved.clear();
            moved.extend(
                changed
                    .iter()
                    .filter(|&&i| was.value(i, di) != docs.value(i, di)),
            );
            if moved.is_empty() {
                continue;
            }
            let col = Arc::make_mut(col);
            col.update(&dim.kind, di, docs, &moved);
            // (a key or segment column this chunk cannot patch is let go of: built
            // again when a facet asks)
            let (mut keys_kept, mut segments_kept) = (true, true);
            if let Some(keys) = self.keys[di].get_mut() {
                match numbers.get(di) {
                    Some(Some(numbers)) => {
                        *keys = Arc::new(keys.patched(docs, di, numbers, &moved))
                    }
                    _ => keys_kept = false,
                }
            }
            if !keys_kept {
                self.keys[di] = OnceLock::new();
            }
            if let Some(segments) = self.segments[di].get_mut() {
                match (&dim.kind, segments.as_mut()) {
                    (DimensionKind::Numeric(spec), Some(s)) => {
                        Arc::make_mut(s).update(col, &RangeTable::of(spec), &moved)
                    }
                    (DimensionKind::Numeric(_), None) => {}
                    _ => segments_kept = false,
                }
            }
            if !segments_kept {
                self.segments[di] = OnceLock::new();
            }
        }
        let id_key = |i: usize| docs[i].as_ref().map_or(0, |d| d.id_key());
        if changed.iter().any(|&i| self.id_keys[i] != id_key(i)) {
            match Arc::get_mut(&mut self.id_keys) {
                Some(k) => changed.iter().for_each(|&i| k[i] = id_key(i)),
                None => {
                    let mut k = self.id_keys.to_vec();
                    changed.iter().for_each(|&i| k[i] = id_key(i));
                    self.id_keys = k.into();
                }
            }
        }
        self.live = docs.iter().flatten().count() as u32;
        self.min_id_key = min_held(docs, &self.id_keys);
        self
    }

    /// Document `i`'s `Doc::id_key`.
    #[inline(always)]
    pub(crate) fn id_key(&self, i: usize) -> u64 {
        self.id_keys[i]
    }

    /// Every slot's `Doc::id_key` (of an empty slot: any).
    pub(crate) fn id_keys(&self) -> &[u64] {
        &self.id_keys
    }

    /// The elements of document `i` in an elements column when it has several (`None`:
    /// one or none, or not an elements column).
    #[inline]
    pub(crate) fn elements(col: &Col, i: usize) -> Option<&[u32]> {
        match col {
            Col::Elem { e, multi, many, .. } if bit(multi, i) => {
                let at = e.get(i) as usize;
                let len = *many.get(at)? as usize;
                many.get(at + 1..at + 1 + len)
            }
            _ => None,
        }
    }

    /// The column of dimension `dim`, if it has one.
    #[inline]
    pub(crate) fn col(&self, dim: usize) -> Option<&Col> {
        self.dims.get(dim)?.as_deref()
    }

    /// Document `i`'s value in dimension `dim`; `None` when it must be read from the row
    /// (no column for the dimension, or several values).
    #[inline(always)]
    pub(crate) fn get(&self, dim: usize, i: usize) -> Option<ColValue> {
        match self.col(dim)? {
            Col::Num { v, multi, .. } => {
                if bit(multi, i) {
                    return None;
                }
                let x = v.get(i);
                Some(ColValue::Num((!x.is_nan()).then_some(x)))
            }
            Col::Geo { lat, pts, multi } => {
                if bit(multi, i) {
                    return None;
                }
                let la = lat[i];
                Some(ColValue::Point((!la.is_nan()).then_some((la, pts[i]))))
            }
            Col::Elem { e, multi, .. } => {
                if bit(multi, i) {
                    return None;
                }
                let x = e.get(i);
                Some(ColValue::Elem((x != NO_ELEMENT).then_some(x)))
            }
            Col::Present { bits } | Col::Text { bits, .. } => Some(ColValue::Present(bit(bits, i))),
        }
    }

    /// The length in tokens of field `field` of document `i`'s text value in dimension
    /// `dim` (0 without one); `None` when it must be counted from the row.
    #[inline(always)]
    pub(crate) fn text_len(&self, dim: usize, i: usize, field: usize) -> Option<usize> {
        match self.col(dim)? {
            Col::Text { lens, fields, .. } if field < *fields => {
                let n = lens[i * fields + field];
                (n != u16::MAX).then_some(n as usize)
            }
            _ => None,
        }
    }

    /// A tree dimension's deepest element of document `i` when its elements lie on one
    /// path from the root (`NO_ELEMENT`: no value, `NOT_A_PATH`: read the row).
    #[inline]
    pub(crate) fn deepest(&self, dim: usize, i: usize) -> u32 {
        match self.col(dim) {
            Some(Col::Elem { deepest, .. }) if !deepest.is_empty() => deepest.get(i),
            _ => NOT_A_PATH,
        }
    }

    /// The smallest and largest value in a numeric dimension, if any.
    pub(crate) fn span(&self, dim: usize) -> Option<(f64, f64)> {
        match self.col(dim)? {
            Col::Num { lo, hi, .. } if !lo.is_nan() => Some((*lo, *hi)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use discern_dimensions::Interval;

    /// Every document's segment reads back as the table gives it — in a byte each below
    /// 255 segments, in two from there — and a document with no value or several has
    /// none; a patch reads the same.
    #[test]
    fn segments_in_one_byte_or_two() {
        for ranges in [3usize, 400] {
            let intervals: Vec<Interval> = (0..ranges)
                .map(|k| Interval {
                    lo: Some(k as f64),
                    lo_incl: true,
                    hi: Some(k as f64 + 1.0),
                    hi_incl: false,
                })
                .collect();
            let table = RangeTable::new(intervals.iter());
            let n = 1000;
            let mut v: Vec<f64> = (0..n).map(|i| (i % (ranges + 2)) as f64 - 0.5).collect();
            v[7] = f64::NAN;
            let mut multi = vec![0u64; n.div_ceil(64)];
            multi[0] |= 1 << 9;
            let col = Col::Num {
                v: NumValues::of(&v),
                multi: multi.into(),
                lo: -0.5,
                hi: ranges as f64 + 0.5,
            };
            let sc = SegmentCol::build(&col, &table).expect("a numeric column");
            let narrow = matches!(sc.segment, SegmentIds::Narrow(_));
            assert_eq!(narrow, table.segments() < 255, "{ranges} ranges");
            let want = |i: usize| match table.segment(v[i]) {
                Some(s) if i != 9 => s as u16,
                _ => NO_SEGMENT,
            };
            for i in 0..n {
                assert_eq!(sc.segment.get(i), want(i), "document {i}, {ranges} ranges");
            }
            let changed: Vec<usize> = (0..n).step_by(3).collect();
            let patched = sc.patched(&col, &table, &changed);
            for i in 0..n {
                assert_eq!(patched.segment.get(i), want(i));
            }
            let counted: u32 = sc.histogram.iter().sum();
            assert_eq!(
                counted as usize,
                (0..n).filter(|&i| want(i) != NO_SEGMENT).count()
            );
        }
    }
}
