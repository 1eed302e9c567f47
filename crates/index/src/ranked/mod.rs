//! Text requests ranked from score bounds. When a request's page holds only exact results
//! whose order is their text score's — one weighing text criterion, culled, beside
//! criteria whose exact documents the postings name (`exact.rs`) — the page is found
//! without scoring every document that holds a word. Per (field, term) the postings'
//! level keys (term frequency at least k) and field-length classes
//! (`postings::text_length_key`) bound each document's BM25 contribution by sets; only
//! documents whose bound can reach the page are scored, by the same arithmetic as a full
//! evaluation (`TextMatcher::score_docs`). The counts, and the documents facets count,
//! are set sizes. The evaluation property tests (`candidates.rs`, and here) hold the
//! results equal, to the bit, to an item-by-item scan.

use std::borrow::Cow;

use roaring::{MultiOps, RoaringBitmap};

mod bounds;
#[cfg(test)]
mod tests;

use bounds::{Bounds, Within};

use crate::admit::Admit;
use crate::criteria::{Criterion, EvalCtx, Leaf, Matcher, Node, WeightedMean};
use crate::exact::{exact_intersection, id_key, others_score_zero};
use crate::hits::{Hit, Matched, Results, Sink, TopK, Want};
use crate::text::{grade, Gathered, Scored, TextMatcher};
use crate::Snapshot;

/// How the page's request is evaluated when `ranked_results` answers it.
struct Plan<'c> {
    /// Position of the text criterion among the top-level criteria, and its leaf.
    at: usize,
    leaf: &'c Leaf,
    dim: usize,
    /// Leaves whose other documents are out (culled, or `exactMatchesOnly`).
    filters: Vec<&'c Leaf>,
    /// Leaves that only make documents non-exact.
    others: Vec<&'c Leaf>,
}

/// The text criterion's matcher, if `criteria` (top level) can be ranked from bounds.
fn plan<'c>(criteria: &'c [Criterion], exact_only: bool) -> Option<Plan<'c>> {
    let mut text = None;
    let (mut filters, mut others) = (Vec::new(), Vec::new());
    for (i, c) in criteria.iter().enumerate() {
        let Node::Leaf(leaf) = &c.node else {
            return None;
        };
        if c.exact_match || leaf.null_exact {
            return None; // exact documents of other relevances
        }
        if let Matcher::Text(t) = &leaf.matcher {
            if text.is_some() || c.weight <= 0.0 || leaf.exact_rel <= 0.0 {
                return None;
            }
            // every holder a result of positive relevance, every other document out
            let culls = exact_only
                || c.cull && leaf.null_rel == 0.0 && (leaf.fuzzy_rel > 0.0 || !t.require_all);
            let boosts_ok = t
                .fields
                .iter()
                .all(|f| f.boost >= 0.0 && f.boost.is_finite());
            if !culls || !boosts_ok {
                return None;
            }
            text = Some((i, leaf, leaf.dim?));
            continue;
        }
        if leaf.dim.is_some() && c.cull && leaf.exact_rel == 0.0 {
            return None; // culls every document
        }
        let cull_distance = matches!(leaf.matcher, Matcher::Geo { cull: Some(_), .. });
        if exact_only || c.cull && others_score_zero(leaf) {
            filters.push(leaf);
        } else if !c.cull && !cull_distance {
            others.push(leaf);
        } else {
            return None;
        }
    }
    let (at, leaf, dim) = text?;
    Some(Plan {
        at,
        leaf,
        dim,
        filters,
        others,
    })
}

