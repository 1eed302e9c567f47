//! The index saved at shutdown and loaded at start-up instead of rebuilt from the item
//! store (SPEC §16: restart to queryable ≤ 5 s).
//!
//! The file (`index.saved` in the data dir) starts with the item store's state token
//! and the dimensions document it was built with; any other state — an apply after the
//! save, other dimensions, another format — makes it stale, and a stale or damaged file
//! is deleted and the index rebuilt. A crash never leaves a half-written file in its
//! place (temp file, fsync, rename).

use std::fs;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use discern_dimensions::Dimensions;
use discern_index::persist::{self, LoadError};
use discern_index::{IndexWriter, Snapshot};
use discern_model::Result;

use crate::{Engine, WriterGuard};

const FILE: &str = "index.saved";

impl Engine {
    fn saved_path(&self) -> PathBuf {
        self.store.dir().join(FILE)
    }

    /// What the saved index must have been built from: the item store's state and the
    /// dimensions document, byte for byte.
    fn saved_header(&self, dims_doc: &[u8]) -> Result<Vec<u8>> {
        let mut h = self.store.state_token()?.into_bytes();
        h.push(b'\n');
        h.extend_from_slice(dims_doc);
        Ok(h)
    }

    /// Writes the current index to the data dir (at shutdown). Skipped while the index
    /// is still being built. Holds the writer, so the snapshot is the store's state.
    pub fn save_index(&self, guard: &mut WriterGuard) -> Result<()> {
        if !self.indexing || !self.queryable.load(Ordering::Acquire) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let snap = self.snapshot.load_full();
        let header = self.saved_header(&self.dims_doc.load())?;
        let path = self.saved_path();
        // a start that loaded the file and applied nothing since has nothing to write
        if let Ok(f) = fs::File::open(&path) {
            let len = f.metadata()?.len();
            if persist::has_header(BufReader::new(f), &header, len) {
                return Ok(());
            }
        }
        let tmp = path.with_extension("tmp");
        let written = (|| -> Result<u64> {
            let file = fs::File::create(&tmp)?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            persist::save(&snap, &guard.index, &header, &mut w)?;
            w.flush()?;
            let file = w.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            let len = file.metadata()?.len();
            fs::rename(&tmp, &path)?;
            fs::File::open(self.store.dir())?.sync_all()?;
            Ok(len)
        })();
        match written {
            Ok(len) => {
                tracing::info!(
                    mb = len >> 20,
                    ms = started.elapsed().as_millis() as u64,
                    "index saved"
                );
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// The saved index, if there is one built from the store's current state with
    /// `dims`; a stale or damaged file is deleted.
    pub(crate) fn load_saved_index(
        &self,
        dims: &Arc<Dimensions>,
        dims_doc: &[u8],
    ) -> Option<(Snapshot, IndexWriter)> {
        let path = self.saved_path();
        let file = fs::File::open(&path).ok()?;
        let started = std::time::Instant::now();
        let loaded = (|| -> std::result::Result<_, LoadError> {
            let header = self
                .saved_header(dims_doc)
                .map_err(|e| LoadError::Io(std::io::Error::other(e.to_string())))?;
            let len = file.metadata()?.len();
            persist::load(
                dims.clone(),
                &header,
                BufReader::with_capacity(1 << 20, file),
                len,
            )
        })();
        match loaded {
            Ok(found) => {
                let bytes = found.0.estimated_bytes_parts();
                tracing::info!(
                    items = found.0.len(),
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
}
