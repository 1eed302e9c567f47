//! `sortBy` (SPEC §7.6): keys applied in order, the default order breaking ties.

use std::cmp::Ordering;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue};
use discern_model::Result;
use rayon::prelude::*;
use serde_json::Value as J;

use crate::columns::ColValue;
use crate::eval::{default_order, Hit};
use crate::geo::{haversine, haversine_pre, GeoPoint, Unit};
use crate::query::{as_bool, as_f64, as_str, bad, member};
use crate::{Snapshot, CHUNK};

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
        from: Option<(f64, f64, Unit)>,
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
            Some((
                as_f64(lat, &format!("{path}.latitude"))?,
                as_f64(lon, &format!("{path}.longitude"))?,
                unit,
            ))
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
    hit: &Hit,
    dim: usize,
    descending: bool,
    from: Option<(f64, f64, Unit)>,
) -> Option<KeyVal> {
    match column_key(snap, hit, dim, from) {
        Some(k) => k,
        None => row_key(snap, hit, dim, descending, from),
    }
}

/// `key_value` for a document with at most one value, from its chunk's column — no
/// pointer chase to the row; `None` when the row must be read.
fn column_key(
    snap: &Snapshot,
    hit: &Hit,
    dim: usize,
    from: Option<(f64, f64, Unit)>,
) -> Option<Option<KeyVal>> {
    let (c, i) = (hit.doc as usize / CHUNK, hit.doc as usize % CHUNK);
    Some(match snap.chunk_cols(c)?.get(dim, i)? {
        ColValue::Num(x) => x.map(KeyVal::Num),
        ColValue::Elem(e) => e.map(|e| KeyVal::Num(e as f64)),
        ColValue::Point(p) => {
            let (lat, lon, unit) = from?;
            // bit for bit the row's haversine: the column holds GeoPoint::new(lat, lon)
            p.map(|(_, p)| haversine_pre(&GeoPoint::new(lat, lon), &p, unit))
                .filter(|d| !d.is_nan())
                .map(KeyVal::Num)
        }
        ColValue::Present(_) => return None,
    })
}

/// `key_value` from the document's row.
fn row_key(
    snap: &Snapshot,
    hit: &Hit,
    dim: usize,
    descending: bool,
    from: Option<(f64, f64, Unit)>,
) -> Option<KeyVal> {
    // (text as its words: `shown_value` turns a document's token numbers back)
    let shown = snap.shown_value(hit.doc, dim)?;
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
            let (lat, lon, unit) = from?;
            pick(&mut ps.iter().map(|(a, b)| haversine(lat, lon, *a, *b, unit))).map(KeyVal::Num)
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

/// Sorts `hits` by `keys`, then the default order. With `keep`, only the first `keep`
/// hits of that order are wanted: they are selected (linear time), sorted, and the
/// others dropped.
pub fn sort_hits(snap: &Snapshot, hits: &mut Vec<Hit>, keys: &[SortKey], keep: Option<usize>) {
    if keys.is_empty() {
        return;
    }
    // each hit's dimension and random keys, computed once
    let dim_vals: Vec<Vec<Option<KeyVal>>> = keys
        .iter()
        .map(|k| match k {
            SortKey::Dimension { dim, reverse, from } => hits
                .par_iter()
                .map(|h| key_value(snap, h, *dim, *reverse, *from))
                .collect(),
            SortKey::Random { seed, .. } => hits
                .par_iter()
                .map(|h| Some(KeyVal::Num(mix(*seed, &h.id) as f64)))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    // a total order: the default order ends every tie (ids are unique)
    let cmp = |&a: &u32, &b: &u32| {
        let (a, b) = (a as usize, b as usize);
        let (ha, hb) = (&hits[a], &hits[b]);
        for (k, vals) in keys.iter().zip(&dim_vals) {
            let ord = match k {
                SortKey::Exact { reverse } => flip(hb.exact.cmp(&ha.exact), *reverse),
                SortKey::Relevance { reverse } => {
                    flip(hb.r.partial_cmp(&ha.r).unwrap_or(Ordering::Equal), *reverse)
                }
                SortKey::Id { reverse } => flip(ha.id.as_bytes().cmp(hb.id.as_bytes()), *reverse),
                SortKey::Random { reverse, .. } | SortKey::Dimension { reverse, .. } => {
                    match (&vals[a], &vals[b]) {
                        (Some(x), Some(y)) => {
                            flip(x.partial_cmp(y).unwrap_or(Ordering::Equal), *reverse)
                        }
                        (Some(_), None) => Ordering::Less,
                        (None, Some(_)) => Ordering::Greater,
                        (None, None) => Ordering::Equal,
                    }
                }
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        default_order(ha, hb)
    };
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
    use crate::eval::{evaluate, Filter, Want};
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

    fn sort_key() -> impl Strategy<Value = serde_json::Value> {
        (0usize..7, any::<bool>()).prop_map(|(k, reverse)| match k {
            0 => json!({"dimension": "k", "reverse": reverse}),
            6 => json!({"dimension": "t", "reverse": reverse}),
            1 => json!({"dimension": "n", "reverse": reverse}),
            2 => {
                json!({"dimension": "g", "latitude": 40.0, "longitude": -75.0, "reverse": reverse})
            }
            3 => json!({"builtin": "relevance", "reverse": reverse}),
            4 => json!({"builtin": "random", "seed": 7, "reverse": reverse}),
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
        ) {
            let snap = snapshot(&docs);
            let body = json!({
                "criteria": [{"dimension": "n", "value": "[0,2]"}],
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
            // a column gives what the row gives, to the bit
            let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
            let r = evaluate(&snap, &mut q.criteria, &filter, Want::All);
            let from = Some((40.0, -75.0, Unit::Miles));
            for h in &r.hits {
                for dim in 0..snap.dims.len() {
                    if let Some(col) = column_key(&snap, h, dim, from) {
                        let row = row_key(&snap, h, dim, false, from);
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
