//! Per-dimension term dictionaries for did-you-mean (SPEC §9): every indexed term of a
//! text or keyword dimension with its document frequency.
//!
//! A dictionary is an FST (`base`, immutable, built in one pass), a few smaller FSTs of
//! the terms changed since (`recent`, oldest first) and an `overlay` of the terms
//! changed since those: each apply adds its changes to the overlay (absolute
//! frequencies, so the newest tier holding a term is always exact), and a fold moves the
//! overlay into a new recent tier — or, once the changes are an eighth of the base,
//! everything into a new base — synchronously when one apply changes many terms,
//! otherwise in the background (the engine decides). Queries never see a stale
//! frequency. The tiers keep a fold's cost near that of the changes: rebuilding a
//! million-term base on every few thousand changed terms kept a core busy through a
//! stream of deltas, and so did one recent tier rebuilt whole by every fold (a fold after
//! each of a publisher's spaced deltas took 49 ms at the first and 101 ms at the tenth,
//! growing until the base's rebuild). A fold merges its changes with the newest tiers
//! only while those are at most `TIER_RATIO` times as large, as size-tiered compaction
//! does: each term is rebuilt into a tier a few times, not once per fold.

use std::collections::HashMap;
use std::sync::Arc;

use discern_dimensions::{DimensionKind, Dimensions, IndexedValue, ValueRef};
use fst::Streamer;
use rayon::prelude::*;

use crate::numbering::Numbered;
use crate::sorted::each_difference;
use crate::FastMap;

mod count;
mod search;

pub use count::build_dicts;

/// One apply changing more terms than this folds the overlay into the base at once.
pub const SYNC_MERGE_TERMS: usize = 50_000;
/// An overlay larger than this asks for a background merge.
pub const BACKGROUND_MERGE_TERMS: usize = 8_192;
/// A fold rebuilds the base when the changed terms (`recent` and overlay) are more than
/// this fraction of it, or the base is smaller than `SMALL_BASE_TERMS`.
const RECENT_SHARE: usize = 8;
const SMALL_BASE_TERMS: usize = 65_536;
/// A fold takes a recent tier into its new one only while that tier holds at most this
/// many times the terms gathered so far: each recent tier more than this many times the
/// size of the one after it, so that a few tiers hold every change (`TermDict::fold`).
const TIER_RATIO: usize = 4;

pub struct TermDict {
    /// Shared by every dictionary derived from it until the next merge (an apply's
    /// overlay change must not copy a million-term FST).
    base: Arc<Base>,
    /// The snapshot generation `base` was built from.
    base_generation: u64,
    /// Every term changed between `base` and `recent_generation`, with its frequency
    /// then (0 = gone), in tiers, oldest first: a newer tier's values override an older
    /// one's and the base's.
    recent: Vec<Arc<Base>>,
    /// The generation of the last fold (into `recent` or the base).
    recent_generation: u64,
    /// term → (document frequency now, generation of the change); 0 = gone.
    overlay: HashMap<Box<str>, (u32, u64)>,
}

/// Whether did-you-mean works on the dimension (text and keyword dimensions).
pub fn has_terms(kind: &DimensionKind) -> bool {
    matches!(kind, DimensionKind::Text(_) | DimensionKind::Keyword)
}

/// Every term of a value, repeats included; `vocab`: the dimension's vocabulary, when it
/// is a text dimension.
fn each_term<'a>(v: Option<&'a IndexedValue>, vocab: Option<&'a Numbered>, f: impl FnMut(&'a str)) {
    match v {
        Some(IndexedValue::Strings(s)) | Some(IndexedValue::Text(s)) => s.iter().for_each(f),
        Some(IndexedValue::Terms(t)) => {
            if let Some(vocab) = vocab {
                t.iter().filter_map(|n| vocab.get(n)).for_each(f)
            }
        }
        _ => {}
    }
}