/// `Results` for a request (criteria prepared, text matchers not) whose page is its
/// exact results' best text scores; `None` when it must be evaluated in full. The text
/// matcher is left graded for the page's documents.
pub(crate) fn ranked_results(
    snap: &Snapshot,
    criteria: &mut [Criterion],
    ctx: &EvalCtx,
    filter: &Admit,
    want: Want<'_>,
) -> Option<Results> {
    let (k, collect) = want.top()?;
    let found = {
        let plan = plan(criteria, filter.exact_only)?;
        let Matcher::Text(t) = &plan.leaf.matcher else {
            return None;
        };
        find(snap, criteria, &plan, t, ctx, filter, (k, collect))?
    };
    #[cfg(test)]
    tests::ANSWERED.with(|n| n.set(n.get() + 1));
    let Found {
        at,
        hits,
        total,
        exact_count,
        matched,
        graded,
        max_score,
    } = found;
    // explanations grade the page's documents as a full evaluation would
    if let Node::Leaf(Leaf {
        matcher: Matcher::Text(t),
        ..
    }) = &mut criteria[at].node
    {
        t.set_scored(graded, max_score);
    }
    Some(Results {
        hits,
        total,
        exact_count,
        matched,
        ctx: ctx.clone(),
    })
}

/// A ranked answer: the page, the counts of results and exact results (and the sets,
/// when collected), and the page's documents with their scores (in doc order) and the
/// grading reference, for the text matcher.
struct Found {
    at: usize,
    hits: Vec<Hit>,
    total: usize,
    exact_count: usize,
    matched: Option<Matched>,
    /// The page's documents and their scores, in doc order.
    graded: Vec<(u32, Scored)>,
    max_score: f64,
}

