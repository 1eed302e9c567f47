//! A text value as the index holds it: each field's tokens as numbers of the
//! dimension's vocabulary (numbered by the index in the order first met, so that the
//! commonest words have the smallest numbers), in one allocation of variable-length
//! integers. At a million generated listings a description's ~50 tokens take ~90 bytes
//! this way, where their strings and offsets (`StrList`) took ~500.

use crate::many::Many;
use std::fmt;

/// Token numbers in groups (one per field of the text dimension).
///
/// Layout, every integer LEB128: `[groups]`, then per group `[tokens][bytes]` (how many
/// numbers it holds and how many bytes they take), then the groups' numbers back to back.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TermList(Many<u8>);

impl TermList {
    /// The shared bytes behind the list (`slot.rs` packs their pointer in a word).
    pub(crate) fn into_many(self) -> Many<u8> {
        self.0
    }

    /// The list `into_many` gave `bytes` for.
    pub(crate) fn from_many(bytes: Many<u8>) -> TermList {
        TermList(bytes)
    }
}

/// Reads one LEB128 integer at `*at`, moving `*at` past it; `None` past the end or for
/// an integer longer than a `u32`.
#[inline]
fn read_varint(b: &[u8], at: &mut usize) -> Option<u32> {
    let mut out = 0u32;
    for shift in (0..35).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        let bits = u32::from(byte & 0x7f);
        if shift == 28 && bits > 0x0f {
            return None;
        }
        out |= bits << shift;
        if byte & 0x80 == 0 {
            return Some(out);
        }
    }
    None
}

fn write_varint(out: &mut Vec<u8>, mut n: u32) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

impl TermList {
    /// A list of `groups`' numbers, one group each.
    pub fn from_groups<G: AsRef<[u32]>>(groups: impl IntoIterator<Item = G>) -> TermList {
        let mut b = TermListBuilder::default();
        for g in groups {
            g.as_ref().iter().for_each(|&n| b.push(n));
            b.end_group();
        }
        b.finish()
    }

    /// Per group, (tokens, bytes), and where the numbers start. The list was checked
    /// when built, so a read cannot fail; a failed one reads as no groups.
    fn header(&self) -> (Header, usize) {
        let b = &self.0;
        let mut at = 0;
        let mut h = Header::default();
        let groups = read_varint(b, &mut at).unwrap_or(0) as usize;
        for _ in 0..groups {
            let (Some(n), Some(len)) = (read_varint(b, &mut at), read_varint(b, &mut at)) else {
                return (Header::default(), b.len());
            };
            h.push(n as usize, len as usize);
        }
        (h, at)
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        let mut at = 0;
        read_varint(&self.0, &mut at).unwrap_or(0) as usize
    }

    /// How many numbers group `g` holds (0 when there is no such group).
    pub fn group_len(&self, g: usize) -> usize {
        self.header().0.get(g).map_or(0, |(n, _)| n)
    }

    /// Every group's length, in order.
    pub fn group_lens(&self) -> impl Iterator<Item = usize> {
        let (h, _) = self.header();
        (0..h.len()).filter_map(move |g| h.get(g).map(|(n, _)| n))
    }

    /// How many numbers the list holds.
    pub fn len(&self) -> usize {
        self.group_lens().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numbers of group `g`, in order (none when there is no such group).
    pub fn group(&self, g: usize) -> Numbers<'_> {
        let (h, mut at) = self.header();
        for i in 0..g.min(h.len()) {
            at += h.get(i).map_or(0, |(_, len)| len);
        }
        let (n, len) = h.get(g).unwrap_or((0, 0));
        Numbers {
            buf: self.0.get(at..at + len).unwrap_or(&[]),
            at: 0,
            left: n,
        }
    }

    /// Every number, group after group.
    pub fn iter(&self) -> Numbers<'_> {
        let (h, at) = self.header();
        Numbers {
            buf: &self.0[at.min(self.0.len())..],
            at: 0,
            left: (0..h.len()).filter_map(|g| h.get(g)).map(|(n, _)| n).sum(),
        }
    }

    /// The largest number in the list, if any (to check it against a vocabulary).
    pub fn max(&self) -> Option<u32> {
        self.iter().max()
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

    /// A list from bytes `as_raw` gave, checked in full: `None` unless every integer is
    /// well formed and every group's numbers take exactly its bytes.
    pub fn from_raw(b: &[u8]) -> Option<TermList> {
        let mut at = 0;
        let groups = read_varint(b, &mut at)? as usize;
        let mut sizes = Vec::with_capacity(groups.min(b.len()));
        for _ in 0..groups {
            sizes.push((read_varint(b, &mut at)?, read_varint(b, &mut at)? as usize));
        }
        for (n, len) in sizes {
            let end = at.checked_add(len)?;
            let mut group_at = at;
            for _ in 0..n {
                read_varint(b.get(..end)?, &mut group_at)?;
            }
            if group_at != end {
                return None;
            }
            at = end;
        }
        (at == b.len()).then(|| TermList(b.into()))
    }
}