/// `each_term` of a document's value, the terms borrowed for as long as the document.
fn each_row_term<'a>(
    v: Option<ValueRef<'a>>,
    vocab: Option<&'a Numbered>,
    mut f: impl FnMut(&'a str),
) {
    let Some(v) = v else { return };
    match (&*v, vocab) {
        (IndexedValue::Terms(t), Some(vocab)) => t.iter().filter_map(|n| vocab.get(n)).for_each(f),
        _ => v.each_str(&mut f),
    }
}

/// The distinct terms of one indexed value, sorted.
fn value_terms<'a>(v: Option<&'a IndexedValue>, vocab: Option<&'a Numbered>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    each_term(v, vocab, |t| out.push(t));
    out.sort_unstable();
    out.dedup();
    out
}

/// One apply's document-frequency changes to a dimension's terms. A text value's terms
/// are counted by vocabulary number (sorted, compared and hashed as integers, named
/// once per term when the apply's snapshot is built): by name they were a fifth of a
/// bulk load's index thread.
#[derive(Default)]
pub(crate) struct TermDelta {
    by_term: FastMap<Box<str>, i64>,
    by_number: FastMap<u32, i64>,
}

impl TermDelta {
    /// Records the change of one document's value from `old` to `new` (`None`: none).
    pub(crate) fn change(
        &mut self,
        old: Option<&IndexedValue>,
        new: Option<&IndexedValue>,
        vocab: Option<&Numbered>,
    ) {
        let numbered = |v: Option<&IndexedValue>| match v {
            None => Some(Vec::new()),
            Some(IndexedValue::Terms(t)) => {
                let mut ns: Vec<u32> = t.iter().collect();
                ns.sort_unstable();
                ns.dedup();
                Some(ns)
            }
            Some(_) => None,
        };
        if vocab.is_some() {
            if let (Some(before), Some(after)) = (numbered(old), numbered(new)) {
                each_difference(before, after, |n, added| {
                    *self.by_number.entry(n).or_default() += if added { 1 } else { -1 }
                });
                return;
            }
        }
        let (before, after) = (value_terms(old, vocab), value_terms(new, vocab));
        each_difference(before, after, |t, added| {
            bump(&mut self.by_term, t, if added { 1 } else { -1 })
        });
    }

    /// The changes by term (frequency changes add up, whichever way they were counted);
    /// `vocab` names the numbered ones.
    pub(crate) fn into_terms(self, vocab: Option<&Numbered>) -> FastMap<Box<str>, i64> {
        let mut by_term = self.by_term;
        if let Some(vocab) = vocab {
            for (n, by) in self.by_number {
                if let Some(t) = vocab.get(n) {
                    bump(&mut by_term, t, by);
                }
            }
        }
        by_term
    }
}

/// Adds `by` to `term`'s delta; the key is allocated only for a new term.
fn bump(deltas: &mut FastMap<Box<str>, i64>, term: &str, by: i64) {
    match deltas.get_mut(term) {
        Some(d) => *d += by,
        None => {
            deltas.insert(term.into(), by);
        }
    }
}

/// Dictionaries smaller than this are searched on one thread.
const PARALLEL_TERMS: usize = 100_000;
/// Ranges a large dictionary is searched in (more than the cores, to balance them).
const RANGES: usize = 16;

/// Dictionaries at least this large (and all ASCII) also keep their terms reversed, for
/// the split search of long terms (`within_split`); a reversed FST costs about what the
/// forward one does. At 1M items the text dimension's 27,000 terms and the cities'
/// 15,000 have theirs since 32,768 became 8,192: a few hundred KB, and the benchmark's
/// did-you-mean requests 0.05 ms faster at the median (7%), its text requests 0.02.
const REVERSED_TERMS: usize = 8_192;

/// The immutable part of a dictionary.
#[derive(Default)]
struct Base {
    map: fst::Map<Vec<u8>>,
    /// Keys splitting `map` into ranges of about equal size, searched in parallel.
    splits: Vec<Vec<u8>>,
    /// Every term reversed (large all-ASCII dictionaries only).
    reversed: Option<fst::Set<Vec<u8>>>,
}

