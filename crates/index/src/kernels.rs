//! Chunk-at-a-time evaluation. Each top-level criterion runs over the documents of a
//! chunk in one loop over its column: the column and the matcher are matched once per
//! chunk instead of once per document, and the loop reads flat arrays. Outcomes are kept
//! per criterion and combined in criterion order, so every figure is bit for bit the
//! one `Criterion::eval` gives item by item. The rules themselves stay in `criteria.rs`;
//! a document a column cannot describe (several values) is evaluated from its row.

use std::sync::Arc;

use crate::columns::{bit, ChunkCols, Col, NO_ELEMENT};
use crate::criteria::WeightedMean;
use crate::criteria::{keyword_rule, Criterion, EvalCtx, ItemRef, Leaf, Matcher, Node, Outcome};
use crate::geo::GeoRef;
use crate::Doc;

/// The documents of one chunk that a pass evaluates.
pub(crate) struct ChunkView<'a> {
    pub docs: &'a [Option<Arc<Doc>>],
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
            doc: self.docs.get(i)?.as_deref()?,
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
/// chunk), and which documents were left out as unable to reach the top.
#[derive(Default)]
pub(crate) struct ChunkScores {
    per: Vec<Outcomes>,
    /// Position by position: a result for certain, not exact, and unable to beat the
    /// bar, so its distance was not computed (`outcome` does not describe it).
    skipped: Vec<bool>,
    /// Scratch for `defer`: (position, slot) of documents whose distance is pending.
    pending: Vec<(usize, usize)>,
}

impl ChunkScores {
    /// Scores the documents of `view`. With a `bar` — the (exactness, relevance) a
    /// result must beat to be kept — one geo criterion's distance is first bounded
    /// from the latitudes alone, and computed only for documents whose bound could be
    /// exact or beat the bar, or whose membership depends on it.
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
        self.skipped.clear();
        self.skipped.resize(view.idx.len(), false);
        let deferred = bar.and_then(|_| criteria.iter().position(Criterion::deferrable));
        for (ci, (c, out)) in criteria.iter().zip(&mut self.per).enumerate() {
            if Some(ci) != deferred {
                c.eval_chunk(ctx, view, out);
            }
        }
        if let (Some(d), Some(bar)) = (deferred, bar) {
            self.defer(criteria, d, ctx, view, bar);
        }
    }

    /// Whether the document at position `j` was left out (see `skipped`).
    #[inline]
    pub(crate) fn skipped(&self, j: usize) -> bool {
        self.skipped[j]
    }

    /// Criterion `d` (`deferrable`) for every document of `view`, computing distances only
    /// where they can matter.
    fn defer(
        &mut self,
        criteria: &[Criterion],
        d: usize,
        ctx: &EvalCtx,
        view: &ChunkView<'_>,
        bar: (bool, f64),
    ) {
        let c = &criteria[d];
        let geo = match &c.node {
            Node::Leaf(
                leaf @ Leaf {
                    dim: Some(dim),
                    matcher:
                        Matcher::Geo {
                            reference,
                            pre,
                            bands,
                            unit,
                            ..
                        },
                    ..
                },
            ) => view
                .cols
                .and_then(|cols| cols.col(*dim))
                .map(|col| (leaf, col, reference, pre, bands, *unit)),
            _ => None,
        };
        let Some((leaf, Col::Geo { lat, pts, multi }, reference, pre, bands, unit)) = geo else {
            c.eval_chunk(ctx, view, &mut self.per[d]);
            return;
        };
        let out = &mut self.per[d];
        out.reset(view.idx.len());
        let null = (leaf.null_exact, leaf.null_rel);
        // first the bounds (documents with several points, or none, are settled now)
        let mut pending = std::mem::take(&mut self.pending);
        pending.clear();
        for (j, &i) in view.idx.iter().enumerate() {
            let i = i as usize;
            if bit(multi, i) {
                if let Some(item) = view.item(i) {
                    out.set_outcome(j, leaf.eval(&item, ctx));
                }
            } else if lat[i].is_nan() {
                out.set(j, null);
            } else {
                let (exact, r, _) = leaf.geo_rule(GeoRef::distance_floor(&pts[i], bands, unit));
                out.set(j, (exact, r));
                pending.push((j, i));
            }
        }
        // the least relevance any point gets: the farthest distance's
        let far = leaf.geo_rule(crate::geo::max_distance(unit)).1;
        for &(j, i) in &pending {
            // culled by another criterion: not a result, whatever the distance
            let Some((exact_up, r_up)) = self.outcome(criteria, j) else {
                continue;
            };
            if !exact_up && (bar.0 || r_up < bar.1) {
                let r_bound = self.per[d].r[j];
                self.per[d].r[j] = far;
                if self.outcome(criteria, j).is_some_and(|(_, r)| r > 0.0) {
                    self.skipped[j] = true;
                    continue;
                }
                self.per[d].r[j] = r_bound;
            }
            let dist = reference.distance_pre(&pts[i], lat[i], pre, unit);
            let (exact, r, culled) = leaf.geo_rule(dist);
            self.per[d].set_outcome(j, Outcome { exact, r, culled });
        }
        self.pending = pending;
    }

    /// The (exactness, relevance) of the document at position `j`, `None` when culled:
    /// as `eval::item_outcome` computes it.
    #[inline]
    pub(crate) fn outcome(&self, criteria: &[Criterion], j: usize) -> Option<(bool, f64)> {
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

impl Criterion {
    /// A geo criterion that cannot cull, keeps its own exactness and gives exact points
    /// at least what any other point gets (`exactRelevance` ≥ `fuzzyRelevance`): its
    /// outcome never decreases as the distance shrinks, so a distance bounded from
    /// below bounds the outcome from above (`ChunkScores::defer`).
    fn deferrable(&self) -> bool {
        !self.cull
            && !self.exact_match
            && matches!(
                &self.node,
                Node::Leaf(leaf @ Leaf {
                    dim: Some(_),
                    matcher: Matcher::Geo { cull: None, .. },
                    ..
                }) if leaf.exact_rel >= leaf.fuzzy_rel
            )
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
                    let x = v[i];
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
                    let b = e[i];
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
}
