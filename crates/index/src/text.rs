//! Text criteria (SPEC §7.2 text): BM25 over the selected fields (k1 = 1.2, b = 0.75,
//! b = 0 when field length is ignored, idf = 1 when IDF is ignored), graded exactness.

use std::collections::HashMap;

use discern_dimensions::{IndexedValue, TextSpec};
use discern_model::Result;
use serde_json::{Map, Value as J};

use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::postings::text_key;
use crate::query::{as_bool, as_f64, as_str, bad, member};
use crate::Snapshot;

const K1: f64 = 1.2;
const B: f64 = 0.75;

pub struct TextMatcher {
    /// Per field of the dimension: selected?, boost, ignore field length, query terms.
    fields: Vec<FieldQuery>,
    /// Number of query terms (the first selected field's analysis defines them).
    n_terms: usize,
    require_all: bool,
    ignore_idf: bool,
    prefix_last: bool,
    /// doc → (exact, score, m) computed by `prepare`.
    prepared: HashMap<u32, (bool, f64, f64)>,
    /// Best score among the query's results (grading reference for `g`).
    max_score: f64,
    /// Documents holding a query term, found by `prepare`.
    matched: RoaringBitmap,
}

struct FieldQuery {
    index: usize,
    boost: f64,
    ignore_length: bool,
    terms: Vec<String>,
}

impl TextMatcher {
    pub fn parse(obj: &Map<String, J>, path: &str, spec: &TextSpec) -> Result<Option<TextMatcher>> {
        let p = |n: &str| format!("{path}.{n}");
        let Some(value) = member(obj, "value") else {
            return Ok(None);
        };
        let text = match value {
            J::String(s) => s.clone(),
            J::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect::<Vec<_>>()
                .join(" "),
            other => other.to_string(),
        };
        let selected: Option<Vec<String>> = match member(obj, "fields") {
            None => None,
            Some(J::Array(a)) => Some(
                a.iter()
                    .map(|x| x.as_str().unwrap_or_default().to_string())
                    .collect(),
            ),
            Some(J::String(s)) => Some(vec![s.clone()]),
            Some(other) => {
                return Err(bad(
                    &p("fields"),
                    format!("expected an array of field ids, got {other}"),
                ))
            }
        };
        if let Some(sel) = &selected {
            for f in sel {
                if !spec.fields.iter().any(|x| &x.id == f) {
                    return Err(bad(&p("fields"), format!("unknown field {f:?}")));
                }
            }
        }
        let boosts = match member(obj, "fieldBoosts") {
            None => Map::new(),
            Some(J::Object(m)) => m.clone(),
            Some(other) => {
                return Err(bad(
                    &p("fieldBoosts"),
                    format!("expected an object, got {other}"),
                ))
            }
        };
        let ignore_len = member(obj, "ignoreFieldLength")
            .map(|v| as_bool(v, &p("ignoreFieldLength")))
            .transpose()?;
        let ignore_idf = member(obj, "ignoreInverseDocumentFrequency")
            .map(|v| as_bool(v, &p("ignoreInverseDocumentFrequency")))
            .transpose()?
            .unwrap_or(false);
        let require_all = match member(obj, "exactRequires") {
            None => false,
            Some(v) => match as_str(v, &p("exactRequires"))? {
                "any" => false,
                "all" => true,
                other => {
                    return Err(bad(
                        &p("exactRequires"),
                        format!("{other:?} is not any or all"),
                    ))
                }
            },
        };
        let prefix_last = match member(obj, "searchStyle") {
            None => false,
            Some(v) => match as_str(v, &p("searchStyle"))? {
                "words" => false,
                "startsWith" => true,
                other => {
                    return Err(bad(
                        &p("searchStyle"),
                        format!("{other:?} is not words or startsWith"),
                    ))
                }
            },
        };
        let min_prefix = member(obj, "minStartsWithLength")
            .map(|v| as_f64(v, &p("minStartsWithLength")))
            .transpose()?
            .unwrap_or(1.0);
        let mut fields = Vec::new();
        for (i, f) in spec.fields.iter().enumerate() {
            if selected.as_ref().is_some_and(|s| !s.contains(&f.id)) {
                continue;
            }
            let boost = match boosts.get(&f.id) {
                Some(b) => as_f64(b, &format!("{path}.fieldBoosts.{}", f.id))?,
                None => 1.0,
            };
            let mut terms = f.analyzer.tokens(&text);
            let mut seen = std::collections::HashSet::new();
            terms.retain(|t| seen.insert(t.clone()));
            fields.push(FieldQuery {
                index: i,
                boost,
                ignore_length: ignore_len.unwrap_or(f.ignore_field_length),
                terms,
            });
        }
        let n_terms = fields.first().map(|f| f.terms.len()).unwrap_or(0);
        if n_terms == 0 {
            return Ok(None);
        }
        let prefix_last = prefix_last
            && fields
                .first()
                .and_then(|f| f.terms.last())
                .is_some_and(|t| t.chars().count() as f64 >= min_prefix);
        Ok(Some(TextMatcher {
            fields,
            n_terms,
            require_all,
            ignore_idf,
            prefix_last,
            prepared: HashMap::new(),
            max_score: 0.0,
            matched: RoaringBitmap::new(),
        }))
    }

