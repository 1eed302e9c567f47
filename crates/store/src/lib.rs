//! Durable storage (SPEC §1.2, §4, §5): the changeset log — each changeset zstd-compressed
//! in its own file, described by a catalog — and the item store, both in one redb
//! database so that a changeset's items and its catalog entry commit in one transaction.
//!
//! Crash safety: a changeset file is written and fsynced (with its directory) before
//! the transaction that lists it commits; that commit is made durable by the commit
//! journal (`journal`), and at open every journaled changeset the item store lost is
//! applied again. Files the catalog then does not list are orphans of an interrupted
//! apply (or of retention) and are deleted.

mod actions;
mod apply;
mod image;
mod journal;
mod log;
mod meta;
mod pages;

pub use apply::{ApplyOutcome, ItemChange, Listed};
pub use image::{image_meta, install_image, ImageSource, IMAGE_CHANGESET, IMAGE_ITEMS};
pub use log::{is_engine_id, threads_started as log_threads_started, LogWriter};
pub use meta::{ChangesetMeta, ChangesetType};
pub use pages::{handed_over_here as pages_handed_over_here, Reads};

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use discern_model::{decode_record, Error, Record, Result};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

pub(crate) const ITEMS: TableDefinition<&str, &[u8]> = TableDefinition::new("items");
pub(crate) const CATALOG: TableDefinition<u64, &[u8]> = TableDefinition::new("catalog");

pub(crate) fn db_err(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("item store: {e}"))
}

/// One consistent read snapshot of the item store (see `Store::reader`).
pub struct ItemReader {
    items: std::sync::Arc<pages::ItemsTable>,
    reading: pages::ReadsUnderWay,
    /// `pages::Reads`'s threshold.
    from_disk: Duration,
}

impl ItemReader {
    /// The reads of the items `ids` names, to be made in that order through the value
    /// returned: once one of them turns out to come from the disk, the rest are read
    /// several at once, so that the reads that follow find their pages in memory (see
    /// `pages`). Reading ahead stops when the returned value is dropped.
    pub fn reads<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Reads<'_> {
        Reads::new(
            &self.items,
            &self.reading,
            ids.into_iter().map(str::to_string).collect(),
            self.from_disk,
        )
    }

    pub fn get(&self, id: &str) -> Result<Option<Record>> {
        self.with_raw(id, |raw| decode_record(raw).map_err(db_err))?
            .transpose()
    }

    /// Calls `f` with the item's encoded record (see `discern_model::decode_record`).
    pub fn with_raw<T>(&self, id: &str, f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        Ok(self.items.get(id).map_err(db_err)?.map(|v| f(v.value())))
    }

    /// A cursor over the items in id order from `from` on: reading many items in id
    /// order this way walks the leaves once instead of descending the tree per item.
    pub fn cursor_from(&self, from: &str) -> Result<ItemCursor<'_>> {
        Ok(ItemCursor {
            range: self.items.range::<&str>(from..).map_err(db_err)?,
            ahead: None,
        })
    }
}

type Row<'a> = (
    redb::AccessGuard<'a, &'static str>,
    redb::AccessGuard<'a, &'static [u8]>,
);

pub struct ItemCursor<'a> {
    range: redb::Range<'a, &'static str, &'static [u8]>,
    /// A row read past a missing id, for the next seek.
    ahead: Option<Row<'a>>,
}

impl ItemCursor<'_> {
    /// Moves to the item `id` — which must not be before the cursor's last item — and
    /// calls `f` with its encoded record; `None` if the store has no such item.
    pub fn seek_raw<T>(&mut self, id: &str, f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        loop {
            let (k, v) = match self.ahead.take() {
                Some(row) => row,
                None => match self.range.next() {
                    Some(row) => row.map_err(db_err)?,
                    None => return Ok(None),
                },
            };
            match k.value().cmp(id) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(Some(f(v.value()))),
                std::cmp::Ordering::Greater => {
                    self.ahead = Some((k, v));
                    return Ok(None);
                }
            }
        }
    }
}

