//! Keyword and groupBy values as numbers, for counting facets. A dimension's keys are
//! numbered in the order first met (`KeyNumbers`: shared by every snapshot of one
//! dimensions document and only ever appended to, so a number means the same key in
//! every column holding it, whichever snapshot built the column), and a chunk's key
//! column (`KeyCol`, built on first use) gives each document's key numbers. A facet
//! then counts a document by bumping an array slot, instead of hashing its strings or
//! intersecting thousands of keys' postings with the counted set.

use std::sync::{Arc, RwLock};

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue, StrList};

use crate::slots::Slots;
use crate::FastMap;

#[derive(Default)]
pub(crate) struct KeyNumbers {
    numbered: RwLock<Numbered>,
}

#[derive(Default)]
struct Numbered {
    by_key: FastMap<Arc<str>, u32>,
    keys: Vec<Arc<str>>,
}

/// Per dimension, the numbers of its keys (keyword and groupBy dimensions only).
pub(crate) fn numbers_for(dims: &Dimensions) -> Arc<[Option<Arc<KeyNumbers>>]> {
    dims.dims
        .iter()
        .map(|d| {
            matches!(d.kind, DimensionKind::Keyword | DimensionKind::GroupBy)
                .then(|| Arc::new(KeyNumbers::default()))
        })
        .collect()
}

impl KeyNumbers {
    /// How many keys have a number (every number is below this).
    pub(crate) fn len(&self) -> usize {
        self.read().keys.len()
    }

    /// The keys numbered `ns`, in that order.
    pub(crate) fn keys(&self, ns: impl Iterator<Item = u32>) -> Vec<Arc<str>> {
        let numbered = self.read();
        ns.map(|n| numbered.keys[n as usize].clone()).collect()
    }

    /// The numbers of `keys`, each key numbered when first met.
    fn number<'k>(&self, keys: impl Iterator<Item = &'k str> + Clone) -> Vec<u32> {
        const UNSEEN: u32 = u32::MAX;
        let mut out: Vec<u32> = {
            let numbered = self.read();
            keys.clone()
                .map(|k| numbered.by_key.get(k).copied().unwrap_or(UNSEEN))
                .collect()
        };
        if out.contains(&UNSEEN) {
            let mut numbered = self.numbered.write().unwrap_or_else(|e| e.into_inner());
            for (n, k) in out.iter_mut().zip(keys) {
                if *n == UNSEEN {
                    *n = numbered.number(k);
                }
            }
        }
        out
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Numbered> {
        // a panic while numbering leaves every number it gave valid: the lock's poison
        // says nothing about the data
        self.numbered.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Numbered {
    fn number(&mut self, key: &str) -> u32 {
        if let Some(&n) = self.by_key.get(key) {
            return n;
        }
        let n = self.keys.len() as u32;
        let key: Arc<str> = key.into();
        self.by_key.insert(key.clone(), n);
        self.keys.push(key);
        n
    }
}

/// A chunk's keys in one dimension, as numbers.
#[derive(Clone, Debug)]
pub(crate) struct KeyCol {
    /// Per document: its one key's number, `NONE`, or (with `MANY` set) where its list
    /// starts in `many` (its length, then the numbers).
    k: Box<[u32]>,
    many: Vec<u32>,
}

const NONE: u32 = u32::MAX;
const MANY: u32 = 1 << 31;

impl KeyCol {
    pub(crate) fn build(docs: &Slots, di: usize, numbers: &KeyNumbers) -> KeyCol {
        let empty = KeyCol {
            k: vec![NONE; docs.len()].into(),
            many: Vec::new(),
        };
        let all: Vec<usize> = (0..docs.len()).collect();
        empty.patched(docs, di, numbers, &all)
    }

    /// This column with the documents `changed` lists (ascending) numbered anew from
    /// their rows in `docs`; every other document keeps its numbers.
    pub(crate) fn patched(
        &self,
        docs: &Slots,
        di: usize,
        numbers: &KeyNumbers,
        changed: &[usize],
    ) -> KeyCol {
        let values: Vec<Option<&StrList>> = changed
            .iter()
            .map(|&i| match docs.value(i, di)? {
                IndexedValue::Strings(s) if !s.is_empty() => Some(s),
                _ => None,
            })
            .collect();
        let all = values.iter().flatten().flat_map(|s| s.iter());
        let mut numbered = numbers.number(all).into_iter();
        let mut k = self.k.clone();
        // the side list made anew in document order: the kept documents' lists moved
        // over, the changed documents' added
        let mut many = Vec::with_capacity(self.many.len());
        let mut next = changed.iter().zip(&values).peekable();
        let mut ns: Vec<u32> = Vec::new();
        for (i, slot) in k.iter_mut().enumerate() {
            let Some((_, v)) = next.next_if(|(&c, _)| c == i) else {
                if *slot != NONE && *slot & MANY != 0 {
                    let kept = self.keys(i);
                    *slot = MANY | many.len() as u32;
                    many.push(kept.len() as u32);
                    many.extend_from_slice(kept);
                }
                continue;
            };
            *slot = NONE;
            let Some(v) = v else { continue };
            ns.clear();
            ns.extend(numbered.by_ref().take(v.len()));
            match ns[..] {
                // (a number with `MANY`'s bit, past two billion keys, goes in a list)
                [one] if one & MANY == 0 => {
                    *slot = one;
                    continue;
                }
                _ => {}
            }
            // (a document counts once per key)
            ns.sort_unstable();
            ns.dedup();
            *slot = MANY | many.len() as u32;
            many.push(ns.len() as u32);
            many.extend_from_slice(&ns);
        }
        KeyCol { k, many }
    }

    /// The key numbers of document `i` (none without a value).
    #[inline]
    pub(crate) fn keys(&self, i: usize) -> &[u32] {
        let k = &self.k[i];
        match *k {
            NONE => &[],
            x if x & MANY != 0 => {
                let at = (x & !MANY) as usize;
                let len = self.many[at] as usize;
                &self.many[at + 1..at + 1 + len]
            }
            _ => std::slice::from_ref(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_keeps_its_number_and_a_document_lists_each_key_once() {
        let numbers = KeyNumbers::default();
        assert_eq!(numbers.number(["b", "a", "b"].into_iter()), [0, 1, 0]);
        assert_eq!(numbers.number(["a", "c"].into_iter()), [1, 2]);
        assert_eq!(numbers.len(), 3);
        assert_eq!(
            numbers.keys([2, 0].into_iter()),
            [Arc::<str>::from("c"), Arc::from("b")]
        );
        let doc = |s: &[&str]| {
            let values = vec![Some(IndexedValue::Strings(StrList::from_strs(s)))];
            Some(Arc::new(crate::Doc {
                id: "x".into(),
                id_key: 0,
                values: values.into(),
            }))
        };
        let col = KeyCol::build(
            &[doc(&["c"]), None, doc(&["d", "a", "d"]), doc(&[])]
                .into_iter()
                .collect(),
            0,
            &numbers,
        );
        assert_eq!(col.keys(0), [2]);
        assert_eq!(col.keys(1), [] as [u32; 0]);
        assert_eq!(col.keys(2), [1, 3]);
        assert_eq!(col.keys(3), [] as [u32; 0]);
        assert_eq!(numbers.len(), 4);
    }
}
