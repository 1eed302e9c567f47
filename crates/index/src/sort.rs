//! `sortBy` (SPEC §7.6): keys applied in order, the default order breaking ties.

use std::cmp::Ordering;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue};
use discern_model::Result;
use serde_json::Value as J;

use crate::eval::{default_order, Hit};
use crate::geo::{haversine, Unit};
use crate::query::{as_bool, as_f64, as_str, bad, member};
use crate::Snapshot;

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
    let v = snap.doc(hit.doc)?.values.get(dim)?.as_ref()?;
    let pick = |xs: &mut dyn Iterator<Item = f64>| -> Option<f64> {
        let it = xs.filter(|x| !x.is_nan());
        if descending {
            it.fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        } else {
            it.fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
        }
    };
    match v {
        IndexedValue::Ints(xs) => pick(&mut xs.iter().map(|x| *x as f64)).map(KeyVal::Num),
        IndexedValue::Doubles(xs) => pick(&mut xs.iter().copied()).map(KeyVal::Num),
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
    }
}

/// Sorts `hits` by `keys`, then the default order.
pub fn sort_hits(snap: &Snapshot, hits: &mut [Hit], keys: &[SortKey]) {
    if keys.is_empty() {
        return;
    }
    // precompute dimension and random keys once per hit
    let mut dim_vals: Vec<Vec<Option<KeyVal>>> = Vec::with_capacity(keys.len());
    let mut order: Vec<usize> = (0..hits.len()).collect();
    for k in keys {
        dim_vals.push(match k {
            SortKey::Dimension { dim, reverse, from } => hits
                .iter()
                .map(|h| key_value(snap, h, *dim, *reverse, *from))
                .collect(),
            SortKey::Random { seed, .. } => hits
                .iter()
                .map(|h| Some(KeyVal::Num(mix(*seed, &h.id) as f64)))
                .collect(),
            _ => Vec::new(),
        });
    }
    order.sort_by(|&a, &b| {
        for (k, vals) in keys.iter().zip(&dim_vals) {
            let (ha, hb) = (&hits[a], &hits[b]);
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
        default_order(&hits[a], &hits[b])
    });
    let sorted: Vec<Hit> = order.into_iter().map(|i| hits[i].clone()).collect();
    hits.clone_from_slice(&sorted);
}

fn flip(o: Ordering, reverse: bool) -> Ordering {
    if reverse {
        o.reverse()
    } else {
        o
    }
}
