//! An apply on the engine's side: the store applies the changeset on its threads and
//! hands each item change over; here the changes are extracted (across the rayon pool)
//! and taken into the next index snapshot as they come, the snapshot is prepared while
//! the store commits, swapped in before the 201, and the work an apply leaves (the
//! copied chunks' columns, the spare postings' catch-up, returning freed memory) runs
//! after it in the background.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use discern_index::{DocValues, Snapshot};
use discern_model::{Error, Result};
use discern_store::{ApplyOutcome, ChangesetType, ItemChange, Store};
use rayon::prelude::*;

use crate::{process, Engine, WriterGuard};

/// Item changes per message from an apply to its index thread, and messages in flight
/// (bounds the memory an apply holds ahead of the index).
const INDEX_BATCH: usize = 64;
const INDEX_QUEUE: usize = 64;
/// Extracted batches waiting for the index builder.
const EXTRACTED_QUEUE: usize = 4;
/// Items the extraction stage takes at once when the store is ahead of it (a bulk
/// load): batches already waiting are extracted together, in fewer, larger passes
/// across the pool. 1M-item bulk, two alternated pairs: 21,076 -> 22,193 items/s
/// (medians), resident at the 201 +8 MB; eight batches: 22,740, but +20 MB.
const EXTRACT_AT_MOST: usize = 4 * INDEX_BATCH;
/// An apply changing at least this many items returns freed memory to the OS afterwards
/// (`process::release_free_memory`): a bulk replaces whole chunks of the index.
const TRIM_AFTER_ITEMS: u64 = 10_000;
/// The spare postings (`SpareSlot`) are dropped once applies pause this long: they make
/// each apply of a burst cheaper (DECISIONS, sessions 9–10) but hold a copy of every map
/// path and small set the recent applies touched (~35 MB of resident memory after ten
/// 1,000-item deltas at 1M items). Only applies back to back gain from it: 1,000-item
/// deltas 3 s apart took as long with it as without (session 55), so a pause of 2 s
/// ends a burst.
const SPARE_IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// An item change with its values extracted, ready for the index builder.
pub(crate) enum Extracted {
    Upsert(discern_index::DocId, DocValues, u64),
    Delete(String),
    Clear,
}

/// The index thread of an apply: takes every batch into `b`, in order. A stage of its
/// own extracts each batch's values across the rayon pool (text analysis above all)
/// while this thread takes the batch before it into the builder. One after the other,
/// the pool idled while this thread built and the other way round (a 200k-item bulk
/// load took 7.8–8.2 s, now 7.0–7.4); smaller batches let the index start sooner and
/// leave less to do once the store has its last item.
fn index_changes<'w>(
    mut b: discern_index::Builder<'w>,
    base: &Snapshot,
    rx: std::sync::mpsc::Receiver<ToIndex<ItemChange>>,
) -> Indexed<'w> {
    std::thread::scope(|scope| {
        let (tx, built) = std::sync::mpsc::sync_channel::<ToIndex<Extracted>>(EXTRACTED_QUEUE);
        let extracting = std::thread::Builder::new()
            .name("apply-extract".into())
            .spawn_scoped(scope, move || {
                while let Ok(msg) = rx.recv() {
                    let (batch, flushed) = match msg {
                        ToIndex::Batch(batch) => take_waiting(&rx, batch),
                        ToIndex::Flushed(ack) => (Vec::new(), Some(ack)),
                    };
                    // the building stage stopped: so does the apply
                    if !batch.is_empty()
                        && tx.send(ToIndex::Batch(extract_batch(base, batch))).is_err()
                    {
                        return;
                    }
                    if let Some(ack) = flushed {
                        if tx.send(ToIndex::Flushed(ack)).is_err() {
                            return;
                        }
                    }
                }
            });
        if extracting.is_err() {
            // (no thread: the apply fails when its store finds the index gone)
            return Indexed::Open(b);
        }
        for msg in built {
            let batch = match msg {
                ToIndex::Batch(batch) => batch,
                ToIndex::Flushed(ack) => {
                    let _ = ack.send(());
                    // The store now commits (an fsync's wait): the snapshot is built
                    // meanwhile. The store sends nothing after its flush; were it to,
                    // its send would fail with this receiver gone and abort the apply.
                    let started = std::time::Instant::now();
                    let prepared = b.prepare();
                    tracing::debug!(
                        us = started.elapsed().as_micros() as u64,
                        "snapshot prepared"
                    );
                    return Indexed::Prepared(prepared);
                }
            };
            build(&mut b, batch);
        }
        Indexed::Open(b)
    })
}

