//! Keyword and groupBy values as numbers, for counting facets. A dimension's keys are
//! numbered in the order first met (`Numbering`: shared by every snapshot of one
//! dimensions document and only ever appended to, so a number means the same key in
//! every column holding it, whichever snapshot built the column), and a chunk's key
//! column (`KeyCol`, built on first use) gives each document's key numbers. A facet
//! then counts a document by bumping an array slot, instead of hashing its strings or
//! intersecting thousands of keys' postings with the counted set.

use std::sync::Arc;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue, StrList};

use crate::numbering::Numbering;
use crate::slots::Slots;

/// Per dimension, the numbers of its keys (keyword and groupBy dimensions only).
pub(crate) fn numbers_for(dims: &Dimensions) -> Arc<[Option<Arc<Numbering>>]> {
    dims.dims
        .iter()
        .map(|d| {
            matches!(d.kind, DimensionKind::Keyword | DimensionKind::GroupBy)
                .then(|| Arc::new(Numbering::default()))
        })
        .collect()
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
    pub(crate) fn bytes(&self) -> usize {
        4 * self.k.len() + 4 * self.many.capacity()
    }

    pub(crate) fn build(docs: &Slots, di: usize, numbers: &Numbering) -> KeyCol {
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
        numbers: &Numbering,
        changed: &[usize],
    ) -> KeyCol {
        let values: Vec<Option<StrList>> = changed
            .iter()
            .map(|&i| match &*docs.value(i, di)? {
                IndexedValue::Strings(s) if !s.is_empty() => Some(s.clone()),
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
    fn a_document_lists_each_key_once() {
        // numbered as met: b 0, a 1, c 2 (`numbering`'s tests), then d 3
        let numbers = Numbering::default();
        numbers.number(["b", "a", "c"].into_iter());
        let doc = |s: &[&str]| {
            let values = vec![Some(IndexedValue::Strings(StrList::from_strs(s)))];
            Some(crate::Doc::new("x".into(), values.into()))
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
