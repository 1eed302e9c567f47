//! One shared copy of each keyword, text or element list a dimension repeats across
//! documents.
//!
//! Many dimensions hold few distinct values over many items (`_propertyName` lists,
//! agencies — also as text — cities, ZIP codes): at a million items, the rows held ~350
//! bytes per document of such repeats. The writer interns each new document's string
//! values (`StrList`s share their allocation), per dimension, while that pays: a
//! dimension whose repeats save fewer bytes than its table costs (addresses,
//! descriptions: nearly every value differs) stops being interned after a window of
//! lookups, so that it costs neither a lookup per document nor a table of every value.

use std::borrow::Borrow;
use std::convert::Infallible;
use std::hash::Hash;
use std::sync::Mutex;

use discern_dimensions::{IndexedValue, Many, StrList, TermList};

/// Lookups per dimension between two checks of whether interning pays.
const WINDOW: u32 = 65_536;
/// Distinct values one dimension may keep; past it, the values no document holds any
/// more are dropped, and if that does not halve them, interning stops.
const MAX_VALUES: usize = if cfg!(test) { 1 << 12 } else { 1 << 20 };
/// Values held before the first sweep of the values no document holds any more (one
/// sweeps again when the table has doubled since the last).
const SWEEP_FROM: usize = if cfg!(test) { 1 << 8 } else { 1 << 16 };
/// What the table costs per value it holds, in bytes: its pointer and control byte,
/// at hashbrown's load.
const ENTRY: u64 = 16;

#[derive(Default)]
pub(crate) struct Interner {
    /// Per dimension: string lists (keyword, text) and element lists (tree, ordered,
    /// mutex); a dimension uses one of the two.
    lists: Vec<DimInterner<StrList>>,
    elements: Vec<DimInterner<Many<u32>>>,
    /// Per text dimension: its values' token numbers.
    terms: Vec<DimInterner<TermList>>,
}

/// A value that can be shared, and can tell whether it is and what a copy costs.
pub(crate) trait Shareable: Clone + Hash + Eq {
    fn is_shared(&self) -> bool;
    /// Its allocation's bytes: what a copy not made saves.
    fn bytes(&self) -> u64;
}

impl Shareable for StrList {
    fn is_shared(&self) -> bool {
        StrList::is_shared(self)
    }
    fn bytes(&self) -> u64 {
        self.heap_bytes() as u64
    }
}

impl Shareable for TermList {
    fn is_shared(&self) -> bool {
        TermList::is_shared(self)
    }
    fn bytes(&self) -> u64 {
        self.heap_bytes() as u64
    }
}

impl Shareable for Many<u32> {
    fn is_shared(&self) -> bool {
        Many::is_shared(self)
    }
    fn bytes(&self) -> u64 {
        self.heap_bytes() as u64
    }
}

struct DimInterner<T> {
    /// `None` once interning this dimension stopped paying.
    values: Option<hashbrown::HashSet<T>>,
    /// This window's lookups, the bytes its hits saved (the copies not made) and what
    /// the values it added cost the table (`ENTRY` each).
    lookups: u32,
    saved: u64,
    cost: u64,
    /// The values held after those no document holds were last dropped: they are
    /// dropped again once the table has doubled (`SWEEP_FROM` at first), so that it
    /// holds at most about twice the values the documents do.
    held_at_sweep: usize,
}

impl<T> Default for DimInterner<T> {
    fn default() -> DimInterner<T> {
        DimInterner {
            values: Some(Default::default()),
            lookups: 0,
            saved: 0,
            cost: 0,
            held_at_sweep: 0,
        }
    }
}

impl Interner {
    /// Replaces each keyword, text and element list of `values` (one per dimension) by
    /// the equal value an earlier document holds, if any.
    pub(crate) fn intern(&mut self, values: &mut [Option<IndexedValue>]) {
        if self.lists.len() < values.len() {
            self.lists.resize_with(values.len(), Default::default);
            self.elements.resize_with(values.len(), Default::default);
            self.terms.resize_with(values.len(), Default::default);
        }
        for (((v, l), e), t) in values
            .iter_mut()
            .zip(&mut self.lists)
            .zip(&mut self.elements)
            .zip(&mut self.terms)
        {
            match v {
                Some(IndexedValue::Strings(list)) => l.share(list),
                Some(IndexedValue::Elements(es)) => e.share(es),
                Some(IndexedValue::Terms(terms)) => t.share(terms),
                _ => {}
            }
        }
    }

    /// Whether dimension `dim`'s string lists are still interned (tests).
    #[cfg(test)]
    pub(crate) fn interning(&self, dim: usize) -> bool {
        self.lists.get(dim).is_none_or(|d| d.values.is_some())
    }
}

/// An interner the threads decoding a saved index share, so that a repeated value is
/// never allocated (allocating the copies and freeing them later left the memory
/// fragmented: the heap shrank, the resident set did not).
pub(crate) struct SharedInterner {
    lists: Vec<Mutex<DimInterner<StrList>>>,
    elements: Vec<Mutex<DimInterner<Many<u32>>>>,
    terms: Vec<Mutex<DimInterner<TermList>>>,
}