/// The FST of `sorted` keys, the keys that split it into `RANGES` equal parts and, when
/// `reversed` says so (or the dictionary is large) and every key is ASCII, the reversed
/// keys.
fn build_fst(sorted: Vec<(Vec<u8>, u64)>, reversed: bool) -> Base {
    let reversed =
        (reversed || sorted.len() >= REVERSED_TERMS) && sorted.iter().all(|(k, _)| k.is_ascii());
    // The two FSTs are independent and cost about alike: built on two cores (a bulk
    // load's address dictionary, 855,000 terms, is on the way to its 201).
    let ((map, splits), reversed) = rayon::join(
        || {
            let mut b = fst::MapBuilder::memory();
            let step = sorted.len() / RANGES;
            let mut splits = Vec::new();
            for (i, (k, v)) in sorted.iter().enumerate() {
                if sorted.len() >= PARALLEL_TERMS
                    && i > 0
                    && i % step == 0
                    && splits.len() < RANGES - 1
                {
                    splits.push(k.clone());
                }
                // keys arrive sorted and distinct, so insertion cannot fail
                let _ = b.insert(k, *v);
            }
            let map = fst::Map::new(b.into_inner().unwrap_or_default()).unwrap_or_default();
            (map, splits)
        },
        || {
            reversed.then(|| {
                let mut rev: Vec<Vec<u8>> = sorted
                    .iter()
                    .map(|(k, _)| k.iter().rev().copied().collect())
                    .collect();
                rev.par_sort_unstable();
                fst::Set::from_iter(rev).unwrap_or_default()
            })
        },
    );
    Base {
        map,
        splits,
        reversed,
    }
}

impl TermDict {
    pub fn empty(generation: u64) -> TermDict {
        TermDict {
            base: Arc::default(),
            base_generation: generation,
            recent: Vec::new(),
            recent_generation: generation,
            overlay: HashMap::new(),
        }
    }

    /// Builds from term counts (any order, each term once).
    pub fn from_counts<'a>(
        counts: impl IntoIterator<Item = (&'a str, u32)>,
        generation: u64,
    ) -> TermDict {
        Self::build(counts, generation, false)
    }

    /// `from_counts`; `reversed` keeps the reversed terms whatever the size.
    fn build<'a>(
        counts: impl IntoIterator<Item = (&'a str, u32)>,
        generation: u64,
        reversed: bool,
    ) -> TermDict {
        let mut v: Vec<(&str, u32)> = counts.into_iter().collect();
        v.par_sort_unstable_by(|a, b| a.0.cmp(b.0));
        let base = build_fst(
            v.into_iter()
                .map(|(k, n)| (k.as_bytes().to_vec(), n as u64))
                .collect(),
            reversed,
        );
        TermDict {
            base: Arc::new(base),
            ..TermDict::empty(generation)
        }
    }

    /// The tiers a fold starts from: `adopt` installs a fold only over the same ones.
    pub fn stamp(&self) -> (u64, u64) {
        (self.base_generation, self.recent_generation)
    }

    /// Bytes held: the FSTs, the split keys and the overlay (estimated per entry).
    pub fn bytes(&self) -> usize {
        self.base.bytes()
            + self.recent.iter().map(|r| r.bytes()).sum::<usize>()
            + self.overlay.keys().map(|k| k.len() + 48).sum::<usize>()
    }

    pub fn overlay_len(&self) -> usize {
        self.overlay.len()
    }

    /// Terms in the recent tiers (a term changed again is counted in each tier).
    fn recent_len(&self) -> usize {
        self.recent.iter().map(|r| r.map.len()).sum()
    }

