//! Durable storage (SPEC §1.2, §4, §5): the changeset log — each changeset zstd-compressed
//! in its own file, described by a catalog — and the item store, both in one redb
//! database so that a changeset's items and its catalog entry commit in one transaction.
//!
//! Crash safety: a changeset file is written to `<id>.tmp`, fsynced and renamed before
//! the transaction that lists it commits; at open, files the catalog does not list are
//! orphans of an interrupted apply and are deleted.

mod apply;
mod log;
mod meta;

pub use apply::{ApplyOutcome, ItemChange, Listed};
pub use log::{threads_started as log_threads_started, LogWriter};
pub use meta::{ChangesetMeta, ChangesetType};

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use discern_model::{decode_record, Error, Record, Result};
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

pub(crate) const ITEMS: TableDefinition<&str, &[u8]> = TableDefinition::new("items");
pub(crate) const CATALOG: TableDefinition<u64, &[u8]> = TableDefinition::new("catalog");

pub(crate) fn db_err(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("item store: {e}"))
}

/// One consistent read snapshot of the item store (see `Store::reader`).
pub struct ItemReader {
    items: redb::ReadOnlyTable<&'static str, &'static [u8]>,
}

impl ItemReader {
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
    retain_snapshots: usize,
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, removing orphaned changeset files.
    /// `cache_bytes` bounds the item store's page cache (redb's default, 1 GiB, would
    /// be most of the memory budget of a million-item engine).
    pub fn open(dir: &Path, retain_snapshots: usize, cache_bytes: u64) -> Result<Store> {
        fs::create_dir_all(dir)?;
        let log_dir = dir.join("changesets");
        fs::create_dir_all(&log_dir)?;
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes as usize)
            .create(dir.join("items.redb"))
            .map_err(db_err)?;
        {
            let txn = db.begin_write().map_err(db_err)?;
            txn.open_table(ITEMS).map_err(db_err)?;
            txn.open_table(CATALOG).map_err(db_err)?;
            txn.commit().map_err(db_err)?;
        }
        let store = Store {
            dir: dir.to_path_buf(),
            log_dir,
            db,
            retain_snapshots: retain_snapshots.max(1),
        };
        store.remove_orphans()?;
        Ok(store)
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
                .strip_suffix(".xml.zst")
                .is_some_and(|id| listed.contains(id));
            if !keep {
                tracing::info!(file = %name, "removing changeset file no catalog entry lists");
                fs::remove_file(entry.path())?;
            }
        }
        sync_dir(&self.log_dir)
    }

    pub(crate) fn log_path(&self, id: &str) -> PathBuf {
        self.log_dir.join(format!("{id}.xml.zst"))
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
            Some((_, v)) => {
                let m = ChangesetMeta::decode(v.value())?;
                format!("changeset {} {} {}", m.seq, m.id, m.md5)
            }
            None => "no changesets".to_string(),
        };
        Ok(token)
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

    /// A reader of the item store as of now: every read through it sees the same
    /// committed state, however many applies commit meanwhile.
    pub fn reader(&self) -> Result<ItemReader> {
        let txn = self.db.begin_read().map_err(db_err)?;
        Ok(ItemReader {
            items: txn.open_table(ITEMS).map_err(db_err)?,
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
        fs::metadata(self.dir.join("items.redb"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// The stored dimensions document, if any.
    pub fn read_dimensions(&self) -> Result<Option<Vec<u8>>> {
        match fs::read(self.dir.join("dimensions.xml")) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the dimensions document durably (write, fsync, rename, fsync dir).
    pub fn write_dimensions(&self, doc: &[u8]) -> Result<()> {
        write_atomic(&self.dir.join("dimensions.xml"), doc)
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
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
