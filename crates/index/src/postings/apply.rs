//! Changing the postings: an apply records each document's old and new keys
//! (`PostingsDelta`), resolves them into each set's additions and removals (`Resolved`),
//! and folds those into a copy of the postings — the spare one snapshot behind when the
//! writer holds it (`Spare`, `commit`), so that the sets and maps queries may be reading
//! are not copied on every apply. A large set is not copied even then: its changes are
//! kept beside it (`Posting::changed`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use discern_dimensions::{Dimensions, ElementSet, IndexedValue};
use rayon::prelude::*;
use roaring::RoaringBitmap;

use super::codes::{CodeBuf, TextCode};
use super::{
    bitmap_of_sorted, insert_sorted, tree_of, DimsPostings, Key, KeyBuf, Posting, Postings,
};
use crate::numbering::Vocabularies;
use crate::sorted::each_difference;
use crate::FastMap;

/// A set's pending changes, in the order they were made: each a doc number shifted left
/// by one, the low bit set for "add". Each change states the document's membership
/// after it, so a document's last change is its final state. The first change is held
/// in place: most of a bulk load's keys (an address, a ZIP code) get one document, and
/// a list for each was ~1M allocations of 32 bytes held until the apply ended.
struct Delta {
    /// `NONE` while there is no change.
    first: u64,
    more: Vec<u64>,
}

const NONE: u64 = u64::MAX;

impl Default for Delta {
    fn default() -> Delta {
        Delta {
            first: NONE,
            more: Vec::new(),
        }
    }
}

impl Delta {
    fn push(&mut self, op: u64) {
        if self.first == NONE {
            self.first = op;
        } else {
            self.more.push(op);
        }
    }
    fn add(&mut self, doc: u32) {
        self.push((doc as u64) << 1 | 1);
    }
    fn remove(&mut self, doc: u32) {
        self.push((doc as u64) << 1);
    }
    /// `add` or `remove`, as `added` says.
    fn change(&mut self, doc: u32, added: bool) {
        if added {
            self.add(doc)
        } else {
            self.remove(doc)
        }
    }
    fn is_empty(&self) -> bool {
        self.first == NONE
    }
    /// The documents added and removed, each as a bitmap.
    fn resolve(self) -> (RoaringBitmap, RoaringBitmap) {
        match (self.first, self.more.is_empty()) {
            (NONE, _) => return Default::default(),
            (op, true) => {
                let one = RoaringBitmap::from_iter([(op >> 1) as u32]);
                return match op & 1 {
                    1 => (one, RoaringBitmap::new()),
                    _ => (RoaringBitmap::new(), one),
                };
            }
            _ => {}
        }
        let mut ops = self.more;
        ops.insert(0, self.first);
        // stable: a document's changes keep their order, its last one wins
        ops.sort_by_key(|op| op >> 1);
        let (mut add, mut remove) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < ops.len() {
            let doc = (ops[i] >> 1) as u32;
            let mut last = ops[i];
            while i < ops.len() && (ops[i] >> 1) as u32 == doc {
                last = ops[i];
                i += 1;
            }
            if last & 1 == 1 {
                add.push(doc);
            } else {
                remove.push(doc);
            }
        }
        (bitmap_of_sorted(&add), bitmap_of_sorted(&remove))
    }
}

#[derive(Default)]
struct DimDelta {
    keys: FastMap<Key, Delta>,
    /// A text dimension's keys, numbered (`codes.rs`): made byte keys when resolved.
    codes: FastMap<TextCode, Delta>,
    has: Delta,
    field_stats: Vec<(i64, i64)>,
}

impl DimDelta {
    /// Records that `doc` joined (`add`) or left key `k`'s set; the key is allocated only
    /// when new to this delta.
    fn change(&mut self, k: &[u8], doc: u32, add: bool) {
        let d = match self.keys.get_mut(k) {
            Some(d) => d,
            None => self.keys.entry(k.into()).or_default(),
        };
        d.change(doc, add)
    }
}

