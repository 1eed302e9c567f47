//! `sortBy` (SPEC §7.6): keys applied in order, the default order breaking ties.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue};
use discern_model::Result;
use rayon::prelude::*;
use serde_json::Value as J;

use crate::columns::ColValue;
use crate::geo::{haversine_pre, GeoPoint, Unit};
use crate::hits::{default_order, order_parts, Hit, Results, Sink, Tally};
use crate::query::{as_bool, as_f64, as_str, bad, member};
use crate::{Snapshot, CHUNK};

#[derive(Debug, PartialEq)]
pub enum SortKey {
    Exact {
        reverse: bool,
    },
    Relevance {
        reverse: bool,
    },
    Id {
        reverse: bool,
    },
    Random {
        seed: u64,
        reverse: bool,
    },
    Dimension {
        dim: usize,
        reverse: bool,
        /// A geoloc dimension's point to measure from (its cosine computed once per
        /// request, not per document), and the distance's unit.
        from: Option<(GeoPoint, Unit)>,
    },
}

pub fn parse_sort(v: &J, dims: &Dimensions) -> Result<Vec<SortKey>> {
    let J::Array(keys) = v else {
        return Err(bad(
            "sortBy",
            format!("expected an array of sort keys, got {v}"),
        ));
    };
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let path = format!("sortBy[{i}]");
        let J::Object(obj) = k else {
            return Err(bad(&path, format!("expected a sort key object, got {k}")));
        };
        let reverse = member(obj, "reverse")
            .map(|r| as_bool(r, &format!("{path}.reverse")))
            .transpose()?
            .unwrap_or(false);
        if let Some(b) = member(obj, "builtin") {
            out.push(match as_str(b, &format!("{path}.builtin"))? {
                "exactMatch" => SortKey::Exact { reverse },
                "relevance" => SortKey::Relevance { reverse },
                "id" => SortKey::Id { reverse },
                "random" => SortKey::Random {
                    seed: member(obj, "seed")
                        .map(|s| as_f64(s, &format!("{path}.seed")))
                        .transpose()?
                        .unwrap_or(0.0) as u64,
                    reverse,
                },
                other => {
                    return Err(bad(
                        &format!("{path}.builtin"),
                        format!("unknown builtin {other:?} (exactMatch, relevance, id, random)"),
                    ))
                }
            });
            continue;
        }
        let Some(d) = member(obj, "dimension") else {
            return Err(bad(&path, "a sort key needs builtin or dimension"));
        };
        let id = as_str(d, &format!("{path}.dimension"))?;
        let dim = dims.index_of(id).ok_or_else(|| {
            bad(
                &format!("{path}.dimension"),
                format!("unknown dimension {id:?}"),
            )
        })?;
        let from = if matches!(dims.dims[dim].kind, DimensionKind::Geo(_)) {
            let lat = member(obj, "latitude").ok_or_else(|| {
                bad(
                    &path,
                    "sorting by a geoloc dimension needs latitude and longitude",
                )
            })?;
            let lon = member(obj, "longitude").ok_or_else(|| {
                bad(
                    &path,
                    "sorting by a geoloc dimension needs latitude and longitude",
                )
            })?;
            let unit = match member(obj, "distanceUnit") {
                None => Unit::Miles,
                Some(u) => Unit::parse(as_str(u, &format!("{path}.distanceUnit"))?)
                    .ok_or_else(|| bad(&format!("{path}.distanceUnit"), "expected miles or km"))?,
            };
            let lat = as_f64(lat, &format!("{path}.latitude"))?;
            let lon = as_f64(lon, &format!("{path}.longitude"))?;
            Some((GeoPoint::new(lat, lon), unit))
        } else {
            None
        };
        out.push(SortKey::Dimension { dim, reverse, from });
    }
    Ok(out)
}

#[derive(PartialEq, PartialOrd)]
enum KeyVal {
    Num(f64),
    Str(String),
}

fn mix(seed: u64, id: &str) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The value a dimension key sorts an item by: the smallest ascending, the largest
/// descending; `None` sorts last either way.
fn key_value(
    snap: &Snapshot,
    doc: u32,
    dim: usize,
    descending: bool,
    from: Option<(GeoPoint, Unit)>,
) -> Option<KeyVal> {
    match column_key(snap, doc, dim, from) {
        Some(k) => k,
        None => row_key(snap, doc, dim, descending, from),
    }
}

