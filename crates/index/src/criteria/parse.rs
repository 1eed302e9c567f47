//! Criteria as a request gives them (SPEC §7.2) parsed into typed matchers: every member
//! checked, a 400 naming the one that is wrong; defaults and each dimension type's
//! forms resolved here, so that evaluation (`criteria/mod.rs`) meets only valid ones.

use std::collections::HashSet;

use discern_dimensions::{DimensionKind, Dimensions, Interval, NumericSpec};
use discern_model::Result;
use serde_json::{Map, Value as J};

use super::{element_rules, Criterion, Leaf, Matcher, Node, MAX_GROUP_DEPTH};
use crate::geo::{GeoRef, Unit};
use crate::query::{as_f64, as_str, bad, flag, member};
use crate::text::TextMatcher;

pub(crate) fn parse_criteria(
    v: &J,
    path: &str,
    dims: &Dimensions,
    depth: usize,
) -> Result<Vec<Criterion>> {
    let J::Array(items) = v else {
        return Err(bad(path, format!("expected an array of criteria, got {v}")));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, c)| parse_criterion(c, &format!("{path}[{i}]"), dims, depth))
        .collect()
}

fn unit_f64(obj: &Map<String, J>, name: &str, path: &str, default: f64) -> Result<f64> {
    match member(obj, name) {
        None => Ok(default),
        Some(v) => {
            let x = as_f64(v, &format!("{path}.{name}"))?;
            if !(0.0..=1.0).contains(&x) {
                return Err(bad(
                    &format!("{path}.{name}"),
                    format!("{x} is not in [0, 1]"),
                ));
            }
            Ok(x)
        }
    }
}

/// A string or an array of strings/numbers as strings.
fn strings(v: Option<&J>, path: &str) -> Result<Vec<String>> {
    let one = |x: &J, p: &str| -> Result<String> {
        match x {
            J::String(s) => Ok(s.clone()),
            J::Number(n) => Ok(n.to_string()),
            J::Bool(b) => Ok(b.to_string()),
            other => Err(bad(p, format!("expected a string, got {other}"))),
        }
    };
    match v {
        None => Ok(Vec::new()),
        Some(J::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| one(x, &format!("{path}[{i}]")))
            .collect(),
        Some(x) => Ok(vec![one(x, path)?]),
    }
}

fn parse_criterion(v: &J, path: &str, dims: &Dimensions, depth: usize) -> Result<Criterion> {
    let J::Object(obj) = v else {
        return Err(bad(path, format!("expected a criterion object, got {v}")));
    };
    let weight = match member(obj, "weight") {
        Some(w) => {
            let x = as_f64(w, &format!("{path}.weight"))?;
            if x < 0.0 {
                return Err(bad(&format!("{path}.weight"), format!("{x} is negative")));
            }
            x
        }
        None => 1.0,
    };
    let cull = flag(obj, "cull", path, false)?;
    let exact_match = flag(obj, "exactMatch", path, false)?;
    let node = if member(obj, "dimension").is_none()
        && (member(obj, "criteria").is_some() || member(obj, "operator").is_some())
    {
        if depth >= MAX_GROUP_DEPTH {
            return Err(bad(
                path,
                format!("criteria groups nested deeper than {MAX_GROUP_DEPTH}"),
            ));
        }
        let or = match member(obj, "operator") {
            None => false,
            Some(op) => match as_str(op, &format!("{path}.operator"))?
                .to_ascii_lowercase()
                .as_str()
            {
                "and" => false,
                "or" => true,
                other => {
                    return Err(bad(
                        &format!("{path}.operator"),
                        format!("unknown operator {other:?} (and, or)"),
                    ))
                }
            },
        };
        let children = match member(obj, "criteria") {
            Some(c) => parse_criteria(c, &format!("{path}.criteria"), dims, depth + 1)?,
            None => Vec::new(),
        };
        Node::Group { or, children }
    } else {
        Node::Leaf(parse_leaf(obj, path, dims)?)
    };
    Ok(Criterion {
        weight,
        cull,
        exact_match,
        node,
    })
}