pub struct Store {
    dir: PathBuf,
    log_dir: PathBuf,
    db: Database,
    /// Closing waits for these (`pages::wait_for_reads`).
    reading: pages::ReadsUnderWay,
    /// The readers' `pages::Reads` threshold, in nanoseconds (`set_from_disk`).
    from_disk_ns: AtomicU64,
    retain_snapshots: usize,
    /// Taken after a write transaction, never before (see `sync`).
    durable: parking_lot::Mutex<Durable>,
}

/// What is committed but not yet durable in the item store itself.
struct Durable {
    journal: journal::Journal,
    /// Changesets retention dropped whose files go once that is durable (a changeset
    /// the journal lists may need its file until then).
    retired: Vec<String>,
    /// When the oldest commit not yet synced was made.
    since: Option<Instant>,
    /// When the newest commit was made.
    last: Option<Instant>,
}

impl Durable {
    /// After a durable commit: empties the journal and hands over the files retention
    /// dropped, for the caller to delete once it has let go of the lock.
    fn synced(&mut self) -> std::io::Result<Vec<String>> {
        self.journal.clear()?;
        self.since = None;
        Ok(std::mem::take(&mut self.retired))
    }

    fn committed(&mut self, retired: Vec<String>) {
        let now = Instant::now();
        self.since.get_or_insert(now);
        self.last = Some(now);
        self.retired.extend(retired);
    }
}

/// `Store::state_token` of a store that has listed no changeset.
const NO_CHANGESETS: &str = "no changesets";

/// The dimensions document, in the data dir.
pub const DIMENSIONS_FILE: &str = "dimensions.xml";
/// The item store, in the data dir (SPEC §1.2).
pub const ITEMS_FILE: &str = "items.redb";
/// The changeset log's directory, in the data dir: one `<id>.xml.zst` file each.
const LOG_DIR: &str = "changesets";
const LOG_SUFFIX: &str = ".xml.zst";

/// Changeset `id`'s file in the log directory `log_dir`.
pub(crate) fn log_file(log_dir: &Path, id: &str) -> PathBuf {
    log_dir.join(format!("{id}{LOG_SUFFIX}"))
}

/// `Store::state_token` once `m` is the newest changeset listed.
fn state_after(m: &ChangesetMeta) -> String {
    format!("changeset {} {} {}", m.seq, m.id, m.md5)
}

