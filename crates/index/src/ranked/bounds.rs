//! Bounds on a text criterion's BM25 score from sets: per (field, token) of the query
//! — a *part* — the postings' level keys (documents holding the token at least k times)
//! and the field's length classes give every document a bound on what the part adds to
//! its score, falling with the length and rising with the frequency; a document's score
//! is at most the sum of its parts' bounds. `Bounds::search` scores only documents whose
//! bounds can reach the k-th best score (`ranked.rs`).

use std::borrow::Cow;

use roaring::{MultiOps, RoaringBitmap};

use super::Scorer;
use crate::bits::{and_small, union_of};
use crate::postings::{text_key, text_level_key, union, PostingRef, ShorterThan, MAX_LEVEL};
use crate::text::{average_length, bm25_term, Gathered, Holders, TextMatcher, K1};
use crate::Snapshot;

/// Tokens a `startsWith` term may stand for here (each bounded on its own).
const MAX_PREFIX_TOKENS: usize = 16;

/// Bounds are raised by this share: a bound and a score add the same terms in other
/// orders, and their roundings must not put a bound below its score.
const SLACK: f64 = 1e-9;

/// One (field, token) of the query: its documents by term frequency, bounded with its
/// field's length classes.
pub(super) struct Part<'s> {
    pub(super) field: usize,
    /// The query term (position) the token stands for.
    pub(super) term: usize,
    /// `levels[i]`: the documents holding the token at least i + 1 times (a level of
    /// one document is a set made for it).
    pub(super) levels: Vec<Cow<'s, RoaringBitmap>>,
    /// Whether the last level is `MAX_LEVEL` (its documents may hold the token more).
    pub(super) open: bool,
    /// The field's boost times the term's idf there.
    pub(super) weight: f64,
    /// The largest bound of any document.
    pub(super) max: f64,
}

/// A text field's documents by length class (`DimPostings::shorter_than`).
pub(super) struct FieldLengths {
    /// Per class, shortest first: its shortest length, and the documents of it or a
    /// shorter class.
    pub(super) shorter: ShorterThan,
    pub(super) avg: f64,
    pub(super) ignore_length: bool,
}

/// A threshold is set this much below the k-th best score found so far.
const BELOW: f64 = 0.98;

/// Pages' worth of documents a threshold of one part's is first estimated to let in
/// (`Bounds::estimated_theta`).
const ESTIMATED_PAGES: f64 = 4.0;

/// `reaching_in_bands`: bands of the largest part's bound, and the most parts banded
/// (more are bounded independently). Each band costs a `reaching` per part in every
/// round, and finer bands let in fewer documents to score: the text class at 1M on a
/// restarted engine (each request its best of five, server CPU for the five passes,
/// two servers alternated) took 4–10% less CPU with 4 bands than with 8, and more with
/// 2; its median the same (session 53).
const BANDS: usize = 4;
const MAX_BANDED_PARTS: usize = 8;

/// Documents the independent test lets in that are scored rather than banded (banding
/// costs set operations per band).
const FEW_TO_BAND: u64 = if cfg!(test) { 1 } else { 4096 };

/// Queries with at most this many parts are bounded per set of parts a document holds.
const MAX_PART_SETS: usize = 6;

/// Queries with more terms are bounded as one set of parts, not per set of terms held.
const MAX_TERM_SETS: usize = 4;

/// Parts holding at most this many documents are scored whole (`Bounds::few`), not
/// bounded (tests bound nearly every part).
const FEW: u64 = if cfg!(test) { 2 } else { 1024 };

/// Sets of at most this many documents (or four times the page) are scored whole
/// (tests bound sets larger than the page).
const SMALL: u64 = 256;

/// The documents a search ranks: a set, or every holder of a query term — counted,
/// and united only if a search reads them as a set (`Holders`), which a search among
/// every holder rarely does: each part's sets are within them already.
#[derive(Clone, Copy)]
pub(super) enum Within<'w> {
    Docs(&'w RoaringBitmap),
    Holders(&'w Holders<'w>),
}

