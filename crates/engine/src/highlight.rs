//! Highlighting (SPEC §7.8): query terms wrapped in the template inside the properties
//! that feed the text dimensions a query names; everything else HTML-escaped.

use discern_dimensions::analysis::Tokenizer;
use discern_dimensions::{Analyzer, DimensionKind, Dimensions};
use discern_index::Highlighting;
use discern_model::{Record, Value};
use serde_json::{Map, Value as J};

/// Escapes text for HTML content and attribute values (highlighted text, did-you-mean
/// labels).
pub fn escape_html(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
}

/// Marks the words of `text` whose analysed form is a query term; `None` if none is.
fn mark(text: &str, analyzer: &Analyzer, terms: &[String], hl: &Highlighting) -> Option<String> {
    let is_word = |c: char| {
        if analyzer.tokenizer == Tokenizer::Whitespace {
            !c.is_whitespace()
        } else {
            c.is_alphanumeric() || c == '\''
        }
    };
    let mut out = String::with_capacity(text.len() + 16);
    let mut matched = false;
    let mut rest = text;
    while !rest.is_empty() {
        let start = rest.find(is_word).unwrap_or(rest.len());
        escape_html(&rest[..start], &mut out);
        rest = &rest[start..];
        if rest.is_empty() {
            break;
        }
        let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        let word = &rest[..end];
        if analyzer.tokens(word).iter().any(|t| terms.contains(t)) {
            matched = true;
            out.push_str(&hl.pre);
            escape_html(word, &mut out);
            out.push_str(&hl.post);
        } else {
            escape_html(word, &mut out);
        }
        rest = &rest[end..];
    }
    matched.then_some(out)
}

/// `highlighting[i]` for one record: property → marked string (or array).
pub fn highlight(
    dims: &Dimensions,
    terms: &[(usize, usize, Vec<String>)],
    hl: &Highlighting,
    rec: &Record,
) -> Map<String, J> {
    let mut out = Map::new();
    for (di, fi, qterms) in terms {
        let dim = &dims.dims[*di];
        if hl.exclude.contains(&dim.id)
            || hl
                .include
                .as_ref()
                .is_some_and(|inc| !inc.contains(&dim.id))
        {
            continue;
        }
        let DimensionKind::Text(spec) = &dim.kind else {
            continue;
        };
        let Some(field) = spec.fields.get(*fi) else {
            continue;
        };
        for key in &field.keys {
            let Some(v) = rec.get(key) else { continue };
            let marked = match v {
                Value::Array(items) => {
                    let texts: Vec<String> = items
                        .iter()
                        .filter_map(|x| x.scalar_text().map(|t| t.into_owned()))
                        .collect();
                    let marks: Vec<Option<String>> = texts
                        .iter()
                        .map(|t| mark(t, &field.analyzer, qterms, hl))
                        .collect();
                    if marks.iter().any(Option::is_some) {
                        let all = texts
                            .iter()
                            .zip(marks)
                            .map(|(t, m)| {
                                J::String(m.unwrap_or_else(|| {
                                    let mut e = String::new();
                                    escape_html(t, &mut e);
                                    e
                                }))
                            })
                            .collect();
                        Some(J::Array(all))
                    } else {
                        None
                    }
                }
                other => other
                    .scalar_text()
                    .and_then(|t| mark(&t, &field.analyzer, qterms, hl))
                    .map(J::String),
            };
            if let Some(m) = marked {
                out.insert(key.clone(), m);
            }
        }
    }
    out
}
