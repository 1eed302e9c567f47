//! Criteria (SPEC §7.2): typed matchers (read from a request by `parse.rs`) and the
//! per-item relevance rules. Every formula of §7.2 lives in this module, `geo.rs`
//! (distances) and `text/` (BM25).

use std::collections::HashSet;
use std::sync::Arc;

use discern_dimensions::{ElementSet, IndexedValue, Interval};
use roaring::RoaringBitmap;

use crate::columns::{ChunkCols, ColValue};
use crate::geo::{GeoPoint, GeoRef, Unit};
use crate::text::TextMatcher;

mod parse;
pub(crate) use parse::parse_criteria;

/// Deepest nesting of criteria groups.
const MAX_GROUP_DEPTH: usize = 32;

pub struct Criterion {
    pub weight: f64,
    pub cull: bool,
    pub exact_match: bool,
    pub node: Node,
}

pub enum Node {
    Group { or: bool, children: Vec<Criterion> },
    Leaf(Leaf),
}

pub struct Leaf {
    /// Index of the dimension; `None` for `{"dimension": ""}` (every item, exact).
    pub dim: Option<usize>,
    pub null_exact: bool,
    pub exact_rel: f64,
    pub fuzzy_rel: f64,
    pub null_rel: f64,
    pub matcher: Matcher,
}

pub enum Matcher {
    /// Only a dimension: "has a value".
    Has,
    Keyword {
        values: HashSet<String>,
        not: HashSet<String>,
        /// The documents holding a value, and a not-value (from the postings, per query).
        docs: Option<(RoaringBitmap, RoaringBitmap)>,
    },
    Elements {
        set: Arc<ElementSet>,
        tree: bool,
        ordered: bool,
        wanted: Vec<u32>,
        isolated: Vec<u32>,
        not: Vec<u32>,
        /// The leaf names only excluded elements (`notId`/`notValue`): every item with a
        /// value none of which is excluded is exact (SPEC §7.2 rule 3). Wanted ids that
        /// name no element leave `wanted` empty but this false: they match nothing.
        only_not: bool,
        /// Per element of the set, what an item tagged with it gets (from the fields above).
        table: Vec<ElementRule>,
    },
    Numeric {
        set: Interval,
        scale: f64,
    },
    Geo {
        reference: GeoRef,
        /// The reference's points, precomputed for distances.
        pre: Vec<GeoPoint>,
        /// The reference's latitude bands, for distance floors (`GeoRef::lat_bands`).
        bands: Vec<(f64, f64)>,
        exact: f64,
        cull: Option<f64>,
        normal: f64,
        iso: Option<f64>,
        unit: Unit,
    },
    Text(Box<TextMatcher>),
}

/// What tagging an item with one element means for an elements criterion.
#[derive(Clone, Copy, Default)]
pub struct ElementRule {
    /// Under (or equal to) a `notId`/`notValue` element.
    pub(crate) excluded: bool,
    /// Under a wanted element, or one of the isolated ones.
    pub(crate) exact: bool,
    /// The best closeness to any wanted or isolated element.
    pub(crate) best: f64,
}

/// Each element's rule. `closeness`: whether close elements can score (a
/// `fuzzyRelevance` above 0); when not, `best` is left 0 — it would be multiplied by 0 —
/// and a query on a large tree skips a closeness per element and wanted element.
fn element_rules(
    set: &ElementSet,
    (tree, ordered): (bool, bool),
    closeness: bool,
    wanted: &[u32],
    isolated: &[u32],
    not: &[u32],
) -> Vec<ElementRule> {
    let hit = |w: u32, b: u32| {
        if tree {
            set.is_ancestor_or_self(w, b)
        } else {
            w == b
        }
    };
    (0..set.elements.len() as u32)
        .map(|b| {
            let mut best: f64 = 0.0;
            for &a in wanted.iter().chain(isolated).filter(|_| closeness) {
                let c = if tree {
                    tree_closeness(set, a, b)
                } else if ordered {
                    ordered_closeness(a, b, set.elements.len())
                } else {
                    0.0
                };
                best = best.max(c);
            }
            ElementRule {
                excluded: not.iter().any(|&n| hit(n, b)),
                exact: wanted.iter().any(|&w| hit(w, b)) || isolated.contains(&b),
                best,
            }
        })
        .collect()
}

/// Outcome of one criterion for one item.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub exact: bool,
    pub r: f64,
    pub culled: bool,
}

