//! The changeset reader's XML tokenizer: markup and text pulled from a buffer it refills
//! itself, each event taken straight into the parser's state (`Taken`) — no event
//! value, no copy of a tag into a buffer of its own. It does what the reader needs of
//! XML 1.0 and no more: elements, attributes, text with the predefined entities and
//! character references, CDATA; comments, processing instructions, the declaration and
//! a DOCTYPE skipped; end tags checked against their start tags. It replaced quick-xml
//! here, which the tests keep as its oracle (`QuickXml`: both accept the same documents
//! with the same actions): a 1M bulk load's parsing thread took 11.5 s of CPU with it,
//! 16.8 s with quick-xml's events.

use std::io::{self, Read};

use super::events::{Attrs, Lines, Name, Tag, Taken};

/// Where an event starts (a document offset) and what it was, or an error's offset and
/// message.
pub(super) type Lexed = Result<(u64, Taken), (u64, String)>;

/// What reads a changeset's events: the tokenizer, or (in tests) quick-xml.
pub(super) trait Events {
    /// The next event: text appended to `text`, the attributes the reader uses of an
    /// action's or entry's start tag into `attrs`, newlines of text and skipped content
    /// counted into `lines` (a start tag's are returned, to be counted once it is
    /// handled).
    fn next_event(&mut self, text: &mut String, attrs: &mut Attrs, lines: &mut Lines) -> Lexed;

    /// A string entry or array element in the one form publishers write —
    /// `<entry name="NAME"><string>TEXT</string></entry>` (`named`) or
    /// `<element><string>TEXT</string></element>` — after optional whitespace, taken
    /// whole: its name (`named`) and its text, trimmed. `None`, with nothing taken, for
    /// any other form, which the events then read: references in the name or the text,
    /// other markup, other attributes, spaces or newlines inside the tags, an empty name,
    /// or an element not wholly read in yet.
    fn string_entry(&mut self, _named: bool, _lines: &mut Lines) -> Option<(String, String)> {
        None
    }
}

const FIRST_BUFFER: usize = 256 * 1024;

pub(super) struct Lexer<R> {
    input: R,
    buf: Vec<u8>,
    /// Unread bytes: `buf[pos..end]`.
    pos: usize,
    end: usize,
    /// The document offset of `buf[0]`.
    base: u64,
    input_done: bool,
    /// The names of the open elements, one after another, and where each ends.
    open: Vec<u8>,
    open_ends: Vec<usize>,
    /// An empty element's end, due next (at this offset).
    empty_end: Option<u64>,
    /// Whether the document's first bytes were looked at (for a byte order mark).
    started: bool,
}

