//! A list of strings in one allocation: the index holds every item's keyword values
//! and text tokens this way, so that a token costs its bytes plus a 4-byte offset
//! instead of a `String` (24 bytes plus an allocation of its own). The allocation is
//! shared: documents with equal keyword values can hold one list (the index interns
//! them), and a clone costs a reference count.

use crate::many::Many;
use std::fmt;

/// Strings back to back in one buffer, optionally split into consecutive groups (a
/// text dimension's fields).
///
/// Layout (u32s little-endian): `[groups][group end × groups][len][end × len][bytes]`,
/// where a group end is the index one past the group's last string and a string's end
/// is its byte offset, within `bytes`, one past its last byte.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StrList(Many<u8>);

impl StrList {
    /// The shared bytes behind the list (`slot.rs` packs their pointer in a word).
    pub(crate) fn into_many(self) -> Many<u8> {
        self.0
    }

    /// The list `into_many` gave `bytes` for.
    pub(crate) fn from_many(bytes: Many<u8>) -> StrList {
        StrList(bytes)
    }
}

impl Default for StrList {
    fn default() -> StrList {
        StrListBuilder::default().finish()
    }
}

#[inline]
fn word(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

impl StrList {
    pub fn from_strs<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> StrList {
        let mut b = StrListBuilder::default();
        for s in items {
            b.push(s.as_ref());
        }
        b.finish()
    }

    #[inline]
    fn groups_count(&self) -> usize {
        word(&self.0, 0) as usize
    }

    /// Offset of the `len` word.
    #[inline]
    fn len_at(&self) -> usize {
        4 + 4 * self.groups_count()
    }

    #[inline]
    pub fn len(&self) -> usize {
        word(&self.0, self.len_at()) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// String `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&str> {
        (i < self.len())
            .then(|| self.range(i..i + 1).next())
            .flatten()
    }

    pub fn iter(&self) -> Iter<'_> {
        self.range(0..self.len())
    }

    /// The strings with indexes in `r` (which must be within `0..len()`).
    fn range(&self, r: std::ops::Range<usize>) -> Iter<'_> {
        let len_at = self.len_at();
        let ends_at = len_at + 4;
        let base = ends_at + 4 * self.len();
        let start = if r.start == 0 || r.start >= r.end {
            0
        } else {
            word(&self.0, ends_at + 4 * (r.start - 1)) as usize
        };
        Iter {
            buf: &self.0,
            ends_at,
            base,
            start,
            next: r.start,
            end: r.end,
        }
    }

    /// Number of groups (0 for an ungrouped list).
    pub fn groups(&self) -> usize {
        self.groups_count()
    }

    /// Index range of group `g`'s strings (empty when there is no such group).
    pub fn group_range(&self, g: usize) -> std::ops::Range<usize> {
        if g >= self.groups_count() {
            return 0..0;
        }
        let end = word(&self.0, 4 + 4 * g) as usize;
        let start = if g == 0 {
            0
        } else {
            word(&self.0, 4 * g) as usize
        };
        start..end
    }

    /// The strings of group `g`.
    pub fn group(&self, g: usize) -> Iter<'_> {
        self.range(self.group_range(g))
    }

    /// Bytes held on the heap (by this list and the others sharing it).
    /// This list's share of the bytes it holds on the heap (`Many::heap_bytes_share`).
    pub fn heap_bytes_share(&self) -> usize {
        self.0.heap_bytes_share()
    }

    /// Whether another list shares this one's allocation.
    pub fn is_shared(&self) -> bool {
        self.0.is_shared()
    }

    /// The list's encoding (see the type's layout), for `from_raw`.
    pub fn as_raw(&self) -> &[u8] {
        &self.0
    }

    /// A list from bytes `as_raw` gave, checked in full: `None` unless the words are in
    /// bounds and in order and every string is UTF-8 (the iterator relies on both).
    pub fn from_raw(b: &[u8]) -> Option<StrList> {
        let at = |i: usize| -> Option<usize> {
            let w = b.get(i..i.checked_add(4)?)?;
            Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize)
        };
        let groups = at(0)?;
        let len_at = groups.checked_mul(4)?.checked_add(4)?;
        let len = at(len_at)?;
        let base = len.checked_mul(4)?.checked_add(len_at + 4)?;
        let bytes = b.get(base..)?;
        let mut prev = 0;
        for g in 0..groups {
            let end = at(4 + 4 * g)?;
            if end < prev || end > len {
                return None;
            }
            prev = end;
        }
        // UTF-8 cut at character boundaries is UTF-8 piece by piece: one validation of
        // the whole region and a boundary test per string (far cheaper than validating
        // each of many short strings)
        let text = std::str::from_utf8(bytes).ok()?;
        let mut start = 0;
        for i in 0..len {
            let end = at(len_at + 4 + 4 * i)?;
            if end < start || !text.is_char_boundary(end) {
                return None;
            }
            start = end;
        }
        (start == bytes.len()).then(|| StrList(b.into()))
    }
}

/// Lets a set of lists be searched with an encoding (`as_raw`) without building a list:
/// a list hashes and compares as its encoding.
impl std::borrow::Borrow<[u8]> for StrList {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for StrList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.groups() == 0 {
            return f.debug_list().entries(self.iter()).finish();
        }
        f.debug_list()
            .entries((0..self.groups()).map(|g| self.group(g).collect::<Vec<_>>()))
            .finish()
    }
}

