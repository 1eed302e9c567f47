//! A list of strings in one allocation: the index holds every item's keyword values
//! this way (and extraction a text's tokens), so that a string costs its bytes plus an
//! offset of one to four bytes instead of a `String` (24 bytes plus an allocation of
//! its own). The allocation is shared: documents with equal keyword values can hold
//! one list (the index interns them), and a clone costs a reference count.

use crate::many::Many;
use std::fmt;

/// Strings back to back in one buffer, optionally split into consecutive groups (a
/// text dimension's fields).
///
/// Layout: `[width][groups][group end × groups][len][end × len][bytes]`, where a group
/// end is the index one past the group's last string, a string's end is its byte
/// offset, within `bytes`, one past its last byte, and each number is `width` bytes
/// little-endian: 1, 2 or 4, the fewest that hold the largest of them (`width_of`).
/// (Four bytes each, a listing's six amenities took 32 bytes of numbers beside ~50 of
/// text; one byte each, 9.) The width is a function of the strings, so equal lists
/// have equal encodings, which interning compares.
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

/// The `width`-byte number at `at`.
#[inline]
fn number(b: &[u8], at: usize, width: usize) -> usize {
    match width {
        1 => b[at] as usize,
        2 => u16::from_le_bytes([b[at], b[at + 1]]) as usize,
        _ => u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize,
    }
}