fn parse_leaf(obj: &Map<String, J>, path: &str, dims: &Dimensions) -> Result<Leaf> {
    let dim_id = match member(obj, "dimension") {
        Some(d) => as_str(d, &format!("{path}.dimension"))?,
        None => {
            return Err(bad(
                path,
                "a criterion needs a dimension (or operator/criteria for a group)",
            ))
        }
    };
    let mut leaf = Leaf {
        dim: None,
        null_exact: flag(obj, "nullExactMatch", path, false)?,
        exact_rel: unit_f64(obj, "exactRelevance", path, 1.0)?,
        fuzzy_rel: unit_f64(obj, "fuzzyRelevance", path, 1.0)?,
        null_rel: unit_f64(obj, "nullRelevance", path, 0.0)?,
        matcher: Matcher::Has,
    };
    if dim_id.is_empty() {
        return Ok(leaf);
    }
    let Some(di) = dims.index_of(dim_id) else {
        return Err(bad(
            &format!("{path}.dimension"),
            format!("unknown dimension {dim_id:?}"),
        ));
    };
    leaf.dim = Some(di);
    let dim = &dims.dims[di];
    let p = |name: &str| format!("{path}.{name}");
    leaf.matcher = match &dim.kind {
        DimensionKind::Keyword | DimensionKind::GroupBy => {
            let fold = |s: String| if dim.ignore_case { s.to_lowercase() } else { s };
            let values: HashSet<String> = strings(member(obj, "value"), &p("value"))?
                .into_iter()
                .map(fold)
                .collect();
            let not: HashSet<String> = strings(member(obj, "notValue"), &p("notValue"))?
                .into_iter()
                .map(fold)
                .collect();
            if values.is_empty() && not.is_empty() {
                Matcher::Has
            } else {
                Matcher::Keyword {
                    values,
                    not,
                    docs: None,
                }
            }
        }
        DimensionKind::Tree(set) | DimensionKind::Ordered(set) | DimensionKind::Mutex(set) => {
            let tree = matches!(dim.kind, DimensionKind::Tree(_));
            let by_ids = |name: &str| -> Result<Vec<u32>> {
                Ok(strings(member(obj, name), &p(name))?
                    .iter()
                    .filter_map(|id| set.by_id.get(id).copied())
                    .collect())
            };
            let by_values = |name: &str| -> Result<Vec<u32>> {
                let mut out = Vec::new();
                for v in strings(member(obj, name), &p(name))? {
                    let key = if dim.ignore_case { v.to_lowercase() } else { v };
                    out.extend(set.by_value.get(&key).into_iter().flatten().copied());
                }
                Ok(out)
            };
            let mut wanted = by_ids("id")?;
            wanted.extend(by_values("value")?);
            let isolated = if tree {
                by_ids("isolatedId")?
            } else {
                Vec::new()
            };
            let mut not = by_ids("notId")?;
            not.extend(by_values("notValue")?);
            let asked = |names: &[&str]| names.iter().any(|m| member(obj, m).is_some());
            let positive = asked(&["id", "value", "isolatedId"]);
            if !positive && !asked(&["notId", "notValue"]) {
                Matcher::Has
            } else {
                let ordered = matches!(dim.kind, DimensionKind::Ordered(_));
                Matcher::Elements {
                    table: element_rules(
                        set,
                        (tree, ordered),
                        leaf.fuzzy_rel > 0.0,
                        &wanted,
                        &isolated,
                        &not,
                    ),
                    set: set.clone(),
                    tree,
                    ordered,
                    wanted,
                    isolated,
                    not,
                    only_not: !positive,
                }
            }
        }
        DimensionKind::Numeric(spec) => parse_numeric(obj, path, spec)?,
        DimensionKind::Geo(_) => {
            let unit = match member(obj, "distanceUnit") {
                None => Unit::Miles,
                Some(u) => Unit::parse(as_str(u, &p("distanceUnit"))?)
                    .ok_or_else(|| bad(&p("distanceUnit"), "expected miles or km"))?,
            };
            let Some(reference) = GeoRef::parse(obj, path)? else {
                return Ok(leaf);
            };
            let num = |name: &str| member(obj, name).map(|v| as_f64(v, &p(name))).transpose();
            let exact =
                num("exactDistance")?.unwrap_or(if reference.is_area() { 0.0 } else { 1.0 });
            let normal = num("normalDistance")?.unwrap_or(25.0);
            if normal <= 0.0 {
                return Err(bad(&p("normalDistance"), "must be greater than 0"));
            }
            let iso = num("isoRelevanceDistance")?.filter(|x| *x > 0.0);
            Matcher::Geo {
                pre: reference.geo_points(),
                bands: reference.lat_bands(),
                reference,
                exact,
                cull: num("cullDistance")?,
                normal,
                iso,
                unit,
            }
        }
        DimensionKind::Text(spec) => match TextMatcher::parse(obj, path, spec)? {
            Some(t) => Matcher::Text(Box::new(t)),
            None => Matcher::Has,
        },
    };
    Ok(leaf)
}

