//! Chunk-at-a-time evaluation. Each top-level criterion runs over the documents of a
//! chunk in one loop over its column: the column and the matcher are matched once per
//! chunk instead of once per document, and the loop reads flat arrays. Outcomes are kept
//! per criterion and combined in criterion order, so every figure is bit for bit the
//! one `Criterion::eval` gives item by item. The rules themselves stay in `criteria/`;
//! a document a column cannot describe (several values) is evaluated from its row.

use crate::columns::{bit, ChunkCols, Col, NO_ELEMENT};
use crate::criteria::WeightedMean;
use crate::criteria::{keyword_rule, Criterion, EvalCtx, ItemRef, Leaf, Matcher, Node, Outcome};
use crate::geo::GeoRef;
use crate::slots::Slots;

/// The documents of one chunk that a pass evaluates.
pub(crate) struct ChunkView<'a> {
    pub docs: &'a Slots,
    pub cols: Option<&'a ChunkCols>,
    /// Doc number of the chunk's first slot.
    pub base: u32,
    /// Positions in the chunk, each holding a document.
    pub idx: &'a [u16],
}

impl ChunkView<'_> {
    #[inline]
    fn item(&self, i: usize) -> Option<ItemRef<'_>> {
        Some(ItemRef {
            doc: self.docs.get(i)?.as_ref()?,
            n: self.base + i as u32,
            cols: self.cols.map(|c| (c, i)),
        })
    }
}

/// One criterion's outcomes for the documents of a view, position by position.
#[derive(Default)]
pub(crate) struct Outcomes {
    exact: Vec<bool>,
    r: Vec<f64>,
    culled: Vec<bool>,
}

impl Outcomes {
    fn reset(&mut self, n: usize) {
        self.exact.clear();
        self.exact.resize(n, false);
        self.r.clear();
        self.r.resize(n, 0.0);
        self.culled.clear();
        self.culled.resize(n, false);
    }

    #[inline(always)]
    fn set(&mut self, j: usize, (exact, r): (bool, f64)) {
        self.exact[j] = exact;
        self.r[j] = r;
    }

    #[inline(always)]
    fn set_outcome(&mut self, j: usize, o: Outcome) {
        self.exact[j] = o.exact;
        self.r[j] = o.r;
        self.culled[j] = o.culled;
    }
}

/// The outcomes of every top-level criterion for one view (buffers reused from chunk to
/// chunk), and which documents were left out as unable to reach the top. Made for one
/// request's criteria (`new`): `compute` is given those.
pub(crate) struct ChunkScores {
    per: Vec<Outcomes>,
    /// The order criteria are evaluated in with a bar (`eval_order`).
    order: Vec<usize>,
    /// Position by position: a result for certain, not exact, and unable to beat the
    /// bar, so some of its criteria were not evaluated (`outcome` does not describe it).
    skipped: Vec<bool>,
    /// Position by position: culled by a criterion, the others maybe not evaluated.
    dropped: Vec<bool>,
    /// Scratch of `compute_pruned`, reused from chunk to chunk.
    prune: Prune,
}

/// What `compute_pruned` keeps per position while it goes from criterion to criterion.
#[derive(Default)]
struct Prune {
    /// Σ w·r over the criteria evaluated so far.
    acc: Vec<f64>,
    /// Exact on every criterion evaluated so far.
    exact: Vec<bool>,
    /// Positions (indices into the view's `idx`) still to be evaluated.
    alive: Vec<u32>,
    /// The chunk positions of `alive`, as a view's `idx`.
    sub_idx: Vec<u16>,
    /// One criterion's outcomes for `alive`.
    out: Outcomes,
    /// Geo: positions in `alive` whose distance is to be computed.
    pending: Vec<u32>,
    /// Geo: the (exactness, relevance) bound from the latitude alone, per member of
    /// `alive` (`None`: settled already, from the row or as a null).
    up: Vec<Option<(bool, f64)>>,
}

/// Two relevances that differ by less than this are not told apart by bounds (sums of
/// the same products in another order differ by far less).
const SLACK: f64 = 1e-9;

