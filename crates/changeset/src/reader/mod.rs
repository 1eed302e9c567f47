use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use discern_model::{validate_id, Record, Value};

use crate::{Action, RemovalEntries, RemoveWhat};

mod events;
mod lexer;
use events::{Attrs, Ev, Lines, Name, Tag, Taken};
use lexer::{Events, Lexer};

/// Deepest array/struct nesting accepted (SPEC §3).
pub const MAX_DEPTH: usize = 64;

/// Why a changeset was rejected, and where (1-based line and column).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (line {line}, column {column})")]
pub struct ParseError {
    pub message: String,
    pub line: u64,
    pub column: u64,
}

/// What a complete read saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadSummary {
    pub actions: u64,
}

/// Reads a changeset document from `input`, calling `on_action` for every action in
/// document order. An error from the callback stops the read and is returned as is.
/// Memory use is bounded by the largest single action, not the document.
pub fn read_changeset<R: BufRead, E: From<ParseError>>(
    input: R,
    on_action: impl FnMut(Action) -> Result<(), E>,
) -> Result<ReadSummary, E> {
    read_from(Lexer::new(input), on_action)
}

/// `read_changeset` with quick-xml's reading in place of the tokenizer: the fuzz
/// target's oracle.
#[cfg(feature = "oracle")]
pub fn read_changeset_quick_xml<R: BufRead, E: From<ParseError>>(
    input: R,
    on_action: impl FnMut(Action) -> Result<(), E>,
) -> Result<ReadSummary, E> {
    read_from(events::QuickXml::new(input), on_action)
}

/// A changeset read from `source`'s events.
fn read_from<S: Events, E: From<ParseError>>(
    source: S,
    mut on_action: impl FnMut(Action) -> Result<(), E>,
) -> Result<ReadSummary, E> {
    Parser::new(source).document(&mut on_action)
}

struct Parser<S: Events> {
    source: S,
    lines: Lines,
    /// Offset where the current event starts.
    ev_start: u64,
    /// The last `Ev::Text`'s content (entity references and CDATA folded in).
    text: String,
    /// The last start tag's attributes (an action's or an entry's).
    attrs: Attrs,
    peeked: Option<Ev>,
    peeked_at: u64,
    /// Newlines inside the last start tag, counted once the tag has been handled so that
    /// errors about the tag report the line it starts on.
    pending_nl: Option<(u64, u64)>,
    eof: bool,
    /// Entries of the last `<properties>` struct read (at most `MAX_ENTRIES_HINT`).
    entries_seen: usize,
}

/// The most entries a properties struct is made room for before it is read.
const MAX_ENTRIES_HINT: usize = 256;

impl<S: Events> Parser<S> {
    fn new(source: S) -> Self {
        Parser {
            source,
            lines: Lines::default(),
            ev_start: 0,
            text: String::new(),
            attrs: Attrs::default(),
            peeked: None,
            peeked_at: 0,
            pending_nl: None,
            eof: false,
            entries_seen: 0,
        }
    }

    fn error_at(&self, offset: u64, message: impl Into<String>) -> ParseError {
        ParseError {
            message: message.into(),
            line: self.lines.count + 1,
            column: offset.saturating_sub(self.lines.last) + 1,
        }
    }

    fn err(&self, message: impl Into<String>) -> ParseError {
        self.error_at(self.ev_start, message)
    }

    /// Next content event: comments, processing instructions, the declaration and
    /// DOCTYPE are skipped (the DOCTYPE is never fetched); entity references and CDATA
    /// are folded into text.
    fn next(&mut self) -> Result<Ev, ParseError> {
        self.count_pending_newlines();
        if let Some(ev) = self.peeked.take() {
            self.ev_start = self.peeked_at;
            return Ok(ev);
        }
        self.text.clear();
        let mut text_start = None;
        loop {
            if self.eof {
                return Ok(match text_start {
                    Some(_) => Ev::Text,
                    None => Ev::Eof,
                });
            }
            let got = self
                .source
                .next_event(&mut self.text, &mut self.attrs, &mut self.lines);
            let (start, ev) = match got {
                Ok((start, Taken::Text)) => {
                    text_start.get_or_insert(start);
                    continue;
                }
                Ok((_, Taken::Skipped)) => continue,
                Ok((start, Taken::Start(name, nl))) => {
                    self.pending_nl = Some(nl);
                    (start, Ev::Start(name))
                }
                Ok((start, Taken::End)) => (start, Ev::End),
                Ok((start, Taken::Eof)) => {
                    self.eof = true;
                    (start, Ev::Eof)
                }
                Err((at, msg)) => return Err(self.error_at(at, msg)),
            };
            if let Some(text_start) = text_start {
                self.peeked = Some(ev);
                self.peeked_at = start;
                self.ev_start = text_start;
                return Ok(Ev::Text);
            }
            self.ev_start = start;
            return Ok(ev);
        }
    }