impl<'w> Within<'w> {
    pub(super) fn len(&self) -> u64 {
        match self {
            Within::Docs(d) => d.len(),
            Within::Holders(h) => h.len(),
        }
    }

    pub(super) fn docs(&self) -> &'w RoaringBitmap {
        match *self {
            Within::Docs(d) => d,
            Within::Holders(h) => h.set(),
        }
    }
}

pub(super) struct Bounds<'s> {
    /// The parts bounded, and the sum of their largest bounds.
    pub(super) parts: Vec<Part<'s>>,
    pub(super) max: f64,
    /// The documents of the parts with few documents.
    pub(super) few: RoaringBitmap,
    /// How many documents hold a query term (`within` sets as large hold them all).
    pub(super) holders: u64,
    /// Per query term: the documents holding it in a bounded part — only with more
    /// parts than are bounded per set of parts (`by_terms` alone reads them).
    pub(super) terms: Vec<RoaringBitmap>,
    pub(super) fields: Vec<FieldLengths>,
}

impl<'s> Bounds<'s> {
    pub(super) fn new(
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
        for (fi, fq) in t.fields.iter().enumerate() {
            fields.push(FieldLengths {
                shorter: post.shorter_than(fq.index),
                avg: average_length(g.stats[fi]),
                ignore_length: fq.ignore_length,
            });
            for ti in 0..nt {
                let term = fq.terms.get(ti).map(String::as_str).unwrap_or("");
                let weight = fq.boost * g.idfs[fi][ti];
                // (token, documents holding it): a `startsWith` term's every token
                let key = text_key(fq.index, term);
                let tokens: Vec<(&[u8], PostingRef)> = if t.prefix_last && ti + 1 == nt {
                    let found: Vec<_> = post
                        .prefix_entries(&key)
                        .take(MAX_PREFIX_TOKENS + 1)
                        .map(|(k, b)| (&k[2..], b))
                        .collect();
                    if found.len() > MAX_PREFIX_TOKENS {
                        return None;
                    }
                    found
                } else {
                    post.get(&key)
                        .map(|b| (term.as_bytes(), b))
                        .into_iter()
                        .collect()
                };
                for (tok, first) in tokens {
                    let tok = std::str::from_utf8(tok).ok()?;
                    if first.len() <= FEW {
                        few.push(first);
                        continue;
                    }
                    let mut levels = vec![first.bitmap()];
                    for level in 2..=MAX_LEVEL {
                        match post.get(&text_level_key(fq.index, level, tok)) {
                            Some(b) => levels.push(b.bitmap()),
                            None => break,
                        }
                    }
                    let open = levels.len() == MAX_LEVEL as usize;
                    parts.push(Part {
                        field: fi,
                        term: ti,
                        levels,
                        open,
                        weight,
                        max: 0.0,
                    });
                }
            }
        }
        let mut b = Bounds {
            parts,
            max: 0.0,
            few: union(few),
            holders: g.matched.len(),
            terms: Vec::new(),
            fields,
        };
        for j in 0..b.parts.len() {
            let p = &b.parts[j];
            let f = &b.fields[p.field];
            let shortest = f.shorter.first().map_or(0, |c| c.0);
            b.parts[j].max = b.bound(p, p.levels.len(), shortest);
        }
        b.max = b.parts.iter().map(|p| p.max).sum();
        if b.parts.len() > MAX_PART_SETS {
            b.terms = (0..nt)
                .map(|ti| {
                    let of = b.parts.iter().filter(move |p| p.term == ti);
                    of.map(|p| &*p.levels[0]).union()
                })
                .collect();
        }
        Some(b)
    }

