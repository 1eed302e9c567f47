//! Text analysis (SPEC §6.3): tokenize → fold accents → lower-case → stop words → stem.

use std::sync::Arc;

use hashbrown::HashSet;

use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

/// Lucene's standard English stop word list.
pub const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokenizer {
    WordDelimiter,
    Standard,
    Whitespace,
}

impl Tokenizer {
    pub fn parse(s: &str) -> Option<Tokenizer> {
        match s {
            "wordDelimiter" => Some(Tokenizer::WordDelimiter),
            "standard" => Some(Tokenizer::Standard),
            "whitespace" => Some(Tokenizer::Whitespace),
            _ => None,
        }
    }
}

/// A field's stop words, with a filter in front of the set: most tokens are no stop
/// word, and a token's length and its first and last bytes rule most of them out
/// without hashing it (the set lookup was a fifth of analysing a text).
struct StopWords {
    set: HashSet<String>,
    /// Bit `n`: a stop word is `n` bytes long (bit 63: 63 or more).
    lens: u64,
    /// Bit `first << 8 | last`: a stop word starts and ends with these bytes.
    ends: Box<[u64; 1024]>,
}

impl StopWords {
    fn new(set: HashSet<String>) -> StopWords {
        let mut lens = 0u64;
        let mut ends = Box::new([0u64; 1024]);
        for w in &set {
            lens |= 1 << w.len().min(63);
            let at = Self::ends_at(w.as_bytes());
            ends[at / 64] |= 1 << (at % 64);
        }
        StopWords { set, lens, ends }
    }

    fn ends_at(w: &[u8]) -> usize {
        match w {
            [] => 0,
            [first, .., last] => usize::from(*first) << 8 | usize::from(*last),
            [only] => usize::from(*only) << 8 | usize::from(*only),
        }
    }

    fn contains(&self, w: &str) -> bool {
        let at = Self::ends_at(w.as_bytes());
        self.lens & (1 << w.len().min(63)) != 0
            && self.ends[at / 64] & (1 << (at % 64)) != 0
            && self.set.contains(w)
    }
}

/// One field's analysis chain. Cheap to clone.
#[derive(Clone)]
pub struct Analyzer {
    pub tokenizer: Tokenizer,
    stop_words: Arc<StopWords>,
    stem: bool,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("tokenizer", &self.tokenizer)
            .field("stop_words", &self.stop_words.set.len())
            .field("stem", &self.stem)
            .finish()
    }
}

impl Analyzer {
    /// `stop_words`: `None` = the standard English list; `Some("")` = none.
    pub fn new(tokenizer: Tokenizer, stop_words: Option<&str>, stem: bool) -> Analyzer {
        let set: HashSet<String> = match stop_words {
            None => ENGLISH_STOP_WORDS.iter().map(|s| s.to_string()).collect(),
            Some(list) => list
                .split(',')
                .map(|w| fold(w.trim()))
                .filter(|w| !w.is_empty())
                .collect(),
        };
        Analyzer {
            tokenizer,
            stop_words: Arc::new(StopWords::new(set)),
            stem,
        }
    }

    /// The analysed tokens of `text`, in order.
    pub fn tokens(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_token(text, |t| out.push(t.to_string()));
        out
    }

    /// Calls `f` with each analysed token of `text`, in order. Tokens are built in two
    /// reused buffers, so the only allocation per token is the stemmer's.
    pub fn for_each_token(&self, text: &str, mut f: impl FnMut(&str)) {
        let mut emit = |raw: &str| {
            if raw.is_empty() || self.stop_words.contains(raw) {
                return;
            }
            if self.stem {
                f(&stemmer().stem(raw));
            } else {
                f(raw);
            }
        };
        let mut buf = String::new();
        match self.tokenizer {
            Tokenizer::Whitespace => {
                for w in text.split_whitespace() {
                    buf.clear();
                    fold_into(w, &mut buf);
                    emit(&buf);
                }
            }
            Tokenizer::Standard => {
                for w in text.unicode_words() {
                    buf.clear();
                    fold_into(strip_possessive(w), &mut buf);
                    emit(&buf);
                }
            }
            Tokenizer::WordDelimiter if text.is_ascii() => delimit_ascii(text, &mut buf, &mut emit),
            Tokenizer::WordDelimiter => delimit(text, &mut buf, &mut emit),
        }
    }
}

/// One word of a text as did-you-mean sees it (SPEC §9.1): its byte span in the text
/// and its analysed term (`None` for a stop word, which is not a token).
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    pub start: usize,
    pub end: usize,
    pub term: Option<String>,
}

