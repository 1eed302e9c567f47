//! A text dimension's postings keys as numbers while an apply records its changes: the
//! token as its vocabulary number, not its bytes. Recording a document's change looks
//! up each of its keys (a hundred or more for a listing's description), and making,
//! sorting, hashing and comparing byte keys was half of the apply's index thread during
//! a bulk load; the keys are made bytes once per distinct key, when the changes are
//! resolved (`TextCode::key`).
//!
//! A code orders as `(kind, field, level, number)`; any order serves the merge of a
//! document's old and new keys, as long as both sides use it.

use discern_dimensions::IndexedValue;

use super::{length_class, text_key, text_length_key, text_level_key, Key, MAX_LEVEL};
use crate::numbering::Numbered;

const TOKEN: u64 = 0;
const LEVEL: u64 = 1;
const LENGTH: u64 = 2;

/// One text postings key: `kind << 56 | field << 40 | level << 32 | number`, the number
/// a token's (plain and level keys) or a length class (length keys).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(crate) struct TextCode(u64);

impl TextCode {
    fn new(kind: u64, field: usize, level: u8, number: u32) -> TextCode {
        // (fields are numbered below `LEVEL_BIT`, as in the byte keys)
        TextCode(kind << 56 | (field as u16 as u64) << 40 | (level as u64) << 32 | number as u64)
    }

    fn token(field: usize, token: u32) -> TextCode {
        TextCode::new(TOKEN, field, 0, token)
    }

    fn field(self) -> u16 {
        (self.0 >> 40) as u16
    }

    fn number(self) -> u32 {
        self.0 as u32
    }

    /// The same key with `level` (a token key made a level key).
    fn at_level(self, level: u8) -> TextCode {
        TextCode::new(LEVEL, self.field() as usize, level, self.number())
    }

    /// The key's bytes, as `postings` keys them; `vocab` names the tokens.
    pub(crate) fn key(self, vocab: Option<&Numbered>) -> Key {
        let token = || vocab.and_then(|v| v.get(self.number())).unwrap_or_default();
        let field = self.field() as usize;
        match self.0 >> 56 {
            TOKEN => text_key(field, token()).into(),
            LEVEL => text_level_key(field, (self.0 >> 32) as u8, token()).into(),
            _ => text_length_key(field, self.number() as u16)[..].into(),
        }
    }
}

/// A text value's keys as codes, sorted and distinct: its tokens per field, the level
/// keys of its repeated tokens and its fields' length classes — the keys a build from
/// scratch (`postings::build`) gives it, numbered (no allocation once the buffers have
/// grown).
#[derive(Default)]
pub(crate) struct CodeBuf {
    codes: Vec<TextCode>,
    levels: Vec<TextCode>,
}

impl CodeBuf {
    /// The keys of `value` (none when absent or not text).
    pub(crate) fn fill(&mut self, value: Option<&IndexedValue>) -> &[TextCode] {
        self.codes.clear();
        self.levels.clear();
        let Some(IndexedValue::Terms(terms)) = value else {
            return &self.codes;
        };
        for fi in 0..terms.groups() {
            self.codes
                .extend(terms.group(fi).map(|n| TextCode::token(fi, n)));
        }
        self.codes.sort_unstable();
        // each run of one token: its level keys, then the token once
        let mut kept = 0;
        let mut i = 0;
        while i < self.codes.len() {
            let code = self.codes[i];
            let mut j = i + 1;
            while j < self.codes.len() && self.codes[j] == code {
                j += 1;
            }
            for level in 2..=(j - i).min(MAX_LEVEL as usize) {
                self.levels.push(code.at_level(level as u8));
            }
            self.codes[kept] = code;
            kept += 1;
            i = j;
        }
        self.codes.truncate(kept);
        // level keys sort after every token key, length keys after every level key
        self.levels.sort_unstable();
        self.codes.append(&mut self.levels);
        for (fi, n) in terms.group_lens().enumerate() {
            if n > 0 {
                self.codes
                    .push(TextCode::new(LENGTH, fi, 0, length_class(n) as u32));
            }
        }
        &self.codes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use discern_dimensions::TermList;
    use proptest::prelude::*;

    fn numbered(tokens: &[&str]) -> crate::numbering::Numbering {
        crate::numbering::Numbering::from_strings(tokens.iter().map(|&t| t.into()).collect())
            .unwrap()
    }

    fn terms(fields: &[Vec<u32>]) -> IndexedValue {
        IndexedValue::Terms(TermList::from_groups(fields))
    }

    /// The byte keys of a value, as the codes make them.
    fn keys_of_codes(value: &IndexedValue, vocab: &Numbered) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = CodeBuf::default()
            .fill(Some(value))
            .iter()
            .map(|c| c.key(Some(vocab)).into_vec())
            .collect();
        keys.sort();
        keys
    }

    /// The byte keys of a value, counted the plain way: each field's tokens, each
    /// repeated token's levels, each non-empty field's length class.
    fn keys_counted(fields: &[Vec<u32>], vocab: &Numbered) -> Vec<Vec<u8>> {
        let mut keys = std::collections::BTreeSet::new();
        for (fi, tokens) in fields.iter().enumerate() {
            let mut counts = std::collections::BTreeMap::new();
            for &n in tokens {
                *counts.entry(n).or_insert(0usize) += 1;
            }
            for (&n, &count) in &counts {
                let token = vocab.get(n).unwrap();
                keys.insert([&(fi as u16).to_be_bytes()[..], token.as_bytes()].concat());
                for level in 2..=count.min(MAX_LEVEL as usize) {
                    keys.insert(crate::postings::text_level_key(fi, level as u8, token));
                }
            }
            if !tokens.is_empty() {
                keys.insert(text_length_key(fi, length_class(tokens.len())).to_vec());
            }
        }
        keys.into_iter().collect()
    }

    #[test]
    fn codes_make_the_byte_keys() {
        let v = numbered(&["sunny", "loft", "park"]);
        let fields = [vec![0, 1, 0, 0], vec![2, 1]];
        let keys = keys_of_codes(&terms(&fields), &v.read());
        assert_eq!(keys, keys_counted(&fields, &v.read()));
        // tokens, the levels of "sunny" (three times in field 0), the two lengths
        assert_eq!(keys.len(), 4 + 2 + 2);
        assert!(keys.contains(&[&0u16.to_be_bytes()[..], b"sunny"].concat()));
        assert!(keys.contains(&crate::postings::text_level_key(0, 3, "sunny")));
        assert!(keys.contains(&text_length_key(1, length_class(2)).to_vec()));
    }

    #[test]
    fn no_value_and_other_values_have_no_codes() {
        let mut b = CodeBuf::default();
        assert!(b.fill(None).is_empty());
        assert!(b.fill(Some(&IndexedValue::Int(3))).is_empty());
        assert!(b.fill(Some(&terms(&[vec![]]))).is_empty());
    }

    proptest! {
        /// Codes and byte keys name the same keys, whatever the value.
        #[test]
        fn codes_are_the_byte_keys_numbered(
            fields in prop::collection::vec(prop::collection::vec(0u32..6, 0..40), 1..4)
        ) {
            let v = numbered(&["a", "ab", "b", "ba", "park", "par"]);
            let value = terms(&fields);
            let codes = CodeBuf::default().fill(Some(&value)).to_vec();
            // sorted and distinct, as the merge of a document's keys needs
            prop_assert!(codes.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(keys_of_codes(&value, &v.read()), keys_counted(&fields, &v.read()));
        }
    }
}
