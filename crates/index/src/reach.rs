//! Requests ranked from how far each criterion's relevance can reach. A request that
//! ranks every document (no culling, no text: §7.2's "exact matches first, then close
//! matches") usually has a page of relevance near the most any document can get. A bar
//! the page's last result is at least as good as — guesses stepping down from that
//! most while few documents reach them, else the k-th best of the documents the guesses
//! scored or of a sample of the chunks — allows the documents reaching it to lack a
//! budget of relevance in all. Per criterion, the postings name a superset of the
//! documents lacking at most a part of it there: numeric values within a distance of the
//! wanted interval, points within a distance of the reference, elements close enough,
//! exact documents. Those lacking at most the whole budget on every criterion; where
//! that is too many, at most one criterion lacking more than half of it (`pairs`), or
//! the one criterion most documents lack much of lacking at most a share and the
//! others the rest (`split`). Only those, the documents that may be exact, and those
//! whose membership is not certain are scored; every other document is a result of
//! lower relevance, counted from sets. The evaluation property tests (`candidates.rs`)
//! hold the answers equal, to the bit, to an item-by-item scan.

use std::cell::RefCell;

use roaring::RoaringBitmap;

use crate::admit::Admit;
use crate::candidates::{element_union, numeric_range, within};
use crate::criteria::{Criterion, EvalCtx, Leaf, Matcher, Node};
use crate::eval::scan;
use crate::hits::{Results, Sink, TopK, Want};
use crate::{FastMap, Snapshot};
use discern_dimensions::Interval;

/// Every `SAMPLE_EVERY`-th chunk is scored for the bar.
const SAMPLE_EVERY: usize = 64;

/// The first guess at the page's relevance: this far below the most any document can
/// get; and the most documents scored for any guess. (Tests narrow small collections
/// the way large ones are: the guesses fail, the pairs and the split run.)
const GUESS: f64 = 0.06;
const GUESSED: u64 = if cfg!(test) { 200 } else { 20_000 };
/// Each further guess is this many times as far below the most. (Relevance bunches up
/// where the far documents get the others' most: a doubling step jumps from a few
/// hundred documents reaching a guess to most of the collection.)
const GUESS_STEP: f64 = 1.25;

/// Documents few enough to score without narrowing them further.
const FEW: u64 = if cfg!(test) { 2 } else { 4096 };

/// How many times a split's share of the budget rises.
const SPLIT_STEPS: usize = 6;

/// Relevance differences below this are not told apart by bounds.
const SLACK: f64 = 1e-9;