impl Analyzer {
    /// The words of `text` with their spans, so that a word can be replaced in place.
    /// `wordDelimiter` words are the parts it splits a chunk into (never the joined
    /// form, which spans punctuation), `standard` words are UAX #29 words, `whitespace`
    /// words are whitespace-separated chunks.
    pub fn words(&self, text: &str) -> Vec<Word> {
        let mut spans: Vec<(usize, usize)> = Vec::new();
        match self.tokenizer {
            Tokenizer::Whitespace => split_spans(text, char::is_whitespace, &mut spans),
            Tokenizer::Standard => {
                for (i, w) in text.unicode_word_indices() {
                    let w = strip_possessive(w);
                    spans.push((i, i + w.len()));
                }
            }
            Tokenizer::WordDelimiter => {
                let mut runs = Vec::new();
                split_spans(text, |c| !c.is_alphanumeric(), &mut runs);
                for (a, b) in runs {
                    // a possessive `'s` is dropped, not a word of its own
                    let w = &text[a..b];
                    if text[..a].ends_with(['\'', '\u{2019}']) && (w == "s" || w == "S") {
                        continue;
                    }
                    split_case_changes(text, a, b, &mut spans);
                }
            }
        }
        spans
            .into_iter()
            .map(|(start, end)| {
                let raw = fold(&text[start..end]);
                let term = if raw.is_empty() || self.stop_words.contains(&raw) {
                    None
                } else if self.stem {
                    Some(stemmer().stem(&raw).into_owned())
                } else {
                    Some(raw)
                };
                Word { start, end, term }
            })
            .collect()
    }
}

/// Splits an alphanumeric run where the index's word delimiter splits it (lower→upper,
/// letter↔digit), so that every word is one of the parts the index holds.
fn split_case_changes(text: &str, a: usize, b: usize, out: &mut Vec<(usize, usize)>) {
    let mut start = a;
    let mut prev: Option<Class> = None;
    for (i, c) in text[a..b].char_indices() {
        let k = class(c);
        if let Some(p) = prev {
            if splits(p, k) {
                out.push((start, a + i));
                start = a + i;
            }
        }
        prev = Some(k);
    }
    out.push((start, b));
}

/// Byte spans of the maximal runs of characters that are not separators.
fn split_spans(text: &str, sep: impl Fn(char) -> bool, out: &mut Vec<(usize, usize)>) {
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (sep(c), start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, text.len()));
    }
}

fn stemmer() -> &'static rust_stemmers::Stemmer {
    static S: std::sync::OnceLock<rust_stemmers::Stemmer> = std::sync::OnceLock::new();
    S.get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English))
}

/// Lower-cases and folds accents (`É` → `e`).
pub fn fold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    fold_into(s, &mut out);
    out
}

/// Appends `s` lower-cased and accent-folded to `out`.
pub fn fold_into(s: &str, out: &mut String) {
    if s.is_ascii() {
        out.extend(s.bytes().map(|b| b.to_ascii_lowercase() as char));
        return;
    }
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            for d in c.nfd() {
                if !is_combining_mark(d) {
                    out.extend(d.to_lowercase());
                }
            }
        }
    }
}

fn strip_possessive(w: &str) -> &str {
    for suffix in ["'s", "'S", "\u{2019}s", "\u{2019}S"] {
        if let Some(stem) = w.strip_suffix(suffix) {
            return stem;
        }
    }
    w
}

#[derive(PartialEq, Clone, Copy)]
enum Class {
    Lower,
    Upper,
    Digit,
    Other,
}

fn class(c: char) -> Class {
    if c.is_numeric() {
        Class::Digit
    } else if c.is_uppercase() {
        Class::Upper
    } else if c.is_alphabetic() {
        Class::Lower
    } else {
        Class::Other
    }
}

/// Whether the word delimiter splits between a character of class `prev` and one of
/// class `next` within an alphanumeric run (lower→upper, letter↔digit).
fn splits(prev: Class, next: Class) -> bool {
    matches!(
        (prev, next),
        (Class::Lower, Class::Upper)
            | (Class::Digit, Class::Lower | Class::Upper)
            | (Class::Lower | Class::Upper, Class::Digit)
    )
}

/// Splits a whitespace-free chunk on non-alphanumerics, lower→upper case changes and
/// letter↔digit changes; emits the parts and, when there are several, their join.
/// `buf` and `joined` are scratch buffers.
fn word_delimiter(chunk: &str, buf: &mut String, joined: &mut String, emit: &mut impl FnMut(&str)) {
    let chunk = chunk_words(chunk);
    let classes = chunk.char_indices().map(|(i, c)| (i, class(c)));
    emit_parts(chunk, classes, fold_into, buf, joined, emit);
}

