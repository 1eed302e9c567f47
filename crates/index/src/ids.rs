//! The writer's map from item id to document number, holding only numbers: each entry
//! is a document number and 32 bits of its id's hash, and a lookup compares the id
//! with the document's own (`Doc::id`). A map keyed by the ids (`Arc<str>`, shared
//! with the documents) took 24 bytes a bucket, 52 MB at a million items; this one
//! takes 8 (21 MB).

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

#[derive(Clone, Copy)]
struct Entry {
    doc: u32,
    hash: u32,
}

#[derive(Clone, Default)]
pub(crate) struct IdIndex {
    table: HashTable<Entry>,
    hasher: DefaultHashBuilder,
}

/// The table's hash of an entry: its 32 bits spread over 64 (the table picks buckets
/// by the low bits and tags entries by the high ones).
fn spread(hash: u32) -> u64 {
    (hash as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl IdIndex {
    pub(crate) fn with_capacity(n: usize) -> IdIndex {
        IdIndex {
            table: HashTable::with_capacity(n),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn hash(&self, id: &str) -> u32 {
        self.hasher.hash_one(id) as u32
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// The document of `id`; `id_of` gives a listed document's id.
    pub(crate) fn get<'d>(&self, id: &str, id_of: impl Fn(u32) -> Option<&'d str>) -> Option<u32> {
        let hash = self.hash(id);
        self.table
            .find(spread(hash), |e| e.hash == hash && id_of(e.doc) == Some(id))
            .map(|e| e.doc)
    }

    /// Lists document `doc` as `id`'s (which no document has).
    pub(crate) fn insert(&mut self, id: &str, doc: u32) {
        let hash = self.hash(id);
        self.table
            .insert_unique(spread(hash), Entry { doc, hash }, |e| spread(e.hash));
    }

    /// Unlists document `doc`, listed as `id`'s; whether it was.
    pub(crate) fn remove(&mut self, id: &str, doc: u32) -> bool {
        let hash = self.hash(id);
        match self.table.find_entry(spread(hash), |e| e.doc == doc) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The index answers as a map from id to document would, through inserts and
        /// removals (many ids, so that the table grows and shrinks).
        #[test]
        fn answers_as_a_map(ops in prop::collection::vec((0u32..3000, any::<bool>()), 1..4000)) {
            let mut index = IdIndex::default();
            let mut want: HashMap<String, u32> = HashMap::new();
            // the documents' ids, by number
            let mut docs: HashMap<u32, String> = HashMap::new();
            let mut next = 0u32;
            for (k, add) in ops {
                let id = format!("item-{k}");
                match (add, want.get(&id).copied()) {
                    (true, None) => {
                        index.insert(&id, next);
                        docs.insert(next, id.clone());
                        want.insert(id, next);
                        next += 1;
                    }
                    (false, Some(doc)) => {
                        prop_assert!(index.remove(&id, doc));
                        prop_assert!(!index.remove(&id, doc));
                        docs.remove(&doc);
                        want.remove(&id);
                    }
                    _ => {}
                }
            }
            prop_assert_eq!(index.len(), want.len());
            for k in 0..3000u32 {
                let id = format!("item-{k}");
                let got = index.get(&id, |d| docs.get(&d).map(String::as_str));
                prop_assert_eq!(got, want.get(&id).copied());
            }
        }
    }
}