    /// Counts the newlines inside the last start tag, now that it has been handled.
    fn count_pending_newlines(&mut self) {
        if let Some((count, last)) = self.pending_nl.take() {
            if count > 0 {
                self.lines.count += count;
                self.lines.last = last;
            }
        }
    }

    /// A string entry (`named`) or array element the source takes whole
    /// (`Events::string_entry`): its name and value, without walking its five events.
    fn string_entry(&mut self, named: bool) -> Option<(String, Value)> {
        if self.peeked.is_some() || self.eof {
            return None;
        }
        // (what `next` would count first)
        self.count_pending_newlines();
        let (name, text) = self.source.string_entry(named, &mut self.lines)?;
        Some((name, Value::Str(text)))
    }

    /// Next event that is not whitespace-only text; other text is an error.
    /// `inside`: the element being read, named in the error (formatted only on error).
    fn next_tag(&mut self, inside: &str) -> Result<Ev, ParseError> {
        loop {
            match self.next()? {
                Ev::Text if self.text.trim().is_empty() => continue,
                Ev::Text => {
                    let text: String = self.text.trim().chars().take(40).collect();
                    let place = match inside {
                        "" => "before the root element".to_string(),
                        "/" => "after </changeset>".to_string(),
                        name => format!("inside <{name}>"),
                    };
                    return Err(self.err(format!("unexpected text {text:?} {place}")));
                }
                other => return Ok(other),
            }
        }
    }

    fn document<E: From<ParseError>>(
        &mut self,
        on_action: &mut impl FnMut(Action) -> Result<(), E>,
    ) -> Result<ReadSummary, E> {
        match self.next_tag("")? {
            Ev::Start(name) if name.is(Tag::Changeset) => {}
            Ev::Start(name) => {
                return Err(self
                    .err(format!("root element must be <changeset>, not <{name}>"))
                    .into())
            }
            Ev::Eof => return Err(self.err("empty document: expected <changeset>").into()),
            Ev::End | Ev::Text => return Err(self.err("expected <changeset>").into()),
        }
        let mut summary = ReadSummary::default();
        loop {
            match self.next_tag("changeset")? {
                Ev::Start(name) => {
                    let attrs = std::mem::take(&mut self.attrs);
                    let action = self.action(&name, attrs)?;
                    summary.actions += 1;
                    on_action(action)?;
                }
                Ev::End => break,
                Ev::Eof => {
                    return Err(self.err("document ends before </changeset>").into());
                }
                Ev::Text => unreachable_text()?,
            }
        }
        match self.next_tag("/")? {
            Ev::Eof => Ok(summary),
            Ev::Start(name) => Err(self
                .err(format!("unexpected element <{name}> after </changeset>"))
                .into()),
            _ => Err(self.err("unexpected content after </changeset>").into()),
        }
    }