/// What the word delimiter splits of a chunk: without its trailing punctuation and a
/// possessive `'s`.
fn chunk_words(chunk: &str) -> &str {
    strip_possessive(chunk.trim_end_matches(|c: char| !c.is_alphanumeric()))
}

/// Emits the parts of `chunk` — its alphanumeric runs, split where `splits` says, given
/// each character's byte offset and class by `classes` — each folded by `fold`, and
/// their join when there are several.
fn emit_parts(
    chunk: &str,
    classes: impl Iterator<Item = (usize, Class)>,
    fold: impl Fn(&str, &mut String),
    buf: &mut String,
    joined: &mut String,
    emit: &mut impl FnMut(&str),
) {
    joined.clear();
    let mut parts = 0usize;
    let mut part = |a: usize, b: usize| {
        buf.clear();
        fold(&chunk[a..b], buf);
        emit(buf);
        joined.push_str(buf);
        parts += 1;
    };
    let mut start: Option<usize> = None;
    let mut prev = Class::Other;
    for (i, k) in classes {
        if k == Class::Other {
            if let Some(s) = start.take() {
                part(s, i);
            }
            prev = Class::Other;
            continue;
        }
        match start {
            Some(s) if splits(prev, k) => {
                part(s, i);
                start = Some(i);
            }
            Some(_) => {}
            None => start = Some(i),
        }
        prev = k;
    }
    if let Some(s) = start {
        part(s, chunk.len());
    }
    if parts > 1 {
        emit(joined);
    }
}

/// The word delimiter over a text: its whitespace-separated chunks, each split by
/// `word_delimiter`.
fn delimit(text: &str, buf: &mut String, emit: &mut impl FnMut(&str)) {
    let mut joined = String::new();
    for chunk in text.split_whitespace() {
        word_delimiter(chunk, buf, &mut joined, emit);
    }
}

/// `delimit` for an ASCII text (the same tokens), a byte at a time.
fn delimit_ascii(text: &str, buf: &mut String, emit: &mut impl FnMut(&str)) {
    let mut joined = String::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && is_ascii_space(b[i]) {
            i += 1;
        }
        let start = i;
        while i < b.len() && !is_ascii_space(b[i]) {
            i += 1;
        }
        if start < i {
            word_delimiter_ascii(&text[start..i], buf, &mut joined, emit);
        }
    }
}

/// `char::is_whitespace` for an ASCII character (tab, line feed, vertical tab, form
/// feed, carriage return, space).
fn is_ascii_space(c: u8) -> bool {
    matches!(c, b'\t'..=b'\r' | b' ')
}