/// The changes one apply makes to the postings, folded in by `commit`.
pub(crate) struct PostingsDelta {
    dims: Vec<Option<DimDelta>>,
    live: Delta,
    bufs: (KeyBuf, KeyBuf),
    codes: (CodeBuf, CodeBuf),
    /// Per dimension, its tree when it is one (see `subtree_key`).
    trees: Vec<Option<Arc<ElementSet>>>,
    /// Per text dimension, its vocabulary (the documents' token numbers' tokens).
    vocab: Vocabularies,
    /// Per dimension, whether its postings are frozen once large (`super::freezable`).
    freezable: Vec<bool>,
}

impl PostingsDelta {
    pub(crate) fn new(dims: &Dimensions, vocab: Vocabularies) -> PostingsDelta {
        PostingsDelta {
            dims: dims
                .dims
                .iter()
                .map(|_| Some(DimDelta::default()))
                .collect(),
            live: Delta::default(),
            bufs: (KeyBuf::new(), KeyBuf::new()),
            codes: Default::default(),
            trees: dims.dims.iter().map(|d| tree_of(d).cloned()).collect(),
            vocab,
            freezable: dims.dims.iter().map(super::freezable).collect(),
        }
    }

    pub(crate) fn clear(&mut self) {
        for d in self.dims.iter_mut().flatten() {
            *d = DimDelta::default();
        }
        self.live = Delta::default();
    }

    /// Records that document `doc` changed from `old` to `new` (`None`: absent).
    pub(crate) fn change(&mut self, doc: u32, old: Option<&crate::Doc>, new: Option<&crate::Doc>) {
        match new {
            Some(_) => self.live.add(doc),
            None => self.live.remove(doc),
        }
        let (ob, nb) = &mut self.bufs;
        for (di, dd) in self.dims.iter_mut().enumerate() {
            let Some(dd) = dd else { continue };
            let before = old.and_then(|d| d.value(di));
            let after = new.and_then(|d| d.value(di));
            let (before, after) = (before.as_deref(), after.as_deref());
            if before == after {
                continue;
            }
            match (before, after) {
                (None, Some(_)) => dd.has.add(doc),
                (Some(_), None) => dd.has.remove(doc),
                _ => {}
            }
            for (v, sign) in [(before, -1i64), (after, 1)] {
                if let Some(IndexedValue::Terms(terms)) = v {
                    if dd.field_stats.len() < terms.groups() {
                        dd.field_stats.resize(terms.groups(), (0, 0));
                    }
                    for (fi, n) in terms.group_lens().enumerate() {
                        if n > 0 {
                            dd.field_stats[fi].0 += sign * n as i64;
                            dd.field_stats[fi].1 += sign;
                        }
                    }
                }
            }
            if self.vocab.get(di).is_some_and(Option::is_some) {
                // a text dimension (the one kind with a vocabulary): its keys numbered
                let (oc, nc) = &mut self.codes;
                let (old, new) = (oc.fill(before), nc.fill(after));
                each_difference(old.iter().copied(), new.iter().copied(), |c, add| {
                    dd.codes.entry(c).or_default().change(doc, add)
                });
                continue;
            }
            let tree = self.trees.get(di).and_then(|t| t.as_deref());
            ob.fill(before, tree);
            nb.fill(after, tree);
            each_difference(ob.keys(), nb.keys(), |k, add| dd.change(k, doc, add));
        }
    }

