//! Did-you-mean (SPEC §9): analyse the query like the dimension, find the uncertain
//! tokens, gather candidate corrections from the dimension's term dictionary, and
//! return the best whole-query combinations with highlighted labels.

use std::collections::HashSet;

use discern_dimensions::{Dimension, DimensionKind, Word};
use discern_index::terms::has_terms;
use discern_index::Snapshot;
use discern_model::{Error, Result};
use serde_json::{json, Map, Value as J};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Algorithm {
    Levenshtein,
    Damerau,
    JaroWinkler,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub max_suggestions: usize,
    pub algorithm: Algorithm,
    pub more_popular: bool,
    pub highlighting: bool,
    pub pre: String,
    pub post: String,
    pub escape_html: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_suggestions: 5,
            algorithm: Algorithm::Levenshtein,
            more_popular: false,
            highlighting: true,
            pre: "<b>".into(),
            post: "</b>".into(),
            escape_html: true,
        }
    }
}

/// Most suggestions a request may ask for: each costs a combination and a label.
const MAX_SUGGESTIONS: usize = 100;
/// Longest query analysed; longer ones are a 400 rather than a slow answer.
const MAX_QUERY_BYTES: usize = 4096;

fn param_str(v: &J) -> Option<String> {
    match v {
        J::String(s) => Some(s.clone()),
        J::Bool(b) => Some(b.to_string()),
        J::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn param_bool(name: &str, v: &J) -> Result<bool> {
    match param_str(v).as_deref() {
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        _ => Err(Error::bad(format!(
            "{name}: expected true or false, got {v}"
        ))),
    }
}

/// Reads the §9.1 parameters (query-string values as strings, JSON values as they come);
/// unknown parameters are ignored. Returns the query text when present.
pub fn parse_options(params: &Map<String, J>) -> Result<(Option<String>, Options)> {
    let mut o = Options::default();
    let mut query = None;
    for (k, v) in params {
        if v.is_null() {
            continue;
        }
        match k.as_str() {
            "query" => {
                let q = param_str(v)
                    .ok_or_else(|| Error::bad(format!("query: expected a string, got {v}")))?;
                if q.len() > MAX_QUERY_BYTES {
                    return Err(Error::bad(format!(
                        "query: {} bytes, at most {MAX_QUERY_BYTES}",
                        q.len()
                    )));
                }
                query = Some(q);
            }
            "maxSuggestions" => {
                let n = param_str(v)
                    .and_then(|s| s.trim().parse::<i64>().ok())
                    .ok_or_else(|| {
                        Error::bad(format!("maxSuggestions: expected an integer, got {v}"))
                    })?;
                if !(0..=MAX_SUGGESTIONS as i64).contains(&n) {
                    return Err(Error::bad(format!(
                        "maxSuggestions: {n} is outside 0..{MAX_SUGGESTIONS}"
                    )));
                }
                o.max_suggestions = n as usize;
            }
            "distanceAlgorithm" => {
                o.algorithm = match param_str(v).as_deref() {
                    Some("levenshtein") => Algorithm::Levenshtein,
                    Some("damerau") => Algorithm::Damerau,
                    Some("jaroWinkler") => Algorithm::JaroWinkler,
                    _ => {
                        return Err(Error::bad(format!(
                            "distanceAlgorithm: {v} is not levenshtein, damerau or jaroWinkler"
                        )))
                    }
                }
            }
            "morePopular" => o.more_popular = param_bool(k, v)?,
            "highlighting" => o.highlighting = param_bool(k, v)?,
            "escapeHtml" => o.escape_html = param_bool(k, v)?,
            "highlighting.preTemplate" => {
                o.pre = param_str(v).ok_or_else(|| Error::bad(format!("{k}: expected a string")))?
            }
            "highlighting.postTemplate" => {
                o.post =
                    param_str(v).ok_or_else(|| Error::bad(format!("{k}: expected a string")))?
            }
            _ => {}
        }
    }
    Ok((query, o))
}

/// Options from a query criterion's `didYouMean` member (`true` or an object).
pub fn options_from_member(v: &J, path: &str) -> Result<Option<Options>> {
    match v {
        J::Null | J::Bool(false) => Ok(None),
        J::Bool(true) => Ok(Some(Options::default())),
        J::Object(m) => {
            // nested `highlighting: {preTemplate, postTemplate}` is accepted too
            let mut flat = Map::new();
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("highlighting", J::Object(h)) => {
                        for (hk, hv) in h {
                            flat.insert(format!("highlighting.{hk}"), hv.clone());
                        }
                    }
                    _ => {
                        flat.insert(k.clone(), v.clone());
                    }
                }
            }
            parse_options(&flat)
                .map(|(_, o)| Some(o))
                .map_err(|e| Error::bad(format!("{path}: {e}")))
        }
        other => Err(Error::bad(format!(
            "{path}: expected true, false or an options object, got {other}"
        ))),
    }
}

