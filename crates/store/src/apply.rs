use std::collections::VecDeque;
use std::fs;
use std::io::{self, BufReader, Read, Write};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use discern_changeset::{read_changeset, Action, ChangesetWriter, ParseError, ReadSummary};
use discern_model::{decode_record, Error, Record, Result};
use md5::{Digest, Md5};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table,
    WriteTransaction,
};

use crate::actions::{apply_action, check_allowed, Counts, Named};
use crate::journal::Entry;
use crate::log::{LogWriter, Staged};
use crate::meta::{ChangesetMeta, ChangesetType};
use crate::pages::{ItemsTable, ReadAhead};
use crate::{db_err, Store, CATALOG, ITEMS};

/// A changeset as another engine's listing describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub id: String,
    pub ty: ChangesetType,
    pub md5: String,
    pub length: u64,
    pub snapshot: bool,
    /// The first changeset of a fresh start: every local item goes first.
    pub restart: bool,
}

/// How one changeset is applied and stored.
struct Plan<'a> {
    /// The type whose item-set semantics apply.
    semantics: ChangesetType,
    /// The type it is listed under.
    stored: ChangesetType,
    log: LogWriter,
    /// The md5 and length the body must have (replication).
    expect: Option<(&'a str, u64)>,
    /// The date to list it under (Unix seconds), instead of now.
    date: Option<u64>,
}

/// A change to the item set, reported to the caller (the index) as it is applied.
pub enum ItemChange {
    Upsert(String, Record),
    Delete(String),
    /// Every item is deleted (reset).
    Clear,
    /// Every change has been handed over and the transaction is about to commit: an
    /// error now aborts it (e.g. the index could not take the changes).
    Flush,
}

#[derive(Debug)]
pub enum ApplyOutcome {
    /// A changeset without actions: nothing stored, nothing changed (SPEC §3).
    Empty,
    Applied {
        meta: ChangesetMeta,
        created: u64,
        modified: u64,
        deleted: u64,
    },
}

/// Errors inside the parse callback: either the document is bad or applying failed.
enum ApplyError {
    Parse(ParseError),
    Other(Error),
}

impl From<ParseError> for ApplyError {
    fn from(e: ParseError) -> Self {
        ApplyError::Parse(e)
    }
}

/// Copies everything read into the log writer.
struct Tee<'a, R> {
    inner: R,
    log: &'a mut LogWriter,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.log.write_all(&buf[..n])?;
        Ok(n)
    }
}

impl Store {
    /// Parses `body` and applies it as one transaction: all or nothing, durable when this
    /// returns `Applied`. `on_change` sees every resulting item change in order; an error
    /// from it aborts the apply.
    pub fn apply_changeset(
        &self,
        ty: ChangesetType,
        body: impl Read + Send,
        on_change: &mut dyn FnMut(ItemChange) -> Result<()>,
    ) -> Result<ApplyOutcome> {
        self.apply_changeset_dated(ty, None, body, on_change)
    }

    /// `apply_changeset` with the date to list it under (Unix seconds; a publisher's
    /// `Date` header), instead of now.
    pub fn apply_changeset_dated(
        &self,
        ty: ChangesetType,
        date: Option<u64>,
        body: impl Read + Send,
        on_change: &mut dyn FnMut(ItemChange) -> Result<()>,
    ) -> Result<ApplyOutcome> {
        let log = LogWriter::create(&self.log_dir)?;
        let plan = Plan {
            semantics: ty,
            stored: ty,
            log,
            expect: None,
            date,
        };
        self.apply_planned(plan, body, on_change)
    }

    /// Applies a changeset another engine listed (SPEC §14): stored under its id and
    /// listed type; a complete-state type replaces every item (a checkpoint too), a
    /// `restart` clears every item first (and the local history, like a reset); the
    /// body must match the listed md5 and length, or nothing is applied.
    pub fn apply_replicated(
        &self,
        listed: &Listed,
        body: impl Read + Send,
        on_change: &mut dyn FnMut(ItemChange) -> Result<()>,
    ) -> Result<ApplyOutcome> {
        if self.meta(&listed.id)?.is_some() {
            return Err(Error::Internal(format!(
                "changeset {} is already stored",
                listed.id
            )));
        }
        let semantics = match listed.ty {
            _ if listed.restart => ChangesetType::Reset,
            ChangesetType::Delta => ChangesetType::Delta,
            ChangesetType::Reset => ChangesetType::Reset,
            _ => ChangesetType::Snapshot,
        };
        let log = LogWriter::create_with_id(&self.log_dir, &listed.id)?;
        let plan = Plan {
            semantics,
            stored: listed.ty,
            log,
            expect: Some((&listed.md5, listed.length)),
            date: None,
        };
        self.apply_planned(plan, body, on_change)
    }

