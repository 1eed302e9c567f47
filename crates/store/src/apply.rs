use std::collections::{HashSet, VecDeque};
use std::fs;
use std::io::{self, BufReader, Read, Write};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use discern_changeset::{read_changeset, Action, ChangesetWriter, ParseError, ReadSummary};
use discern_model::{decode_record, Error, Record, Result};
use md5::{Digest, Md5};
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use crate::actions::{apply_action, check_allowed, Counts};
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
        let (actions, counts) = apply_items(&self.db, &self.reading, &txn, ty, tee, on_change)?;
        if actions == 0 && ty != ChangesetType::Reset {
            txn.abort().map_err(db_err)?;
            return Ok(ApplyOutcome::Empty);
        }
        // the log file is finished and fsynced while the index takes the last changes
        log.close()?;
        // dropping the transaction and the log writer on an error undoes both
        on_change(ItemChange::Flush)?;
        let staged = log.finish()?;
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
        if !durable_now {
            txn.set_durability(Durability::None);
        }
        // lock order: a write transaction, then the journal (`Store::sync`)
        let mut durable = self.durable.lock();
        if let Err(e) = txn.commit() {
            drop(durable);
            let _ = fs::remove_file(&staged.path);
            return Err(db_err(e));
        }
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
/// over are read ahead meanwhile (`pages`), through a read transaction of the last
/// commit, until this thread has applied every action.
fn apply_items(
    db: &Database,
    reads_under_way: &crate::pages::ReadsUnderWay,
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
    let mut named: HashSet<String> = HashSet::new();
    let mut scratch = Vec::with_capacity(1024);
    // (an empty store has no pages to read ahead; a read ahead that cannot start only
    // costs the reads)
    let last_commit: Option<Arc<ItemsTable>> = if items.is_empty().map_err(db_err)? {
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
            let job = ReadAhead::start_on(table, ids, READ_AHEAD_THREADS, reads_under_way);
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
                    apply_action(&mut items, action, &mut counts, &mut scratch, on_change)
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
    if summary.actions > 0 && ty.replaces_all() {
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
mod tests {
    use super::*;
    use discern_model::Value;

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 2, 8 << 20).unwrap();
        (d, s)
    }

    fn apply(s: &Store, ty: ChangesetType, doc: &str) -> Result<ApplyOutcome> {
        s.apply_changeset(ty, doc.as_bytes(), &mut |_| Ok(()))
    }

    fn sv(x: &str) -> Value {
        Value::Str(x.into())
    }

    /// The parser hands every action to the store side and its item to the read-ahead,
    /// in order, the last partial batch too.
    #[test]
    fn every_action_is_handed_over_and_read_ahead() {
        let ids: Vec<String> = (0..150).map(|i| format!("i{i:03}")).collect();
        let doc = format!(
            "<changeset>{}</changeset>",
            ids.iter()
                .map(|id| format!("<remove-item id='{id}'/>"))
                .collect::<String>()
        );
        let (tx, batches) = std::sync::mpsc::sync_channel(ids.len());
        let read = std::cell::RefCell::new(Vec::new());
        let read_ahead = |batch: &[Action]| {
            read.borrow_mut()
                .extend(batch.iter().map(|a| a.id().to_string()))
        };
        let summary = parse_in_batches(doc.as_bytes(), &tx, &read_ahead)
            .unwrap_or_else(|_| panic!("a valid changeset"));
        assert_eq!(summary.actions, 150);
        drop(tx);
        let applied: Vec<String> = batches
            .iter()
            .flatten()
            .map(|a: Action| a.id().to_string())
            .collect();
        let read = read.into_inner();
        assert_eq!(applied, ids);
        assert_eq!(read, ids);
    }

    /// Every change reaches the callback before the commit, which is announced by
    /// `Flush`; an error there aborts the apply: no item, no listing, no log file.
    #[test]
    fn flush_error_aborts_the_apply() {
        let (d, s) = store();
        let mut seen = Vec::new();
        let r = s.apply_changeset(
            ChangesetType::Delta,
            "<changeset><set-item id='a'/><remove-item id='b'/></changeset>".as_bytes(),
            &mut |ch| {
                seen.push(match ch {
                    ItemChange::Upsert(id, _) => format!("upsert {id}"),
                    ItemChange::Delete(id) => format!("delete {id}"),
                    ItemChange::Clear => "clear".into(),
                    ItemChange::Flush => {
                        return Err(Error::Internal("the index refused".into()));
                    }
                });
                Ok(())
            },
        );
        assert!(r.is_err());
        assert_eq!(seen, ["upsert a"]);
        assert!(s.get("a").unwrap().is_none());
        assert!(s.list(true).unwrap().is_empty());
        let files: Vec<_> = std::fs::read_dir(d.path().join("changesets"))
            .unwrap()
            .collect();
        assert!(files.is_empty(), "{files:?}");
        // the same changeset with a willing callback applies
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><set-item id='a'/></changeset>",
        )
        .unwrap();
        assert!(s.get("a").unwrap().is_some());
    }

    /// A reader keeps the state it was opened in; its cursor finds items in id order,
    /// passes over missing ids without losing the next item.
    #[test]
    fn reader_and_cursor() {
        let (_d, s) = store();
        apply(&s, ChangesetType::Delta, "<changeset><set-item id='b'/><set-item id='d'/><set-item id='f'><properties><struct><entry name='x'><string>1</string></entry></struct></properties></set-item></changeset>").unwrap();
        let reader = s.reader().unwrap();
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><remove-item id='d'/><set-item id='c'/></changeset>",
        )
        .unwrap();
        assert!(reader.get("d").unwrap().is_some());
        assert!(reader.get("c").unwrap().is_none());
        assert!(s.get("d").unwrap().is_none());
        let mut cur = reader.cursor_from("a").unwrap();
        let len = |raw: &[u8]| raw.len();
        assert!(cur.seek_raw("b", len).unwrap().is_some());
        assert!(cur.seek_raw("c", len).unwrap().is_none());
        assert!(cur.seek_raw("d", len).unwrap().is_some());
        assert!(cur.seek_raw("e", len).unwrap().is_none());
        assert!(cur.seek_raw("e2", len).unwrap().is_none());
        let f = cur
            .seek_raw("f", |raw| decode_record(raw).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(f.get("x"), Some(&sv("1")));
        assert!(cur.seek_raw("g", len).unwrap().is_none());
    }

    #[test]
    fn actions_and_types() {
        let (_d, s) = store();
        apply(&s, ChangesetType::Delta, "<changeset><set-item id='a'><properties><struct><entry name='style'><string>loft</string></entry><entry name='tags'><array><element><string>a</string></element><element><string>b</string></element></array></entry></struct></properties></set-item><add-item id='b'/></changeset>").unwrap();
        apply(&s, ChangesetType::Delta, "<changeset><add-to-item id='a'><properties><struct><entry name='style'><string>view</string></entry><entry name='tags'><array><element><string>b</string></element><element><string>c</string></element></array></entry></struct></properties></add-to-item></changeset>").unwrap();
        let a = s.get("a").unwrap().unwrap();
        assert_eq!(
            a.get("style"),
            Some(&Value::Array(vec![sv("loft"), sv("view")]))
        );
        assert_eq!(
            a.get("tags"),
            Some(&Value::Array(vec![sv("a"), sv("b"), sv("c")]))
        );
        apply(&s, ChangesetType::Delta, "<changeset><remove-from-item id='a'><properties><struct><entry name='style'><string>view</string></entry><entry name='tags'/></struct></properties></remove-from-item></changeset>").unwrap();
        let a = s.get("a").unwrap().unwrap();
        assert_eq!(a.get("style"), Some(&Value::Array(vec![sv("loft")])));
        assert!(a.get("tags").is_none());
        // snapshot deletes b
        apply(
            &s,
            ChangesetType::Snapshot,
            "<changeset><add-item id='c'/><add-item id='a'/></changeset>",
        )
        .unwrap();
        assert!(s.get("b").unwrap().is_none());
        assert_eq!(s.item_count().unwrap(), 2);
        // empty: nothing stored
        assert!(matches!(
            apply(&s, ChangesetType::Snapshot, "<changeset/>").unwrap(),
            ApplyOutcome::Empty
        ));
        assert_eq!(s.item_count().unwrap(), 2);
        // invalid: nothing changes, no file left
        assert!(apply(
            &s,
            ChangesetType::Delta,
            "<changeset><remove-item id='a'/><bogus/></changeset>"
        )
        .is_err());
        assert!(apply(
            &s,
            ChangesetType::Bulk,
            "<changeset><set-item id='x'/><set-item id='x'/></changeset>"
        )
        .is_err());
        assert!(apply(
            &s,
            ChangesetType::Full,
            "<changeset><add-item id='x'/></changeset>"
        )
        .is_err());
        assert_eq!(s.item_count().unwrap(), 2);
        let files = fs::read_dir(s.dir().join("changesets")).unwrap().count();
        assert_eq!(files, s.list(true).unwrap().len());
        // empty reset clears
        apply(&s, ChangesetType::Reset, "<changeset/>").unwrap();
        assert_eq!(s.item_count().unwrap(), 0);
        assert_eq!(s.list(true).unwrap().len(), 1);
    }

    /// The parser runs ahead of the store on its own thread: an error on either side,
    /// early or late in a long document, fails the whole apply (no hang, nothing
    /// stored, the parser stopped), and the error named is the one that happened.
    #[test]
    fn errors_on_either_side_of_a_long_document() {
        let (d, s) = store();
        let many =
            |n: usize| -> String { (0..n).map(|i| format!("<set-item id='i{i}'/>")).collect() };
        // the store side refuses the 3rd action; thousands follow, queued by the parser
        let dup = format!(
            "<changeset><set-item id='x'/><set-item id='y'/><set-item id='x'/>{}</changeset>",
            many(20_000)
        );
        let err = apply(&s, ChangesetType::Bulk, &dup).unwrap_err();
        assert!(
            err.to_string().contains("names item \"x\" more than once"),
            "{err}"
        );
        // the parser fails after 5,000 good actions
        let bad = format!("<changeset>{}<bogus/></changeset>", many(5_000));
        let err = apply(&s, ChangesetType::Delta, &bad).unwrap_err();
        assert!(
            matches!(err, Error::BadRequest(_)) && err.to_string().contains("bogus"),
            "{err}"
        );
        // the callback fails late
        let mut seen = 0;
        let err = s
            .apply_changeset(
                ChangesetType::Delta,
                format!("<changeset>{}</changeset>", many(3_000)).as_bytes(),
                &mut |_| {
                    seen += 1;
                    if seen == 2_500 {
                        return Err(Error::Internal("the index refused".into()));
                    }
                    Ok(())
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("the index refused"), "{err}");
        assert_eq!(s.item_count().unwrap(), 0);
        assert!(s.list(true).unwrap().is_empty());
        assert_eq!(
            fs::read_dir(d.path().join("changesets")).unwrap().count(),
            0
        );
        // and a long document applies whole
        apply(
            &s,
            ChangesetType::Delta,
            &format!("<changeset>{}</changeset>", many(3_000)),
        )
        .unwrap();
        assert_eq!(s.item_count().unwrap(), 3_000);
    }

    #[test]
    fn retention_and_checkpoint() {
        let (_d, s) = store();
        for i in 0..3 {
            apply(
                &s,
                ChangesetType::Snapshot,
                &format!("<changeset><add-item id='s{i}'/></changeset>"),
            )
            .unwrap();
            apply(
                &s,
                ChangesetType::Delta,
                &format!("<changeset><add-item id='d{i}'/></changeset>"),
            )
            .unwrap();
        }
        let all = s.list(true).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(s.list(false).unwrap().len(), 2);
        let cp = s.checkpoint().unwrap();
        let (_, mut r) = s.open_changeset(&cp.id).unwrap().unwrap();
        let mut body = String::new();
        r.read_to_string(&mut body).unwrap();
        assert!(body.contains("<set-item id=\"d2\">"));
        assert_eq!(s.list(false).unwrap().len(), 1);
    }

    /// The changesets listed after a state, while the catalog lists them all.
    #[test]
    fn changesets_listed_since_a_state() {
        let (_d, s) = store();
        assert_eq!(
            s.listed_since(&s.state_token().unwrap()).unwrap(),
            Some(vec![])
        );
        let mut tokens = vec![s.state_token().unwrap()];
        for i in 0..3 {
            apply(
                &s,
                ChangesetType::Delta,
                &format!("<changeset><add-item id='d{i}'/></changeset>"),
            )
            .unwrap();
            tokens.push(s.state_token().unwrap());
        }
        let all = s.list(true).unwrap();
        for (k, token) in tokens.iter().enumerate() {
            assert_eq!(s.listed_since(token).unwrap().unwrap(), all[k..], "{token}");
        }
        // a state the catalog never listed
        let other_md5 = tokens[1].replace(&all[0].md5, "0123456789abcdef0123456789abcdef");
        for token in [
            "changeset 1 nope nope",
            "changeset x",
            "",
            other_md5.as_str(),
        ] {
            assert_eq!(s.listed_since(token).unwrap(), None, "{token}");
        }
        // retention retires the state's changeset and those after it (two snapshots kept)
        for i in 0..3 {
            apply(
                &s,
                ChangesetType::Snapshot,
                &format!("<changeset><add-item id='s{i}'/></changeset>"),
            )
            .unwrap();
        }
        assert_eq!(s.listed_since(&tokens[2]).unwrap(), None);
        assert_eq!(s.listed_since(&tokens[0]).unwrap(), None);
    }
}
