//! A text criterion as a request gives it (SPEC §7.2 text): the words (analysed as the
//! dimension's fields analyse theirs), `fields` and `fieldBoosts`, `exactRequires`,
//! `searchStyle` and the per-criterion switches, each member checked.

use discern_dimensions::TextSpec;
use discern_model::Result;
use roaring::RoaringBitmap;
use serde_json::{Map, Value as J};

use super::{FieldQuery, Graded, TextMatcher};
use crate::query::{as_bool, as_f64, bad, flag, member, switch, text_of};

impl TextMatcher {
    pub fn parse(obj: &Map<String, J>, path: &str, spec: &TextSpec) -> Result<Option<TextMatcher>> {
        let p = |n: &str| format!("{path}.{n}");
        let Some(value) = member(obj, "value") else {
            return Ok(None);
        };
        let text = match value {
            J::Array(a) => a.iter().map(text_of).collect::<Vec<_>>().join(" "),
            other => text_of(other),
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
        let ignore_idf = flag(obj, "ignoreInverseDocumentFrequency", path, false)?;
        let require_all = switch(obj, "exactRequires", path, ("any", "all"))?;
        let prefix_last = switch(obj, "searchStyle", path, ("words", "startsWith"))?;
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
            rank: Graded::default(),
            scored: Vec::new(),
            max_score: 0.0,
            matched: RoaringBitmap::new(),
        }))
    }
}