    fn apply_planned(
        &self,
        plan: Plan,
        body: impl Read + Send,
        on_change: &mut dyn FnMut(ItemChange) -> Result<()>,
    ) -> Result<ApplyOutcome> {
        let Plan {
            semantics: ty,
            stored,
            mut log,
            expect,
            date,
        } = plan;
        let txn = self.db.begin_write().map_err(db_err)?;
        let tee = Tee {
            inner: body,
            log: &mut log,
        };
        let (actions, counts) = apply_items(
            &self.db,
            &self.reading,
            self.disk_read_takes(),
            &txn,
            ty,
            tee,
            on_change,
        )?;
        if actions == 0 && ty != ChangesetType::Reset {
            txn.abort().map_err(db_err)?;
            return Ok(ApplyOutcome::Empty);
        }
        // the log file is finished and fsynced while the index takes the last changes
        log.close()?;
        // dropping the transaction and the log writer on an error undoes both
        on_change(ItemChange::Flush)?;
        let log_waited = std::time::Instant::now();
        let staged = log.finish()?;
        tracing::debug!(
            us = log_waited.elapsed().as_micros() as u64,
            "log file staged"
        );
        if let Some((md5, length)) = expect {
            if staged.md5 != md5 || staged.length != length {
                let _ = fs::remove_file(&staged.path);
                txn.abort().map_err(db_err)?;
                return Err(Error::Internal(format!(
                    "changeset {}: received md5 {} and length {}, the listing says {md5} and {length}",
                    staged.id, staged.md5, staged.length
                )));
            }
        }
        let changed = counts.created + counts.modified + counts.deleted;
        let durable_now = changed >= DURABLE_COMMIT_ITEMS;
        let meta = self.commit_with_log(txn, staged, stored, Some(ty), date, durable_now)?;
        Ok(ApplyOutcome::Applied {
            meta,
            created: counts.created,
            modified: counts.modified,
            deleted: counts.deleted,
        })
    }