    /// Distinct terms (approximate while the newer tiers hold new or removed terms).
    pub fn len(&self) -> usize {
        self.base.map.len() + self.recent_len() + self.overlay.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The document frequency of `term` (0 when it is not indexed).
    pub fn df(&self, term: &str) -> u32 {
        if let Some(&(n, _)) = self.overlay.get(term) {
            return n;
        }
        if let Some(n) = self.recent.iter().rev().find_map(|r| r.map.get(term)) {
            return n as u32;
        }
        self.base.map.get(term).map(|n| n as u32).unwrap_or(0)
    }

    /// A dictionary with `deltas` applied, changes tagged with `generation`.
    pub fn with_changes(
        &self,
        deltas: impl IntoIterator<Item = (Box<str>, i64)>,
        generation: u64,
    ) -> TermDict {
        let mut overlay = self.overlay.clone();
        for (term, d) in deltas {
            if d == 0 {
                continue;
            }
            let now = (self.df(&term) as i64 + d).max(0) as u32;
            overlay.insert(term, (now, generation));
        }
        TermDict {
            base: self.base.clone(),
            base_generation: self.base_generation,
            recent: self.recent.clone(),
            recent_generation: self.recent_generation,
            overlay,
        }
    }

    /// The overlay folded in as of `generation`: into a recent tier while the changed
    /// terms stay a small share of the base, else every tier into a new base.
    pub fn merged(&self, generation: u64) -> TermDict {
        let changed = self.recent_len() + self.overlay.len();
        let whole =
            self.base.map.len() < SMALL_BASE_TERMS || changed * RECENT_SHARE > self.base.map.len();
        self.fold(generation, whole)
    }

    /// The overlay folded into a recent tier, or (`whole`) every tier into one base.
    /// The new tier takes in the newest tiers while each holds at most `TIER_RATIO`
    /// times the terms gathered, so that a fold rebuilds what changed lately, not every
    /// change since the base.
    fn fold(&self, generation: u64, whole: bool) -> TermDict {
        let reversed = self.base.reversed.is_some();
        if !whole {
            let mut recent = self.recent.clone();
            let mut run = self.sorted_overlay();
            while let Some(newest) = recent.last() {
                if newest.map.len() > TIER_RATIO * run.len() {
                    break;
                }
                run = newer_over(&newest.map, run);
                recent.pop();
            }
            if !run.is_empty() {
                recent.push(Arc::new(build_fst(run, reversed)));
            }
            return TermDict {
                base: self.base.clone(),
                base_generation: self.base_generation,
                recent,
                recent_generation: generation,
                overlay: HashMap::new(),
            };
        }
        let mut all = newer_over(&self.base.map, self.changes());
        all.retain(|(_, n)| *n > 0);
        TermDict {
            base: Arc::new(build_fst(all, reversed)),
            ..TermDict::empty(generation)
        }
    }

    /// The terms changed since the base, in term order, with their frequency now (0 =
    /// gone): the recent tiers with the overlay over them.
    fn changes(&self) -> Vec<(Vec<u8>, u64)> {
        self.recent
            .iter()
            .rev()
            .fold(self.sorted_overlay(), |newer, tier| {
                newer_over(&tier.map, newer)
            })
    }

    /// The overlay's terms in term order, with their frequency now (0 = gone).
    fn sorted_overlay(&self) -> Vec<(Vec<u8>, u64)> {
        let mut over: Vec<(Vec<u8>, u64)> = self
            .overlay
            .iter()
            .map(|(k, &(n, _))| (k.as_bytes().to_vec(), n as u64))
            .collect();
        over.par_sort_unstable();
        over
    }

    /// `merged` installed over `self` (the current dictionary): the overlay keeps the
    /// changes made after the merge's generation. `None` when a tier was replaced in
    /// the meantime (a reset or another merge), so the merge no longer applies.
    pub fn adopt(&self, merged: &TermDict, was: (u64, u64)) -> Option<TermDict> {
        if self.stamp() != was {
            return None;
        }
        let overlay = self
            .overlay
            .iter()
            .filter(|(_, &(_, g))| g > merged.recent_generation)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        Some(TermDict {
            base: merged.base.clone(),
            base_generation: merged.base_generation,
            recent: merged.recent.clone(),
            recent_generation: merged.recent_generation,
            overlay,
        })
    }

    /// The dictionary as saved with the index (`persist/`): every tier folded into
    /// one, then the FSTs' bytes and the split keys.
    pub(crate) fn encode<W: std::io::Write + std::io::Seek>(
        &self,
        generation: u64,
        out: &mut crate::persist::StreamedBlock<'_, W>,
    ) -> std::io::Result<()> {
        let merged;
        let base = if self.overlay.is_empty() && self.recent.is_empty() {
            &self.base
        } else {
            merged = self.fold(generation, true);
            &merged.base
        };
        out.bytes(base.map.as_fst().as_bytes())?;
        out.e.u32(base.splits.len() as u32);
        for k in &base.splits {
            out.bytes(k)?;
        }
        match &base.reversed {
            Some(r) => {
                out.e.u8(1);
                out.bytes(r.as_fst().as_bytes())?;
            }
            None => out.e.u8(0),
        }
        Ok(())
    }

    /// Every (term, document frequency), newer tiers included, in term order.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(Vec<u8>, u64)> {
        let merged = self.fold(self.recent_generation, true);
        let mut out = Vec::new();
        let mut stream = merged.base.map.stream();
        while let Some((k, v)) = stream.next() {
            out.push((k.to_vec(), v));
        }
        out
    }