/// The page of `plan`'s request from score bounds (`None`: evaluate in full): the best
/// `k`, and with `collect` the result sets too.
fn find(
    snap: &Snapshot,
    criteria: &[Criterion],
    plan: &Plan<'_>,
    t: &TextMatcher,
    ctx: &EvalCtx,
    filter: &Admit,
    (k, collect): (usize, bool),
) -> Option<Found> {
    let g = t.gather(snap, plan.dim)?;
    // Every holder of a term is a result, and an exact one, when nothing narrows them
    // (no filter, no other criterion, no `items` or `notItems`, not every one of
    // several terms required): they are then ranked as `Holders`, counted, and united
    // only if read as a set (a small search's, or the sets collected for facets).
    let every_holder = plan.filters.is_empty()
        && plan.others.is_empty()
        && filter.admits_all()
        && g.term_docs.is_empty();
    let passing: Cow<'_, RoaringBitmap>;
    let exact_docs: Cow<'_, RoaringBitmap>;
    let (results, exact) = if every_holder {
        (Within::Holders(&g.matched), Within::Holders(&g.matched))
    } else {
        passing = {
            let mut passing = if plan.filters.is_empty() {
                Cow::Borrowed(g.matched.set())
            } else {
                let within = Some(g.matched.set());
                Cow::Owned(exact_intersection(snap, &plan.filters, ctx, within)?)
            };
            // (the best score graded against is that of the results `items` and
            // `notItems` admit, as a scan grades it)
            if !filter.admits_all() {
                filter.restrict(passing.to_mut());
            }
            passing
        };
        // (unless all of several terms are required every holder of a term is
        // text-exact, and `passing` is within the holders already)
        let text_exact = if g.term_docs.is_empty() {
            Cow::Borrowed(&*passing)
        } else {
            Cow::Owned(&*passing & g.term_docs.iter().map(|d| &**d).intersection())
        };
        exact_docs = if plan.others.is_empty() {
            text_exact
        } else {
            Cow::Owned(exact_intersection(
                snap,
                &plan.others,
                ctx,
                Some(&text_exact),
            )?)
        };
        let results = if filter.exact_only {
            &*exact_docs
        } else {
            &*passing
        };
        (Within::Docs(results), Within::Docs(&exact_docs))
    };
    if (exact.len() as usize) < k {
        return None; // the page holds non-exact results
    }
    let bounds = Bounds::new(snap, plan.dim, t, &g)?;
    #[cfg(test)]
    let limit = tests::score_limit(results.len());
    // (a quarter of the results: beyond, a full evaluation on both cores is cheaper;
    // at least 16,384, since scoring every one of a few thousand results still beats
    // it: "lakeview" with its title boosted, 4,361 results, 1.43 → 1.14 ms at 1M)
    #[cfg(not(test))]
    let limit = (results.len() / 4).max(16_384);
    let mut scorer = Scorer {
        snap,
        dim: plan.dim,
        t,
        g: &g,
        done: RoaringBitmap::new(),
        scored: Vec::new(),
        limit,
    };
    let found = |hits: Vec<Hit>, graded: Vec<(u32, Scored)>, max_score: f64| Found {
        at: plan.at,
        hits,
        total: results.len() as usize,
        exact_count: exact.len() as usize,
        matched: collect.then(|| Matched {
            other: results.docs() - exact.docs(),
            exact: exact.docs().clone(),
        }),
        graded,
        max_score,
    };
    // the page: the best k exact documents by score; grading: the best result's score
    if k == 0 {
        return Some(found(Vec::new(), Vec::new(), 0.0));
    }
    let theta = bounds.search(&mut scorer, exact, k)?;
    // (results equal in number to the exact ones are the exact ones)
    let all_exact = results.len() == exact.len();
    if !all_exact {
        bounds.search(&mut scorer, results, 1)?;
    }
    let max_score = scorer.best();
    // relevance from the text score (every other criterion exact, of its exactRelevance)
    let relevance = |p: &Scored| {
        let mut mean = WeightedMean::default();
        for (i, c) in criteria.iter().enumerate() {
            let r = match &c.node {
                Node::Leaf(leaf) if i == plan.at => {
                    grade(p, max_score, leaf.exact_rel, leaf.fuzzy_rel).1
                }
                Node::Leaf(leaf) => leaf.exact_relevance(),
                Node::Group { .. } => unreachable!("`plan` takes leaves only"),
            };
            mean.add(c.weight, r);
        }
        mean.value()
    };
    // the relevance of every exact document scored that may be on the page, in the
    // order scored (runs of ascending documents) (only the search over every result
    // scores documents that are not exact: without it, a lookup per document scored
    // would cost as much as the ranking)
    // (sized once: collected through the filter it grew from empty by doubling, each
    // step a copy into fresh memory — 16% of the page faults a restarted engine took
    // over the text class's first two passes)
    // (A text-exact document scoring below `theta` has a relevance at most `outside`
    // below, as its relevance rises with its score alone: on the page it would leave
    // the page's last at most `outside`, and the answer is then `None` with it or
    // without it. So it is passed by before its relevance is computed or its
    // membership in `exact` looked up: the rounds' candidates scored below the page.)
    let exact_among = (!all_exact).then(|| exact.docs());
    let mut ranked: Vec<(f64, u32, Scored)> = Vec::with_capacity(scorer.scored.len());
    ranked.extend(
        (scorer.scored.iter())
            .filter(|(d, p)| {
                !(p.exact && p.score < theta) && exact_among.is_none_or(|e| e.contains(*d))
            })
            .map(|(d, p)| (relevance(p), *d, *p)),
    );
    let top = page_of(snap, &ranked, k)?;
    let hits = top.into_hits();
    // a document not scored has a score below `theta`, so a relevance at most this: the
    // page's last must be above it (equal roundings would need their ids compared)
    let outside = relevance(&Scored {
        score: theta,
        m: 1.0,
        holds: true,
        exact: true,
    });
    if hits.len() == k && k > 0 && hits[k - 1].r <= outside {
        return None;
    }
    // The matcher keeps the scores of the page's documents only: the page is all that
    // is graded after this (explanations), and keeping every document scored — or
    // every one tied with the page's last, tens of thousands for a name's common word
    // — cost more than the rest of the ranking.
    let mut page: Vec<u32> = hits.iter().map(|h| h.doc).collect();
    page.sort_unstable();
    let mut graded: Vec<(u32, Scored)> = ranked
        .iter()
        .filter(|(_, d, _)| page.binary_search(d).is_ok())
        .map(|&(_, d, p)| (d, p))
        .collect();
    graded.sort_unstable_by_key(|(d, _)| *d);
    Some(found(hits, graded, max_score))
}