/// `key_value` for a document with at most one value, from its chunk's column — no
/// pointer chase to the row; `None` when the row must be read.
fn column_key(
    snap: &Snapshot,
    doc: u32,
    dim: usize,
    from: Option<(GeoPoint, Unit)>,
) -> Option<Option<KeyVal>> {
    let (c, i) = (doc as usize / CHUNK, doc as usize % CHUNK);
    Some(match snap.chunk_cols(c)?.get(dim, i)? {
        ColValue::Num(x) => x.map(KeyVal::Num),
        ColValue::Elem(e) => e.map(|e| KeyVal::Num(e as f64)),
        ColValue::Point(p) => {
            let (from, unit) = from?;
            // bit for bit the row's haversine: the column holds GeoPoint::new(lat, lon)
            p.map(|(_, p)| haversine_pre(&from, &p, unit))
                .filter(|d| !d.is_nan())
                .map(KeyVal::Num)
        }
        ColValue::Present(_) => return None,
    })
}

/// `key_value` from the document's row.
fn row_key(
    snap: &Snapshot,
    doc: u32,
    dim: usize,
    descending: bool,
    from: Option<(GeoPoint, Unit)>,
) -> Option<KeyVal> {
    // (text as its words: `shown_value` turns a document's token numbers back)
    let shown = snap.shown_value(doc, dim)?;
    let v = &*shown;
    let pick = |xs: &mut dyn Iterator<Item = f64>| -> Option<f64> {
        let it = xs.filter(|x| !x.is_nan());
        if descending {
            it.fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        } else {
            it.fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
        }
    };
    match v {
        IndexedValue::Int(_)
        | IndexedValue::Ints(_)
        | IndexedValue::Double(_)
        | IndexedValue::Doubles(_) => pick(&mut v.numbers()).map(KeyVal::Num),
        IndexedValue::Elements(es) => pick(&mut es.iter().map(|e| *e as f64)).map(KeyVal::Num),
        IndexedValue::Points(ps) => {
            let (from, unit) = from?;
            // (`haversine` on the same points, bit for bit)
            let d = |&(a, b): &(f64, f64)| haversine_pre(&from, &GeoPoint::new(a, b), unit);
            pick(&mut ps.iter().map(d)).map(KeyVal::Num)
        }
        IndexedValue::Strings(s) => {
            let mut it = s.iter();
            let first = it.next()?;
            let chosen = it.fold(first, |m, x| if (x > m) == descending { x } else { m });
            Some(KeyVal::Str(chosen.to_string()))
        }
        IndexedValue::Text(_) => v.joined_tokens().map(KeyVal::Str),
        // (shown as `Text`)
        IndexedValue::Terms(_) => None,
    }
}

/// Key `key`'s value for document `doc` (`None` for the builtins that read the result
/// itself: exactness, relevance, id). `id` gives the document's id, read only for a
/// random key: reaching it reads the document's row, a cache miss per document.
fn value_of<'i>(
    snap: &Snapshot,
    key: &SortKey,
    doc: u32,
    id: impl FnOnce() -> &'i crate::DocId,
) -> Option<KeyVal> {
    match key {
        SortKey::Dimension { dim, reverse, from } => key_value(snap, doc, *dim, *reverse, *from),
        SortKey::Random { seed, .. } => Some(KeyVal::Num(mix(*seed, id()) as f64)),
        _ => None,
    }
}

/// One result as one sort key sees it: its exactness, relevance, id key
/// (`Hit::id_key`) and the key's value (`value_of`).
type Side<'a> = (bool, f64, u64, &'a Option<KeyVal>);

