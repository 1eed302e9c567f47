use std::io::{self, Write};

use discern_model::{Record, Value};

/// Escapes text for XML content and attribute values.
pub fn escape_xml(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            _ => out.push(c),
        }
    }
}

/// Writes a changeset document of `set-item` actions, one item at a time.
pub struct ChangesetWriter<W: Write> {
    out: W,
    buf: String,
}

impl<W: Write> ChangesetWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<changeset>\n")?;
        Ok(ChangesetWriter {
            out,
            buf: String::with_capacity(4096),
        })
    }

    pub fn set_item(&mut self, id: &str, record: &Record) -> io::Result<()> {
        self.buf.clear();
        self.buf.push_str("<set-item id=\"");
        escape_xml(id, &mut self.buf);
        self.buf.push_str("\"><properties><struct>");
        for (k, v) in &record.0 {
            entry(&mut self.buf, k, v);
        }
        self.buf.push_str("</struct></properties></set-item>\n");
        self.out.write_all(self.buf.as_bytes())
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"</changeset>\n")?;
        Ok(self.out)
    }
}

fn entry(buf: &mut String, name: &str, v: &Value) {
    buf.push_str("<entry name=\"");
    escape_xml(name, buf);
    buf.push_str("\">");
    value(buf, v);
    buf.push_str("</entry>");
}

fn value(buf: &mut String, v: &Value) {
    use std::fmt::Write as _;
    match v {
        Value::Str(s) => {
            buf.push_str("<string>");
            escape_xml(s, buf);
            buf.push_str("</string>");
        }
        Value::Int(i) if i32::try_from(*i).is_ok() => {
            let _ = write!(buf, "<int>{i}</int>");
        }
        Value::Int(i) => {
            let _ = write!(buf, "<long>{i}</long>");
        }
        Value::Real(r) => {
            let _ = write!(buf, "<real>{r:?}</real>");
        }
        Value::Bool(b) => buf.push_str(if *b {
            "<bool>1</bool>"
        } else {
            "<bool>0</bool>"
        }),
        Value::Array(items) => {
            buf.push_str("<array>");
            for it in items {
                buf.push_str("<element>");
                value(buf, it);
                buf.push_str("</element>");
            }
            buf.push_str("</array>");
        }
        Value::Struct(entries) => {
            buf.push_str("<struct>");
            for (k, v) in entries {
                entry(buf, k, v);
            }
            buf.push_str("</struct>");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{read_changeset, Action, ParseError};
    use proptest::prelude::*;

    /// Strings as the reader gives them back: trimmed, and only characters XML 1.0 allows.
    fn text() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 &<>\"'é中\t\r\n_.-]{0,12}".prop_map(|s| s.trim().to_string())
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            text().prop_map(Value::Str),
            any::<i64>().prop_map(Value::Int),
            (-1e300f64..1e300).prop_map(Value::Real),
            any::<bool>().prop_map(Value::Bool),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-z]{1,6}", inner), 0..4).prop_map(Value::Struct),
            ]
        })
    }

    proptest! {
        #[test]
        fn writer_then_reader_round_trips(
            id in "[^\u{0}-\u{1f}]{1,20}",
            props in prop::collection::vec(("[a-z_]{1,8}", value_strategy()), 0..6)
        ) {
            // property names are unique in a record
            let mut rec = Record::new();
            for (k, v) in props { rec.set(k, v); }
            let mut w = ChangesetWriter::new(Vec::new()).unwrap();
            w.set_item(&id, &rec).unwrap();
            let doc = w.finish().unwrap();
            let mut got = Vec::new();
            read_changeset(&doc[..], |a| { got.push(a); Ok::<(), ParseError>(()) }).unwrap();
            prop_assert_eq!(got, vec![Action::Set { id: id.clone(), record: rec }]);
        }
    }
}
