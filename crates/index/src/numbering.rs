//! Strings as numbers, numbered in the order first met: a keyword dimension's keys
//! (for facet counting, `keys.rs`) and a text dimension's vocabulary (its documents'
//! tokens are held as these numbers, `TermList`). A numbering is shared by every
//! snapshot of one dimensions document and only ever appended to, so a number means the
//! same string in every column and row holding it, whichever snapshot made it. A
//! string no document holds any more keeps its number until the dimensions change or
//! the engine restarts from a rebuilt index.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use discern_dimensions::{
    text_tokens, DimensionKind, Dimensions, StrList, TermList, TermListBuilder, TextSpec,
};
use discern_model::Record;

#[derive(Default)]
pub(crate) struct Numbering {
    numbered: RwLock<Numbered>,
}

#[derive(Default)]
pub(crate) struct Numbered {
    by_string: ByString,
    strings: Vec<Arc<str>>,
    /// The strings' bytes, summed as they are numbered (`Numbering::bytes`: a walk over
    /// a million-token vocabulary's strings took tens of milliseconds a metrics refresh).
    string_bytes: usize,
}

/// Per dimension, its vocabulary if it is a text dimension.
pub(crate) type Vocabularies = Arc<[Option<Arc<Numbering>>]>;

/// Per text dimension, a vocabulary numbering nothing yet (`None` for the others).
pub(crate) fn vocabularies_for(dims: &Dimensions) -> Vocabularies {
    dims.dims
        .iter()
        .map(|d| matches!(d.kind, DimensionKind::Text(_)).then(|| Arc::new(Numbering::default())))
        .collect()
}

impl Numbering {
    /// A numbering of `strings`, numbered in that order (a saved vocabulary read back);
    /// `None` if a string repeats.
    pub(crate) fn from_strings(strings: Vec<Arc<str>>) -> Option<Numbering> {
        let mut by_string = ByString::with_capacity(strings.len());
        let mut string_bytes = 0;
        for (n, s) in strings.iter().enumerate() {
            if by_string.find(s, &strings).is_some() {
                return None;
            }
            by_string.insert(s, n as u32, &strings);
            string_bytes += s.len();
        }
        Some(Numbering {
            numbered: RwLock::new(Numbered {
                by_string,
                strings,
                string_bytes,
            }),
        })
    }

    /// How many strings have a number (every number is below this).
    pub(crate) fn len(&self) -> usize {
        self.read().strings.len()
    }

    /// The strings numbered `ns`, in that order.
    pub(crate) fn strings(&self, ns: impl Iterator<Item = u32>) -> Vec<Arc<str>> {
        let numbered = self.read();
        ns.filter_map(|n| numbered.strings.get(n as usize).cloned())
            .collect()
    }