/// How `key` orders two results; `ids` gives their ids, read only for an id key when
/// their id keys tie.
fn by_key<'i>(
    key: &SortKey,
    (ea, ra, ka, va): Side<'_>,
    (eb, rb, kb, vb): Side<'_>,
    ids: impl FnOnce() -> (&'i crate::DocId, &'i crate::DocId),
) -> Ordering {
    match key {
        SortKey::Exact { reverse } => flip(eb.cmp(&ea), *reverse),
        SortKey::Relevance { reverse } => {
            flip(rb.partial_cmp(&ra).unwrap_or(Ordering::Equal), *reverse)
        }
        SortKey::Id { reverse } => {
            let by_bytes = ka.cmp(&kb).then_with(|| {
                let (a, b) = ids();
                a.as_bytes().cmp(b.as_bytes())
            });
            flip(by_bytes, *reverse)
        }
        SortKey::Random { reverse, .. } | SortKey::Dimension { reverse, .. } => match (va, vb) {
            (Some(x), Some(y)) => flip(x.partial_cmp(y).unwrap_or(Ordering::Equal), *reverse),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        },
    }
}

/// The whole order: `keys` in turn, then the default order.
fn by_keys(
    keys: &[SortKey],
    (ha, va): (&Hit, &[Option<KeyVal>]),
    (hb, vb): (&Hit, &[Option<KeyVal>]),
) -> Ordering {
    for (j, key) in keys.iter().enumerate() {
        let a = (ha.exact, ha.r, ha.id_key, &va[j]);
        let b = (hb.exact, hb.r, hb.id_key, &vb[j]);
        let ord = by_key(key, a, b, || (&ha.id, &hb.id));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    default_order(ha, hb)
}

/// Sorts `hits` by `keys`, then the default order. With `keep`, only the first `keep`
/// hits of that order are wanted: they are selected (linear time), sorted, and the
/// others dropped. Without keys, `hits` are taken to be in the default order already
/// (evaluation's `Want::Sorted`).
pub fn sort_hits(snap: &Snapshot, hits: &mut Vec<Hit>, keys: &[SortKey], keep: Option<usize>) {
    if keys.is_empty() {
        if let Some(k) = keep {
            hits.truncate(k);
        }
        return;
    }
    // each hit's key values, computed once: hit i's are `vals[i * n..][..n]`
    let n = keys.len();
    let vals: Vec<Option<KeyVal>> = hits
        .par_iter()
        .flat_map_iter(|h| keys.iter().map(|k| value_of(snap, k, h.doc, || &h.id)))
        .collect();
    let of = |i: u32| {
        let i = i as usize;
        (&hits[i], &vals[i * n..][..n])
    };
    let cmp = |&a: &u32, &b: &u32| by_keys(keys, of(a), of(b));
    let mut order: Vec<u32> = (0..hits.len() as u32).collect();
    match keep {
        Some(k) if k < order.len() => {
            if let Some(last) = k.checked_sub(1) {
                order.select_nth_unstable_by(last, cmp);
            }
            order.truncate(k);
            order.sort_unstable_by(cmp);
        }
        _ => order.par_sort_unstable_by(cmp),
    }
    let sorted: Vec<Hit> = order.iter().map(|&i| hits[i as usize].clone()).collect();
    *hits = sorted;
}

/// A kept result and its key values, ordered by `by_keys` (a max-heap's top is the
/// worst kept).
struct Kept<'s> {
    keys: &'s [SortKey],
    hit: Hit,
    vals: Box<[Option<KeyVal>]>,
}

impl PartialEq for Kept<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Kept<'_> {}
impl PartialOrd for Kept<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kept<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        by_keys(
            self.keys,
            (&self.hit, &self.vals),
            (&other.hit, &other.vals),
        )
    }
}

/// The first `k` results in a `sortBy` order as a scan offers them (`Want::TopBy`), and
/// the counts: a result is made a `Hit` (its id cloned, a read of its row) only when
/// kept, and compared with the worst kept one key at a time, each key's value found
/// only when the keys before it tie — from the chunk's column for a lone number,
/// element or point; the row is read only for a random key, an id key whose ids tie on
/// their first 8 bytes, or a tie on every key (a read per result cost 90% of a
/// 580k-result sort by price). `sort_hits` with `keep` gives the same page (property
/// test).
pub(crate) struct SortTop<'s> {
    snap: &'s Snapshot,
    keys: &'s [SortKey],
    k: usize,
    heap: BinaryHeap<Kept<'s>>,
    tally: Tally,
    /// The offered result's key values found so far; its buffer serves offer after
    /// offer until a result is kept.
    scratch: Vec<Option<KeyVal>>,
}

