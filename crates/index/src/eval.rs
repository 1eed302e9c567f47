//! Evaluation of a request over a snapshot: per item exactness and relevance, culling,
//! the default order (exact first, relevance descending, id ascending).

use std::collections::HashSet;
use std::sync::Arc;

use discern_dimensions::{DimensionKind, IndexedValue};
use rayon::prelude::*;

use crate::criteria::{Criterion, EvalCtx, Matcher, Node, WeightedMean};
use crate::Snapshot;

#[derive(Clone, Debug)]
pub struct Hit {
    pub doc: u32,
    pub id: Arc<str>,
    pub exact: bool,
    pub r: f64,
}

pub struct Results {
    /// Every result; in the default order when `evaluate` was asked to sort.
    pub hits: Vec<Hit>,
    pub exact_count: usize,
    ctx: EvalCtx,
}

impl Results {
    /// Per top-level criterion (exact, relevance) of one result (`explain`).
    pub fn explain(&self, snap: &Snapshot, criteria: &[Criterion], doc: u32) -> Vec<(bool, f64)> {
        let Some(d) = snap.doc(doc) else {
            return Vec::new();
        };
        criteria
            .iter()
            .map(|c| {
                let o = c.eval(&d.values, doc, &self.ctx);
                (o.exact, o.r)
            })
            .collect()
    }
}

/// The dimensions the criteria name (for per-type statistics).
pub fn criteria_dims(criteria: &[Criterion], out: &mut Vec<usize>) {
    for c in criteria {
        match &c.node {
            Node::Group { children, .. } => criteria_dims(children, out),
            Node::Leaf(leaf) => out.extend(leaf.dim),
        }
    }
}

/// Every text criterion's (dimension, field index, terms), for highlighting and
/// `explain: textTokens`.
pub fn text_terms(criteria: &[Criterion]) -> Vec<(usize, usize, Vec<String>)> {
    let mut out = Vec::new();
    for c in criteria {
        match &c.node {
            Node::Group { children, .. } => out.extend(text_terms(children)),
            Node::Leaf(leaf) => {
                if let (Matcher::Text(t), Some(d)) = (&leaf.matcher, leaf.dim) {
                    for (fi, terms) in t.field_terms() {
                        out.push((d, fi, terms.to_vec()));
                    }
                }
            }
        }
    }
    out
}

fn prepare(criteria: &mut [Criterion], snap: &Snapshot, scales: &mut Vec<f64>) {
    for c in criteria {
        match &mut c.node {
            Node::Group { children, .. } => prepare(children, snap, scales),
            Node::Leaf(leaf) => match (&mut leaf.matcher, leaf.dim) {
                (Matcher::Text(t), Some(d)) => t.prepare(snap, d),
                (Matcher::Numeric { scale, .. }, Some(d)) if *scale <= 0.0 && scales[d] == 0.0 => {
                    scales[d] = default_scale(snap, d);
                }
                _ => {}
            },
        }
    }
}

/// `max(span, 1) / 10`, span = declared `max − min`, else the observed span.
fn default_scale(snap: &Snapshot, dim: usize) -> f64 {
    let declared = match &snap.dims.dims[dim].kind {
        DimensionKind::Numeric(spec) => spec.declared_span,
        _ => None,
    };
    let span = declared.unwrap_or_else(|| {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for d in snap.docs() {
            match d.values.get(dim).and_then(|v| v.as_ref()) {
                Some(IndexedValue::Ints(xs)) => xs.iter().for_each(|x| {
                    lo = lo.min(*x as f64);
                    hi = hi.max(*x as f64);
                }),
                Some(IndexedValue::Doubles(xs)) => xs.iter().for_each(|x| {
                    lo = lo.min(*x);
                    hi = hi.max(*x);
                }),
                _ => {}
            }
        }
        if hi >= lo {
            hi - lo
        } else {
            0.0
        }
    });
    span.max(1.0) / 10.0
}

/// Calls `f` on every text matcher in the criteria tree.
fn for_each_text(criteria: &mut [Criterion], f: &mut dyn FnMut(&mut crate::text::TextMatcher)) {
    for c in criteria {
        match &mut c.node {
            Node::Group { children, .. } => for_each_text(children, f),
            Node::Leaf(leaf) => {
                if let Matcher::Text(t) = &mut leaf.matcher {
                    f(t);
                }
            }
        }
    }
}

