//! Query and export requests (SPEC §7.1, §8): JSON → validated, typed requests. Every
//! error names the member it is about.

use std::collections::HashSet;

use discern_dimensions::Dimensions;
use discern_model::{Error, Result};
use serde_json::{Map, Value as J};

use crate::criteria::{parse_criteria, Criterion};
use crate::facets::{parse_drill_down, parse_facets, DrillDown, FacetRequest};
use crate::sort::{parse_sort, SortKey};

pub struct Query {
    pub criteria: Vec<Criterion>,
    pub start: usize,
    pub page_size: usize,
    pub items: Option<HashSet<String>>,
    pub not_items: HashSet<String>,
    pub exact_only: bool,
    /// `Some(empty)` = whole records.
    pub properties: Option<Vec<String>>,
    pub values: Vec<String>,
    pub render_parameters: bool,
    pub sort: Vec<SortKey>,
    pub facets: Vec<FacetRequest>,
    pub drill_down: Option<Vec<DrillDown>>,
    pub group_by: Option<GroupBy>,
    pub highlighting: Option<Highlighting>,
    pub explain: Option<Explain>,
    /// `indexValues`: dimension indices.
    pub index_values: Vec<usize>,
}

/// `groupBy` (SPEC §7.7).
pub struct GroupBy {
    pub dim: usize,
    pub top_n: usize,
    pub properties: Option<Vec<String>>,
    pub groups: Option<HashSet<String>>,
    pub not_groups: HashSet<String>,
}

/// `highlighting` (SPEC §7.8).
pub struct Highlighting {
    pub pre: String,
    pub post: String,
    pub include: Option<Vec<String>>,
    pub exclude: Vec<String>,
    pub merge_properties: bool,
}

#[derive(Clone, Copy, PartialEq)]
pub enum Explain {
    CriterionValue,
    TextTokens,
}

pub struct ExportRequest {
    pub criteria: Vec<Criterion>,
    pub scores: bool,
    pub sources: bool,
    pub exact_only: bool,
    pub values: Vec<String>,
}

pub(crate) fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::BadRequest(format!("{path}: {msg}"))
}

/// A member, with JSON `null` meaning absent.
pub(crate) fn member<'a>(obj: &'a Map<String, J>, name: &str) -> Option<&'a J> {
    obj.get(name).filter(|v| !v.is_null())
}

pub(crate) fn as_f64(v: &J, path: &str) -> Result<f64> {
    match v {
        J::Number(n) => n.as_f64().ok_or_else(|| bad(path, "not a number")),
        J::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| bad(path, format!("{s:?} is not a number"))),
        other => Err(bad(path, format!("expected a number, got {other}"))),
    }
}

pub(crate) fn as_usize(v: &J, path: &str) -> Result<usize> {
    let x = as_f64(v, path)?;
    if x < 0.0 || x.fract() != 0.0 || x > 1e15 {
        return Err(bad(
            path,
            format!("expected a non-negative integer, got {v}"),
        ));
    }
    Ok(x as usize)
}

pub(crate) fn as_bool(v: &J, path: &str) -> Result<bool> {
    match v {
        J::Bool(b) => Ok(*b),
        J::String(s) if s == "true" => Ok(true),
        J::String(s) if s == "false" => Ok(false),
        other => Err(bad(path, format!("expected true or false, got {other}"))),
    }
}

/// Member `name` of `obj` as a boolean (`path` names the object in an error);
/// `default` when absent or null.
pub(crate) fn flag(obj: &Map<String, J>, name: &str, path: &str, default: bool) -> Result<bool> {
    member(obj, name)
        .map(|v| as_bool(v, &format!("{path}.{name}")))
        .transpose()
        .map(|b| b.unwrap_or(default))
}

/// Member `name` of `obj`, a string naming one of two ways (`off`, `on`), as whether it
/// names `on`; `off` when absent or null, a 400 naming the member for any other word.
pub(crate) fn switch(
    obj: &Map<String, J>,
    name: &str,
    path: &str,
    (off, on): (&str, &str),
) -> Result<bool> {
    let at = format!("{path}.{name}");
    match member(obj, name) {
        None => Ok(false),
        Some(v) => match as_str(v, &at)? {
            w if w == off => Ok(false),
            w if w == on => Ok(true),
            other => Err(bad(&at, format!("{other:?} is not {off} or {on}"))),
        },
    }
}

/// A value as text: a string as it is, anything else (a number, say) as its JSON.
pub(crate) fn text_of(v: &J) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

pub(crate) fn as_str<'a>(v: &'a J, path: &str) -> Result<&'a str> {
    v.as_str()
        .ok_or_else(|| bad(path, format!("expected a string, got {v}")))
}

fn string_list(v: &J, path: &str) -> Result<Vec<String>> {
    match v {
        J::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| match x {
                J::String(s) => Ok(s.clone()),
                J::Number(n) => Ok(n.to_string()),
                other => Err(bad(
                    &format!("{path}[{i}]"),
                    format!("expected a string, got {other}"),
                )),
            })
            .collect(),
        other => Err(bad(
            path,
            format!("expected an array of strings, got {other}"),
        )),
    }
}

