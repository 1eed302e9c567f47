//! Evaluation of a request over a snapshot: which way answers it (`exact.rs`,
//! `ranked.rs`, `reach.rs` or a scan), the criteria prepared, and the scan itself —
//! per item exactness and relevance, culling, chunk by chunk across cores, each result
//! handed to a sink (`hits.rs`).

use std::collections::HashSet;

use discern_dimensions::DimensionKind;
use rayon::prelude::*;

use crate::admit::Admit;
use crate::candidates::candidates;
use crate::criteria::{Criterion, EvalCtx, Matcher, Node};
#[cfg(test)]
use crate::criteria::{ItemRef, WeightedMean};
use crate::exact::{exact_results, from_set};
use crate::kernels::{ChunkScores, ChunkView};
use crate::ranked::ranked_results;
use crate::reach::reached_results;
use crate::sort::SortTop;
use crate::Snapshot;

use crate::hits::{default_order, stronger, Hit, Results, Sink, TopK, Want};

impl Results {
    /// Per top-level criterion (exact, relevance) of one result (`explain`).
    pub fn explain(&self, snap: &Snapshot, criteria: &[Criterion], doc: u32) -> Vec<(bool, f64)> {
        let Some(item) = snap.item(doc) else {
            return Vec::new();
        };
        criteria
            .iter()
            .map(|c| {
                let o = c.eval(&item, &self.ctx);
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

/// Prepares every criterion for evaluation, text criteria only with `text` (they score
/// every document holding a word: `ranked.rs` may not need that).
fn prepare(criteria: &mut [Criterion], snap: &Snapshot, scales: &mut Vec<f64>, text: bool) {
    for c in criteria {
        match &mut c.node {
            Node::Group { children, .. } => prepare(children, snap, scales, text),
            Node::Leaf(leaf) => match (&mut leaf.matcher, leaf.dim) {
                (Matcher::Text(t), Some(d)) if text => t.prepare(snap, d),
                (Matcher::Keyword { values, not, docs }, Some(d)) => {
                    if let Some(post) = snap.postings(d) {
                        *docs = Some((
                            post.union(values.iter().map(|v| v.as_bytes())),
                            post.union(not.iter().map(|v| v.as_bytes())),
                        ));
                    }
                }
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
    let span = declared.unwrap_or_else(|| snap.observed_span(dim).map_or(0.0, |(lo, hi)| hi - lo));
    span.max(1.0) / 10.0
}

/// Calls `f` on every text matcher in the criteria tree, with its dimension.
fn for_each_text(
    criteria: &mut [Criterion],
    f: &mut dyn FnMut(Option<usize>, &mut crate::text::TextMatcher),
) {
    for c in criteria {
        match &mut c.node {
            Node::Group { children, .. } => for_each_text(children, f),
            Node::Leaf(leaf) => {
                if let Matcher::Text(t) = &mut leaf.matcher {
                    f(leaf.dim, t);
                }
            }
        }
    }
}

/// One item's (exactness, relevance), `None` when culled, item by item: the reference
/// `kernels::ChunkScores` is tested against.
#[cfg(test)]
fn item_outcome(criteria: &[Criterion], item: &ItemRef<'_>, ctx: &EvalCtx) -> Option<(bool, f64)> {
    if criteria.is_empty() {
        return Some((true, 1.0));
    }
    let mut exact = true;
    let mut mean = WeightedMean::default();
    for cr in criteria {
        let o = cr.eval(item, ctx);
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

impl Filter<'_> {
    /// Whether the ids admit document `doc`, read from its row: the reference
    /// evaluation's test, apart from the sets `Admit` resolves them to.
    #[cfg(test)]
    pub(crate) fn admits_row(&self, doc: &crate::Doc) -> bool {
        self.items.is_none_or(|items| items.contains(&*doc.id))
            && self.not_items.is_none_or(|not| !not.contains(&*doc.id))
    }
}

/// Candidates from which scoring them is split across cores (few in tests, so that the
/// property tests take both paths).
const PARALLEL_CANDIDATES: usize = if cfg!(test) { 16 } else { 2_048 };

/// Per parallel part: its sink and the buffers reused from chunk to chunk.
struct Part<S> {
    sink: S,
    idx: Vec<u16>,
    scores: ChunkScores,
}

/// Scores the items (the narrowed candidates, else every document) chunk by chunk in
/// parallel and hands every result (not culled, exact or relevance > 0, admitted by the
/// filter) to a sink made by `make`.
pub(crate) fn scan<S: Sink>(
    snap: &Snapshot,
    candidates: Option<&[u32]>,
    criteria: &[Criterion],
    ctx: &EvalCtx,
    filter: &Admit,
    make: impl Fn() -> S + Sync + Send,
) -> S {
    let part = || Part {
        sink: make(),
        idx: Vec::with_capacity(crate::CHUNK),
        scores: ChunkScores::new(criteria),
    };
    let admit_all = filter.admits_all();
    let run = |mut p: Part<S>,
               seed: Option<(bool, f64)>,
               c: usize,
               positions: &mut dyn Iterator<Item = usize>| {
        let chunk = &snap.chunks()[c];
        let base = (c * crate::CHUNK) as u32;
        p.idx.clear();
        for i in positions {
            if let Some(Some(_)) = chunk.docs.get(i) {
                if admit_all || filter.admits(base + i as u32) {
                    p.idx.push(i as u16);
                }
            }
        }
        if p.idx.is_empty() {
            return p;
        }
        let view = ChunkView {
            docs: &chunk.docs,
            cols: snap.chunk_cols(c),
            base: (c * crate::CHUNK) as u32,
            idx: &p.idx,
        };
        p.scores
            .compute(criteria, ctx, &view, stronger(p.sink.bar(), seed));
        for (j, &i) in p.idx.iter().enumerate() {
            if p.scores.skipped(j) {
                if !filter.exact_only {
                    p.sink.count(view.base + i as u32);
                }
                continue;
            }
            let Some((exact, r)) = p.scores.outcome(criteria, j) else {
                continue;
            };
            let is_result = exact || r > 0.0;
            if !is_result || (filter.exact_only && !exact) {
                continue;
            }
            if let Some(Some(doc)) = chunk.docs.get(i as usize) {
                // (`map_or_else`: the row's id is read only when the chunk has no
                // columns — an eager default read it for every result, a cache miss each)
                let id_key = view
                    .cols
                    .map_or_else(|| doc.id_key(), |c| c.id_key(i as usize));
                p.sink.offer(view.base + i as u32, doc, id_key, exact, r);
            }
        }
        p
    };
    match candidates {
        Some(docs) => {
            // runs of candidates in one chunk
            let mut runs: Vec<(usize, usize, usize)> = Vec::new();
            for (k, &n) in docs.iter().enumerate() {
                let c = n as usize / crate::CHUNK;
                match runs.last_mut() {
                    Some((rc, _, end)) if *rc == c => *end = k + 1,
                    _ => runs.push((c, k, k + 1)),
                }
            }
            let visit = |p, &(c, a, b): &(usize, usize, usize)| {
                run(
                    p,
                    None,
                    c,
                    &mut docs[a..b].iter().map(|&n| n as usize % crate::CHUNK),
                )
            };
            if docs.len() < PARALLEL_CANDIDATES {
                // (tasks on the pool would cost more than they save: their hand-offs,
                // and its threads left spinning beside the request)
                return runs.iter().fold(part(), visit).sink;
            }
            runs.par_iter()
                .fold(part, visit)
                .map(|p| p.sink)
                .reduce(&make, S::merge)
        }
        None => {
            let chunks = snap.chunks().len();
            let pass = |seed: Option<(bool, f64)>, sampled: bool| {
                (0..chunks)
                    .into_par_iter()
                    .filter(|c| (c % SAMPLE_EVERY == 0) == sampled)
                    .fold(part, |p, c| {
                        let len = snap.chunks()[c].docs.len();
                        run(p, seed, c, &mut (0..len))
                    })
                    .map(|p| p.sink)
                    .reduce(&make, S::merge)
            };
            // A sample of the chunks first: the best results it finds are a bar the
            // rest must beat from their first chunk on (a bar found scanning grows
            // only as fast as the scan goes).
            let sample = pass(None, true);
            let seed = sample.bar();
            sample.merge(pass(seed, false))
        }
    }
}

/// Every `SAMPLE_EVERY`-th chunk is scored before the others (`scan`).
const SAMPLE_EVERY: usize = 16;

/// Evaluates `criteria` for every item of `snap`.
pub fn evaluate(
    snap: &Snapshot,
    criteria: &mut [Criterion],
    filter: &Filter<'_>,
    want: Want<'_>,
) -> Results {
    let mut scales = vec![0.0; snap.dims.len()];
    prepare(criteria, snap, &mut scales, false);
    let ctx = EvalCtx { scales };
    let filter = &Admit::new(snap, filter);
    let mut has_text = false;
    for_each_text(criteria, &mut |_, _| has_text = true);
    if !has_text {
        if let Some((mut set, r)) = exact_results(snap, criteria, &ctx, filter.exact_only) {
            filter.restrict(&mut set);
            return from_set(snap, &set, r, want, ctx);
        }
        if let Some(results) = reached_results(snap, criteria, &ctx, filter, want) {
            return results;
        }
    } else {
        if let Some(results) = ranked_results(snap, criteria, &ctx, filter, want) {
            return results;
        }
        for_each_text(criteria, &mut |dim, t| {
            if let Some(d) = dim {
                t.prepare(snap, d)
            }
        });
    }
    let mut candidates: Option<Vec<u32>> = match candidates(snap, criteria, filter.exact_only) {
        Some(mut c) => {
            filter.restrict(&mut c);
            Some(c.iter().collect())
        }
        None => filter.named().map(|only| only.iter().collect()),
    };
    if has_text {
        // Text relevance is graded against the best score among the results, known
        // only once culling is: a first pass finds the results (membership and
        // exactness do not depend on the grading), the second ranks them.
        let frozen: &[Criterion] = criteria;
        let results: Vec<u32> = scan(snap, candidates.as_deref(), frozen, &ctx, filter, Vec::new);
        for_each_text(criteria, &mut |_, t| {
            t.set_max_over(results.iter().copied())
        });
        candidates = Some(results);
    }
    let frozen: &[Criterion] = criteria;
    if let Some((k, collect)) = want.top() {
        let top = scan(snap, candidates.as_deref(), frozen, &ctx, filter, || {
            TopK::new(k, collect)
        });
        return top.into_results(ctx);
    }
    if let Want::TopBy { k, keys, matched } = want {
        let top = scan(snap, candidates.as_deref(), frozen, &ctx, filter, || {
            SortTop::new(snap, keys, k, matched)
        });
        return top.into_results(ctx);
    }
    let mut hits: Vec<Hit> = scan(snap, candidates.as_deref(), frozen, &ctx, filter, Vec::new);
    let exact_count = hits.iter().filter(|h| h.exact).count();
    let total = hits.len();
    if want != Want::All {
        hits.par_sort_unstable_by(default_order);
    }
    Results {
        hits,
        total,
        exact_count,
        matched: None,
        ctx,
    }
}

/// The criteria prepared as a full evaluation prepares them (text graded against every
/// document holding a word), and their context: for tests of the chunk kernels.
#[cfg(test)]
pub(crate) fn prepared(snap: &Snapshot, criteria: &mut [Criterion]) -> EvalCtx {
    let mut scales = vec![0.0; snap.dims.len()];
    prepare(criteria, snap, &mut scales, true);
    let live: Vec<u32> = snap.live_docs().iter().collect();
    for_each_text(criteria, &mut |_, t| t.set_max_over(live.iter().copied()));
    EvalCtx { scales }
}

/// Every result by a plain scan of every item, unordered: the reference the narrowed,
/// top-k evaluation is tested against.
#[cfg(test)]
pub(crate) fn reference_hits(
    snap: &Snapshot,
    criteria: &mut [Criterion],
    filter: &Filter<'_>,
) -> Vec<Hit> {
    let mut scales = vec![0.0; snap.dims.len()];
    prepare(criteria, snap, &mut scales, true);
    let ctx = EvalCtx { scales };
    let mut hits: Vec<Hit> = Vec::new();
    for (c, chunk) in snap.chunks().iter().enumerate() {
        for (i, slot) in chunk.docs.iter().enumerate() {
            let Some(doc) = slot else { continue };
            if !filter.admits_row(doc) {
                continue;
            }
            let n = (c * crate::CHUNK + i) as u32;
            let item = ItemRef { doc, n, cols: None };
            let Some((exact, r)) = item_outcome(criteria, &item, &ctx) else {
                continue;
            };
            if exact || (r > 0.0 && !filter.exact_only) {
                hits.push(Hit::new(n, doc, exact, r));
            }
        }
    }
    for_each_text(criteria, &mut |_, t| {
        t.set_max_over(hits.iter().map(|h| h.doc))
    });
    for h in &mut hits {
        if let Some(doc) = snap.doc(h.doc) {
            let item = ItemRef {
                doc,
                n: h.doc,
                cols: None,
            };
            if let Some((_, r)) = item_outcome(criteria, &item, &ctx) {
                h.r = r;
            }
        }
    }
    hits
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
        let res = evaluate(&snap, &mut q.criteria, &filter, Want::Sorted);
        let got: Vec<(&str, f64)> = res.hits.iter().map(|h| (&*h.id, h.r)).collect();
        assert_eq!(got, vec![("a", 1.0), ("b", 1.0)]);
    }

    /// §7.2 numeric: without a declared span the default scale is a tenth of the span
    /// the snapshot's documents hold — found once per snapshot, so it must follow an
    /// apply that widens the span and stay what it was for the snapshot before.
    #[test]
    fn default_scale_follows_each_snapshot() {
        let dims =
            Dimensions::parse(b"<dimensions><dimension id='n' type='integer'/></dimensions>")
                .unwrap();
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(std::sync::Arc::new(dims)));
        b.upsert("a", &rec(&[("n", "0")]));
        b.upsert("b", &rec(&[("n", "100")]));
        let before = b.commit();
        let relevance_of_b = |snap: &Snapshot| {
            let body = serde_json::json!({"criteria": [{"dimension": "n", "value": "200"}]});
            let mut q = parse_query(&body, &snap.dims, 100).unwrap();
            let filter = Filter {
                items: None,
                not_items: None,
                exact_only: false,
            };
            let res = evaluate(snap, &mut q.criteria, &filter, Want::Sorted);
            res.hits.iter().find(|h| &*h.id == "b").map(|h| h.r)
        };
        let closeness = |scale: f64| Some(crate::criteria::numeric_closeness(100.0, scale));
        assert_eq!(relevance_of_b(&before), closeness(10.0));
        let mut b = w.begin(&before);
        b.upsert("c", &rec(&[("n", "1000")]));
        let after = b.commit();
        assert_eq!(relevance_of_b(&after), closeness(100.0));
        assert_eq!(relevance_of_b(&before), closeness(10.0));
    }
}