/// Closeness of a tree node pair: 2·depth(lca) / (depth(a) + depth(b)).
pub fn tree_closeness(set: &ElementSet, a: u32, b: u32) -> f64 {
    let da = set.elements[a as usize].depth as f64;
    let db = set.elements[b as usize].depth as f64;
    2.0 * set.lca_depth(a, b) as f64 / (da + db)
}

/// Closeness of two ranks in an ordered list of `n`: 1 − |a − b| / (n − 1).
pub fn ordered_closeness(a: u32, b: u32, n: usize) -> f64 {
    if n <= 1 {
        return 1.0;
    }
    1.0 - (a as f64 - b as f64).abs() / (n as f64 - 1.0)
}

/// Numeric closeness: 1 / (1 + d / s).
pub fn numeric_closeness(d: f64, s: f64) -> f64 {
    1.0 / (1.0 + d / s)
}

impl Leaf {
    /// The relevance it gives an item it finds exact (text grades it: not for text):
    /// `exactRelevance`, or 1 for `{"dimension": ""}`.
    pub fn exact_relevance(&self) -> f64 {
        if self.dim.is_some() {
            self.exact_rel
        } else {
            1.0
        }
    }

    /// The most relevance it gives any document (text grades: at most 1).
    pub(crate) fn max_relevance(&self) -> f64 {
        match self.matcher {
            Matcher::Text(_) => 1.0,
            _ => self
                .exact_relevance()
                .max(self.fuzzy_rel)
                .max(self.null_rel),
        }
    }

    /// Geo: the least relevance any point gets, the farthest distance's (0 for other
    /// matchers).
    pub(crate) fn geo_least_relevance(&self) -> f64 {
        match &self.matcher {
            Matcher::Geo { unit, .. } => self.geo_rule(crate::geo::max_distance(*unit)).1,
            _ => 0.0,
        }
    }

    /// Whether every document with a value gets a relevance above 0, whatever the value:
    /// "has a value"; a number (closeness is above 0 at any finite distance) or a point
    /// (the farthest still gets some) when exact and close ones both get some.
    pub(crate) fn positive_with_value(&self) -> bool {
        match &self.matcher {
            Matcher::Has => self.exact_rel > 0.0,
            Matcher::Numeric { .. } => self.exact_rel > 0.0 && self.fuzzy_rel > 0.0,
            Matcher::Geo { .. } => self.exact_rel > 0.0 && self.geo_least_relevance() > 0.0,
            _ => false,
        }
    }

    /// The relevance rules of §7.2 for one item, from its column value when the chunk
    /// has one, else from its row.
    #[inline]
    pub fn eval(&self, item: &ItemRef<'_>, ctx: &EvalCtx) -> Outcome {
        let Some(dim) = self.dim else {
            return Outcome {
                exact: true,
                r: self.exact_relevance(),
                culled: false,
            };
        };
        if let Some(cv) = item.cols.and_then(|(cols, i)| cols.get(dim, i)) {
            if let Some(out) = self.eval_column(cv, item.n, ctx) {
                return out;
            }
        }
        let value = item.doc.value(dim);
        self.eval_row(value.as_deref(), item.n, ctx)
    }

    /// The rules from a column's value; `None` when this rule needs the row.
    fn eval_column(&self, cv: ColValue, doc: u32, ctx: &EvalCtx) -> Option<Outcome> {
        let (exact, r, culled) = match (cv, &self.matcher) {
            (
                ColValue::Num(None)
                | ColValue::Point(None)
                | ColValue::Elem(None)
                | ColValue::Present(false),
                _,
            ) => (self.null_exact, self.null_rel, false),
            (_, Matcher::Has) => (true, self.exact_rel, false),
            (ColValue::Num(Some(x)), Matcher::Numeric { set, scale }) => {
                let (e, r) = self.numeric_rule(set, *scale, ctx, std::iter::once(x));
                (e, r, false)
            }
            (
                ColValue::Point(Some((lat, p))),
                Matcher::Geo {
                    reference,
                    pre,
                    unit,
                    ..
                },
            ) => self.geo_rule(reference.distance_pre(&p, lat, pre, *unit)),
            (ColValue::Elem(Some(b)), Matcher::Elements { .. }) => {
                let (e, r) = self.elements_rule(std::slice::from_ref(&b));
                (e, r, false)
            }
            (
                ColValue::Present(true),
                Matcher::Keyword {
                    values,
                    docs: Some((holding, excluding)),
                    ..
                },
            ) => {
                let (e, r) =
                    keyword_rule(self.exact_rel, values.is_empty(), holding, excluding, doc);
                (e, r, false)
            }
            (ColValue::Present(true), Matcher::Text(t)) => {
                let (e, r) = t.eval(doc, self.exact_rel, self.fuzzy_rel);
                (e, r, false)
            }
            (ColValue::Present(true), Matcher::Keyword { docs: None, .. }) => return None,
            _ => (false, 0.0, false),
        };
        Some(Outcome { exact, r, culled })
    }