impl ChunkScores {
    pub(crate) fn new(criteria: &[Criterion]) -> ChunkScores {
        ChunkScores {
            per: Vec::new(),
            order: eval_order(criteria),
            skipped: Vec::new(),
            dropped: Vec::new(),
            prune: Prune::default(),
        }
    }

    /// Scores the documents of `view`. With a `bar` — the (exactness, relevance) a
    /// result must beat to be kept — criteria are evaluated cheapest first, and a
    /// document is left out (`skipped`) as soon as the criteria evaluated, and the most
    /// the others can give, show it cannot be exact nor beat the bar; a geo criterion's
    /// distance is first bounded from the latitude alone.
    pub(crate) fn compute(
        &mut self,
        criteria: &[Criterion],
        ctx: &EvalCtx,
        view: &ChunkView<'_>,
        bar: Option<(bool, f64)>,
    ) {
        if self.per.len() < criteria.len() {
            self.per.resize_with(criteria.len(), Outcomes::default);
        }
        let n = view.idx.len();
        self.skipped.clear();
        self.skipped.resize(n, false);
        self.dropped.clear();
        self.dropped.resize(n, false);
        let total_w: f64 = criteria.iter().map(|c| c.weight).sum();
        match bar {
            // (with every weight 0 every relevance is 1: nothing to bound)
            Some(bar) if total_w > 0.0 => self.compute_pruned(criteria, ctx, view, bar, total_w),
            _ => {
                for (c, out) in criteria.iter().zip(&mut self.per) {
                    c.eval_chunk(ctx, view, out);
                }
            }
        }
    }

    /// `compute` with a bar: criteria in `eval_order`, each over the documents still in.
    fn compute_pruned(
        &mut self,
        criteria: &[Criterion],
        ctx: &EvalCtx,
        view: &ChunkView<'_>,
        bar: (bool, f64),
        total_w: f64,
    ) {
        let n = view.idx.len();
        let order = std::mem::take(&mut self.order);
        // the criteria that may cull come first: a document is left out only once they
        // are all evaluated (left out, it counts as a result)
        let culling = criteria.iter().filter(|c| c.may_cull()).count();
        let p = &mut self.prune;
        p.acc.clear();
        p.acc.resize(n, 0.0);
        p.exact.clear();
        p.exact.resize(n, true);
        p.alive.clear();
        p.alive.extend(0..n as u32);
        // the most the criteria not evaluated yet can add to Σ w·r
        let mut rest: f64 = criteria.iter().map(|c| c.weight * c.max_relevance()).sum();
        for (step, &ci) in order.iter().enumerate() {
            let c = &criteria[ci];
            rest -= c.weight * c.max_relevance();
            let last = step + 1 == order.len();
            let prune_now = step + 1 >= culling;
            self.per[ci].reset(n);
            let p = &mut self.prune;
            p.sub_idx.clear();
            p.sub_idx
                .extend(p.alive.iter().map(|&j| view.idx[j as usize]));
            let sub = ChunkView {
                docs: view.docs,
                cols: view.cols,
                base: view.base,
                idx: &p.sub_idx,
            };
            // (the criteria before this one settled membership)
            let geo = if step >= culling {
                c.deferrable_geo()
            } else {
                None
            };
            let floors = geo.filter(|leaf| leaf.geo_floors(ctx, &sub, &mut p.out, &mut p.up));
            match floors {
                Some(leaf) => {
                    // first the bound from the latitude: documents that cannot beat the
                    // bar whatever their distance are left out before it is computed
                    let far = leaf.geo_least_relevance();
                    let mut pending = std::mem::take(&mut p.pending);
                    pending.clear();
                    for (jj, &j) in p.alive.iter().enumerate() {
                        let Some((exact_up, r_up)) = p.up[jj] else {
                            continue; // settled from the row or the null rule
                        };
                        let j = j as usize;
                        let exact_possible = p.exact[j] && exact_up;
                        let bound = (p.acc[j] + c.weight * r_up + rest) / total_w;
                        let certain = p.acc[j] + c.weight * far > 0.0;
                        if !exact_possible && beaten(bar, bound) && certain {
                            self.skipped[j] = true;
                        } else {
                            pending.push(jj as u32);
                        }
                    }
                    leaf.geo_distances(&sub, &pending, &mut p.out);
                    p.pending = pending;
                }
                None => c.eval_chunk(ctx, &sub, &mut p.out),
            }
            // the outcomes kept, and (in place) the documents still in
            let out = &mut self.per[ci];
            let later = &order[step + 1..];
            let mut kept = 0;
            for jj in 0..p.alive.len() {
                let j = p.alive[jj] as usize;
                if self.skipped[j] {
                    continue;
                }
                let (exact, r, culled) = (p.out.exact[jj], p.out.r[jj], p.out.culled[jj]);
                out.exact[j] = exact;
                out.r[j] = r;
                out.culled[j] = culled;
                if culled {
                    self.dropped[j] = true;
                    continue;
                }
                let acc = p.acc[j] + c.weight * r;
                p.acc[j] = acc;
                let exact = p.exact[j] && exact;
                p.exact[j] = exact;
                if prune_now && !exact && !last && beaten(bar, (acc + rest) / total_w) {
                    // left out only as a result for certain: something gained already,
                    // or to be gained from a criterion not evaluated yet
                    let i = view.idx[j] as usize;
                    if acc > 0.0
                        || later.iter().any(|&l| {
                            let c = &criteria[l];
                            c.weight > 0.0 && c.surely_positive(ctx, view, i)
                        })
                    {
                        self.skipped[j] = true;
                        continue;
                    }
                }
                p.alive[kept] = j as u32;
                kept += 1;
            }
            p.alive.truncate(kept);
            if last || p.alive.is_empty() {
                break;
            }
        }
        self.order = order;
    }