/// `interned.get_or_make(raw, make)` under the lock of dimension `dim`'s interner, or
/// `make()` without it once the dimension is no longer interned (no waiting for it).
fn shared_get_or_make<T: Shareable + Borrow<Q>, Q: Hash + Eq + ?Sized, E>(
    interners: &[Mutex<DimInterner<T>>],
    dim: usize,
    raw: &Q,
    make: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    // a poisoned lock: a decoding thread panicked, and the load fails anyway
    if let Some(mut d) = interners.get(dim).and_then(|d| d.lock().ok()) {
        if d.values.is_some() {
            return d.get_or_make(raw, make);
        }
    }
    make()
}

impl SharedInterner {
    pub(crate) fn new(dims: usize) -> SharedInterner {
        SharedInterner {
            lists: (0..dims).map(|_| Default::default()).collect(),
            elements: (0..dims).map(|_| Default::default()).collect(),
            terms: (0..dims).map(|_| Default::default()).collect(),
        }
    }

    /// The keyword or text value of dimension `dim` encoded as `raw`: the one held if
    /// equal, else `make()`'s.
    pub(crate) fn list<E>(
        &self,
        dim: usize,
        raw: &[u8],
        make: impl FnOnce() -> Result<StrList, E>,
    ) -> Result<StrList, E> {
        shared_get_or_make(&self.lists, dim, raw, make)
    }

    /// The text value of dimension `dim` encoded as `raw`: the one held if equal, else
    /// `make()`'s.
    pub(crate) fn terms<E>(
        &self,
        dim: usize,
        raw: &[u8],
        make: impl FnOnce() -> Result<TermList, E>,
    ) -> Result<TermList, E> {
        shared_get_or_make(&self.terms, dim, raw, make)
    }

    /// The element list of dimension `dim` equal to `raw`: the one held, else a copy.
    pub(crate) fn elements(&self, dim: usize, raw: &[u32]) -> Many<u32> {
        let Ok(held) =
            shared_get_or_make(&self.elements, dim, raw, || Ok::<_, Infallible>(raw.into()));
        held
    }

    pub(crate) fn into_interner(self) -> Interner {
        fn unlock<T>(all: Vec<Mutex<DimInterner<T>>>) -> Vec<DimInterner<T>> {
            let inner =
                |d: Mutex<DimInterner<T>>| d.into_inner().unwrap_or_else(|p| p.into_inner());
            all.into_iter().map(inner).collect()
        }
        Interner {
            lists: unlock(self.lists),
            elements: unlock(self.elements),
            terms: unlock(self.terms),
        }
    }
}

impl<T: Shareable> DimInterner<T> {
    /// Replaces `value` by the equal one held, or holds it for the documents that follow.
    fn share(&mut self, value: &mut T) {
        let new = value.clone();
        let Ok(held) = self.get_or_make(&new, || Ok::<_, Infallible>(new.clone()));
        *value = held;
    }

