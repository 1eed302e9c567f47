//! Compact binary encoding of records for the item store: a tag byte per value,
//! LEB128 lengths. Decoding checks every length, so a damaged record is an error,
//! never a panic.

use crate::{Record, Value};

#[derive(Debug, thiserror::Error)]
#[error("corrupt record encoding: {0}")]
pub struct CodecError(&'static str);

const STR: u8 = 0;
const INT: u8 = 1;
const REAL: u8 = 2;
const FALSE: u8 = 3;
const TRUE: u8 = 4;
const ARRAY: u8 = 5;
const STRUCT: u8 = 6;

pub fn encode_record(rec: &Record, out: &mut Vec<u8>) {
    put_len(out, rec.0.len());
    for (k, v) in &rec.0 {
        put_str(out, k);
        put_value(out, v);
    }
}

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => {
            out.push(STR);
            put_str(out, s);
        }
        Value::Int(i) => {
            out.push(INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Real(r) => {
            out.push(REAL);
            out.extend_from_slice(&r.to_le_bytes());
        }
        Value::Bool(b) => out.push(if *b { TRUE } else { FALSE }),
        Value::Array(items) => {
            out.push(ARRAY);
            put_len(out, items.len());
            items.iter().for_each(|it| put_value(out, it));
        }
        Value::Struct(entries) => {
            out.push(STRUCT);
            put_len(out, entries.len());
            for (k, v) in entries {
                put_str(out, k);
                put_value(out, v);
            }
        }
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Result<u8, CodecError> {
        let (&b, rest) = self.buf.split_first().ok_or(CodecError("truncated"))?;
        self.buf = rest;
        Ok(b)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.buf.len() < n {
            return Err(CodecError("truncated"));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn len(&mut self) -> Result<usize, CodecError> {
        let mut n: usize = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 {
                // every element takes at least one byte: a count beyond the rest is corrupt
                if n > self.buf.len() + 1 && n > (1 << 40) {
                    return Err(CodecError("length out of range"));
                }
                return Ok(n);
            }
        }
        Err(CodecError("length too long"))
    }
    fn string(&mut self) -> Result<String, CodecError> {
        let n = self.len()?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| CodecError("invalid UTF-8"))
    }
    fn value(&mut self, depth: u32) -> Result<Value, CodecError> {
        if depth > 1000 {
            return Err(CodecError("nesting too deep"));
        }
        Ok(match self.byte()? {
            STR => Value::Str(self.string()?),
            INT => Value::Int(i64::from_le_bytes(
                self.take(8)?.try_into().unwrap_or([0; 8]),
            )),
            REAL => Value::Real(f64::from_le_bytes(
                self.take(8)?.try_into().unwrap_or([0; 8]),
            )),
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            ARRAY => {
                let n = self.len()?;
                let mut items = Vec::with_capacity(n.min(self.buf.len()));
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            STRUCT => {
                let n = self.len()?;
                let mut entries = Vec::with_capacity(n.min(self.buf.len()));
                for _ in 0..n {
                    let k = self.string()?;
                    entries.push((k, self.value(depth + 1)?));
                }
                Value::Struct(entries)
            }
            _ => return Err(CodecError("unknown tag")),
        })
    }
}

pub fn decode_record(buf: &[u8]) -> Result<Record, CodecError> {
    let mut c = Cursor { buf };
    let n = c.len()?;
    let mut props = Vec::with_capacity(n.min(buf.len()));
    for _ in 0..n {
        let k = c.string()?;
        props.push((k, c.value(0)?));
    }
    if !c.buf.is_empty() {
        return Err(CodecError("trailing bytes"));
    }
    Ok(Record(props))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value_strategy() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<String>().prop_map(Value::Str),
            any::<i64>().prop_map(Value::Int),
            (-1e300f64..1e300).prop_map(Value::Real),
            any::<bool>().prop_map(Value::Bool),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..5).prop_map(Value::Struct),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip(props in prop::collection::vec((any::<String>(), value_strategy()), 0..8)) {
            let rec = Record(props);
            let mut buf = Vec::new();
            encode_record(&rec, &mut buf);
            prop_assert_eq!(decode_record(&buf).unwrap(), rec);
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_record(&bytes);
        }
    }
}
