//! Requests ranked from how far each criterion's relevance can reach. A request that
//! ranks every document (no culling, no text: §7.2's "exact matches first, then close
//! matches") usually has a page of relevance near the most any document can get. A bar
//! the page's last result is at least as good as — guesses stepping down from that
//! most while few documents reach them, else the k-th best of the last guess's
//! documents or of a sample of the chunks — is reached,
//! per criterion, by the documents it gives enough (the others giving their most); the
//! postings name a superset of them:
//! numeric values within a distance of the wanted interval, points within a distance of
//! the reference, elements close enough, exact documents. Only the intersection of
//! those sets, the documents that may be exact, and those whose membership is not
//! certain are scored; every other document is a result of lower relevance, counted
//! from sets. The evaluation property tests (`candidates.rs`) hold the answers equal,
//! to the bit, to an item-by-item scan.

use roaring::RoaringBitmap;

use crate::candidates::{element_union, numeric_range, within};
use crate::criteria::{Criterion, EvalCtx, Leaf, Matcher, Node};
use crate::eval::{scan, Filter, Results, Sink, TopK, Want};
use crate::Snapshot;
use discern_dimensions::Interval;

/// Every `SAMPLE_EVERY`-th chunk is scored for the bar.
const SAMPLE_EVERY: usize = 64;

/// The first guess at the page's relevance: this far below the most any document can
/// get; and the most documents scored for any guess.
const GUESS: f64 = 0.06;
const GUESSED: u64 = 20_000;
/// Each further guess is this many times as far below the most. (Relevance bunches up
/// where the far documents get the others' most: a doubling step jumps from a few
/// hundred documents reaching a guess to most of the collection.)
const GUESS_STEP: f64 = 1.25;

/// Documents few enough to score without narrowing them further.
const FEW: u64 = 4096;

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
    filter: &Filter<'_>,
    want: Want,
) -> Option<Results> {
    let (k, collect) = want.top()?;
    if k == 0 || !filter.admits_all() || filter.exact_only {
        return None;
    }
    let live = snap.live_docs();
    // (on a small collection a scan costs less than the sets; tests use any size)
    let most = if cfg!(test) {
        u64::MAX
    } else {
        if live.len() < 65_536 {
            return None;
        }
        live.len() / 8
    };
    let mut leaves: Vec<(f64, &Leaf)> = Vec::with_capacity(criteria.len());
    for c in criteria {
        let Node::Leaf(leaf) = &c.node else {
            return None;
        };
        if c.may_cull() || matches!(leaf.matcher, Matcher::Text(_)) {
            return None;
        }
        leaves.push((c.weight, leaf));
    }
    let total_w: f64 = leaves.iter().map(|(w, _)| w).sum();
    if leaves.is_empty() || total_w.is_nan() || total_w <= 0.0 {
        return None;
    }
    // documents that are results whatever their other values: some criterion gives
    // them a relevance above 0
    let mut certain = RoaringBitmap::new();
    for &(w, leaf) in &leaves {
        if w > 0.0 {
            certain |= positive(snap, leaf)?;
        }
    }
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
    let most_all: f64 = leaves
        .iter()
        .map(|&(w, leaf)| w * leaf.max_relevance())
        .sum();
    let plan = Plan {
        snap,
        ctx,
        leaves: &leaves,
        total_w,
        most_all,
    };
    let score = |docs: &RoaringBitmap, bar: Option<(bool, f64)>| {
        let docs: Vec<u32> = docs.iter().collect();
        scan(snap, Some(&docs), criteria, ctx, filter, || {
            TopK::new(k, collect).above(bar)
        })
    };
    // First guesses: the documents that can come within `GUESS` of the most relevance
    // any can get, then within a quarter more, and so on while they are few. When k of
    // them do, they are the page; else their k-th best is a bar the page's last result
    // is at least as good as. (A far-off reference leaves few documents near the most:
    // the page is a little further down, not a sample's bar away.)
    let mut bar = None;
    let mut below = GUESS;
    loop {
        let guess = most_all / total_w - below;
        if guess <= 0.0 {
            break;
        }
        let Some(reaching) = plan.reaching_either(guess, GUESSED) else {
            break;
        };
        let scored = &(&reaching | &maybe_exact) | &uncertain;
        if scored.len() > GUESSED {
            break;
        }
        let top = score(&scored, None);
        match top.bar() {
            Some(b) if b.0 || b.1 >= guess => {
                return Some(finish(top.into_results(ctx.clone()), &certain, &scored));
            }
            // (any k documents' k-th best is a bar the page reaches: the highest is kept;
            // an exact one has returned above)
            Some(b) if bar.is_none_or(|kept: (bool, f64)| b.1 > kept.1) => bar = Some(b),
            _ => {}
        }
        below *= GUESS_STEP;
    }
    // else the k-th best result of a sample of the chunks
    let bar = match bar {
        Some(bar) => bar,
        None => {
            let chunks = snap.chunks().len();
            let mut sample = RoaringBitmap::new();
            for c in (0..chunks).step_by(SAMPLE_EVERY) {
                let base = (c * crate::CHUNK) as u32;
                sample.insert_range(base..base.saturating_add(crate::CHUNK as u32));
            }
            sample &= live;
            let docs: Vec<u32> = sample.iter().collect();
            let top = scan(snap, Some(&docs), criteria, ctx, filter, || {
                TopK::new(k, false)
            });
            top.bar()?
        }
    };
    // the documents that can reach it (only exact ones can reach an exact bar)
    let reaching = if bar.0 {
        RoaringBitmap::new()
    } else {
        plan.reaching_either(bar.1, most / 4)?
    };
    let scored = &(&reaching | &maybe_exact) | &uncertain;
    if scored.len() > most {
        return None;
    }
    let top = score(&scored, Some(bar));
    let results = top.into_results(ctx.clone());
    if results.hits.len() < k {
        return None; // (the bar's k are among the documents scored)
    }
    Some(finish(results, &certain, &scored))
}

