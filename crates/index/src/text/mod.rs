//! Text criteria (SPEC §7.2 text): BM25 over the selected fields (k1 = 1.2, b = 0.75,
//! b = 0 when field length is ignored, idf = 1 when IDF is ignored), graded exactness.

use std::borrow::Cow;
use std::ops::Range;

use discern_dimensions::IndexedValue;

use rayon::prelude::*;
use roaring::RoaringBitmap;

mod holders;
mod parse;

pub(crate) use holders::Holders;

use crate::bits::Positions;
use crate::columns::ChunkCols;
use crate::postings::{text_key, text_level_key, MAX_LEVEL};
use crate::Snapshot;

pub(crate) const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A field's average length in tokens from its (total tokens, documents with the field).
pub(crate) fn average_length((total, with_field): (u64, u64)) -> f64 {
    if with_field > 0 {
        total as f64 / with_field as f64
    } else {
        1.0
    }
}

/// The length in tokens of field `field` of document `doc`'s value in text dimension
/// `dim`, from its chunk's columns `cols` when they hold it, else from its row (0
/// without a value): the length BM25 reads.
pub(crate) fn field_length(
    snap: &Snapshot,
    cols: Option<&ChunkCols>,
    dim: usize,
    doc: u32,
    field: usize,
) -> usize {
    cols.and_then(|c| c.text_len(dim, doc as usize % crate::CHUNK, field))
        .or_else(|| match &*snap.doc(doc)?.value(dim)? {
            IndexedValue::Terms(terms) => Some(terms.group_len(field)),
            _ => None,
        })
        .unwrap_or(0)
}

/// One query term's BM25 contribution in one field.
pub(crate) fn bm25_term(idf: f64, tf: f64, len: f64, avg: f64, ignore_length: bool) -> f64 {
    let b = if ignore_length { 0.0 } else { B };
    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - b + b * len / avg.max(1e-9)))
}

pub struct TextMatcher {
    /// Per field of the dimension: selected?, boost, ignore field length, query terms.
    pub(crate) fields: Vec<FieldQuery>,
    /// Number of query terms (the first selected field's analysis defines them).
    pub(crate) n_terms: usize,
    pub(crate) require_all: bool,
    ignore_idf: bool,
    pub(crate) prefix_last: bool,
    /// The documents scored, numbered in doc order: after `prepare` every document
    /// holding a query term.
    rank: Graded,
    /// Per document of `rank`, its score.
    scored: Vec<Scored>,
    /// Best score among the query's results (grading reference for `g`).
    max_score: f64,
    /// Documents holding a query term, found by `prepare` (after `set_scored`: those
    /// scored).
    matched: RoaringBitmap,
}

/// One matching document's text score, the idf-weighted share of the query terms it
/// holds, whether it holds any (`holds`) and whether that makes it exact.
#[derive(Clone, Copy, Default)]
pub(crate) struct Scored {
    pub(crate) score: f64,
    pub(crate) m: f64,
    pub(crate) holds: bool,
    pub(crate) exact: bool,
}

/// A document's (exactness, relevance) for a text criterion from its `Scored`, graded
/// against the best score among the results (SPEC §7.2 text).
pub(crate) fn grade(p: &Scored, max_score: f64, exact_rel: f64, fuzzy_rel: f64) -> (bool, f64) {
    if !p.holds {
        return (false, 0.0);
    }
    let g = if max_score > 0.0 {
        0.5 + 0.5 * (p.score / max_score).min(1.0)
    } else {
        1.0
    };
    if p.exact {
        (true, exact_rel * g)
    } else {
        (false, fuzzy_rel * p.m * g)
    }
}

/// What scoring a text criterion needs from the postings (`TextMatcher::gather`).
pub(crate) struct Gathered<'s> {
    /// (slot = field position × terms + term, a set of documents holding it once more;
    /// a set of one document is made for it).
    pub(crate) sources: Vec<(usize, Cow<'s, RoaringBitmap>)>,
    /// Per (field position, term): the idf.
    pub(crate) idfs: Vec<Vec<f64>>,
    /// Per field position: (tokens in all documents, documents with the field).
    pub(crate) stats: Vec<(u64, u64)>,
    /// Per term: its idf over every queried field (the weights of `m`), and their sum.
    pub(crate) weights: Vec<f64>,
    pub(crate) wsum: f64,
    /// Per term, when every term is required (`require_all`, their one use) and there
    /// are several: the documents holding it in a queried field. Else empty (a lone
    /// term's are `matched`).
    pub(crate) term_docs: Vec<Cow<'s, RoaringBitmap>>,
    /// Documents holding a query term.
    pub(crate) matched: Holders<'s>,
}

