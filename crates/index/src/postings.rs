//! Postings: per dimension, the documents holding each indexed key, as roaring bitmaps in
//! a persistent ordered map (an apply copies only the paths and bitmaps it touches, and
//! text prefixes are key ranges). They narrow a query to the documents that can survive
//! its culled and exact criteria (`candidates.rs`) and give text criteria their document
//! frequencies and matching documents without a scan (`text.rs`).
//!
//! Keys per dimension type: keyword/groupBy values; tree/ordered/mutex element numbers
//! (big-endian u32); text `field (big-endian u16) ++ token`; geoloc grid cells of
//! `CELL_DEG` degrees. Numeric dimensions have none (the other criteria narrow first).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue};
use imbl::OrdMap;
use rayon::prelude::*;
use roaring::RoaringBitmap;

pub(crate) type Key = Box<[u8]>;

/// Side of a geoloc grid cell, in degrees.
pub(crate) const CELL_DEG: f64 = 0.1;

#[derive(Clone, Default)]
pub struct DimPostings {
    pub(crate) map: OrdMap<Key, Arc<RoaringBitmap>>,
    /// Documents with a value in this dimension.
    pub(crate) has: Arc<RoaringBitmap>,
    /// Text: per field, (tokens in all documents, documents with a non-empty field).
    pub(crate) field_stats: Vec<(u64, u64)>,
}

impl DimPostings {
    pub(crate) fn get(&self, key: &[u8]) -> Option<&RoaringBitmap> {
        self.map.get(key).map(|b| &**b)
    }

    /// The union of the postings of `keys`.
    pub(crate) fn union<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        for k in keys {
            if let Some(b) = self.get(k) {
                out |= b;
            }
        }
        out
    }

    /// The union of the postings of every key starting with `prefix`.
    pub(crate) fn union_prefix(&self, prefix: &[u8]) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        for (k, b) in self
            .map
            .range::<_, [u8]>((Bound::Included(prefix), Bound::Unbounded))
        {
            if !k.starts_with(prefix) {
                break;
            }
            out |= &**b;
        }
        out
    }

    pub(crate) fn bytes(&self) -> usize {
        self.map
            .iter()
            .map(|(k, b)| k.len() + 64 + b.serialized_size())
            .sum::<usize>()
            + self.has.serialized_size()
    }
}

/// Per dimension; `None` for dimensions without postings.
pub type Postings = Arc<Vec<Option<Arc<DimPostings>>>>;

pub(crate) fn has_postings(kind: &DimensionKind) -> bool {
    !matches!(kind, DimensionKind::Numeric(_))
}

pub(crate) fn empty(dims: &Dimensions) -> Postings {
    Arc::new(
        dims.dims
            .iter()
            .map(|d| {
                has_postings(&d.kind).then(|| {
                    let fields = match &d.kind {
                        DimensionKind::Text(t) => t.fields.len(),
                        _ => 0,
                    };
                    Arc::new(DimPostings {
                        field_stats: vec![(0, 0); fields],
                        ..DimPostings::default()
                    })
                })
            })
            .collect(),
    )
}

/// The grid cell of a point.
pub(crate) fn cell(lat: f64, lon: f64) -> (u32, u32) {
    let row = ((lat.clamp(-90.0, 90.0) + 90.0) / CELL_DEG).floor() as u32;
    let col = ((lon.clamp(-180.0, 180.0) + 180.0) / CELL_DEG).floor() as u32;
    (row, col)
}

pub(crate) fn cell_key(row: u32, col: u32) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..4].copy_from_slice(&row.to_be_bytes());
    k[4..].copy_from_slice(&col.to_be_bytes());
    k
}

/// The key of a text token in field `field`.
pub(crate) fn text_key(field: usize, token: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + token.len());
    k.extend_from_slice(&(field as u16).to_be_bytes());
    k.extend_from_slice(token.as_bytes());
    k
}

