//! `Many<T>`: a shared, immutable slice behind a one-word pointer. Its length lives in
//! the allocation (triomphe's `ThinArc`), where `Arc<[T]>` and `Box<[T]>` carry it
//! beside the pointer; so an `IndexedValue`, one per dimension per document, takes two
//! words instead of three (at a million documents and 21 dimensions, 168 MB less).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use triomphe::ThinArc;

pub struct Many<T>(ThinArc<(), T>);

impl<T> Many<T> {
    /// Whether another value shares this one's allocation.
    pub fn is_shared(&self) -> bool {
        ThinArc::strong_count(&self.0) > 1
    }

    /// How many values share this one's allocation.
    pub fn share_count(&self) -> usize {
        ThinArc::strong_count(&self.0)
    }

    /// The bytes of its allocation: the reference count and length beside the items.
    pub fn heap_bytes(&self) -> usize {
        16 + std::mem::size_of_val::<[T]>(self)
    }

    /// This value's share of the heap bytes it holds: its allocation divided among the
    /// values sharing it.
    pub fn heap_bytes_share(&self) -> usize {
        self.heap_bytes() / self.share_count()
    }

    /// The allocation's address, keeping its count (`slot.rs` packs it in a word). Every
    /// address this gives is a multiple of 8: the allocation starts with the count.
    pub(crate) fn into_raw(self) -> *const std::ffi::c_void {
        ThinArc::into_raw(self.0)
    }

    /// The value `into_raw` gave `raw` for, taking over the count it kept.
    ///
    /// # Safety
    /// `raw` came from `Many::<T>::into_raw` (the same `T`), and that count is taken
    /// over once: by one `from_raw` whose value is dropped, or by any number whose
    /// values never are (`ManuallyDrop`) while the owner of the count lives.
    pub(crate) unsafe fn from_raw(raw: *const std::ffi::c_void) -> Many<T> {
        // SAFETY: the caller's contract is `ThinArc::from_raw`'s.
        Many(unsafe { ThinArc::from_raw(raw) })
    }

    /// The address of the first element (tests of sharing).
    pub fn as_ptr(&self) -> *const T {
        self.0.slice.as_ptr()
    }
}

impl<T: Clone> From<&[T]> for Many<T> {
    fn from(items: &[T]) -> Many<T> {
        Many(ThinArc::from_header_and_iter((), items.iter().cloned()))
    }
}

impl<T> From<Vec<T>> for Many<T> {
    fn from(items: Vec<T>) -> Many<T> {
        Many(ThinArc::from_header_and_iter((), items.into_iter()))
    }
}

impl<T, const N: usize> From<[T; N]> for Many<T> {
    fn from(items: [T; N]) -> Many<T> {
        Many(ThinArc::from_header_and_iter((), items.into_iter()))
    }
}

impl<T> FromIterator<T> for Many<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Many<T> {
        Vec::from_iter(items).into()
    }
}

impl<T> Clone for Many<T> {
    fn clone(&self) -> Many<T> {
        Many(self.0.clone())
    }
}

impl<T> Deref for Many<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        &self.0.slice
    }
}

/// Lets a set of values be searched with a plain slice: a value hashes and compares as
/// its slice.
impl<T> Borrow<[T]> for Many<T> {
    fn borrow(&self) -> &[T] {
        self
    }
}

impl<T: PartialEq> PartialEq for Many<T> {
    fn eq(&self, other: &Many<T>) -> bool {
        **self == **other
    }
}

impl<T: Eq> Eq for Many<T> {}

impl<T: Hash> Hash for Many<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl<T: fmt::Debug> fmt::Debug for Many<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_value_is_its_slice_behind_one_word() {
        assert_eq!(std::mem::size_of::<Many<u64>>(), 8);
        let a: Many<u32> = vec![3, 1, 2].into();
        let b = a.clone();
        assert_eq!(&*b, &[3, 1, 2]);
        assert!(a.is_shared());
        assert_eq!(a.share_count(), 2);
        assert_eq!(a.heap_bytes_share(), (16 + 12) / 2);
        assert_eq!(a.as_ptr(), b.as_ptr());
        let c: Many<u32> = [3, 1, 2].into();
        assert_eq!(a, c);
        assert!(!c.is_shared());
        let set: HashSet<Many<u32>> = [a].into_iter().collect();
        assert!(set.contains(&[3u32, 1, 2][..]));
        assert!(!set.contains(&[3u32, 1][..]));
        let empty: Many<u8> = Vec::new().into();
        assert!(empty.is_empty());
    }
}
