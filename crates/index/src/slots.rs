//! A chunk's document slots, in blocks that snapshots share.
//!
//! An apply copies every chunk it changes, and a delta of 1,000 items scattered over a
//! million documents changes nearly every chunk. Copying a chunk's 1,024 slots whole
//! meant 1,024 reference-count increments on documents scattered over memory (a cache
//! miss each), and as many decrements when the old snapshot went: ~17 ms of CPU per
//! delta at 1M items, much of it on the index thread an apply waits for. A copy now
//! shares the slots' blocks, and changing a slot copies only its block of 64.

use std::sync::Arc;

use crate::{Doc, CHUNK};

/// Slots per block.
const BLOCK: usize = 64;

type Block = [Option<Doc>; BLOCK];

/// `CHUNK` slots, each a document or empty.
#[derive(Clone)]
pub(crate) struct Slots {
    // (held inline, not boxed: a slot is read through as many pointers as from a flat
    // vector — a scan reads one per document)
    blocks: [Arc<Block>; CHUNK / BLOCK],
}

impl Default for Slots {
    fn default() -> Self {
        let empty: Arc<Block> = Arc::new(std::array::from_fn(|_| None));
        Slots {
            blocks: std::array::from_fn(|_| empty.clone()),
        }
    }
}

impl Slots {
    /// Slots per chunk (every chunk has them all).
    pub(crate) fn len(&self) -> usize {
        CHUNK
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Option<Doc>> {
        Some(&self.blocks.get(i / BLOCK)?[i % BLOCK])
    }

    /// Slot `i` to change: its block is copied first if another chunk shares it.
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut Option<Doc> {
        &mut Arc::make_mut(&mut self.blocks[i / BLOCK])[i % BLOCK]
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Option<Doc>> + '_ {
        self.blocks.iter().flat_map(|b| b.iter())
    }

    /// Slot `i`'s document's indexed value in dimension `di` (`None`: no document, or no
    /// value).
    pub(crate) fn value(&self, i: usize, di: usize) -> Option<discern_dimensions::ValueRef<'_>> {
        self[i].as_ref()?.value(di)
    }

    /// The slots (ascending) holding another document than in `old`, or one where it
    /// held none or none where it held one. (Documents are never changed in place: a
    /// changed document is another allocation. While `old` holds its documents, none of
    /// their addresses can be taken by a new one.)
    pub(crate) fn changed_since(&self, old: &Slots) -> Vec<usize> {
        let mut out = Vec::new();
        for (b, (now, was)) in self.blocks.iter().zip(&old.blocks).enumerate() {
            if Arc::ptr_eq(now, was) {
                continue; // (a block the copy shares)
            }
            for (j, (a, z)) in now.iter().zip(was.iter()).enumerate() {
                let same = match (a, z) {
                    (Some(a), Some(z)) => Doc::ptr_eq(a, z),
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    out.push(b * BLOCK + j);
                }
            }
        }
        out
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = Option<Doc>;

    fn index(&self, i: usize) -> &Self::Output {
        &self.blocks[i / BLOCK][i % BLOCK]
    }
}

/// Slots from a chunk's documents in order (the rest empty; any beyond `CHUNK` dropped).
impl FromIterator<Option<Doc>> for Slots {
    fn from_iter<I: IntoIterator<Item = Option<Doc>>>(docs: I) -> Self {
        let mut docs = docs.into_iter();
        Slots {
            blocks: std::array::from_fn(|_| {
                Arc::new(std::array::from_fn(|_| docs.next().flatten()))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str) -> Option<Doc> {
        Some(Doc::new(id.into(), Default::default()))
    }

    fn ids(s: &Slots) -> Vec<Option<String>> {
        s.iter()
            .map(|d| d.as_ref().map(|d| d.id.to_string()))
            .collect()
    }

    /// A copy changed in one slot leaves the original as it was, and shares the blocks
    /// it did not change.
    #[test]
    fn a_changed_copy_leaves_the_original() {
        let mut a: Slots = (0..CHUNK)
            .map(|i| (i % 3 == 0).then(|| doc(&i.to_string())).flatten())
            .collect();
        let before = ids(&a);
        let mut b = a.clone();
        *b.get_mut(70) = doc("new");
        *b.get_mut(1023) = None;
        assert_eq!(ids(&a), before);
        let mut want = before.clone();
        want[70] = Some("new".into());
        want[1023] = None;
        assert_eq!(ids(&b), want);
        assert_eq!(b.len(), CHUNK);
        assert_eq!(b[70].as_ref().map(|d| &*d.id), Some("new"));
        assert!(b.get(CHUNK).is_none());
        let shared = a
            .blocks
            .iter()
            .zip(b.blocks.iter())
            .filter(|(x, y)| Arc::ptr_eq(x, y))
            .count();
        assert_eq!(shared, CHUNK / BLOCK - 2);
        // and the original can change without touching the copy
        *a.get_mut(0) = None;
        assert_eq!(ids(&b)[0].as_deref(), Some("0"));
    }
}
