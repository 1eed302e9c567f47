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

use roaring::{MultiOps, RoaringBitmap};

use crate::criteria::{Criterion, EvalCtx, Leaf, Matcher, Node, WeightedMean};
use crate::eval::{default_order, Filter, Hit, Matched, Results, Want};
use crate::exact::{exact_intersection, others_score_zero};
use crate::postings::{length_class_bounds, text_key, text_length_key, text_level_key, MAX_LEVEL};
use crate::text::{average_length, bm25_term, grade, Gathered, Scored, TextMatcher, K1};
use crate::Snapshot;

/// Bounds are raised by this share: a bound and a score add the same terms in other
/// orders, and their roundings must not put a bound below its score.
const SLACK: f64 = 1e-9;

/// Tokens a `startsWith` term may stand for here (each bounded on its own).
const MAX_PREFIX_TOKENS: usize = 16;

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
/// matcher is left graded for the documents scored here, among them the page's.
pub(crate) fn ranked_results(
    snap: &Snapshot,
    criteria: &mut [Criterion],
    ctx: &EvalCtx,
    filter: &Filter<'_>,
    want: Want,
) -> Option<Results> {
    let (k, collect) = match want {
        Want::Top(k) => (k, false),
        Want::TopAndMatched(k) => (k, true),
        Want::All | Want::Sorted => return None,
    };
    if !filter.admits_all() {
        return None;
    }
    let found = {
        let plan = plan(criteria, filter.exact_only)?;
        let Matcher::Text(t) = &plan.leaf.matcher else {
            return None;
        };
        find(snap, criteria, &plan, t, ctx, filter.exact_only, k)?
    };
    #[cfg(test)]
    tests::ANSWERED.with(|n| n.set(n.get() + 1));
    let Found {
        at,
        hits,
        results,
        exact,
        rank_docs,
        scored,
        max_score,
    } = found;
    // explanations grade the page's documents as a full evaluation would
    if let Node::Leaf(Leaf {
        matcher: Matcher::Text(t),
        ..
    }) = &mut criteria[at].node
    {
        t.set_scored(&rank_docs, scored, max_score);
    }
    let total = results.len() as usize;
    let exact_count = exact.len() as usize;
    let matched = collect.then(|| Matched {
        other: &results - &exact,
        exact,
    });
    Some(Results {
        hits,
        total,
        exact_count,
        matched,
        ctx: ctx.clone(),
    })
}

struct Found {
    at: usize,
    hits: Vec<Hit>,
    results: RoaringBitmap,
    exact: RoaringBitmap,
    rank_docs: RoaringBitmap,
    scored: Vec<Scored>,
    max_score: f64,
}