    fn action(&mut self, name: &Name, attrs: Attrs) -> Result<Action, ParseError> {
        let tag = match name.tag() {
            Some(t) if t.is_action() => t,
            _ => return Err(self.err(format!("unknown action <{name}>"))),
        };
        let kind = tag.as_str();
        let (id, locator) = match attrs {
            Attrs { id: Some(id), .. } => (id, None),
            Attrs {
                locator: Some(loc),
                provider: Some(p),
                kind: Some(k),
                ..
            } => {
                let id = if p.is_empty() && k.is_empty() {
                    loc.clone()
                } else {
                    format!("{p}/{k}/{loc}")
                };
                (id, Some((loc, p, k)))
            }
            Attrs {
                locator: Some(_), ..
            } => {
                return Err(self.err(format!(
                    "<{kind}> locator form needs locator, provider and kind attributes"
                )))
            }
            _ => return Err(self.err(format!("<{kind}> has no id attribute"))),
        };
        validate_id(&id).map_err(|m| self.err(format!("<{kind}>: {m}")))?;

        let mut record: Option<Record> = None;
        let mut remove_all = false;
        let mut remove_entries: Option<RemovalEntries> = None;
        loop {
            match self.next_tag(kind)? {
                Ev::End => break,
                Ev::Start(child) if child.is(Tag::Properties) => {
                    if record.is_some() || remove_entries.is_some() || remove_all {
                        return Err(self.err(format!("<{kind}> has more than one <properties>")));
                    }
                    if tag == Tag::RemoveFromItem {
                        remove_entries = Some(self.properties_for_removal()?);
                    } else {
                        record = Some(self.properties()?);
                    }
                }
                Ev::Start(child) if child.is(Tag::All) && tag == Tag::RemoveFromItem => {
                    self.expect_end("all")?;
                    remove_all = true;
                }
                Ev::Start(child) => {
                    return Err(self.err(format!("unexpected <{child}> inside <{kind}>")))
                }
                Ev::Eof => return Err(self.err(format!("document ends inside <{kind}>"))),
                Ev::Text => unreachable_text()?,
            }
        }
        let mut record = record.unwrap_or_default();
        if let Some((loc, prov, kd)) = locator {
            if matches!(tag, Tag::SetItem | Tag::AddToItem) {
                record.set("_locator".into(), Value::Str(loc));
                record.set("_provider".into(), Value::Str(prov));
                record.set("_kind".into(), Value::Str(kd));
            }
        }
        Ok(match tag {
            Tag::SetItem => Action::Set { id, record },
            Tag::AddItem => Action::Add { id },
            Tag::AddToItem => Action::AddTo { id, record },
            Tag::RemoveItem => Action::Remove { id },
            _ => Action::RemoveFrom {
                id,
                what: if remove_all {
                    RemoveWhat::All
                } else {
                    RemoveWhat::Entries(remove_entries.unwrap_or_default())
                },
            },
        })
    }

    fn expect_end(&mut self, name: &str) -> Result<(), ParseError> {
        match self.next_tag(name)? {
            Ev::End => Ok(()),
            _ => Err(self.err(format!("<{name}> must be empty"))),
        }
    }