    /// Writes a checkpoint: a `set-item` for every item, from one read snapshot, streamed.
    pub fn checkpoint(&self) -> Result<ChangesetMeta> {
        let mut log = LogWriter::create(&self.log_dir)?;
        {
            let read = self.db.begin_read().map_err(db_err)?;
            let items = read.open_table(ITEMS).map_err(db_err)?;
            let mut w = ChangesetWriter::new(&mut log)?;
            for row in items.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                let rec = decode_record(v.value()).map_err(db_err)?;
                w.set_item(k.value(), &rec)?;
            }
            w.finish()?;
        }
        let staged = log.finish()?;
        let txn = self.db.begin_write().map_err(db_err)?;
        self.commit_with_log(txn, staged, ChangesetType::Checkpoint, None, None, false)
    }

    /// Lists the staged (fsynced) file, applies retention and commits; durable
    /// once the journal holds its entry (see `journal`), or with `durable_now` by the
    /// commit itself (which syncs everything before it too). `semantics`: what the
    /// changeset did to the items (`None`: nothing, a checkpoint).
    fn commit_with_log(
        &self,
        mut txn: WriteTransaction,
        staged: Staged,
        ty: ChangesetType,
        semantics: Option<ChangesetType>,
        date: Option<u64>,
        durable_now: bool,
    ) -> Result<ChangesetMeta> {
        let listed = (|| -> Result<(ChangesetMeta, Vec<String>)> {
            let seq = {
                let cat = txn.open_table(CATALOG).map_err(db_err)?;
                let last = cat.last().map_err(db_err)?;
                last.map_or(1, |(k, _)| k.value() + 1)
            };
            let date = date.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            });
            let meta = ChangesetMeta {
                seq,
                id: staged.id.clone(),
                ty,
                date,
                md5: staged.md5.clone(),
                length: staged.length,
                raw_length: staged.raw_length,
            };
            let retired = list_in_catalog(&txn, &meta, self.retain_snapshots)?;
            Ok((meta, retired))
        })();
        let (meta, retired) = match listed {
            Ok(listed) => listed,
            Err(e) => {
                let _ = fs::remove_file(&staged.path);
                return Err(e);
            }
        };
        // redb refuses a non-durable commit only for a transaction holding a persistent
        // savepoint, which the store never makes; were it refused, the commit is durable
        let durable_now = durable_now || txn.set_durability(Durability::None).is_err();
        // lock order: a write transaction, then the journal (`Store::sync`)
        let mut durable = self.durable.lock();
        let committing = std::time::Instant::now();
        if let Err(e) = txn.commit() {
            drop(durable);
            let _ = fs::remove_file(&staged.path);
            return Err(db_err(e));
        }
        let commit_us = committing.elapsed().as_micros() as u64;
        durable.committed(retired);
        let made_durable = if durable_now {
            durable.synced()
        } else {
            let entry = Entry {
                meta: meta.clone(),
                semantics,
            };
            durable.journal.append(&entry).map(|()| Vec::new())
        };
        drop(durable);
        tracing::debug!(
            commit_us,
            durable_us = committing.elapsed().as_micros() as u64 - commit_us,
            durable_now,
            "item store committed"
        );
        match made_durable {
            Ok(retired) => remove_log_files(self, retired),
            Err(e) => {
                // the commit is visible but not yet durable: make it so the slow way
                tracing::warn!(error = %e, "could not write the commit journal; syncing the item store");
                self.sync()?;
            }
        }
        Ok(meta)
    }

    /// Applies a changeset the journal lists and the item store lost (a crash before
    /// its durable commit) from its log file, exactly as it was applied: same items,
    /// same catalog entry. Commits durably.
    pub(crate) fn replay(&self, entry: &Entry) -> Result<()> {
        let meta = &entry.meta;
        let fail = |what: String| {
            Error::Internal(format!(
                "replaying changeset {} (seq {}): {what}",
                meta.id, meta.seq
            ))
        };
        let txn = self.db.begin_write().map_err(db_err)?;
        let last = {
            let cat = txn.open_table(CATALOG).map_err(db_err)?;
            let last = cat.last().map_err(db_err)?;
            last.map_or(0, |(k, _)| k.value())
        };
        if meta.seq != last + 1 {
            return Err(fail(format!(
                "the item store's newest changeset is seq {last}"
            )));
        }
        let file = fs::File::open(self.log_path(&meta.id)).map_err(|e| fail(e.to_string()))?;
        let mut body = Md5Reader::new(zstd::stream::read::Decoder::new(file)?);
        if let Some(ty) = entry.semantics {
            apply_items(
                &self.db,
                &self.reading,
                self.disk_read_takes(),
                &txn,
                ty,
                &mut body,
                &mut |_| Ok(()),
            )?;
        }
        io::copy(&mut body, &mut io::sink())?;
        let (md5, length) = body.finish();
        if md5 != meta.md5 || length != meta.length {
            return Err(fail(format!(
                "the file has md5 {md5} and length {length}, the journal says {} and {}",
                meta.md5, meta.length
            )));
        }
        let retired = list_in_catalog(&txn, meta, self.retain_snapshots)?;
        txn.commit().map_err(db_err)?;
        remove_log_files(self, retired);
        Ok(())
    }
}

/// Deletes the log files of changesets the catalog no longer lists.
pub(crate) fn remove_log_files(store: &Store, ids: Vec<String>) {
    for id in ids {
        if let Err(e) = fs::remove_file(store.log_path(&id)) {
            tracing::warn!(%id, error = %e, "could not delete a changeset file retention dropped");
        }
    }
}

/// An apply changing at least this many items commits durably itself, rather than
/// through the journal: the OS would otherwise write its pages back behind the next
/// applies' fsyncs (a bulk of a million items leaves gigabytes to write), which then
/// waited for them — the apply that wrote them pays instead.
pub(crate) const DURABLE_COMMIT_ITEMS: u64 = 10_000;

/// Actions per message from an apply's parser thread to its store side.
const ACTION_BATCH: usize = 64;

/// Reader threads (`pages`) one batch's items are read ahead by: a few reads in flight
/// for the one store thread (two did no better than four, session 39).
const READ_AHEAD_THREADS: usize = 4;