/// `batch` and the batches already waiting behind it, in order, up to
/// `EXTRACT_AT_MOST` items; and the flush if it came next.
fn take_waiting(
    rx: &std::sync::mpsc::Receiver<ToIndex<ItemChange>>,
    mut batch: Vec<ItemChange>,
) -> (Vec<ItemChange>, Option<std::sync::mpsc::SyncSender<()>>) {
    while batch.len() < EXTRACT_AT_MOST {
        match rx.try_recv() {
            Ok(ToIndex::Batch(more)) => batch.extend(more),
            Ok(ToIndex::Flushed(ack)) => return (batch, Some(ack)),
            Err(_) => break,
        }
    }
    (batch, None)
}

/// Takes an extracted batch into `b`, in order.
pub(crate) fn build(b: &mut discern_index::Builder<'_>, batch: Vec<Extracted>) {
    for ch in batch {
        match ch {
            Extracted::Upsert(id, values, errors) => b.upsert_values(id, values, errors),
            Extracted::Delete(id) => b.delete(&id),
            Extracted::Clear => b.clear(),
        }
    }
}

/// A batch's values, extracted across the rayon pool, in the batch's order.
pub(crate) fn extract_batch(base: &Snapshot, batch: Vec<ItemChange>) -> Vec<Extracted> {
    batch
        .into_par_iter()
        .filter_map(|ch| match ch {
            ItemChange::Upsert(id, rec) => {
                let (values, errors) = base.indexed_values(&rec);
                Some(Extracted::Upsert(id.as_str().into(), values, errors))
            }
            ItemChange::Delete(id) => Some(Extracted::Delete(id)),
            ItemChange::Clear => Some(Extracted::Clear),
            ItemChange::Flush => None,
        })
        .collect()
}

/// Where an apply's index thread stopped.
enum Indexed<'w> {
    /// The store never flushed (it did not commit).
    Open(discern_index::Builder<'w>),
    /// The snapshot built after the flush, kept if the store's commit succeeds.
    Prepared(discern_index::Prepared<'w>),
}

/// What an apply sends its index thread (`ToIndex<ItemChange>`), and what the thread's
/// extracting stage hands its building stage (`ToIndex<Extracted>`).
enum ToIndex<T> {
    Batch(Vec<T>),
    /// Answer once every batch before this one is indexed.
    Flushed(std::sync::mpsc::SyncSender<()>),
}

/// How long after an apply its snapshot must still be the current one (no apply came
/// since) for its chunks without columns to be built (`build_missing_columns`).
const COLUMNS_AFTER_IDLE: std::time::Duration = std::time::Duration::from_millis(300);

/// How long after an apply its snapshot must still be the current one for the
/// did-you-mean overlays it left to be folded into their dictionaries' newer tiers (a
/// fold rebuilds the recent tier, or the whole dictionary once the changes are an eighth
/// of it: not after every apply of a burst).
const TERMS_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Builds the columns of the chunks of the engine's snapshot that have none, one chunk
/// per turn of the upkeep thread (a spare's catch-up waits for one chunk at most), while
/// the snapshot is the one apply `generation` made: a snapshot that only adopted
/// merged did-you-mean terms shares its chunks (and a bulk load's apply starts such a
/// merge), a newer apply continues the walk itself. A request scanning a chunk without
/// columns builds them on its way (~0.4 ms a chunk): after a bulk load, the first
/// ranking request at 1M items built ~1,000 (~0.2 s on both cores).
fn build_missing_columns(engine: &std::sync::Weak<Engine>, generation: u64) {
    let started = std::time::Instant::now();
    let mut built = 0;
    for c in 0.. {
        let Some(now) = engine.upgrade().map(|e| e.snapshot()) else {
            break;
        };
        if now.generation != generation || c >= now.chunk_count() {
            break;
        }
        built += process::in_background(|| now.build_chunk_columns(c)) as usize;
    }
    if built > 0 {
        tracing::debug!(
            chunks = built,
            us = started.elapsed().as_micros() as u64,
            "missing columns built"
        );
    }
}

/// Holds `Engine::commit_seq` odd once `mark` is called, until dropped.
pub(crate) struct StoreAhead<'a> {
    seq: &'a AtomicU64,
    marked: std::cell::Cell<bool>,
}