fn find(
    snap: &Snapshot,
    criteria: &[Criterion],
    plan: &Plan<'_>,
    t: &TextMatcher,
    ctx: &EvalCtx,
    exact_only: bool,
    k: usize,
) -> Option<Found> {
    let g = t.gather(snap, plan.dim)?;
    let text_exact = if t.require_all {
        g.term_docs.iter().intersection()
    } else {
        g.matched.clone()
    };
    let passing = exact_intersection(snap, &plan.filters, ctx, Some(&g.matched))?;
    let exact = exact_intersection(snap, &plan.others, ctx, Some(&(&passing & &text_exact)))?;
    if (exact.len() as usize) < k {
        return None; // the page holds non-exact results
    }
    let results = if exact_only { exact.clone() } else { passing };
    let bounds = Bounds::new(snap, plan.dim, t, &g)?;
    let limit = if cfg!(test) {
        u64::MAX
    } else {
        (results.len() / 4).max(4096)
    };
    let mut scorer = Scorer {
        snap,
        dim: plan.dim,
        t,
        g: &g,
        done: RoaringBitmap::new(),
        scored: Vec::new(),
        limit,
    };
    // the page: the best k exact documents by score; grading: the best result's score
    if k == 0 {
        return Some(Found {
            at: plan.at,
            hits: Vec::new(),
            results,
            exact,
            rank_docs: RoaringBitmap::new(),
            scored: Vec::new(),
            max_score: 0.0,
        });
    }
    let theta = bounds.search(&mut scorer, &exact, k)?;
    let max_score = if results.len() == exact.len() {
        scorer.best_in(&exact)
    } else {
        bounds.search(&mut scorer, &results, 1)?;
        scorer.best_in(&results)
    };
    // relevance from the text score (every other criterion exact, of its exactRelevance)
    let relevance = |p: &Scored| {
        let mut mean = WeightedMean::default();
        for (i, c) in criteria.iter().enumerate() {
            let r = match &c.node {
                Node::Leaf(leaf) if i == plan.at => {
                    grade(p, max_score, leaf.exact_rel, leaf.fuzzy_rel).1
                }
                Node::Leaf(leaf) if leaf.dim.is_some() => leaf.exact_rel,
                _ => 1.0,
            };
            mean.add(c.weight, r);
        }
        mean.value()
    };
    // the k best by relevance, then those tied with the k-th, ordered with their ids
    let mut ranked: Vec<(f64, u32)> = scorer
        .scored
        .iter()
        .filter(|(d, _)| exact.contains(*d))
        .map(|(d, p)| (relevance(p), *d))
        .collect();
    if ranked.len() > k {
        ranked.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
        let last = ranked[k - 1].0;
        ranked.retain(|(r, _)| *r >= last);
    }
    let mut hits: Vec<Hit> = Vec::with_capacity(ranked.len());
    for (r, d) in ranked {
        hits.push(Hit::new(d, snap.doc(d)?, true, r));
    }
    hits.sort_unstable_by(default_order);
    hits.truncate(k);
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
    let mut order: Vec<(u32, Scored)> = scorer.scored;
    order.sort_unstable_by_key(|(d, _)| *d);
    let rank_docs: RoaringBitmap = order.iter().map(|(d, _)| *d).collect();
    Some(Found {
        at: plan.at,
        hits,
        results,
        exact,
        rank_docs,
        scored: order.into_iter().map(|(_, p)| p).collect(),
        max_score,
    })
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
        let (_, scored) = self.t.score_docs(self.snap, self.dim, self.g, &new, true);
        self.scored.extend(new.iter().zip(scored));
        self.done |= new;
        Some(())
    }

    /// The `k`-th best score among the scored members of `within`, if that many.
    fn kth_in(&self, within: &RoaringBitmap, k: usize) -> Option<f64> {
        let mut s: Vec<f64> = self
            .scored
            .iter()
            .filter(|(d, _)| within.contains(*d))
            .map(|(_, p)| p.score)
            .collect();
        if s.len() < k || k == 0 {
            return None;
        }
        s.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        Some(s[k - 1])
    }

    fn best_in(&self, within: &RoaringBitmap) -> f64 {
        self.kth_in(within, 1).unwrap_or(0.0)
    }
}

/// One (field, token) of the query: its documents by term frequency, bounded with its
/// field's length classes.
struct Part<'s> {
    field: usize,
    /// `levels[i]`: the documents holding the token at least i + 1 times.
    levels: Vec<&'s RoaringBitmap>,
    /// Whether the last level is `MAX_LEVEL` (its documents may hold the token more).
    open: bool,
    /// The field's boost times the term's idf there.
    weight: f64,
    /// The largest bound of any document.
    max: f64,
}

/// A text field's documents by length class, shortest first.
struct FieldLengths<'s> {
    /// The dimension's field index.
    index: usize,
    classes: Vec<(usize, &'s RoaringBitmap)>,
    avg: f64,
    ignore_length: bool,
}

/// Parts holding at most this many documents are scored whole (`Bounds::few`), not
/// bounded (tests bound nearly every part).
const FEW: u64 = if cfg!(test) { 2 } else { 1024 };

