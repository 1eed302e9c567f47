//! Bootstrap images (docs/replication.md): the item store as one checkpoint left it, in a
//! directory of its own, for a new follower to start from instead of applying the
//! checkpoint's changeset item by item (~20,000 items/s; an image installs at disk
//! speed). The image's item store lists that changeset alone, so the follower's state
//! token names the checkpoint's state, as the primary's did.

use std::fs;
use std::path::Path;

use discern_model::{Error, Result};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use crate::{
    db_err, log_file, sync_dir, write_atomic, ChangesetMeta, Store, CATALOG, DIMENSIONS_FILE,
    ITEMS, ITEMS_FILE, LOG_DIR,
};

/// The image's item store: the items, and a catalog listing the changeset alone (named
/// as in a data dir).
pub const IMAGE_ITEMS: &str = ITEMS_FILE;
/// The changeset's file, as the log holds it.
pub const IMAGE_CHANGESET: &str = "changeset.xml.zst";

/// The item store's state at one changeset, held (a read transaction: what later commits
/// change stays on disk) until its image is written.
pub struct ImageSource {
    txn: ReadTransaction,
    meta: ChangesetMeta,
}

impl Store {
    /// Holds the item store's current state for an image in `dir` (created), and links
    /// the newest changeset's file there now, before retention could remove it. Call
    /// it where no commit can come between that changeset and this (under the engine's
    /// writer).
    pub fn image_source(&self, dir: &Path) -> Result<ImageSource> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let meta = {
            let cat = txn.open_table(CATALOG).map_err(db_err)?;
            let last = cat.last().map_err(db_err)?;
            match last {
                Some((_, v)) => ChangesetMeta::decode(v.value())?,
                None => return Err(Error::Internal("no changeset to make an image of".into())),
            }
        };
        fs::create_dir_all(dir)?;
        let link = dir.join(IMAGE_CHANGESET);
        let _ = fs::remove_file(&link);
        // (the log's files are never changed once listed: a link is a copy)
        if fs::hard_link(self.log_path(&meta.id), &link).is_err() {
            fs::copy(self.log_path(&meta.id), &link)?;
        }
        Ok(ImageSource { txn, meta })
    }
}

impl ImageSource {
    pub fn meta(&self) -> &ChangesetMeta {
        &self.meta
    }

    /// Writes the image's item store into `dir`, durably: the items in id order (one
    /// transaction, so leaves fill in order) and the catalog entry. Returns the number
    /// of items.
    pub fn write_items(self, dir: &Path) -> Result<u64> {
        let path = dir.join(IMAGE_ITEMS);
        let _ = fs::remove_file(&path);
        let db = redb::Builder::new()
            .set_cache_size(128 << 20)
            .create(&path)
            .map_err(db_err)?;
        let w = db.begin_write().map_err(db_err)?;
        let mut n = 0u64;
        {
            let items = self.txn.open_table(ITEMS).map_err(db_err)?;
            let mut out = w.open_table(ITEMS).map_err(db_err)?;
            for row in items.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                out.insert(k.value(), v.value()).map_err(db_err)?;
                n += 1;
            }
            let mut cat = w.open_table(CATALOG).map_err(db_err)?;
            cat.insert(self.meta.seq, self.meta.encode().as_slice())
                .map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        Ok(n)
    }
}

/// The changeset an image's item store lists (its only catalog entry), and its items.
/// (An image an older primary wrote, in redb's file format 2, is upgraded as a data dir's
/// item store is.)
pub fn image_meta(dir: &Path) -> Result<(ChangesetMeta, u64)> {
    let path = dir.join(IMAGE_ITEMS);
    if !path.is_file() {
        return Err(Error::Internal(format!(
            "no image item store at {}",
            path.display()
        )));
    }
    let db = crate::open_items(&path, 16 << 20)?;
    let r = db.begin_read().map_err(db_err)?;
    let cat = r.open_table(CATALOG).map_err(db_err)?;
    let mut entries = cat.iter().map_err(db_err)?;
    let meta = match (entries.next(), entries.next()) {
        (Some(row), None) => ChangesetMeta::decode(row.map_err(db_err)?.1.value())?,
        _ => {
            return Err(Error::Internal(
                "an image's catalog must list one changeset".into(),
            ))
        }
    };
    let items = r.open_table(ITEMS).map_err(db_err)?.len().map_err(db_err)?;
    Ok((meta, items))
}