fn dimension_list(v: &J, path: &str, dims: &Dimensions) -> Result<Vec<String>> {
    let list = string_list(v, path)?;
    for (i, d) in list.iter().enumerate() {
        if dims.get(d).is_none() {
            return Err(bad(
                &format!("{path}[{i}]"),
                format!("unknown dimension {d:?}"),
            ));
        }
    }
    Ok(list)
}

fn root_object(body: &J) -> Result<&Map<String, J>> {
    body.as_object().ok_or_else(|| {
        Error::bad(format!(
            "the request must be a JSON object, got {}",
            kind(body)
        ))
    })
}

fn kind(v: &J) -> &'static str {
    match v {
        J::Null => "null",
        J::Bool(_) => "a boolean",
        J::Number(_) => "a number",
        J::String(_) => "a string",
        J::Array(_) => "an array",
        J::Object(_) => "an object",
    }
}

pub fn parse_query(body: &J, dims: &Dimensions, max_paged_docs: usize) -> Result<Query> {
    let obj = root_object(body)?;
    let criteria = match member(obj, "criteria") {
        Some(c) => parse_criteria(c, "criteria", dims, 0)?,
        None => Vec::new(),
    };
    let start = member(obj, "startIndex")
        .map(|v| as_usize(v, "startIndex"))
        .transpose()?
        .unwrap_or(0);
    let page_size = member(obj, "pageSize")
        .map(|v| as_usize(v, "pageSize"))
        .transpose()?
        .unwrap_or(0);
    if start.saturating_add(page_size) > max_paged_docs {
        return Err(Error::bad(format!(
            "startIndex + pageSize = {} is beyond max-paged-docs ({max_paged_docs}); use /ws/export for bulk reads",
            start.saturating_add(page_size)
        )));
    }
    let items = member(obj, "items")
        .map(|v| string_list(v, "items"))
        .transpose()?
        .map(|l| l.into_iter().collect());
    let not_items = member(obj, "notItems")
        .map(|v| string_list(v, "notItems"))
        .transpose()?
        .unwrap_or_default()
        .into_iter()
        .collect();
    let exact_only = member(obj, "exactMatchesOnly")
        .map(|v| as_bool(v, "exactMatchesOnly"))
        .transpose()?
        .unwrap_or(false);
    let properties = member(obj, "properties")
        .map(|v| string_list(v, "properties"))
        .transpose()?;
    let values = member(obj, "values")
        .map(|v| dimension_list(v, "values", dims))
        .transpose()?
        .unwrap_or_default();
    let render_parameters = member(obj, "renderParameters")
        .map(|v| as_bool(v, "renderParameters"))
        .transpose()?
        .unwrap_or(false);
    let sort = member(obj, "sortBy")
        .map(|v| parse_sort(v, dims))
        .transpose()?
        .unwrap_or_default();
    let facets = member(obj, "facets")
        .map(|v| parse_facets(v, dims))
        .transpose()?
        .unwrap_or_default();
    let drill_down = member(obj, "drillDown")
        .map(|v| parse_drill_down(v, dims))
        .transpose()?;
    let group_by = member(obj, "groupBy")
        .map(|v| parse_group_by(v, dims))
        .transpose()?;
    let highlighting = member(obj, "highlighting")
        .map(parse_highlighting)
        .transpose()?;
    let explain = match member(obj, "explain") {
        None => None,
        Some(v) => match as_str(v, "explain")? {
            "criterionValue" => Some(Explain::CriterionValue),
            "textTokens" => Some(Explain::TextTokens),
            other => {
                return Err(bad(
                    "explain",
                    format!("{other:?} is not criterionValue or textTokens"),
                ))
            }
        },
    };
    let index_values = match member(obj, "indexValues") {
        None => Vec::new(),
        Some(J::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let p = format!("indexValues[{i}].dimension");
                let d = x.get("dimension").ok_or_else(|| bad(&p, "required"))?;
                let id = as_str(d, &p)?;
                dims.index_of(id)
                    .ok_or_else(|| bad(&p, format!("unknown dimension {id:?}")))
            })
            .collect::<Result<Vec<_>>>()?,
        Some(other) => {
            return Err(bad(
                "indexValues",
                format!("expected an array, got {other}"),
            ))
        }
    };
    Ok(Query {
        group_by,
        highlighting,
        explain,
        index_values,
        facets,
        drill_down,
        sort,
        criteria,
        start,
        page_size,
        items,
        not_items,
        exact_only,
        properties,
        values,
        render_parameters,
    })
}

