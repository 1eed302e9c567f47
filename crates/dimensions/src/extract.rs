//! Value extraction (SPEC §6.2): from an item's record to the values a dimension indexes.

use discern_model::{Record, Value};

use crate::doc::{
    Dimension, DimensionKind, ElementSet, GeoSpec, NumericKind, NumericSpec, TextSpec,
};
use crate::many::Many;
use crate::strlist::{StrList, StrListBuilder};
use crate::termlist::TermList;
use crate::time::{format_iso, parse_time};
use crate::zip;

/// What one dimension indexes for one item. Two words: the index holds one per
/// dimension per document, so every list is behind a one-word pointer (`Many`,
/// `StrList`, `TermList`) and a lone number is held in place.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexedValue {
    /// keyword, groupBy (case folded when the dimension ignores case)
    Strings(StrList),
    /// integer, long, time (epoch ms): one value
    Int(i64),
    /// integer, long, time: several values (never one: that is `Int`, see `from_ints`)
    Ints(Many<i64>),
    /// double: one value
    Double(f64),
    /// double: several values (never one: `Double`, see `from_doubles`)
    Doubles(Many<f64>),
    /// (lat, lon)
    Points(Many<(f64, f64)>),
    /// tree, ordered, mutex: the elements the raw values tag directly (shared: equal
    /// lists are interned by the index)
    Elements(Many<u32>),
    /// text: analysed tokens, one group per field in the dimension's field order
    Text(StrList),
    /// text as the index holds it: `Text`'s tokens as numbers of the dimension's
    /// vocabulary (see `TermList`)
    Terms(TermList),
}

impl IndexedValue {
    /// Integer values: `Int` for one, else `Ints`.
    pub fn from_ints(xs: Vec<i64>) -> IndexedValue {
        match xs[..] {
            [x] => IndexedValue::Int(x),
            _ => IndexedValue::Ints(xs.into()),
        }
    }

    /// Double values: `Double` for one, else `Doubles`.
    pub fn from_doubles(xs: Vec<f64>) -> IndexedValue {
        match xs[..] {
            [x] => IndexedValue::Double(x),
            _ => IndexedValue::Doubles(xs.into()),
        }
    }

    /// The values of an integer, long or time dimension.
    #[inline]
    pub fn ints(&self) -> Option<&[i64]> {
        match self {
            IndexedValue::Int(x) => Some(std::slice::from_ref(x)),
            IndexedValue::Ints(xs) => Some(xs),
            _ => None,
        }
    }

    /// The values of a double dimension.
    #[inline]
    pub fn doubles(&self) -> Option<&[f64]> {
        match self {
            IndexedValue::Double(x) => Some(std::slice::from_ref(x)),
            IndexedValue::Doubles(xs) => Some(xs),
            _ => None,
        }
    }

    /// The values of a numeric dimension as doubles (integers converted), in order.
    pub fn numbers(&self) -> impl Iterator<Item = f64> + '_ {
        let ints = self.ints().unwrap_or_default().iter().map(|&x| x as f64);
        ints.chain(self.doubles().unwrap_or_default().iter().copied())
    }

    /// Text: every field's analysed tokens joined by single spaces (SPEC §6.4).
    pub fn joined_tokens(&self) -> Option<String> {
        match self {
            IndexedValue::Text(tokens) => Some(tokens.iter().collect::<Vec<_>>().join(" ")),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            IndexedValue::Strings(v) => v.is_empty(),
            IndexedValue::Int(_) | IndexedValue::Double(_) => false,
            IndexedValue::Ints(v) => v.is_empty(),
            IndexedValue::Doubles(v) => v.is_empty(),
            IndexedValue::Points(v) => v.is_empty(),
            IndexedValue::Elements(v) => v.is_empty(),
            IndexedValue::Text(t) => t.is_empty(),
            IndexedValue::Terms(t) => t.is_empty(),
        }
    }
}

/// The indexed value of a dimension for a record, and how many raw values could not be
/// read as the dimension's type.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    pub value: Option<IndexedValue>,
    pub errors: u32,
}