    /// The bound of a document of `p`'s field `len` long (or longer) holding the token
    /// `tf` times (the last level: at least).
    pub(super) fn bound(&self, p: &Part<'_>, tf: usize, len: usize) -> f64 {
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
    /// falls with the length — by one intersection with that prefix's running union.
    /// `holds_part`: every document of `within` holds the part (is in its first level),
    /// which then needs no intersection (at 1M, 56% of the intersections in the text
    /// class's searches gave back `within` whole). Said of documents that do not hold
    /// it, the documents let in would be a superset: still a bound, more to score.
    pub(super) fn reaching(
        &self,
        j: usize,
        at_least: f64,
        within: &RoaringBitmap,
        holds_part: bool,
    ) -> RoaringBitmap {
        let mut reached = self.reaching_each(j, &[at_least], within, holds_part);
        reached.pop().unwrap_or_default()
    }

    /// `reaching` for each of `thresholds`, every level's documents among `within`
    /// found once for all of them (a band search asks one part for four thresholds in
    /// the same documents).
    pub(super) fn reaching_each(
        &self,
        j: usize,
        thresholds: &[f64],
        within: &RoaringBitmap,
        holds_part: bool,
    ) -> Vec<RoaringBitmap> {
        let p = &self.parts[j];
        let f = &self.fields[p.field];
        let takes: Vec<Vec<(usize, Take)>> = thresholds.iter().map(|&t| self.takes(p, t)).collect();
        // (every holder: a level needs no intersection)
        let all = within.len() == self.holders;
        let mut level_docs: Vec<Option<Cow<'_, RoaringBitmap>>> = vec![None; p.levels.len()];
        for &(li, _) in takes.iter().flatten() {
            level_docs[li].get_or_insert_with(|| {
                if all {
                    Cow::Borrowed(&*p.levels[li])
                } else if li == 0 && holds_part {
                    Cow::Borrowed(within)
                } else {
                    Cow::Owned(and_small(within, &p.levels[li]))
                }
            });
        }
        takes
            .iter()
            .map(|takes| {
                let mut whole: Vec<&RoaringBitmap> = Vec::new();
                let mut shorter: Vec<RoaringBitmap> = Vec::new();
                for &(li, take) in takes {
                    let Some(docs) = level_docs[li].as_deref() else {
                        continue;
                    };
                    match take {
                        Take::Whole => whole.push(docs),
                        Take::Shorter(upto) => {
                            shorter.push(and_small(docs, &f.shorter[upto - 1].1))
                        }
                    }
                }
                match (&whole[..], shorter.len()) {
                    ([], 1) => shorter.pop().unwrap_or_default(),
                    ([one], 0) => (*one).clone(),
                    _ => union_of(whole.into_iter().chain(shorter.iter())),
                }
            })
            .collect()
    }

    /// Which of part `p`'s levels hold documents whose bound reaches `at_least`, and
    /// of each such level whether all its documents do or those of its shortest classes.
    fn takes(&self, p: &Part<'_>, at_least: f64) -> Vec<(usize, Take)> {
        let f = &self.fields[p.field];
        if at_least <= 0.0 || f.shorter.is_empty() {
            return vec![(0, Take::Whole)];
        }
        let mut takes = Vec::new();
        let mut upto = 0; // classes (shortest first) reaching it at this level
        for li in 0..p.levels.len() {
            let tf = li + 1;
            if p.open && tf == p.levels.len() {
                if self.bound(p, tf, 0) >= at_least {
                    takes.push((li, Take::Whole));
                }
                break;
            }
            while upto < f.shorter.len() && self.bound(p, tf, f.shorter[upto].0) >= at_least {
                upto += 1;
            }
            if upto == f.shorter.len() {
                takes.push((li, Take::Whole)); // and every level above is within it
                break;
            }
            if upto == 0 {
                continue;
            }
            takes.push((li, Take::Shorter(upto)));
        }
        takes
    }

    /// Documents of `within` outside `few` that may score at least `theta`, `None` when
    /// more than `budget`. A document's score is at most the sum of the bounds of the
    /// parts it is in: per set of parts it may hold (`by_parts`), or with many parts,
    /// per set of terms (`by_terms`). `held` keeps each set's holders among `within`
    /// for the next round (the same `within`).
    pub(super) fn candidates<'a>(
        &'a self,
        theta: f64,
        within: Within<'_>,
        budget: u64,
        held: &mut Held<'a>,
    ) -> Option<RoaringBitmap> {
        if self.max <= 0.0 || theta > self.max {
            return Some(RoaringBitmap::new());
        }
        if self.parts.len() <= MAX_PART_SETS {
            self.by_parts(theta, within, budget, held)
        } else {
            self.by_terms(theta, within, budget, held)
        }
    }