/// Applies `body`'s actions to the items in `txn` with `ty`'s item-set semantics,
/// calling `on_change` with every change: the number of actions and what they did.
/// The document is parsed on a thread of its own while this one reads and writes the
/// item store, so that the two halves of an apply overlap; the items the parser hands
/// over are read ahead meanwhile if their pages come from the disk (`pages`), through a
/// read transaction of the last commit, until this thread has applied every action.
fn apply_items(
    db: &Database,
    reads_under_way: &crate::pages::ReadsUnderWay,
    from_disk: std::time::Duration,
    txn: &WriteTransaction,
    ty: ChangesetType,
    body: impl Read + Send,
    on_change: &mut dyn FnMut(ItemChange) -> Result<()>,
) -> Result<(u64, Counts)> {
    let mut counts = Counts::default();
    let mut items = txn.open_table(ITEMS).map_err(db_err)?;
    if ty == ChangesetType::Reset {
        counts.deleted = items.len().map_err(db_err)?;
        items.retain(|_, _| false).map_err(db_err)?;
        on_change(ItemChange::Clear)?;
    }
    let mut scratch = Vec::with_capacity(1024);
    // An apply into an empty store (a first load, or after a reset's clear) leaves only
    // items it named: nothing is removed after it, and a bulk's repeated id is an item
    // its insert finds already there. Only a replacing apply into a store with items
    // keeps the names (`Named`), a million-item load's ~1.5 s of the store thread.
    let started_empty = items.is_empty().map_err(db_err)?;
    let mut named = Named::new(ty, started_empty);
    let only_creates = named.only_creates();
    // (an empty store has no pages to read ahead; a read ahead that cannot start only
    // costs the reads)
    let last_commit: Option<Arc<ItemsTable>> = if started_empty {
        None
    } else {
        (db.begin_read().ok())
            .and_then(|read| read.open_table(ITEMS).ok())
            .map(Arc::new)
    };
    // the batches being read ahead, in the order they are handed over, until the store
    // side is done with each
    let reading: Mutex<VecDeque<ReadAhead>> = Mutex::new(VecDeque::new());
    let read_ahead = |batch: &[Action]| {
        if let Some(table) = &last_commit {
            let ids = batch.iter().map(|a| a.id().to_string()).collect();
            let job = ReadAhead::start_on_if_from_disk(
                table,
                ids,
                READ_AHEAD_THREADS,
                reads_under_way,
                from_disk,
            );
            if let Ok(mut reading) = reading.lock() {
                reading.push_back(job);
            }
        }
    };
    let (parsed, applied) = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Action>>(16);
        let read_ahead = &read_ahead;
        let parser = std::thread::Builder::new()
            .name("changeset-parse".into())
            .spawn_scoped(scope, move || parse_in_batches(body, &tx, read_ahead))
            .map_err(|e| Error::Internal(format!("cannot start the changeset parser: {e}")))?;
        let mut applied = Ok(());
        // where the store side's time goes (logged at debug level)
        let started = std::time::Instant::now();
        let mut waited = std::time::Duration::ZERO;
        let mut idle_since = started;
        let mut read_ahead = 0;
        // what is not read ahead of a batch once it is applied is not needed (each batch's
        // read-ahead was queued before the batch was sent: it is the oldest left)
        let mut batch_applied = || {
            let done = reading.lock().ok().and_then(|mut r| r.pop_front());
            read_ahead += done.map_or(0, |d| d.taken());
        };
        'batches: for batch in rx {
            waited += idle_since.elapsed();
            for action in batch {
                applied = check_allowed(ty, &action, &mut named).and_then(|()| {
                    apply_action(
                        &mut items,
                        action,
                        &mut counts,
                        &mut scratch,
                        only_creates,
                        on_change,
                    )
                });
                if applied.is_err() {
                    // dropping the receiver stops the parser at its next batch
                    break 'batches;
                }
            }
            batch_applied();
            idle_since = std::time::Instant::now();
        }
        // (after an error: what is left)
        drop(reading.lock().map(|mut r| std::mem::take(&mut *r)));
        tracing::debug!(
            us = started.elapsed().as_micros() as u64,
            parser_wait_us = waited.as_micros() as u64,
            read_ahead,
            "actions applied"
        );
        let parsed = parser
            .join()
            .map_err(|_| Error::Internal("the changeset parser panicked".into()))?;
        Ok::<_, Error>((parsed, applied))
    })?;
    applied?;
    let summary = match parsed {
        Ok(s) => s,
        Err(ApplyError::Parse(e)) => {
            return Err(Error::BadRequest(format!("invalid changeset: {e}")))
        }
        Err(ApplyError::Other(e)) => return Err(e),
    };
    if let (true, Named::Kept(named)) = (summary.actions > 0, &named) {
        let mut gone = Vec::new();
        for row in items.iter().map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            if !named.contains(k.value()) {
                gone.push(k.value().to_string());
            }
        }
        for id in gone {
            items.remove(id.as_str()).map_err(db_err)?;
            counts.deleted += 1;
            on_change(ItemChange::Delete(id))?;
        }
    }
    Ok((summary.actions, counts))
}