    /// `<properties>` holding exactly one `<struct>`; returns its entries with values.
    fn properties(&mut self) -> Result<Record, ParseError> {
        let entries = self.properties_struct()?;
        if !names_repeat(&entries) {
            // (the entries' own allocation, taken over: an entry and a property are the
            // same size)
            return Ok(Record(
                entries
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, v?)))
                    .collect(),
            ));
        }
        // A name given twice: its last value, in its first place (as `Record::set`
        // would have it, but in one pass: a record of many entries is not searched
        // once per entry).
        let mut place: Vec<Option<usize>> = vec![None; entries.len()];
        let mut places = 0;
        {
            let mut first: HashMap<&str, usize> = HashMap::new();
            for ((name, value), p) in entries.iter().zip(&mut place) {
                if value.is_some() {
                    *p = Some(*first.entry(name.as_str()).or_insert_with(|| {
                        places += 1;
                        places - 1
                    }));
                }
            }
        }
        let mut out: Vec<Option<(String, Value)>> = (0..places).map(|_| None).collect();
        for ((name, value), p) in entries.into_iter().zip(place) {
            if let (Some(value), Some(p)) = (value, p) {
                match &mut out[p] {
                    Some((_, old)) => *old = value,
                    empty => *empty = Some((name, value)),
                }
            }
        }
        Ok(Record(out.into_iter().flatten().collect()))
    }

    fn properties_for_removal(&mut self) -> Result<RemovalEntries, ParseError> {
        let entries = self.properties_struct()?;
        Ok(entries
            .into_iter()
            .map(|(name, v)| {
                let vals = v.map(|v| match v {
                    Value::Array(items) => items,
                    other => vec![other],
                });
                (name, vals)
            })
            .collect())
    }

    fn properties_struct(&mut self) -> Result<Vec<(String, Option<Value>)>, ParseError> {
        let entries = match self.next_tag("properties")? {
            Ev::Start(name) if name.is(Tag::Struct) => self.struct_entries(1)?,
            Ev::Start(name) => {
                return Err(self.err(format!("<properties> must hold one <struct>, not <{name}>")))
            }
            _ => return Err(self.err("<properties> must hold one <struct>")),
        };
        match self.next_tag("properties")? {
            Ev::End => Ok(entries),
            _ => Err(self.err("<properties> must hold exactly one <struct>")),
        }
    }

    /// Entries of a `<struct>` whose start tag was just read; `None` for an empty entry.
    fn struct_entries(&mut self, depth: usize) -> Result<Vec<(String, Option<Value>)>, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err(format!("array/struct nesting deeper than {MAX_DEPTH}")));
        }
        // (a document's items mostly have as many properties as the one before)
        let mut out = Vec::with_capacity(if depth == 1 { self.entries_seen } else { 0 });
        loop {
            if let Some((name, value)) = self.string_entry(true) {
                out.push((name, Some(value)));
                continue;
            }
            match self.next_tag("struct")? {
                Ev::End => {
                    if depth == 1 {
                        self.entries_seen = out.len().min(MAX_ENTRIES_HINT);
                    }
                    return Ok(out);
                }
                Ev::Start(name) if name.is(Tag::Entry) => {
                    let Some(ename) = self.attrs.name.take() else {
                        return Err(self.err("<entry> has no name attribute"));
                    };
                    let value = self.single_value("entry", depth)?;
                    out.push((ename, value));
                }
                Ev::Start(name) => {
                    return Err(self.err(format!("unexpected <{name}> inside <struct>")))
                }
                _ => return Err(self.err("document ends inside <struct>")),
            }
        }
    }

    /// The optional single value inside `<entry>` or `<element>`, consuming its end tag.
    fn single_value(&mut self, parent: &str, depth: usize) -> Result<Option<Value>, ParseError> {
        match self.next_tag(parent)? {
            Ev::End => Ok(None),
            Ev::Start(name) => {
                let v = self.value(&name, depth)?;
                match self.next_tag(parent)? {
                    Ev::End => Ok(Some(v)),
                    _ => Err(self.err(format!("<{parent}> must hold one value"))),
                }
            }
            _ => Err(self.err(format!("document ends inside <{parent}>"))),
        }
    }

    /// Text content up to the end tag of a scalar element.
    fn scalar_text(&mut self, name: &str) -> Result<String, ParseError> {
        let mut text = String::new();
        loop {
            match self.next()? {
                // (the parser's buffer is handed over: a value owns its text)
                Ev::Text if text.is_empty() => text = std::mem::take(&mut self.text),
                Ev::Text => text.push_str(&self.text),
                Ev::End => return Ok(text),
                Ev::Start(child) => {
                    return Err(self.err(format!("unexpected <{child}> inside <{name}>")))
                }
                Ev::Eof => return Err(self.err(format!("document ends inside <{name}>"))),
            }
        }
    }

    fn value(&mut self, name: &Name, depth: usize) -> Result<Value, ParseError> {
        let at = self.ev_start;
        let Some(tag) = name.tag() else {
            return Err(self.error_at(at, format!("unknown value element <{name}>")));
        };
        let name = tag.as_str();
        match tag {
            Tag::String => Ok(Value::Str(trimmed(self.scalar_text(name)?))),
            Tag::Int | Tag::Long => {
                let t = self.scalar_text(name)?;
                t.trim().parse::<i64>().map(Value::Int).map_err(|_| {
                    self.error_at(at, format!("<{name}> {:?} is not an integer", t.trim()))
                })
            }
            Tag::Real => {
                let t = self.scalar_text(name)?;
                match t.trim().parse::<f64>() {
                    Ok(r)
                        if r.is_finite()
                            && !t
                                .trim()
                                .chars()
                                .any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') =>
                    {
                        Ok(Value::Real(r))
                    }
                    _ => {
                        Err(self
                            .error_at(at, format!("<real> {:?} is not a finite number", t.trim())))
                    }
                }
            }
            Tag::Bool => {
                let t = self.scalar_text(name)?;
                match t.trim() {
                    "1" | "true" => Ok(Value::Bool(true)),
                    "0" | "false" => Ok(Value::Bool(false)),
                    other => {
                        Err(self
                            .error_at(at, format!("<bool> {other:?} is not 1, 0, true or false")))
                    }
                }
            }
            Tag::Array => {
                if depth + 1 > MAX_DEPTH {
                    return Err(self.err(format!("array/struct nesting deeper than {MAX_DEPTH}")));
                }
                let mut items = Vec::new();
                loop {
                    if let Some((_, value)) = self.string_entry(false) {
                        items.push(value);
                        continue;
                    }
                    match self.next_tag("array")? {
                        Ev::End => return Ok(Value::Array(items)),
                        Ev::Start(n) if n.is(Tag::Element) => {
                            if let Some(v) = self.single_value("element", depth + 1)? {
                                items.push(v);
                            }
                        }
                        Ev::Start(n) => {
                            return Err(self.err(format!("unexpected <{n}> inside <array>")))
                        }
                        _ => return Err(self.err("document ends inside <array>")),
                    }
                }
            }
            Tag::Struct => {
                let entries = self.struct_entries(depth + 1)?;
                Ok(Value::Struct(
                    entries
                        .into_iter()
                        .filter_map(|(k, v)| v.map(|v| (k, v)))
                        .collect(),
                ))
            }
            _ => Err(self.error_at(at, format!("unknown value element <{name}>"))),
        }
    }
}