/// The width of a list of `groups` groups and `len` strings of `bytes` bytes in all:
/// the fewest bytes (1, 2 or 4) that hold the largest of its numbers (a group end is
/// at most `len`, a string end at most `bytes`).
fn width_of(groups: usize, len: usize, bytes: usize) -> usize {
    let largest = groups.max(len).max(bytes);
    if largest <= u8::MAX as usize {
        1
    } else if largest <= u16::MAX as usize {
        2
    } else {
        4
    }
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
    fn width(&self) -> usize {
        self.0[0] as usize
    }

    /// The `i`-th number of the encoding (0: the group count).
    #[inline]
    fn nth(&self, i: usize) -> usize {
        let w = self.width();
        number(&self.0, 1 + w * i, w)
    }

    #[inline]
    fn groups_count(&self) -> usize {
        self.nth(0)
    }

    /// Position of the `len` number among the encoding's numbers.
    #[inline]
    fn len_at(&self) -> usize {
        1 + self.groups_count()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.nth(self.len_at())
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
        let width = self.width();
        // (the first end's position among the numbers)
        let ends = self.len_at() + 1;
        let base = 1 + width * (ends + self.len());
        let start = if r.start == 0 || r.start >= r.end {
            0
        } else {
            self.nth(ends + r.start - 1)
        };
        Iter {
            buf: &self.0,
            ends_at: 1 + width * ends,
            width,
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
        let end = self.nth(1 + g);
        let start = if g == 0 { 0 } else { self.nth(g) };
        start..end
    }

    /// The strings of group `g`.
    pub fn group(&self, g: usize) -> Iter<'_> {
        self.range(self.group_range(g))
    }

    /// The bytes of its allocation (`Many::heap_bytes`), shared or not.
    pub fn heap_bytes(&self) -> usize {
        self.0.heap_bytes()
    }

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

    /// A list from bytes `as_raw` gave, checked in full: `None` unless the width is the
    /// one the builder picks, the numbers are in bounds and in order and every string
    /// is UTF-8 (the iterator relies on all of it).
    pub fn from_raw(b: &[u8]) -> Option<StrList> {
        let width = *b.first()? as usize;
        if ![1, 2, 4].contains(&width) {
            return None;
        }
        let at = |i: usize| -> Option<usize> {
            let start = i.checked_mul(width)?.checked_add(1)?;
            b.get(start..start.checked_add(width)?)?;
            Some(number(b, start, width))
        };
        let groups = at(0)?;
        let len_at = groups.checked_add(1)?;
        let len = at(len_at)?;
        let base = len
            .checked_add(len_at + 1)?
            .checked_mul(width)?
            .checked_add(1)?;
        let bytes = b.get(base..)?;
        let mut prev = 0;
        for g in 0..groups {
            let end = at(1 + g)?;
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
            let end = at(len_at + 1 + i)?;
            if end < start || !text.is_char_boundary(end) {
                return None;
            }
            start = end;
        }
        let canonical = width == width_of(groups, len, bytes.len());
        (start == bytes.len() && canonical).then(|| StrList(b.into()))
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
    /// Offset of the first end number, and the numbers' width.
    ends_at: usize,
    width: usize,
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
        let e = number(self.buf, self.ends_at + self.width * self.next, self.width);
        let bytes = &self.buf[self.base + self.start..self.base + e];
        self.start = e;
        self.next += 1;
        // SAFETY: the buffer is only ever built by `StrListBuilder`, which appends whole
        // `&str`s to the byte region and records the offset after each one, or taken by
        // `from_raw` once it has checked that the region is UTF-8 and every offset in
        // order, within it and on a character boundary; `start` and `e` are two
        // consecutive recorded offsets, so the bytes are UTF-8. The field is private,
        // so no other bytes get in.
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
    /// Once `contains` is asked of more than `SEARCHED_AT_MOST` strings: every string
    /// pushed, so that a list of many values kept free of repeats does not cost the
    /// square of their number.
    seen: Option<std::collections::HashSet<Box<[u8]>>>,
}

/// Strings `contains` compares one by one at most.
const SEARCHED_AT_MOST: usize = 32;

impl StrListBuilder {
    pub fn push(&mut self, s: &str) {
        self.bytes.extend_from_slice(s.as_bytes());
        self.ends.push(self.bytes.len() as u32);
        if let Some(seen) = &mut self.seen {
            seen.insert(s.as_bytes().into());
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Whether a string equal to `s` was pushed since the last `finish`.
    pub fn contains(&mut self, s: &str) -> bool {
        if self.seen.is_none() && self.ends.len() > SEARCHED_AT_MOST {
            let mut start = 0usize;
            let seen = self.ends.iter().map(|&e| {
                let one: Box<[u8]> = self.bytes[start..e as usize].into();
                start = e as usize;
                one
            });
            self.seen = Some(seen.collect());
        }
        if let Some(seen) = &self.seen {
            return seen.contains(s.as_bytes());
        }
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
        let width = width_of(self.group_ends.len(), self.ends.len(), self.bytes.len());
        let numbers = 2 + self.group_ends.len() + self.ends.len();
        let mut out = Vec::with_capacity(1 + width * numbers + self.bytes.len());
        out.push(width as u8);
        let mut put = |n: usize| out.extend_from_slice(&(n as u32).to_le_bytes()[..width]);
        put(self.group_ends.len());
        self.group_ends.iter().for_each(|&g| put(g as usize));
        put(self.ends.len());
        self.ends.iter().for_each(|&e| put(e as usize));
        out.extend_from_slice(&self.bytes);
        self.group_ends.clear();
        self.ends.clear();
        self.bytes.clear();
        self.seen = None;
        StrList(out.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `contains` answers alike for few strings (compared one by one) and many (by a
    /// set made once), across groups, and forgets them at `finish`.
    #[test]
    fn contains_few_and_many() {
        let mut b = StrListBuilder::default();
        for n in [3usize, 200] {
            for i in 0..n {
                assert!(!b.contains(&format!("s{i}")));
                b.push(&format!("s{i}"));
                if i % 50 == 0 {
                    b.end_group();
                }
                assert!(b.contains(&format!("s{i}")) && b.contains("s0"));
            }
            assert!(!b.contains(&format!("s{n}")) && !b.contains(""));
            b.finish();
            assert!(!b.contains("s0"));
        }
    }

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
        // [width 1][no groups][2 strings][ends 2, 4]["abü"]
        assert_eq!(raw[..5], [1, 0, 2, 2, 4]);
        // "ü" split inside its two bytes
        let mut split = raw.clone();
        split[3] = 3;
        assert_eq!(StrList::from_raw(&split), None);
        let mut backwards = raw.clone();
        backwards[3] = 4;
        backwards[4] = 3;
        assert_eq!(StrList::from_raw(&backwards), None);
        let mut groups = StrListBuilder::default();
        groups.push("x");
        groups.end_group();
        let mut g = groups.finish().as_raw().to_vec();
        g[2] = 2; // a group ending past the last string
        assert_eq!(StrList::from_raw(&g), None);
        // a width the builder would not pick for these strings, or none it picks at all
        let wide: Vec<u8> = [2, 0, 0, 2, 0, 2, 0, 4, 0]
            .into_iter()
            .chain(*b"ab\xc3\xbc")
            .collect();
        assert_eq!(StrList::from_raw(&wide), None);
        for width in [0, 3, 8] {
            let mut w = raw.clone();
            w[0] = width;
            assert_eq!(StrList::from_raw(&w), None, "width {width}");
        }
        assert_eq!(StrList::from_raw(&raw), Some(l));
    }

    /// Numbers past a byte take two, past two bytes four: strings of 300 and 70,000
    /// bytes, and 300 groups of nothing.
    #[test]
    fn wider_numbers_for_longer_lists() {
        let long = "é".repeat(35_000);
        for (strings, width) in [
            (vec!["x".repeat(200), "y".repeat(55)], 1),
            (vec!["x".repeat(200), "y".repeat(56)], 2),
            (vec![long.clone(), "z".into()], 4),
        ] {
            let l = StrList::from_strs(&strings);
            assert_eq!(l.as_raw()[0], width);
            assert_eq!(l.iter().collect::<Vec<_>>(), strings);
            assert_eq!(l.get(1), Some(strings[1].as_str()));
            assert_eq!(StrList::from_raw(l.as_raw()), Some(l.clone()));
        }
        let mut b = StrListBuilder::default();
        for _ in 0..300 {
            b.end_group();
        }
        b.push("last");
        b.end_group();
        let l = b.finish();
        assert_eq!(l.as_raw()[0], 2);
        assert_eq!(l.groups(), 301);
        assert_eq!(l.group(299).count(), 0);
        assert_eq!(l.group(300).collect::<Vec<_>>(), ["last"]);
        assert_eq!(StrList::from_raw(l.as_raw()), Some(l));
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