fn not_well_formed(at: u64, what: impl std::fmt::Display) -> (u64, String) {
    (at, format!("changeset is not well-formed XML: {what}"))
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// What one try at the next event found.
enum Step {
    Done(u64, Taken),
    /// The event runs past the buffered bytes: read more, then try again.
    More,
}

impl<R: Read> Lexer<R> {
    pub(super) fn new(input: R) -> Self {
        Self::with_buffer(input, FIRST_BUFFER)
    }

    /// A tokenizer whose buffer starts at `bytes` (tests make events straddle it).
    pub(super) fn with_buffer(input: R, bytes: usize) -> Self {
        Lexer {
            input,
            buf: vec![0; bytes.max(1)],
            pos: 0,
            end: 0,
            base: 0,
            input_done: false,
            open: Vec::new(),
            open_ends: Vec::new(),
            empty_end: None,
            started: false,
        }
    }

    /// Reads more input after the unread bytes (moved to the front; the buffer doubles
    /// when they fill it, so an event longer than it is scanned a bounded number of
    /// times). False when the input has ended.
    fn fill(&mut self) -> Result<bool, (u64, String)> {
        if self.input_done {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.input_done = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(not_well_formed(
                        self.base + self.end as u64,
                        format_args!("I/O error: {e}"),
                    ))
                }
            }
        }
    }

    /// An event at `start` not ended in the buffered bytes: more is read, or (input
    /// ended) it is unclosed.
    fn more(&self, start: u64, what: &str) -> Result<Step, (u64, String)> {
        if self.input_done {
            Err(not_well_formed(start, format_args!("unclosed {what}")))
        } else {
            Ok(Step::More)
        }
    }

    /// Skips markup at `pos` whose opening is `open` bytes long, through `close`
    /// (counting its newlines).
    fn skip_to(
        &mut self,
        open: usize,
        close: &[u8],
        what: &str,
        lines: &mut Lines,
    ) -> Result<Step, (u64, String)> {
        let start = self.at(self.pos);
        let bytes = &self.buf[self.pos + open..self.end];
        let Some(i) = memchr::memmem::find(bytes, close) else {
            return self.more(start, what);
        };
        lines.add(&bytes[..i], start + open as u64);
        self.pos += open + i + close.len();
        Ok(Step::Done(start, Taken::Skipped))
    }

    fn at(&self, i: usize) -> u64 {
        self.base + i as u64
    }

    fn step(
        &mut self,
        text: &mut String,
        attrs: &mut Attrs,
        lines: &mut Lines,
    ) -> Result<Step, (u64, String)> {
        let (pos, end) = (self.pos, self.end);
        let start = self.at(pos);
        let bytes = &self.buf[pos..end];
        match bytes[0] {
            b'<' => self.markup(text, attrs, lines),
            b'&' => {
                // (a reference ends at `;`; a `&` or `<` first means it was not one)
                let Some(i) = memchr::memchr3(b';', b'&', b'<', &bytes[1..]) else {
                    return self.more(start, "reference");
                };
                if bytes[1 + i] != b';' {
                    return Err(not_well_formed(start, "unclosed reference"));
                }
                let c = reference(&bytes[1..1 + i]).map_err(|m| (start, m))?;
                text.push(c);
                self.pos += i + 2;
                Ok(Step::Done(start, Taken::Text))
            }
            _ => {
                let len = memchr::memchr2(b'<', b'&', bytes).unwrap_or(bytes.len());
                let run = &bytes[..len];
                let valid = match std::str::from_utf8(run) {
                    Ok(s) => s,
                    // a character cut by the buffer's end: the rest once more is read
                    Err(e) if e.error_len().is_none() && len == bytes.len() && !self.input_done => {
                        if e.valid_up_to() == 0 {
                            return Ok(Step::More);
                        }
                        // (valid up to there, as the error says)
                        std::str::from_utf8(&run[..e.valid_up_to()]).unwrap_or_default()
                    }
                    Err(e) => {
                        return Err((start, format!("invalid text encoding: {e}")));
                    }
                };
                lines.add(valid.as_bytes(), start);
                text.push_str(valid);
                self.pos += valid.len();
                Ok(Step::Done(start, Taken::Text))
            }
        }
    }

    /// Markup at `pos` (`<`).
    fn markup(
        &mut self,
        text: &mut String,
        attrs: &mut Attrs,
        lines: &mut Lines,
    ) -> Result<Step, (u64, String)> {
        // (the longest opening told apart is `<![CDATA[`)
        if self.end - self.pos < 9 && !self.input_done {
            return Ok(Step::More);
        }
        match self.buf[self.pos..self.end].get(1) {
            Some(b'/') => self.end_tag(lines),
            Some(b'?' | b'!') => self.special(text, lines),
            _ => self.start_tag(attrs),
        }
    }

    /// An end tag at `pos`, which must close the innermost open element.
    fn end_tag(&mut self, lines: &mut Lines) -> Result<Step, (u64, String)> {
        let (pos, end) = (self.pos, self.end);
        let start = self.at(pos);
        let bytes = &self.buf[pos..end];
        let Some(gt) = memchr::memchr(b'>', bytes) else {
            return self.more(start, "end tag");
        };
        let inside = &bytes[2..gt];
        let name = trim_end(inside);
        let top = self.open_ends.len().checked_sub(1);
        let expected = top.map(|t| {
            let from = if t == 0 { 0 } else { self.open_ends[t - 1] };
            &self.open[from..self.open_ends[t]]
        });
        if expected != Some(name) {
            let found = String::from_utf8_lossy(name);
            return Err(not_well_formed(
                start,
                match expected {
                    Some(e) => format!(
                        "end tag </{found}> does not match the start tag <{}>",
                        String::from_utf8_lossy(e)
                    ),
                    None => format!("end tag </{found}> closes no element"),
                },
            ));
        }
        lines.add(inside, start + 2);
        self.open.truncate(self.open.len() - name.len());
        self.open_ends.pop();
        self.pos += gt + 1;
        Ok(Step::Done(start, Taken::End))
    }

    /// A processing instruction, comment, CDATA section or DOCTYPE at `pos`.
    fn special(&mut self, text: &mut String, lines: &mut Lines) -> Result<Step, (u64, String)> {
        let (pos, end) = (self.pos, self.end);
        let start = self.at(pos);
        let bytes = &self.buf[pos..end];
        if bytes.starts_with(b"<?>") {
            // (its `?` opens it: it is not also the `?` of its `?>`, as quick-xml had it)
            return Err(not_well_formed(start, "unclosed processing instruction"));
        }
        if bytes.starts_with(b"<?") {
            return self.skip_to(2, b"?>", "processing instruction", lines);
        }
        if bytes.starts_with(b"<!--") {
            return self.skip_to(4, b"-->", "comment", lines);
        }
        if bytes.starts_with(b"<![CDATA[") {
            let Some(i) = memchr::memmem::find(&bytes[9..], b"]]>") else {
                return self.more(start, "CDATA section");
            };
            let content = &bytes[9..9 + i];
            let s = std::str::from_utf8(content)
                .map_err(|e| (start, format!("invalid CDATA encoding: {e}")))?;
            lines.add(content, start + 9);
            text.push_str(s);
            self.pos += i + 12;
            return Ok(Step::Done(start, Taken::Text));
        }
        if bytes.len() >= 9 && bytes[..9].eq_ignore_ascii_case(b"<!DOCTYPE") {
            // (to the `>` outside the internal subset's brackets)
            let mut depth = 0usize;
            let mut close = None;
            for (i, &b) in bytes.iter().enumerate().skip(9) {
                match b {
                    b'[' => depth += 1,
                    b']' => depth = depth.saturating_sub(1),
                    b'>' if depth == 0 => {
                        close = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(gt) = close else {
                return self.more(start, "DOCTYPE");
            };
            lines.add(&bytes[9..gt], start + 9);
            self.pos += gt + 1;
            return Ok(Step::Done(start, Taken::Skipped));
        }
        Err(not_well_formed(start, "unknown markup after <!"))
    }

    /// A start tag at `pos`.
    fn start_tag(&mut self, attrs: &mut Attrs) -> Result<Step, (u64, String)> {
        let (pos, end) = (self.pos, self.end);
        let start = self.at(pos);
        let bytes = &self.buf[pos..end];
        // a start tag: to its `>`, which a quoted attribute value may hold
        let mut i = 1;
        let gt = loop {
            match memchr::memchr3(b'>', b'"', b'\'', &bytes[i..]) {
                None => return self.more(start, "start tag"),
                Some(j) if bytes[i + j] == b'>' => break i + j,
                Some(j) => {
                    let quote = bytes[i + j];
                    match memchr::memchr(quote, &bytes[i + j + 1..]) {
                        None => return self.more(start, "start tag"),
                        Some(k) => i = i + j + 1 + k + 1,
                    }
                }
            }
        };
        let mut inside = &bytes[1..gt];
        let empty = inside.last() == Some(&b'/');
        if empty {
            inside = &inside[..inside.len() - 1];
        }
        let name_len = inside
            .iter()
            .position(|&b| is_space(b))
            .unwrap_or(inside.len());
        let raw_name = &inside[..name_len];
        // (a tag without a name is an unknown element to the reader, as to quick-xml)
        let name = Name::of(raw_name);
        // (newlines inside the tag count once the tag is handled: errors about it name
        // the line it starts on)
        let mut nl = (0u64, 0u64);
        for j in memchr::memchr_iter(b'\n', inside) {
            nl = (nl.0 + 1, start + 1 + j as u64 + 1);
        }
        // only actions and entries carry attributes the reader uses
        if name.tag().is_some_and(|t| t == Tag::Entry || t.is_action()) {
            *attrs = Attrs::default();
            read_attributes(&inside[name_len..], attrs)
                .map_err(|m| (start, format!("bad attribute in <{name}>: {m}")))?;
        }
        if empty {
            // (where an expanded empty element's end would start: after the tag)
            self.empty_end = Some(self.at(pos + gt + 1));
        } else {
            self.open.extend_from_slice(raw_name);
            self.open_ends.push(self.open.len());
        }
        self.pos += gt + 1;
        Ok(Step::Done(start, Taken::Start(name, nl)))
    }
}

/// What `string_entry` expects around a name (in either quotes) and a text.
const ENTRY_OPEN: &[u8] = b"<entry name=";
const ENTRY_NAMED: &[u8] = b"><string>";
const ENTRY_CLOSE: &[u8] = b"</string></entry>";
const ELEMENT_OPEN: &[u8] = b"<element><string>";
const ELEMENT_CLOSE: &[u8] = b"</string></element>";

impl<R: Read> Events for Lexer<R> {
    fn string_entry(&mut self, named: bool, lines: &mut Lines) -> Option<(String, String)> {
        if self.empty_end.is_some() || !self.started {
            return None;
        }
        let bytes = &self.buf[self.pos..self.end];
        let lead = bytes.iter().position(|&b| !is_space(b))?;
        let mut i = lead;
        let mut name = "";
        if named {
            let (&quote, rest) = bytes[i..].strip_prefix(ENTRY_OPEN)?.split_first()?;
            if quote != b'"' && quote != b'\'' {
                return None;
            }
            let len = memchr::memchr(quote, rest)?;
            let raw = &rest[..len];
            // (what `read_attributes` would change or refuse, and a name that is no name)
            if raw.is_empty()
                || raw
                    .iter()
                    .any(|&b| matches!(b, b'&' | b'<' | b'>') || is_space(b))
            {
                return None;
            }
            name = std::str::from_utf8(raw).ok()?;
            i += ENTRY_OPEN.len() + 1 + len + 1;
            bytes[i..].starts_with(ENTRY_NAMED).then_some(())?;
            i += ENTRY_NAMED.len();
        } else {
            bytes[i..].starts_with(ELEMENT_OPEN).then_some(())?;
            i += ELEMENT_OPEN.len();
        }
        let text_at = i;
        let len = memchr::memchr2(b'<', b'&', &bytes[i..])?;
        let text = std::str::from_utf8(&bytes[i..i + len]).ok()?;
        i += len;
        if bytes[i] != b'<' {
            return None;
        }
        let close = if named { ENTRY_CLOSE } else { ELEMENT_CLOSE };
        bytes[i..].starts_with(close).then_some(())?;
        i += close.len();
        let start = self.at(self.pos);
        lines.add(&bytes[..lead], start);
        lines.add(text.as_bytes(), start + text_at as u64);
        let taken = (name.to_owned(), text.trim().to_owned());
        self.pos += i;
        Some(taken)
    }

    fn next_event(&mut self, text: &mut String, attrs: &mut Attrs, lines: &mut Lines) -> Lexed {
        if let Some(at) = self.empty_end.take() {
            return Ok((at, Taken::End));
        }
        loop {
            if self.pos == self.end && !self.fill()? {
                return Ok((self.at(self.pos), Taken::Eof));
            }
            if !self.started {
                // (a UTF-8 byte order mark is not content)
                if self.end - self.pos < 3 && !self.input_done {
                    self.fill()?;
                    continue;
                }
                self.started = true;
                if self.buf[self.pos..self.end].starts_with(b"\xEF\xBB\xBF") {
                    self.pos += 3;
                    continue;
                }
            }
            match self.step(text, attrs, lines)? {
                Step::Done(at, taken) => return Ok((at, taken)),
                // (a step asks for more only while input may come; once it has ended,
                // the step reports the event unclosed)
                Step::More => {
                    self.fill()?;
                }
            }
        }
    }
}

fn trim_end(b: &[u8]) -> &[u8] {
    let n = b.iter().rposition(|&c| !is_space(c)).map_or(0, |i| i + 1);
    &b[..n]
}

/// The character a reference (`name` between `&` and `;`) stands for.
fn reference(name: &[u8]) -> Result<char, String> {
    if let Some(num) = name.strip_prefix(b"#") {
        let (digits, radix) = match num.strip_prefix(b"x") {
            Some(hex) => (hex, 16),
            None => (num, 10),
        };
        let code = std::str::from_utf8(digits)
            .ok()
            .filter(|d| !d.starts_with(['+', '-']))
            .and_then(|d| u32::from_str_radix(d, radix).ok());
        return match code.filter(|&c| c != 0).and_then(char::from_u32) {
            Some(c) => Ok(c),
            None => Err("invalid character reference".into()),
        };
    }
    Ok(match name {
        b"amp" => '&',
        b"lt" => '<',
        b"gt" => '>',
        b"quot" => '"',
        b"apos" => '\'',
        other => {
            return Err(format!(
                "unknown entity &{};",
                String::from_utf8_lossy(other)
            ))
        }
    })
}

/// Reads a start tag's attributes (`rest`: after its name): the ones the reader uses
/// into `attrs`. Every attribute is checked — a name, `=`, a quoted value with valid
/// references, no name twice — even where unused.
fn read_attributes(rest: &[u8], attrs: &mut Attrs) -> Result<(), String> {
    // the names read, for repeats: the first few on the stack (a list allocated per tag
    // was quick-xml's cost here)
    let mut seen: [&[u8]; 8] = [&[]; 8];
    let mut more_seen: Vec<&[u8]> = Vec::new();
    let mut n = 0;
    let mut i = 0;
    loop {
        // (no space is required between attributes: quick-xml, which read them
        // before, required none)
        while i < rest.len() && is_space(rest[i]) {
            i += 1;
        }
        if i == rest.len() {
            return Ok(());
        }
        let key_start = i;
        while i < rest.len() && rest[i] != b'=' && !is_space(rest[i]) {
            i += 1;
        }
        let key = &rest[key_start..i];
        if key.is_empty() {
            // (`<set-item ='a'>`: read as an unnamed attribute, it was ignored, and the
            // error came later, about a missing id, on another line)
            return Err("an attribute has no name".into());
        }
        while i < rest.len() && is_space(rest[i]) {
            i += 1;
        }
        if i == rest.len() || rest[i] != b'=' {
            return Err(format!(
                "attribute {} has no value",
                String::from_utf8_lossy(key)
            ));
        }
        i += 1;
        while i < rest.len() && is_space(rest[i]) {
            i += 1;
        }
        let quote = match rest.get(i) {
            Some(&q @ (b'"' | b'\'')) => q,
            _ => {
                return Err(format!(
                    "the value of attribute {} is not quoted",
                    String::from_utf8_lossy(key)
                ))
            }
        };
        let Some(len) = memchr::memchr(quote, &rest[i + 1..]) else {
            return Err("unclosed attribute value".into());
        };
        let raw = &rest[i + 1..i + 1 + len];
        i += len + 2;
        if seen[..n.min(seen.len())].contains(&key) || more_seen.contains(&key) {
            return Err(format!(
                "attribute {} is repeated",
                String::from_utf8_lossy(key)
            ));
        }
        match seen.get_mut(n) {
            Some(slot) => *slot = key,
            None => more_seen.push(key),
        }
        n += 1;
        let value = unescape(raw)?;
        if let Some(slot) = attrs.slot(key) {
            *slot = Some(value);
        }
    }
}

/// An attribute value with its references replaced.
fn unescape(raw: &[u8]) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    loop {
        let plain = memchr::memchr(b'&', rest).unwrap_or(rest.len());
        out.push_str(
            std::str::from_utf8(&rest[..plain]).map_err(|e| format!("invalid encoding: {e}"))?,
        );
        if plain == rest.len() {
            return Ok(out);
        }
        let Some(semi) = memchr::memchr(b';', &rest[plain..]) else {
            return Err("unclosed reference".into());
        };
        out.push(reference(&rest[plain + 1..plain + semi])?);
        rest = &rest[plain + semi + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The publisher's string entries and elements are taken whole, with their text's
    /// newlines and the whitespace before them counted; any other form is left to the
    /// events.
    #[test]
    fn publisher_string_entries_are_taken_whole() {
        let doc = b"<changeset>\n <entry name=\"a\"><string> x\ny </string></entry>\
                    <element><string>z</string></element><entry name='b'><int>1</int></entry>";
        let mut lexer = Lexer::new(&doc[..]);
        let (mut text, mut attrs, mut lines) = (String::new(), Attrs::default(), Lines::default());
        assert!(matches!(
            lexer.next_event(&mut text, &mut attrs, &mut lines),
            Ok((0, Taken::Start(..)))
        ));
        let entry = lexer.string_entry(true, &mut lines);
        assert_eq!(entry, Some(("a".to_string(), "x\ny".to_string())));
        assert_eq!((lines.count, lines.last), (2, 40));
        // (an element is not an entry)
        assert_eq!(lexer.string_entry(true, &mut lines), None);
        let element = lexer.string_entry(false, &mut lines);
        assert_eq!(element, Some((String::new(), "z".to_string())));
        // (not a string)
        assert_eq!(lexer.string_entry(true, &mut lines), None);
        assert!(matches!(
            lexer.next_event(&mut text, &mut attrs, &mut lines),
            Ok((_, Taken::Start(..)))
        ));
    }
}