    /// A dictionary `encode` wrote, as of `generation`.
    pub(crate) fn decode(
        d: &mut crate::persist::Dec<'_>,
        generation: u64,
    ) -> Result<TermDict, crate::persist::Corrupt> {
        use crate::persist::Corrupt;
        let map = fst::Map::new(d.bytes()?.to_vec()).map_err(|_| Corrupt("dictionary"))?;
        let n = d.u32()? as usize;
        let mut splits = Vec::with_capacity(n.min(RANGES));
        for _ in 0..n {
            splits.push(d.bytes()?.to_vec());
        }
        let reversed = match d.u8()? {
            0 => None,
            _ => Some(
                fst::Set::new(d.bytes()?.to_vec()).map_err(|_| Corrupt("reversed dictionary"))?,
            ),
        };
        Ok(TermDict {
            base: Arc::new(Base {
                map,
                splits,
                reversed,
            }),
            ..TermDict::empty(generation)
        })
    }
}

/// Every entry of `older` and of `newer` (sorted, distinct keys) in key order, `newer`'s
/// value where both hold a key.
fn newer_over(older: &fst::Map<Vec<u8>>, newer: Vec<(Vec<u8>, u64)>) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let mut newer = newer.into_iter().peekable();
    let mut stream = older.stream();
    while let Some((k, v)) = stream.next() {
        while let Some(n) = newer.next_if(|(nk, _)| nk.as_slice() < k) {
            out.push(n);
        }
        match newer.next_if(|(nk, _)| nk.as_slice() == k) {
            Some(n) => out.push(n),
            None => out.push((k.to_vec(), v)),
        }
    }
    out.extend(newer);
    out
}

impl Base {
    fn bytes(&self) -> usize {
        self.map.as_fst().size()
            + self.reversed.as_ref().map_or(0, |r| r.as_fst().size())
            + self.splits.iter().map(|k| k.len() + 24).sum::<usize>()
    }
}

/// Dictionaries for every dimension of a snapshot (`None` for dimensions without terms).
pub type TermDicts = Arc<Vec<Option<Arc<TermDict>>>>;

/// Empty dictionaries for the dimensions that have terms.
pub fn empty_dicts(dims: &Dimensions, generation: u64) -> TermDicts {
    Arc::new(
        dims.dims
            .iter()
            .map(|d| has_terms(&d.kind).then(|| Arc::new(TermDict::empty(generation))))
            .collect(),
    )
}

#[cfg(test)]
mod tests;