    /// The rules from an item's row value (`doc`: its doc number, for text).
    pub fn eval_row(&self, value: Option<&IndexedValue>, doc: u32, ctx: &EvalCtx) -> Outcome {
        // geo also decides cullDistance: one distance computation serves both
        if let (
            Matcher::Geo {
                reference, unit, ..
            },
            Some(IndexedValue::Points(ps)),
        ) = (&self.matcher, value)
        {
            let d = ps
                .iter()
                .map(|&(la, lo)| reference.distance(la, lo, *unit))
                .fold(f64::INFINITY, f64::min);
            let (exact, r, culled) = self.geo_rule(d);
            return Outcome { exact, r, culled };
        }
        let (exact, r) = self.rule(value, doc, ctx);
        Outcome {
            exact,
            r,
            culled: false,
        }
    }

    fn rule(&self, value: Option<&IndexedValue>, doc: u32, ctx: &EvalCtx) -> (bool, f64) {
        if self.dim.is_none() {
            return (true, 1.0);
        }
        let Some(value) = value else {
            return (self.null_exact, self.null_rel);
        };
        match (&self.matcher, value) {
            (Matcher::Has, _) => (true, self.exact_rel),
            (
                Matcher::Keyword {
                    values,
                    docs: Some((holding, excluding)),
                    ..
                },
                IndexedValue::Strings(_),
            ) => keyword_rule(self.exact_rel, values.is_empty(), holding, excluding, doc),
            (Matcher::Keyword { values, not, .. }, IndexedValue::Strings(item)) => {
                if item.iter().any(|v| not.contains(v)) {
                    return (false, 0.0);
                }
                if values.is_empty() || item.iter().any(|v| values.contains(v)) {
                    (true, self.exact_rel)
                } else {
                    (false, 0.0)
                }
            }
            (Matcher::Elements { .. }, IndexedValue::Elements(item)) => self.elements_rule(item),
            (
                Matcher::Numeric { set, scale },
                IndexedValue::Int(_)
                | IndexedValue::Ints(_)
                | IndexedValue::Double(_)
                | IndexedValue::Doubles(_),
            ) => self.numeric_rule(set, *scale, ctx, value.numbers()),
            (Matcher::Text(t), IndexedValue::Terms(_)) => {
                t.eval(doc, self.exact_rel, self.fuzzy_rel)
            }
            _ => (false, 0.0),
        }
    }

    /// Tree, ordered, mutex: an item tagged with `item`'s elements.
    pub(crate) fn elements_rule(&self, item: &[u32]) -> (bool, f64) {
        let Matcher::Elements {
            only_not, table, ..
        } = &self.matcher
        else {
            return (false, 0.0);
        };
        let rule = |b: u32| table.get(b as usize).copied().unwrap_or_default();
        if item.iter().any(|&b| rule(b).excluded) {
            return (false, 0.0);
        }
        if *only_not || item.iter().any(|&b| rule(b).exact) {
            return (true, self.exact_rel);
        }
        let best = item.iter().map(|&b| rule(b).best).fold(0.0, f64::max);
        (false, self.fuzzy_rel * best)
    }

    /// Numeric: exact when a value is in the set, else closeness of the nearest value.
    pub(crate) fn numeric_rule(
        &self,
        set: &Interval,
        scale: f64,
        ctx: &EvalCtx,
        values: impl Iterator<Item = f64>,
    ) -> (bool, f64) {
        let mut exact = false;
        let mut d = f64::INFINITY;
        for x in values {
            if set.contains(x) {
                exact = true;
            }
            d = d.min(set.distance(x));
        }
        if exact {
            return (true, self.exact_rel);
        }
        let s = if scale > 0.0 {
            scale
        } else {
            ctx.scale(self.dim.unwrap_or(0))
        };
        (false, self.fuzzy_rel * numeric_closeness(d, s))
    }

    /// Geo, from the distance `d` to the nearest point: (exact, r, dropped by
    /// cullDistance).
    pub(crate) fn geo_rule(&self, mut d: f64) -> (bool, f64, bool) {
        let Matcher::Geo {
            exact,
            cull,
            normal,
            iso,
            ..
        } = &self.matcher
        else {
            return (false, 0.0, false);
        };
        if let Some(step) = iso {
            d = (d / step).floor() * step;
        }
        let dropped = match cull {
            Some(c) => d > *c,
            None => false,
        };
        if d <= *exact {
            return (true, self.exact_rel, dropped);
        }
        (
            false,
            self.fuzzy_rel / (1.0 + (d - exact) / normal),
            dropped,
        )
    }
}