fn item_outcome(
    criteria: &[Criterion],
    values: &[Option<IndexedValue>],
    n: u32,
    ctx: &EvalCtx,
) -> Option<(bool, f64)> {
    if criteria.is_empty() {
        return Some((true, 1.0));
    }
    let mut exact = true;
    let mut mean = WeightedMean::default();
    for cr in criteria {
        let o = cr.eval(values, n, ctx);
        if o.culled {
            return None;
        }
        exact &= o.exact;
        mean.add(cr.weight, o.r);
    }
    Some((exact, mean.value()))
}

pub struct Filter<'a> {
    pub items: Option<&'a HashSet<String>>,
    pub not_items: Option<&'a HashSet<String>>,
    pub exact_only: bool,
}

/// Evaluates `criteria` for every item of `snap`.
pub fn evaluate(
    snap: &Snapshot,
    criteria: &mut [Criterion],
    filter: &Filter<'_>,
    sort: bool,
) -> Results {
    let mut scales = vec![0.0; snap.dims.len()];
    prepare(criteria, snap, &mut scales);
    let ctx = EvalCtx { scales };
    let frozen: &[Criterion] = criteria;
    let chunks = snap.chunks();
    let mut hits: Vec<Hit> = chunks
        .par_iter()
        .enumerate()
        .flat_map_iter(|(c, chunk)| {
            let ctx = &ctx;
            chunk.docs.iter().enumerate().filter_map(move |(i, slot)| {
                let doc = slot.as_ref()?;
                if let Some(items) = filter.items {
                    if !items.contains(&*doc.id) {
                        return None;
                    }
                }
                if let Some(not) = filter.not_items {
                    if not.contains(&*doc.id) {
                        return None;
                    }
                }
                let n = (c * crate::CHUNK + i) as u32;
                let (exact, r) = item_outcome(frozen, &doc.values, n, ctx)?;
                let is_result = exact || r > 0.0;
                if !is_result || (filter.exact_only && !exact) {
                    return None;
                }
                Some(Hit {
                    doc: n,
                    id: doc.id.clone(),
                    exact,
                    r,
                })
            })
        })
        .collect();
    // Text relevance is graded against the best score among the results: now that
    // culling is known, regrade (membership and exactness do not change).
    let mut has_text = false;
    for_each_text(criteria, &mut |t| {
        has_text = true;
        t.set_max_over(hits.iter().map(|h| h.doc));
    });
    if has_text {
        let criteria: &[Criterion] = criteria;
        hits.par_iter_mut().for_each(|h| {
            if let Some(doc) = snap.doc(h.doc) {
                if let Some((_, r)) = item_outcome(criteria, &doc.values, h.doc, &ctx) {
                    h.r = r;
                }
            }
        });
    }
    if sort {
        hits.par_sort_unstable_by(default_order);
    }
    let exact_count = hits.iter().filter(|h| h.exact).count();
    Results {
        hits,
        exact_count,
        ctx,
    }
}

pub fn default_order(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    b.exact
        .cmp(&a.exact)
        .then_with(|| b.r.partial_cmp(&a.r).unwrap_or(std::cmp::Ordering::Equal))
        .then_with(|| a.id.as_bytes().cmp(b.id.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_query, IndexWriter};
    use discern_dimensions::Dimensions;
    use discern_model::{Record, Value};

    fn rec(pairs: &[(&str, &str)]) -> Record {
        Record(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Value::Str(v.to_string())))
                .collect(),
        )
    }

    /// §7.2 text: g is graded against the best score among the results, so an item the
    /// query culls cannot lower everyone else's relevance.
    #[test]
    fn text_grading_uses_best_result_after_culling() {
        let dims = Dimensions::parse(
            b"<dimensions><dimension id='k' type='keyword'/><dimension id='t' type='text' stopWords=''/></dimensions>",
        )
        .unwrap();
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(std::sync::Arc::new(dims)));
        b.upsert("a", &rec(&[("k", "x"), ("t", "alpha dog")]));
        b.upsert("b", &rec(&[("k", "x"), ("t", "alpha cat")]));
        // the best text match, but culled by the keyword criterion
        b.upsert("c", &rec(&[("t", "alpha alpha")]));
        let snap = b.commit();
        let body = serde_json::json!({"criteria": [
            {"dimension": "k", "cull": true},
            {"dimension": "t", "value": "alpha"}
        ]});
        let mut q = parse_query(&body, &snap.dims, 100).unwrap();
        let filter = Filter {
            items: None,
            not_items: None,
            exact_only: false,
        };
        let res = evaluate(&snap, &mut q.criteria, &filter, true);
        let got: Vec<(&str, f64)> = res.hits.iter().map(|h| (&*h.id, h.r)).collect();
        assert_eq!(got, vec![("a", 1.0), ("b", 1.0)]);
    }
}
