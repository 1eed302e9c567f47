//! Facets and the legacy drillDown (SPEC §7.5): bucket counts over the query's results.

use std::sync::OnceLock;

use discern_dimensions::{Dimension, DimensionKind, Dimensions};
use discern_model::Result;
use serde_json::{json, Map, Value as J};

use rayon::prelude::*;

use crate::hits::Matched;
use crate::query::{as_str, as_usize, bad, flag, member, switch, text_of};
use crate::Snapshot;

mod count;

use count::{bucket_counts, Counted, Counts, Shown};

#[derive(Clone, Copy, PartialEq)]
enum FacetSort {
    CountDesc,
    CountAsc,
    LabelAsc,
    LabelDesc,
    IdAsc,
    Document,
}

pub struct FacetRequest {
    key: String,
    dim: usize,
    top_n: Option<usize>,
    min_count: usize,
    sort: FacetSort,
    include_label: bool,
    include_bounds: bool,
    count_total: bool,
    data_ids: Option<Vec<String>>,
    root: Option<u32>,
    depth: usize,
}

pub struct DrillDown {
    dim: usize,
    ids: Option<Vec<String>>,
}

/// An optional array of bucket ids (numbers accepted as their text).
fn id_list(v: Option<&J>, path: &str) -> Result<Option<Vec<String>>> {
    match v {
        None => Ok(None),
        Some(J::Array(a)) => Ok(Some(a.iter().map(text_of).collect())),
        Some(other) => Err(bad(path, format!("expected an array of ids, got {other}"))),
    }
}

pub fn parse_facets(v: &J, dims: &Dimensions) -> Result<Vec<FacetRequest>> {
    let J::Object(m) = v else {
        return Err(bad(
            "facets",
            format!("expected an object of facet criteria, got {v}"),
        ));
    };
    let mut out = Vec::new();
    for (key, spec) in m {
        let path = format!("facets.{key}");
        let empty = Map::new();
        let obj = match spec {
            J::Object(o) => o,
            J::Null => &empty,
            other => return Err(bad(&path, format!("expected a facet object, got {other}"))),
        };
        let dim_id = match member(obj, "dimension") {
            Some(d) => as_str(d, &format!("{path}.dimension"))?.to_string(),
            None => key.clone(),
        };
        let dim = dims.index_of(&dim_id).ok_or_else(|| {
            bad(
                &format!("{path}.dimension"),
                format!("unknown dimension {dim_id:?}"),
            )
        })?;
        let p = |n: &str| format!("{path}.{n}");
        let sort = match member(obj, "sortBy") {
            None => FacetSort::CountDesc,
            Some(s) => match as_str(s, &p("sortBy"))? {
                "countDesc" => FacetSort::CountDesc,
                "countAsc" => FacetSort::CountAsc,
                "labelAsc" => FacetSort::LabelAsc,
                "labelDesc" => FacetSort::LabelDesc,
                "idAsc" => FacetSort::IdAsc,
                "document" => FacetSort::Document,
                other => return Err(bad(&p("sortBy"), format!("unknown facet order {other:?}"))),
            },
        };
        let count_total = switch(obj, "countType", &path, ("exact", "total"))?;
        let data_ids = id_list(member(obj, "dataIds"), &p("dataIds"))?;
        let root = match member(obj, "rootId") {
            None => None,
            Some(r) => {
                let id = as_str(r, &p("rootId"))?;
                let set = dims.dims[dim]
                    .kind
                    .elements()
                    .ok_or_else(|| bad(&p("rootId"), "rootId needs a tree dimension"))?;
                Some(
                    *set.by_id
                        .get(id)
                        .ok_or_else(|| bad(&p("rootId"), format!("unknown element {id:?}")))?,
                )
            }
        };
        out.push(FacetRequest {
            key: key.clone(),
            dim,
            top_n: member(obj, "topN")
                .map(|v| as_usize(v, &p("topN")))
                .transpose()?,
            min_count: member(obj, "minCount")
                .map(|v| as_usize(v, &p("minCount")))
                .transpose()?
                .unwrap_or(1),
            sort,
            include_label: flag(obj, "includeLabel", &path, true)?,
            include_bounds: flag(obj, "includeBounds", &path, false)?,
            count_total,
            data_ids,
            root,
            depth: member(obj, "depth")
                .map(|v| as_usize(v, &p("depth")))
                .transpose()?
                .unwrap_or(0)
                .min(64),
        });
    }
    Ok(out)
}

