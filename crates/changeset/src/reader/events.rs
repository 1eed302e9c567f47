//! The reader's events: the changeset vocabulary's element names (`Tag`), the
//! attributes it uses, what an event left in the parser's state (`Taken`), the newlines
//! counted for errors' positions (`Lines`); and, in tests and the fuzz target, quick-xml's
//! events taken the same way (`QuickXml`), the tokenizer's oracle.

/// The changeset vocabulary's element names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tag {
    Changeset,
    SetItem,
    AddItem,
    AddToItem,
    RemoveFromItem,
    RemoveItem,
    All,
    Properties,
    Struct,
    Entry,
    Array,
    Element,
    String,
    Int,
    Long,
    Real,
    Bool,
}

impl Tag {
    pub(super) fn of(raw: &[u8]) -> Option<Tag> {
        // (constant-length byte comparisons: no call per candidate name)
        Some(match raw {
            b"entry" => Tag::Entry,
            b"string" => Tag::String,
            b"struct" => Tag::Struct,
            b"element" => Tag::Element,
            b"array" => Tag::Array,
            b"int" => Tag::Int,
            b"real" => Tag::Real,
            b"long" => Tag::Long,
            b"bool" => Tag::Bool,
            b"properties" => Tag::Properties,
            b"set-item" => Tag::SetItem,
            b"add-item" => Tag::AddItem,
            b"add-to-item" => Tag::AddToItem,
            b"remove-from-item" => Tag::RemoveFromItem,
            b"remove-item" => Tag::RemoveItem,
            b"all" => Tag::All,
            b"changeset" => Tag::Changeset,
            _ => return None,
        })
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Tag::Changeset => "changeset",
            Tag::SetItem => "set-item",
            Tag::AddItem => "add-item",
            Tag::AddToItem => "add-to-item",
            Tag::RemoveFromItem => "remove-from-item",
            Tag::RemoveItem => "remove-item",
            Tag::All => "all",
            Tag::Properties => "properties",
            Tag::Struct => "struct",
            Tag::Entry => "entry",
            Tag::Array => "array",
            Tag::Element => "element",
            Tag::String => "string",
            Tag::Int => "int",
            Tag::Long => "long",
            Tag::Real => "real",
            Tag::Bool => "bool",
        }
    }

    pub(super) fn is_action(self) -> bool {
        matches!(
            self,
            Tag::SetItem | Tag::AddItem | Tag::AddToItem | Tag::RemoveFromItem | Tag::RemoveItem
        )
    }
}

/// An element name: the changeset vocabulary without allocating, anything else owned
/// (it can only be reported in an error).
#[derive(Debug)]
pub(super) enum Name {
    Known(Tag),
    Other(String),
}

impl Name {
    pub(super) fn of(raw: &[u8]) -> Name {
        match Tag::of(raw) {
            Some(t) => Name::Known(t),
            None => Name::Other(String::from_utf8_lossy(raw).into_owned()),
        }
    }

    pub(super) fn tag(&self) -> Option<Tag> {
        match self {
            Name::Known(t) => Some(*t),
            Name::Other(_) => None,
        }
    }

    pub(super) fn is(&self, tag: Tag) -> bool {
        self.tag() == Some(tag)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Name::Known(t) => t.as_str(),
            Name::Other(s) => s,
        })
    }
}

/// The attributes the reader uses: an action's item naming and an entry's name. Other
/// attributes are checked (well-formed, not repeated) and ignored.
#[derive(Debug, Default)]
pub(super) struct Attrs {
    pub(super) id: Option<String>,
    pub(super) locator: Option<String>,
    pub(super) provider: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) name: Option<String>,
}

impl Attrs {
    pub(super) fn slot(&mut self, key: &[u8]) -> Option<&mut Option<String>> {
        match key {
            b"id" => Some(&mut self.id),
            b"locator" => Some(&mut self.locator),
            b"provider" => Some(&mut self.provider),
            b"kind" => Some(&mut self.kind),
            b"name" => Some(&mut self.name),
            _ => None,
        }
    }
}

/// One pulled event. A start tag's attributes and a text's content wait in the parser
/// (`Parser::attrs`, `Parser::text`): events stay small, and the text buffer is reused.
pub(super) enum Ev {
    Start(Name),
    End,
    Text,
    Eof,
}

/// Newlines seen so far, for errors' line and column.
#[derive(Default)]
pub(super) struct Lines {
    /// Newlines before the current event.
    pub(super) count: u64,
    /// The byte offset just past the last one.
    pub(super) last: u64,
}

impl Lines {
    pub(super) fn add(&mut self, bytes: &[u8], base: u64) {
        if let Some(last) = memchr::memrchr(b'\n', bytes) {
            self.count += memchr::memchr_iter(b'\n', bytes).count() as u64;
            self.last = base + last as u64 + 1;
        }
    }

    /// Counts the newlines of content that is skipped.
    #[cfg(any(test, feature = "oracle"))]
    fn skip(&mut self, bytes: &[u8], base: u64) -> Taken {
        self.add(bytes, base);
        Taken::Skipped
    }
}