/// The strings of a list (or of one group) in order; walks the offsets once.
#[derive(Clone)]
pub struct Iter<'a> {
    buf: &'a [u8],
    /// Offset of the first end word.
    ends_at: usize,
    /// Offset of the byte region.
    base: usize,
    /// Byte offset (within the byte region) of the next string.
    start: usize,
    next: usize,
    end: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a str;
    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        if self.next >= self.end {
            return None;
        }
        let e = word(self.buf, self.ends_at + 4 * self.next) as usize;
        let bytes = &self.buf[self.base + self.start..self.base + e];
        self.start = e;
        self.next += 1;
        // SAFETY: the buffer is only ever built by `StrListBuilder`, which appends whole
        // `&str`s to the byte region and records the offset after each one; `start` and
        // `e` are two consecutive recorded offsets, so the bytes are exactly one
        // appended `&str`, valid UTF-8. The field is private, so no other bytes get in.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a StrList {
    type Item = &'a str;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Builds a `StrList`; reusable (`finish` leaves it empty).
#[derive(Default)]
pub struct StrListBuilder {
    group_ends: Vec<u32>,
    ends: Vec<u32>,
    bytes: Vec<u8>,
}

impl StrListBuilder {
    pub fn push(&mut self, s: &str) {
        self.bytes.extend_from_slice(s.as_bytes());
        self.ends.push(self.bytes.len() as u32);
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Whether a string equal to `s` was pushed since the last `finish`.
    pub fn contains(&self, s: &str) -> bool {
        let mut start = 0usize;
        self.ends.iter().any(|&e| {
            let hit = &self.bytes[start..e as usize] == s.as_bytes();
            start = e as usize;
            hit
        })
    }

    /// Closes the current group: the strings pushed since the previous one.
    pub fn end_group(&mut self) {
        self.group_ends.push(self.ends.len() as u32);
    }

    pub fn finish(&mut self) -> StrList {
        let mut out = Vec::with_capacity(
            8 + 4 * (self.group_ends.len() + self.ends.len()) + self.bytes.len(),
        );
        out.extend_from_slice(&(self.group_ends.len() as u32).to_le_bytes());
        for g in &self.group_ends {
            out.extend_from_slice(&g.to_le_bytes());
        }
        out.extend_from_slice(&(self.ends.len() as u32).to_le_bytes());
        for e in &self.ends {
            out.extend_from_slice(&e.to_le_bytes());
        }
        out.extend_from_slice(&self.bytes);
        self.group_ends.clear();
        self.ends.clear();
        self.bytes.clear();
        StrList(out.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn groups_and_strings_round_trip(groups in proptest::collection::vec(
            proptest::collection::vec(".{0,6}", 0..5), 0..4)) {
            let mut b = StrListBuilder::default();
            for g in &groups {
                for s in g {
                    b.push(s);
                }
                b.end_group();
            }
            for s in groups.iter().flatten() {
                prop_assert!(b.contains(s));
            }
            let l = b.finish();
            let flat: Vec<&str> = groups.iter().flatten().map(String::as_str).collect();
            prop_assert_eq!(l.len(), flat.len());
            prop_assert_eq!(l.iter().collect::<Vec<_>>(), flat.clone());
            prop_assert_eq!(l.groups(), groups.len());
            for (g, want) in groups.iter().enumerate() {
                prop_assert_eq!(l.group(g).collect::<Vec<_>>(), want.iter().map(String::as_str).collect::<Vec<_>>());
            }
            prop_assert_eq!(l.group(groups.len()).count(), 0);
            for (i, s) in flat.iter().enumerate() {
                prop_assert_eq!(l.get(i), Some(*s));
            }
            prop_assert_eq!(l.get(flat.len()), None);
            prop_assert_eq!(StrList::from_raw(l.as_raw()), Some(l.clone()));
            // the builder is empty again and reusable
            prop_assert!(b.is_empty());
            prop_assert_eq!(b.finish(), StrList::default());
        }
    }

    #[test]
    fn from_raw_rejects_what_the_builder_cannot_make() {
        let l = StrList::from_strs(["ab", "ü"]);
        let raw = l.as_raw().to_vec();
        for cut in 0..raw.len() {
            assert_eq!(StrList::from_raw(&raw[..cut]), None, "cut at {cut}");
        }
        // "ü" split inside its two bytes
        let mut split = raw.clone();
        split[8] = 3;
        assert_eq!(StrList::from_raw(&split), None);
        let mut backwards = raw.clone();
        backwards[8] = 4;
        backwards[12] = 3;
        assert_eq!(StrList::from_raw(&backwards), None);
        let mut groups = StrListBuilder::default();
        groups.push("x");
        groups.end_group();
        let mut g = groups.finish().as_raw().to_vec();
        g[4] = 2; // a group ending past the last string
        assert_eq!(StrList::from_raw(&g), None);
        assert_eq!(StrList::from_raw(&raw), Some(l));
    }

    #[test]
    fn ungrouped() {
        let l = StrList::from_strs(["a", "", "ünï"]);
        assert_eq!(l.groups(), 0);
        assert_eq!(l.get(2), Some("ünï"));
        assert_eq!(l.get(1), Some(""));
        assert_eq!(l.get(3), None);
        let mut b = StrListBuilder::default();
        b.push("ab");
        assert!(b.contains("ab") && !b.contains("a") && !b.contains("b"));
        assert_eq!(format!("{l:?}"), r#"["a", "", "ünï"]"#);
    }
}