impl<'s> SortTop<'s> {
    pub(crate) fn new(snap: &'s Snapshot, keys: &'s [SortKey], k: usize, matched: bool) -> Self {
        SortTop {
            snap,
            keys,
            k,
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
            tally: Tally::new(matched),
            scratch: Vec::new(),
        }
    }

    fn keep(&mut self, kept: Kept<'s>) {
        if self.heap.len() == self.k {
            self.heap.pop();
        }
        self.heap.push(kept);
    }

    pub(crate) fn into_results(self, ctx: crate::criteria::EvalCtx) -> Results {
        let hits = self.heap.into_sorted_vec().into_iter().map(|k| k.hit);
        self.tally.into_results(hits.collect(), ctx)
    }
}

impl Sink for SortTop<'_> {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        self.tally.add(n, exact);
        if self.k == 0 {
            return;
        }
        let (snap, keys) = (self.snap, self.keys);
        self.scratch.clear();
        let better = match self.heap.peek() {
            Some(w) if self.heap.len() == self.k => {
                let mut ord = Ordering::Equal;
                for (j, key) in keys.iter().enumerate() {
                    let v = value_of(snap, key, n, || &doc.id);
                    let this = (exact, r, id_key, &v);
                    let worst = (w.hit.exact, w.hit.r, w.hit.id_key, &w.vals[j]);
                    ord = by_key(key, this, worst, || (&doc.id, &w.hit.id));
                    self.scratch.push(v);
                    if ord != Ordering::Equal {
                        break;
                    }
                }
                if ord == Ordering::Equal {
                    let worst = (w.hit.exact, w.hit.r, w.hit.id_key);
                    ord = order_parts((exact, r, id_key), worst, || (&doc.id, &w.hit.id));
                }
                ord == Ordering::Less
            }
            _ => true,
        };
        if !better {
            return;
        }
        for key in &keys[self.scratch.len()..] {
            self.scratch.push(value_of(snap, key, n, || &doc.id));
        }
        let vals = std::mem::take(&mut self.scratch).into_boxed_slice();
        let hit = Hit::keyed(n, doc, id_key, exact, r);
        self.keep(Kept { keys, hit, vals });
    }

    fn merge(mut self, other: Self) -> Self {
        self.tally.absorb(other.tally);
        for kept in other.heap {
            let better = self.heap.len() < self.k
                || self
                    .heap
                    .peek()
                    .is_some_and(|w| kept.cmp(w) == Ordering::Less);
            if better {
                self.keep(kept);
            }
        }
        self
    }
}

