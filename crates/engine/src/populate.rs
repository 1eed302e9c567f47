//! The index made whole from the item store: at start-up (the saved index caught up,
//! an image's, or a rebuild) and when the dimensions change, and what is built before
//! such an index is first read.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use discern_dimensions::Dimensions;
use discern_index::{DocValues, IndexWriter, Snapshot};
use discern_model::{Error, Result};
use rayon::prelude::*;

use crate::{process, saved, Engine, Populated, WriterGuard};

/// Builds what the first requests on `snap` — an index built or loaded whole, not yet
/// read — would otherwise build on their way, on every core (~0.3 s at 1M items, nothing
/// else running): every text field's length unions (a text request's first step on a
/// field) and every chunk's columns (the first ranking request after a restart built
/// ~1,000, 0.2–0.3 s). A load balancer then sends requests to an engine that answers at
/// full speed, and a dimensions change swaps in an index as fast as the one it replaces.
fn build_before_reading(snap: &Snapshot) {
    let started = std::time::Instant::now();
    snap.build_length_unions(&snap.length_unions_missing());
    (0..snap.chunk_count()).into_par_iter().for_each(|c| {
        snap.build_chunk_columns(c);
    });
    tracing::debug!(
        chunks = snap.chunk_count(),
        us = started.elapsed().as_micros() as u64,
        "columns built before the index is read"
    );
}

impl Engine {
    /// Makes the index of the item store with the current dimensions — the saved index
    /// (`saved.rs`), caught up over the deltas applied since it was saved, else built
    /// from the item store — and makes the engine queryable. Holds the writer, so no
    /// apply interleaves.
    pub fn populate(&self, guard: &mut WriterGuard) -> Result<Populated> {
        let doc = self.dims_doc.load_full();
        if let Some(p) = self.preloaded.lock().take() {
            if p.header == self.saved_header(&doc)? {
                guard.index = p.writer;
                // no index file yet: the next background save writes one
                self.saving.started_with(None);
                self.saving.rebuilt();
                self.item_errors
                    .store(guard.index.errors, Ordering::Relaxed);
                build_before_reading(&p.snap);
                self.snapshot.store(Arc::new(p.snap));
                process::release_free_memory();
                self.feed.from_image.store(true, Ordering::Relaxed);
                self.queryable.store(true, Ordering::Release);
                self.refresh_gauges();
                return Ok(Populated::FromImage);
            }
            tracing::warn!("the image's index is not of the installed item store: rebuilding it");
        }
        let dims = Arc::new(Dimensions::parse(&doc).map_err(Error::internal)?);
        let how = match self.load_saved_index(&dims, &doc) {
            Some(saved::Saved {
                snap,
                writer,
                since,
                header,
            }) => {
                guard.index = writer;
                self.saving.started_with(Some(header));
                let caught_up = if since.is_empty() {
                    Ok((snap, Populated::Loaded))
                } else {
                    let started = std::time::Instant::now();
                    let caught_up = self.catch_up(guard, &snap, &since);
                    // (a rebuild after a failed catch-up does not hold it meanwhile)
                    drop(snap);
                    caught_up.map(|(snap, items)| {
                        let how = Populated::CaughtUp {
                            changesets: since.len(),
                            items,
                        };
                        tracing::info!(
                            changesets = since.len(),
                            items,
                            ms = started.elapsed().as_millis() as u64,
                            "saved index caught up"
                        );
                        (snap, how)
                    })
                };
                match caught_up {
                    Ok((snap, how)) => {
                        self.item_errors
                            .store(guard.index.errors, Ordering::Relaxed);
                        build_before_reading(&snap);
                        // what the catch-up left in the did-you-mean overlays is
                        // folded in now, as after a burst of applies
                        let merge = snap.terms_overlay_len() > 0;
                        self.snapshot.store(Arc::new(snap));
                        process::release_free_memory();
                        if merge {
                            self.merge_terms_in_background(0);
                        }
                        for m in &since {
                            self.saving.applied(m.ty, m.length);
                        }
                        how
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not catch the saved index up: rebuilding");
                        self.rebuild(guard, dims)?;
                        self.saving.rebuilt();
                        Populated::Rebuilt
                    }
                }
            }
            None => {
                self.saving.started_with(None);
                self.rebuild(guard, dims)?;
                self.saving.rebuilt();
                Populated::Rebuilt
            }
        };
        self.queryable.store(true, Ordering::Release);
        self.refresh_gauges();
        Ok(how)
    }

    fn rebuild(&self, guard: &mut WriterGuard, dims: Arc<Dimensions>) -> Result<()> {
        let started = std::time::Instant::now();
        let mut writer = IndexWriter::new();
        let mut snap = Snapshot::empty(dims.clone());
        let publish_partial = !self.is_queryable() && self.config.queryable_while_replaying;
        if publish_partial {
            self.snapshot.store(Arc::new(snap.clone()));
        }
        self.store.scan_raw(16 * 1024, |batch| {
            let extracted: Vec<(discern_index::DocId, Result<(DocValues, u64)>)> = batch
                .into_par_iter()
                .map(|(id, raw)| {
                    let r = discern_model::decode_record(&raw)
                        .map_err(Error::internal)
                        .map(|rec| snap.indexed_values(&rec));
                    (id.as_str().into(), r)
                })
                .collect();
            let mut b = writer.begin_untracked(&snap);
            if !publish_partial {
                // counted once at the end: far cheaper than per batch
                b.skip_postings();
            }
            for (id, r) in extracted {
                let (values, errors) = r?;
                b.upsert_values(id, values, errors);
            }
            snap = b.commit();
            if publish_partial {
                self.snapshot.store(Arc::new(snap.clone()));
            }
            Ok(())
        })?;
        let scanned_ms = started.elapsed().as_millis() as u64;
        let snap = if publish_partial {
            snap.with_built_terms()
        } else {
            snap.with_built_postings_and_terms()
        };
        let bytes = snap.estimated_bytes_parts();
        tracing::info!(
            items = snap.len(),
            ms = started.elapsed().as_millis() as u64,
            scanned_ms,
            documents_mb = bytes.documents >> 20,
            postings_mb = bytes.postings >> 20,
            dictionaries_mb = bytes.dictionaries >> 20,
            "index built"
        );
        self.item_errors.store(writer.errors, Ordering::Relaxed);
        guard.index = writer;
        build_before_reading(&snap);
        self.snapshot.store(Arc::new(snap));
        process::release_free_memory();
        Ok(())
    }

    /// Validates and stores a new dimensions document. The caller then runs
    /// `reindex` with the same guard (in the background) to swap the new index in.
    pub fn set_dimensions(&self, _guard: &mut WriterGuard, doc: &[u8]) -> Result<Arc<Dimensions>> {
        let dims = Dimensions::parse(doc)
            .map_err(|e| Error::BadRequest(format!("invalid dimensions document: {e}")))?;
        self.store.write_dimensions(doc)?;
        self.dims_doc.store(Arc::new(doc.to_vec()));
        Ok(Arc::new(dims))
    }

    pub fn reindex(&self, guard: &mut WriterGuard, dims: Arc<Dimensions>) -> Result<()> {
        if self.indexing {
            self.rebuild(guard, dims)?;
            self.saving.rebuilt();
        }
        Ok(())
    }
}
