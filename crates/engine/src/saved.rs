//! The index saved at shutdown (and in the background, `background_save.rs`) and loaded
//! at start-up instead of rebuilt from the item store (SPEC §16: restart to queryable
//! ≤ 5 s).
//!
//! The file (`index.saved` in the data dir) starts with the item store's state token
//! and the dimensions document it was built with. When deltas were applied after the
//! save (the engine then stopped without saving again: a crash, a kill), the index is
//! caught up: the items those changesets named are read from the item store and
//! indexed again, as an apply would. Any other state — other dimensions, another
//! format, a snapshot, full, bulk or reset since, changesets retention retired, more
//! than `CATCH_UP_AT_MOST` of them — makes it stale, and a stale or damaged file is
//! deleted and the index rebuilt. A crash never leaves a half-written file in its place
//! (temp file, fsync, rename).

use std::collections::BTreeSet;
use std::fs;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use discern_changeset::{read_changeset, ParseError};
use discern_dimensions::Dimensions;
use discern_index::persist::{self, Encode, LoadError};
use discern_index::{IndexWriter, Snapshot};
use discern_model::{Error, Result};
use discern_store::{ChangesetMeta, ChangesetType, ItemChange};

use crate::{Engine, WriterGuard};

pub(crate) const FILE: &str = "index.saved";

/// The most changesets' bytes (uncompressed) a saved index is caught up over: reading
/// them and indexing the items they name again must cost less than a rebuild (~30–40 s
/// at 1M items; the parser reads ~180 MB/s, and each named item is read and indexed).
pub(crate) const CATCH_UP_AT_MOST: u64 = 256 << 20;

/// Items read from the store and indexed again per step of a catch-up.
const CATCH_UP_BATCH: usize = 4096;

/// How `Engine::populate` made the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Populated {
    /// The saved index, current.
    Loaded,
    /// The saved index, with the items the `changesets` applied since it was saved
    /// named (`items` of them) indexed again.
    CaughtUp { changesets: usize, items: usize },
    /// Built from the item store.
    Rebuilt,
    /// A follower's, loaded from its primary's bootstrap image (`image.rs`).
    FromImage,
}

/// A saved index as loaded, and the deltas applied since it was saved (oldest first).
pub(crate) struct Saved {
    pub(crate) snap: Snapshot,
    pub(crate) writer: IndexWriter,
    pub(crate) since: Vec<ChangesetMeta>,
    /// The file's header (the state it was saved in).
    pub(crate) header: Vec<u8>,
}

impl Engine {
    pub(crate) fn saved_path(&self) -> PathBuf {
        self.store.dir().join(FILE)
    }

    /// What the saved index must have been built from: the item store's state and the
    /// dimensions document, byte for byte.
    pub(crate) fn saved_header(&self, dims_doc: &[u8]) -> Result<Vec<u8>> {
        let mut h = self.store.state_token()?.into_bytes();
        h.push(b'\n');
        h.extend_from_slice(dims_doc);
        Ok(h)
    }

    /// Writes the current index to the data dir (at shutdown), unless the file there
    /// already holds it. Holds the writer, so the snapshot is the store's state; a
    /// background save under way is stopped. Skipped while the index is still being
    /// built.
    pub fn save_index(&self, guard: &mut WriterGuard) -> Result<()> {
        if !self.indexing || !self.queryable.load(Ordering::Acquire) {
            return Ok(());
        }
        let header = self.saved_header(&self.dims_doc.load())?;
        if self.saving.file_holds(&header) {
            return Ok(());
        }
        self.saving.cancel_background();
        let snap = self.snapshot.load_full();
        let counts = guard.index.counts();
        let taken = self.saving.take_unsaved();
        let written = self.saving.write(
            &self.saved_path(),
            snap,
            &counts,
            header,
            Encode::Parallel,
            || true,
        );
        match written {
            Ok(written) => {
                tracing::info!(mb = written.bytes >> 20, ms = written.ms, "index saved");
                Ok(())
            }
            Err(e) => {
                self.saving.put_back(taken);
                Err(e)
            }
        }
    }