fn parse_group_by(v: &J, dims: &Dimensions) -> Result<GroupBy> {
    let J::Object(o) = v else {
        return Err(bad("groupBy", format!("expected an object, got {v}")));
    };
    let id = as_str(
        member(o, "dimension").ok_or_else(|| bad("groupBy.dimension", "required"))?,
        "groupBy.dimension",
    )?;
    let dim = dims
        .index_of(id)
        .ok_or_else(|| bad("groupBy.dimension", format!("unknown dimension {id:?}")))?;
    Ok(GroupBy {
        dim,
        top_n: member(o, "topN")
            .map(|v| as_usize(v, "groupBy.topN"))
            .transpose()?
            .unwrap_or(1)
            .max(1),
        properties: member(o, "properties")
            .map(|v| string_list(v, "groupBy.properties"))
            .transpose()?,
        groups: member(o, "groups")
            .map(|v| string_list(v, "groupBy.groups"))
            .transpose()?
            .map(|l| l.into_iter().collect()),
        not_groups: member(o, "notGroups")
            .map(|v| string_list(v, "groupBy.notGroups"))
            .transpose()?
            .unwrap_or_default()
            .into_iter()
            .collect(),
    })
}

fn parse_highlighting(v: &J) -> Result<Highlighting> {
    let J::Object(o) = v else {
        return Err(bad("highlighting", format!("expected an object, got {v}")));
    };
    let (pre, post) = match member(o, "template") {
        None => ("<b>".to_string(), "</b>".to_string()),
        Some(J::Array(a)) if a.len() == 2 => (
            as_str(&a[0], "highlighting.template[0]")?.to_string(),
            as_str(&a[1], "highlighting.template[1]")?.to_string(),
        ),
        Some(other) => {
            return Err(bad(
                "highlighting.template",
                format!("expected [pre, post], got {other}"),
            ))
        }
    };
    let merge_properties = match member(o, "merge") {
        None => false,
        Some(m) => match as_str(m, "highlighting.merge")? {
            "properties" => true,
            other => {
                return Err(bad(
                    "highlighting.merge",
                    format!("{other:?} is not \"properties\""),
                ))
            }
        },
    };
    Ok(Highlighting {
        pre,
        post,
        include: member(o, "includeDimensions")
            .map(|v| string_list(v, "highlighting.includeDimensions"))
            .transpose()?,
        exclude: member(o, "excludeDimensions")
            .map(|v| string_list(v, "highlighting.excludeDimensions"))
            .transpose()?
            .unwrap_or_default(),
        merge_properties,
    })
}

pub fn parse_export(body: &J, dims: &Dimensions) -> Result<ExportRequest> {
    let obj = root_object(body)?;
    Ok(ExportRequest {
        criteria: match member(obj, "criteria") {
            Some(c) => parse_criteria(c, "criteria", dims, 0)?,
            None => Vec::new(),
        },
        scores: member(obj, "scores")
            .map(|v| as_bool(v, "scores"))
            .transpose()?
            .unwrap_or(false),
        sources: member(obj, "sources")
            .map(|v| as_bool(v, "sources"))
            .transpose()?
            .unwrap_or(false),
        exact_only: member(obj, "exactMatchesOnly")
            .map(|v| as_bool(v, "exactMatchesOnly"))
            .transpose()?
            .unwrap_or(false),
        values: member(obj, "values")
            .map(|v| dimension_list(v, "values", dims))
            .transpose()?
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Members that take text take a number (or anything else) as its JSON: a ZIP code
    /// or a bucket id sent as a number reads as the string a client would have sent.
    #[test]
    fn text_of_keeps_strings_and_writes_the_rest_as_json() {
        assert_eq!(text_of(&J::from("10001")), "10001");
        assert_eq!(text_of(&J::from(" a \"b\" ")), " a \"b\" ");
        assert_eq!(text_of(&serde_json::json!(10001)), "10001");
        assert_eq!(text_of(&serde_json::json!(2.5)), "2.5");
        assert_eq!(text_of(&serde_json::json!(true)), "true");
        assert_eq!(text_of(&serde_json::json!(["x"])), "[\"x\"]");
    }

    fn obj(v: J) -> Map<String, J> {
        match v {
            J::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    /// A boolean member: its value, the default when absent or null, a 400 naming the
    /// member otherwise.
    #[test]
    fn flag_reads_a_boolean_member_or_its_default() {
        let o = obj(serde_json::json!({"a": true, "b": null, "c": "no"}));
        assert!(flag(&o, "a", "x", false).unwrap());
        assert!(flag(&o, "b", "x", true).unwrap());
        assert!(!flag(&o, "missing", "x", false).unwrap());
        let e = flag(&o, "c", "facets.f", false).unwrap_err().to_string();
        assert!(e.contains("facets.f.c"), "{e}");
    }

    /// A two-way switch: the second word is `true`, the first (or none) `false`, any
    /// other word a 400 naming the member and both words.
    #[test]
    fn switch_takes_one_of_two_words() {
        let o = obj(serde_json::json!({"s": "all", "t": "any", "u": "most", "v": 3}));
        let sw = |name| switch(&o, name, "criteria[0]", ("any", "all"));
        assert!(sw("s").unwrap());
        assert!(!sw("t").unwrap());
        assert!(!sw("missing").unwrap());
        let e = sw("u").unwrap_err().to_string();
        assert!(
            e.contains("criteria[0].u") && e.contains("\"most\" is not any or all"),
            "{e}"
        );
        assert!(sw("v").is_err());
    }
}