pub fn parse_drill_down(v: &J, dims: &Dimensions) -> Result<Vec<DrillDown>> {
    let J::Array(a) = v else {
        return Err(bad("drillDown", format!("expected an array, got {v}")));
    };
    a.iter()
        .enumerate()
        .map(|(i, d)| {
            let path = format!("drillDown[{i}]");
            let J::Object(o) = d else {
                return Err(bad(&path, "expected an object"));
            };
            let id = as_str(
                member(o, "dimension").ok_or_else(|| bad(&path, "dimension is required"))?,
                &format!("{path}.dimension"),
            )?;
            let dim = dims.index_of(id).ok_or_else(|| {
                bad(
                    &format!("{path}.dimension"),
                    format!("unknown dimension {id:?}"),
                )
            })?;
            let ids = id_list(member(o, "ids"), &format!("{path}.ids"))?;
            Ok(DrillDown { dim, ids })
        })
        .collect()
}

/// A numeric dimension without ranges: its facet shows only its bounds.
fn numeric_plain(dim: &Dimension) -> bool {
    matches!(&dim.kind, DimensionKind::Numeric(s) if s.ranges.is_empty())
}

/// Element order and labels of a bucket id.
fn element_info(dim: &Dimension, id: &str) -> (Option<usize>, Option<String>) {
    match &dim.kind {
        DimensionKind::Numeric(spec) => match spec.ranges.iter().position(|r| r.id == id) {
            Some(i) => (
                Some(i),
                Some(
                    spec.ranges[i]
                        .name
                        .clone()
                        .unwrap_or_else(|| id.to_string()),
                ),
            ),
            None => (None, None),
        },
        kind => match kind
            .elements()
            .and_then(|s| s.by_id.get(id).map(|&e| (e, s)))
        {
            Some((e, s)) => {
                let el = &s.elements[e as usize];
                (
                    Some(e as usize),
                    Some(el.name.clone().unwrap_or_else(|| el.value.clone())),
                )
            }
            None => (None, None),
        },
    }
}

/// The deepest level of a tree facet's elements its response shows (top-level elements
/// are at 1); `None` for any other dimension, or when `dataIds` may name elements at
/// any depth.
fn tree_levels_shown(dim: &Dimension, r: &FacetRequest) -> Option<u32> {
    let DimensionKind::Tree(set) = &dim.kind else {
        return None;
    };
    if r.data_ids.is_some() {
        return None;
    }
    let root = r.root.and_then(|root| set.elements.get(root as usize));
    let start = root.map_or(1, |root| root.depth + 1);
    Some(start.saturating_add(u32::try_from(r.depth).unwrap_or(u32::MAX)))
}

fn bound_json(dim: &Dimension, x: f64) -> J {
    match &dim.kind {
        DimensionKind::Numeric(s) if s.whole_numbers() => {
            json!(x as i64)
        }
        _ => json!(x),
    }
}