    /// Per set of terms a document may hold: the documents of `within` holding them all
    /// that reach `theta` in those terms' parts (all parts at once with many terms).
    fn by_terms<'a>(
        &'a self,
        theta: f64,
        within: Within<'_>,
        budget: u64,
        held: &mut Held<'a>,
    ) -> Option<RoaringBitmap> {
        let nt = self.terms.len();
        if nt > MAX_TERM_SETS {
            let all: Vec<usize> = (0..self.parts.len()).collect();
            return self.reaching_together(&all, theta, within.docs(), false, budget);
        }
        let sets = (1u32..1 << nt).filter_map(|set| {
            if members(set, nt).any(|t| self.terms[t].is_empty()) {
                return None;
            }
            let parts = (0..self.parts.len())
                .filter(|&j| set >> self.parts[j].term & 1 == 1)
                .collect();
            Some((set, parts))
        });
        self.per_set(theta, within, budget, SetsOf::Terms, sets, held)
    }

    /// Per set of parts a document may hold (a word in the title only, in the
    /// description only, in both): the documents of `within` holding them all whose
    /// bounds in them may add up to `theta`, banded. A document is let in under the set
    /// of parts it holds, whose bounds are its score's bound — not those of parts of its
    /// terms it does not hold, as `by_terms` counts them.
    fn by_parts<'a>(
        &'a self,
        theta: f64,
        within: Within<'_>,
        budget: u64,
        held: &mut Held<'a>,
    ) -> Option<RoaringBitmap> {
        let np = self.parts.len();
        let sets = (1u32..1 << np).map(|set| (set, members(set, np).collect()));
        self.per_set(theta, within, budget, SetsOf::Parts, sets, held)
    }

    /// The union over `sets` — each a set (numbered) of parts or of terms, with its
    /// parts — of the documents of `within` holding every member of the set that may
    /// reach `theta` in its parts. `None` when more than `budget`.
    fn per_set<'a>(
        &'a self,
        theta: f64,
        within: Within<'_>,
        budget: u64,
        of: SetsOf,
        sets: impl Iterator<Item = (u32, Vec<usize>)>,
        held: &mut Held<'a>,
    ) -> Option<RoaringBitmap> {
        let holding = |set: u32| -> Vec<&'a RoaringBitmap> {
            match of {
                SetsOf::Parts => (members(set, self.parts.len()))
                    .map(|j| &*self.parts[j].levels[0])
                    .collect(),
                SetsOf::Terms => (members(set, self.terms.len()))
                    .map(|t| &self.terms[t])
                    .collect(),
            }
        };
        // (the holders of a set of parts hold each of its parts; those of a term hold
        // one of its parts, not each)
        let holding_parts = matches!(of, SetsOf::Parts);
        // (every holder: within a set's holders needs no intersection with it)
        let all = within.len() == self.holders;
        let mut out = RoaringBitmap::new();
        for (set, parts) in sets {
            let max: f64 = parts.iter().map(|&j| self.parts[j].max).sum();
            if max < theta {
                continue;
            }
            let docs = held.of(set, || holding_all(within, all, holding(set)));
            // (overlapping sets may still fit together: checked once united)
            out |= self.reaching_together(&parts, theta, docs, holding_parts, budget)?;
            if out.len() > budget {
                return None;
            }
        }
        Some(out)
    }

    /// The documents of `docs` whose bounds in `parts` may add up to `theta` (a
    /// superset). `None` when more than `budget`. `holds_parts`: every document of
    /// `docs` holds every one of `parts` (`reaching`'s `holds_part`).
    fn reaching_together(
        &self,
        parts: &[usize],
        theta: f64,
        docs: &RoaringBitmap,
        holds_parts: bool,
        budget: u64,
    ) -> Option<RoaringBitmap> {
        if parts.len() >= 2 && parts.len() <= MAX_BANDED_PARTS && !docs.is_empty() {
            self.reaching_in_bands(parts, theta, docs, holds_parts, budget)
        } else {
            self.reaching_independently(parts, theta, docs, holds_parts, budget)
        }
    }

    /// The documents of `docs` whose bounds in `parts` may add up to `theta`: in every
    /// part they reach `theta` less what the other parts can add, and in some part a
    /// share of `theta` in proportion to its largest bound. `None` when more than
    /// `budget`.
    fn reaching_independently(
        &self,
        parts: &[usize],
        theta: f64,
        docs: &RoaringBitmap,
        holds_parts: bool,
        budget: u64,
    ) -> Option<RoaringBitmap> {
        let max: f64 = parts.iter().map(|&j| self.parts[j].max).sum();
        let mut needs: Vec<(usize, f64)> = parts
            .iter()
            .map(|&j| (j, theta - (max - self.parts[j].max)))
            .filter(|&(_, need)| need > 0.0)
            .collect();
        if needs.is_empty() {
            let mut some = RoaringBitmap::new();
            for &j in parts.iter().filter(|&&j| self.parts[j].max > 0.0) {
                some |= self.reaching(j, theta * self.parts[j].max / max, docs, holds_parts);
                if some.len() > budget {
                    return None;
                }
            }
            return Some(some);
        }
        // the parts with the fewest documents first, each within what is left
        needs.sort_by_key(|&(j, _)| self.parts[j].levels[0].len());
        let mut out: Option<RoaringBitmap> = None;
        for (j, need) in needs {
            let left = out.as_ref().unwrap_or(docs);
            if left.is_empty() {
                break;
            }
            // (`left` is within `docs`)
            out = Some(self.reaching(j, need, left, holds_parts));
        }
        let out = out.unwrap_or_default();
        (out.len() <= budget).then_some(out)
    }

    /// `reaching_together` for two parts or more, tighter: the part with the largest
    /// bound (`a`) splits the documents into bands by its bound, and each band's need
    /// from the other parts is `theta` less the band's top — not less `a`'s largest
    /// bound for every band alike, which lets in most documents holding both when `a`'s
    /// bounds are spread out (a word in short titles, boosted, beside descriptions).
    fn reaching_in_bands(
        &self,
        parts: &[usize],
        theta: f64,
        docs: &RoaringBitmap,
        holds_parts: bool,
        budget: u64,
    ) -> Option<RoaringBitmap> {
        // (within those the independent test lets in: fewer documents for every band;
        // a subset of `docs`, so they hold every part if those do)
        let docs = self.reaching_independently(parts, theta, docs, holds_parts, u64::MAX)?;
        if docs.len() <= FEW_TO_BAND {
            return (docs.len() <= budget).then_some(docs);
        }
        let (at, &a) = parts
            .iter()
            .enumerate()
            .max_by(|x, y| self.parts[*x.1].max.total_cmp(&self.parts[*y.1].max))?;
        let rest: Vec<usize> = parts
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != at)
            .map(|(_, &j)| j)
            .collect();
        let a_max = self.parts[a].max;
        let rest_max: f64 = rest.iter().map(|&j| self.parts[j].max).sum();
        // band edges from `a`'s largest bound down to the least a document needs there
        // (what the rest cannot add), or 0
        let floor = (theta - rest_max).max(0.0);
        let mut edges: Vec<f64> = (0..=BANDS)
            .map(|i| a_max - (a_max - floor) * i as f64 / BANDS as f64)
            .collect();
        edges.dedup();
        // per band, the documents whose bound in `a` is at least its bottom (up to its
        // top in the band; those above are also in an earlier band, which needs less):
        // `a`'s levels among `docs` found once for every band whose bottom is above 0 —
        // the first ones, as the edges fall — and every document of `docs` for the rest
        let bands: Vec<(f64, f64)> = edges.windows(2).map(|w| (w[0], w[1])).collect();
        let above = bands
            .iter()
            .take_while(|&&(_, bottom)| bottom > 0.0)
            .count();
        let bottoms: Vec<f64> = bands[..above].iter().map(|&(_, bottom)| bottom).collect();
        let in_a_above = self.reaching_each(a, &bottoms, &docs, holds_parts);
        let in_a_rest = std::iter::repeat_with(|| docs.clone());
        let mut out = RoaringBitmap::new();
        for ((top, _), in_a) in bands
            .into_iter()
            .zip(in_a_above.into_iter().chain(in_a_rest))
        {
            let need = theta - top;
            let reached = if need <= 0.0 {
                in_a
            } else if rest.len() == 1 {
                self.reaching(rest[0], need, &in_a, holds_parts)
            } else {
                self.reaching_independently(&rest, need, &in_a, holds_parts, budget)?
            };
            out |= reached;
            if out.len() > budget {
                return None;
            }
        }
        Some(out)
    }

    /// With one part bounded: the highest of its cells' bounds below `below` — a cell
    /// being the documents of one term frequency (the last level: at least) and one
    /// length class — where the documents reaching it are estimated at `want` or more,
    /// frequencies and lengths taken as independent and `share` of the holders within.
    /// Falling from the largest bound by a fixed step instead let in thousands of
    /// documents to score where a page needed a few dozen (a common word: one round
    /// with none, the next with 2,391–4,339 documents). `None` with more parts (their
    /// sums have no such cells) or no cell below `below`; the lowest cell's bound when
    /// all of them fall short.
    fn estimated_theta(&self, below: f64, want: f64, share: f64) -> Option<f64> {
        let [p] = &self.parts[..] else {
            return None;
        };
        let f = &self.fields[p.field];
        let field_docs = f.shorter.last()?.1.len().max(1) as f64;
        // (bound, estimated documents) per cell
        let mut cells: Vec<(f64, f64)> = Vec::new();
        for (li, level) in p.levels.iter().enumerate() {
            let tf = li + 1;
            let above = p.levels.get(li + 1).map_or(0, |l| l.len());
            let of_tf = level.len().saturating_sub(above) as f64 * share;
            if p.open && tf == p.levels.len() {
                cells.push((self.bound(p, tf, 0), of_tf));
                continue;
            }
            let mut shorter = 0;
            for (len, running) in f.shorter.iter() {
                let class = running.len().saturating_sub(shorter);
                shorter = running.len();
                cells.push((self.bound(p, tf, *len), of_tf * class as f64 / field_docs));
            }
        }
        cells.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        let mut reaching = 0.0;
        let mut last = None;
        for (bound, docs) in cells {
            if bound >= below {
                continue;
            }
            reaching += docs;
            last = Some(bound);
            if reaching >= want {
                break;
            }
        }
        last
    }

    /// Scores documents of `within` until the `k` best are known: returns `theta` such
    /// that every document of `within` not scored scores below it, while at least `k`
    /// scored ones score at least it (`None`: too many to score).
    pub(super) fn search(
        &self,
        scorer: &mut Scorer<'_, '_>,
        within: Within<'_>,
        k: usize,
    ) -> Option<f64> {
        let small = if cfg!(test) {
            k as u64
        } else {
            (4 * k as u64).max(SMALL)
        };
        debug_assert!(
            scorer.done.is_subset(within.docs()),
            "scored outside `within`"
        );
        if within.len() <= small {
            scorer.score(within.docs())?;
            return Some(0.0);
        }
        // the parts with few documents are scored whole; the others are bounded, from
        // the largest bound (one part: where a few pages are estimated to reach) down
        // until k documents reach one, then a little below the k-th best score found
        // (ties at it are then all scored, and a k-th best just under a threshold needs
        // no further round)
        match within {
            // (every part's documents are holders)
            Within::Holders(_) => scorer.score(&self.few)?,
            Within::Docs(docs) => scorer.score(&(&self.few & docs))?,
        }
        let share = within.len() as f64 / self.holders.max(1) as f64;
        let mut want = ESTIMATED_PAGES * k as f64;
        let mut theta = self
            .estimated_theta(f64::INFINITY, want, share)
            .unwrap_or(self.max);
        if let Some(kth) = scorer.kth(k) {
            theta = theta.min(kth * BELOW);
        }
        let mut held = Held::default();
        for _ in 0..64 {
            // (the candidates include those scored in earlier rounds: only more than
            // the limit in all is sure to be too many, which `score` checks exactly)
            let c = self.candidates(theta, within, scorer.limit, &mut held)?;
            scorer.score(&c)?;
            debug_assert!(
                scorer.done.is_subset(within.docs()),
                "scored outside `within`"
            );
            match scorer.kth(k) {
                Some(kth) if kth >= theta => return Some(theta),
                Some(kth) => theta = kth * BELOW,
                None => {
                    // (the estimate fell short: frequencies and lengths go together,
                    // so the next aims higher, and a search takes few rounds)
                    want *= 2.0;
                    theta = self
                        .estimated_theta(theta, want, share)
                        .unwrap_or(theta * 0.9 * BELOW)
                }
            }
            if theta <= 0.0 {
                return None;
            }
        }
        None
    }
}