/// Appends the keys of `value` to `arena` (their ends to `ends`), sorted and distinct.
fn keys(value: &IndexedValue, arena: &mut Vec<u8>, ends: &mut Vec<usize>) {
    let mut list: Vec<Vec<u8>> = Vec::new();
    match value {
        IndexedValue::Strings(vs) => list.extend(vs.iter().map(|v| v.as_bytes().to_vec())),
        IndexedValue::Elements(es) => list.extend(es.iter().map(|e| e.to_be_bytes().to_vec())),
        IndexedValue::Text(fields) => {
            for (fi, toks) in fields.iter().enumerate() {
                list.extend(toks.iter().map(|t| text_key(fi, t)));
            }
        }
        IndexedValue::Points(ps) => list.extend(ps.iter().map(|&(la, lo)| {
            let (r, c) = cell(la, lo);
            cell_key(r, c).to_vec()
        })),
        IndexedValue::Ints(_) | IndexedValue::Doubles(_) => {}
    }
    list.sort_unstable();
    list.dedup();
    for k in list {
        arena.extend_from_slice(&k);
        ends.push(arena.len());
    }
}

/// Postings counted from scratch from `docs` (doc number, values), in ascending doc
/// order; dimensions in parallel.
pub(crate) fn build(
    dims: &Dimensions,
    docs: &[(u32, &[Option<IndexedValue>])],
) -> (Postings, RoaringBitmap) {
    let per_dim: Vec<Option<Arc<DimPostings>>> = dims
        .dims
        .par_iter()
        .enumerate()
        .map(|(di, d)| {
            if !has_postings(&d.kind) {
                return None;
            }
            let mut map: HashMap<Vec<u8>, RoaringBitmap> = HashMap::new();
            let mut has = RoaringBitmap::new();
            let mut stats: Vec<(u64, u64)> = match &d.kind {
                DimensionKind::Text(t) => vec![(0, 0); t.fields.len()],
                _ => Vec::new(),
            };
            let (mut arena, mut ends) = (Vec::new(), Vec::new());
            for &(n, values) in docs {
                let Some(v) = values.get(di).and_then(|v| v.as_ref()) else {
                    continue;
                };
                has.insert(n);
                if let IndexedValue::Text(fields) = v {
                    if stats.len() < fields.len() {
                        stats.resize(fields.len(), (0, 0));
                    }
                    for (fi, toks) in fields.iter().enumerate() {
                        if !toks.is_empty() {
                            stats[fi].0 += toks.len() as u64;
                            stats[fi].1 += 1;
                        }
                    }
                }
                arena.clear();
                ends.clear();
                keys(v, &mut arena, &mut ends);
                let mut start = 0;
                for &end in &ends {
                    let k = &arena[start..end];
                    match map.get_mut(k) {
                        Some(b) => {
                            b.insert(n);
                        }
                        None => {
                            map.insert(
                                k.to_vec(),
                                RoaringBitmap::from_sorted_iter([n]).unwrap_or_default(),
                            );
                        }
                    }
                    start = end;
                }
            }
            let mut entries: Vec<(Vec<u8>, RoaringBitmap)> = map.into_iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            Some(Arc::new(DimPostings {
                map: entries
                    .into_iter()
                    .map(|(k, b)| (k.into_boxed_slice(), Arc::new(b)))
                    .collect(),
                has: Arc::new(has),
                field_stats: stats,
            }))
        })
        .collect();
    let live: RoaringBitmap = docs.iter().map(|(n, _)| *n).collect();
    (Arc::new(per_dim), live)
}

/// A set's pending change: `add` and `remove` are disjoint.
#[derive(Default)]
struct Delta {
    add: RoaringBitmap,
    remove: RoaringBitmap,
}

impl Delta {
    fn add(&mut self, doc: u32) {
        self.remove.remove(doc);
        self.add.insert(doc);
    }
    fn remove(&mut self, doc: u32) {
        self.add.remove(doc);
        self.remove.insert(doc);
    }
    fn apply(&self, to: &mut RoaringBitmap) {
        *to |= &self.add;
        *to -= &self.remove;
    }
}

#[derive(Default)]
struct DimDelta {
    keys: HashMap<Key, Delta>,
    has: Delta,
    field_stats: Vec<(i64, i64)>,
}

impl DimDelta {
    fn key(&mut self, k: &[u8]) -> &mut Delta {
        if !self.keys.contains_key(k) {
            self.keys.insert(k.into(), Delta::default());
        }
        // just inserted when absent
        self.keys.get_mut(k).expect("present")
    }
}

