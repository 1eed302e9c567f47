//! Sets of documents as plain bitsets (bit `d` of word `d / 64`), for loops that test or
//! walk many members: made from roaring bitmaps without iterating their dense
//! containers, walked a word at a time. And roaring set operations done the cheaper way
//! for the sets at hand: an intersection by lookups (`and_small`), a union of a few sets
//! by merging (`union_of`).

use roaring::RoaringBitmap;

/// Whether `small`'s members are better looked up one by one in `big` than the two
/// sets intersected. Roaring intersects container by container: two arrays by walking
/// both (the larger one's length is the cost), an array and a bitmap by testing each
/// array member's bit — a lookup without its search for the container — and two
/// bitmaps word by word. So only `big`'s members in array containers can make an
/// intersection dear (a lookup costs about what walking a few dozen members does); a
/// dense `big`, all bitmap containers, is always intersected.
pub(crate) fn lookups_pay(small: u64, big: &RoaringBitmap) -> bool {
    small.saturating_mul(24) < u64::from(big.statistics().n_values_array_containers)
}

/// `small ∩ big`, by looking each member of `small` up in `big` when that is cheaper
/// (`lookups_pay`).
pub(crate) fn and_small(small: &RoaringBitmap, big: &RoaringBitmap) -> RoaringBitmap {
    if !lookups_pay(small.len(), big) {
        return small & big;
    }
    let mut out = RoaringBitmap::new();
    for d in small.iter().filter(|&d| big.contains(d)) {
        let _ = out.try_push(d); // ascending: appended
    }
    out
}

/// Up to this many sets are united one into the other (`union_of`).
const PAIRWISE_UNION_MAX: usize = 8;

/// The union of `sets`. Roaring's multi-way union turns every container that two arrays
/// share into a bitmap (8 KiB zeroed and set) and scans it back into an array at the end:
/// for a text bound's few sets of a level's length classes — a few dozen or hundred
/// documents each — those conversions cost more than the union (`to_array_store` alone
/// was 4% of the text class's CPU at 1M). A few sets are merged one into the other
/// instead, array into array, largest first (the text class at 1M in-process, ten
/// passes each way alternated in one process: 2.8% and 4.7% less time in two runs);
/// many, by the multi-way union, which copies no array more than once.
pub(crate) fn union_of<'a>(sets: impl IntoIterator<Item = &'a RoaringBitmap>) -> RoaringBitmap {
    use roaring::MultiOps;
    let mut sets: Vec<&RoaringBitmap> = sets.into_iter().collect();
    if sets.len() > PAIRWISE_UNION_MAX {
        return sets.into_iter().union();
    }
    sets.sort_unstable_by_key(|s| std::cmp::Reverse(s.len()));
    // (the first two merged into a new set: a copy of the largest merged into in place
    // would be copied once more, as roaring merges two arrays into a new one)
    let mut out = match sets[..] {
        [] => return RoaringBitmap::new(),
        [one] => return one.clone(),
        [a, b, ..] => a | b,
    };
    for s in &sets[2..] {
        out |= *s;
    }
    out
}

/// `set` as a bitset (bit `d` of word `d / 64`, as many words as its largest member needs), decoded from roaring's portable
/// serialization (the format of the Roaring specification: a bitmap container's 1,024
/// words are copied, not iterated bit by bit; an array container's values are set one
/// by one). Anything else than that format falls back to iterating the set.
pub(crate) fn words_of(set: &RoaringBitmap) -> Vec<u64> {
    let max = set.max().map_or(0, |m| m as usize + 1);
    let mut words = vec![0u64; max.div_ceil(64)];
    let mut buf = Vec::with_capacity(set.serialized_size());
    if set.serialize_into(&mut buf).is_err() || !decode_into(&buf, &mut words) {
        words.iter_mut().for_each(|w| *w = 0);
        for d in set {
            words[d as usize / 64] |= 1 << (d % 64);
        }
    }
    words
}