    /// The saved index, if there is one built with `dims` from the store's current state
    /// or one that deltas alone changed since (`Saved::since`); a stale or damaged file
    /// is deleted.
    pub(crate) fn load_saved_index(
        &self,
        dims: &Arc<Dimensions>,
        dims_doc: &[u8],
    ) -> Option<Saved> {
        let path = self.saved_path();
        crate::background_save::remove_unfinished(&path);
        let file = fs::File::open(&path).ok()?;
        let started = std::time::Instant::now();
        let mut since = None;
        let mut accepted = Vec::new();
        // the catalog could not be read: the file may well be current, so it is kept
        let mut unreadable = None;
        let loaded = (|| -> std::result::Result<_, LoadError> {
            let len = file.metadata()?.len();
            let accept = |header: &[u8]| {
                let Some(nl) = header.iter().position(|&b| b == b'\n') else {
                    return false;
                };
                let (token, doc) = (&header[..nl], &header[nl + 1..]);
                let Ok(token) = std::str::from_utf8(token) else {
                    return false;
                };
                if doc != dims_doc {
                    return false;
                }
                match self.deltas_since(token, CATCH_UP_AT_MOST) {
                    Ok(found) => since = found,
                    Err(e) => unreadable = Some(e),
                }
                accepted = header.to_vec();
                since.is_some()
            };
            persist::load_if(
                dims.clone(),
                accept,
                BufReader::with_capacity(1 << 20, file),
                len,
            )
        })();
        let loaded = match (loaded, unreadable) {
            (Err(LoadError::Stale), Some(e)) => {
                Err(LoadError::Io(std::io::Error::other(e.to_string())))
            }
            (loaded, _) => loaded,
        };
        let loaded = loaded.map(|(snap, writer)| Saved {
            snap,
            writer,
            since: since.unwrap_or_default(),
            header: accepted,
        });
        match loaded {
            Ok(found) => {
                let bytes = found.snap.estimated_bytes_parts();
                tracing::info!(
                    items = found.snap.len(),
                    changesets_since = found.since.len(),
                    ms = started.elapsed().as_millis() as u64,
                    documents_mb = bytes.documents >> 20,
                    postings_mb = bytes.postings >> 20,
                    dictionaries_mb = bytes.dictionaries >> 20,
                    "saved index loaded"
                );
                Some(found)
            }
            Err(LoadError::Stale) => {
                tracing::info!("saved index is stale: rebuilding");
                let _ = fs::remove_file(&path);
                None
            }
            Err(LoadError::Corrupt(c)) => {
                tracing::warn!(error = %c, "saved index is damaged: rebuilding");
                let _ = fs::remove_file(&path);
                None
            }
            Err(LoadError::Io(e)) => {
                tracing::warn!(error = %e, "saved index unreadable: rebuilding");
                None
            }
        }
    }

    /// The deltas listed after the state `token` names, when a saved index of that state
    /// can be caught up over them: every changeset since still listed, none but deltas
    /// (and checkpoints, which change no item), at most `at_most` bytes of them.
    fn deltas_since(&self, token: &str, at_most: u64) -> Result<Option<Vec<ChangesetMeta>>> {
        let Some(since) = self.store.listed_since(token)? else {
            return Ok(None);
        };
        let mut bytes = 0;
        for m in &since {
            match m.ty {
                ChangesetType::Delta => bytes += m.length,
                ChangesetType::Checkpoint => {}
                _ => return Ok(None),
            }
        }
        let deltas = since.into_iter().filter(|m| m.ty == ChangesetType::Delta);
        Ok((bytes <= at_most).then(|| deltas.collect()))
    }