    /// Whether the document at position `j` was left out (see `skipped`).
    #[inline]
    pub(crate) fn skipped(&self, j: usize) -> bool {
        self.skipped[j]
    }

    /// The (exactness, relevance) of the document at position `j`, `None` when culled:
    /// as `eval::item_outcome` computes it (in criterion order, whatever order the
    /// criteria were evaluated in).
    #[inline]
    pub(crate) fn outcome(&self, criteria: &[Criterion], j: usize) -> Option<(bool, f64)> {
        if self.dropped[j] {
            return None;
        }
        let mut exact = true;
        let mut mean = WeightedMean::default();
        for (c, o) in criteria.iter().zip(&self.per) {
            if o.culled[j] {
                return None;
            }
            exact &= o.exact[j];
            mean.add(c.weight, o.r[j]);
        }
        Some((exact, mean.value()))
    }
}

/// Whether a non-exact document whose relevance is at most `bound` cannot beat `bar`
/// (an exact bar, or a relevance below it: equal ones are ordered by id).
#[inline]
fn beaten(bar: (bool, f64), bound: f64) -> bool {
    bar.0 || bound + SLACK < bar.1
}

/// The order `compute_pruned` evaluates criteria in: those that may cull first (a
/// document is left out only once its membership is settled), then the cheapest.
fn eval_order(criteria: &[Criterion]) -> Vec<usize> {
    let cost = |c: &Criterion| match &c.node {
        Node::Group { .. } => 0,
        Node::Leaf(leaf) => match leaf.matcher {
            Matcher::Has | Matcher::Keyword { .. } | Matcher::Elements { .. } => 1,
            Matcher::Numeric { .. } => 2,
            Matcher::Text(_) => 3,
            Matcher::Geo { .. } => 4,
        },
    };
    let mut order: Vec<usize> = (0..criteria.len()).collect();
    // (stable: equal costs keep the request's order)
    order.sort_by_key(|&i| (!criteria[i].may_cull(), cost(&criteria[i])));
    order
}

impl Criterion {
    /// Whether it may cull a document: `cull`, a `cullDistance`, or a group (which may
    /// hold either).
    pub(crate) fn may_cull(&self) -> bool {
        self.cull
            || match &self.node {
                Node::Group { .. } => true,
                Node::Leaf(leaf) => matches!(leaf.matcher, Matcher::Geo { cull: Some(_), .. }),
            }
    }