/// Where a document's score is among a matcher's: every holder of a query term numbered
/// in constant time (`prepare`), or the few a ranked request left graded (`set_scored`)
/// found by binary search — numbering 20 documents the dense way made a bitset over
/// every doc number, ~20 µs of a ~1 ms request.
enum Graded {
    Every(DocRank),
    Few(Vec<u32>),
}

impl Default for Graded {
    fn default() -> Graded {
        Graded::Few(Vec::new())
    }
}

impl Graded {
    #[inline]
    fn get(&self, doc: u32) -> Option<usize> {
        match self {
            Graded::Every(rank) => rank.get(doc),
            Graded::Few(docs) => docs.binary_search(&doc).ok(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            Graded::Every(rank) => rank.len(),
            Graded::Few(docs) => docs.len(),
        }
    }
}

/// The rank of each member of a document set among its members, in constant time: a
/// bitset over doc numbers with the count of members before each word.
#[derive(Default)]
pub(crate) struct DocRank {
    words: Vec<u64>,
    before: Vec<u32>,
    len: usize,
}

impl DocRank {
    pub(crate) fn new(set: &RoaringBitmap) -> DocRank {
        let words = crate::bits::words_of(set);
        let mut before = Vec::with_capacity(words.len());
        let mut count = 0u32;
        for w in &words {
            before.push(count);
            count += w.count_ones();
        }
        DocRank {
            words,
            before,
            len: count as usize,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The rank of `doc` if it is a member.
    #[inline]
    pub(crate) fn get(&self, doc: u32) -> Option<usize> {
        let (w, bit) = (doc as usize / 64, doc % 64);
        let word = *self.words.get(w)?;
        (word >> bit & 1 == 1)
            .then(|| self.before[w] as usize + (word & ((1u64 << bit) - 1)).count_ones() as usize)
    }

    /// The number of members below `doc`.
    pub(crate) fn below(&self, doc: u32) -> usize {
        let (w, bit) = (doc as usize / 64, doc % 64);
        match self.words.get(w) {
            Some(word) => {
                self.before[w] as usize + (word & ((1u64 << bit) - 1)).count_ones() as usize
            }
            None => self.len,
        }
    }

    /// The members in `docs`, ascending.
    pub(crate) fn iter_range(&self, docs: Range<u32>) -> impl Iterator<Item = u32> + '_ {
        let (start, end) = (docs.start, docs.end);
        let first = (start as usize / 64).min(self.words.len());
        let last = (end as usize).div_ceil(64).clamp(first, self.words.len());
        Positions::of(&self.words[first..last])
            .map(move |i| (first * 64 + i) as u32)
            .filter(move |&d| d >= start && d < end)
    }

    /// Doc-number bounds splitting the members into about `parts` ranges of similar
    /// size: ascending, from 0 to past the last member.
    pub(crate) fn split(&self, parts: usize) -> Vec<u32> {
        let end = (self.words.len() * 64).min(u32::MAX as usize) as u32;
        let mut bounds = vec![0];
        for k in 1..parts.max(1) {
            let want = (self.len * k / parts) as u32;
            let w = self.before.partition_point(|&b| b < want);
            let b = (w * 64) as u32;
            if b > *bounds.last().unwrap_or(&0) && b < end {
                bounds.push(b);
            }
        }
        bounds.push(end);
        bounds
    }

    /// The number of members in `docs`.
    pub(crate) fn count_in(&self, docs: Range<u32>) -> usize {
        self.below(docs.end) - self.below(docs.start)
    }
}

pub(crate) struct FieldQuery {
    pub(crate) index: usize,
    pub(crate) boost: f64,
    pub(crate) ignore_length: bool,
    pub(crate) terms: Vec<String>,
}

impl TextMatcher {
    /// Computes the text score of every item holding a query term, term at a time from
    /// the postings: the base keys give document frequencies and the matching
    /// documents, the level keys their term frequencies, the chunks' columns their field
    /// lengths; rows are read only for frequencies or lengths beyond what those hold.
    /// `eval` grades against the best score once culling is known.
    pub fn prepare(&mut self, snap: &Snapshot, dim: usize) {
        let Some(g) = self.gather(snap, dim) else {
            return;
        };
        let (rank, scored) = self.score_all(snap, dim, &g);
        self.max_score = scored.iter().map(|p| p.score).fold(0.0, f64::max);
        self.rank = Graded::Every(rank);
        self.scored = scored;
        self.matched = g.matched.into_set().into_owned();
    }