/// Parses `body`, handing its actions to the store side (`tx`) in batches of
/// `ACTION_BATCH`, each batch first to `read_ahead`. Stops with an error once the store
/// side has stopped taking them (its error is the apply's).
fn parse_in_batches(
    body: impl Read,
    tx: &SyncSender<Vec<Action>>,
    read_ahead: &dyn Fn(&[Action]),
) -> std::result::Result<ReadSummary, ApplyError> {
    let hand_over = |batch: Vec<Action>| {
        read_ahead(&batch);
        tx.send(batch)
            .map_err(|_| ApplyError::Other(Error::Internal("the apply stopped".into())))
    };
    let mut batch = Vec::with_capacity(ACTION_BATCH);
    let summary = read_changeset(BufReader::with_capacity(256 * 1024, body), |action| {
        batch.push(action);
        if batch.len() == ACTION_BATCH {
            hand_over(std::mem::replace(
                &mut batch,
                Vec::with_capacity(ACTION_BATCH),
            ))?;
        }
        Ok::<(), ApplyError>(())
    });
    if !batch.is_empty() {
        // (a store side that stopped has its own error, or the parser's is the apply's)
        let _ = hand_over(batch);
    }
    summary
}

/// Lists `meta` in the catalog under its sequence number and applies retention: the
/// ids of the changesets retention dropped (their files go once that is durable).
fn list_in_catalog(
    txn: &WriteTransaction,
    meta: &ChangesetMeta,
    retain: usize,
) -> Result<Vec<String>> {
    let mut cat = txn.open_table(CATALOG).map_err(db_err)?;
    cat.insert(meta.seq, meta.encode().as_slice())
        .map_err(db_err)?;
    let mut removed = Vec::new();
    if let Some(cutoff) = retention_cutoff(&cat, meta, retain)? {
        let mut old = Vec::new();
        for row in cat.range(..cutoff).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            old.push((k.value(), ChangesetMeta::decode(v.value())?.id));
        }
        for (k, id) in old {
            cat.remove(k).map_err(db_err)?;
            removed.push(id);
        }
    }
    Ok(removed)
}

/// Hashes and counts what is read through it.
struct Md5Reader<R> {
    inner: R,
    md5: Md5,
    length: u64,
}

impl<R: Read> Md5Reader<R> {
    fn new(inner: R) -> Self {
        Md5Reader {
            inner,
            md5: Md5::new(),
            length: 0,
        }
    }
    fn finish(self) -> (String, u64) {
        (hex::encode(self.md5.finalize()), self.length)
    }
}

impl<R: Read> Read for Md5Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.md5.update(&buf[..n]);
        self.length += n as u64;
        Ok(n)
    }
}

/// Sequence number below which catalog entries are dropped (SPEC §4 reset, §5.5).
fn retention_cutoff(
    cat: &Table<u64, &[u8]>,
    newest: &ChangesetMeta,
    retain: usize,
) -> Result<Option<u64>> {
    if newest.ty == ChangesetType::Reset {
        return Ok(Some(newest.seq));
    }
    if !newest.ty.is_complete_state() {
        return Ok(None);
    }
    let mut complete = Vec::new();
    for row in cat.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        if ChangesetMeta::decode(v.value())?.ty.is_complete_state() {
            complete.push(k.value());
        }
    }
    if complete.len() <= retain {
        return Ok(None);
    }
    Ok(Some(complete[complete.len() - retain]))
}

#[cfg(test)]
mod tests;