#[cfg(test)]
thread_local! {
    /// Requests `reached_results` answered on this thread.
    pub(crate) static ANSWERED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `Results` for a request (criteria prepared) whose page is found from the criteria's
/// reach; `None` when it must be evaluated in full.
pub(crate) fn reached_results(
    snap: &Snapshot,
    criteria: &[Criterion],
    ctx: &EvalCtx,
    filter: &Admit,
    want: Want<'_>,
) -> Option<Results> {
    let (k, collect) = want.top()?;
    if k == 0 || filter.exact_only {
        return None;
    }
    // (the documents `items` and `notItems` admit: those scanned are checked by `scan`)
    let live = filter.restricted(snap.live_docs());
    let live = &*live;
    // (on a small collection a scan costs less than the sets; tests use any size)
    let most = if cfg!(test) {
        u64::MAX
    } else {
        if live.len() < 65_536 {
            return None;
        }
        live.len() / 8
    };
    let leaves = ranking_leaves(criteria)?;
    let plan = Plan::new(snap, ctx, &leaves)?;
    // documents that are results whatever their other values: some criterion gives
    // them a relevance above 0
    let mut certain = RoaringBitmap::new();
    for &(w, leaf) in &leaves {
        if w > 0.0 {
            certain |= positive(snap, leaf)?;
        }
    }
    filter.restrict(&mut certain);
    let uncertain = live - &certain;
    // documents that may be exact
    let mut maybe_exact = live.clone();
    for (c, &(_, leaf)) in criteria.iter().zip(&leaves) {
        if !c.exact_match {
            maybe_exact &= exact_superset(snap, leaf)?;
        }
    }
    if uncertain.len() + maybe_exact.len() > most {
        return None;
    }
    let mut acc = ScoredSoFar {
        docs: RoaringBitmap::new(),
        top: TopK::new(k, collect),
    };
    let score = |acc: &mut ScoredSoFar, more: RoaringBitmap, floor: Option<(bool, f64)>| {
        let docs: Vec<u32> = (more - &acc.docs).iter().collect();
        let top = scan(snap, Some(&docs), criteria, ctx, filter, || {
            TopK::new(k, collect).above(floor)
        });
        acc.docs.extend(docs);
        acc.top = std::mem::replace(&mut acc.top, TopK::new(0, false)).merge(top);
    };
    // First guesses: the documents that can come within `GUESS` of the most relevance
    // any can get, then within a quarter more, and so on while they are few. When the
    // k best of the documents scored reach the guess, they are the page; else their
    // k-th best is a bar the page's last result is at least as good as. (A far-off
    // reference leaves few documents near the most: the page is a little further down,
    // not a sample's bar away.) Each guess scores only the documents it adds.
    let mut below = GUESS;
    loop {
        let guess = plan.most_all / plan.total_w - below;
        // (a bar at or above the guess reaches fewer documents than it)
        if guess <= 0.0 || acc.top.bar().is_some_and(|b| b.1 >= guess) {
            break;
        }
        let Some(reaching) = plan.reaching_either(guess, GUESSED) else {
            break;
        };
        let more = &(&reaching | &maybe_exact) | &uncertain;
        if more.len() > GUESSED {
            break;
        }
        let floor = acc.top.bar();
        score(&mut acc, more, floor);
        if acc.top.bar().is_some_and(|b| b.0 || b.1 >= guess) {
            return Some(acc.finish(ctx, &certain));
        }
        below *= GUESS_STEP;
    }
    // else the k-th best of those scored, with a sample of the chunks when fewer than k
    if acc.top.bar().is_none() {
        let mut sample = RoaringBitmap::new();
        for c in (0..snap.chunks().len()).step_by(SAMPLE_EVERY) {
            let base = (c * crate::CHUNK) as u32;
            sample.insert_range(base..base.saturating_add(crate::CHUNK as u32));
        }
        score(&mut acc, sample & live, None);
    }
    // (k documents scored: they and any better are among those scored from here on)
    let bar = acc.top.bar()?;
    // the documents that can reach it (only exact ones can reach an exact bar)
    let reaching = if bar.0 {
        RoaringBitmap::new()
    } else {
        plan.reaching_either(bar.1, if cfg!(test) { FEW } else { most / 4 })?
    };
    let more = &(&reaching | &maybe_exact) | &uncertain;
    if more.len() > most {
        return None;
    }
    score(&mut acc, more, Some(bar));
    Some(acc.finish(ctx, &certain))
}

/// The documents scored so far, and their results' best k and counts.
struct ScoredSoFar {
    docs: RoaringBitmap,
    top: TopK,
}

impl ScoredSoFar {
    /// The results, with every document of `certain` not scored: a result, not exact,
    /// below the page.
    fn finish(self, ctx: &EvalCtx, certain: &RoaringBitmap) -> Results {
        #[cfg(test)]
        ANSWERED.with(|n| n.set(n.get() + 1));
        let mut results = self.top.into_results(ctx.clone());
        let unscored = certain - &self.docs;
        results.total += unscored.len() as usize;
        if let Some(m) = &mut results.matched {
            m.other |= unscored;
        }
        results
    }
}

/// A request's weighing leaves, to find the documents that can reach a relevance.
///
/// A document reaching a bar lacks at most a budget of relevance, Σ w · (most − r) ≤
/// `budget(bar)`; each bound below is a superset of the documents that do.
struct Plan<'a> {
    snap: &'a Snapshot,
    ctx: &'a EvalCtx,
    /// (weight, leaf) of every top-level criterion.
    leaves: &'a [(f64, &'a Leaf)],
    total_w: f64,
    /// Σ w · the most each leaf gives.
    most_all: f64,
    /// `lacking_at_most` answers by (leaf, part): the pairs bound and the split ask for
    /// the same halves of a budget.
    made: RefCell<FastMap<(usize, u64), Option<RoaringBitmap>>>,
}