    /// The held value equal to `raw` (its encoding, or its elements), or `make()`'s
    /// value, kept for the documents that follow.
    fn get_or_make<Q: Hash + Eq + ?Sized, E>(
        &mut self,
        raw: &Q,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E>
    where
        T: Borrow<Q>,
    {
        let Some(values) = self.values.as_mut() else {
            return make();
        };
        self.lookups += 1;
        let mut stop = false;
        let out = match values.get(raw) {
            Some(held) => {
                self.saved += held.bytes();
                held.clone()
            }
            None => {
                let list = make()?;
                values.insert(list.clone());
                self.cost += ENTRY;
                let sweep_at = 2 * self.held_at_sweep.max(SWEEP_FROM);
                if values.len() > sweep_at.min(MAX_VALUES) {
                    let at_cap = values.len() > MAX_VALUES;
                    values.retain(T::is_shared);
                    self.held_at_sweep = values.len();
                    stop = at_cap && values.len() > MAX_VALUES / 2;
                }
                list
            }
        };
        if self.lookups == WINDOW {
            // A repeat saves its copy's bytes; a new value costs the table an entry.
            // (The share of hits alone stopped a listing's amenities: a third of the
            // first 65,536 repeat an earlier list — 88 bytes each — three quarters of
            // later ones; interned, 1M listings hold 321,000 lists, not 995,000.)
            stop |= self.saved < self.cost;
            (self.lookups, self.saved, self.cost) = (0, 0, 0);
        }
        if stop {
            self.values = None;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &str) -> Option<IndexedValue> {
        Some(IndexedValue::Strings(StrList::from_strs([s])))
    }

    fn list(v: &Option<IndexedValue>) -> &StrList {
        match v {
            Some(IndexedValue::Strings(l)) => l,
            _ => panic!("not strings"),
        }
    }

    #[test]
    fn repeated_values_share_one_allocation() {
        let mut i = Interner::default();
        let mut a = vec![strings("x"), None, Some(IndexedValue::Int(1))];
        let mut b = vec![strings("x"), strings("y"), None];
        i.intern(&mut a);
        i.intern(&mut b);
        assert_eq!(list(&a[0]).as_raw().as_ptr(), list(&b[0]).as_raw().as_ptr());
        assert_eq!(list(&b[0]).iter().collect::<Vec<_>>(), ["x"]);
        assert_eq!(list(&b[1]).iter().collect::<Vec<_>>(), ["y"]);
    }

    #[test]
    fn repeated_text_is_one_copy_too() {
        let mut i = Interner::default();
        let text = |n: u32| Some(IndexedValue::Terms(TermList::from_groups([[n]])));
        let (mut a, mut b, mut c) = (vec![text(7)], vec![text(7)], vec![text(8)]);
        i.intern(&mut a);
        i.intern(&mut b);
        i.intern(&mut c);
        let ptr = |v: &Option<IndexedValue>| match v {
            Some(IndexedValue::Terms(l)) => l.as_raw().as_ptr(),
            _ => panic!("not text"),
        };
        assert_eq!(ptr(&a[0]), ptr(&b[0]));
        assert_ne!(ptr(&a[0]), ptr(&c[0]));
    }

    #[test]
    fn repeated_element_lists_are_one_copy() {
        let mut i = Interner::default();
        let els = |e: &[u32]| Some(IndexedValue::Elements(e.into()));
        let (mut a, mut b, mut c) = (vec![els(&[1, 2])], vec![els(&[1, 2])], vec![els(&[2])]);
        i.intern(&mut a);
        i.intern(&mut b);
        i.intern(&mut c);
        let ptr = |v: &Option<IndexedValue>| match v {
            Some(IndexedValue::Elements(e)) => e.as_ptr(),
            _ => panic!("not elements"),
        };
        assert_eq!(ptr(&a[0]), ptr(&b[0]));
        assert_ne!(ptr(&a[0]), ptr(&c[0]));
    }

    #[test]
    fn a_dimension_of_mostly_distinct_values_stops_being_interned() {
        let mut i = Interner::default();
        for n in 0..WINDOW {
            // dimension 0 repeats one of 16 values, dimension 1 never repeats
            let mut v = vec![strings(&(n % 16).to_string()), strings(&n.to_string())];
            i.intern(&mut v);
        }
        assert!(i.interning(0));
        assert!(!i.interning(1));
        // later values are left as they are
        let (mut a, mut b) = (vec![None, strings("z")], vec![None, strings("z")]);
        i.intern(&mut a);
        i.intern(&mut b);
        assert_ne!(list(&a[1]).as_raw().as_ptr(), list(&b[1]).as_raw().as_ptr());
    }

    /// Interning stops when its repeats save fewer bytes than its table costs, not at
    /// a share of hits: a third of long values repeated pays, a third of short ones
    /// does not.
    #[test]
    fn interning_pays_by_the_bytes_repeats_save() {
        let mut i = Interner::default();
        let long_value = "x".repeat(80);
        for n in 0..WINDOW {
            let (long, short) = match n % 3 {
                0 => (long_value.clone(), "r".to_string()),
                _ => (format!("{n:0>80}"), n.to_string()),
            };
            let mut v = vec![strings(&long), strings(&short)];
            i.intern(&mut v);
        }
        assert!(i.interning(0), "long values, a third repeated");
        assert!(!i.interning(1), "short values, a third repeated");
    }

    /// Values no document holds any more are dropped once the table has doubled, so
    /// that it holds at most about twice the values documents do; past `MAX_VALUES`
    /// held by documents, interning stops.
    #[test]
    fn values_no_document_holds_are_swept() {
        let mut d = DimInterner::<StrList>::default();
        let mut kept = Vec::new();
        let mut most = 0;
        for n in 0..4 * SWEEP_FROM {
            // each value twice, so that interning pays
            let first = StrList::from_strs([n.to_string()]);
            let _ = d.get_or_make(first.as_raw(), || Ok::<_, Infallible>(first.clone()));
            let raw = StrList::from_strs([n.to_string()]).as_raw().to_vec();
            // found by its encoding: nothing is made
            let again = d.get_or_make(&raw[..], || Err(())).expect("held");
            if n < 10 {
                kept.push(again);
            }
            most = most.max(d.values.as_ref().expect("still interned").len());
        }
        assert!(most <= 2 * SWEEP_FROM + 1, "{most} values held");
        let values = d.values.as_ref().expect("still interned");
        for k in &kept {
            assert!(values.contains(k));
        }
        // every value held by a document: past the cap, interning stops
        let mut d = DimInterner::<StrList>::default();
        let mut held = Vec::new();
        for n in 0..=MAX_VALUES {
            let v = StrList::from_strs([n.to_string()]);
            held.push(
                d.get_or_make(v.as_raw(), || Ok::<_, Infallible>(v.clone()))
                    .unwrap(),
            );
        }
        assert!(d.values.is_none());
    }
}