/// Calls `f` with every value a key names: a top-level property, else a dotted path
/// walked into structs; `_propertyName` gives the top-level property names.
pub fn for_each_key_value(record: &Record, key: &str, mut f: &mut dyn FnMut(&Value)) {
    if key == "_propertyName" {
        // (one value, its text replaced by each name in turn: not a string per name)
        let mut name_value = Value::Str(String::new());
        for name in record.names() {
            if let Value::Str(text) = &mut name_value {
                text.clear();
                text.push_str(name);
            }
            f(&name_value);
        }
        return;
    }
    if let Some(v) = record.get(key) {
        v.for_each_scalar(&mut f);
        return;
    }
    if key.contains('.') {
        let mut parts = key.split('.');
        let Some(first) = parts.next() else { return };
        let Some(mut cur) = record.get(first).map(|v| vec![v]) else {
            return;
        };
        for p in parts {
            let mut next = Vec::new();
            for v in cur {
                collect_members(v, p, &mut next);
            }
            cur = next;
        }
        for v in cur {
            v.for_each_scalar(&mut f);
        }
    }
}

fn collect_members<'a>(v: &'a Value, name: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Struct(_) => {
            if let Some(m) = v.member(name) {
                out.push(m);
            }
        }
        Value::Array(items) => items.iter().for_each(|it| collect_members(it, name, out)),
        _ => {}
    }
}

fn key_values(dim_keys: &[String], record: &Record, f: &mut dyn FnMut(&Value)) {
    for k in dim_keys {
        for_each_key_value(record, k, f);
    }
}

pub fn extract(dim: &Dimension, record: &Record) -> Extracted {
    let mut errors = 0u32;
    let value = match &dim.kind {
        DimensionKind::Keyword | DimensionKind::GroupBy => {
            let mut out = StrListBuilder::default();
            key_values(&dim.keys, record, &mut |v| match v.scalar_text() {
                Some(t) => {
                    // (a value already in lower case, as most are, is not copied)
                    let lower = t.is_ascii() && !t.bytes().any(|b| b.is_ascii_uppercase());
                    let t = if dim.ignore_case && !lower {
                        std::borrow::Cow::Owned(t.to_lowercase())
                    } else {
                        t
                    };
                    if !out.contains(&t) {
                        out.push(&t);
                    }
                }
                None => errors += 1,
            });
            IndexedValue::Strings(out.finish())
        }
        DimensionKind::Text(spec) => {
            let mut toks = StrListBuilder::default();
            text_tokens(spec, record, &mut |tok| match tok {
                Some(tok) => toks.push(tok),
                None => toks.end_group(),
            });
            IndexedValue::Text(toks.finish())
        }
        DimensionKind::Numeric(spec) => extract_numeric(dim, spec, record, &mut errors),
        DimensionKind::Geo(spec) => {
            IndexedValue::Points(extract_points(dim, spec, record, &mut errors).into())
        }
        DimensionKind::Tree(set) | DimensionKind::Ordered(set) | DimensionKind::Mutex(set) => {
            IndexedValue::Elements(extract_elements(dim, set, record).into())
        }
    };
    Extracted {
        value: if value.is_empty() { None } else { Some(value) },
        errors,
    }
}

/// A text dimension's analysed tokens of `record`, field after field in the dimension's
/// order: `Some` with each token, in order, and `None` at each field's end (a field
/// without tokens too).
pub fn text_tokens(spec: &TextSpec, record: &Record, f: &mut dyn FnMut(Option<&str>)) {
    for field in &spec.fields {
        key_values(&field.keys, record, &mut |v| {
            if let Some(t) = v.scalar_text() {
                field.analyzer.for_each_token(&t, |tok| f(Some(tok)));
            }
        });
        f(None);
    }
}

