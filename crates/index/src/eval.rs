//! Evaluation of a request over a snapshot: per item exactness and relevance, culling,
//! the default order (exact first, relevance descending, id ascending).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use discern_dimensions::DimensionKind;
use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::candidates::candidates;
use crate::criteria::{Criterion, EvalCtx, Matcher, Node};
#[cfg(test)]
use crate::criteria::{ItemRef, WeightedMean};
use crate::exact::{exact_results, from_set};
use crate::kernels::{ChunkScores, ChunkView};
use crate::ranked::ranked_results;
use crate::reach::reached_results;
use crate::sort::{SortKey, SortTop};
use crate::Snapshot;

#[derive(Clone, Debug)]
pub struct Hit {
    pub doc: u32,
    pub id: crate::DocId,
    pub exact: bool,
    pub r: f64,
    /// The id's first bytes (`id_key`): most id comparisons stop here.
    pub id_key: u64,
}

impl Hit {
    /// A hit whose id key is read from the document's row (the reference scan's).
    #[cfg(test)]
    pub(crate) fn new(n: u32, doc: &crate::Doc, exact: bool, r: f64) -> Hit {
        Hit::keyed(n, doc, doc.id_key(), exact, r)
    }

    /// A hit of document `n`, with its `id_key` as its chunk's column gives it.
    pub(crate) fn keyed(n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) -> Hit {
        debug_assert_eq!(id_key, doc.id_key());
        Hit {
            doc: n,
            id: doc.id.clone(),
            exact,
            r,
            id_key,
        }
    }
}

/// The first 8 bytes of an id, zero-padded, big-endian: ordered as the ids are up to
/// those bytes, so equal keys alone need the whole ids compared.
pub(crate) fn id_key(id: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = id.len().min(8);
    b[..n].copy_from_slice(&id.as_bytes()[..n]);
    u64::from_be_bytes(b)
}

pub struct Results {
    /// Every result (`Want::All`, `Want::Sorted`) or the first ones (`Want::Top`).
    pub hits: Vec<Hit>,
    /// Number of results, and of exact ones (also when `hits` holds only the top).
    pub total: usize,
    pub exact_count: usize,
    /// Every result's doc number (`Want::TopAndMatched`).
    pub matched: Option<Matched>,
    pub(crate) ctx: EvalCtx,
}

/// The doc numbers of every result, exact and not: what facets and drillDown count
/// when only a page of hits is kept.
#[derive(Default, Debug, PartialEq)]
pub struct Matched {
    pub exact: RoaringBitmap,
    pub other: RoaringBitmap,
}

impl Matched {
    pub fn of_hits(hits: &[Hit]) -> Matched {
        let mut m = MatchedDocs::default();
        for h in hits {
            m.push(h.doc, h.exact);
        }
        m.into_matched()
    }

    /// Every result.
    pub fn all(&self) -> RoaringBitmap {
        &self.exact | &self.other
    }
}

/// `Matched` while a scan collects it: doc numbers in the order they come.
#[derive(Default)]
struct MatchedDocs {
    exact: Vec<u32>,
    other: Vec<u32>,
}

impl MatchedDocs {
    fn push(&mut self, doc: u32, exact: bool) {
        if exact {
            self.exact.push(doc)
        } else {
            self.other.push(doc)
        }
    }

    fn append(&mut self, mut other: MatchedDocs) {
        self.exact.append(&mut other.exact);
        self.other.append(&mut other.other);
    }

    fn into_matched(mut self) -> Matched {
        // (parts come in doc order: nearly sorted already)
        self.exact.sort_unstable();
        self.other.sort_unstable();
        let set = |docs: Vec<u32>| RoaringBitmap::from_sorted_iter(docs).unwrap_or_default();
        Matched {
            exact: set(self.exact),
            other: set(self.other),
        }
    }
}

/// What `evaluate` returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want<'s> {
    /// Every result, unordered.
    All,
    /// Every result, in the default order.
    Sorted,
    /// The first `n` results in the default order, and the counts.
    Top(usize),
    /// As `Top`, and every result's doc number (`Results::matched`).
    TopAndMatched(usize),
    /// The first `k` results in the order of `keys` (`sort_hits`'s, the default order
    /// breaking ties), and the counts; with `matched`, every result's doc number. Only
    /// the page's hits are made: a `sortBy` over half a million results made them all
    /// (cloning every id) to keep twenty.
    TopBy {
        k: usize,
        keys: &'s [SortKey],
        matched: bool,
    },
}

impl Want<'_> {
    /// The page's length and whether every result's doc number is wanted, for the
    /// top-k forms in the default order.
    pub(crate) fn top(self) -> Option<(usize, bool)> {
        match self {
            Want::Top(k) => Some((k, false)),
            Want::TopAndMatched(k) => Some((k, true)),
            Want::All | Want::Sorted | Want::TopBy { .. } => None,
        }
    }
}