    /// Computes the text score of every item holding a query term: the postings give
    /// document frequencies and the matching documents; only those are scored, from
    /// their tokens, so that `eval` can grade against the best score.
    pub fn prepare(&mut self, snap: &Snapshot, dim: usize) {
        let Some(post) = snap.postings(dim) else {
            return;
        };
        let n_docs = snap.len().max(1) as f64;
        let nf = self.fields.len();
        let mut df = vec![vec![0u64; self.n_terms]; nf];
        let mut matched = RoaringBitmap::new();
        let mut df_any = vec![0u64; self.n_terms];
        for (t, any) in df_any.iter_mut().enumerate() {
            let mut docs = RoaringBitmap::new();
            for (fi, fq) in self.fields.iter().enumerate() {
                // a field whose analysis gave fewer terms matches "" (as `per_doc` does)
                let term = fq.terms.get(t).map(String::as_str).unwrap_or("");
                let key = text_key(fq.index, term);
                let in_field = if self.prefix_last && t + 1 == self.n_terms {
                    post.union_prefix(&key)
                } else {
                    post.get(&key).cloned().unwrap_or_default()
                };
                df[fi][t] = in_field.len();
                docs |= in_field;
            }
            *any = docs.len();
            matched |= docs;
        }
        let stats: Vec<(u64, u64)> = self
            .fields
            .iter()
            .map(|fq| post.field_stats.get(fq.index).copied().unwrap_or((0, 0)))
            .collect();
        let idf = |df: u64| {
            if self.ignore_idf {
                1.0
            } else {
                (1.0 + (n_docs - df as f64 + 0.5) / (df as f64 + 0.5)).ln()
            }
        };
        let weights: Vec<f64> = df_any.iter().map(|&d| idf(d)).collect();
        let wsum: f64 = weights.iter().sum();
        let n_terms = self.n_terms;
        let score_doc = |doc: u32| -> Option<(u32, (bool, f64, f64))> {
            let Some(IndexedValue::Text(toks)) = snap.doc(doc)?.values.get(dim)?.as_ref() else {
                return None;
            };
            let mut score = 0.0;
            // no allocation per item unless the query has more than 64 terms
            let (mut small_c, mut small_tf) = ([false; 64], [0u32; 64]);
            let (mut big_c, mut big_tf) = (Vec::new(), Vec::new());
            let (contained, tf): (&mut [bool], &mut [u32]) = if n_terms <= 64 {
                (&mut small_c[..n_terms], &mut small_tf[..n_terms])
            } else {
                big_c.resize(n_terms, false);
                big_tf.resize(n_terms, 0);
                (&mut big_c, &mut big_tf)
            };
            let mut n_in = 0;
            for (fi, fq) in self.fields.iter().enumerate() {
                // one pass over the field's tokens counts every query term
                tf.fill(0);
                let mut len = 0usize;
                for tok in toks.group(fq.index) {
                    len += 1;
                    let tok = tok.as_bytes();
                    for (t, n) in tf.iter_mut().enumerate() {
                        let term = fq.terms.get(t).map(String::as_bytes).unwrap_or_default();
                        let hit = if self.prefix_last && t + 1 == n_terms {
                            tok.starts_with(term)
                        } else {
                            tok == term
                        };
                        *n += hit as u32;
                    }
                }
                let len = len as f64;
                let (total_len, with_field) = stats[fi];
                let avg = if with_field > 0 {
                    total_len as f64 / with_field as f64
                } else {
                    1.0
                };
                let b = if fq.ignore_length { 0.0 } else { B };
                let mut fs = 0.0;
                for (t, ct) in contained.iter_mut().enumerate() {
                    let tf = tf[t] as f64;
                    if tf > 0.0 {
                        if !*ct {
                            n_in += 1;
                        }
                        *ct = true;
                        fs += idf(df[fi][t]) * tf * (K1 + 1.0)
                            / (tf + K1 * (1.0 - b + b * len / avg.max(1e-9)));
                    }
                }
                score += fq.boost * fs;
            }
            if n_in == 0 {
                return None;
            }
            let m = if wsum > 0.0 {
                contained
                    .iter()
                    .zip(&weights)
                    .filter(|(c, _)| **c)
                    .map(|(_, w)| w)
                    .sum::<f64>()
                    / wsum
            } else {
                n_in as f64 / self.n_terms as f64
            };
            let exact = if self.require_all {
                n_in == self.n_terms
            } else {
                true
            };
            Some((doc, (exact, score, m)))
        };
        let docs: Vec<u32> = matched.iter().collect();
        self.prepared = docs
            .par_chunks(4096)
            .flat_map_iter(|part| part.iter().filter_map(|&d| score_doc(d)))
            .collect();
        self.max_score = self.prepared.values().map(|p| p.1).fold(0.0, f64::max);
        self.matched = matched;
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

    /// Grades against the best score among `docs` (the query's results once culling is
    /// known); membership never depends on it, since `g` >= 0.5.
    pub fn set_max_over(&mut self, docs: impl Iterator<Item = u32>) {
        self.max_score = docs
            .filter_map(|d| self.prepared.get(&d).map(|p| p.1))
            .fold(0.0, f64::max);
    }

    pub fn eval(&self, doc: u32, exact_rel: f64, fuzzy_rel: f64) -> (bool, f64) {
        let Some(&(exact, score, m)) = self.prepared.get(&doc) else {
            return (false, 0.0);
        };
        let g = if self.max_score > 0.0 {
            0.5 + 0.5 * (score / self.max_score).min(1.0)
        } else {
            1.0
        };
        if exact {
            (true, exact_rel * g)
        } else {
            (false, fuzzy_rel * m * g)
        }
    }
}