fn parse_numeric(obj: &Map<String, J>, path: &str, spec: &NumericSpec) -> Result<Matcher> {
    let p = |name: &str| format!("{path}.{name}");
    let scalar = |v: &J, name: &str| -> Result<f64> {
        match v {
            J::Number(n) => n.as_f64().ok_or_else(|| bad(&p(name), "not a number")),
            J::String(s) => spec
                .parse_value(s)
                .ok_or_else(|| bad(&p(name), format!("{s:?} is not a value of this dimension"))),
            other => Err(bad(
                &p(name),
                format!("expected a number or string, got {other}"),
            )),
        }
    };
    let min = member(obj, "min").map(|v| scalar(v, "min")).transpose()?;
    let max = member(obj, "max").map(|v| scalar(v, "max")).transpose()?;
    let min_incl = flag(obj, "minInclusive", path, true)?;
    let max_incl = flag(obj, "maxInclusive", path, true)?;
    let value = match member(obj, "value") {
        None => None,
        Some(J::String(s)) if Interval::looks_like(s) => Some(
            Interval::parse_with(s, |x| spec.parse_value(x)).map_err(|e| bad(&p("value"), e))?,
        ),
        Some(v) => Some(Interval::point(scalar(v, "value")?)),
    };
    let bounds = Interval {
        lo: min,
        lo_incl: min_incl,
        hi: max,
        hi_incl: max_incl,
    };
    let set = match value {
        None if min.is_none() && max.is_none() => None,
        None => Some(bounds),
        Some(iv) if iv.lo == iv.hi && iv.lo.is_some() && iv.lo_incl && iv.hi_incl => {
            let mut v = iv.lo.unwrap_or(0.0);
            if let Some(lo) = min {
                v = v.max(lo);
            }
            if let Some(hi) = max {
                v = v.min(hi);
            }
            Some(Interval::point(v))
        }
        Some(iv) => Some(intersect(iv, bounds)),
    };
    let scale = match member(obj, "normalDistance") {
        Some(v) => {
            let s = as_f64(v, &p("normalDistance"))?;
            if s <= 0.0 {
                return Err(bad(&p("normalDistance"), "must be greater than 0"));
            }
            s
        }
        None => 0.0, // filled from the dimension's span at evaluation
    };
    Ok(match set {
        None => Matcher::Has,
        Some(set) => Matcher::Numeric { set, scale },
    })
}

fn intersect(a: Interval, b: Interval) -> Interval {
    let (lo, lo_incl) = match (a.lo, b.lo) {
        (Some(x), Some(y)) if y > x => (Some(y), b.lo_incl),
        (Some(x), Some(y)) if y == x => (Some(x), a.lo_incl && b.lo_incl),
        (Some(x), _) => (Some(x), a.lo_incl),
        (None, y) => (y, b.lo_incl),
    };
    let (hi, hi_incl) = match (a.hi, b.hi) {
        (Some(x), Some(y)) if y < x => (Some(y), b.hi_incl),
        (Some(x), Some(y)) if y == x => (Some(x), a.hi_incl && b.hi_incl),
        (Some(x), _) => (Some(x), a.hi_incl),
        (None, y) => (y, b.hi_incl),
    };
    Interval {
        lo,
        lo_incl,
        hi,
        hi_incl,
    }
}
