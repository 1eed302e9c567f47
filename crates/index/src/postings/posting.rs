//! `Posting`: one key's documents in one word. Most keys of a dimension of unique values
//! are held by one document (at a million items, ~800k of the address dimension's 858k
//! keys): a shared roaring bitmap of one document costs ~90 bytes in three allocations
//! (its count and container list, the container, the array), where the document number
//! fits in the word that would point to it.
//!
//! The word is either `doc << 1 | 1` (one document) or the address of an
//! `Arc<RoaringBitmap>`'s bitmap, which is a multiple of 8 (it follows the counts), so
//! its low bit is 0. A posting is never empty: a key without documents is not kept.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::Arc;

use roaring::{MultiOps, RoaringBitmap};

pub(crate) struct Posting(NonZeroU64);

const ONE: u64 = 1;

// (`Send` and `Sync` as a plain number is: right, since what a posting may point to —
// one count of an `Arc<RoaringBitmap>` — is both.)

/// A posting's documents, lent.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PostingRef<'a> {
    One(u32),
    Many(&'a RoaringBitmap),
}

impl Posting {
    pub(crate) fn one(doc: u32) -> Posting {
        Posting(NonZeroU64::new(u64::from(doc) << 1 | ONE).expect("the tag bit is set"))
    }

    /// The posting of `set`'s documents; `None` when it has none.
    pub(crate) fn of(set: RoaringBitmap) -> Option<Posting> {
        match set.len() {
            0 => None,
            1 => set.min().map(Posting::one),
            _ => Some(Posting::shared(Arc::new(set))),
        }
    }

    /// The posting of a shared set's documents; `None` when it has none.
    pub(crate) fn of_shared(set: Arc<RoaringBitmap>) -> Option<Posting> {
        match set.len() {
            0 => None,
            1 => set.min().map(Posting::one),
            _ => Some(Posting::shared(set)),
        }
    }

    fn shared(set: Arc<RoaringBitmap>) -> Posting {
        let raw = Arc::into_raw(set) as u64;
        debug_assert!(raw & ONE == 0, "an Arc's value is aligned past its counts");
        Posting(NonZeroU64::new(raw).expect("an Arc's address is not null"))
    }

    fn pointer(&self) -> Option<*const RoaringBitmap> {
        (self.0.get() & ONE == 0).then_some(self.0.get() as *const RoaringBitmap)
    }

    pub(crate) fn get(&self) -> PostingRef<'_> {
        match self.pointer() {
            // SAFETY: a pointer posting holds one count of the `Arc` whose value is at
            // this address (`shared`), given back only by `drop`/`into_shared`, which
            // take `self`: the bitmap lives at least as long as this borrow, and an `Arc`'s
            // value is never changed while shared (only `Arc::make_mut` on an owned
            // `Arc` changes one, and `into_shared` hands out the `Arc` by value).
            Some(p) => PostingRef::Many(unsafe { &*p }),
            None => PostingRef::One((self.0.get() >> 1) as u32),
        }
    }

    /// The documents as a shared set (a set of one is made), for changing it with
    /// `Arc::make_mut`.
    pub(crate) fn into_shared(self) -> Arc<RoaringBitmap> {
        let this = std::mem::ManuallyDrop::new(self);
        match this.pointer() {
            // SAFETY: the count this posting held (`shared`) moves to the returned `Arc`,
            // and `self` is not dropped (`ManuallyDrop`), so it is given back only once.
            Some(p) => unsafe { Arc::from_raw(p) },
            None => Arc::new(RoaringBitmap::from_iter([(this.0.get() >> 1) as u32])),
        }
    }
}

impl Clone for Posting {
    fn clone(&self) -> Posting {
        if let Some(p) = self.pointer() {
            // SAFETY: `p` came from `Arc::into_raw` and this posting's count keeps it
            // alive: taking one more count for the clone, which `drop` gives back.
            unsafe { Arc::increment_strong_count(p) };
        }
        Posting(self.0)
    }
}

impl Drop for Posting {
    fn drop(&mut self) {
        if let Some(p) = self.pointer() {
            // SAFETY: gives back the one count this posting holds (from `shared` or
            // `clone`); the word is not used after.
            unsafe { drop(Arc::from_raw(p)) };
        }
    }
}