/// Checks that `dim` supports did-you-mean; 404/400 otherwise.
pub fn dimension<'s>(snap: &'s Snapshot, id: &str) -> Result<(usize, &'s Dimension)> {
    let di = snap
        .dims
        .index_of(id)
        .ok_or_else(|| Error::NotFound(format!("no dimension {id:?}")))?;
    let d = &snap.dims.dims[di];
    if !has_terms(&d.kind) {
        return Err(Error::bad(format!(
            "dimension {id:?} is a {} dimension; did-you-mean works on text and keyword dimensions",
            d.kind.type_name()
        )));
    }
    Ok((di, d))
}

fn words(dim: &Dimension, text: &str) -> Vec<Word> {
    match &dim.kind {
        DimensionKind::Text(spec) => match spec.fields.first() {
            Some(f) => f.analyzer.words(text),
            None => Vec::new(),
        },
        _ => {
            if text.is_empty() {
                return Vec::new();
            }
            let term = if dim.ignore_case {
                text.to_lowercase()
            } else {
                text.to_string()
            };
            vec![Word {
                start: 0,
                end: text.len(),
                term: Some(term),
            }]
        }
    }
}

/// One choice for a token: keep it (`None`) or replace it; `key` orders choices (lower
/// is better) and adds up over a combination.
#[derive(Clone)]
struct Choice {
    replacement: Option<String>,
    key: (u32, u32),
}

fn candidates(
    dict: &discern_index::terms::TermDict,
    term: &str,
    uncertain: bool,
    o: &Options,
) -> Vec<Choice> {
    let own_df = dict.df(term);
    let max = if term.chars().count() <= 4 { 1 } else { 2 };
    let mut found: Vec<(String, u8, u32)> = dict
        .within(term, max, o.algorithm == Algorithm::Damerau)
        .into_iter()
        .filter(|(t, _, df)| t != term && (!o.more_popular || *df > own_df))
        .collect();
    match o.algorithm {
        Algorithm::JaroWinkler => {
            let sim = |t: &str| strsim::jaro_winkler(term, t);
            found.sort_by(|a, b| {
                sim(&b.0)
                    .total_cmp(&sim(&a.0))
                    .then(b.2.cmp(&a.2))
                    .then(a.0.cmp(&b.0))
            });
        }
        _ => found.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0))),
    }
    found.truncate(o.max_suggestions + 1);
    let mut out = Vec::with_capacity(found.len() + 1);
    if !uncertain {
        out.push(Choice {
            replacement: None,
            key: (0, 0),
        });
    }
    for (rank, (t, dist, _)) in found.into_iter().enumerate() {
        let primary = match o.algorithm {
            Algorithm::JaroWinkler => 0,
            _ => dist as u32,
        };
        out.push(Choice {
            replacement: Some(t),
            key: (primary, rank as u32 + 1),
        });
    }
    if out.is_empty() {
        // an uncertain token nothing is close to stays as it is
        out.push(Choice {
            replacement: None,
            key: (0, 0),
        });
    }
    out
}