impl<'a> Plan<'a> {
    /// `None` without leaves or weight.
    fn new(snap: &'a Snapshot, ctx: &'a EvalCtx, leaves: &'a [(f64, &'a Leaf)]) -> Option<Self> {
        let total_w: f64 = leaves.iter().map(|(w, _)| w).sum();
        if leaves.is_empty() || total_w.is_nan() || total_w <= 0.0 {
            return None;
        }
        let most_all = leaves.iter().map(|&(w, l)| w * l.max_relevance()).sum();
        Some(Plan {
            snap,
            ctx,
            leaves,
            total_w,
            most_all,
            made: RefCell::default(),
        })
    }

    /// The relevance a document reaching `bar` lacks at most (a little more, for
    /// rounding).
    fn budget(&self, bar: f64) -> f64 {
        self.most_all - bar * self.total_w + SLACK * self.total_w
    }

    /// The weighing leaves but `skip`, by their index.
    fn weighing(&self, skip: Option<usize>) -> impl Iterator<Item = usize> + '_ {
        (0..self.leaves.len()).filter(move |&i| self.leaves[i].0 > 0.0 && Some(i) != skip)
    }

    /// A superset of the documents leaf `i` gives at least its most less `part / w`
    /// (they lack at most `part` there); `None` when that is every document or the
    /// postings cannot narrow them.
    fn lacking_at_most(&self, i: usize, part: f64) -> Option<RoaringBitmap> {
        let key = (i, part.to_bits());
        if let Some(made) = self.made.borrow().get(&key) {
            return made.clone();
        }
        let (w, leaf) = self.leaves[i];
        let need = leaf.max_relevance() - part / w;
        let set = if need > 0.0 {
            reach(self.snap, self.ctx, leaf, need)
        } else {
            None
        };
        self.made.borrow_mut().insert(key, set.clone());
        set
    }

    /// A superset of the documents whose relevance can be `bar` or more: `single`,
    /// unless it leaves more than `few`, narrowed by `pairs`, and then by `split`.
    fn reaching_either(&self, bar: f64, few: u64) -> Option<RoaringBitmap> {
        let budget = self.budget(bar);
        let both = self.within(budget, None, few);
        if both.as_ref().is_some_and(|r| r.len() <= few) {
            return both;
        }
        match (self.split(budget, few), both) {
            (Some(s), Some(b)) => Some(s & b),
            (s, b) => s.or(b),
        }
    }

    /// The documents the leaves but `skip` let lack at most `budget` in all: `single`,
    /// narrowed by `pairs` when it leaves more than `few`.
    fn within(&self, budget: f64, skip: Option<usize>, few: u64) -> Option<RoaringBitmap> {
        match self.single(budget, skip) {
            Some(r) if r.len() <= few => Some(r),
            one => match (self.pairs(budget, skip), one) {
                (Some(p), Some(o)) => Some(p & o),
                (p, o) => p.or(o),
            },
        }
    }

    /// No leaf lacks more than the whole budget: the intersection of what each gives
    /// then; `None` when no leaf narrows the documents.
    fn single(&self, budget: f64, skip: Option<usize>) -> Option<RoaringBitmap> {
        // the most selective sets first (a few grid cells, then elements, then numeric
        // ranges, the highest needs first)
        let mut order: Vec<(u8, f64, usize)> = self
            .weighing(skip)
            .map(|i| {
                let (w, leaf) = self.leaves[i];
                let rank = match leaf.matcher {
                    Matcher::Geo { .. } => 0,
                    Matcher::Numeric { .. } => 2,
                    _ => 1,
                };
                (rank, leaf.max_relevance() - budget / w, i)
            })
            .filter(|(_, need, _)| *need > 0.0)
            .collect();
        order.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut reaching: Option<RoaringBitmap> = None;
        for (_, _, i) in order {
            // (fewer than this are scored faster than a further set is made)
            if reaching.as_ref().is_some_and(|r| r.len() <= FEW) {
                break;
            }
            if let Some(set) = self.lacking_at_most(i, budget) {
                reaching = Some(match reaching {
                    None => set,
                    Some(r) => r & set,
                });
            }
        }
        reaching
    }

    /// For a budget no one leaf narrows much: at most one leaf can lack more than half
    /// of it. The union, over each leaf, of the documents it lets lack the whole budget
    /// and every other leaf half of it; `None` when no leaf narrows them.
    fn pairs(&self, budget: f64, skip: Option<usize>) -> Option<RoaringBitmap> {
        let mut half: Vec<Option<RoaringBitmap>> = Vec::new();
        let mut whole: Vec<Option<RoaringBitmap>> = Vec::new();
        for i in self.weighing(skip) {
            half.push(self.lacking_at_most(i, budget / 2.0));
            whole.push(self.lacking_at_most(i, budget));
        }
        if whole.is_empty() {
            return None; // (no leaves: nothing narrows the documents)
        }
        let and = |a: Option<RoaringBitmap>, b: &Option<RoaringBitmap>| match (a, b) {
            (Some(a), Some(b)) => Some(a & b),
            (None, b) => b.clone(),
            (a, None) => a,
        };
        let mut out = RoaringBitmap::new();
        for (j, lacking) in whole.iter().enumerate() {
            let mut term = lacking.clone();
            for (i, h) in half.iter().enumerate() {
                if i != j {
                    term = and(term, h);
                }
            }
            out |= term?; // (a leaf may lack everything, and no other narrows)
        }
        Some(out)
    }

    /// For a budget that most documents spend on one leaf (a reference far from most
    /// points, a value few have): a document lacks at most `t` there, or the others
    /// lack at most `budget − t` together. The leaf is the one that lets the fewest
    /// lack half the budget; `t` rises from half the budget, halving what is left,
    /// while at most `FEW` documents lack that little there.
    fn split(&self, budget: f64, few: u64) -> Option<RoaringBitmap> {
        let (j, mut near) = self
            .weighing(None)
            .filter_map(|i| Some((i, self.lacking_at_most(i, budget / 2.0)?)))
            .min_by_key(|(_, set)| set.len())?;
        if near.len() > few {
            return None;
        }
        let mut t = budget / 2.0;
        for _ in 0..SPLIT_STEPS {
            let higher = budget - (budget - t) / 2.0;
            match self.lacking_at_most(j, higher) {
                Some(set) if set.len() <= FEW => (t, near) = (higher, set),
                _ => break,
            }
        }
        let far = self.within(budget - t + SLACK * self.total_w, Some(j), few)?;
        Some(near | far)
    }
}