fn flip(o: Ordering, reverse: bool) -> Ordering {
    if reverse {
        o.reverse()
    } else {
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{evaluate, Filter};
    use crate::hits::Want;
    use crate::test_support::put_strings;
    use crate::{parse_query, IndexWriter};
    use discern_model::Record;
    use proptest::prelude::*;
    use serde_json::json;
    use std::sync::Arc;

    const DIMS: &[u8] = b"<dimensions>
      <dimension id='k' type='keyword'/>
      <dimension id='n' type='integer'/>
      <dimension id='g' type='geoloc' latitude='lat' longitude='lon'/>
      <dimension id='t' type='tree'>
        <element id='A'><element id='A1'/><element id='A2'/></element>
        <element id='B'/>
      </dimension>
    </dimensions>";

    type DocSpec = (Vec<usize>, Vec<i64>, Option<(i64, i64)>, Vec<usize>);

    fn snapshot(docs: &[DocSpec]) -> Snapshot {
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        for (i, (kw, nums, pt, els)) in docs.iter().enumerate() {
            let mut rec = Record::default();
            put_strings(
                &mut rec,
                "k",
                kw.iter().map(|k| ["a", "b", "c"][*k].into()).collect(),
            );
            put_strings(&mut rec, "n", nums.iter().map(|x| x.to_string()).collect());
            // one element: the column's; several: the row's side of the rule
            let els = els.iter().map(|e| ["A", "A1", "A2", "B"][*e].into());
            put_strings(&mut rec, "t", els.collect());
            if let Some((la, lo)) = pt {
                put_strings(
                    &mut rec,
                    "lat",
                    vec![format!("{}", 40.0 + *la as f64 / 10.0)],
                );
                put_strings(
                    &mut rec,
                    "lon",
                    vec![format!("{}", -75.0 + *lo as f64 / 10.0)],
                );
            }
            // ids out of doc-number order
            b.upsert(&format!("i{:04}", (i * 37) % 1000), &rec);
        }
        b.commit()
    }

    /// Without sort keys the results stay in evaluation's order, and `keep` still
    /// drops all but the first (found by the query fuzz target with `{}`).
    #[test]
    fn without_keys_the_kept_page_is_the_first_results() {
        let docs: Vec<DocSpec> = (0..20)
            .map(|i| (vec![i % 3], vec![i as i64 % 4], None, vec![]))
            .collect();
        let snap = snapshot(&docs);
        let body = json!({"criteria": [{"dimension": "n", "value": 2}]});
        let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
        let filter = Filter {
            items: None,
            not_items: None,
            exact_only: false,
        };
        let all = evaluate(&snap, &mut q.criteria, &filter, Want::Sorted).hits;
        assert_eq!(all.len(), 20);
        for keep in [None, Some(0), Some(5), Some(20), Some(30)] {
            let mut hits = all.clone();
            sort_hits(&snap, &mut hits, &q.sort, keep);
            let ids = |h: &[Hit]| h.iter().map(|h| h.doc).collect::<Vec<u32>>();
            let n = keep.unwrap_or(usize::MAX).min(all.len());
            assert_eq!(ids(&hits), ids(&all[..n]), "keeping {keep:?}");
        }
    }

    /// A text dimension sorts by its words: the index holds them as numbers in the
    /// order first met, which is not the words' order.
    #[test]
    fn text_sorts_by_its_words() {
        let dims = Arc::new(
            Dimensions::parse(b"<dimensions><dimension id='x' type='text'/></dimensions>").unwrap(),
        );
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        for (id, words) in [("z", "zebra crossing"), ("a", "apple tree"), ("m", "mango")] {
            let mut rec = Record::default();
            put_strings(&mut rec, "x", vec![words.into()]);
            b.upsert(id, &rec);
        }
        let snap = b.commit();
        let order = |reverse: bool| {
            let body = json!({"sortBy": [{"dimension": "x", "reverse": reverse}]});
            let mut q = parse_query(&body, &snap.dims, 10).unwrap();
            let filter = Filter {
                items: None,
                not_items: None,
                exact_only: false,
            };
            let mut r = evaluate(&snap, &mut q.criteria, &filter, Want::All);
            sort_hits(&snap, &mut r.hits, &q.sort, None);
            r.hits.iter().map(|h| h.id.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(order(false), ["a", "m", "z"]);
        assert_eq!(order(true), ["z", "m", "a"]);
    }

    /// The builtin id key orders by the ids' bytes: by their 8-byte keys first, then,
    /// where those tie, by the whole ids.
    #[test]
    fn id_sorts_by_the_ids_bytes() {
        let dims = Arc::new(
            Dimensions::parse(b"<dimensions><dimension id='x' type='keyword'/></dimensions>")
                .unwrap(),
        );
        let ids = [
            "b",
            "abcdefgh1",
            "a",
            "abcdefgh0",
            "abcdefg",
            "ab\u{e9}",
            "abcdefgh",
        ];
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        for id in ids {
            let mut rec = Record::default();
            put_strings(&mut rec, "x", vec!["v".into()]);
            b.upsert(id, &rec);
        }
        let snap = b.commit();
        let filter = Filter {
            items: None,
            not_items: None,
            exact_only: false,
        };
        for reverse in [false, true] {
            let body = json!({
                "criteria": [{"dimension": "x", "id": "v", "cull": true}],
                "sortBy": [{"builtin": "id", "reverse": reverse}],
            });
            let mut expected: Vec<&str> = ids.to_vec();
            expected.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            if reverse {
                expected.reverse();
            }
            let names = |hits: &[Hit]| hits.iter().map(|h| h.id.to_string()).collect::<Vec<_>>();
            let mut q = parse_query(&body, &snap.dims, 10).unwrap();
            let mut all = evaluate(&snap, &mut q.criteria, &filter, Want::All);
            sort_hits(&snap, &mut all.hits, &q.sort, None);
            assert_eq!(names(&all.hits), expected);
            for k in [1, 3, ids.len()] {
                let want = Want::TopBy {
                    k,
                    keys: &q.sort,
                    matched: false,
                };
                let top = evaluate(&snap, &mut q.criteria, &filter, want);
                assert_eq!(names(&top.hits), expected[..k]);
            }
        }
    }

    fn sort_key() -> impl Strategy<Value = serde_json::Value> {
        (0usize..8, any::<bool>()).prop_map(|(k, reverse)| match k {
            0 => json!({"dimension": "k", "reverse": reverse}),
            6 => json!({"dimension": "t", "reverse": reverse}),
            1 => json!({"dimension": "n", "reverse": reverse}),
            2 => {
                json!({"dimension": "g", "latitude": 40.0, "longitude": -75.0, "reverse": reverse})
            }
            3 => json!({"builtin": "relevance", "reverse": reverse}),
            4 => json!({"builtin": "random", "seed": 7, "reverse": reverse}),
            7 => json!({"builtin": "id", "reverse": reverse}),
            _ => json!({"builtin": "exactMatch", "reverse": reverse}),
        })
    }

    proptest! {
        /// Keeping the first `k` of the order selects exactly the first `k` a full sort
        /// gives, in the same order (ties, missing values and reversed keys included).
        #[test]
        fn kept_prefix_equals_full_sort(
            docs in prop::collection::vec(
                (
                    prop::collection::vec(0usize..3, 0..3),
                    prop::collection::vec(-3i64..4, 0..3),
                    prop::option::of((-5i64..5, -5i64..5)),
                    prop::collection::vec(0usize..4, 0..3),
                ),
                1..80,
            ),
            keys in prop::collection::vec(sort_key(), 1..4),
            k in 0usize..90,
            from_set in any::<bool>(),
        ) {
            let snap = snapshot(&docs);
            // a culled keyword's results are its set (`exact::from_set`), a range's
            // are scored (`eval::scan`)
            let criterion = if from_set {
                json!({"dimension": "k", "id": "a", "cull": true})
            } else {
                json!({"dimension": "n", "value": "[0,2]"})
            };
            let body = json!({
                "criteria": [criterion],
                "sortBy": keys,
            });
            let filter = Filter { items: None, not_items: None, exact_only: false };
            let hits = |keep: Option<usize>| {
                let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
                let mut r = evaluate(&snap, &mut q.criteria, &filter, Want::All);
                sort_hits(&snap, &mut r.hits, &q.sort, keep);
                r.hits.iter().map(|h| h.doc).collect::<Vec<u32>>()
            };
            let full = hits(None);
            let mut distinct = full.clone();
            distinct.sort_unstable();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), full.len());
            let kept = hits(Some(k));
            prop_assert_eq!(&kept[..], &full[..k.min(full.len())]);
            // evaluated for the page alone: the same page, the same counts and matches
            let all = {
                let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
                evaluate(&snap, &mut q.criteria, &filter, Want::All)
            };
            let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
            let want = Want::TopBy { k, keys: &q.sort, matched: true };
            let top = evaluate(&snap, &mut q.criteria, &filter, want);
            let page: Vec<u32> = top.hits.iter().map(|h| h.doc).collect();
            prop_assert_eq!(&page[..], &full[..k.min(full.len())]);
            prop_assert_eq!((top.total, top.exact_count), (all.total, all.exact_count));
            let matched = top.matched.expect("asked for");
            let expect = crate::hits::Matched::of_hits(&all.hits);
            prop_assert_eq!(&matched.exact, &expect.exact);
            prop_assert_eq!(&matched.other, &expect.other);
            // a column gives what the row gives, to the bit
            let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
            let r = evaluate(&snap, &mut q.criteria, &filter, Want::All);
            let from = Some((GeoPoint::new(40.0, -75.0), Unit::Miles));
            for h in &r.hits {
                for dim in 0..snap.dims.len() {
                    if let Some(col) = column_key(&snap, h.doc, dim, from) {
                        let row = row_key(&snap, h.doc, dim, false, from);
                        let bits = |k: &Option<KeyVal>| match k {
                            Some(KeyVal::Num(x)) => Some(x.to_bits()),
                            _ => None,
                        };
                        prop_assert_eq!(bits(&col), bits(&row));
                        prop_assert_eq!(col.is_some(), row.is_some());
                    }
                }
            }
        }
    }
}