fn escape(s: &str, o: &Options, out: &mut String) {
    if o.escape_html {
        crate::highlight::escape_html(s, out);
    } else {
        out.push_str(s);
    }
}

/// The text with some words replaced: (value, label with the `marked` words wrapped).
fn render(
    text: &str,
    words: &[Word],
    replacement: &[Option<&str>],
    marked: &[bool],
    o: &Options,
) -> (String, String) {
    let (mut value, mut label) = (String::new(), String::new());
    let mut pos = 0;
    for (i, w) in words.iter().enumerate() {
        let gap = &text[pos..w.start];
        value.push_str(gap);
        escape(gap, o, &mut label);
        let word = replacement[i].unwrap_or(&text[w.start..w.end]);
        value.push_str(word);
        let mark = marked[i] && o.highlighting;
        if mark {
            label.push_str(&o.pre);
        }
        escape(word, o, &mut label);
        if mark {
            label.push_str(&o.post);
        }
        pos = w.end;
    }
    value.push_str(&text[pos..]);
    escape(&text[pos..], o, &mut label);
    (value, label)
}

/// The §9.1 response for `query` on dimension `di`.
pub fn suggest(snap: &Snapshot, di: usize, query: &str, o: &Options) -> J {
    let dim = &snap.dims.dims[di];
    let all = words(dim, query);
    // stop words are not tokens
    let words: Vec<Word> = all.into_iter().filter(|w| w.term.is_some()).collect();
    let dict = snap.term_dict(di);
    let df = |t: &str| dict.map(|d| d.df(t)).unwrap_or(0);
    let uncertain: Vec<bool> = words
        .iter()
        .map(|w| df(w.term.as_deref().unwrap_or("")) == 0)
        .collect();
    let choices: Vec<Vec<Choice>> = words
        .iter()
        .zip(&uncertain)
        .map(|(w, &u)| match (dict, u || o.more_popular) {
            (Some(d), true) => candidates(d, w.term.as_deref().unwrap_or(""), u, o),
            _ => vec![Choice {
                replacement: None,
                key: (0, 0),
            }],
        })
        .collect();

    // Best combinations by summed keys: keeping the best `width` partial combinations
    // after each token is exact for additive keys.
    let width = o.max_suggestions + 1;
    let mut beam: Vec<((u32, u32), Vec<usize>)> = vec![((0, 0), Vec::new())];
    for opts in &choices {
        let mut next = Vec::with_capacity(beam.len() * opts.len());
        for (key, picks) in &beam {
            for (ci, c) in opts.iter().enumerate() {
                let mut p = picks.clone();
                p.push(ci);
                next.push(((key.0 + c.key.0, key.1 + c.key.1), p));
            }
        }
        next.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        next.truncate(width);
        beam = next;
    }
    let kept = vec![None; words.len()];
    let (qv, ql) = render(query, &words, &kept, &uncertain, o);
    let mut seen: HashSet<String> = HashSet::new();
    let mut suggestions = Vec::new();
    for (_, picks) in beam {
        if suggestions.len() >= o.max_suggestions {
            break;
        }
        let repl: Vec<Option<&str>> = picks
            .iter()
            .enumerate()
            .map(|(i, &ci)| choices[i][ci].replacement.as_deref())
            .collect();
        if repl.iter().all(Option::is_none) {
            continue; // never the query itself
        }
        let marked: Vec<bool> = repl.iter().map(Option::is_some).collect();
        let (v, l) = render(query, &words, &repl, &marked, o);
        if v == query || !seen.insert(v.clone()) {
            continue;
        }
        suggestions.push(json!({"value": v, "label": l}));
    }
    json!({
        "tokenCount": words.len(),
        "uncertainCount": uncertain.iter().filter(|u| **u).count(),
        "query": {"value": qv, "label": ql},
        "suggestions": suggestions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use discern_dimensions::Dimensions;
    use discern_index::IndexWriter;
    use discern_model::{Record, Value};
    use std::sync::Arc;

    fn snap(texts: &[&str]) -> Snapshot {
        let dims = Dimensions::parse(
            b"<dimensions><dimension id='d' type='text' stopWords=''/><dimension id='k' type='keyword' ignoreCase='true'/></dimensions>",
        )
        .unwrap();
        let s0 = Snapshot::empty(Arc::new(dims));
        let mut w = IndexWriter::new();
        let mut b = w.begin(&s0);
        for (i, t) in texts.iter().enumerate() {
            b.upsert(
                &format!("i{i}"),
                &Record(vec![
                    ("d".into(), Value::Str(t.to_string())),
                    ("k".into(), Value::Str(t.to_string())),
                ]),
            );
        }
        b.commit()
    }

    fn values(j: &J) -> Vec<String> {
        j["suggestions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["value"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_spec_example() {
        let s = snap(&["chicken soup", "chicken noodle soup", "soup kitchen"]);
        let r = suggest(&s, 0, "chiken soup", &Options::default());
        assert_eq!(
            r,
            json!({"tokenCount": 2, "uncertainCount": 1,
                   "query": {"value": "chiken soup", "label": "<b>chiken</b> soup"},
                   "suggestions": [{"value": "chicken soup", "label": "<b>chicken</b> soup"}]})
        );
    }

    #[test]
    fn two_uncertain_tokens_combine_best_first() {
        let s = snap(&["chicken soup", "chicken soap", "noodle"]);
        let r = suggest(&s, 0, "chiken soupp", &Options::default());
        assert_eq!(r["uncertainCount"], 2);
        assert_eq!(values(&r)[0], "chicken soup");
        assert!(values(&r).contains(&"chicken soap".to_string()));
    }

    #[test]
    fn keyword_whole_value_is_one_token() {
        let s = snap(&["Condo", "Loft"]);
        let r = suggest(&s, 1, "CNDO", &Options::default());
        assert_eq!(values(&r), ["condo"]);
        assert_eq!(r["tokenCount"], 1);
    }

    #[test]
    fn deleted_items_leave_the_dictionary() {
        let dims =
            Dimensions::parse(b"<dimensions><dimension id='d' type='text'/></dimensions>").unwrap();
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(Arc::new(dims)));
        let rec = |t: &str| Record(vec![("d".into(), Value::Str(t.into()))]);
        b.upsert("a", &rec("chicken"));
        b.upsert("b", &rec("chicken kitchen"));
        let s1 = b.commit();
        assert_eq!(
            values(&suggest(&s1, 0, "chickn", &Options::default())),
            ["chicken"]
        );
        let mut b = w.begin(&s1);
        b.delete("a");
        b.upsert("b", &rec("kitchen"));
        let s2 = b.commit();
        assert!(values(&suggest(&s2, 0, "chickn", &Options::default())).is_empty());
        assert_eq!(s2.term_dict(0).unwrap().df("kitchen"), 1);
    }

    proptest::proptest! {
        /// Never the query itself, never duplicates, at most maxSuggestions.
        #[test]
        fn suggestions_are_distinct_and_bounded(q in "[a-e ]{0,12}", max in 0usize..4) {
            let s = snap(&["abc abd", "bcd cde", "ace", "bad dab"]);
            let o = Options { max_suggestions: max, ..Options::default() };
            let r = suggest(&s, 0, &q, &o);
            let v = values(&r);
            proptest::prop_assert!(v.len() <= max);
            let set: HashSet<_> = v.iter().collect();
            proptest::prop_assert_eq!(set.len(), v.len());
            proptest::prop_assert!(!v.contains(&q));
        }
    }
}