    /// The changes as each set's final additions and removals (dimensions in
    /// parallel): a form that can be applied to more than one copy of the postings.
    pub(crate) fn resolve(self) -> Resolved {
        let PostingsDelta {
            dims,
            live,
            vocab,
            freezable,
            ..
        } = self;
        let dims = dims
            .into_par_iter()
            .enumerate()
            .map(|(di, d)| {
                let d = d?;
                if d.keys.is_empty() && d.codes.is_empty() && d.has.is_empty() {
                    return None;
                }
                let resolved = |(k, delta): (Key, Delta)| {
                    let (add, remove) = delta.resolve();
                    (k, add, remove)
                };
                let mut keys: Vec<(Key, RoaringBitmap, RoaringBitmap)> =
                    d.keys.into_iter().map(resolved).collect();
                if !d.codes.is_empty() {
                    let numbering = vocab.get(di).and_then(|v| v.as_deref());
                    let numbered = numbering.map(|v| v.read());
                    keys.reserve(d.codes.len());
                    keys.extend(
                        d.codes
                            .into_iter()
                            .map(|(c, delta)| (c.key(numbered.as_deref()), delta))
                            .map(resolved),
                    );
                }
                // one order for every copy it is applied to
                keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                // Two codes name one key only if a token number had no token (numbers
                // are made with their tokens): a document then holds the key if either
                // code says so.
                keys.dedup_by(|later, kept| {
                    if later.0 != kept.0 {
                        return false;
                    }
                    kept.1 |= &later.1;
                    kept.2 |= &later.2;
                    kept.2 -= &kept.1;
                    true
                });
                Some(ResolvedDim {
                    keys,
                    has: d.has.resolve(),
                    field_stats: d.field_stats,
                    freezable: freezable.get(di).copied().unwrap_or(false),
                })
            })
            .collect();
        Resolved {
            dims,
            live: live.resolve(),
        }
    }
}

/// An apply's postings changes, resolved (`PostingsDelta::resolve`).
pub(crate) struct Resolved {
    dims: Vec<Option<ResolvedDim>>,
    live: (RoaringBitmap, RoaringBitmap),
}

struct ResolvedDim {
    /// Per key, in key order: the documents added and those removed (disjoint).
    keys: Vec<(Key, RoaringBitmap, RoaringBitmap)>,
    has: (RoaringBitmap, RoaringBitmap),
    field_stats: Vec<(i64, i64)>,
    freezable: bool,
}

pub(super) fn apply_set(to: &mut Arc<RoaringBitmap>, add: &RoaringBitmap, remove: &RoaringBitmap) {
    if add.is_empty() && remove.is_empty() {
        return;
    }
    change_set(Arc::make_mut(to), add, remove);
}

/// `add` joined to `b` and `remove` taken from it (disjoint sets).
pub(super) fn change_set(b: &mut RoaringBitmap, add: &RoaringBitmap, remove: &RoaringBitmap) {
    let changes = add.len() + remove.len();
    if changes <= ELEMENTWISE_PER_CONTAINER
        || changes <= ELEMENTWISE_PER_CONTAINER * b.statistics().n_containers as u64
    {
        // `|=` and `-=` rebuild each container they touch (an array container is
        // merged into a new one); a few documents per container are moved into place
        // instead
        add.iter().for_each(|d| {
            b.insert(d);
        });
        remove.iter().for_each(|d| {
            b.remove(d);
        });
    } else {
        *b |= add;
        *b -= remove;
    }
}

/// Set changes applied one document at a time, up to this many per container of the
/// set (see `apply_set`): inserting into an array container moves half of it (a few
/// thousand bytes, fast), where merging reads and writes all of it an element at a time.
const ELEMENTWISE_PER_CONTAINER: u64 = 32;

impl Resolved {
    /// Set additions and removals: what keeping a spare copy costs (`Spare`).
    pub(crate) fn changes(&self) -> u64 {
        let set = |(a, r): &(RoaringBitmap, RoaringBitmap)| a.len() + r.len();
        let dims: u64 = self
            .dims
            .iter()
            .flatten()
            .map(|d| {
                set(&d.has)
                    + d.keys
                        .iter()
                        .map(|(_, a, r)| a.len() + r.len())
                        .sum::<u64>()
            })
            .sum();
        dims + set(&self.live)
    }

