//! Typed columns per chunk: the numeric, geoloc and element values of a chunk's 1,024
//! documents as flat arrays (and for other dimensions which documents have a value),
//! built on first use and dropped with the chunk when an apply copies it. A
//! whole-collection scan reads these instead of following every document's pointers;
//! documents with several numbers or points in a dimension are marked and read from
//! their row (several elements are kept in a side list). The rules themselves stay in
//! `criteria.rs`.

use std::sync::{Arc, OnceLock};

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue};

use crate::geo::GeoPoint;
use crate::keys::KeyCol;
use crate::ranges::RangeTable;
use crate::slots::Slots;
use crate::Doc;

pub(crate) enum Col {
    /// NaN: no value.
    Num {
        v: Box<[f64]>,
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
        e: Box<[u32]>,
        multi: Box<[u64]>,
        many: Box<[u32]>,
        deepest: Box<[u32]>,
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
pub(crate) struct SegmentCol {
    /// Per document, its segment (`NO_SEGMENT`: no value, or several).
    pub(crate) segment: Box<[u16]>,
    /// Per segment, how many of the chunk's documents with one value lie in it.
    pub(crate) histogram: Box<[u32]>,
}

pub(crate) const NO_SEGMENT: u16 = u16::MAX;

impl SegmentCol {
    /// `None` when the column is not numeric or the ranges cut the line into more
    /// segments than a `u16` numbers (over 32,000 ranges).
    pub(crate) fn build(col: &Col, table: &RangeTable) -> Option<SegmentCol> {
        let Col::Num { v, multi, .. } = col else {
            return None;
        };
        if table.segments() >= NO_SEGMENT as usize {
            return None;
        }
        let mut histogram = vec![0u32; table.segments()];
        let segment = v
            .iter()
            .enumerate()
            .map(|(i, &x)| match table.segment(x) {
                Some(s) if !bit(multi, i) => {
                    histogram[s] += 1;
                    s as u16
                }
                _ => NO_SEGMENT,
            })
            .collect();
        Some(SegmentCol {
            segment,
            histogram: histogram.into(),
        })
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

pub(crate) struct ChunkCols {
    dims: Vec<Option<Col>>,
    /// Keyword and groupBy dimensions' key numbers, built when a facet first asks
    /// (`Snapshot::key_col`).
    pub(crate) keys: Box<[OnceLock<KeyCol>]>,
    /// Numeric dimensions' facet range segments, built when a facet first asks
    /// (`Snapshot::segment_col`).
    pub(crate) segments: Box<[OnceLock<Option<SegmentCol>>]>,
    /// How many documents the chunk holds.
    pub(crate) live: u32,
    /// Each document's `Doc::id_key` (0 for an empty slot): ordering ties between
    /// results read these instead of every row.
    id_keys: Box<[u64]>,
}

#[inline(always)]
pub(crate) fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] >> (i % 64) & 1 == 1
}

impl ChunkCols {
    pub(crate) fn build(dims: &Dimensions, docs: &Slots) -> ChunkCols {
        let n = docs.len();
        let words = n.div_ceil(64);
        fn value(d: &Option<Arc<Doc>>, di: usize) -> Option<&IndexedValue> {
            d.as_ref()?.values.get(di)?.as_ref()
        }
        let cols = dims
            .dims
            .iter()
            .enumerate()
            .map(|(di, dim)| match dim.kind {
                DimensionKind::Numeric(_) => {
                    let mut v = vec![f64::NAN; n];
                    let mut multi = vec![0u64; words];
                    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                    for (i, d) in docs.iter().enumerate() {
                        let mut seen = 0;
                        let mut visit = |x: f64| {
                            lo = lo.min(x);
                            hi = hi.max(x);
                            v[i] = x;
                            seen += 1;
                        };
                        let present = match value(d, di) {
                            Some(IndexedValue::Ints(xs)) => {
                                xs.iter().for_each(|x| visit(*x as f64));
                                true
                            }
                            Some(IndexedValue::Doubles(xs)) => {
                                xs.iter().for_each(|x| visit(*x));
                                true
                            }
                            Some(_) => true,
                            None => false,
                        };
                        // anything but exactly one number is read from the row
                        if present && (seen != 1 || v[i].is_nan()) {
                            v[i] = f64::NAN;
                            multi[i / 64] |= 1 << (i % 64);
                        }
                    }
                    if lo > hi {
                        (lo, hi) = (f64::NAN, f64::NAN);
                    }
                    Some(Col::Num {
                        v: v.into(),
                        multi: multi.into(),
                        lo,
                        hi,
                    })
                }
                DimensionKind::Geo(_) => {
                    let mut lat = vec![f64::NAN; n];
                    let mut pts = vec![GeoPoint::new(0.0, 0.0); n];
                    let mut multi = vec![0u64; words];
                    for (i, d) in docs.iter().enumerate() {
                        match value(d, di) {
                            Some(IndexedValue::Points(ps))
                                if ps.len() == 1 && !ps[0].0.is_nan() =>
                            {
                                lat[i] = ps[0].0;
                                pts[i] = GeoPoint::new(ps[0].0, ps[0].1);
                            }
                            Some(_) => multi[i / 64] |= 1 << (i % 64),
                            None => {}
                        }
                    }
                    Some(Col::Geo {
                        lat: lat.into(),
                        pts: pts.into(),
                        multi: multi.into(),
                    })
                }
                DimensionKind::Tree(_) | DimensionKind::Ordered(_) | DimensionKind::Mutex(_) => {
                    let tree = match &dim.kind {
                        DimensionKind::Tree(set) => Some(set),
                        _ => None,
                    };
                    let mut e = vec![NO_ELEMENT; n];
                    let mut multi = vec![0u64; words];
                    let mut many = Vec::new();
                    let mut deepest = vec![NO_ELEMENT; if tree.is_some() { n } else { 0 }];
                    for (i, d) in docs.iter().enumerate() {
                        match value(d, di) {
                            Some(IndexedValue::Elements(es)) if es.len() == 1 => e[i] = es[0],
                            Some(IndexedValue::Elements(es)) => {
                                multi[i / 64] |= 1 << (i % 64);
                                e[i] = many.len() as u32;
                                many.push(es.len() as u32);
                                many.extend_from_slice(es);
                                if let Some(set) = tree {
                                    deepest[i] = path_end(set, es);
                                }
                            }
                            Some(_) => multi[i / 64] |= 1 << (i % 64),
                            None => {}
                        }
                        if tree.is_some() && e[i] != NO_ELEMENT && !bit(&multi, i) {
                            deepest[i] = e[i];
                        }
                    }
                    Some(Col::Elem {
                        e: e.into(),
                        multi: multi.into(),
                        many: many.into(),
                        deepest: deepest.into(),
                    })
                }
                DimensionKind::Keyword | DimensionKind::GroupBy => {
                    let mut bits = vec![0u64; words];
                    for (i, d) in docs.iter().enumerate() {
                        if value(d, di).is_some() {
                            bits[i / 64] |= 1 << (i % 64);
                        }
                    }
                    Some(Col::Present { bits: bits.into() })
                }
                DimensionKind::Text(ref spec) => {
                    let fields = spec.fields.len();
                    let mut bits = vec![0u64; words];
                    let mut lens = vec![0u16; n * fields];
                    for (i, d) in docs.iter().enumerate() {
                        let Some(v) = value(d, di) else { continue };
                        bits[i / 64] |= 1 << (i % 64);
                        if let IndexedValue::Text(toks) = v {
                            for (fi, len) in
                                lens[i * fields..(i + 1) * fields].iter_mut().enumerate()
                            {
                                if fi < toks.groups() {
                                    *len = toks.group_range(fi).len().min(u16::MAX as usize) as u16;
                                }
                            }
                        }
                    }
                    Some(Col::Text {
                        bits: bits.into(),
                        lens: lens.into(),
                        fields,
                    })
                }
            })
            .collect();
        let id_keys = docs
            .iter()
            .map(|d| d.as_ref().map_or(0, |d| d.id_key))
            .collect();
        ChunkCols {
            keys: dims.dims.iter().map(|_| OnceLock::new()).collect(),
            segments: dims.dims.iter().map(|_| OnceLock::new()).collect(),
            live: docs.iter().flatten().count() as u32,
            dims: cols,
            id_keys,
        }
    }

    /// Document `i`'s `Doc::id_key`.
    #[inline(always)]
    pub(crate) fn id_key(&self, i: usize) -> u64 {
        self.id_keys[i]
    }

    /// The elements of document `i` in an elements column when it has several (`None`:
    /// one or none, or not an elements column).
    #[inline]
    pub(crate) fn elements(col: &Col, i: usize) -> Option<&[u32]> {
        match col {
            Col::Elem { e, multi, many, .. } if bit(multi, i) => {
                let at = e[i] as usize;
                let len = *many.get(at)? as usize;
                many.get(at + 1..at + 1 + len)
            }
            _ => None,
        }
    }

    /// The column of dimension `dim`, if it has one.
    #[inline]
    pub(crate) fn col(&self, dim: usize) -> Option<&Col> {
        self.dims.get(dim)?.as_ref()
    }

    /// Document `i`'s value in dimension `dim`; `None` when it must be read from the row
    /// (no column for the dimension, or several values).
    #[inline(always)]
    pub(crate) fn get(&self, dim: usize, i: usize) -> Option<ColValue> {
        match self.dims.get(dim)?.as_ref()? {
            Col::Num { v, multi, .. } => {
                if bit(multi, i) {
                    return None;
                }
                let x = v[i];
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
                let x = e[i];
                Some(ColValue::Elem((x != NO_ELEMENT).then_some(x)))
            }
            Col::Present { bits } | Col::Text { bits, .. } => Some(ColValue::Present(bit(bits, i))),
        }
    }

    /// The length in tokens of field `field` of document `i`'s text value in dimension
    /// `dim` (0 without one); `None` when it must be counted from the row.
    #[inline(always)]
    pub(crate) fn text_len(&self, dim: usize, i: usize, field: usize) -> Option<usize> {
        match self.dims.get(dim)?.as_ref()? {
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
        match self.dims.get(dim).and_then(|c| c.as_ref()) {
            Some(Col::Elem { deepest, .. }) if !deepest.is_empty() => deepest[i],
            _ => NOT_A_PATH,
        }
    }

    /// The smallest and largest value in a numeric dimension, if any.
    pub(crate) fn span(&self, dim: usize) -> Option<(f64, f64)> {
        match self.dims.get(dim)?.as_ref()? {
            Col::Num { lo, hi, .. } if !lo.is_nan() => Some((*lo, *hi)),
            _ => None,
        }
    }
}