pub fn compute_facets(snap: &Snapshot, matched: &Matched, reqs: &[FacetRequest]) -> J {
    let exact = OnceLock::new();
    let all = OnceLock::new();
    let counted_of = |total: bool| {
        if total {
            all.get_or_init(|| Counted::of(matched.all()))
        } else {
            exact.get_or_init(|| Counted::of(matched.exact.clone()))
        }
    };
    // the counting is the cost: one task per facet, across cores
    let counted: Vec<(Counts, Option<(f64, f64)>)> = reqs
        .par_iter()
        .map(|r| {
            let dim = &snap.dims.dims[r.dim];
            let shown = Shown {
                largest: r
                    .top_n
                    .filter(|_| r.sort == FacetSort::CountDesc && r.data_ids.is_none()),
                bounds: r.include_bounds || numeric_plain(dim),
                deepest: tree_levels_shown(dim, r),
            };
            bucket_counts(snap, dim, r.dim, counted_of(r.count_total), shown)
        })
        .collect();
    let mut out = Map::new();
    for (r, (counts, bounds)) in reqs.iter().zip(&counted) {
        let dim = &snap.dims.dims[r.dim];
        let mut data = Map::new();
        let label = |id: &str| element_info(dim, id).1.unwrap_or_else(|| id.to_string());
        let entry =
            |id: &str, count: usize, parent: Option<&str>, children: Option<Vec<String>>| {
                let mut e = Map::new();
                e.insert("count".into(), json!(count));
                if r.include_label {
                    e.insert("label".into(), J::String(label(id)));
                }
                if let Some(p) = parent {
                    e.insert("parentId".into(), J::String(p.to_string()));
                }
                if let Some(c) = children {
                    e.insert("childIds".into(), json!(c));
                }
                J::Object(e)
            };
        // Each bucket's sort keys are looked up once, not per comparison; with topN only
        // the first buckets are fully sorted.
        let order = |ids: Vec<(String, usize)>| -> Vec<String> {
            let by_label = matches!(r.sort, FacetSort::LabelAsc | FacetSort::LabelDesc);
            let mut keyed: Vec<(usize, Option<usize>, Option<String>, String)> = ids
                .into_iter()
                .map(|(id, count)| {
                    let (ord, lab) = element_info(dim, &id);
                    let lab = by_label.then(|| lab.unwrap_or_else(|| id.clone()));
                    (count, ord, lab, id)
                })
                .collect();
            type Keyed = (usize, Option<usize>, Option<String>, String);
            let cmp = |a: &Keyed, b: &Keyed| {
                let doc = a.1.cmp(&b.1).then_with(|| a.3.cmp(&b.3));
                match r.sort {
                    FacetSort::CountDesc => b.0.cmp(&a.0).then(doc),
                    FacetSort::CountAsc => a.0.cmp(&b.0).then(doc),
                    FacetSort::LabelAsc => a.2.cmp(&b.2).then(doc),
                    FacetSort::LabelDesc => b.2.cmp(&a.2).then(doc),
                    FacetSort::IdAsc => a.3.cmp(&b.3),
                    FacetSort::Document => doc,
                }
            };
            if let Some(n) = r.top_n {
                if n < keyed.len() {
                    if n > 0 {
                        keyed.select_nth_unstable_by(n - 1, cmp);
                    }
                    keyed.truncate(n);
                }
            }
            keyed.sort_by(cmp);
            keyed.into_iter().map(|k| k.3).collect()
        };
        let mut facet = Map::new();
        let child_ids: Vec<String> = if let Some(ids) = &r.data_ids {
            for id in ids {
                data.insert(
                    id.clone(),
                    entry(id, counts.get(id).copied().unwrap_or(0), None, None),
                );
            }
            ids.clone()
        } else if let DimensionKind::Tree(set) = &dim.kind {
            let start: Vec<u32> = match r.root {
                Some(root) => set.elements[root as usize].children.clone(),
                None => set.roots.clone(),
            };
            if let Some(root) = r.root {
                let mut nav = Vec::new();
                let mut cur = Some(root);
                while let Some(c) = cur {
                    nav.push(set.elements[c as usize].id.clone());
                    cur = set.elements[c as usize].parent;
                }
                nav.reverse();
                facet.insert("navIds".into(), json!(nav));
            }
            let ids_of = |nodes: &[u32]| -> Vec<String> {
                order(
                    nodes
                        .iter()
                        .map(|&e| {
                            let id = &set.elements[e as usize].id;
                            (id.clone(), counts.get(id).copied().unwrap_or(0))
                        })
                        .filter(|(_, n)| *n >= r.min_count)
                        .collect(),
                )
            };
            let top = ids_of(&start);
            let mut level: Vec<(String, Option<String>)> =
                top.iter().map(|id| (id.clone(), None)).collect();
            for depth in 0..=r.depth {
                let mut next = Vec::new();
                for (id, parent) in &level {
                    let e = set.by_id[id];
                    let children = if depth < r.depth {
                        Some(ids_of(&set.elements[e as usize].children))
                    } else {
                        None
                    };
                    if let Some(c) = &children {
                        next.extend(c.iter().map(|x| (x.clone(), Some(id.clone()))));
                    }
                    let n = counts.get(id).copied().unwrap_or(0);
                    data.insert(id.clone(), entry(id, n, parent.as_deref(), children));
                }
                level = next;
            }
            top
        } else {
            // element and range dimensions know every bucket (minCount 0 lists empty ones)
            let count = |id: &String| (id.clone(), counts.get(id).copied().unwrap_or(0));
            let candidates: Vec<(String, usize)> = match &dim.kind {
                DimensionKind::Numeric(spec) => spec.ranges.iter().map(|x| count(&x.id)).collect(),
                kind => match kind.elements() {
                    Some(set) => set.elements.iter().map(|e| count(&e.id)).collect(),
                    None => counts.iter().map(|(k, n)| (k.clone(), *n)).collect(),
                },
            };
            let ids = order(
                candidates
                    .into_iter()
                    .filter(|(_, n)| *n >= r.min_count)
                    .collect(),
            );
            for id in &ids {
                data.insert(
                    id.clone(),
                    entry(id, counts.get(id).copied().unwrap_or(0), None, None),
                );
            }
            ids
        };
        facet.insert("childIds".into(), json!(child_ids));
        facet.insert("data".into(), J::Object(data));
        let numeric_plain = numeric_plain(dim);
        if r.include_bounds || numeric_plain {
            if let Some((lo, hi)) = *bounds {
                facet.insert(
                    "bounds".into(),
                    json!({"min": bound_json(dim, lo), "max": bound_json(dim, hi)}),
                );
            } else if numeric_plain || r.include_bounds {
                facet.insert("bounds".into(), json!({}));
            }
        }
        out.insert(r.key.clone(), J::Object(facet));
    }
    J::Object(out)
}

pub fn compute_drill_down(snap: &Snapshot, matched: &Matched, reqs: &[DrillDown]) -> J {
    let exact_docs = Counted::of(matched.exact.clone());
    let fuzzy_docs = Counted::of(matched.other.clone());
    J::Array(
        reqs.iter()
            .map(|d| {
                let dim = &snap.dims.dims[d.dim];
                let (exact, _) = bucket_counts(snap, dim, d.dim, &exact_docs, Shown::default());
                let (fuzzy, _) = bucket_counts(snap, dim, d.dim, &fuzzy_docs, Shown::default());
                let ids: Vec<String> = match &d.ids {
                    Some(ids) => ids.clone(),
                    None => {
                        let mut all: Vec<String> = exact.keys().chain(fuzzy.keys()).cloned().collect();
                        all.sort();
                        all.dedup();
                        all
                    }
                };
                json!({
                    "dimension": dim.id,
                    "exactCounts": ids.iter().map(|i| exact.get(i).copied().unwrap_or(0)).collect::<Vec<_>>(),
                    "fuzzyCounts": ids.iter().map(|i| fuzzy.get(i).copied().unwrap_or(0)).collect::<Vec<_>>(),
                    "ids": ids,
                })
            })
            .collect(),
    )
}