    /// Folds the changes into `postings` and `live` (dimensions in parallel).
    ///
    /// Every level is copied on write (`Arc::make_mut`): a set, a dimension's map or
    /// the list that another holder (a snapshot a query may be reading) shares is
    /// copied before it changes, and one held only here changes in place; a large set
    /// is never changed, only overlaid (`Posting::changed`). So the result is the same
    /// either way, and only its cost depends on who else holds it.
    pub(crate) fn apply_to(&self, postings: &mut Postings, live: &mut Arc<RoaringBitmap>) {
        apply_set(live, &self.live.0, &self.live.1);
        if self.dims.iter().all(Option::is_none) {
            return;
        }
        Arc::make_mut(postings)
            .par_iter_mut()
            .zip(self.dims.par_iter())
            .for_each(|(cur, delta)| {
                let (Some(delta), Some(cur)) = (delta, cur) else {
                    return;
                };
                let p = Arc::make_mut(cur);
                let mut shorter = std::mem::take(&mut p.shorter);
                apply_set(&mut p.has, &delta.has.0, &delta.has.1);
                if p.field_stats.len() < delta.field_stats.len() {
                    p.field_stats.resize(delta.field_stats.len(), (0, 0));
                }
                for (s, d) in p.field_stats.iter_mut().zip(&delta.field_stats) {
                    s.0 = (s.0 as i64 + d.0).max(0) as u64;
                    s.1 = (s.1 as i64 + d.1).max(0) as u64;
                }
                if let Some(f) = &mut p.frozen {
                    for (k, add, remove) in &delta.keys {
                        f.change(k, add, remove);
                    }
                    f.fold_if_overdue();
                    return;
                }
                // A small set is changed where it is found (a copy of a few thousand
                // documents at most). The large ones are taken out of the map and
                // changed on every core — one dimension (a text's words) can hold most
                // of an apply's changes, and overlaying or folding one is a set
                // operation of its size — then put back, which finds each again. Every
                // set went that way once: the map's lookups, two for each set changed,
                // were ~8% of a delta's CPU (imbl comparing keys, each read where it
                // was allocated), and changing the small ones in place took the deltas
                // at 1M from 155–194 to 127–153 ms at the median (DECISIONS, session 68).
                let mut taken: Vec<(usize, Option<Posting>)> = Vec::new();
                let mut emptied = Vec::new();
                let mut fresh = Vec::new();
                for (i, (k, add, remove)) in delta.keys.iter().enumerate() {
                    match p.map.get_mut(k) {
                        Some(b) if b.changes_cheaply() => {
                            let this = std::mem::replace(b, Posting::one(0));
                            match Posting::changed(Some(this), add, remove) {
                                Some(changed) => *b = changed,
                                None => emptied.push(i),
                            }
                        }
                        Some(b) => taken.push((i, Some(std::mem::replace(b, Posting::one(0))))),
                        None => {
                            if let Some(added) = Posting::of(add.clone()) {
                                fresh.push((k.clone(), added));
                            }
                        }
                    }
                }
                for i in emptied {
                    p.map.remove(&delta.keys[i].0);
                }
                insert_sorted(&mut p.map, fresh);
                taken.par_iter_mut().for_each(|(i, b)| {
                    let (_, add, remove) = &delta.keys[*i];
                    *b = Posting::changed(b.take(), add, remove);
                });
                for (i, b) in taken {
                    let k = &delta.keys[i].0;
                    match b {
                        None => {
                            p.map.remove(k);
                        }
                        Some(b) => {
                            if let Some(slot) = p.map.get_mut(k) {
                                *slot = b;
                            }
                        }
                    }
                }
                p.freeze_if_large(delta.freezable);
                shorter.change(&delta.keys, p);
                p.shorter = shorter;
            });
    }
}

/// A spare is kept only after an apply of at most this many set changes: its resolved
/// changes are held until the next apply (a bulk load's would be a second index).
const SPARE_MAX_CHANGES: u64 = 1 << 22;

/// The postings one snapshot behind, kept by the writer with the changes that made the
/// current snapshot's. The next apply brings this copy up to date and then applies its
/// own changes to it in place, instead of copying every map path and small set it
/// touches out of the current snapshot, which queries may be reading (~3,500 sets of a
/// text dimension's words in a 1,000-item delta). A set or map still shared — with the
/// current snapshot, or with a snapshot a query holds — is copied on write as before
/// (`Resolved::apply_to`); a large set is overlaid in either copy (`Posting::changed`).
pub(crate) struct Spare {
    postings: Postings,
    live: Arc<RoaringBitmap>,
    /// What turns `postings` into `current`; `None` once applied (`SpareSlot::catch_up`).
    delta: Option<Resolved>,
    /// The postings and live set `delta` produces (compared by identity only).
    current: (Weak<DimsPostings>, Weak<RoaringBitmap>),
    /// When the apply that left it here committed (`SpareSlot::drop_when_idle`).
    made: Instant,
}