/// What a page sink counts of every result offered, kept or not: the results, the
/// exact ones and, when asked for, every result's doc number (`Results::matched`).
pub(crate) struct Tally {
    total: usize,
    exact: usize,
    matched: Option<MatchedDocs>,
}

impl Tally {
    pub(crate) fn new(matched: bool) -> Tally {
        Tally {
            total: 0,
            exact: 0,
            matched: matched.then(MatchedDocs::default),
        }
    }

    pub(crate) fn add(&mut self, n: u32, exact: bool) {
        self.total += 1;
        self.exact += exact as usize;
        if let Some(m) = &mut self.matched {
            m.push(n, exact);
        }
    }

    /// Another scan's counts (of other documents).
    pub(crate) fn absorb(&mut self, other: Tally) {
        self.total += other.total;
        self.exact += other.exact;
        if let (Some(m), Some(o)) = (&mut self.matched, other.matched) {
            m.append(o);
        }
    }

    /// `hits`, the page in order, with these counts.
    pub(crate) fn into_results(self, hits: Vec<Hit>, ctx: EvalCtx) -> Results {
        Results {
            hits,
            total: self.total,
            exact_count: self.exact,
            matched: self.matched.map(MatchedDocs::into_matched),
            ctx,
        }
    }
}

/// The best `k` hits seen so far (a max-heap whose top is the worst kept), and counts.
pub(crate) struct TopK {
    k: usize,
    /// What a result must beat, known beforehand (`above`).
    floor: Option<(bool, f64)>,
    heap: BinaryHeap<Ranked>,
    tally: Tally,
}

struct Ranked(Hit);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        default_order(&self.0, &other.0)
    }
}

impl TopK {
    pub(crate) fn new(k: usize, collect: bool) -> TopK {
        TopK {
            k,
            floor: None,
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
            tally: Tally::new(collect),
        }
    }

    /// The same, where a result that cannot beat `floor` (the `k`-th best of some of
    /// the documents, say) is known not to be among the best `k`: a scan can leave it
    /// out from the start (`Sink::bar`).
    pub(crate) fn above(mut self, floor: Option<(bool, f64)>) -> TopK {
        self.floor = floor;
        self
    }

    /// Counts a result and keeps it if it is among the best `k`; the id is cloned only
    /// then.
    /// `id_key`: the document's, from its chunk's column (its row is read only when
    /// it is kept, or ties on that key).
    pub(crate) fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        self.tally.add(n, exact);
        if self.heap.len() < self.k {
            self.heap.push(Ranked(Hit::keyed(n, doc, id_key, exact, r)));
            return;
        }
        let Some(worst) = self.heap.peek() else {
            return;
        };
        let w = &worst.0;
        // the document's row (for its id) is read only on a tie
        let better = match w
            .exact
            .cmp(&exact)
            .then_with(|| w.r.partial_cmp(&r).unwrap_or(Ordering::Equal))
        {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => {
                order_parts((exact, r, id_key), (w.exact, w.r, w.id_key), || {
                    (&doc.id, &w.id)
                }) == Ordering::Less
            }
        };
        if better {
            self.heap.pop();
            self.heap.push(Ranked(Hit::keyed(n, doc, id_key, exact, r)));
        }
    }

    /// Both scans' results: the best `k` of them all, and every count (the documents
    /// each scanned are apart).
    pub(crate) fn merge(mut self, other: TopK) -> TopK {
        self.tally.absorb(other.tally);
        for h in other.heap {
            self.offer_hit(h.0);
        }
        self
    }

    /// The id key of the worst hit kept, once `k` are.
    pub(crate) fn worst_id_key(&self) -> Option<u64> {
        let worst = self.heap.peek()?;
        (self.heap.len() == self.k).then_some(worst.0.id_key)
    }

    /// The hits kept, in order, and the counts.
    pub(crate) fn into_results(self, ctx: EvalCtx) -> Results {
        let (hits, tally) = self.into_parts();
        tally.into_results(hits, ctx)
    }

    /// The hits kept, in order.
    pub(crate) fn into_hits(self) -> Vec<Hit> {
        self.into_parts().0
    }

    fn into_parts(self) -> (Vec<Hit>, Tally) {
        let sorted = self.heap.into_sorted_vec();
        (sorted.into_iter().map(|r| r.0).collect(), self.tally)
    }

    fn offer_hit(&mut self, h: Hit) {
        if self.heap.len() < self.k {
            self.heap.push(Ranked(h));
        } else if self
            .heap
            .peek()
            .is_some_and(|w| default_order(&h, &w.0) == Ordering::Less)
        {
            self.heap.pop();
            self.heap.push(Ranked(h));
        }
    }
}

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
    /// Whether every document is admitted: then a scan need not read documents' ids.
    pub(crate) fn admits_all(&self) -> bool {
        self.items.is_none() && self.not_items.is_none_or(|s| s.is_empty())
    }

    pub(crate) fn admits(&self, doc: &crate::Doc) -> bool {
        if let Some(items) = self.items {
            if !items.contains(&*doc.id) {
                return false;
            }
        }
        if let Some(not) = self.not_items {
            if not.contains(&*doc.id) {
                return false;
            }
        }
        true
    }
}