    /// `base` (a saved index) with every item the changesets `since` named indexed again
    /// from the item store as it is now (a missing one removed): the index of the
    /// store's state, since a delta changes only the items it names. Returns it and the
    /// number of items named.
    pub(crate) fn catch_up(
        &self,
        guard: &mut WriterGuard,
        base: &Snapshot,
        since: &[ChangesetMeta],
    ) -> Result<(Snapshot, usize)> {
        let mut named = BTreeSet::new();
        for m in since {
            let Some((_, body)) = self.store.open_changeset(&m.id)? else {
                return Err(Error::Internal(format!("changeset {} is not stored", m.id)));
            };
            read_changeset(BufReader::with_capacity(256 << 10, body), |a| {
                if !named.contains(a.id()) {
                    named.insert(a.id().to_string());
                }
                Ok::<(), ParseError>(())
            })
            .map_err(|e| Error::Internal(format!("stored changeset {}: {e}", m.id)))?;
        }
        let named: Vec<String> = named.into_iter().collect();
        let mut b = guard.index.begin(base);
        for ids in named.chunks(CATCH_UP_BATCH) {
            let changes = (ids.iter().cloned())
                .zip(self.items(ids)?)
                .map(|(id, record)| match record {
                    Some(record) => ItemChange::Upsert(id, record),
                    None => ItemChange::Delete(id),
                })
                .collect();
            crate::apply::build(&mut b, crate::apply::extract_batch(base, changes));
        }
        Ok((b.commit(), named.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{apply, populated, wait_until};
    use crate::{query_response, Populated};

    const DIMS: &[u8] = b"<dimensions><dimension id='n' type='integer'/>\
        <dimension id='t' type='text'/><dimension id='k' type='keyword'/></dimensions>";

    fn item(i: usize, words: &str, k: &str) -> String {
        format!(
            "<set-item id='i{i}'><properties><struct><entry name='n'><int>{i}</int></entry>\
             <entry name='t'><string>{words}</string></entry>\
             <entry name='k'><string>{k}</string></entry></struct></properties></set-item>"
        )
    }

    /// What the index answers: ids, exactness and relevance of a text, a keyword and a
    /// numeric request's results, and the keyword's facet counts.
    fn answers(e: &Engine) -> Vec<String> {
        let asks = [
            serde_json::json!({"criteria": [{"dimension": "t", "value": "amber blue"}], "pageSize": 200}),
            serde_json::json!({"criteria": [{"dimension": "k", "value": "red"}], "pageSize": 200,
                "facets": {"k": {}}}),
            serde_json::json!({"criteria": [{"dimension": "n", "min": 10, "max": 30, "cull": true}],
                "pageSize": 200}),
        ];
        asks.iter()
            .map(|body| query_response(e, body).unwrap().to_text())
            .collect()
    }

    /// A saved index that deltas were applied after (the engine then stopped without
    /// saving: a kill, a crash) is caught up over them, and answers as an index rebuilt
    /// from the item store does; a checkpoint since changes nothing; a changeset since that
    /// cannot be read back, or a snapshot since, rebuilds it.
    #[test]
    fn a_saved_index_is_caught_up_over_later_deltas() {
        let d = tempfile::tempdir().unwrap();
        // a save a crash cut short left its temp file: start-up deletes it
        let unfinished = d.path().join("index.tmp");
        fs::write(&unfinished, b"half a file").unwrap();
        let e = populated(d.path(), DIMS);
        assert!(!unfinished.exists());
        let first: String = (0..60)
            .map(|i| {
                item(
                    i,
                    ["amber", "blue sky", "amber blue"][i % 3],
                    ["red", "green"][i % 2],
                )
            })
            .collect();
        apply(&e, &format!("<changeset>{first}</changeset>"));
        let mut g = e.lock_writer_blocking();
        e.save_index(&mut g).unwrap();
        assert_eq!(e.populate(&mut g).unwrap(), Populated::Loaded);
        let unsaved = |e: &Engine| {
            let f = e.saving.figures();
            (f.unsaved_delta_bytes, f.unsaved_rebuild)
        };
        assert_eq!(unsaved(&e), (0, false));
        drop(g);
        // after the save: items set again, added to, emptied of a value, removed, new
        apply(
            &e,
            &format!(
                "<changeset>{}{}<add-to-item id='i4'><properties><struct><entry name='t'>\
                 <string>blue</string></entry></struct></properties></add-to-item>\
                 <remove-from-item id='i6'><properties><struct><entry name='k'>\
                 <string>red</string></entry></struct></properties></remove-from-item>\
                 <remove-item id='i8'/></changeset>",
                item(2, "cobalt blue", "red"),
                item(70, "amber amber", "violet"),
            ),
        );
        let mut g = e.lock_writer_blocking();
        e.checkpoint(&mut g).unwrap();
        drop(g);
        apply(
            &e,
            &format!(
                "<changeset>{}<remove-item id='i9'/></changeset>",
                item(4, "amber", "red")
            ),
        );
        let mut g = e.lock_writer_blocking();
        let how = e.populate(&mut g).unwrap();
        assert_eq!(
            how,
            Populated::CaughtUp {
                changesets: 2,
                // i2, i70, i4, i6, i8, then i4 again and i9
                items: 6
            }
        );
        // what a crash now would redo: the two deltas caught up over
        let deltas: u64 = (e.store().list(true).unwrap().iter())
            .filter(|m| m.ty == ChangesetType::Delta)
            .rev()
            .take(2)
            .map(|m| m.length)
            .sum();
        assert_eq!(unsaved(&e), (deltas, false));
        let caught_up = answers(&e);
        assert!(caught_up[0].contains("\"i70\"") && !caught_up[0].contains("\"i8\""));
        let doc = e.dimensions_doc();
        let dims = e.set_dimensions(&mut g, &doc).unwrap();
        e.reindex(&mut g, dims).unwrap();
        assert_eq!(answers(&e), caught_up);
        // a changeset since the save that cannot be read back: rebuilt, the same answers
        let last = e.store().list(true).unwrap().pop().unwrap();
        let file = d
            .path()
            .join("changesets")
            .join(format!("{}.xml.zst", last.id));
        assert!(file.exists());
        fs::write(&file, b"not zstd").unwrap();
        assert_eq!(e.populate(&mut g).unwrap(), Populated::Rebuilt);
        assert_eq!(answers(&e), caught_up);
        assert_eq!(unsaved(&e), (0, true));
        // a snapshot since the save: rebuilt (the file is stale, and deleted)
        drop(g);
        let mut g = e.lock_writer_blocking();
        e.apply(
            &mut g,
            ChangesetType::Snapshot,
            format!("<changeset>{}</changeset>", item(1, "amber", "red")).as_bytes(),
        )
        .unwrap();
        assert_eq!(e.populate(&mut g).unwrap(), Populated::Rebuilt);
        assert!(!e.saved_path().exists());
    }

    /// A start-up that catches a saved index up over later deltas folds the did-you-mean
    /// overlay the catch-up leaves (no apply follows it to fold it once applies pause).
    #[test]
    fn a_catch_up_folds_the_overlay_it_leaves() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(d.path(), DIMS);
        let first: String = (0..10).map(|i| item(i, "amber", "red")).collect();
        apply(&e, &format!("<changeset>{first}</changeset>"));
        let mut g = e.lock_writer_blocking();
        e.save_index(&mut g).unwrap();
        drop(g);
        apply(
            &e,
            &format!(
                "<changeset>{}</changeset>",
                item(20, "zircon quartz", "teal")
            ),
        );
        // (the apply's own fold, once applies pause: done before the catch-up)
        wait_until("the apply's overlay was not folded", || {
            e.snapshot().terms_overlay_len() == 0
        });
        let mut g = e.lock_writer_blocking();
        assert!(matches!(
            e.populate(&mut g).unwrap(),
            Populated::CaughtUp { changesets: 1, .. }
        ));
        // (a fold is installed under the writer lock: none can have been yet)
        assert!(e.snapshot().terms_overlay_len() > 0);
        drop(g);
        wait_until("the catch-up's overlay was not folded", || {
            e.snapshot().terms_overlay_len() == 0
        });
        let snap = e.snapshot();
        let words = snap.term_dict(1).unwrap();
        assert_eq!(
            words.within("zircon", 0, false),
            [("zircon".to_string(), 0, 1)]
        );
    }

    /// A saved index is caught up over at most so many bytes of deltas: more, and it is
    /// rebuilt instead.
    #[test]
    fn deltas_past_the_limit_are_not_caught_up_over() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(d.path(), DIMS);
        let token = e.store().state_token().unwrap();
        apply(
            &e,
            &format!("<changeset>{}</changeset>", item(1, "amber", "red")),
        );
        apply(
            &e,
            &format!("<changeset>{}</changeset>", item(2, "blue", "green")),
        );
        let listed = e.store().list(true).unwrap();
        let bytes: u64 = listed.iter().map(|m| m.length).sum();
        let ids = |found: Option<Vec<ChangesetMeta>>| {
            found.map(|v| v.into_iter().map(|m| m.id).collect::<Vec<_>>())
        };
        let all: Vec<String> = listed.iter().map(|m| m.id.clone()).collect();
        assert_eq!(ids(e.deltas_since(&token, bytes).unwrap()), Some(all));
        assert_eq!(ids(e.deltas_since(&token, bytes - 1).unwrap()), None);
    }
}