/// `Plan::reaching_either` for `criteria` (prepared; `None` for a request this module
/// does not answer): what the bounds test checks.
#[cfg(test)]
pub(crate) fn reaching_for_test(
    snap: &Snapshot,
    criteria: &[Criterion],
    ctx: &EvalCtx,
    bar: f64,
    few: u64,
) -> Option<RoaringBitmap> {
    let leaves = ranking_leaves(criteria)?;
    Plan::new(snap, ctx, &leaves)?.reaching_either(bar, few)
}

/// (weight, leaf) of every criterion, when each is a leaf that neither culls nor is
/// text (a request this module answers).
fn ranking_leaves(criteria: &[Criterion]) -> Option<Vec<(f64, &Leaf)>> {
    criteria
        .iter()
        .map(|c| match &c.node {
            Node::Leaf(leaf) if !c.may_cull() && !matches!(leaf.matcher, Matcher::Text(_)) => {
                Some((c.weight, leaf))
            }
            _ => None,
        })
        .collect()
}

/// The documents to which `leaf` surely gives a relevance above 0, from sets; `None`
/// when that depends on more than whether a document has a value.
fn positive(snap: &Snapshot, leaf: &Leaf) -> Option<RoaringBitmap> {
    let Some(dim) = leaf.dim else {
        return Some(snap.live_docs().clone()); // relevance 1
    };
    let has = &*snap.postings(dim)?.has;
    let mut out = if leaf.positive_with_value() {
        has.clone()
    } else {
        RoaringBitmap::new()
    };
    if leaf.null_rel > 0.0 {
        out |= snap.live_docs() - has;
    }
    Some(out)
}

/// A superset of the documents `leaf` finds exact.
fn exact_superset(snap: &Snapshot, leaf: &Leaf) -> Option<RoaringBitmap> {
    let Some(dim) = leaf.dim else {
        return Some(snap.live_docs().clone());
    };
    let post = snap.postings(dim)?;
    let mut out = crate::candidates::exact_set(leaf, post)?;
    if leaf.null_exact {
        out |= snap.live_docs() - &*post.has;
    }
    Some(out)
}