/// The writer's spare postings, shared with whoever brings them up to date between
/// applies (the engine does so once the snapshot they replace is released).
#[derive(Clone, Default)]
pub struct SpareSlot(Arc<SpareShared>);

#[derive(Default)]
struct SpareShared {
    spare: Mutex<Option<Spare>>,
    /// Whether a thread waits in `drop_when_idle`.
    watched: AtomicBool,
}

impl SpareSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Spare>> {
        self.0.spare.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no apply has left a spare for `idle`, then drops the spare, and says
    /// whether it dropped one: a burst of applies keeps its spare from one apply to the
    /// next, and the memory it holds (a copy of every map path and small set the recent
    /// applies touched, ~60 MB after ten 1,000-item deltas at 1M items) is not kept
    /// between bursts; the first apply after a pause copies what it changes, as one
    /// without a spare does. Returns at once when another thread already waits (one
    /// waiter serves every apply), or when there is no spare.
    pub fn drop_when_idle(&self, idle: Duration) -> bool {
        if self.0.watched.swap(true, Ordering::AcqRel) {
            return false;
        }
        let dropped = loop {
            let mut slot = self.lock();
            let Some(s) = slot.as_ref() else {
                break false;
            };
            // (an apply may have left a newer spare while this thread slept)
            let left = idle.saturating_sub(s.made.elapsed());
            if left.is_zero() {
                let spare = slot.take();
                drop(slot);
                drop(spare); // (freed outside the lock)
                break true;
            }
            drop(slot);
            std::thread::sleep(left);
        };
        self.0.watched.store(false, Ordering::Release);
        dropped
    }

    /// Whether a spare is held (tests).
    #[cfg(test)]
    pub(crate) fn is_held(&self) -> bool {
        self.lock().is_some()
    }

    /// Applies the pending changes to the spare postings now, off the next apply's
    /// path. Best done once the snapshot before the current one is dropped: a set it
    /// still shares is copied instead of changed in place.
    pub fn catch_up(&self) {
        let mut slot = self.lock();
        // taken out while it changes: were this to panic, the slot is left empty and
        // the next apply copies from its base, never from a half-updated spare
        if let Some(mut s) = slot.take() {
            if let Some(delta) = s.delta.take() {
                delta.apply_to(&mut s.postings, &mut s.live);
            }
            *slot = Some(s);
        }
    }

    pub(crate) fn clear(&self) {
        *self.lock() = None;
    }
}

/// `from` (the base snapshot's postings and live set) with `delta` applied, through
/// the spare when it is one snapshot behind `from`; leaves in the slot what the next
/// apply needs.
pub(crate) fn commit(
    slot: &SpareSlot,
    from: &Postings,
    from_live: &Arc<RoaringBitmap>,
    delta: Resolved,
) -> (Postings, Arc<RoaringBitmap>) {
    let mut spare = slot.lock();
    let (mut postings, mut live) = match spare.take() {
        Some(s)
            if std::ptr::eq(Weak::as_ptr(&s.current.0), Arc::as_ptr(from))
                && std::ptr::eq(Weak::as_ptr(&s.current.1), Arc::as_ptr(from_live)) =>
        {
            let (mut p, mut l) = (s.postings, s.live);
            if let Some(d) = s.delta {
                d.apply_to(&mut p, &mut l);
            }
            (p, l)
        }
        _ => (from.clone(), from_live.clone()),
    };
    delta.apply_to(&mut postings, &mut live);
    if delta.changes() <= SPARE_MAX_CHANGES {
        *spare = Some(Spare {
            postings: from.clone(),
            live: from_live.clone(),
            delta: Some(delta),
            current: (Arc::downgrade(&postings), Arc::downgrade(&live)),
            made: Instant::now(),
        });
    }
    (postings, live)
}
