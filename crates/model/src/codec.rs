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

/// Writes an encoded record as the JSON object serde_json writes for
/// `RecordWithId { id, record, only: None }` (`"_id"` first, then the properties in
/// order), without decoding it into values: exporting a million sources allocates nothing
/// per item. A damaged encoding is an error, as in `decode_record` (`out` then holds part
/// of the object).
pub fn write_record_json(buf: &[u8], id: &str, out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.extend_from_slice(b"{\"_id\":");
    write_json_str(id.as_bytes(), out);
    write_members(buf, None, false, out)
}

/// Writes an encoded record as a query's `properties` member shows it: a JSON object of
/// its properties in order, without `_id`, only those `only` names when given (as
/// serde_json writes a `RecordWithId` with its `_id` taken out). A damaged encoding is an
/// error (`out` then holds part of the object), except invalid UTF-8 in a string of a
/// property not written.
pub fn write_props_json(
    buf: &[u8],
    only: Option<&[String]>,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    out.push(b'{');
    write_members(buf, only, true, out)
}

/// The record's properties (those `only` names, when given) as JSON object members, and
/// the closing brace; `first`: no member precedes them.
fn write_members(
    buf: &[u8],
    only: Option<&[String]>,
    mut first: bool,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let mut c = Cursor { buf };
    for _ in 0..c.len()? {
        let len = c.len()?;
        let name = c.take(len)?;
        if only.is_some_and(|names| !names.iter().any(|k| k.as_bytes() == name)) {
            c.skip_value(0)?;
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        if !write_json_str(name, out) {
            return Err(CodecError("invalid UTF-8"));
        }
        out.push(b':');
        c.write_value_json(0, out)?;
    }
    if !c.buf.is_empty() {
        return Err(CodecError("trailing bytes"));
    }
    out.push(b'}');
    Ok(())
}

/// `s` as a JSON string, exactly as serde_json writes it.
pub fn write_json_string(s: &str, out: &mut Vec<u8>) {
    write_json_str(s.as_bytes(), out);
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that is not ASCII, a control character, `"` or `\\`
/// may be set, and one is if any byte is one of those (a byte `b` below `n` <= 128 sets its
/// high bit in `(w - n) & !w`; borrows only mark bytes above such a byte).
#[inline]
fn look_bits(w: u64) -> u64 {
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * b'"' as u64);
    let backslash = w ^ (ONES * b'\\' as u64);
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    (below_space | zero(quote) | zero(backslash) | w) & HIGH
}

#[cfg(test)]
fn needs_a_look(w: u64) -> bool {
    look_bits(w) != 0
}

/// `s` as a JSON string, escaped as serde_json escapes (`\"`, `\\`, the short forms of
/// five control characters, `\u00xx` for the others; everything else verbatim).
/// Returns whether `s` is UTF-8, checked in the same pass.
fn write_json_str(s: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut esc = Escaper {
        start: 0,
        ascii: true,
    };
    // eight bytes per test: plain text, the usual case, costs a few operations per word
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        if look_bits(u64::from_le_bytes(w)) != 0 {
            esc.bytes(s, at, at + 8, out);
        }
        at += 8;
    }
    // (a word assembled from the last few bytes would cost a memcpy and a stalled load)
    esc.bytes(s, at, s.len(), out);
    out.extend_from_slice(&s[esc.start..]);
    out.push(b'"');
    esc.ascii || std::str::from_utf8(s).is_ok()
}

/// The byte-at-a-time half of `write_json_str`.
struct Escaper {
    /// Start of the bytes not yet copied to the output.
    start: usize,
    ascii: bool,
}

impl Escaper {
    #[inline]
    fn bytes(&mut self, s: &[u8], from: usize, to: usize, out: &mut Vec<u8>) {
        for (j, &b) in s[from..to].iter().enumerate() {
            if b >= 0x80 {
                self.ascii = false;
            } else if b < 0x20 || b == b'"' || b == b'\\' {
                self.escape(s, from + j, out);
            }
        }
    }