/// The members of numbered set `set` (bit i: member i) among `n`.
fn members(set: u32, n: usize) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| set >> i & 1 == 1)
}

/// What the numbered sets of `Bounds::per_set` are sets of.
#[derive(Clone, Copy)]
enum SetsOf {
    Parts,
    Terms,
}

/// Of one level of a part, the documents whose bound reaches a threshold: all of them,
/// or those of its first `Shorter(n)` length classes.
#[derive(Clone, Copy)]
enum Take {
    Whole,
    Shorter(usize),
}

/// Per set of parts or terms (numbered as `by_parts` and `by_terms` number them), its
/// holders among one `within`, found in a search's first round that needs them and
/// kept for its next rounds: they do not depend on the threshold.
#[derive(Default)]
pub(super) struct Held<'a>(Vec<Option<Cow<'a, RoaringBitmap>>>);

impl<'a> Held<'a> {
    fn of(&mut self, set: u32, find: impl FnOnce() -> Cow<'a, RoaringBitmap>) -> &RoaringBitmap {
        let i = set as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, None);
        }
        self.0[i].get_or_insert_with(find)
    }
}

/// The members of `within` in every one of `sets` (at least one), smallest first; with
/// `all` (`within` holds every set's members) the sets' intersection, a single set as
/// it stands.
fn holding_all<'a>(
    within: Within<'_>,
    all: bool,
    mut sets: Vec<&'a RoaringBitmap>,
) -> Cow<'a, RoaringBitmap> {
    sets.sort_by_key(|b| b.len());
    let (mut docs, rest) = match (all, &sets[..]) {
        (true, [one]) => return Cow::Borrowed(*one),
        (true, [a, b, rest @ ..]) => (and_small(a, b), rest),
        (_, [a, rest @ ..]) => (and_small(within.docs(), a), rest),
        (_, []) => return Cow::Owned(within.docs().clone()),
    };
    for h in rest {
        docs &= *h;
    }
    Cow::Owned(docs)
}