/// What a scan hands every result to, one per parallel part.
pub(crate) trait Sink: Send {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64);
    fn merge(self, other: Self) -> Self;
    /// What a result must beat, in (exactness, relevance), to be kept by `offer`
    /// (`None`: every result is kept). A result that cannot is handed to `count`.
    fn bar(&self) -> Option<(bool, f64)> {
        None
    }
    /// A non-exact result that cannot beat the bar.
    fn count(&mut self, _n: u32) {}
}

impl Sink for TopK {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        TopK::offer(self, n, doc, id_key, exact, r)
    }
    fn merge(self, other: TopK) -> TopK {
        TopK::merge(self, other)
    }
    fn bar(&self) -> Option<(bool, f64)> {
        if self.k == 0 {
            return Some((true, f64::INFINITY));
        }
        if self.heap.len() < self.k {
            return self.floor;
        }
        stronger(self.heap.peek().map(|w| (w.0.exact, w.0.r)), self.floor)
    }
    fn count(&mut self, n: u32) {
        self.tally.add(n, false);
    }
}

/// Every result's doc number, in scan order: only membership counts.
impl Sink for Vec<u32> {
    fn offer(&mut self, n: u32, _: &crate::Doc, _: u64, _: bool, _: f64) {
        self.push(n);
    }
    fn merge(mut self, mut other: Self) -> Self {
        self.append(&mut other);
        self
    }
    fn bar(&self) -> Option<(bool, f64)> {
        Some((true, f64::INFINITY))
    }
    fn count(&mut self, n: u32) {
        self.push(n);
    }
}

impl Sink for Vec<Hit> {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        self.push(Hit::keyed(n, doc, id_key, exact, r));
    }
    fn merge(mut self, mut other: Self) -> Self {
        self.append(&mut other);
        self
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
    filter: &Filter<'_>,
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
        p.idx.clear();
        for i in positions {
            if let Some(Some(doc)) = chunk.docs.get(i) {
                // (the row is not touched when every document is admitted)
                if admit_all || filter.admits(doc) {
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

/// The higher of two bars, in the default order (exact above not, then relevance).
fn stronger(a: Option<(bool, f64)>, b: Option<(bool, f64)>) -> Option<(bool, f64)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if (x.0, x.1) >= (y.0, y.1) { x } else { y }),
        (x, None) | (None, x) => x,
    }
}

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
    let mut has_text = false;
    for_each_text(criteria, &mut |_, _| has_text = true);
    if !has_text {
        if let Some((set, r)) = exact_results(snap, criteria, &ctx, filter.exact_only) {
            return from_set(snap, &set, r, filter, want, ctx);
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
    let mut candidates: Option<Vec<u32>> =
        candidates(snap, criteria, filter.exact_only).map(|c| c.iter().collect());
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
            if !filter.admits(doc) {
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

/// Exact first, then relevance descending, then id ascending.
pub fn default_order(a: &Hit, b: &Hit) -> Ordering {
    order_parts((a.exact, a.r, a.id_key), (b.exact, b.r, b.id_key), || {
        (&a.id, &b.id)
    })
}

/// The default order of two results by their parts: exactness, relevance, id key, then
/// — only when all those tie — their ids (`ids`: reaching a document's id reads its
/// row, a cache miss per document a scan offers).
pub(crate) fn order_parts<'i>(
    a: (bool, f64, u64),
    b: (bool, f64, u64),
    ids: impl FnOnce() -> (&'i str, &'i str),
) -> Ordering {
    b.0.cmp(&a.0)
        .then_with(|| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal))
        .then_with(|| a.2.cmp(&b.2))
        .then_with(|| {
            let (a, b) = ids();
            a.as_bytes().cmp(b.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_query, IndexWriter};
    use discern_dimensions::Dimensions;
    use discern_model::{Record, Value};
    use proptest::prelude::*;

    proptest! {
        /// Comparing id keys first, then whole ids, orders ids as their bytes do.
        #[test]
        fn id_key_then_bytes_is_byte_order(a in "[\\x00-\\x7fé]{0,12}", b in "[\\x00-\\x7fé]{0,12}") {
            let by_key = id_key(&a)
                .cmp(&id_key(&b))
                .then_with(|| a.as_bytes().cmp(b.as_bytes()));
            prop_assert_eq!(by_key, a.as_bytes().cmp(b.as_bytes()));
        }
    }

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