/// Sets of at most this many documents (or four times the page) are scored whole
/// (tests bound sets larger than the page).
const SMALL: u64 = 256;

struct Bounds<'s> {
    snap: &'s Snapshot,
    dim: usize,
    /// The parts bounded, and the sum of their largest bounds.
    parts: Vec<Part<'s>>,
    max: f64,
    /// The documents of the parts with few documents.
    few: RoaringBitmap,
    /// How many documents hold a query term (`within` sets as large hold them all).
    holders: u64,
    /// How `reaching` finds a level's documents, when not the cheapest (tests).
    way: Option<usize>,
    fields: Vec<FieldLengths<'s>>,
}

impl<'s> Bounds<'s> {
    fn new(
        snap: &'s Snapshot,
        dim: usize,
        t: &TextMatcher,
        g: &Gathered<'_>,
    ) -> Option<Bounds<'s>> {
        let post = snap.postings(dim)?;
        let nt = t.n_terms;
        let mut fields = Vec::new();
        let mut parts = Vec::new();
        let mut few = Vec::new();
        let from = |key: &[u8]| {
            (
                std::ops::Bound::Included(key.to_vec().into_boxed_slice()),
                std::ops::Bound::Unbounded,
            )
        };
        for (fi, fq) in t.fields.iter().enumerate() {
            let lo = text_length_key(fq.index, 0);
            let classes = post
                .map
                .range(from(&lo))
                .take_while(|(key, _)| key.starts_with(&lo[..3]))
                .map(|(key, b)| {
                    let class = u16::from_be_bytes([key[3], key[4]]);
                    (length_class_bounds(class).0, &**b)
                })
                .collect();
            fields.push(FieldLengths {
                index: fq.index,
                classes,
                avg: average_length(g.stats[fi]),
                ignore_length: fq.ignore_length,
            });
            for ti in 0..nt {
                let term = fq.terms.get(ti).map(String::as_str).unwrap_or("");
                let weight = fq.boost * g.idfs[fi][ti];
                let tokens: Vec<Vec<u8>> = if t.prefix_last && ti + 1 == nt {
                    let key = text_key(fq.index, term);
                    let found: Vec<Vec<u8>> = post
                        .map
                        .range(from(&key))
                        .take_while(|(k, _)| k.starts_with(&key))
                        .take(MAX_PREFIX_TOKENS + 1)
                        .map(|(k, _)| k[2..].to_vec())
                        .collect();
                    if found.len() > MAX_PREFIX_TOKENS {
                        return None;
                    }
                    found
                } else {
                    vec![term.as_bytes().to_vec()]
                };
                for tok in tokens {
                    let tok = std::str::from_utf8(&tok).ok()?;
                    let Some(first) = post.get(&text_key(fq.index, tok)) else {
                        continue;
                    };
                    if first.len() <= FEW {
                        few.push(first);
                        continue;
                    }
                    let mut levels = vec![first];
                    for level in 2..=MAX_LEVEL {
                        match post.get(&text_level_key(fq.index, level, tok)) {
                            Some(b) => levels.push(b),
                            None => break,
                        }
                    }
                    let open = levels.len() == MAX_LEVEL as usize;
                    parts.push(Part {
                        field: fi,
                        levels,
                        open,
                        weight,
                        max: 0.0,
                    });
                }
            }
        }
        let mut b = Bounds {
            snap,
            dim,
            parts,
            max: 0.0,
            few: few.into_iter().union(),
            holders: g.matched.len(),
            way: None,
            fields,
        };
        for j in 0..b.parts.len() {
            let p = &b.parts[j];
            let f = &b.fields[p.field];
            let shortest = f.classes.first().map_or(0, |c| c.0);
            b.parts[j].max = b.bound(p, p.levels.len(), shortest);
        }
        b.max = b.parts.iter().map(|p| p.max).sum();
        Some(b)
    }

    /// The bound of a document of `p`'s field `len` long (or longer) holding the token
    /// `tf` times (the last level: at least).
    fn bound(&self, p: &Part<'_>, tf: usize, len: usize) -> f64 {
        let f = &self.fields[p.field];
        let unit = if p.open && tf == p.levels.len() {
            K1 + 1.0 // any frequency
        } else {
            bm25_term(1.0, tf as f64, len as f64, f.avg, f.ignore_length)
        };
        p.weight * unit * (1.0 + SLACK)
    }

    /// The documents of `within` whose bound in part `j` is at least `at_least`: per
    /// level, those of the length classes reaching it — a prefix, as a level's bound
    /// falls with the length — found by the cheapest of a union of the shorter classes,
    /// a union of the longer ones taken away, or reading the documents' lengths.
    fn reaching(&self, j: usize, at_least: f64, within: &RoaringBitmap) -> RoaringBitmap {
        let p = &self.parts[j];
        let f = &self.fields[p.field];
        // (every holder: a level needs no intersection)
        let all = within.len() == self.holders;
        let within = |level: &RoaringBitmap| if all { level.clone() } else { level & within };
        if at_least <= 0.0 || f.classes.is_empty() {
            return within(p.levels[0]);
        }
        let mut out: Vec<RoaringBitmap> = Vec::new();
        let mut upto = 0; // classes (shortest first) reaching it at this level
        for (li, level) in p.levels.iter().enumerate() {
            let tf = li + 1;
            if p.open && tf == p.levels.len() {
                if self.bound(p, tf, 0) >= at_least {
                    out.push(within(level));
                }
                break;
            }
            while upto < f.classes.len() && self.bound(p, tf, f.classes[upto].0) >= at_least {
                upto += 1;
            }
            if upto == f.classes.len() {
                out.push(within(level)); // and every level above is within it
                break;
            }
            if upto == 0 {
                continue;
            }
            let docs = within(level);
            let size = |cs: &[(usize, &RoaringBitmap)]| cs.iter().map(|c| c.1.len()).sum::<u64>();
            let (shorter, longer) = (size(&f.classes[..upto]), size(&f.classes[upto..]));
            // (reading a document's length costs about what a few set members do; tests
            // take every way)
            let way = if let Some(way) = self.way {
                way
            } else if cfg!(test) {
                (j + li + upto) % 3
            } else if 4 * docs.len() <= shorter.min(longer) {
                0
            } else if shorter <= longer {
                1
            } else {
                2
            };
            if way == 0 {
                let mut b = RoaringBitmap::new();
                let mut lengths = self.lengths(p.field);
                for d in docs.iter() {
                    if self.bound(p, tf, lengths(d)) >= at_least {
                        b.push(d);
                    }
                }
                out.push(b);
            } else if way == 1 {
                out.push(docs & f.classes[..upto].iter().map(|c| c.1).union());
            } else {
                out.push(docs - f.classes[upto..].iter().map(|c| c.1).union());
            }
        }
        out.union()
    }

    /// Documents' lengths in a field, as scoring reads them (asked in ascending order:
    /// each chunk's columns looked up once).
    fn lengths(&self, field: usize) -> impl FnMut(u32) -> usize + '_ {
        let index = self.fields[field].index;
        let (snap, dim) = (self.snap, self.dim);
        let mut at: (usize, Option<&crate::columns::ChunkCols>) = (usize::MAX, None);
        move |doc| {
            let (c, i) = (doc as usize / crate::CHUNK, doc as usize % crate::CHUNK);
            if at.0 != c {
                at = (c, snap.chunk_cols(c));
            }
            at.1.and_then(|cc| cc.text_len(dim, i, index))
                .or_else(|| match snap.doc(doc)?.values.get(dim)?.as_ref()? {
                    discern_dimensions::IndexedValue::Text(toks) => Some(toks.group(index).count()),
                    _ => None,
                })
                .unwrap_or(0)
        }
    }

    /// Documents of `within` outside `few` that may score at least `theta`: each
    /// document's score is at most the sum of its parts' bounds, so in every part it
    /// reaches `theta` less what the other parts can add, and in some part a share of
    /// `theta` (shares in proportion to the parts' largest bounds).
    /// `None` when more than `budget`.
    fn candidates(&self, theta: f64, within: &RoaringBitmap, budget: u64) -> Option<RoaringBitmap> {
        let n = self.parts.len();
        if self.max <= 0.0 || theta > self.max {
            return Some(RoaringBitmap::new());
        }
        let mut needs: Vec<(usize, f64)> = (0..n)
            .map(|j| (j, theta - (self.max - self.parts[j].max)))
            .filter(|&(_, need)| need > 0.0)
            .collect();
        if needs.is_empty() {
            let mut some = RoaringBitmap::new();
            for j in (0..n).filter(|&j| self.parts[j].max > 0.0) {
                some |= self.reaching(j, theta * self.parts[j].max / self.max, within);
                if some.len() > budget {
                    return None;
                }
            }
            return Some(some);
        }
        // the parts with the fewest documents first, each within what is left
        needs.sort_by_key(|&(j, _)| self.parts[j].levels[0].len());
        let mut out = within.clone();
        for (j, need) in needs {
            if out.is_empty() {
                break;
            }
            out = self.reaching(j, need, &out);
        }
        (out.len() <= budget).then_some(out)
    }

    /// Scores documents of `within` until the `k` best are known: returns `theta` such
    /// that every document of `within` not scored scores below it, while at least `k`
    /// scored ones score at least it (`None`: too many to score).
    fn search(&self, scorer: &mut Scorer<'_, '_>, within: &RoaringBitmap, k: usize) -> Option<f64> {
        let small = if cfg!(test) {
            k as u64
        } else {
            (4 * k as u64).max(SMALL)
        };
        if within.len() <= small {
            scorer.score(within)?;
            return Some(0.0);
        }
        // the parts with few documents are scored whole; the others are bounded, from
        // the largest bound down until k documents reach one, then the k-th best score
        // found (a little less: ties at it are then all scored)
        scorer.score(&(&self.few & within))?;
        let mut theta = self.max;
        if let Some(kth) = scorer.kth_in(within, k) {
            theta = theta.min(kth * (1.0 - 1e-6));
        }
        for _ in 0..64 {
            let budget = scorer.limit.saturating_sub(scorer.done.len());
            let c = self.candidates(theta, within, budget)?;
            scorer.score(&c)?;
            match scorer.kth_in(within, k) {
                Some(kth) if kth >= theta => return Some(theta),
                Some(kth) => theta = kth * (1.0 - 1e-6),
                None => theta *= 0.9,
            }
            if theta <= 0.0 {
                return None;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{evaluate, reference_hits};
    use crate::postings::length_class;
    use crate::{parse_query, IndexWriter};
    use discern_dimensions::Dimensions;
    use discern_model::{Record, Value};
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use serde_json::{json, Value as J};
    use std::cell::Cell;
    use std::sync::Arc;

    thread_local! {
        /// Requests `ranked_results` answered on this thread.
        pub(super) static ANSWERED: Cell<usize> = const { Cell::new(0) };
    }

    const DIMS: &[u8] = b"<dimensions>
      <dimension id='k' type='keyword'/>
      <dimension id='x' type='text' stopWords=''>
        <field id='title'/>
        <field id='body'/>
        <field id='place' ignoreFieldLength='true'/>
      </dimension>
    </dimensions>";

    const WORDS: [&str; 6] = ["red", "green", "blue", "car", "cart", "carpet"];

    /// A document: keyword values, and per field its words (indexes into `WORDS`, or
    /// filler that lengthens the field).
    type DocSpec = (Vec<usize>, [Vec<usize>; 3]);

    fn doc_spec() -> impl Strategy<Value = DocSpec> {
        let field = |n| prop::collection::vec(0usize..12, 0..n);
        (
            prop::collection::vec(0usize..3, 0..2),
            [field(6), field(30), field(4)],
        )
    }

    fn snapshot(docs: &[DocSpec], pad: usize) -> crate::Snapshot {
        let id = |i: usize| format!("i{:04}", (i * 37) % 10_000);
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&crate::Snapshot::empty(dims));
        let specs = (0..pad).map(|i| &docs[i % docs.len()]).chain(docs);
        for (i, (kw, fields)) in specs.enumerate() {
            let mut rec = Record::default();
            let kws: Vec<String> = kw.iter().map(|k| ["a", "b", "c"][*k].to_string()).collect();
            crate::test_support::put_strings(&mut rec, "k", kws);
            for (name, words) in ["title", "body", "place"].iter().zip(fields) {
                let text: Vec<&str> = words
                    .iter()
                    .map(|w| WORDS.get(*w).copied().unwrap_or("filler"))
                    .collect();
                if !text.is_empty() {
                    rec.0.push((name.to_string(), Value::Str(text.join(" "))));
                }
            }
            b.upsert(&id(i), &rec);
        }
        // a later apply removes some: postings and length classes must follow
        let snap = b.commit();
        let mut b = w.begin(&snap);
        for i in (0..pad + docs.len()).step_by(5) {
            b.delete(&id(i));
        }
        b.commit()
    }

    fn text_criterion() -> impl Strategy<Value = J> {
        (
            prop::collection::vec(0usize..6, 1..4),
            any::<bool>(),
            any::<bool>(),
            prop::option::of((0usize..4, 0usize..4)),
            prop::option::of(0usize..3),
            0usize..3,
            any::<bool>(),
        )
            .prop_map(|(words, prefix, all, boosts, only, rel, ignore)| {
                let words: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
                let mut o = json!({"dimension": "x", "value": words.join(" "), "cull": true});
                if prefix {
                    o["searchStyle"] = json!("startsWith");
                }
                if all {
                    o["exactRequires"] = json!("all");
                }
                if let Some((t, b)) = boosts {
                    let v = [0.0, 0.5, 1.0, 3.0];
                    o["fieldBoosts"] = json!({"title": v[t], "body": v[b]});
                }
                if let Some(f) = only {
                    let fields: [&[&str]; 3] = [&["title", "body"], &["body", "place"], &["title"]];
                    o["fields"] = json!(fields[f]);
                }
                let (er, fr) = [(1.0, 1.0), (0.7, 1.0), (1.0, 0.5)][rel];
                o["exactRelevance"] = json!(er);
                o["fuzzyRelevance"] = json!(fr);
                if ignore {
                    o["ignoreInverseDocumentFrequency"] = json!(true);
                }
                o
            })
    }

    /// Beside the text: a keyword filter, a keyword that only makes documents non-exact,
    /// or every item.
    fn other_criterion() -> impl Strategy<Value = J> {
        prop_oneof![
            (0usize..3, 0usize..3).prop_map(|(v, w)| {
                let (v, w) = (["a", "b", "c"][v], [1.0, 2.0, 0.0][w]);
                json!({"dimension": "k", "value": v, "cull": true, "weight": w})
            }),
            (0usize..3, 0usize..3).prop_map(|(v, w)| {
                let (v, w) = (["a", "b", "c"][v], [1.0, 2.0, 0.0][w]);
                json!({"dimension": "k", "value": v, "weight": w, "exactRelevance": 0.8})
            }),
            Just(json!({"dimension": ""})),
        ]
    }

    /// The page, the counts and the documents facets count equal an item-by-item scan's.
    fn equals_full_scan(
        criteria: Vec<J>,
        docs: &[DocSpec],
        pad: usize,
        k: usize,
        exact_only: bool,
    ) -> Result<(), TestCaseError> {
        let snap = snapshot(docs, pad);
        let body = json!({"criteria": criteria, "exactMatchesOnly": exact_only});
        let filter = Filter {
            items: None,
            not_items: None,
            exact_only,
        };
        let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
        let mut want = reference_hits(&snap, &mut q.criteria, &filter);
        want.sort_by(default_order);
        let key = |h: &Hit| (h.doc, h.exact, h.r.to_bits());
        let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
        let mut top = evaluate(&snap, &mut q.criteria, &filter, Want::TopAndMatched(k));
        prop_assert_eq!(top.total, want.len());
        prop_assert_eq!(top.exact_count, want.iter().filter(|h| h.exact).count());
        prop_assert_eq!(
            top.hits.iter().map(key).collect::<Vec<_>>(),
            want.iter().take(k).map(key).collect::<Vec<_>>()
        );
        let (m, all) = (
            top.matched.take().unwrap_or_default(),
            Matched::of_hits(&want),
        );
        prop_assert_eq!((m.exact, m.other), (all.exact, all.other));
        // explanations grade the page's documents as a full evaluation does
        for h in &top.hits {
            let o: Vec<(bool, f64)> = top.explain(&snap, &q.criteria, h.doc);
            let mut q2 = parse_query(&body, &snap.dims, 1000).unwrap();
            let full = evaluate(&snap, &mut q2.criteria, &filter, Want::Sorted);
            prop_assert_eq!(
                o.iter().map(|(e, r)| (*e, r.to_bits())).collect::<Vec<_>>(),
                full.explain(&snap, &q2.criteria, h.doc)
                    .iter()
                    .map(|(e, r)| (*e, r.to_bits()))
                    .collect::<Vec<_>>()
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Text requests ranked from bounds equal an item-by-item scan, relevance to the
        /// bit; most of them are answered by `ranked_results`.
        #[test]
        fn ranked_equals_full_scan(
            text in text_criterion(),
            others in prop::collection::vec(other_criterion(), 0..2),
            docs in prop::collection::vec(doc_spec(), 1..80),
            pad in prop_oneof![Just(0usize), 1000usize..1100],
            k in 0usize..25,
            exact_only in prop::bool::weighted(0.2),
        ) {
            let mut criteria = others;
            criteria.insert(0, text);
            equals_full_scan(criteria, &docs, pad, k, exact_only)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]
        /// A part's documents reaching a bound, found any of the three ways, are those
        /// whose frequency and length (or length class's shortest length) give at least
        /// that bound.
        #[test]
        fn reaching_is_the_documents_bounds_reach(
            docs in prop::collection::vec(doc_spec(), 1..80),
            word in 0usize..6,
            shares in prop::collection::vec(0.0f64..1.1, 1..4),
        ) {
            let snap = snapshot(&docs, 1000);
            let body = json!({"criteria": [{"dimension": "x", "value": WORDS[word], "fields": ["title", "body"]}]});
            let q = parse_query(&body, &snap.dims, 1000).unwrap();
            let Node::Leaf(leaf) = &q.criteria[0].node else { unreachable!() };
            let Matcher::Text(t) = &leaf.matcher else { unreachable!() };
            let dim = leaf.dim.unwrap();
            let g = t.gather(&snap, dim).unwrap();
            let mut b = Bounds::new(&snap, dim, t, &g).unwrap();
            for j in 0..b.parts.len() {
                let p = &b.parts[j];
                let mut lengths = b.lengths(p.field);
                // (document, frequency, length, its class's shortest length)
                let docs: Vec<(u32, usize, usize, usize)> = p.levels[0]
                    .iter()
                    .map(|d| {
                        let tf = p.levels.iter().filter(|l| l.contains(d)).count();
                        let len = lengths(d);
                        (d, tf, len, length_class_bounds(length_class(len)).0)
                    })
                    .collect();
                drop(lengths);
                for share in &shares {
                    let at_least = b.parts[j].max * share;
                    for way in 0..3 {
                        b.way = Some(way);
                        let got = b.reaching(j, at_least, &g.matched);
                        let p = &b.parts[j];
                        let reach = |by_class: bool| -> RoaringBitmap {
                            docs.iter()
                                .filter(|(_, tf, len, lo)| {
                                    b.bound(p, *tf, if by_class { *lo } else { *len }) >= at_least
                                })
                                .map(|(d, ..)| *d)
                                .collect()
                        };
                        // by classes: exactly their members; reading lengths: at least
                        // those the lengths let reach, at most the classes' members
                        let (by_length, by_class) = (reach(false), reach(true));
                        if way == 0 {
                            prop_assert!(by_length.is_subset(&got), "part {} share {}", j, share);
                            prop_assert!(got.is_subset(&by_class), "part {} share {}", j, share);
                        } else {
                            prop_assert_eq!(got, by_class, "part {} way {} share {}", j, way, share);
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Every document outside the few-document parts scores at most the sum of its
        /// parts' bounds (at its frequencies and length).
        #[test]
        fn bounds_bound_scores(
            docs in prop::collection::vec(doc_spec(), 1..80),
            pad in prop_oneof![Just(0usize), 1000usize..1100],
            text in text_criterion(),
        ) {
            bounds_hold(&snapshot(&docs, pad), text)?;
        }
    }

    /// Frequencies beyond the last level key (`MAX_LEVEL`) are bounded too.
    #[test]
    fn bounds_bound_frequencies_beyond_the_levels() {
        let many = vec![0usize; 300];
        let docs: Vec<DocSpec> = vec![
            (vec![], [vec![0], many.clone(), vec![]]),
            (
                vec![],
                [vec![1], [many.clone(), vec![6; 40]].concat(), vec![]],
            ),
            (vec![], [vec![0, 0], vec![0, 6], vec![0]]),
        ];
        let snap = snapshot(&docs, 30);
        for value in ["red", "red green", "re"] {
            let text = json!({"dimension": "x", "value": value, "searchStyle": "startsWith"});
            bounds_hold(&snap, text).unwrap();
        }
    }

    fn bounds_hold(snap: &crate::Snapshot, text: J) -> Result<(), TestCaseError> {
        let body = json!({"criteria": [text]});
        let q = parse_query(&body, &snap.dims, 1000).unwrap();
        let Node::Leaf(leaf) = &q.criteria[0].node else {
            unreachable!()
        };
        let dim = leaf.dim.unwrap();
        let Matcher::Text(t) = &leaf.matcher else {
            unreachable!()
        };
        let g = t.gather(snap, dim).unwrap();
        let b = Bounds::new(snap, dim, t, &g).unwrap();
        let (rank, scored) = t.score_docs(snap, dim, &g, &g.matched, false);
        for d in g.matched.iter() {
            if b.few.contains(d) {
                continue;
            }
            let mut sum = 0.0;
            for p in &b.parts {
                let tf = p.levels.iter().filter(|l| l.contains(d)).count();
                if tf > 0 {
                    sum += b.bound(p, tf, b.lengths(p.field)(d));
                }
            }
            let score = scored[rank.get(d).unwrap()].score;
            prop_assert!(
                score <= sum,
                "doc {} scores {} above its bound {}",
                d,
                score,
                sum
            );
        }
        Ok(())
    }

    #[test]
    fn most_requests_are_ranked() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = (
            text_criterion(),
            prop::collection::vec(doc_spec(), 20..80),
            1usize..20,
        );
        let before = ANSWERED.with(Cell::get);
        let cases = 100;
        for _ in 0..cases {
            let (text, docs, k) = strategy.new_tree(&mut runner).unwrap().current();
            equals_full_scan(vec![text], &docs, 0, k, false).unwrap();
        }
        let answered = ANSWERED.with(Cell::get) - before;
        eprintln!("{answered} of {cases} ranked");
        assert!(answered * 2 > cases, "only {answered} of {cases} ranked");
    }
}