/// Sets the members of a serialized roaring bitmap in `words`; `false` when `buf` is not
/// in that form. Both layouts of the specification: without run containers, and with
/// them (roaring makes a container a run of every value once it is full, and
/// `optimize` makes runs of any).
fn decode_into(buf: &[u8], words: &mut [u64]) -> bool {
    const NO_RUN_COOKIE: u32 = 12346;
    const RUN_COOKIE: u32 = 12347;
    let u16_at = |at: usize| {
        buf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        buf.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let Some(cookie) = u32_at(0) else {
        return false;
    };
    // (containers, where their descriptions start, the run flags' bytes)
    let (n, described, runs): (usize, usize, &[u8]) = if cookie == NO_RUN_COOKIE {
        match u32_at(4) {
            Some(n) => (n as usize, 8, &[]),
            None => return false,
        }
    } else if cookie & 0xFFFF == RUN_COOKIE {
        let n = (cookie >> 16) as usize + 1;
        match buf.get(4..4 + n.div_ceil(8)) {
            Some(flags) => (n, 4 + n.div_ceil(8), flags),
            None => return false,
        }
    } else {
        return false;
    };
    let is_run = |k: usize| runs.get(k / 8).is_some_and(|b| b >> (k % 8) & 1 == 1);
    // past the descriptions and the offsets (which a run layout of fewer than four
    // containers leaves out)
    let offsets = if runs.is_empty() || n >= 4 { 4 * n } else { 0 };
    let mut at = described + 4 * n + offsets;
    for k in 0..n {
        let (Some(key), Some(card)) = (u16_at(described + 4 * k), u16_at(described + 2 + 4 * k))
        else {
            return false;
        };
        let (base, card) = (key as usize * 1024, card as usize + 1);
        if is_run(k) {
            let Some(count) = u16_at(at) else {
                return false;
            };
            at += 2;
            for _ in 0..count {
                let (Some(start), Some(len)) = (u16_at(at), u16_at(at + 2)) else {
                    return false;
                };
                let (first, last) = (start as usize, start as usize + len as usize);
                if last > u16::MAX as usize
                    || !set_range(&mut words[..], base * 64 + first, base * 64 + last)
                {
                    return false;
                }
                at += 4;
            }
        } else if card > 4096 {
            let Some(bytes) = buf.get(at..at + 8192) else {
                return false;
            };
            for (w, b) in bytes.chunks_exact(8).enumerate() {
                if let Some(x) = words.get_mut(base + w) {
                    *x = u64::from_le_bytes(b.try_into().unwrap_or_default());
                }
            }
            at += 8192;
        } else {
            let Some(values) = buf.get(at..at + 2 * card) else {
                return false;
            };
            for v in values.chunks_exact(2) {
                let v = u16::from_le_bytes([v[0], v[1]]) as usize;
                match words.get_mut(base + v / 64) {
                    Some(x) => *x |= 1 << (v % 64),
                    None => return false,
                }
            }
            at += 2 * card;
        }
    }
    at == buf.len()
}

/// Sets bits `first..=last` of `words`; `false` when they do not all fit.
fn set_range(words: &mut [u64], first: usize, last: usize) -> bool {
    if last / 64 >= words.len() {
        return false;
    }
    let (fw, lw) = (first / 64, last / 64);
    let from = |b: usize| u64::MAX << b; // bits b..64
    let upto = |b: usize| u64::MAX >> (63 - b); // bits 0..=b
    if fw == lw {
        words[fw] |= from(first % 64) & upto(last % 64);
    } else {
        words[fw] |= from(first % 64);
        words[fw + 1..lw].iter_mut().for_each(|w| *w = u64::MAX);
        words[lw] |= upto(last % 64);
    }
    true
}

/// The positions of the set bits of a chunk's words, ascending.
pub(crate) struct Positions<'a> {
    words: &'a [u64],
    w: usize,
    cur: u64,
}