/// The changes one apply makes to the postings, folded in by `commit`.
pub(crate) struct PostingsDelta {
    dims: Vec<Option<DimDelta>>,
    live: Delta,
    arena: (Vec<u8>, Vec<usize>, Vec<u8>, Vec<usize>),
}

impl PostingsDelta {
    pub(crate) fn new(dims: &Dimensions) -> PostingsDelta {
        PostingsDelta {
            dims: dims
                .dims
                .iter()
                .map(|d| has_postings(&d.kind).then(DimDelta::default))
                .collect(),
            live: Delta::default(),
            arena: Default::default(),
        }
    }

    pub(crate) fn clear(&mut self) {
        for d in self.dims.iter_mut().flatten() {
            *d = DimDelta::default();
        }
        self.live = Delta::default();
    }

    /// Records that document `doc` changed from `old` to `new` (`None`: absent).
    pub(crate) fn change(
        &mut self,
        doc: u32,
        old: Option<&[Option<IndexedValue>]>,
        new: Option<&[Option<IndexedValue>]>,
    ) {
        match new {
            Some(_) => self.live.add(doc),
            None => self.live.remove(doc),
        }
        let (oa, oe, na, ne) = &mut self.arena;
        for (di, dd) in self.dims.iter_mut().enumerate() {
            let Some(dd) = dd else { continue };
            let before = old.and_then(|v| v.get(di)).and_then(|v| v.as_ref());
            let after = new.and_then(|v| v.get(di)).and_then(|v| v.as_ref());
            if before == after {
                continue;
            }
            match after {
                Some(_) => dd.has.add(doc),
                None => dd.has.remove(doc),
            }
            for (v, sign) in [(before, -1i64), (after, 1)] {
                if let Some(IndexedValue::Text(fields)) = v {
                    if dd.field_stats.len() < fields.len() {
                        dd.field_stats.resize(fields.len(), (0, 0));
                    }
                    for (fi, toks) in fields.iter().enumerate() {
                        if !toks.is_empty() {
                            dd.field_stats[fi].0 += sign * toks.len() as i64;
                            dd.field_stats[fi].1 += sign;
                        }
                    }
                }
            }
            oa.clear();
            oe.clear();
            na.clear();
            ne.clear();
            if let Some(v) = before {
                keys(v, oa, oe);
            }
            if let Some(v) = after {
                keys(v, na, ne);
            }
            let slice = |e: &[usize], i: usize| (if i == 0 { 0 } else { e[i - 1] })..e[i];
            // merge walk over the two sorted key lists
            let (mut i, mut j) = (0, 0);
            while i < oe.len() || j < ne.len() {
                let ko = (i < oe.len()).then(|| &oa[slice(oe, i)]);
                let kn = (j < ne.len()).then(|| &na[slice(ne, j)]);
                match (ko, kn) {
                    (Some(a), Some(b)) if a == b => {
                        i += 1;
                        j += 1;
                    }
                    (Some(a), Some(b)) if a < b => {
                        dd.key(a).remove(doc);
                        i += 1;
                    }
                    (Some(a), None) => {
                        dd.key(a).remove(doc);
                        i += 1;
                    }
                    (_, Some(b)) => {
                        dd.key(b).add(doc);
                        j += 1;
                    }
                    (None, None) => break,
                }
            }
        }
    }