    /// Whether it surely gives the document at chunk position `i` a relevance above
    /// 0, found cheaply (a geo leaf from the least relevance any point gets); false
    /// when not known cheaply.
    fn surely_positive(&self, ctx: &EvalCtx, view: &ChunkView<'_>, i: usize) -> bool {
        let Node::Leaf(leaf) = &self.node else {
            return false;
        };
        match (&leaf.matcher, leaf.dim) {
            (Matcher::Text(_), _) => false,
            // (a distance is what costs: whether the point is there is enough)
            (Matcher::Geo { .. }, Some(dim)) => match view.cols.and_then(|c| c.col(dim)) {
                Some(Col::Geo { lat, multi, .. }) if !bit(multi, i) => {
                    if lat[i].is_nan() {
                        leaf.null_rel > 0.0
                    } else {
                        leaf.positive_with_value()
                    }
                }
                _ => false,
            },
            _ => view
                .item(i)
                .is_some_and(|item| leaf.eval(&item, ctx).r > 0.0),
        }
    }

    /// The most relevance it gives any document.
    fn max_relevance(&self) -> f64 {
        match &self.node {
            Node::Leaf(leaf) => leaf.max_relevance(),
            // (groups combine their children's: relevances are at most 1)
            Node::Group { .. } => 1.0,
        }
    }

    /// A geo leaf that cannot cull, keeps its own exactness and gives exact points at
    /// least what any other point gets (`exactRelevance` ≥ `fuzzyRelevance`): its
    /// outcome never decreases as the distance shrinks, so a distance bounded from
    /// below bounds the outcome from above (`Leaf::geo_floors`).
    fn deferrable_geo(&self) -> Option<&Leaf> {
        if self.cull || self.exact_match {
            return None;
        }
        match &self.node {
            Node::Leaf(
                leaf @ Leaf {
                    dim: Some(_),
                    matcher: Matcher::Geo { cull: None, .. },
                    ..
                },
            ) if leaf.exact_rel >= leaf.fuzzy_rel => Some(leaf),
            _ => None,
        }
    }

    /// `eval` for every document of `view`.
    fn eval_chunk(&self, ctx: &EvalCtx, view: &ChunkView<'_>, out: &mut Outcomes) {
        out.reset(view.idx.len());
        match &self.node {
            Node::Leaf(leaf) => leaf.eval_chunk(ctx, view, out),
            Node::Group { .. } => {
                // groups are rare: item by item (`eval` applies the flags itself)
                for (j, &i) in view.idx.iter().enumerate() {
                    if let Some(item) = view.item(i as usize) {
                        out.set_outcome(j, self.eval(&item, ctx));
                    }
                }
                return;
            }
        }
        if self.exact_match {
            out.exact.fill(true);
        }
        if self.cull {
            for (c, r) in out.culled.iter_mut().zip(&out.r) {
                if *r == 0.0 {
                    *c = true;
                }
            }
        }
    }
}