/// Whether a name comes twice among `entries`: compared pairwise while they are few, by
/// a set past that (a record of many entries is not searched once per entry).
fn names_repeat<V>(entries: &[(String, V)]) -> bool {
    if entries.len() <= 16 {
        return (1..entries.len()).any(|i| entries[..i].iter().any(|(k, _)| *k == entries[i].0));
    }
    let mut seen = HashSet::with_capacity(entries.len());
    entries.iter().any(|(k, _)| !seen.insert(k.as_str()))
}

/// `s` without leading and trailing whitespace, reusing its buffer.
fn trimmed(mut s: String) -> String {
    let end = s.trim_end().len();
    s.truncate(end);
    let start = s.len() - s.trim_start().len();
    if start > 0 {
        s.drain(..start);
    }
    s
}

fn unreachable_text() -> Result<(), ParseError> {
    Err(ParseError {
        message: "internal: text where a tag was expected".into(),
        line: 0,
        column: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(doc: &str) -> Result<Vec<Action>, ParseError> {
        let mut out = Vec::new();
        read_changeset(doc.as_bytes(), |a| {
            out.push(a);
            Ok::<(), ParseError>(())
        })?;
        Ok(out)
    }

    #[test]
    fn spec_example() {
        let doc = include_str!("../../testdata/spec-example.xml");
        let actions = read(doc).unwrap();
        assert_eq!(actions.len(), 6);
        let Action::Set { id, record } = &actions[0] else {
            panic!()
        };
        assert_eq!(id, "L1");
        assert_eq!(
            record.get("title"),
            Some(&Value::Str("Loft near the park".into()))
        );
        assert!(record.get("note").is_none());
        assert!(matches!(
            &actions[3],
            Action::RemoveFrom {
                what: RemoveWhat::All,
                ..
            }
        ));
    }

    #[test]
    fn entities_and_cdata() {
        let a = read("<changeset><set-item id='x&amp;1'><properties><struct><entry name='d'><string> a &amp; &lt;b&gt; &#233;&#x4E2D; </string></entry><entry name='c'><string><![CDATA[<raw>]]></string></entry></struct></properties></set-item></changeset>").unwrap();
        let Action::Set { id, record } = &a[0] else {
            panic!()
        };
        assert_eq!(id, "x&1");
        assert_eq!(record.get("d"), Some(&Value::Str("a & <b> é中".into())));
        assert_eq!(record.get("c"), Some(&Value::Str("<raw>".into())));
    }

    #[test]
    fn error_names_line() {
        let doc = "<?xml version='1.0'?>\n<changeset>\n<add-item id='a'/>\n\n   <bogus id='b'/>\n</changeset>";
        let e = read(doc).unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("bogus"));
    }

    #[test]
    fn invalid_forms() {
        for doc in [
            "",
            "not xml",
            "<changes/>",
            "<changeset><set-item id='a'>",
            "<changeset></changeset>trailing",
            "<changeset>oops<add-item id='a'/></changeset>",
            "<changeset><add-item/></changeset>",
            "<changeset><set-item locator='a' provider='p'/></changeset>",
            "<changeset><set-item id='a'><properties><string>x</string></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct/><struct/></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct><entry><string>v</string></entry></struct></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct><entry name='n'><int>1x</int></entry></struct></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct><entry name='n'><real>NaN</real></entry></struct></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct><entry name='n'><real>inf</real></entry></struct></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct><entry name='n'><bool>yes</bool></entry></struct></properties></set-item></changeset>",
            "<changeset><set-item id='a'><properties><struct><entry name='n'><float>1</float></entry></struct></properties></set-item></changeset>",
        ] {
            assert!(read(doc).is_err(), "accepted: {doc}");
        }
    }

    #[test]
    fn an_attribute_never_carries_over_to_the_next_element() {
        // an entry's stray `id` must not name the locator-form action after it
        let a = read("<changeset><set-item id='a'><properties><struct><entry name='n' id='zz' kind='k'><string>v</string></entry></struct></properties></set-item><set-item locator='l' provider='' kind=''/><remove-item id='b'/></changeset>").unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[1].id(), "l");
        assert_eq!(a[2].id(), "b");
        let e = read("<changeset><set-item id='a'><properties><struct><entry name='n' id='zz'/></struct></properties></set-item><set-item locator='l'/></changeset>").unwrap_err();
        assert!(e.message.contains("locator form"), "{e}");
        let e = read("<changeset><set-item id='a'><properties><struct><entry name='n'/><entry id='x'/></struct></properties></set-item></changeset>").unwrap_err();
        assert!(e.message.contains("no name"), "{e}");
    }

    #[test]
    fn lines_are_counted_in_the_document_not_in_its_values() {
        // a character reference to a newline is a value's, not a line of the document
        let doc = "<changeset>\n<set-item id='a'><properties><struct><entry name='d'><string>x&#10;y</string></entry><bogus/></struct></properties></set-item></changeset>";
        let e = read(doc).unwrap_err();
        assert_eq!((e.line, e.column), (2, 86), "{e}");
        // a newline inside a start tag counts once the tag is read
        let doc = "<changeset>\n<set-item\n id='a'><properties><struct><entry name='d'><bogus/></entry></struct></properties></set-item></changeset>";
        let e = read(doc).unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("bogus"), "{e}");
        // and so do the newlines of skipped content and of CDATA
        let doc = "<?xml version='1.0'\n?><!-- a\nb --><changeset><?pi \n?><set-item id='a'><properties><struct><entry name='d'><string><![CDATA[x\ny]]></string></entry>\n  <bogus/></struct></properties></set-item></changeset>";
        let e = read(doc).unwrap_err();
        assert_eq!((e.line, e.column), (6, 3), "{e}");
    }

    /// A repeated attribute is an error wherever it comes, among a few attributes or
    /// many (past those noted on the stack).
    #[test]
    fn repeated_attributes() {
        let tag = |attrs: &str| {
            read(&format!("<changeset><set-item id='a'><properties><struct><entry name='n'{attrs}/></struct></properties></set-item></changeset>"))
        };
        let many: String = (0..10).map(|i| format!(" a{i}='{i}'")).collect();
        assert!(tag(&many).is_ok());
        for again in [" name='m'", " a0='x'", " a8='x'", " a9='x'"] {
            let e = tag(&format!("{many}{again}")).unwrap_err();
            assert!(e.message.contains("is repeated"), "{e}");
        }
    }

    /// An attribute without a name is an error about the tag, at the line the tag
    /// starts on, not one about a missing attribute wherever the tag ends.
    #[test]
    fn an_attribute_without_a_name() {
        for tag in [
            "<set-item ='a'>",
            "<set-item\n='a'>",
            "<set-item id='a' ='b'>",
        ] {
            let doc = format!("<changeset>\n{tag}<properties><struct><entry name='n'/></struct></properties></set-item></changeset>");
            let e = read(&doc).unwrap_err();
            assert_eq!(e.line, 2, "{tag}: {e}");
            assert!(e.message.contains("attribute has no name"), "{tag}: {e}");
        }
        let e = read("<changeset><set-item id='a'><properties><struct><entry = 'n'/></struct></properties></set-item></changeset>").unwrap_err();
        assert!(e.message.contains("attribute has no name"), "{e}");
    }

    /// A UTF-8 byte order mark before the document is not content; elsewhere it is
    /// text (here, before the root: an error).
    #[test]
    fn byte_order_mark() {
        let doc = "<changeset><add-item id='a'/></changeset>";
        assert_eq!(read(&format!("\u{feff}{doc}")).unwrap(), read(doc).unwrap());
        assert!(read(&format!(" \u{feff}{doc}")).is_err());
    }

    #[test]
    fn nesting_limit() {
        let mut v = "<string>x</string>".to_string();
        for _ in 0..70 {
            v = format!("<array><element>{v}</element></array>");
        }
        let doc = format!("<changeset><set-item id='a'><properties><struct><entry name='d'>{v}</entry></struct></properties></set-item></changeset>");
        assert!(read(&doc).unwrap_err().message.contains("nesting"));
    }

    /// A property given twice keeps its first place and takes its last value; an empty
    /// entry sets nothing; the next item's properties are its own.
    #[test]
    fn a_property_given_twice_keeps_its_last_value() {
        let doc = r#"<changeset><set-item id="a"><properties><struct>
            <entry name="x"><string>1</string></entry><entry name="y"><int>2</int></entry>
            <entry name="e"/><entry name="x"><string>3</string></entry>
            </struct></properties></set-item>
            <set-item id="b"><properties><struct><entry name="z"><string>4</string></entry>
            <entry name="e"/></struct></properties></set-item></changeset>"#;
        let actions = read(doc).unwrap();
        let records: Vec<&Record> = actions
            .iter()
            .map(|a| match a {
                Action::Set { record, .. } => record,
                _ => panic!("{a:?}"),
            })
            .collect();
        assert_eq!(
            records[0].0,
            vec![
                ("x".to_string(), Value::Str("3".into())),
                ("y".to_string(), Value::Int(2))
            ]
        );
        assert_eq!(
            records[1].0,
            vec![("z".to_string(), Value::Str("4".into()))]
        );
    }

    /// Past the few entries compared pairwise, a repeated name is found by a set and
    /// the record made in one pass, with the same result.
    #[test]
    fn many_entries_with_repeated_names() {
        let entry = |i: usize, v: usize| format!("<entry name='p{i}'><int>{v}</int></entry>");
        let mut doc = String::from("<changeset><set-item id='a'><properties><struct>");
        for i in 0..30 {
            doc.push_str(&entry(i, i));
        }
        for i in (0..30).rev().step_by(3) {
            doc.push_str(&entry(i, 100 + i));
            doc.push_str(&format!("<entry name='p{i}'/><entry name='q{i}'/>"));
        }
        doc.push_str("</struct></properties></set-item></changeset>");
        let actions = read(&doc).unwrap();
        let Action::Set { record, .. } = &actions[0] else {
            panic!()
        };
        let want: Vec<(String, Value)> = (0..30)
            .map(|i| {
                let v = if i % 3 == 2 { 100 + i } else { i };
                (format!("p{i}"), Value::Int(v as i64))
            })
            .collect();
        assert_eq!(record.0, want);
    }

    #[test]
    fn empty_changeset_forms() {
        assert_eq!(read("<changeset/>").unwrap(), vec![]);
        assert_eq!(read("<?xml version='1.0'?><!DOCTYPE changeset SYSTEM 'http://x/y.dtd'><!-- c --><changeset><?pi x?></changeset>").unwrap(), vec![]);
    }
}

#[cfg(test)]
mod against_quick_xml;

/// Parser throughput on a real file: `DISCERN_PARSE_FILE=bulk.xml cargo test --release -p
/// discern-changeset parse_throughput -- --ignored --nocapture`.
#[cfg(test)]
mod throughput {
    #[test]
    #[ignore]
    fn parse_throughput() {
        let Ok(path) = std::env::var("DISCERN_PARSE_FILE") else {
            return;
        };
        let bytes = std::fs::read(&path).expect("readable file");
        let started = std::time::Instant::now();
        let mut n = 0u64;
        super::read_changeset::<_, super::ParseError>(&bytes[..], |_| {
            n += 1;
            Ok(())
        })
        .expect("valid changeset");
        let s = started.elapsed().as_secs_f64();
        println!(
            "{n} actions, {:.0} MB/s, {:.0} actions/s",
            bytes.len() as f64 / s / 1e6,
            n as f64 / s
        );
    }
}
