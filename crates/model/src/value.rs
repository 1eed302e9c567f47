use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// A property value as a changeset states it (SPEC §2). Stored values are never converted.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    /// Always finite: the changeset reader rejects NaN and infinities.
    Real(f64),
    Bool(bool),
    Array(Vec<Value>),
    /// Entries in document order.
    Struct(Vec<(String, Value)>),
}

impl Value {
    /// Scalars and structs of this value: itself, or the elements of an array (flattened).
    pub fn for_each_scalar<'a>(&'a self, f: &mut impl FnMut(&'a Value)) {
        match self {
            Value::Array(items) => items.iter().for_each(|v| v.for_each_scalar(f)),
            other => f(other),
        }
    }

    /// Text form of a scalar, as an indexer reads it; `None` for arrays and structs.
    pub fn scalar_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        match self {
            Value::Str(s) => Some(Cow::Borrowed(s)),
            Value::Int(i) => Some(Cow::Owned(i.to_string())),
            Value::Real(r) => Some(Cow::Owned(r.to_string())),
            Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
            _ => None,
        }
    }

    /// Member of a struct value by name.
    pub fn member(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Struct(entries) => entries.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// An item's property record: an ordered map from property name to value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record(pub Vec<(String, Value)>);

impl Record {
    pub fn new() -> Self {
        Record(Vec::new())
    }
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.0.iter_mut().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    /// Sets a property, replacing an existing one in place (keeping its position).
    pub fn set(&mut self, name: String, value: Value) {
        match self.get_mut(&name) {
            Some(slot) => *slot = value,
            None => self.0.push((name, value)),
        }
    }
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let pos = self.0.iter().position(|(k, _)| k == name)?;
        Some(self.0.remove(pos).1)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Str(v) => s.serialize_str(v),
            Value::Int(v) => s.serialize_i64(*v),
            Value::Real(v) => s.serialize_f64(*v),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for it in items {
                    seq.serialize_element(it)?;
                }
                seq.end()
            }
            Value::Struct(entries) => serialize_entries(s, None, entries.iter(), entries.len()),
        }
    }
}

fn serialize_entries<'a, S: Serializer>(
    s: S,
    id: Option<&str>,
    entries: impl Iterator<Item = &'a (String, Value)>,
    len: usize,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(len + id.is_some() as usize))?;
    if let Some(id) = id {
        map.serialize_entry("_id", id)?;
    }
    for (k, v) in entries {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_entries(s, None, self.0.iter(), self.0.len())
    }
}

/// A record as `/ws/item` returns it: `{"_id": id, …properties…}`, optionally restricted
/// to the named properties.
pub struct RecordWithId<'a> {
    pub id: &'a str,
    pub record: &'a Record,
    pub only: Option<&'a [String]>,
}

impl Serialize for RecordWithId<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.only {
            None => serialize_entries(s, Some(self.id), self.record.0.iter(), self.record.0.len()),
            Some(names) => {
                let picked: Vec<&(String, Value)> = self
                    .record
                    .0
                    .iter()
                    .filter(|(k, _)| names.iter().any(|n| n == k))
                    .collect();
                let n = picked.len();
                serialize_entries(s, Some(self.id), picked.into_iter(), n)
            }
        }
    }
}