fn extract_numeric(
    dim: &Dimension,
    spec: &NumericSpec,
    record: &Record,
    errors: &mut u32,
) -> IndexedValue {
    match spec.kind {
        NumericKind::Double => {
            let mut out = Vec::new();
            key_values(&dim.keys, record, &mut |v| {
                let x = match v {
                    Value::Int(i) => Some(*i as f64),
                    Value::Real(r) => Some(*r),
                    Value::Str(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
                    _ => None,
                };
                match x {
                    Some(x) if spec.bounds.contains(x) => out.push(x),
                    Some(_) => {}
                    None => *errors += 1,
                }
            });
            IndexedValue::from_doubles(out)
        }
        _ => {
            let mut out = Vec::new();
            key_values(&dim.keys, record, &mut |v| {
                let x = match (&spec.kind, v) {
                    (NumericKind::Time(_), Value::Int(i)) => Some(*i),
                    (NumericKind::Time(_), Value::Real(r)) => Some(*r as i64),
                    (NumericKind::Time(fmt), Value::Str(s)) => parse_time(s, fmt.as_ref()),
                    (_, Value::Int(i)) => Some(*i),
                    (_, Value::Real(r)) => whole(*r),
                    (_, Value::Str(s)) => {
                        let s = s.trim();
                        s.parse::<i64>()
                            .ok()
                            .or_else(|| s.parse::<f64>().ok().and_then(whole))
                    }
                    _ => None,
                };
                match x {
                    Some(x) if spec.bounds.contains(x as f64) => {
                        if !out.contains(&x) {
                            out.push(x)
                        }
                    }
                    Some(_) => {}
                    None => *errors += 1,
                }
            });
            IndexedValue::from_ints(out)
        }
    }
}

fn whole(r: f64) -> Option<i64> {
    (r.is_finite() && r.fract() == 0.0 && r.abs() < 9.2e18).then_some(r as i64)
}

fn valid_point(lat: f64, lon: f64) -> bool {
    lat.is_finite() && lon.is_finite() && lat.abs() <= 90.0 && lon.abs() <= 180.0
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Real(r) => Some(*r),
        Value::Str(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

fn extract_points(
    dim: &Dimension,
    spec: &GeoSpec,
    record: &Record,
    errors: &mut u32,
) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    fn push(out: &mut Vec<(f64, f64)>, lat: f64, lon: f64, errors: &mut u32) {
        if valid_point(lat, lon) {
            out.push((lat, lon));
        } else {
            *errors += 1;
        }
    }
    key_values(&dim.keys, record, &mut |v| {
        let p = match v {
            Value::Struct(_) => {
                let lat = v
                    .member("lat")
                    .or_else(|| v.member("latitude"))
                    .and_then(num);
                let lon = v
                    .member("lon")
                    .or_else(|| v.member("lng"))
                    .or_else(|| v.member("longitude"))
                    .and_then(num);
                lat.zip(lon)
            }
            Value::Str(s) => {
                let mut it = s.split(',');
                match (it.next(), it.next(), it.next()) {
                    (Some(a), Some(b), None) => a
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .zip(b.trim().parse::<f64>().ok()),
                    _ => None,
                }
            }
            _ => None,
        };
        match p {
            Some((lat, lon)) => push(&mut out, lat, lon, errors),
            None => *errors += 1,
        }
    });
    let mut lats = Vec::new();
    let mut lons = Vec::new();
    for_each_key_value(record, &spec.latitude, &mut |v| lats.push(num(v)));
    for_each_key_value(record, &spec.longitude, &mut |v| lons.push(num(v)));
    for (la, lo) in lats.iter().zip(lons.iter()) {
        match (la, lo) {
            (Some(la), Some(lo)) => push(&mut out, *la, *lo, errors),
            _ => *errors += 1,
        }
    }
    if out.is_empty() {
        for_each_key_value(record, &spec.zipcode, &mut |v| match v
            .scalar_text()
            .and_then(|z| zip::centroid(&z))
        {
            Some((lat, lon)) => push(&mut out, lat, lon, errors),
            None => *errors += 1,
        });
    }
    out
}

fn extract_elements(dim: &Dimension, set: &ElementSet, record: &Record) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    key_values(&dim.keys, record, &mut |v| {
        if let Some(t) = v.scalar_text() {
            let found = if dim.ignore_case {
                set.by_value.get(&t.to_lowercase())
            } else {
                set.by_value.get(t.as_ref())
            };
            for &e in found.into_iter().flatten() {
                if !out.contains(&e) {
                    out.push(e);
                }
            }
        }
    });
    out
}

/// The JSON form `/ws/values` and query `values` show (SPEC §6.4).
pub fn to_json(dim: &Dimension, v: &IndexedValue) -> serde_json::Value {
    use serde_json::Value as J;
    fn one_or_many(mut items: Vec<J>) -> J {
        if items.len() == 1 {
            items.pop().unwrap_or(J::Null)
        } else {
            J::Array(items)
        }
    }
    match v {
        IndexedValue::Strings(s) => {
            one_or_many(s.iter().map(|x| J::String(x.to_string())).collect())
        }
        IndexedValue::Int(_) | IndexedValue::Ints(_) => {
            let xs = v.ints().unwrap_or_default();
            let time = matches!(
                &dim.kind,
                DimensionKind::Numeric(NumericSpec {
                    kind: NumericKind::Time(_),
                    ..
                })
            );
            one_or_many(
                xs.iter()
                    .map(|x| {
                        if time {
                            J::String(format_iso(*x))
                        } else {
                            J::from(*x)
                        }
                    })
                    .collect(),
            )
        }
        IndexedValue::Double(_) | IndexedValue::Doubles(_) => {
            let xs = v.doubles().unwrap_or_default();
            one_or_many(xs.iter().map(|x| J::from(*x)).collect())
        }
        IndexedValue::Points(ps) => one_or_many(
            ps.iter()
                .map(|(a, b)| J::String(format!("{a},{b}")))
                .collect(),
        ),
        IndexedValue::Elements(es) => {
            let set = dim.kind.elements();
            one_or_many(
                es.iter()
                    .filter_map(|e| set.map(|s| J::String(s.elements[*e as usize].id.clone())))
                    .collect(),
            )
        }
        IndexedValue::Text(fields) => match &dim.kind {
            DimensionKind::Text(spec) if !spec.single => {
                let mut m = serde_json::Map::new();
                for (g, f) in spec.fields.iter().enumerate() {
                    let toks: Vec<&str> = fields.group(g).collect();
                    if !toks.is_empty() {
                        m.insert(f.id.clone(), J::String(toks.join(" ")));
                    }
                }
                J::Object(m)
            }
            _ => J::String(v.joined_tokens().unwrap_or_default()),
        },
        // numbers say nothing without their vocabulary: the index turns them back into
        // tokens (`Text`) before showing them
        IndexedValue::Terms(_) => J::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_two_words() {
        // (the index's rows hold each in one word: `Slot`)
        assert_eq!(std::mem::size_of::<Option<IndexedValue>>(), 16);
        assert_eq!(IndexedValue::from_ints(vec![7]), IndexedValue::Int(7));
        assert_eq!(
            IndexedValue::from_doubles(vec![0.5]),
            IndexedValue::Double(0.5)
        );
        let two = IndexedValue::from_ints(vec![7, 8]);
        assert_eq!(two.ints(), Some(&[7, 8][..]));
        assert_eq!(two.numbers().collect::<Vec<_>>(), [7.0, 8.0]);
        assert_eq!(IndexedValue::Double(0.5).ints(), None);
    }
    use crate::Dimensions;

    fn rec(pairs: &[(&str, Value)]) -> Record {
        Record(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }
    fn s(x: &str) -> Value {
        Value::Str(x.into())
    }

    #[test]
    fn per_type() {
        let d = Dimensions::parse(include_bytes!("../testdata/std-dimensions.xml")).unwrap();
        let get = |dim: &str, r: &Record| extract(d.get(dim).unwrap(), r).value;
        assert_eq!(
            get("bedroom", &rec(&[("bedroom", s("3.0"))])),
            Some(IndexedValue::Int(3))
        );
        assert_eq!(get("bedroom", &rec(&[("bedroom", s("25"))])), None);
        assert_eq!(get("floor", &rec(&[("floor", s("0"))])), None);
        assert_eq!(
            get(
                "rooms",
                &rec(&[("details", Value::Struct(vec![("rooms".into(), s("3"))]))])
            ),
            Some(IndexedValue::Int(3))
        );
        let g = get("geo", &rec(&[("geo", s("39.25,-75.5"))]));
        assert_eq!(g, Some(IndexedValue::Points([(39.25, -75.5)].into())));
        let loc = get("location", &rec(&[("zip", s("10012"))]));
        assert_eq!(
            loc,
            Some(IndexedValue::Points([(40.7255, -73.9983)].into()))
        );
        assert_eq!(
            get("location", &rec(&[("lat", s("95")), ("lng", s("1"))])),
            None
        );
        let genre = d.get("genre").unwrap();
        let v = get("genre", &rec(&[("genre", s("Crime Drama"))])).unwrap();
        assert_eq!(to_json(genre, &v), serde_json::json!("Drama|Crime"));
        assert_eq!(get("genre", &rec(&[("genre", s("Noir"))])), None);
        let gender = d.get("gender").unwrap();
        let v = get("gender", &rec(&[("gender", s("f"))])).unwrap();
        assert_eq!(to_json(gender, &v), serde_json::json!("1"));
        let year = d.get("year").unwrap();
        let v = get("year", &rec(&[("built", s("1999"))])).unwrap();
        assert_eq!(
            to_json(year, &v),
            serde_json::json!("1999-01-01T00:00:00.000Z")
        );
        let pn = get("propertyNames", &rec(&[("a", s("1")), ("b", s("2"))]));
        assert_eq!(
            pn,
            Some(IndexedValue::Strings(StrList::from_strs(["a", "b"])))
        );
    }
}