    /// What scoring needs from the postings (bitmap operations only, no document read).
    pub(crate) fn gather<'s>(&self, snap: &'s Snapshot, dim: usize) -> Option<Gathered<'s>> {
        let post = snap.postings(dim)?;
        let n_docs = snap.len().max(1) as f64;
        let (nf, nt) = (self.fields.len(), self.n_terms);
        let mut df = vec![vec![0u64; nt]; nf];
        let mut df_any = vec![0u64; nt];
        let mut per_term: Vec<Holders<'s>> = Vec::with_capacity(nt);
        // (slot = field position × terms + term, a set of documents holding it once more)
        let mut sources: Vec<(usize, Cow<RoaringBitmap>)> = Vec::new();
        for (t, any) in df_any.iter_mut().enumerate() {
            let mut in_fields: Vec<Cow<'s, RoaringBitmap>> = Vec::with_capacity(nf);
            for (fi, fq) in self.fields.iter().enumerate() {
                // a field whose analysis gave fewer terms looks up "": no token, or as a
                // prefix every token (as `count_row` does)
                let term = fq.terms.get(t).map(String::as_str).unwrap_or("");
                let slot = fi * nt + t;
                let prefix = self.prefix_last && t + 1 == nt;
                // the term's documents (every term's with the prefix), then its levels
                let base = sources.len();
                let key = text_key(fq.index, term);
                if prefix {
                    sources.extend(post.prefix(&key).map(|b| (slot, b.bitmap())));
                } else {
                    sources.extend(post.get(&key).map(|b| (slot, b.bitmap())));
                }
                // (one set, the common case: lent as it stands, not copied)
                let in_field: Cow<'s, RoaringBitmap> = match &sources[base..] {
                    [(_, Cow::Borrowed(one))] => Cow::Borrowed(*one),
                    more => Cow::Owned(crate::bits::union_of(more.iter().map(|(_, b)| &**b))),
                };
                df[fi][t] = in_field.len();
                in_fields.push(in_field);
                for level in 2..=MAX_LEVEL {
                    let before = sources.len();
                    let key = text_level_key(fq.index, level, term);
                    if prefix {
                        sources.extend(post.prefix(&key).map(|b| (slot, b.bitmap())));
                    } else {
                        sources.extend(post.get(&key).map(|b| (slot, b.bitmap())));
                    }
                    // a level below is a superset: none here, none above
                    if sources.len() == before {
                        break;
                    }
                }
            }
            let docs = Holders::of(in_fields);
            *any = docs.len();
            per_term.push(docs);
        }
        // (a lone term's holders as they are, neither copied nor united: "hall" at 1M,
        // 13% of its request's CPU went to copies and unions made only to be read)
        let mut term_docs = Vec::new();
        let matched = match per_term.len() {
            1 => per_term.pop().unwrap_or_else(|| Holders::of(Vec::new())),
            _ if self.require_all => {
                term_docs = per_term.into_iter().map(Holders::into_set).collect();
                let all = crate::bits::union_of(term_docs.iter().map(|d| &**d));
                Holders::of(vec![Cow::Owned(all)])
            }
            _ => Holders::of(per_term.into_iter().flat_map(Holders::into_parts).collect()),
        };
        let stats: Vec<(u64, u64)> = self
            .fields
            .iter()
            .map(|fq| post.field_stats.get(fq.index).copied().unwrap_or((0, 0)))
            .collect();
        let ignore_idf = self.ignore_idf;
        let idf = |df: u64| {
            if ignore_idf {
                1.0
            } else {
                (1.0 + (n_docs - df as f64 + 0.5) / (df as f64 + 0.5)).ln()
            }
        };
        let weights: Vec<f64> = df_any.iter().map(|&d| idf(d)).collect();
        let wsum: f64 = weights.iter().sum();
        // per (field position, term)
        let idfs: Vec<Vec<f64>> = df
            .iter()
            .map(|f| f.iter().map(|&d| idf(d)).collect())
            .collect();
        Some(Gathered {
            sources,
            idfs,
            stats,
            weights,
            wsum,
            term_docs,
            matched,
        })
    }

    /// The score of every document holding a query term (`g.matched`), numbered by a
    /// `DocRank`, term at a time over ranges of documents in parallel.
    pub(crate) fn score_all(
        &self,
        snap: &Snapshot,
        dim: usize,
        g: &Gathered<'_>,
    ) -> (DocRank, Vec<Scored>) {
        let stride = self.fields.len() * self.n_terms;
        let rank = DocRank::new(g.matched.set());
        let n = rank.len();
        let mut tf = vec![0u16; n * stride];
        let mut scored = vec![Scored::default(); n];
        // documents split into ranges, each range's slice of `tf` and `scored` filled by
        // one task: every source is read once per range, in doc order
        let bounds = rank.split(if n < 16_384 {
            1
        } else {
            4 * rayon::current_num_threads()
        });
        let mut parts: Vec<(Range<u32>, &mut [u16], &mut [Scored])> = Vec::new();
        let (mut tf_rest, mut sc_rest) = (&mut tf[..], &mut scored[..]);
        for w in bounds.windows(2) {
            let len = rank.count_in(w[0]..w[1]);
            let (a, b) = std::mem::take(&mut tf_rest).split_at_mut(len * stride);
            let (c, d) = std::mem::take(&mut sc_rest).split_at_mut(len);
            parts.push((w[0]..w[1], a, c));
            (tf_rest, sc_rest) = (b, d);
        }
        let rank_ref = &rank;
        parts.into_par_iter().for_each(|(docs, tf, scored)| {
            let first = rank_ref.below(docs.start);
            // (every source is a subset of `g.matched`: read whole)
            for (slot, b) in &g.sources {
                let slot = *slot;
                for d in b.range(docs.clone()) {
                    if let Some(r) = rank_ref.get(d) {
                        let at = (r - first) * stride + slot;
                        tf[at] = tf[at].saturating_add(1);
                    }
                }
            }
            for (i, d) in rank_ref.iter_range(docs).enumerate() {
                let counts = &tf[i * stride..(i + 1) * stride];
                let cols = snap.chunk_cols(d as usize / crate::CHUNK);
                let len_of = |fi: usize| field_length(snap, cols, dim, d, self.fields[fi].index);
                scored[i] = self.score(snap, len_of, dim, d, counts, g);
            }
        });
        (rank, scored)
    }

    /// The scores of `docs` (a few of the holders of a query term), in doc order: each
    /// source is intersected with them first, and its term counts added by place.
    pub(crate) fn score_some(
        &self,
        snap: &Snapshot,
        dim: usize,
        g: &Gathered<'_>,
        docs: &RoaringBitmap,
    ) -> Vec<Scored> {
        let stride = self.fields.len() * self.n_terms;
        let list: Vec<u32> = docs.iter().collect();
        let mut tf = vec![0u16; list.len() * stride];
        let mut count = |i: usize, slot: usize| {
            let at = i * stride + slot;
            tf[at] = tf[at].saturating_add(1);
        };
        // Each source's documents among `docs`, by their place in `list`: looked up one
        // by one where that is cheaper (`lookups_pay`: a large source of array
        // containers), else intersected and placed by walking `list`
        // alongside (a roaring `rank` per document counted a dense container's words).
        for (slot, b) in &g.sources {
            let slot = *slot;
            if crate::bits::lookups_pay(list.len() as u64, b) {
                for (i, &d) in list.iter().enumerate() {
                    if b.contains(d) {
                        count(i, slot);
                    }
                }
            } else {
                let mut i = 0;
                for d in &(docs & &**b) {
                    // (`d` is a member of `docs`: found before the list ends)
                    while list[i] < d {
                        i += 1;
                    }
                    count(i, slot);
                }
            }
        }
        // Every field length first, in a loop of its own: each is a few dependent cache
        // misses (the chunk, its columns, the length), and a loop doing nothing else
        // has several documents' misses in flight at once. (A few documents, each
        // likely in a chunk of its own: lengths are read from columns where built, not
        // built for them — after an apply, the chunks it copied have none until
        // rebuilt in the background.)
        let nf = self.fields.len();
        let mut lens = Vec::with_capacity(list.len() * nf);
        for &d in &list {
            let cols = snap.built_chunk_cols(d as usize / crate::CHUNK);
            lens.extend(
                self.fields
                    .iter()
                    .map(|fq| field_length(snap, cols, dim, d, fq.index)),
            );
        }
        list.iter()
            .zip(tf.chunks_exact(stride.max(1)))
            .zip(lens.chunks_exact(nf.max(1)))
            .map(|((&d, counts), lens)| self.score(snap, |fi| lens[fi], dim, d, counts, g))
            .collect()
    }

    /// The score of document `doc` from its term frequencies per (field, term) slot,
    /// counted from its row where the postings cap them, and its length in each field
    /// (`len_of(field position)`).
    fn score(
        &self,
        snap: &Snapshot,
        len_of: impl Fn(usize) -> usize,
        dim: usize,
        doc: u32,
        tf: &[u16],
        g: &Gathered<'_>,
    ) -> Scored {
        let (idfs, stats, weights, wsum) = (&g.idfs, &g.stats, &g.weights, g.wsum);
        let nt = self.n_terms;
        let row = || Some((snap.doc(doc)?.value(dim)?, snap.vocab(dim)?.read()));
        let mut score = 0.0;
        // no allocation per item unless the query has more than 64 terms
        let mut small = [false; 64];
        let mut big = Vec::new();
        let contained: &mut [bool] = if nt <= 64 {
            &mut small[..nt]
        } else {
            big.resize(nt, false);
            &mut big
        };
        let mut n_in = 0;
        let mut row_tf: Vec<u32> = Vec::new();
        for (fi, fq) in self.fields.iter().enumerate() {
            let tf = &tf[fi * nt..(fi + 1) * nt];
            if tf.iter().all(|&n| n == 0) {
                continue; // adds nothing to the score
            }
            // a frequency at the highest level may be higher: counted from the row
            let from_row = tf.iter().any(|&n| n >= MAX_LEVEL as u16);
            if from_row {
                row_tf.clear();
                row_tf.resize(nt, 0);
                if let Some((value, vocab)) = row() {
                    if let IndexedValue::Terms(terms) = &*value {
                        let tokens = terms
                            .group(fq.index)
                            .map(|n| vocab.get(n).unwrap_or_default());
                        self.count_row(tokens, fq, &mut row_tf);
                    }
                }
            }
            let tf_of = |t: usize| if from_row { row_tf[t] } else { tf[t] as u32 };
            let len = len_of(fi) as f64;
            let avg = average_length(stats[fi]);
            let mut fs = 0.0;
            for (t, ct) in contained.iter_mut().enumerate() {
                let tf = tf_of(t) as f64;
                if tf > 0.0 {
                    if !*ct {
                        n_in += 1;
                    }
                    *ct = true;
                    fs += bm25_term(idfs[fi][t], tf, len, avg, fq.ignore_length);
                }
            }
            score += fq.boost * fs;
        }
        if n_in == 0 {
            return Scored::default();
        }
        let m = if wsum > 0.0 {
            contained
                .iter()
                .zip(weights)
                .filter(|(c, _)| **c)
                .map(|(_, w)| w)
                .sum::<f64>()
                / wsum
        } else {
            n_in as f64 / nt as f64
        };
        let exact = if self.require_all { n_in == nt } else { true };
        Scored {
            score,
            m,
            holds: true,
            exact,
        }
    }

    /// Counts every query term in one field's tokens.
    fn count_row<'a>(
        &self,
        tokens: impl Iterator<Item = &'a str>,
        fq: &FieldQuery,
        tf: &mut [u32],
    ) {
        let nt = self.n_terms;
        for tok in tokens {
            let tok = tok.as_bytes();
            for (t, n) in tf.iter_mut().enumerate() {
                let term = fq.terms.get(t).map(String::as_bytes).unwrap_or_default();
                let hit = if self.prefix_last && t + 1 == nt {
                    tok.starts_with(term)
                } else {
                    tok == term
                };
                *n += hit as u32;
            }
        }
    }

    /// Every document holding a query term (after `prepare`): the only ones a text
    /// criterion can give relevance above 0 or exactness.
    pub fn matched(&self) -> &RoaringBitmap {
        &self.matched
    }

    /// (field index, analysed query terms) per queried field.
    pub fn field_terms(&self) -> impl Iterator<Item = (usize, &[String])> {
        self.fields.iter().map(|f| (f.index, f.terms.as_slice()))
    }

    /// Holds `graded`, a few documents' scores (in doc order), graded against
    /// `max_score`: what `prepare` and `set_max_over` leave for those documents.
    pub(crate) fn set_scored(&mut self, graded: Vec<(u32, Scored)>, max_score: f64) {
        let (docs, scored): (Vec<u32>, Vec<Scored>) = graded.into_iter().unzip();
        self.matched = docs.iter().copied().collect();
        self.rank = Graded::Few(docs);
        self.scored = scored;
        self.max_score = max_score;
    }

    /// Grades against the best score among `docs` (the query's results once culling is
    /// known); membership never depends on it, since `g` >= 0.5.
    pub fn set_max_over(&mut self, docs: impl Iterator<Item = u32>) {
        self.max_score = docs
            .filter_map(|d| Some(self.scored[self.rank.get(d)?].score))
            .fold(0.0, f64::max);
    }

    pub fn eval(&self, doc: u32, exact_rel: f64, fuzzy_rel: f64) -> (bool, f64) {
        match self.rank.get(doc).map(|r| &self.scored[r]) {
            Some(scored) => grade(scored, self.max_score, exact_rel, fuzzy_rel),
            None => (false, 0.0),
        }
    }
}

#[cfg(test)]
mod tests;