/// The best `k` of `ranked` (relevance, document, score) in the default order. Each is
/// made a hit only when kept, and its id read only when it could be: once `k` are kept,
/// one below the worst kept is passed by, and one tied with it comes in only with a
/// smaller id, so a chunk whose smallest id is above the worst's is passed by too (read
/// once for a run of its documents: `ranked` comes in runs of ascending documents).
/// The documents tied with the k-th can be tens of thousands (a name's common word,
/// its field lengths ignored).
fn page_of(snap: &Snapshot, ranked: &[(f64, u32, Scored)], k: usize) -> Option<TopK> {
    let mut top = TopK::new(k, false);
    let mut chunk_min: Option<(usize, u64)> = None;
    for &(r, d, _) in ranked {
        let c = d as usize / crate::CHUNK;
        if let (Some((_, worst_r)), Some(worst_key)) = (top.bar(), top.worst_id_key()) {
            if r < worst_r {
                continue;
            }
            if r == worst_r {
                let min = match chunk_min {
                    Some((mc, min)) if mc == c => min,
                    _ => {
                        let min = snap.chunk_min_id_key(c);
                        chunk_min = Some((c, min));
                        min
                    }
                };
                if min > worst_key {
                    continue;
                }
            }
        }
        let doc = snap.doc(d)?;
        let i = d as usize % crate::CHUNK;
        let id_key = id_key(doc, snap.built_chunk_cols(c).map(|cols| (cols, i)));
        top.offer(d, doc, id_key, true, r);
    }
    Some(top)
}

/// Scores documents once each, remembering them.
struct Scorer<'a, 's> {
    snap: &'a Snapshot,
    dim: usize,
    t: &'a TextMatcher,
    g: &'a Gathered<'s>,
    done: RoaringBitmap,
    scored: Vec<(u32, Scored)>,
    /// Documents scored at most: beyond, the request is evaluated in full.
    limit: u64,
}

impl Scorer<'_, '_> {
    fn score(&mut self, docs: &RoaringBitmap) -> Option<()> {
        let new = docs - &self.done;
        if new.is_empty() {
            return Some(());
        }
        if self.done.len() + new.len() > self.limit {
            return None;
        }
        #[cfg(test)]
        tests::SCORED.with(|n| n.set(n.get() + new.len()));
        let scored = self.t.score_some(self.snap, self.dim, self.g, &new);
        // (reserved: a roaring iterator zipped is extended one push at a time)
        self.scored.reserve(scored.len());
        self.scored.extend(new.iter().zip(scored));
        self.done |= new;
        Some(())
    }

    /// The `k`-th best score of the documents scored, if that many. A search scores
    /// documents of its `within` only, and the second search's `within` (every result)
    /// holds the first's (the exact ones), so every document scored is in the `within`
    /// of the search that asks (`Bounds::search` asserts it in tests): no document
    /// needs looking up in it, nor the sets comparing, each a walk over thousands.
    fn kth(&self, k: usize) -> Option<f64> {
        let mut s: Vec<f64> = self.scored.iter().map(|(_, p)| p.score).collect();
        if s.len() < k || k == 0 {
            return None;
        }
        s.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        Some(s[k - 1])
    }

    /// The best score of the documents scored (0 when none): a pass over them, where
    /// `kth(1)` would copy every score first.
    fn best(&self) -> f64 {
        self.scored
            .iter()
            .map(|(_, p)| p.score)
            .max_by(f64::total_cmp)
            .unwrap_or(0.0)
    }
}