/// One item as the rules read it: its row, doc number and (in a scan) its chunk's
/// columns with its position there.
pub struct ItemRef<'a> {
    pub doc: &'a crate::Doc,
    pub n: u32,
    pub(crate) cols: Option<(&'a ChunkCols, usize)>,
}

/// Per-query facts the rules need: numeric scales from the dimension spans.
#[derive(Clone)]
pub struct EvalCtx {
    pub scales: Vec<f64>,
}

impl EvalCtx {
    pub(crate) fn scale(&self, dim: usize) -> f64 {
        self.scales.get(dim).copied().unwrap_or(0.1)
    }
}

impl Criterion {
    pub fn eval(&self, item: &ItemRef<'_>, ctx: &EvalCtx) -> Outcome {
        let mut out = match &self.node {
            Node::Leaf(leaf) => leaf.eval(item, ctx),
            Node::Group { or, children } => {
                // accumulated in place: no allocation per item
                let (mut culled, mut any, mut all, mut max) = (false, false, true, 0.0f64);
                let mut mean = WeightedMean::default();
                for c in children {
                    let o = c.eval(item, ctx);
                    culled |= o.culled;
                    any |= o.exact;
                    all &= o.exact;
                    max = max.max(o.r);
                    mean.add(c.weight, o.r);
                }
                if children.is_empty() {
                    Outcome {
                        exact: true,
                        r: 1.0,
                        culled,
                    }
                } else if *or {
                    Outcome {
                        exact: any,
                        r: max,
                        culled,
                    }
                } else {
                    Outcome {
                        exact: all,
                        r: mean.value(),
                        culled,
                    }
                }
            }
        };
        if self.exact_match {
            out.exact = true;
        }
        if self.cull && out.r == 0.0 {
            out.culled = true;
        }
        out
    }
}

/// Keyword with its postings: excluded by a not-value, exact by a wanted value (or any
/// value when none is named), else 0.
pub(crate) fn keyword_rule(
    exact_rel: f64,
    any_value: bool,
    holding: &RoaringBitmap,
    excluding: &RoaringBitmap,
    doc: u32,
) -> (bool, f64) {
    if excluding.contains(doc) {
        (false, 0.0)
    } else if any_value || holding.contains(doc) {
        (true, exact_rel)
    } else {
        (false, 0.0)
    }
}

/// Σ w·r / Σ w, accumulated one criterion at a time; 1 when every weight is 0.
#[derive(Default, Clone, Copy)]
pub struct WeightedMean {
    sw: f64,
    swr: f64,
}

impl WeightedMean {
    pub fn add(&mut self, w: f64, r: f64) {
        self.sw += w;
        self.swr += w * r;
    }
    pub fn value(&self) -> f64 {
        if self.sw == 0.0 {
            1.0
        } else {
            self.swr / self.sw
        }
    }
}

#[cfg(test)]
fn weighted_mean(pairs: &[(f64, f64)]) -> f64 {
    let mut m = WeightedMean::default();
    pairs.iter().for_each(|(w, r)| m.add(*w, *r));
    m.value()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formulas_by_hand() {
        assert!((numeric_closeness(2.0, 2.0) - 0.5).abs() < 1e-12);
        assert!((ordered_closeness(0, 4, 5) - 0.0).abs() < 1e-12);
        assert!((ordered_closeness(2, 3, 5) - 0.75).abs() < 1e-12);
        assert_eq!(weighted_mean(&[(0.0, 0.3)]), 1.0);
        assert!((weighted_mean(&[(1.0, 1.0), (3.0, 0.5)]) - 0.625).abs() < 1e-12);
    }

    proptest! {
        #[test]
        fn closeness_in_unit_interval(d in 0.0f64..1e12, s in 1e-6f64..1e9, a in 0u32..50, b in 0u32..50) {
            let c = numeric_closeness(d, s);
            prop_assert!((0.0..=1.0).contains(&c));
            let n = 50usize;
            let o = ordered_closeness(a, b, n);
            prop_assert!((0.0..=1.0).contains(&o));
        }

        #[test]
        fn weighted_mean_in_range(pairs in prop::collection::vec((0.0f64..10.0, 0.0f64..=1.0), 0..6)) {
            let m = weighted_mean(&pairs);
            prop_assert!((0.0..=1.0 + 1e-12).contains(&m));
        }
    }
}