impl<'a> Positions<'a> {
    pub(crate) fn of(words: &'a [u64]) -> Positions<'a> {
        Positions {
            words,
            w: 0,
            cur: words.first().copied().unwrap_or(0),
        }
    }
}

impl Iterator for Positions<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.cur == 0 {
            self.w += 1;
            self.cur = *self.words.get(self.w)?;
        }
        let b = self.cur.trailing_zeros() as usize;
        self.cur &= self.cur - 1;
        Some(self.w * 64 + b)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Lookups pay only against members in array containers: a dense set (bitmap
    /// containers) is intersected however small the other set, a sparse one of the
    /// same size is looked up in.
    #[test]
    fn lookups_pay_only_against_array_containers() {
        let dense: RoaringBitmap = (0..3 << 16).collect();
        assert_eq!(dense.statistics().n_array_containers, 0);
        assert!(!lookups_pay(10, &dense));
        // 4,000 members in each of 50 containers: arrays, 200,000 members in all
        let sparse: RoaringBitmap = (0..50u32)
            .flat_map(|c| (0..4_000u32).map(move |i| (c << 16) | (i * 16)))
            .collect();
        assert_eq!(sparse.statistics().n_bitset_containers, 0);
        assert!(lookups_pay(10, &sparse));
        assert!(!lookups_pay(10_000, &sparse));
    }

    /// `count` sets of up to 300,000 documents, each some scattered members (array
    /// containers) and up to two runs of up to 70,000 (bitmap containers).
    pub(crate) fn some_sets(
        count: std::ops::Range<usize>,
    ) -> impl Strategy<Value = Vec<RoaringBitmap>> {
        let set = (
            prop::collection::vec(0u32..300_000, 0..1_500),
            prop::collection::vec((0u32..300_000, 0u32..70_000), 0..2),
        )
            .prop_map(|(singles, runs)| {
                let mut set: RoaringBitmap = singles.into_iter().collect();
                for (start, len) in runs {
                    set.insert_range(start..start + len);
                }
                set
            });
        prop::collection::vec(set, count)
    }

    proptest! {
        /// A small set's members in a large one, found by lookups or by walking both,
        /// are the intersection.
        #[test]
        fn and_small_is_the_intersection(
            small in prop::collection::vec(0u32..200_000, 0..60),
            runs in prop::collection::vec((0u32..200_000, 0u32..9_000), 0..6),
            singles in prop::collection::vec(0u32..200_000, 0..3_000),
        ) {
            let small: RoaringBitmap = small.into_iter().collect();
            let mut big: RoaringBitmap = singles.into_iter().collect();
            for (start, len) in runs {
                big.insert_range(start..start + len);
            }
            prop_assert_eq!(and_small(&small, &big), &small & &big);
            prop_assert_eq!(and_small(&big, &small), &small & &big);
        }

        /// The union of sets, merged one into the other (a few) or united by roaring
        /// (many), holds every member of each and nothing else (compared as roaring
        /// compares sets, which takes an array container to hold at most 4,096).
        #[test]
        fn union_of_is_the_union(sets in some_sets(0..12)) {
            let expected = sets.iter().fold(RoaringBitmap::new(), |all, s| all | s);
            let united = union_of(&sets);
            prop_assert!(united.iter().eq(expected.iter()));
            prop_assert_eq!(&united, &expected);
        }

        /// A set's bitset holds exactly its members, decoded from the
        /// serialization (not the fallback) whether its containers are arrays,
        /// bitmaps or runs (a full container, or any after `optimize`), including
        /// bitmaps thinned by removals to 4,096 members or fewer.
        #[test]
        fn a_bitset_holds_the_set(
            runs in prop::collection::vec((0u32..300_000, 0u32..140_000), 0..6),
            singles in prop::collection::vec(0u32..300_000, 0..100),
            removed in prop::collection::vec((0u32..300_000, 0u32..6_000), 0..4),
            optimize: bool,
        ) {
            let mut set = RoaringBitmap::new();
            for (start, len) in runs {
                set.insert_range(start..start + len);
            }
            singles.iter().for_each(|&d| {
                set.insert(d);
            });
            for (start, len) in removed {
                set.remove_range(start..start + len);
            }
            if optimize {
                set.optimize();
            }
            let mut buf = Vec::new();
            set.serialize_into(&mut buf).unwrap();
            let mut words = vec![0u64; set.max().map_or(0, |m| m as usize + 1).div_ceil(64)];
            prop_assert!(decode_into(&buf, &mut words));
            prop_assert_eq!(&words, &words_of(&set));
            let back: Vec<u32> = words
                .iter()
                .enumerate()
                .flat_map(|(w, &x)| {
                    (0..64).filter(move |b| x >> b & 1 == 1).map(move |b| (w * 64 + b) as u32)
                })
                .collect();
            prop_assert_eq!(back, set.iter().collect::<Vec<_>>());
            let chunk = 3;
            let from = (chunk * 16).min(words.len());
            let from_positions: Vec<usize> =
                Positions::of(&words[from..(from + 16).min(words.len())]).collect();
            let want: Vec<usize> = set
                .range((chunk * 1024) as u32..((chunk + 1) * 1024) as u32)
                .map(|d| d as usize - chunk * 1024)
                .collect();
            prop_assert_eq!(from_positions, want);
        }
    }
}