/// `word_delimiter` for an ASCII chunk, a byte at a time: the same parts, without the
/// Unicode tables (an ASCII character's class is its range) or decomposition (folding is
/// lower-casing). A part already in lower case is emitted from the text itself, and the
/// join is made only once a second part comes (most chunks are one lower-case word).
/// Most text is ASCII; generated listings' text fields analyse at ~80 MB/s on one core
/// this way (~57 MB/s before the lower-case shortcut), ~37 MB/s the general way
/// (`analysis_throughput` in crates/engine/tests/extract_throughput.rs).
fn word_delimiter_ascii(
    chunk: &str,
    buf: &mut String,
    joined: &mut String,
    emit: &mut impl FnMut(&str),
) {
    let b = chunk.as_bytes();
    // `chunk_words`: without trailing non-alphanumerics, then a possessive `'s`
    let mut end = b.len();
    while end > 0 && !b[end - 1].is_ascii_alphanumeric() {
        end -= 1;
    }
    if end >= 2 && b[end - 2] == b'\'' && matches!(b[end - 1], b's' | b'S') {
        end -= 2;
    }
    let class = |c: u8| match c {
        b'0'..=b'9' => Class::Digit,
        b'A'..=b'Z' => Class::Upper,
        b'a'..=b'z' => Class::Lower,
        _ => Class::Other,
    };
    let mut parts = 0usize;
    // the first part, joined with the next only if one comes
    let mut first = 0..0;
    let mut i = 0;
    while i < end {
        if !b[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        let mut prev = class(b[i]);
        let mut upper = prev == Class::Upper;
        i += 1;
        while i < end {
            let k = class(b[i]);
            if k == Class::Other || splits(prev, k) {
                break;
            }
            upper |= k == Class::Upper;
            prev = k;
            i += 1;
        }
        let part = &chunk[start..i];
        let folded = if upper {
            buf.clear();
            buf.push_str(part);
            buf.make_ascii_lowercase();
            &buf[..]
        } else {
            part
        };
        emit(folded);
        match parts {
            0 => first = start..i,
            1 => {
                joined.clear();
                joined.push_str(&chunk[first.clone()]);
                joined.make_ascii_lowercase();
                joined.push_str(folded);
            }
            _ => joined.push_str(folded),
        }
        parts += 1;
    }
    if parts > 1 {
        emit(joined);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn wd(s: &str) -> Vec<String> {
        Analyzer::new(Tokenizer::WordDelimiter, Some(""), false).tokens(s)
    }

    #[test]
    fn word_delimiter_forms() {
        assert_eq!(wd("Sunny LOFT, Café!"), ["sunny", "loft", "cafe"]);
        assert_eq!(wd("Wi-Fi"), ["wi", "fi", "wifi"]);
        assert_eq!(
            wd("PowerShot SD800"),
            ["power", "shot", "powershot", "sd", "800", "sd800"]
        );
        assert_eq!(wd("camera's lens"), ["camera", "lens"]);
    }

    #[test]
    fn stop_words_and_stemming() {
        let a = Analyzer::new(Tokenizer::WordDelimiter, None, false);
        assert_eq!(a.tokens("The quick fox"), ["quick", "fox"]);
        let s = Analyzer::new(Tokenizer::WordDelimiter, Some(""), true);
        assert_eq!(s.tokens("running cats"), ["run", "cat"]);
    }

    #[test]
    fn stop_words_of_any_length() {
        let long = "x".repeat(70);
        let a = Analyzer::new(
            Tokenizer::Whitespace,
            Some(&format!("q, {long}, ab")),
            false,
        );
        let text = format!("q qq {long} {} ab ba", "x".repeat(69));
        assert_eq!(a.tokens(&text), ["qq", &"x".repeat(69), "ba"]);
    }

    #[test]
    fn other_tokenizers() {
        let st = Analyzer::new(Tokenizer::Standard, Some(""), false);
        assert_eq!(st.tokens("PowerShot wi-fi"), ["powershot", "wi", "fi"]);
        let ws = Analyzer::new(Tokenizer::Whitespace, Some(""), false);
        assert_eq!(ws.tokens("PowerShot wi-fi"), ["powershot", "wi-fi"]);
    }

    #[test]
    fn words_have_spans_and_terms() {
        let a = Analyzer::new(Tokenizer::WordDelimiter, None, false);
        let w = a.words("Chiken & the Soup's");
        let got: Vec<_> = w
            .iter()
            .map(|w| (w.start, w.end, w.term.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (0, 6, Some("chiken")),
                (9, 12, None),
                (13, 17, Some("soup"))
            ]
        );
        let ws = Analyzer::new(Tokenizer::Whitespace, Some(""), false);
        let w = ws.words(" wi-fi  x");
        assert_eq!((w[0].start, w[0].end), (1, 6));
        assert_eq!((w[1].start, w[1].end), (8, 9));
    }

    proptest! {
        #[test]
        fn word_terms_are_index_terms(s in "[a-zA-Z ,.-]{0,40}") {
            // every word's term is among the tokens the index holds for the same text
            let a = Analyzer::new(Tokenizer::WordDelimiter, Some(""), false);
            let tokens = a.tokens(&s);
            for w in a.words(&s) {
                let t = w.term.unwrap();
                prop_assert!(tokens.contains(&t), "{} not in {:?}", t, tokens);
            }
        }

        #[test]
        fn ascii_text_splits_as_any_text(s in "[a-zA-Z0-9 '\\t\\x0b\\x0c\\r\\n,.;:!?&()/_-]{0,60}") {
            // the byte-at-a-time path gives, token for token, what the general one gives
            let (mut fast, mut general) = (Vec::new(), Vec::new());
            delimit_ascii(&s, &mut String::new(), &mut |t: &str| fast.push(t.to_string()));
            delimit(&s, &mut String::new(), &mut |t: &str| general.push(t.to_string()));
            prop_assert_eq!(fast, general);
        }

        #[test]
        fn stop_words_are_found_and_others_not(
            w in prop_oneof![
                proptest::sample::select(ENGLISH_STOP_WORDS).prop_map(String::from),
                "[a-z]{0,7}",
            ]
        ) {
            let a = Analyzer::new(Tokenizer::WordDelimiter, None, false);
            prop_assert_eq!(a.stop_words.contains(&w), ENGLISH_STOP_WORDS.contains(&w.as_str()));
        }

        #[test]
        fn tokens_are_lowercase_and_nonempty(s in "\\PC{0,40}") {
            for t in wd(&s) {
                prop_assert!(!t.is_empty());
                prop_assert_eq!(t.clone(), fold(&t));
            }
        }
    }
}