impl<'a> StoreAhead<'a> {
    pub(crate) fn on(seq: &'a AtomicU64) -> StoreAhead<'a> {
        StoreAhead {
            seq,
            marked: Default::default(),
        }
    }

    pub(crate) fn mark(&self) {
        if !self.marked.replace(true) {
            self.seq.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for StoreAhead<'_> {
    fn drop(&mut self) {
        if self.marked.get() {
            self.seq.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Engine {
    /// Applies a changeset body (already decompressed). Blocking: call from a blocking
    /// thread with the writer held.
    pub fn apply(
        &self,
        guard: &mut WriterGuard,
        ty: ChangesetType,
        body: impl Read + Send,
    ) -> Result<ApplyOutcome> {
        self.apply_dated(guard, ty, None, body)
    }

    /// `apply`, listed under `date` (Unix seconds) when given.
    pub fn apply_dated(
        &self,
        guard: &mut WriterGuard,
        ty: ChangesetType,
        date: Option<u64>,
        body: impl Read + Send,
    ) -> Result<ApplyOutcome> {
        self.apply_with(guard, |store, on_change| {
            store.apply_changeset_dated(ty, date, body, on_change)
        })
    }

    /// Applies a changeset another engine listed, under its id (SPEC §14).
    pub fn apply_replicated(
        &self,
        guard: &mut WriterGuard,
        listed: &discern_store::Listed,
        body: impl Read + Send,
    ) -> Result<ApplyOutcome> {
        self.apply_with(guard, |store, on_change| {
            store.apply_replicated(listed, body, on_change)
        })
    }

    fn apply_with(
        &self,
        guard: &mut WriterGuard,
        run: impl FnOnce(&Store, &mut dyn FnMut(ItemChange) -> Result<()>) -> Result<ApplyOutcome>,
    ) -> Result<ApplyOutcome> {
        let base = self.snapshot.load_full();
        // where an apply's time goes (logged at debug level)
        let started = std::time::Instant::now();
        let parsed = std::cell::Cell::new(0u64);
        let indexed = std::cell::Cell::new(0u64);
        let ahead = StoreAhead::on(&self.commit_seq);
        let outcome;
        if self.indexing {
            // The store's thread parses and writes the items; this one's twin indexes
            // them as they come (batched through a bounded channel), so the two halves
            // of an apply use two cores.
            let index = &mut guard.index;
            let (run_result, b) = std::thread::scope(|scope| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<ToIndex<ItemChange>>(INDEX_QUEUE);
                let indexer = std::thread::Builder::new()
                    .name("apply-index".into())
                    .spawn_scoped(scope, move || {
                        let mut b = index.begin(&base);
                        // into an empty index (a first bulk load): the postings and
                        // dictionaries counted once at the end cost a fifth of the
                        // load's CPU less than recording every document's changes
                        if base.is_empty() {
                            b.count_at_end();
                        }
                        index_changes(b, &base, rx)
                    })
                    .map_err(|e| Error::Internal(format!("cannot start the index thread: {e}")))?;
                let mut batch = Vec::with_capacity(INDEX_BATCH);
                let stopped = || Error::Internal("the index thread stopped".into());
                let result = run(&self.store, &mut |ch| {
                    if let ItemChange::Flush = ch {
                        parsed.set(started.elapsed().as_micros() as u64);
                        // The store commits only once the index has taken every change:
                        // if the index thread died, the apply is aborted, not half done.
                        let rest = std::mem::take(&mut batch);
                        if !rest.is_empty() {
                            tx.send(ToIndex::Batch(rest)).map_err(|_| stopped())?;
                        }
                        let (ack, done) = std::sync::mpsc::sync_channel(1);
                        tx.send(ToIndex::Flushed(ack)).map_err(|_| stopped())?;
                        done.recv().map_err(|_| stopped())?;
                        indexed.set(started.elapsed().as_micros() as u64);
                        ahead.mark();
                        return Ok(());
                    }
                    batch.push(ch);
                    if batch.len() == INDEX_BATCH {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(INDEX_BATCH));
                        tx.send(ToIndex::Batch(full)).map_err(|_| stopped())?;
                    }
                    Ok(())
                });
                // changes after the last flush (a store path that does not commit)
                let result = result.and_then(|o| {
                    if !batch.is_empty() {
                        tx.send(ToIndex::Batch(std::mem::take(&mut batch)))
                            .map_err(|_| stopped())?;
                    }
                    Ok(o)
                });
                drop(tx);
                let b = indexer.join().map_err(|_| stopped())?;
                Ok::<_, Error>((result, b))
            })?;
            outcome = run_result?;
            let stored = started.elapsed().as_micros() as u64;
            // not applied: dropping the builder undoes its changes
            let snap = match (&outcome, b) {
                (ApplyOutcome::Applied { .. }, Indexed::Prepared(p)) => Some(p.keep()),
                (ApplyOutcome::Applied { .. }, Indexed::Open(b)) => Some(b.commit()),
                _ => None,
            };
            if let Some(snap) = snap {
                let snap = Arc::new(snap);
                tracing::debug!(
                    parsed_us = parsed.get(),
                    indexed_us = indexed.get(),
                    stored_us = stored,
                    committed_us = started.elapsed().as_micros() as u64,
                    "apply"
                );
                let merge = snap.terms_overlay_len() > discern_index::terms::BACKGROUND_MERGE_TERMS;
                let old = self.snapshot.swap(snap);
                drop(ahead);
                let big = match &outcome {
                    ApplyOutcome::Applied {
                        created,
                        modified,
                        deleted,
                        ..
                    } => created + modified + deleted >= TRIM_AFTER_ITEMS,
                    _ => false,
                };
                if big {
                    // what the apply's parsing, extraction and postings counting freed
                    // (~0.6 GB for a 1M-item bulk) goes back to the OS before the 201,
                    // not whenever the allocator next purges: the engine's size once
                    // the apply is done is what its caller sees
                    let started = std::time::Instant::now();
                    process::release_free_memory();
                    tracing::debug!(
                        us = started.elapsed().as_micros() as u64,
                        "freed memory returned"
                    );
                }
                self.reclaim_after(old, guard.index.spare(), big);
                if merge {
                    self.merge_terms_in_background(discern_index::terms::BACKGROUND_MERGE_TERMS);
                }
                self.item_errors
                    .store(guard.index.errors, Ordering::Relaxed);
            }
        } else {
            outcome = run(&self.store, &mut |_| Ok(()))?;
        }
        if let ApplyOutcome::Applied {
            meta,
            created,
            modified,
            deleted,
        } = &outcome
        {
            self.record_stored(meta);
            self.counters.applied.fetch_add(1, Ordering::Relaxed);
            self.counters.created.fetch_add(*created, Ordering::Relaxed);
            self.counters
                .modified
                .fetch_add(*modified, Ordering::Relaxed);
            self.counters.deleted.fetch_add(*deleted, Ordering::Relaxed);
        }
        Ok(outcome)
    }

    /// After an apply: what it leaves to do, on a `reclaim` thread of its own, off the way
    /// to the 201 — the replaced snapshot let go of, the copied chunks' columns rebuilt,
    /// the spare postings caught up; then, once applies pause, the columns no request
    /// built, and the spare dropped. `big`: the apply replaced whole chunks (freed memory
    /// goes back to the OS).
    fn reclaim_after(&self, old: Arc<Snapshot>, spare: discern_index::SpareSlot, big: bool) {
        // The documents this apply replaced are freed with the old snapshot (when no
        // query holds it any more): not on the way to the 201. Then the spare postings
        // take this apply's changes, so that the next apply finds them current.
        let (current, generation) = {
            let now = self.snapshot.load();
            (Arc::downgrade(&now), now.generation)
        };
        let engine = self.me.clone();
        let _ = std::thread::Builder::new()
            .name("reclaim".into())
            .spawn(move || {
                let rebuild = current
                    .upgrade()
                    .map(|now| now.columns_to_rebuild(&old))
                    .unwrap_or_default();
                drop(old);
                // the length unions of the text dimensions it copied (a text
                // request's first step, 1–2 ms a field at 1M items): first
                if let Some(now) = current.upgrade() {
                    now.build_length_unions(&now.length_unions_missing());
                }
                // The chunks this apply copied lost their columns: made again here from
                // the copied chunks' columns (30–50 ms of one core for a 1,000-item
                // delta at 1M items, ~270 ms built whole), rather than built whole by
                // the next requests on their way (a rank request after a delta rebuilt
                // ~600 chunks, ~100 ms). Before the spare's catch-up (30–40 ms), which
                // only the next apply needs. Stops once a newer snapshot replaced this
                // one.
                let started = std::time::Instant::now();
                let mut built = 0;
                let of = rebuild.len();
                // (each copied chunk let go of once done with: its columns' memory
                // then serves the next chunk's)
                for job in rebuild {
                    match current.upgrade() {
                        Some(now) => now.build_columns(job),
                        None => break,
                    }
                    built += 1;
                }
                tracing::debug!(
                    chunks = built,
                    of,
                    us = started.elapsed().as_micros() as u64,
                    "columns rebuilt"
                );
                let catching = spare.clone();
                process::in_background(move || catching.catch_up());
                if let Some(e) = engine.upgrade() {
                    e.fold_postings_if_due(generation);
                }
                // the chunks no request scanned since a restart or a bulk load,
                // once applies pause (applies back to back would share the
                // cores with it: the first ten deltas after a bulk load took
                // ~50 ms more each)
                let missing = |e: Arc<Engine>| {
                    let now = e.snapshot();
                    now.generation == generation && now.chunks_without_columns() > 0
                };
                if engine.upgrade().is_some_and(missing) {
                    std::thread::sleep(COLUMNS_AFTER_IDLE);
                    build_missing_columns(&engine, generation);
                }
                if big {
                    process::release_free_memory();
                }
                // A request for suggestions tries every term of an overlay (`TermDict::
                // within`) where the tiers below are searched by automaton: after ten
                // 1,000-item deltas at 1M items, did-you-mean requests took ~0.2 ms more
                // than on the same data restarted. Once applies pause, what they left in
                // the overlays is folded in.
                let to_fold = |e: &Arc<Engine>| {
                    let now = e.snapshot();
                    now.generation == generation && now.terms_overlay_len() > 0
                };
                if engine.upgrade().is_some_and(|e| to_fold(&e)) {
                    std::thread::sleep(TERMS_AFTER_IDLE);
                    if let Some(e) = engine.upgrade().filter(to_fold) {
                        e.merge_terms_in_background(0);
                    }
                }
                // last: waits out the pause that ends a burst of applies
                if spare.drop_when_idle(SPARE_IDLE) {
                    process::release_free_memory();
                }
            });
    }

    /// Merges a frozen dimension's postings overlay into a new FST when it is due
    /// (`Snapshot::fold_postings`), off the apply path — most of a second for an
    /// address's million keys, which an apply would otherwise pay — and installs it
    /// under the writer lock if no apply changed that dimension meanwhile. Only while
    /// the snapshot is still the one of `generation` (a newer apply's reclaim does it).
    fn fold_postings_if_due(&self, generation: u64) {
        let base = self.snapshot();
        if base.generation != generation || !base.postings_to_fold() {
            return;
        }
        let started = std::time::Instant::now();
        let folded = process::in_background(|| base.fold_postings());
        // (not held while waiting for the writer: a next apply's copied chunks are
        // patched in place only once no snapshot but theirs holds them)
        drop(base);
        let _guard = self.lock_writer_blocking();
        let adopted = self.snapshot().adopt_folded(&folded);
        let installed = adopted.is_some();
        if let Some(s) = adopted {
            self.snapshot.store(Arc::new(s));
        }
        tracing::debug!(
            ms = started.elapsed().as_millis() as u64,
            installed,
            "postings folded"
        );
    }

    /// Folds the did-you-mean dictionaries' overlays of more than `over` terms into their
    /// newer tiers off the apply path, then installs them under the writer lock (one
    /// merge at a time).
    pub(crate) fn merge_terms_in_background(&self, over: usize) {
        if self.merging_terms.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            self.merging_terms.store(false, Ordering::Release);
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("term-merge".into())
            .spawn(move || {
                crate::process::thread_started();
                let started = std::time::Instant::now();
                let base = me.snapshot();
                let merged = process::in_background(|| base.merge_terms(over));
                tracing::debug!(ms = started.elapsed().as_millis() as u64, "terms merged");
                let _guard = me.lock_writer_blocking();
                let cur = me.snapshot();
                if Arc::ptr_eq(&cur.dims, &base.dims) {
                    me.snapshot.store(Arc::new(cur.adopt_terms(&merged)));
                }
                me.merging_terms.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.merging_terms.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::*;

    /// The extraction stage takes the batches waiting behind one together, in order,
    /// up to its limit, and a flush that comes next with them.
    #[test]
    fn waiting_batches_are_extracted_together() {
        let ids = |v: &[ItemChange]| {
            v.iter()
                .map(|c| match c {
                    ItemChange::Delete(id) => id.clone(),
                    _ => "?".into(),
                })
                .collect::<Vec<_>>()
        };
        let del = |id: &str| ItemChange::Delete(id.into());
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        tx.send(ToIndex::Batch(vec![del("a"), del("b")])).unwrap();
        tx.send(ToIndex::Batch(vec![del("c")])).unwrap();
        let (ack, _done) = std::sync::mpsc::sync_channel(1);
        tx.send(ToIndex::Flushed(ack)).unwrap();
        tx.send(ToIndex::Batch(vec![del("d")])).unwrap();
        let (batch, flushed) = take_waiting(&rx, vec![del("x")]);
        assert_eq!(ids(&batch), ["x", "a", "b", "c"]);
        assert!(flushed.is_some());
        // what is left is taken next; nothing waiting: the batch alone
        let (batch, flushed) = take_waiting(&rx, vec![del("y")]);
        assert_eq!(ids(&batch), ["y", "d"]);
        assert!(flushed.is_none());
        // at most EXTRACT_AT_MOST items at once (whole batches)
        for _ in 0..EXTRACT_AT_MOST / INDEX_BATCH + 1 {
            tx.send(ToIndex::Batch((0..INDEX_BATCH).map(|_| del("z")).collect()))
                .unwrap();
        }
        let (batch, _) = take_waiting(&rx, Vec::new());
        assert_eq!(batch.len(), EXTRACT_AT_MOST);
        assert!(matches!(rx.try_recv(), Ok(ToIndex::Batch(_))));
    }

    /// An apply's changes reach the index in document order, whichever batch and stage
    /// they pass through: an item set again later in the changeset, or removed and set
    /// again, ends as its last action left it.
    #[test]
    fn the_index_takes_changes_in_document_order() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(
            d.path(),
            b"<dimensions><dimension id='n' type='integer'/></dimensions>",
        );
        let ids = 7;
        let actions = INDEX_BATCH * 5 + 3;
        let mut doc = String::from("<changeset>");
        // each id as its last action left it
        let mut expected = std::collections::BTreeMap::new();
        for a in 0..actions {
            let id = format!("k{}", a % ids);
            if a % 11 == 5 {
                doc.push_str(&format!("<remove-item id='{id}'/>"));
                expected.remove(&id);
            } else {
                doc.push_str(&set_item(&id, "n", &format!("<int>{a}</int>")));
                expected.insert(id, a as i64);
            }
        }
        doc.push_str("</changeset>");
        apply(&e, &doc);
        let snap = e.snapshot();
        let indexed: std::collections::BTreeMap<String, i64> = snap
            .docs()
            .map(|doc| {
                let n = doc.value(0).and_then(|v| v.numbers().next()).unwrap();
                (doc.id.to_string(), n as i64)
            })
            .collect();
        assert_eq!(indexed, expected);
    }
}