/// A superset of the documents to which `leaf` gives a relevance of at least `need`
/// (> 0); `None` when the postings cannot narrow them.
fn reach(snap: &Snapshot, ctx: &EvalCtx, leaf: &Leaf, need: f64) -> Option<RoaringBitmap> {
    let dim = leaf.dim?;
    let post = snap.postings(dim)?;
    if matches!(leaf.matcher, Matcher::Text(_)) {
        return None;
    }
    // documents found exact get exactRelevance, close ones fuzzyRelevance × closeness
    let mut out = if leaf.exact_rel >= need {
        crate::candidates::exact_set(leaf, post)?
    } else {
        RoaringBitmap::new()
    };
    if leaf.fuzzy_rel >= need {
        // the closeness a close document needs
        let closeness = need / leaf.fuzzy_rel;
        match &leaf.matcher {
            Matcher::Elements { table, .. } => {
                // (an excluded element gives 0: left in, a superset)
                let close: Vec<u32> = table
                    .iter()
                    .enumerate()
                    .filter(|(_, rule)| !rule.exact && rule.best >= closeness * (1.0 - SLACK))
                    .map(|(e, _)| e as u32)
                    .collect();
                out |= element_union(post, &close);
            }
            Matcher::Numeric { set, scale } => {
                // 1 / (1 + d / s) ≥ closeness  ⇔  d ≤ s (1 / closeness − 1)
                let s = if *scale > 0.0 { *scale } else { ctx.scale(dim) };
                out |= numeric_range(post, &widened(set, s * (1.0 / closeness - 1.0)));
            }
            Matcher::Geo {
                reference,
                exact,
                normal,
                iso,
                unit,
                ..
            } => {
                // fuzzy / (1 + (d − e) / n) ≥ need  ⇔  d ≤ e + n (1 / closeness − 1); an
                // iso step rounds distances down by less than one step
                let d = exact + normal * (1.0 / closeness - 1.0) + iso.unwrap_or(0.0);
                out |= within(post, &reference.boxes(), d, *unit)?;
            }
            // (no closeness: "has a value", keywords)
            _ => {}
        }
    }
    if leaf.null_rel >= need {
        out |= snap.live_docs() - &*post.has;
    }
    Some(out)
}

/// The values within `d` of `set` (a little more, for rounding), as a closed interval.
fn widened(set: &Interval, d: f64) -> Interval {
    let d = d * (1.0 + 1e-9) + 1e-9;
    if !d.is_finite() {
        return Interval::ALL;
    }
    // (an empty interval's ends may cross: its distances are measured from both)
    let (lo, hi) = match (set.lo, set.hi) {
        (Some(lo), Some(hi)) => (Some(lo.min(hi)), Some(lo.max(hi))),
        ends => ends,
    };
    Interval {
        lo: lo.map(|x| x - d - x.abs() * 1e-12),
        lo_incl: true,
        hi: hi.map(|x| x + d + x.abs() * 1e-12),
        hi_incl: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_query, IndexWriter};
    use discern_dimensions::Dimensions;
    use discern_model::{Record, Value};
    use std::sync::Arc;

    /// A tree criterion reaches the elements whose closeness gives what is needed: for
    /// `A1`, `A` (2·1 / 3) and `A2` (2·1 / 4) reach 1/2, only `A` reaches 0.6, and 0.7
    /// only the exact `A1`; `B` (no common ancestor) never.
    #[test]
    fn tree_reach_is_by_closeness() {
        let dims = Dimensions::parse(
            b"<dimensions><dimension id='t' type='tree'>
                <element id='A'><element id='A1'/><element id='A2'/></element>
                <element id='B'/>
              </dimension></dimensions>",
        )
        .unwrap();
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(Arc::new(dims)));
        for (id, t) in [("a", "A"), ("a1", "A1"), ("a2", "A2"), ("b", "B")] {
            b.upsert(id, &Record(vec![("t".into(), Value::Str(t.into()))]));
        }
        let snap = b.commit();
        let body = serde_json::json!({"criteria": [{"dimension": "t", "id": "A1"}]});
        let q = parse_query(&body, &snap.dims, 10).unwrap();
        let Node::Leaf(leaf) = &q.criteria[0].node else {
            panic!("a leaf");
        };
        let ctx = EvalCtx { scales: vec![0.0] };
        let ids = |need: f64| -> Vec<String> {
            let set = reach(&snap, &ctx, leaf, need).unwrap();
            let mut ids: Vec<String> = set
                .iter()
                .map(|d| snap.doc(d).unwrap().id.to_string())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(ids(0.5), ["a", "a1", "a2"]);
        assert_eq!(ids(0.6), ["a", "a1"]);
        assert_eq!(ids(0.7), ["a1"]);
    }
}