/// Moves an image's files (in `image`, written and synced) into `data_dir`, where no item
/// store exists yet: the changeset's file into the log and the dimensions document
/// `dims` beside them, then the item store. The item
/// store's arrival is the install: a crash before it leaves a data dir without one,
/// which a follower bootstraps again, and whose stray changeset file `Store::open`
/// removes.
pub fn install_image(
    image: &Path,
    data_dir: &Path,
    meta: &ChangesetMeta,
    dims: &[u8],
) -> Result<()> {
    let items = data_dir.join(ITEMS_FILE);
    if items.exists() {
        return Err(Error::Internal(format!(
            "{} already holds an item store",
            data_dir.display()
        )));
    }
    let log_dir = data_dir.join(LOG_DIR);
    fs::create_dir_all(&log_dir)?;
    fs::rename(image.join(IMAGE_CHANGESET), log_file(&log_dir, &meta.id))?;
    sync_dir(&log_dir)?;
    write_atomic(&data_dir.join(DIMENSIONS_FILE), dims)?;
    fs::rename(image.join(IMAGE_ITEMS), items)?;
    sync_dir(data_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChangesetType;

    fn apply(s: &Store, ty: ChangesetType, doc: &str) {
        s.apply_changeset(ty, doc.as_bytes(), &mut |_| Ok(()))
            .unwrap();
    }

    fn set(id: &str, v: &str) -> String {
        format!("<set-item id='{id}'><properties><struct><entry name='v'><string>{v}</string></entry></struct></properties></set-item>")
    }

    fn items(s: &Store) -> Vec<(String, Vec<u8>)> {
        let mut all = Vec::new();
        s.scan_raw(7, |b| {
            all.extend(b);
            Ok(())
        })
        .unwrap();
        all
    }

    /// An image holds the items and the changeset as of its source, whatever commits
    /// after it (retention retiring that changeset included), and installed into an
    /// empty data dir it opens as a store listing that changeset alone, with its file,
    /// in the same state.
    #[test]
    fn an_image_installs_as_its_checkpoints_state() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 1, 8 << 20).unwrap();
        let many: String = (0..300).map(|i| set(&format!("i{i:03}"), "a")).collect();
        apply(
            &s,
            ChangesetType::Snapshot,
            &format!("<changeset>{many}</changeset>"),
        );
        apply(
            &s,
            ChangesetType::Delta,
            &format!(
                "<changeset>{}<remove-item id='i007'/></changeset>",
                set("x", "b")
            ),
        );
        let cp = s.checkpoint().unwrap();
        let want = items(&s);
        let dir = d.path().join("image");
        let source = s.image_source(&dir).unwrap();
        assert_eq!(source.meta(), &cp);
        // later commits, and a checkpoint whose retention retires `cp`
        apply(
            &s,
            ChangesetType::Delta,
            &format!(
                "<changeset>{}<remove-item id='i008'/></changeset>",
                set("y", "c")
            ),
        );
        s.checkpoint().unwrap();
        s.sync().unwrap();
        assert!(
            s.meta(&cp.id).unwrap().is_none(),
            "retention kept the checkpoint"
        );
        assert_eq!(source.write_items(&dir).unwrap(), 300);
        assert_eq!(image_meta(&dir).unwrap(), (cp.clone(), 300));

        let to = tempfile::tempdir().unwrap();
        install_image(&dir, to.path(), &cp, b"<dimensions/>").unwrap();
        let r = Store::open(to.path(), 1, 8 << 20).unwrap();
        assert_eq!(r.list(true).unwrap(), vec![cp.clone()]);
        assert_eq!(items(&r), want);
        assert_eq!(r.read_dimensions().unwrap().unwrap(), b"<dimensions/>");
        let mut body = String::new();
        std::io::Read::read_to_string(&mut r.open_changeset(&cp.id).unwrap().unwrap().1, &mut body)
            .unwrap();
        assert!(
            body.contains("id=\"x\""),
            "{}",
            &body[..body.len().min(200)]
        );
        // a store with items is never installed over
        assert!(install_image(&dir, to.path(), &cp, b"<dimensions/>").is_err());
    }
}