impl std::fmt::Debug for Posting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl<'a> PostingRef<'a> {
    pub(crate) fn len(self) -> u64 {
        match self {
            PostingRef::One(_) => 1,
            PostingRef::Many(b) => b.len(),
        }
    }

    pub(crate) fn iter(self) -> impl Iterator<Item = u32> + 'a {
        let (one, many) = match self {
            PostingRef::One(d) => (Some(d), None),
            PostingRef::Many(b) => (None, Some(b.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The documents as a bitmap: the shared one lent, a set of one made.
    pub(crate) fn bitmap(self) -> Cow<'a, RoaringBitmap> {
        match self {
            PostingRef::One(d) => Cow::Owned(RoaringBitmap::from_iter([d])),
            PostingRef::Many(b) => Cow::Borrowed(b),
        }
    }

    /// How many of the documents are in `other`.
    pub(crate) fn intersection_len(self, other: &RoaringBitmap) -> u64 {
        match self {
            PostingRef::One(d) => u64::from(other.contains(d)),
            PostingRef::Many(b) => b.intersection_len(other),
        }
    }

    /// The documents also in `other`.
    pub(crate) fn and(self, other: &RoaringBitmap) -> RoaringBitmap {
        match self {
            PostingRef::One(d) if other.contains(d) => RoaringBitmap::from_iter([d]),
            PostingRef::One(_) => RoaringBitmap::new(),
            PostingRef::Many(b) => b & other,
        }
    }

    /// Adds the documents to `to`.
    pub(crate) fn or_into(self, to: &mut RoaringBitmap) {
        match self {
            PostingRef::One(d) => {
                to.insert(d);
            }
            PostingRef::Many(b) => *to |= b,
        }
    }
}

/// The union of `sets`: the shared ones in one multi-way union (or-ing small arrays one
/// by one copies them each time), the single documents added after.
pub(crate) fn union<'a>(sets: impl IntoIterator<Item = PostingRef<'a>>) -> RoaringBitmap {
    let mut ones = Vec::new();
    let mut shared = Vec::new();
    for s in sets {
        match s {
            PostingRef::One(d) => ones.push(d),
            PostingRef::Many(b) => shared.push(b),
        }
    }
    let mut all = shared.into_iter().union();
    if !ones.is_empty() {
        ones.sort_unstable();
        ones.dedup();
        all |= RoaringBitmap::from_sorted_iter(ones).unwrap_or_default();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A posting holds its set's documents through clones, and a set of one is a
        /// document in place; every count taken is given back.
        #[test]
        fn a_posting_holds_its_set(docs in prop::collection::btree_set(any::<u32>(), 0..40)) {
            let set: RoaringBitmap = docs.iter().copied().collect();
            let Some(p) = Posting::of(set.clone()) else {
                prop_assert!(docs.is_empty());
                return Ok(());
            };
            prop_assert_eq!(matches!(p.get(), PostingRef::One(_)), docs.len() == 1);
            let q = p.clone();
            prop_assert_eq!(&*p.get().bitmap(), &set);
            prop_assert_eq!(q.get().len(), docs.len() as u64);
            prop_assert!(q.get().iter().eq(docs.iter().copied()));
            let shared = q.into_shared();
            prop_assert_eq!(&*shared, &set);
            if docs.len() > 1 {
                // the posting and the `Arc` taken out of its clone: two counts
                prop_assert_eq!(Arc::strong_count(&shared), 2);
                drop(p);
                prop_assert_eq!(Arc::strong_count(&shared), 1);
            }
        }

        /// `union` equals the union of the sets as bitmaps, repeats and all.
        #[test]
        fn union_equals_bitmap_union(
            sets in prop::collection::vec(prop::collection::btree_set(0u32..200, 1..6), 0..8)
        ) {
            let postings: Vec<Posting> = sets
                .iter()
                .filter_map(|s| Posting::of(s.iter().copied().collect()))
                .collect();
            let want: RoaringBitmap = sets.iter().flatten().copied().collect();
            prop_assert_eq!(union(postings.iter().map(Posting::get)), want);
        }
    }

    #[test]
    fn a_word_per_posting() {
        assert_eq!(std::mem::size_of::<Posting>(), 8);
        assert_eq!(std::mem::size_of::<Option<Posting>>(), 8);
        let last = Posting::one(u32::MAX);
        assert!(matches!(last.get(), PostingRef::One(u32::MAX)));
        assert!(last.get().iter().eq([u32::MAX]));
    }
}