/// The results of the documents `scored`, with every document of `certain` not scored:
/// a result, not exact, below the page.
fn finish(mut results: Results, certain: &RoaringBitmap, scored: &RoaringBitmap) -> Results {
    #[cfg(test)]
    ANSWERED.with(|n| n.set(n.get() + 1));
    let unscored = certain - scored;
    results.total += unscored.len() as usize;
    if let Some(m) = &mut results.matched {
        m.other |= unscored;
    }
    results
}

/// A request's weighing leaves, to find the documents that can reach a relevance.
struct Plan<'a> {
    snap: &'a Snapshot,
    ctx: &'a EvalCtx,
    /// (weight, leaf) of every top-level criterion.
    leaves: &'a [(f64, &'a Leaf)],
    total_w: f64,
    /// Σ w · the most each leaf gives.
    most_all: f64,
}

impl Plan<'_> {
    /// A superset of the documents whose relevance can be `bar` or more; `None` when
    /// no criterion narrows them.
    fn reaching(&self, bar: f64) -> Option<RoaringBitmap> {
        // what each criterion must give, the others giving their most: the most
        // selective sets first (a few grid cells, then elements, then numeric ranges,
        // the highest needs first)
        let mut needs: Vec<(f64, &Leaf)> = self
            .leaves
            .iter()
            .filter(|(w, _)| *w > 0.0)
            .map(|&(w, leaf)| {
                let others = self.most_all - w * leaf.max_relevance();
                let need = (bar * self.total_w - others) / w - SLACK * self.total_w / w;
                (need, leaf)
            })
            .filter(|(need, _)| *need > 0.0)
            .collect();
        let rank = |leaf: &Leaf| match leaf.matcher {
            Matcher::Geo { .. } => 0,
            Matcher::Numeric { .. } => 2,
            _ => 1,
        };
        needs.sort_by(|a, b| rank(a.1).cmp(&rank(b.1)).then(b.0.total_cmp(&a.0)));
        let mut reaching: Option<RoaringBitmap> = None;
        for (need, leaf) in needs {
            // (fewer than this are scored faster than a further set is made)
            if reaching.as_ref().is_some_and(|r| r.len() <= FEW) {
                break;
            }
            if let Some(set) = reach(self.snap, self.ctx, leaf, need) {
                reaching = Some(match reaching {
                    None => set,
                    Some(r) => r & set,
                });
            }
        }
        reaching
    }

    /// A superset of the documents whose relevance can be `bar` or more: `reaching`,
    /// unless it leaves more than `few`, narrowed by `reaching_pairs` then.
    fn reaching_either(&self, bar: f64, few: u64) -> Option<RoaringBitmap> {
        match self.reaching(bar) {
            Some(r) if r.len() <= few => Some(r),
            one => match (self.reaching_pairs(bar), one) {
                (Some(p), Some(o)) => Some(p & o),
                (p, o) => p.or(o),
            },
        }
    }

    /// `reaching` for a bar no one criterion narrows much: the relevance the
    /// documents reaching `bar` lack, Σ w · (most − r), is at most a budget, so at
    /// most one criterion can lack more than half of it. The union, over each
    /// criterion, of the documents it gives at least its most less the whole budget
    /// and every other criterion its most less half of it.
    fn reaching_pairs(&self, bar: f64) -> Option<RoaringBitmap> {
        let budget = self.most_all - bar * self.total_w + SLACK * self.total_w;
        let within_budget = |w: f64, leaf: &Leaf, part: f64| {
            let need = leaf.max_relevance() - part / w;
            if need > 0.0 {
                reach(self.snap, self.ctx, leaf, need)
            } else {
                None
            }
        };
        let mut half: Vec<Option<RoaringBitmap>> = Vec::new();
        let mut whole: Vec<Option<RoaringBitmap>> = Vec::new();
        for &(w, leaf) in self.leaves.iter().filter(|(w, _)| *w > 0.0) {
            half.push(within_budget(w, leaf, budget / 2.0));
            whole.push(within_budget(w, leaf, budget));
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
            out |= term?; // (a criterion may lack everything, and no other narrows)
        }
        Some(out)
    }
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