    #[cold]
    fn escape(&mut self, s: &[u8], j: usize, out: &mut Vec<u8>) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let b = s[j];
        out.extend_from_slice(&s[self.start..j]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x09 => out.extend_from_slice(b"\\t"),
            0x0a => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x0d => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]),
        }
        self.start = j + 1;
    }
}

fn write_number(out: &mut Vec<u8>, n: impl serde::Serialize) -> Result<(), CodecError> {
    serde_json::to_writer(out, &n).map_err(|_| CodecError("unwritable number"))
}

impl Cursor<'_> {
    fn write_str_json(&mut self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let n = self.len()?;
        if write_json_str(self.take(n)?, out) {
            Ok(())
        } else {
            Err(CodecError("invalid UTF-8"))
        }
    }

    fn write_value_json(&mut self, depth: u32, out: &mut Vec<u8>) -> Result<(), CodecError> {
        if depth > 1000 {
            return Err(CodecError("nesting too deep"));
        }
        match self.byte()? {
            STR => self.write_str_json(out)?,
            // numbers as serde_json writes them (ryu for reals, `null` if not finite)
            INT => write_number(out, i64::from_le_bytes(self.eight()?))?,
            REAL => write_number(out, f64::from_le_bytes(self.eight()?))?,
            FALSE => out.extend_from_slice(b"false"),
            TRUE => out.extend_from_slice(b"true"),
            ARRAY => {
                out.push(b'[');
                for i in 0..self.len()? {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_value_json(depth + 1, out)?;
                }
                out.push(b']');
            }
            STRUCT => {
                out.push(b'{');
                for i in 0..self.len()? {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_str_json(out)?;
                    out.push(b':');
                    self.write_value_json(depth + 1, out)?;
                }
                out.push(b'}');
            }
            _ => return Err(CodecError("unknown tag")),
        }
        Ok(())
    }

    /// Passes over one value, checking its lengths, so that what follows is read from
    /// where it starts. A string passed over is not checked for UTF-8: nothing is made
    /// of its bytes (checking them was about a quarter of writing a page's properties
    /// when a request names some of them).
    fn skip_value(&mut self, depth: u32) -> Result<(), CodecError> {
        if depth > 1000 {
            return Err(CodecError("nesting too deep"));
        }
        match self.byte()? {
            STR => self.skip_str()?,
            INT | REAL => {
                self.take(8)?;
            }
            FALSE | TRUE => {}
            ARRAY => {
                for _ in 0..self.len()? {
                    self.skip_value(depth + 1)?;
                }
            }
            STRUCT => {
                for _ in 0..self.len()? {
                    self.skip_str()?;
                    self.skip_value(depth + 1)?;
                }
            }
            _ => return Err(CodecError("unknown tag")),
        }
        Ok(())
    }

    fn skip_str(&mut self) -> Result<(), CodecError> {
        let n = self.len()?;
        self.take(n)?;
        Ok(())
    }

    fn eight(&mut self) -> Result<[u8; 8], CodecError> {
        self.take(8)?
            .try_into()
            .map_err(|_| CodecError("truncated"))
    }
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

    #[test]
    fn json_escapes_every_control_character() {
        let all: String = (0u8..0x80).map(char::from).collect();
        let rec = Record(vec![(all.clone(), Value::Str(all.clone() + "é😀"))]);
        let mut buf = Vec::new();
        encode_record(&rec, &mut buf);
        let mut direct = Vec::new();
        write_record_json(&buf, &all, &mut direct).unwrap();
        let by_serde = serde_json::to_vec(&crate::RecordWithId {
            id: &all,
            record: &rec,
            only: None,
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(direct).unwrap(),
            String::from_utf8(by_serde).unwrap()
        );
    }

    #[test]
    fn json_from_encoding_refuses_invalid_utf8() {
        for bad in [&b"\xff"[..], b"abcdefgh\xc3", b"\xe2\x82abcdefghij"] {
            let mut buf = vec![1, 0];
            buf.push(bad.len() as u8);
            buf.extend_from_slice(bad);
            assert!(write_record_json(&buf, "x", &mut Vec::new()).is_err());
            assert!(decode_record(&buf).is_err());
        }
    }

    /// A property left out is passed over by its lengths: invalid UTF-8 in it does not
    /// stop the others from being written, and is an error wherever it is written.
    #[test]
    fn a_property_left_out_is_passed_over() {
        let rec = Record(vec![
            ("a".into(), Value::Str("ok".into())),
            ("b".into(), Value::Str("xyz".into())),
            ("c".into(), Value::Int(7)),
        ]);
        let mut buf = Vec::new();
        encode_record(&rec, &mut buf);
        let at = buf.windows(3).position(|w| w == b"xyz").unwrap();
        buf[at] = 0xff;
        let only = ["a".to_string(), "c".to_string()];
        let mut out = Vec::new();
        write_props_json(&buf, Some(&only), &mut out).unwrap();
        assert_eq!(out, br#"{"a":"ok","c":7}"#);
        assert!(write_props_json(&buf, None, &mut Vec::new()).is_err());
        assert!(write_props_json(&buf, Some(&["b".to_string()]), &mut Vec::new()).is_err());
        assert!(decode_record(&buf).is_err());
    }

    proptest! {
        #[test]
        fn word_test_is_exact(bytes in prop::array::uniform8(prop_oneof![6 => 0x20u8..0x7f, 1 => any::<u8>()])) {
            let by_byte = bytes.iter().any(|&b| !(0x20..0x80).contains(&b) || b == b'"' || b == b'\\');
            prop_assert_eq!(needs_a_look(u64::from_le_bytes(bytes)), by_byte);
        }

        #[test]
        fn escapes_at_any_offset(prefix in "[a-z]{0,17}", c in 0u8..0x80, suffix in "[a-zé]{0,9}") {
            let s = format!("{prefix}{}{suffix}", char::from(c));
            let mut direct = Vec::new();
            write_json_string(&s, &mut direct);
            prop_assert_eq!(String::from_utf8(direct).unwrap(), serde_json::to_string(&s).unwrap());
        }

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
            let _ = write_record_json(&bytes, "x", &mut Vec::new());
            let _ = write_props_json(&bytes, Some(&["a".to_string()]), &mut Vec::new());
            // a record that decodes is written whole, whatever is picked from it
            if decode_record(&bytes).is_ok() {
                prop_assert!(write_props_json(&bytes, Some(&[]), &mut Vec::new()).is_ok());
            }
        }

        /// A query's properties written from the encoding are what serde_json writes for
        /// the record with its `_id` taken out, all of them or those picked, in order.
        #[test]
        fn props_from_encoding_are_serde_json(
            props in prop::collection::vec(("[a-d]{1,2}", value_strategy()), 0..8),
            picked in prop::option::of(prop::collection::vec("[a-d]{1,2}", 0..4)),
        ) {
            let mut seen = std::collections::HashSet::new();
            let rec = Record(props.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect());
            let mut buf = Vec::new();
            encode_record(&rec, &mut buf);
            let mut direct = Vec::new();
            write_props_json(&buf, picked.as_deref(), &mut direct).unwrap();
            let by_serde = serde_json::to_string(&crate::RecordWithId {
                id: "x",
                record: &rec,
                only: picked.as_deref(),
            })
            .unwrap();
            let without_id = by_serde.replacen("{\"_id\":\"x\",", "{", 1).replacen("{\"_id\":\"x\"}", "{}", 1);
            prop_assert_eq!(String::from_utf8(direct).unwrap(), without_id);
        }

        #[test]
        fn json_from_encoding_is_serde_json(
            id in any::<String>(),
            props in prop::collection::vec((any::<String>(), value_strategy()), 0..8),
        ) {
            let rec = Record(props);
            let mut buf = Vec::new();
            encode_record(&rec, &mut buf);
            let mut direct = Vec::new();
            write_record_json(&buf, &id, &mut direct).unwrap();
            let by_serde = serde_json::to_vec(&crate::RecordWithId { id: &id, record: &rec, only: None }).unwrap();
            prop_assert_eq!(String::from_utf8(direct).unwrap(), String::from_utf8(by_serde).unwrap());
        }
    }
}
