//! Text fields' length classes: a field length's class (`length_class`), and a field's
//! classes as running unions (`ShorterThan`), cached with the postings they came from
//! and changed with them (`ShorterCache`).

use std::sync::{Arc, Mutex};

use roaring::RoaringBitmap;

use super::{apply, text_length_key, DimPostings, Key};

/// A text field's documents by length class as running unions, shortest class first:
/// (the class's shortest length, the documents of it or a shorter class). A bound that
/// falls with the length is reached by a prefix of the classes: one intersection with
/// one of these, not a union of classes per request (`ranked::bounds`).
pub(crate) type ShorterThan = Arc<[(usize, RoaringBitmap)]>;

/// `ShorterThan` per text field, made when a request first needs it. A copy starts
/// empty, and an apply changes the unions of the postings it changes in place or drops
/// them (`ShorterCache::change`): it holds only what its postings give.
#[derive(Default)]
pub(crate) struct ShorterCache(Mutex<Vec<(usize, ShorterThan)>>);

/// The shortest length of a length-class key's class (the class is the key's last two
/// bytes: `text_length_key`).
fn length_class_bound(key: &[u8]) -> usize {
    let class = match key {
        [.., c0, c1] => u16::from_be_bytes([*c0, *c1]),
        _ => 0,
    };
    length_class_bounds(class).0
}

impl ShorterCache {
    /// Brings the unions up to date with an apply's changes to their postings: `keys`,
    /// per key in key order the documents added and removed (disjoint), made `postings`.
    /// Each field's are changed in place — where this cache is their only holder and
    /// the apply made or emptied none of the field's classes — else dropped, to be
    /// united again when next needed. An apply through the writer's spare changes
    /// postings held by nothing else, so a burst of deltas unites no field from
    /// scratch: that was a copy of every running union (megabytes of fresh memory a
    /// field) after every apply.
    pub(crate) fn change(
        &mut self,
        keys: &[(Key, RoaringBitmap, RoaringBitmap)],
        postings: &DimPostings,
    ) {
        let cache = self.0.get_mut().unwrap_or_else(|e| e.into_inner());
        cache.retain_mut(|(field, unions)| {
            let prefix = &text_length_key(*field, 0)[..3];
            let start = keys.partition_point(|(k, ..)| &k[..] < prefix);
            let len = keys[start..].partition_point(|(k, ..)| k.starts_with(prefix));
            let changed = &keys[start..start + len];
            if changed.is_empty() {
                return true;
            }
            let Some(classes) = Arc::get_mut(unions) else {
                return false;
            };
            // a class made or emptied would add or drop a union: united again instead
            let same_classes = changed.iter().all(|(k, ..)| {
                let had = classes
                    .binary_search_by_key(&length_class_bound(k), |c| c.0)
                    .is_ok();
                had == postings.contains_key(k)
            });
            if !same_classes {
                return false;
            }
            // A class's union is the documents of it or a shorter one: those that left
            // any class up to it are taken out, those that joined one put in (a document
            // is in one class at a time, so one that moved between two such classes is
            // both, and stays).
            let (mut added, mut removed) = (RoaringBitmap::new(), RoaringBitmap::new());
            let mut next = changed.iter().peekable();
            for (bound, running) in classes.iter_mut() {
                while let Some((_, add, remove)) =
                    next.next_if(|(k, ..)| length_class_bound(k) <= *bound)
                {
                    added |= add;
                    removed |= remove;
                }
                if !added.is_empty() || !removed.is_empty() {
                    apply::change_set(running, &added, &(&removed - &added));
                }
            }
            true
        });
    }

    /// The fields whose unions are made.
    pub(crate) fn fields(&self) -> Vec<usize> {
        let cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache.iter().map(|(f, _)| *f).collect()
    }

    /// The unions' size, for the postings' estimate (`DimPostings::bytes`).
    pub(super) fn bytes(&self) -> usize {
        let cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .iter()
            .flat_map(|(_, s)| s.iter())
            .map(|(_, b)| b.serialized_size())
            .sum()
    }
}

impl Clone for ShorterCache {
    fn clone(&self) -> ShorterCache {
        ShorterCache::default()
    }
}

impl DimPostings {
    /// Field `field`'s length classes as running unions (`ShorterThan`).
    pub(crate) fn shorter_than(&self, field: usize) -> ShorterThan {
        let mut cache = self.shorter.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = cache.iter().find(|(f, _)| *f == field) {
            return s.clone();
        }
        let made = self.united_length_classes(field);
        cache.push((field, made.clone()));
        made
    }

    /// Field `field`'s length classes united from the postings (`shorter_than` without
    /// its cache).
    pub(crate) fn united_length_classes(&self, field: usize) -> ShorterThan {
        // (classes in key order: shortest first)
        let mut running = RoaringBitmap::new();
        self.prefix_entries(&text_length_key(field, 0)[..3])
            .map(|(key, b)| {
                b.or_into(&mut running);
                (length_class_bound(key), running.clone())
            })
            .collect()
    }
}

/// Field lengths below this are classes of their own.
const EXACT_LENGTHS: usize = 16;

/// The class of a field length (in tokens, at least 1): itself below `EXACT_LENGTHS`,
/// then eight classes per power of two, so that a class's longest length is at most
/// 1.125 times its shortest.
pub(crate) fn length_class(len: usize) -> u16 {
    if len < EXACT_LENGTHS {
        return len as u16;
    }
    let e = usize::BITS - 1 - len.leading_zeros(); // >= 4
    let m = (len >> (e - 3)) & 7;
    (EXACT_LENGTHS + (e as usize - 4) * 8 + m) as u16
}

/// The shortest and longest field length of a class (`length_class` inverted).
pub(crate) fn length_class_bounds(class: u16) -> (usize, usize) {
    let c = class as usize;
    if c < EXACT_LENGTHS {
        return (c, c);
    }
    let (e, m) = ((c - EXACT_LENGTHS) / 8 + 4, (c - EXACT_LENGTHS) % 8);
    if e >= usize::BITS as usize {
        return (usize::MAX, usize::MAX);
    }
    let lo = (8 + m) << (e - 3);
    (lo, lo + (1 << (e - 3)) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A length's class holds it, spans at most 1.125 times its shortest length, and
        /// classes are ordered as lengths are.
        #[test]
        fn length_classes_hold_their_lengths(len in 1usize..1 << 40, other in 1usize..1 << 40) {
            let class = length_class(len);
            let (lo, hi) = length_class_bounds(class);
            prop_assert!(lo <= len && len <= hi, "{} not in class {} = [{}, {}]", len, class, lo, hi);
            prop_assert!(hi as f64 <= lo as f64 * 1.125, "class {} = [{}, {}]", class, lo, hi);
            if len <= other {
                prop_assert!(class <= length_class(other));
            }
        }
    }
}
