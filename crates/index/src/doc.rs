//! A document of the index: its id and one indexed value per dimension.

use discern_dimensions::{IndexedValue, Slot, ValueRef};

use crate::hits;

/// One indexed value slot per dimension, in document order.
pub type DocValues = Box<[Option<IndexedValue>]>;

/// A document of the index: its id and one indexed value per dimension, each in one
/// word (`Slot`), in one allocation behind a one-word pointer (a clone costs a
/// reference count). Reads as its `DocHead` (`doc.id`, `doc.id_key()`); `value` and
/// `values` give the values.
#[derive(Clone)]
pub struct Doc(triomphe::ThinArc<DocHead, Option<Slot>>);

/// What a document holds beside its values: its id, behind a one-word pointer (with
/// 21 dimensions, the document's allocation is then 192 bytes, not 224).
pub struct DocHead {
    pub id: DocId,
}

impl DocHead {
    /// `hits::id_key(id)` (the columns keep it for ordering ties: `ChunkCols::id_key`).
    #[inline]
    pub fn id_key(&self) -> u64 {
        hits::id_key(&self.id)
    }
}

/// A document's id: shared, immutable, one word (its length lives in the allocation).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DocId(discern_dimensions::Many<u8>);

impl From<&str> for DocId {
    fn from(id: &str) -> DocId {
        DocId(id.as_bytes().into())
    }
}

impl std::ops::Deref for DocId {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        // SAFETY: a `DocId` is made only from a `str` (`From<&str>`), and its bytes are
        // never changed.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl std::fmt::Debug for DocId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl std::fmt::Display for DocId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Doc {
    /// Document `id` with `values`, one per dimension in document order.
    pub fn new(id: DocId, values: DocValues) -> Doc {
        Doc(triomphe::ThinArc::from_header_and_iter(
            DocHead { id },
            values.into_vec().into_iter().map(|v| v.map(Slot::from)),
        ))
    }

    /// The value of dimension `di` (`None`: none, or no such dimension).
    #[inline]
    pub fn value(&self, di: usize) -> Option<ValueRef<'_>> {
        self.0.slice.get(di)?.as_ref().map(Slot::get)
    }

    /// One entry per dimension, in document order; `None` = no indexed value.
    pub fn values(&self) -> impl ExactSizeIterator<Item = Option<ValueRef<'_>>> + '_ {
        self.0.slice.iter().map(|s| s.as_ref().map(Slot::get))
    }

    /// The values as the row holds them (for comparing rows).
    pub(crate) fn slots(&self) -> &[Option<Slot>] {
        &self.0.slice
    }

    /// Whether `a` and `b` are the same allocation (one document, shared).
    pub fn ptr_eq(a: &Doc, b: &Doc) -> bool {
        std::ptr::eq(&a.0.header, &b.0.header)
    }
}

impl std::ops::Deref for Doc {
    type Target = DocHead;
    #[inline]
    fn deref(&self) -> &DocHead {
        &self.0.header.header
    }
}

impl std::fmt::Debug for Doc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doc")
            .field("id", &self.id)
            .field("values", &self.slots())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document's allocation is its count, its id's pointer, its length and one word
    /// per dimension; its id reads back, and its id key is the id's.
    #[test]
    fn a_document_is_three_words_and_one_per_dimension() {
        assert_eq!(std::mem::size_of::<DocHead>(), 8);
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 8);
        let d = Doc::new(
            "item-7".into(),
            vec![None, Some(IndexedValue::Int(3))].into(),
        );
        assert_eq!(&*d.id, "item-7");
        assert_eq!(d.id_key(), hits::id_key("item-7"));
        assert_eq!(d.value(1).as_deref(), Some(&IndexedValue::Int(3)));
        assert!(d.value(0).is_none() && d.value(2).is_none());
    }
}