    /// `base` with these changes folded in (dimensions in parallel).
    pub(crate) fn apply(
        self,
        base: &Postings,
        live: &Arc<RoaringBitmap>,
    ) -> (Postings, Arc<RoaringBitmap>) {
        let mut live = live.clone();
        if !self.live.add.is_empty() || !self.live.remove.is_empty() {
            self.live.apply(Arc::make_mut(&mut live));
        }
        let next: Vec<Option<Arc<DimPostings>>> = self
            .dims
            .into_par_iter()
            .zip(base.par_iter())
            .map(|(delta, cur)| {
                let (Some(delta), Some(cur)) = (delta, cur) else {
                    return cur.clone();
                };
                if delta.keys.is_empty() && delta.has.add.is_empty() && delta.has.remove.is_empty()
                {
                    return Some(cur.clone());
                }
                let mut p: DimPostings = (**cur).clone();
                delta.has.apply(Arc::make_mut(&mut p.has));
                if p.field_stats.len() < delta.field_stats.len() {
                    p.field_stats.resize(delta.field_stats.len(), (0, 0));
                }
                for (s, d) in p.field_stats.iter_mut().zip(&delta.field_stats) {
                    s.0 = (s.0 as i64 + d.0).max(0) as u64;
                    s.1 = (s.1 as i64 + d.1).max(0) as u64;
                }
                for (k, d) in delta.keys {
                    match p.map.get_mut(&k) {
                        Some(b) => {
                            let b = Arc::make_mut(b);
                            d.apply(b);
                            if b.is_empty() {
                                p.map.remove(&k);
                            }
                        }
                        None if !d.add.is_empty() => {
                            p.map.insert(k, Arc::new(d.add));
                        }
                        None => {}
                    }
                }
                Some(Arc::new(p))
            })
            .collect();
        (Arc::new(next), live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dims() -> Dimensions {
        Dimensions::parse(
            b"<dimensions><dimension id='k' type='keyword'/><dimension id='n' type='integer'/></dimensions>",
        )
        .unwrap()
    }

    fn kw(vs: &[&str]) -> Option<IndexedValue> {
        (!vs.is_empty()).then(|| IndexedValue::Strings(vs.iter().map(|s| s.to_string()).collect()))
    }

    proptest! {
        /// Postings kept current through random applies equal postings counted from the
        /// final documents.
        #[test]
        fn incremental_equals_recount(
            steps in prop::collection::vec(
                prop::collection::vec((0u32..40, prop::option::of(prop::collection::vec(0usize..5, 0..3))), 1..30),
                1..5)
        ) {
            let d = dims();
            let words = ["a", "b", "c", "d", "e"];
            let mut post = empty(&d);
            let mut live = Arc::new(RoaringBitmap::new());
            let mut docs: HashMap<u32, Vec<Option<IndexedValue>>> = HashMap::new();
            for step in steps {
                let mut delta = PostingsDelta::new(&d);
                for (doc, val) in step {
                    let old = docs.get(&doc).cloned();
                    let new = val.map(|ws| {
                        let vs: Vec<&str> = ws.iter().map(|&i| words[i]).collect();
                        vec![kw(&vs), None]
                    });
                    delta.change(doc, old.as_deref(), new.as_deref());
                    match new {
                        Some(n) => { docs.insert(doc, n); }
                        None => { docs.remove(&doc); }
                    }
                }
                (post, live) = delta.apply(&post, &live);
            }
            let p = post[0].as_ref().unwrap();
            prop_assert!(post[1].is_none());
            for w in words {
                let want: RoaringBitmap = docs.iter()
                    .filter(|(_, v)| matches!(&v[0], Some(IndexedValue::Strings(s)) if s.iter().any(|x| x == w)))
                    .map(|(d, _)| *d).collect();
                let got = p.get(w.as_bytes()).cloned().unwrap_or_default();
                prop_assert_eq!(got, want);
            }
            let has: RoaringBitmap = docs.iter().filter(|(_, v)| v[0].is_some()).map(|(d, _)| *d).collect();
            prop_assert_eq!(&*p.has, &has);
            let all: RoaringBitmap = docs.keys().copied().collect();
            prop_assert_eq!(&*live, &all);
            // counting from scratch gives the same postings
            let mut sorted: Vec<(u32, &[Option<IndexedValue>])> =
                docs.iter().map(|(d, v)| (*d, v.as_slice())).collect();
            sorted.sort_by_key(|x| x.0);
            let (built, built_live) = build(&d, &sorted);
            let b = built[0].as_ref().unwrap();
            prop_assert_eq!(&built_live, &*live);
            prop_assert_eq!(&*b.has, &*p.has);
            let keys_of = |m: &DimPostings| -> Vec<(Vec<u8>, RoaringBitmap)> {
                m.map.iter().map(|(k, v)| (k.to_vec(), (**v).clone())).collect()
            };
            prop_assert_eq!(keys_of(b), keys_of(p));
        }
    }
}