/// Opens (creating if needed) the item store's database. A file written by redb 2 (file
/// format 2, every data dir made before redb 4 was adopted) is upgraded in place first, by
/// redb 2.6's own `Database::upgrade` — the way redb's changelog gives for 3.0 — so that
/// an existing data dir opens as it is.
fn open_items(path: &Path, cache_bytes: u64) -> Result<Database> {
    let open = || {
        redb::Builder::new()
            .set_cache_size(cache_bytes as usize)
            .create(path)
    };
    match open() {
        Err(redb::DatabaseError::UpgradeRequired(2)) => {
            tracing::info!(path = %path.display(), "upgrading the item store to redb's file format 3");
            let mut old = redb2::Database::open(path).map_err(db_err)?;
            old.upgrade().map_err(db_err)?;
            drop(old);
            open().map_err(db_err)
        }
        opened => opened.map_err(db_err),
    }
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, removing orphaned changeset files.
    /// `cache_bytes` bounds the item store's page cache (redb's default, 1 GiB, would
    /// be most of the memory budget of a million-item engine).
    pub fn open(dir: &Path, retain_snapshots: usize, cache_bytes: u64) -> Result<Store> {
        fs::create_dir_all(dir)?;
        let log_dir = dir.join(LOG_DIR);
        fs::create_dir_all(&log_dir)?;
        let db = open_items(&dir.join(ITEMS_FILE), cache_bytes)?;
        {
            let txn = db.begin_write().map_err(db_err)?;
            txn.open_table(ITEMS).map_err(db_err)?;
            txn.open_table(CATALOG).map_err(db_err)?;
            txn.commit().map_err(db_err)?;
        }
        let (journal, journaled) = journal::Journal::open(dir)?;
        let store = Store {
            dir: dir.to_path_buf(),
            log_dir,
            db,
            reading: Default::default(),
            from_disk_ns: AtomicU64::new(pages::FROM_DISK.as_nanos() as u64),
            retain_snapshots: retain_snapshots.max(1),
            durable: parking_lot::Mutex::new(Durable {
                journal,
                retired: Vec::new(),
                since: None,
                last: None,
            }),
        };
        store.recover(journaled)?;
        store.remove_orphans()?;
        Ok(store)
    }

    /// Applies again every journaled changeset the item store does not list (it was
    /// committed, acknowledged, and lost with the process before a durable commit),
    /// then empties the journal.
    fn recover(&self, journaled: Vec<journal::Entry>) -> Result<()> {
        let listed = self.list(true)?.last().map_or(0, |m| m.seq);
        let lost: Vec<_> = journaled
            .into_iter()
            .filter(|e| e.meta.seq > listed)
            .collect();
        if !lost.is_empty() {
            tracing::info!(
                changesets = lost.len(),
                "applying again the journaled changesets the item store lost"
            );
        }
        for entry in &lost {
            self.replay(entry)?;
        }
        self.sync()
    }

    /// Makes every commit durable in the item store itself and empties the journal.
    /// Waits for an apply in progress (it holds the write transaction), and an apply
    /// waits for it.
    pub fn sync(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let mut durable = self.durable.lock();
        if durable.journal.is_empty() && durable.retired.is_empty() && durable.since.is_none() {
            txn.abort().map_err(db_err)?;
            return Ok(());
        }
        // an empty commit: durable, it makes every commit before it durable too
        txn.commit().map_err(db_err)?;
        let retired = durable.synced()?;
        drop(durable);
        apply::remove_log_files(self, retired);
        Ok(())
    }

    /// Whether `sync` is due: commits are waiting and none came for `idle`, or the
    /// oldest has waited `longest`.
    pub fn sync_due(&self, idle: Duration, longest: Duration) -> bool {
        let durable = self.durable.lock();
        match (durable.since, durable.last) {
            (Some(since), Some(last)) => last.elapsed() >= idle || since.elapsed() >= longest,
            _ => false,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn remove_orphans(&self) -> Result<()> {
        let listed: std::collections::HashSet<String> =
            self.list(true)?.into_iter().map(|m| m.id).collect();
        for entry in fs::read_dir(&self.log_dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let keep = name
                .strip_suffix(LOG_SUFFIX)
                .is_some_and(|id| listed.contains(id));
            if !keep {
                tracing::info!(file = %name, "removing changeset file no catalog entry lists");
                fs::remove_file(entry.path())?;
            }
        }
        sync_dir(&self.log_dir)
    }

    pub(crate) fn log_path(&self, id: &str) -> PathBuf {
        log_file(&self.log_dir, id)
    }

    /// The catalog, oldest first: by default from the newest complete-state changeset on;
    /// with `full`, everything the log still holds.
    pub fn list(&self, full: bool) -> Result<Vec<ChangesetMeta>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(CATALOG).map_err(db_err)?;
        let mut all = Vec::new();
        for row in table.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            all.push(ChangesetMeta::decode(v.value())?);
        }
        if !full {
            if let Some(pos) = all.iter().rposition(|m| m.ty.is_complete_state()) {
                all.drain(..pos);
            }
        }
        Ok(all)
    }

    /// Names the item store's state: every commit that changes items lists a changeset
    /// with a new sequence number and id, and the newest entry is never retired.
    pub fn state_token(&self) -> Result<String> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(CATALOG).map_err(db_err)?;
        let token = match table.last().map_err(db_err)? {
            Some((_, v)) => state_after(&ChangesetMeta::decode(v.value())?),
            None => NO_CHANGESETS.to_string(),
        };
        Ok(token)
    }

    /// The changesets committed after the state `token` (a `state_token`) named, oldest
    /// first: `None` when the catalog no longer lists every one of them (retention
    /// retired some, or a reset cleared them) or `token` names no state it lists.
    pub fn listed_since(&self, token: &str) -> Result<Option<Vec<ChangesetMeta>>> {
        let all = self.list(true)?;
        let after = if token == NO_CHANGESETS {
            0
        } else {
            match all.iter().find(|m| state_after(m) == token) {
                Some(m) => m.seq,
                None => return Ok(None),
            }
        };
        let since: Vec<ChangesetMeta> = all.into_iter().filter(|m| m.seq > after).collect();
        // sequence numbers are consecutive: a gap is a retired changeset
        let whole = (since.iter().enumerate()).all(|(k, m)| m.seq == after + 1 + k as u64);
        Ok(whole.then_some(since))
    }

    pub fn meta(&self, id: &str) -> Result<Option<ChangesetMeta>> {
        Ok(self.list(true)?.into_iter().find(|m| m.id == id))
    }

    /// The body of a stored changeset, decompressed as it is read.
    pub fn open_changeset(
        &self,
        id: &str,
    ) -> Result<Option<(ChangesetMeta, impl Read + Send + 'static)>> {
        let Some(meta) = self.meta(id)? else {
            return Ok(None);
        };
        let file = match fs::File::open(self.log_path(id)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let dec = zstd::stream::read::Decoder::new(file)?;
        Ok(Some((meta, dec)))
    }

    pub fn get(&self, id: &str) -> Result<Option<Record>> {
        self.reader()?.get(id)
    }

    /// How long a read may take before the reads named with it are read ahead — a
    /// page's (`ItemReader::reads`, readers made from now on) or an apply's batch
    /// (`pages::ReadAhead::start_on_if_from_disk`); `pages::FROM_DISK` unless set. Zero
    /// reads ahead after every first read, as tests need.
    pub fn set_from_disk(&self, took: Duration) {
        self.from_disk_ns
            .store(took.as_nanos() as u64, Ordering::Relaxed);
    }

    fn disk_read_takes(&self) -> Duration {
        Duration::from_nanos(self.from_disk_ns.load(Ordering::Relaxed))
    }

    /// A reader of the item store as of now: every read through it sees the same
    /// committed state, however many applies commit meanwhile.
    pub fn reader(&self) -> Result<ItemReader> {
        let txn = self.db.begin_read().map_err(db_err)?;
        Ok(ItemReader {
            items: std::sync::Arc::new(txn.open_table(ITEMS).map_err(db_err)?),
            reading: self.reading.clone(),
            from_disk: self.disk_read_takes(),
        })
    }

    pub fn item_count(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(ITEMS).map_err(db_err)?;
        table.len().map_err(db_err)
    }

    /// Calls `f` with batches of (id, encoded record) in id order, from one consistent
    /// read snapshot.
    pub fn scan_raw(
        &self,
        batch: usize,
        mut f: impl FnMut(Vec<(String, Vec<u8>)>) -> Result<()>,
    ) -> Result<()> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(ITEMS).map_err(db_err)?;
        let mut buf = Vec::with_capacity(batch);
        for row in table.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            buf.push((k.value().to_string(), v.value().to_vec()));
            if buf.len() == batch {
                f(std::mem::replace(&mut buf, Vec::with_capacity(batch)))?;
            }
        }
        if !buf.is_empty() {
            f(buf)?;
        }
        Ok(())
    }

    /// Bytes of the item store on disk.
    pub fn disk_size(&self) -> u64 {
        fs::metadata(self.dir.join(ITEMS_FILE))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// The stored dimensions document, if any.
    pub fn read_dimensions(&self) -> Result<Option<Vec<u8>>> {
        match fs::read(self.dir.join(DIMENSIONS_FILE)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the dimensions document durably (write, fsync, rename, fsync dir).
    pub fn write_dimensions(&self, doc: &[u8]) -> Result<()> {
        write_atomic(&self.dir.join(DIMENSIONS_FILE), doc)
    }
}

impl Drop for Store {
    /// Leaves the item store durable, so that the next open has nothing to apply again.
    fn drop(&mut self) {
        if let Err(e) = self.sync() {
            tracing::warn!(error = %e, "could not make the item store durable at close");
        }
        // (a store opened again at once must not find the file still locked)
        pages::wait_for_reads(&self.reading);
    }
}

/// Makes `dir`'s entries durable (a file created, renamed or removed in it).
pub fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Writes `data` to `path` durably and whole: a synced temp file beside it, renamed into
/// place, the directory synced.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(s: &Store, ty: ChangesetType, doc: &str) {
        s.apply_changeset(ty, doc.as_bytes(), &mut |_| Ok(()))
            .unwrap();
    }

    /// A store closes only once no reader thread reads through it: a read under way
    /// holds its file open and locked, and the store may be opened again at once.
    #[test]
    fn closing_waits_for_reads_under_way() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 2, 8 << 20).unwrap();
        let reading = s.reading.clone();
        // (as a reader thread counts a read before it takes the table)
        reading.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = std::sync::mpsc::channel();
        let closing = std::thread::spawn(move || {
            drop(s);
            tx.send(()).unwrap();
        });
        let wait = std::time::Duration::from_millis(200);
        assert!(rx.recv_timeout(wait).is_err(), "closed under a read");
        reading.fetch_sub(1, Ordering::SeqCst);
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("closed once the read ended");
        closing.join().unwrap();
        drop(Store::open(d.path(), 2, 8 << 20).unwrap());
    }

    /// The data dir as a crash would leave it while `s` is open: the files as the OS
    /// holds them, the item store's header as last synced.
    fn crash_image(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        for sub in ["", "changesets"] {
            fs::create_dir_all(to.path().join(sub)).unwrap();
            for entry in fs::read_dir(from.join(sub)).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    fs::copy(entry.path(), to.path().join(sub).join(entry.file_name())).unwrap();
                }
            }
        }
        to
    }

    fn state(s: &Store) -> (Vec<ChangesetMeta>, Vec<(String, Vec<u8>)>) {
        let mut items = Vec::new();
        s.scan_raw(100, |b| {
            items.extend(b);
            Ok(())
        })
        .unwrap();
        (s.list(true).unwrap(), items)
    }

    /// Commits after the last sync live in the journal: a crash image opens with every
    /// acknowledged changeset and item, listed as before — and without the journal
    /// they would be lost (the item store alone reverts to its last sync).
    #[test]
    fn a_crash_after_unsynced_commits_loses_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 2, 8 << 20).unwrap();
        let set = |id: &str, v: &str| {
            format!("<set-item id='{id}'><properties><struct><entry name='v'><string>{v}</string></entry></struct></properties></set-item>")
        };
        apply(
            &s,
            ChangesetType::Snapshot,
            &format!("<changeset>{}{}</changeset>", set("a", "1"), set("b", "1")),
        );
        s.sync().unwrap();
        apply(
            &s,
            ChangesetType::Delta,
            &format!(
                "<changeset>{}<remove-item id='b'/></changeset>",
                set("a", "2")
            ),
        );
        apply(
            &s,
            ChangesetType::Delta,
            &format!("<changeset>{}</changeset>", set("c", "3")),
        );
        // retention (2 complete states kept) drops the first three at the checkpoint: their files must
        // stay until that is durable, for the journal's replay needs them
        apply(
            &s,
            ChangesetType::Snapshot,
            &format!("<changeset>{}{}</changeset>", set("c", "4"), set("d", "4")),
        );
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><add-item id='e'/></changeset>",
        );
        let cp = s.checkpoint().unwrap();
        let before = state(&s);
        assert_eq!(before.0.len(), 3);
        assert_eq!(before.0.last().unwrap().id, cp.id);

        let image = crash_image(d.path());
        let lost = crash_image(d.path());
        fs::remove_file(lost.path().join("journal")).unwrap();

        let r = Store::open(image.path(), 2, 8 << 20).unwrap();
        assert_eq!(state(&r), before);
        // the replay was synced and the journal emptied; retired files are gone
        assert_eq!(fs::metadata(image.path().join("journal")).unwrap().len(), 0);
        let files = fs::read_dir(image.path().join("changesets"))
            .unwrap()
            .count();
        assert_eq!(files, before.0.len());
        drop(r);
        assert_eq!(
            state(&Store::open(image.path(), 2, 8 << 20).unwrap()),
            before
        );

        let without = Store::open(lost.path(), 2, 8 << 20).unwrap();
        assert_eq!(
            without.list(true).unwrap().len(),
            1,
            "the item store alone should hold only the synced snapshot"
        );
        drop(without);
    }

    /// A data dir whose item store redb 2 wrote (file format 2) opens as it was: the file
    /// is upgraded in place, its items and catalog unchanged, and applies go on.
    #[test]
    fn an_item_store_written_by_redb_2_is_upgraded_at_open() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 2, 8 << 20).unwrap();
        apply(
            &s,
            ChangesetType::Snapshot,
            "<changeset><add-item id='a'/><add-item id='b'/></changeset>",
        );
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><remove-item id='a'/><add-item id='c'/></changeset>",
        );
        s.sync().unwrap();
        let before = state(&s);
        drop(s);

        // the same rows, written by redb 2.6 in its default (format 2) file: the items
        // as `state` read them, the catalog as applies list it (each entry by its seq)
        let path = d.path().join(ITEMS_FILE);
        let (catalog, items) = &before;
        fs::remove_file(&path).unwrap();
        {
            const ITEMS2: redb2::TableDefinition<&str, &[u8]> =
                redb2::TableDefinition::new("items");
            const CATALOG2: redb2::TableDefinition<u64, &[u8]> =
                redb2::TableDefinition::new("catalog");
            let db = redb2::Database::create(&path).unwrap();
            let w = db.begin_write().unwrap();
            {
                let mut t = w.open_table(ITEMS2).unwrap();
                for (k, v) in items {
                    t.insert(k.as_str(), v.as_slice()).unwrap();
                }
                let mut t = w.open_table(CATALOG2).unwrap();
                for meta in catalog {
                    t.insert(meta.seq, meta.encode().as_slice()).unwrap();
                }
            }
            w.commit().unwrap();
        }
        assert!(matches!(
            Database::open(&path),
            Err(redb::DatabaseError::UpgradeRequired(2))
        ));

        let s = Store::open(d.path(), 2, 8 << 20).unwrap();
        assert_eq!(state(&s), before);
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><add-item id='d'/></changeset>",
        );
        assert_eq!(s.item_count().unwrap(), 3);
        drop(s);
        assert!(Database::open(&path).is_ok(), "upgraded for good");
    }

    /// An apply of many items commits durably itself: nothing is left in the journal,
    /// and a crash image holds it without one.
    #[test]
    fn a_large_apply_is_durable_without_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 2, 8 << 20).unwrap();
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><add-item id='small'/></changeset>",
        );
        assert!(fs::metadata(d.path().join("journal")).unwrap().len() > 0);
        let many: String = (0..apply::DURABLE_COMMIT_ITEMS)
            .map(|i| format!("<add-item id='i{i}'/>"))
            .collect();
        apply(
            &s,
            ChangesetType::Delta,
            &format!("<changeset>{many}</changeset>"),
        );
        assert_eq!(fs::metadata(d.path().join("journal")).unwrap().len(), 0);
        let image = crash_image(d.path());
        fs::remove_file(image.path().join("journal")).unwrap();
        let r = Store::open(image.path(), 2, 8 << 20).unwrap();
        assert_eq!(r.item_count().unwrap(), apply::DURABLE_COMMIT_ITEMS + 1);
        assert_eq!(r.list(true).unwrap().len(), 2);
    }

    /// A journal entry whose file does not hold what it says is an error at open, not a
    /// silently different item set.
    #[test]
    fn a_journaled_file_that_changed_fails_the_open() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 1, 8 << 20).unwrap();
        apply(
            &s,
            ChangesetType::Delta,
            "<changeset><add-item id='a'/></changeset>",
        );
        let meta = s.list(true).unwrap().pop().unwrap();
        let image = crash_image(d.path());
        let path = image
            .path()
            .join("changesets")
            .join(format!("{}.xml.zst", meta.id));
        let other = zstd::encode_all(&b"<changeset><add-item id='b'/></changeset>"[..], 1).unwrap();
        fs::write(&path, other).unwrap();
        let err = Store::open(image.path(), 1, 8 << 20).err().unwrap();
        assert!(err.to_string().contains("md5"), "{err}");
    }
}
