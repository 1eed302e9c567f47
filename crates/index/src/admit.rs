//! A request's `items`, `notItems` and `exactMatchesOnly` (`Filter`) resolved against
//! one snapshot: the documents the ids name, as sets. A snapshot keeps no map from id to
//! document (the writer's takes ~21 MB at a million items), so the ids are found by one
//! pass over the chunks' id key columns — a million keys in about a millisecond — after
//! which admitting a document is a set lookup. Checking each scanned document's id
//! string against the request's ids instead (a hash and a row read per document) took
//! a 20-id request 31 ms at a million items.

use std::borrow::Cow;
use std::collections::HashSet;

use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::eval::Filter;
use crate::hits::id_key;
use crate::Snapshot;

pub(crate) struct Admit {
    /// `items`: only these documents, when given.
    only: Option<RoaringBitmap>,
    /// `notItems`: never these.
    not: RoaringBitmap,
    pub(crate) exact_only: bool,
}

impl Admit {
    pub(crate) fn new(snap: &Snapshot, filter: &Filter<'_>) -> Admit {
        Admit {
            only: filter.items.map(|ids| docs_named(snap, ids)),
            not: filter
                .not_items
                .map(|ids| docs_named(snap, ids))
                .unwrap_or_default(),
            exact_only: filter.exact_only,
        }
    }

    /// Whether every document is admitted: then a scan need not look documents up.
    pub(crate) fn admits_all(&self) -> bool {
        self.only.is_none() && self.not.is_empty()
    }

    pub(crate) fn admits(&self, doc: u32) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(doc)) && !self.not.contains(doc)
    }

    /// Leaves in `set` only the documents admitted.
    pub(crate) fn restrict(&self, set: &mut RoaringBitmap) {
        if let Some(only) = &self.only {
            *set &= only;
        }
        if !self.not.is_empty() {
            *set -= &self.not;
        }
    }

    /// `set` with only the documents admitted (as it is when every one is).
    pub(crate) fn restricted<'s>(&self, set: &'s RoaringBitmap) -> Cow<'s, RoaringBitmap> {
        if self.admits_all() {
            return Cow::Borrowed(set);
        }
        let mut set = set.clone();
        self.restrict(&mut set);
        Cow::Owned(set)
    }

    /// The documents admitted, when `items` names them (`None`: all but `notItems`).
    pub(crate) fn named(&self) -> Option<RoaringBitmap> {
        self.only.as_ref().map(|only| only - &self.not)
    }
}

/// The documents of `snap` whose ids are among `ids`.
fn docs_named(snap: &Snapshot, ids: &HashSet<String>) -> RoaringBitmap {
    if ids.is_empty() {
        return RoaringBitmap::new();
    }
    let keys = KeySet::new(ids.iter().map(|id| id_key(id)));
    let found: Vec<Vec<u32>> = (0..snap.chunks().len())
        .into_par_iter()
        .map(|c| {
            let chunk = &snap.chunks()[c];
            let base = (c * crate::CHUNK) as u32;
            // (every chunk has columns, built here if an apply left it none)
            let Some(cols) = snap.chunk_cols(c) else {
                return Vec::new();
            };
            let mut found = Vec::new();
            // the key column first: most documents are passed by without reading their
            // rows (a cache miss each)
            for (i, &key) in cols.id_keys().iter().enumerate() {
                if keys.may_hold(key)
                    && matches!(chunk.docs.get(i), Some(Some(doc)) if ids.contains(&*doc.id))
                {
                    found.push(base + i as u32);
                }
            }
            found
        })
        .collect();
    let mut out = RoaringBitmap::new();
    for docs in found {
        // (each chunk's in ascending order, the chunks in order)
        let _ = out.append(docs);
    }
    out
}

/// Id keys, tested by a bit per hash bucket and then exactly.
struct KeySet {
    bits: Vec<u64>,
    shift: u32,
    keys: Vec<u64>,
}

impl KeySet {
    fn new(keys: impl Iterator<Item = u64>) -> KeySet {
        let mut keys: Vec<u64> = keys.collect();
        keys.sort_unstable();
        keys.dedup();
        // about 64 bits a key (4,096 at least): few documents pass the bits by chance
        let bits_len = (keys.len() * 64).next_power_of_two().max(4096);
        let shift = 64 - bits_len.trailing_zeros();
        let mut set = KeySet {
            bits: vec![0; bits_len / 64],
            shift,
            keys: Vec::new(),
        };
        for &k in &keys {
            let b = set.bucket(k);
            set.bits[b / 64] |= 1 << (b % 64);
        }
        set.keys = keys;
        set
    }

    fn bucket(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn may_hold(&self, key: u64) -> bool {
        let b = self.bucket(key);
        self.bits[b / 64] >> (b % 64) & 1 == 1 && self.keys.binary_search(&key).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{keyword_dims, put_strings};
    use crate::IndexWriter;
    use discern_model::Record;
    use proptest::prelude::*;

    /// The documents named are those whose ids are asked for, across chunks, with ids
    /// sharing their first 8 bytes (one key for all: each checked by its id) beside
    /// short ones, ids not held, and documents removed.
    #[test]
    fn ids_name_their_documents() {
        let mut w = IndexWriter::new();
        let mut b = w.begin(&crate::Snapshot::empty(keyword_dims()));
        let n = 3 * crate::CHUNK + 100;
        let id = |i: usize| {
            if i.is_multiple_of(3) {
                format!("s{i}")
            } else {
                format!("listing-{i:05}")
            }
        };
        for i in 0..n {
            let mut rec = Record::default();
            put_strings(&mut rec, "k", vec!["a".to_string()]);
            b.upsert(&id(i), &rec);
        }
        for i in (0..n).step_by(11) {
            b.delete(&id(i));
        }
        let snap = b.commit();
        let asked: HashSet<String> = (0..n + 50)
            .filter(|i| i.is_multiple_of(7) || i % 5 == 1)
            .map(id)
            .chain(["listing-".to_string(), "s".to_string(), String::new()])
            .collect();
        let want: Vec<u32> = (0..(snap.chunks().len() * crate::CHUNK) as u32)
            .filter(|&d| snap.doc(d).is_some_and(|doc| asked.contains(&*doc.id)))
            .collect();
        assert!(want.len() > 100);
        let got: Vec<u32> = docs_named(&snap, &asked).iter().collect();
        assert_eq!(got, want);
        assert!(docs_named(&snap, &HashSet::new()).is_empty());
    }

    proptest! {
        /// The key set holds exactly the keys it was made of.
        #[test]
        fn key_set_holds_its_keys(
            keys in prop::collection::vec(any::<u64>(), 0..200),
            others in prop::collection::vec(any::<u64>(), 0..200),
        ) {
            let set = KeySet::new(keys.iter().copied());
            for k in keys.iter().chain(&others) {
                prop_assert_eq!(set.may_hold(*k), keys.contains(k));
            }
        }
    }
}