    /// The numbers of `strings`, each string numbered when first met.
    pub(crate) fn number<'k>(&self, strings: impl Iterator<Item = &'k str> + Clone) -> Vec<u32> {
        const UNSEEN: u32 = u32::MAX;
        let mut out: Vec<u32> = {
            let numbered = self.read();
            strings
                .clone()
                .map(|k| numbered.find(k).unwrap_or(UNSEEN))
                .collect()
        };
        if out.contains(&UNSEEN) {
            let mut numbered = self.write();
            for (n, k) in out.iter_mut().zip(strings) {
                if *n == UNSEEN {
                    *n = numbered.number(k);
                }
            }
        }
        out
    }

    /// A text value's tokens (`fields`, one group per field) as numbers, each token
    /// numbered when first met.
    pub(crate) fn number_text(&self, fields: &StrList) -> TermList {
        let numbers = self.number(fields.iter());
        let mut b = TermListBuilder::default();
        let mut numbers = numbers.into_iter();
        for g in 0..fields.groups() {
            for n in numbers.by_ref().take(fields.group_range(g).len()) {
                b.push(n);
            }
            b.end_group();
        }
        // (an ungrouped list, which extraction never makes, is one field)
        numbers.for_each(|n| b.push(n));
        b.finish()
    }

    /// `spec`'s tokens of `record` as numbers, one group per field, each token numbered
    /// when first met: `number_text` of the value extraction gives, without the list of
    /// token strings between the analysis and the numbers.
    pub(crate) fn number_record_text(&self, spec: &TextSpec, record: &Record) -> TermList {
        const UNSEEN: u32 = u32::MAX;
        let mut numbers: Vec<u32> = Vec::with_capacity(64);
        let mut field_ends: Vec<usize> = Vec::with_capacity(spec.fields.len());
        // (where a token first met sits, and the token)
        let mut unseen: Vec<(usize, String)> = Vec::new();
        {
            let numbered = self.read();
            text_tokens(spec, record, &mut |token| match token {
                Some(token) => {
                    let n = numbered.find(token).unwrap_or_else(|| {
                        unseen.push((numbers.len(), token.to_string()));
                        UNSEEN
                    });
                    numbers.push(n);
                }
                None => field_ends.push(numbers.len()),
            });
        }
        if !unseen.is_empty() {
            let mut numbered = self.write();
            for (at, token) in unseen {
                numbers[at] = numbered.number(&token);
            }
        }
        let mut b = TermListBuilder::default();
        let mut from = 0;
        for end in field_ends {
            numbers[from..end].iter().for_each(|&n| b.push(n));
            b.end_group();
            from = end;
        }
        b.finish()
    }

    /// Rough bytes held: each string, its map entry and its place in the list.
    pub(crate) fn bytes(&self) -> usize {
        let numbered = self.read();
        numbered.string_bytes + 64 * numbered.strings.len()
    }

    /// The numbering as it stands, for many lookups under one lock.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Numbered> {
        // a panic while numbering leaves every number it gave valid: the lock's poison
        // says nothing about the data
        self.numbered.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Numbered> {
        self.numbered.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Numbered {
    /// The number of `s`, if it has one.
    fn find(&self, s: &str) -> Option<u32> {
        self.by_string.find(s, &self.strings)
    }

    fn number(&mut self, s: &str) -> u32 {
        if let Some(n) = self.find(s) {
            return n;
        }
        let n = self.strings.len() as u32;
        self.strings.push(s.into());
        self.by_string.insert(s, n, &self.strings);
        self.string_bytes += s.len();
        n
    }

    /// The string numbered `n`.
    pub(crate) fn get(&self, n: u32) -> Option<&str> {
        self.strings.get(n as usize).map(|s| &**s)
    }

    /// Every string, in number order.
    pub(crate) fn all(&self) -> &[Arc<str>] {
        &self.strings
    }

    /// A text value's numbers (`terms`) as its tokens again, one group per field.
    pub(crate) fn tokens(&self, terms: &TermList) -> StrList {
        let mut b = discern_dimensions::StrListBuilder::default();
        for g in 0..terms.groups() {
            terms
                .group(g)
                .for_each(|n| b.push(self.get(n).unwrap_or_default()));
            b.end_group();
        }
        b.finish()
    }
}

/// A numbering's index from string to number: a hash table whose entries hold a
/// string's first `HEAD` bytes and its length beside its number, so that a lookup of a
/// string that short (most words) compares within the table, without reading the
/// string's own allocation (a cache miss a lookup in a large vocabulary: a map keyed by
/// the shared strings spent half its time there). A longer string is compared with the
/// numbering's copy once its head matches.
#[derive(Default)]
struct ByString {
    table: hashbrown::HashTable<Entry>,
    hasher: hashbrown::DefaultHashBuilder,
}

const HEAD: usize = 15;
/// `Entry::len` of a string longer than `HEAD` bytes.
const LONG: u8 = u8::MAX;

#[derive(Clone, Copy)]
struct Entry {
    /// The string's first bytes, zero after its end.
    head: [u8; HEAD],
    /// The string's length, or `LONG`.
    len: u8,
    n: u32,
}

impl Entry {
    fn of(s: &[u8], n: u32) -> Entry {
        let mut head = [0; HEAD];
        let shown = s.len().min(HEAD);
        head[..shown].copy_from_slice(&s[..shown]);
        let len = if s.len() <= HEAD { s.len() as u8 } else { LONG };
        Entry { head, len, n }
    }
}

impl ByString {
    fn with_capacity(n: usize) -> ByString {
        ByString {
            table: hashbrown::HashTable::with_capacity(n),
            hasher: Default::default(),
        }
    }

    fn hash(&self, s: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(s)
    }

    /// The number of `s`; `strings` are the numbered strings (by number).
    fn find(&self, s: &str, strings: &[Arc<str>]) -> Option<u32> {
        let s = s.as_bytes();
        let probe = Entry::of(s, 0);
        let hit = if probe.len == LONG {
            self.table.find(self.hash(s), |e| {
                e.len == LONG && e.head == probe.head && strings[e.n as usize].as_bytes() == s
            })
        } else {
            self.table
                .find(self.hash(s), |e| e.len == probe.len && e.head == probe.head)
        };
        hit.map(|e| e.n)
    }

    /// Gives `s`, which has none, the number `n`; `strings` as for `find` (a string
    /// the table holds must be there, to be hashed again as the table grows).
    fn insert(&mut self, s: &str, n: u32, strings: &[Arc<str>]) {
        let hasher = &self.hasher;
        let rehash = |e: &Entry| {
            use std::hash::BuildHasher;
            if e.len == LONG {
                hasher.hash_one(strings[e.n as usize].as_bytes())
            } else {
                hasher.hash_one(&e.head[..e.len as usize])
            }
        };
        let hash = self.hash(s.as_bytes());
        self.table
            .insert_unique(hash, Entry::of(s.as_bytes(), n), rehash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_keeps_its_number() {
        let numbers = Numbering::default();
        assert_eq!(numbers.number(["b", "a", "b"].into_iter()), [0, 1, 0]);
        assert_eq!(numbers.number(["a", "c"].into_iter()), [1, 2]);
        assert_eq!(numbers.len(), 3);
        assert_eq!(
            numbers.strings([2, 0].into_iter()),
            [Arc::<str>::from("c"), Arc::from("b")]
        );
        assert_eq!(numbers.read().get(2), Some("c"));
        assert_eq!(numbers.read().get(3), None);
    }

    /// The byte count kept as strings are numbered is their sum, numbered one by one
    /// or read back whole.
    #[test]
    fn bytes_add_up_the_strings() {
        let numbers = Numbering::default();
        numbers.number(["bb", "a", "bb", "cccc"].into_iter());
        let walked =
            |n: &Numbering| -> usize { n.read().strings.iter().map(|s| s.len() + 64).sum() };
        assert_eq!(numbers.bytes(), 7 + 3 * 64);
        assert_eq!(numbers.bytes(), walked(&numbers));
        let strings = numbers.strings(0..3);
        let read_back = Numbering::from_strings(strings).unwrap();
        assert_eq!(read_back.bytes(), walked(&read_back));
        read_back.number(["dd"].into_iter());
        assert_eq!(read_back.bytes(), 9 + 4 * 64);
    }

    proptest::proptest! {
        /// Strings are numbered in the order first met, whatever their length, bytes or
        /// shared heads: long ones (past the table's in-place head), ones alike in their
        /// first 15 bytes, the empty string, ones ending in zero bytes.
        #[test]
        fn strings_numbered_in_order_first_met(
            strings in proptest::collection::vec(
                "(abcdefghijklmno|abcdefghijklmnop|x|\\x00|é|ü){0,3}", 0..60),
        ) {
            let numbers = Numbering::default();
            let mut expected = std::collections::HashMap::new();
            for s in &strings {
                let next = expected.len() as u32;
                let n = *expected.entry(s.clone()).or_insert(next);
                proptest::prop_assert_eq!(numbers.number(std::iter::once(s.as_str())), [n]);
            }
            let read_back = Numbering::from_strings(numbers.read().all().to_vec()).unwrap();
            let (numbered, read_back) = (numbers.read(), read_back.read());
            for (s, &n) in &expected {
                proptest::prop_assert_eq!(numbered.find(s), Some(n));
                proptest::prop_assert_eq!(read_back.find(s), Some(n));
                proptest::prop_assert_eq!(numbered.get(n), Some(s.as_str()));
            }
            drop(numbered);
            proptest::prop_assert_eq!(numbers.len(), expected.len());
            let unseen = format!("{}?", strings.concat());
            proptest::prop_assert_eq!(numbers.read().find(&unseen), None);
        }
    }

    #[test]
    fn text_reads_back_as_its_tokens() {
        let vocab = Numbering::default();
        let mut b = discern_dimensions::StrListBuilder::default();
        for g in [&["the", "red", "door"][..], &[], &["red", "red"]] {
            g.iter().for_each(|t| b.push(t));
            b.end_group();
        }
        let fields = b.finish();
        let terms = vocab.number_text(&fields);
        assert_eq!(format!("{terms:?}"), "[[0, 1, 2], [], [1, 1]]");
        assert_eq!(vocab.read().tokens(&terms), fields);
        let again = Numbering::from_strings(vocab.read().all().to_vec());
        assert_eq!(again.map(|v| v.read().tokens(&terms)), Some(fields));
        assert!(Numbering::from_strings(vec!["a".into(), "a".into()]).is_none());
        let ungrouped = vocab.number_text(&StrList::from_strs(["door", "blue"]));
        assert_eq!(format!("{ungrouped:?}"), "[[2, 3]]");
    }
}