/// Lets a set of lists be searched with an encoding (`as_raw`) without building a list.
impl std::borrow::Borrow<[u8]> for TermList {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for TermList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries((0..self.groups()).map(|g| self.group(g).collect::<Vec<_>>()))
            .finish()
    }
}

/// Per group, (numbers, bytes): inline for the few fields a text dimension has.
#[derive(Default)]
struct Header {
    inline: [(usize, usize); 4],
    more: Vec<(usize, usize)>,
    len: usize,
}

impl Header {
    fn push(&mut self, n: usize, bytes: usize) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = (n, bytes),
            None => self.more.push((n, bytes)),
        }
        self.len += 1;
    }

    fn get(&self, g: usize) -> Option<(usize, usize)> {
        if g >= self.len {
            return None;
        }
        self.inline
            .get(g)
            .or_else(|| self.more.get(g - self.inline.len()))
            .copied()
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// The numbers of a list, or of one of its groups, in order.
#[derive(Clone)]
pub struct Numbers<'a> {
    buf: &'a [u8],
    at: usize,
    left: usize,
}

impl Iterator for Numbers<'_> {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        read_varint(self.buf, &mut self.at)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Numbers<'_> {}

/// Builds a `TermList` group by group; reusable (`finish` leaves it empty).
#[derive(Default)]
pub struct TermListBuilder {
    /// Per finished group: (numbers, bytes).
    groups: Vec<(u32, u32)>,
    /// The current group's numbers so far.
    open: u32,
    bytes: Vec<u8>,
    /// Where the current group's numbers start in `bytes`.
    open_at: usize,
}

impl TermListBuilder {
    pub fn push(&mut self, n: u32) {
        write_varint(&mut self.bytes, n);
        self.open += 1;
    }

    /// Ends the current group (an empty one when nothing was pushed since the last).
    pub fn end_group(&mut self) {
        let len = (self.bytes.len() - self.open_at) as u32;
        self.groups.push((self.open, len));
        self.open = 0;
        self.open_at = self.bytes.len();
    }

    pub fn finish(&mut self) -> TermList {
        if self.open > 0 {
            self.end_group();
        }
        let mut out = Vec::with_capacity(1 + 4 * self.groups.len() + self.bytes.len());
        write_varint(&mut out, self.groups.len() as u32);
        for &(n, len) in &self.groups {
            write_varint(&mut out, n);
            write_varint(&mut out, len);
        }
        out.extend_from_slice(&self.bytes);
        self.groups.clear();
        self.bytes.clear();
        self.open = 0;
        self.open_at = 0;
        TermList(out.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn groups_read_back() {
        let l = TermList::from_groups([vec![1, 300, 0], vec![], vec![u32::MAX, 127, 128]]);
        assert_eq!(l.groups(), 3);
        assert_eq!(l.group(0).collect::<Vec<_>>(), [1, 300, 0]);
        assert_eq!(l.group(1).count(), 0);
        assert_eq!(l.group(2).collect::<Vec<_>>(), [u32::MAX, 127, 128]);
        assert_eq!(l.group(3).count(), 0);
        assert_eq!(l.group_len(2), 3);
        assert_eq!(l.group_len(9), 0);
        assert_eq!(l.len(), 6);
        assert_eq!(l.max(), Some(u32::MAX));
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            [1, 300, 0, u32::MAX, 127, 128]
        );
        // small numbers take a byte each
        let small = TermList::from_groups([vec![5u32; 50]]);
        assert_eq!(small.as_raw().len(), 3 + 50);
    }

    #[test]
    fn bad_encodings_are_refused() {
        let good = TermList::from_groups([vec![1, 200], vec![3]]);
        let raw = good.as_raw();
        assert_eq!(TermList::from_raw(raw), Some(good.clone()));
        for cut in 0..raw.len() {
            assert_eq!(TermList::from_raw(&raw[..cut]), None, "cut at {cut}");
        }
        let mut longer = raw.to_vec();
        longer.push(1);
        assert_eq!(TermList::from_raw(&longer), None);
        // a group whose byte count covers part of the next group's numbers
        let mut shifted = raw.to_vec();
        shifted[2] += 1;
        assert_eq!(TermList::from_raw(&shifted), None);
        // an integer wider than 32 bits
        assert_eq!(TermList::from_raw(&[0xff, 0xff, 0xff, 0xff, 0x7f]), None);
    }

    proptest! {
        #[test]
        fn a_list_holds_its_groups(groups in proptest::collection::vec(
            proptest::collection::vec(any::<u32>(), 0..20), 0..7)) {
            let l = TermList::from_groups(&groups);
            prop_assert_eq!(l.groups(), groups.len());
            for (g, want) in groups.iter().enumerate() {
                prop_assert_eq!(&l.group(g).collect::<Vec<_>>(), want);
                prop_assert_eq!(l.group_len(g), want.len());
            }
            prop_assert_eq!(l.iter().collect::<Vec<_>>(), groups.concat());
            prop_assert_eq!(TermList::from_raw(l.as_raw()), Some(l.clone()));
        }
    }
}