/// What `take_event` made of an event.
pub(super) enum Taken {
    /// Text, appended to the parser's text.
    Text,
    /// Name, and the newlines inside the tag: (count, offset after the last). Its
    /// attributes are in the parser's `attrs`.
    Start(Name, (u64, u64)),
    End,
    Eof,
    /// Skipped content (its newlines counted).
    Skipped,
}

/// quick-xml's events as the reader takes them: the tokenizer's oracle in tests and in
/// the `changeset` fuzz target (feature `oracle`).
#[cfg(any(test, feature = "oracle"))]
pub(super) struct QuickXml<R> {
    reader: quick_xml::Reader<R>,
    buf: Vec<u8>,
}

#[cfg(any(test, feature = "oracle"))]
impl<R: std::io::BufRead> QuickXml<R> {
    pub(super) fn new(input: R) -> Self {
        let mut reader = quick_xml::Reader::from_reader(input);
        let cfg = reader.config_mut();
        cfg.expand_empty_elements = true;
        cfg.check_end_names = true;
        cfg.trim_text(false);
        QuickXml {
            reader,
            buf: Vec::new(),
        }
    }
}

#[cfg(any(test, feature = "oracle"))]
impl<R: std::io::BufRead> super::lexer::Events for QuickXml<R> {
    fn next_event(
        &mut self,
        text: &mut String,
        attrs: &mut Attrs,
        lines: &mut Lines,
    ) -> super::lexer::Lexed {
        let start = self.reader.buffer_position();
        self.buf.clear();
        match self.reader.read_event_into(&mut self.buf) {
            Ok(ev) => take_event(ev, start, text, attrs, lines).map(|t| (start, t)),
            Err(e) => Err((
                self.reader.error_position(),
                format!("changeset is not well-formed XML: {e}"),
            )),
        }
    }
}

/// Takes `ev`'s content into the parser's state: text appended to `text`, the
/// attributes of a start tag the reader uses into `attrs`, newlines of text and of
/// skipped content into `lines`.
#[cfg(any(test, feature = "oracle"))]
fn take_event(
    ev: quick_xml::events::Event<'_>,
    start: u64,
    text: &mut String,
    attrs: &mut Attrs,
    lines: &mut Lines,
) -> Result<Taken, (u64, String)> {
    use quick_xml::events::Event;
    Ok(match ev {
        Event::Text(t) => {
            let s = t
                .decode()
                .map_err(|e| (start, format!("invalid text encoding: {e}")))?;
            lines.add(s.as_bytes(), start);
            text.push_str(&s);
            Taken::Text
        }
        Event::CData(t) => {
            let s = t
                .decode()
                .map_err(|e| (start, format!("invalid CDATA encoding: {e}")))?;
            lines.add(s.as_bytes(), start + "<![CDATA[".len() as u64);
            text.push_str(&s);
            Taken::Text
        }
        Event::GeneralRef(r) => {
            let c = if r.is_char_ref() {
                match r.resolve_char_ref() {
                    Ok(Some(c)) => c,
                    _ => return Err((start, "invalid character reference".into())),
                }
            } else {
                match r.as_ref() {
                    b"amp" => '&',
                    b"lt" => '<',
                    b"gt" => '>',
                    b"quot" => '"',
                    b"apos" => '\'',
                    other => {
                        return Err((
                            start,
                            format!("unknown entity &{};", String::from_utf8_lossy(other)),
                        ))
                    }
                }
            };
            text.push(c);
            Taken::Text
        }
        Event::Start(s) => {
            let name = Name::of(s.name().as_ref());
            let raw: &[u8] = &s;
            let mut nl = (0u64, 0u64);
            for i in memchr_iter(raw) {
                nl = (nl.0 + 1, start + 1 + i as u64 + 1);
            }
            // only actions and entries carry attributes the reader uses
            let wants_attrs = name.tag().is_some_and(|t| t == Tag::Entry || t.is_action());
            if wants_attrs {
                *attrs = Attrs::default();
                for a in s.attributes() {
                    let a = a.map_err(|e| (start, format!("bad attribute in <{name}>: {e}")))?;
                    // (every value is unescaped: a bad reference is an error even where unused)
                    let val = a
                        .unescape_value()
                        .map_err(|e| (start, format!("bad attribute value in <{name}>: {e}")))?;
                    if let Some(slot) = attrs.slot(a.key.as_ref()) {
                        *slot = Some(val.into_owned());
                    }
                }
            }
            Taken::Start(name, nl)
        }
        Event::End(_) => Taken::End,
        Event::Eof => Taken::Eof,
        // skipped content's newlines, from where it starts after its markup
        Event::Comment(c) => lines.skip(&c, start + "<!--".len() as u64),
        Event::PI(p) => lines.skip(&p, start + "<?".len() as u64),
        Event::Decl(d) => lines.skip(&d, start + "<?".len() as u64),
        Event::DocType(d) => lines.skip(&d, start + "<!DOCTYPE".len() as u64),
        // expand_empty_elements turns Empty into Start + End
        Event::Empty(_) => Taken::Skipped,
    })
}

#[cfg(any(test, feature = "oracle"))]
fn memchr_iter(raw: &[u8]) -> impl Iterator<Item = usize> + '_ {
    memchr::memchr_iter(b'\n', raw)
}