impl Leaf {
    /// `Leaf::eval` for every document of `view`.
    fn eval_chunk(&self, ctx: &EvalCtx, view: &ChunkView<'_>, out: &mut Outcomes) {
        let Some(dim) = self.dim else {
            out.exact.fill(true);
            out.r.fill(1.0);
            return;
        };
        let null = (self.null_exact, self.null_rel);
        let row = |out: &mut Outcomes, j: usize, i: usize| {
            if let Some(item) = view.item(i) {
                out.set_outcome(j, self.eval(&item, ctx));
            }
        };
        let positions = view.idx.iter().map(|&i| i as usize).enumerate();
        let col = view.cols.and_then(|c| c.col(dim).map(|col| (c, col)));
        match (col, &self.matcher) {
            (Some((_, Col::Num { v, multi, .. })), Matcher::Numeric { set, scale }) => {
                for (j, i) in positions {
                    if bit(multi, i) {
                        row(out, j, i);
                        continue;
                    }
                    let x = v.get(i);
                    out.set(
                        j,
                        if x.is_nan() {
                            null
                        } else {
                            self.numeric_rule(set, *scale, ctx, std::iter::once(x))
                        },
                    );
                }
            }
            (
                Some((_, Col::Geo { lat, pts, multi })),
                Matcher::Geo {
                    reference,
                    pre,
                    unit,
                    ..
                },
            ) => {
                for (j, i) in positions {
                    if bit(multi, i) {
                        row(out, j, i);
                        continue;
                    }
                    let la = lat[i];
                    if la.is_nan() {
                        out.set(j, null);
                        continue;
                    }
                    let d = reference.distance_pre(&pts[i], la, pre, *unit);
                    let (exact, r, culled) = self.geo_rule(d);
                    out.set_outcome(j, Outcome { exact, r, culled });
                }
            }
            (Some((_, col @ Col::Elem { e, multi, .. })), Matcher::Elements { .. }) => {
                for (j, i) in positions {
                    if bit(multi, i) {
                        match ChunkCols::elements(col, i) {
                            Some(es) => out.set(j, self.elements_rule(es)),
                            None => row(out, j, i),
                        }
                        continue;
                    }
                    let b = e.get(i);
                    out.set(
                        j,
                        if b == NO_ELEMENT {
                            null
                        } else {
                            self.elements_rule(std::slice::from_ref(&b))
                        },
                    );
                }
            }
            (
                Some((_, Col::Present { bits })),
                Matcher::Keyword {
                    values,
                    docs: Some((holding, excluding)),
                    ..
                },
            ) => {
                let any_value = values.is_empty();
                for (j, i) in positions {
                    out.set(
                        j,
                        if bit(bits, i) {
                            let n = view.base + i as u32;
                            keyword_rule(self.exact_rel, any_value, holding, excluding, n)
                        } else {
                            null
                        },
                    );
                }
            }
            (Some((_, Col::Text { bits, .. })), Matcher::Text(t)) => {
                for (j, i) in positions {
                    out.set(
                        j,
                        if bit(bits, i) {
                            t.eval(view.base + i as u32, self.exact_rel, self.fuzzy_rel)
                        } else {
                            null
                        },
                    );
                }
            }
            // "has a value", groups of rare shapes: item by item (from the columns where
            // they describe the document)
            _ => {
                for (j, i) in positions {
                    row(out, j, i);
                }
            }
        }
    }

    /// A geo leaf over `view` (`Criterion::deferrable_geo`), first pass: documents with
    /// several points or none are settled in `out`; for the others `up` holds the
    /// (exactness, relevance) their distance floor from the latitude gives, at most
    /// what their distance will. False when the chunk has no geo column for it.
    fn geo_floors(
        &self,
        ctx: &EvalCtx,
        view: &ChunkView<'_>,
        out: &mut Outcomes,
        up: &mut Vec<Option<(bool, f64)>>,
    ) -> bool {
        let (Some(dim), Matcher::Geo { bands, unit, .. }) = (self.dim, &self.matcher) else {
            return false;
        };
        let Some(Col::Geo { lat, pts, multi }) = view.cols.and_then(|c| c.col(dim)) else {
            return false;
        };
        out.reset(view.idx.len());
        up.clear();
        let null = (self.null_exact, self.null_rel);
        for (j, &i) in view.idx.iter().enumerate() {
            let i = i as usize;
            if bit(multi, i) {
                if let Some(item) = view.item(i) {
                    out.set_outcome(j, self.eval(&item, ctx));
                }
                up.push(None);
            } else if lat[i].is_nan() {
                out.set(j, null);
                up.push(None);
            } else {
                let (exact, r, _) = self.geo_rule(GeoRef::distance_floor(&pts[i], bands, *unit));
                up.push(Some((exact, r)));
            }
        }
        true
    }

    /// A geo leaf over `view`, second pass: the distances of the documents at
    /// `pending` positions (`geo_floors` found them with one point), into `out`.
    fn geo_distances(&self, view: &ChunkView<'_>, pending: &[u32], out: &mut Outcomes) {
        let (
            Some(dim),
            Matcher::Geo {
                reference,
                pre,
                unit,
                ..
            },
        ) = (self.dim, &self.matcher)
        else {
            return;
        };
        let Some(Col::Geo { lat, pts, .. }) = view.cols.and_then(|c| c.col(dim)) else {
            return;
        };
        for &j in pending {
            let j = j as usize;
            let i = view.idx[j] as usize;
            let dist = reference.distance_pre(&pts[i], lat[i], pre, *unit);
            let (exact, r, culled) = self.geo_rule(dist);
            out.set_outcome(j, Outcome { exact, r, culled });
        }
    }
}
