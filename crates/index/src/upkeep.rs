//! What a snapshot builds after it is made — by the first request that needs it, or
//! ahead of its readers by the engine's upkeep after an apply: each chunk's typed
//! columns (patched from the chunk an apply copied), their key and range-segment
//! columns, and the text fields' united length classes.

use std::sync::Arc;

use rayon::prelude::*;

use crate::columns::{ChunkCols, SegmentCol};
use crate::keys::{self, KeyCol};
use crate::ranges::RangeTable;
use crate::{Chunk, Snapshot, CHUNK};

/// One chunk's columns to build again (`Snapshot::columns_to_rebuild`): from the
/// columns of the chunk it copied.
pub struct ColumnsToBuild {
    pub(crate) chunk: usize,
    /// The chunk copied, its columns built.
    pub(crate) old: Arc<Chunk>,
}

impl Snapshot {
    /// The typed columns of chunk `c` (built on first use).
    pub(crate) fn chunk_cols(&self, c: usize) -> Option<&ChunkCols> {
        Some(self.chunks.get(c)?.cols(&self.dims))
    }

    /// The number of chunks (of `CHUNK` documents).
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// How many chunks have no columns built.
    pub fn chunks_without_columns(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| c.cols.get().is_none())
            .count()
    }

    /// Builds chunk `c`'s columns if it has none — what the first request scanning it
    /// would otherwise build on its way. Whether it built them.
    pub fn build_chunk_columns(&self, c: usize) -> bool {
        let missing = self.chunks.get(c).is_some_and(|ch| ch.cols.get().is_none());
        if missing {
            self.chunk_cols(c);
        }
        missing
    }

    /// The typed columns of chunk `c` if they are built.
    pub(crate) fn built_chunk_cols(&self, c: usize) -> Option<&ChunkCols> {
        self.chunks.get(c)?.cols.get()
    }

    /// The smallest `Doc::id_key` of chunk `c` (`u64::MAX` when it holds none).
    pub(crate) fn chunk_min_id_key(&self, c: usize) -> u64 {
        self.chunks.get(c).map_or(u64::MAX, |ch| ch.min_id_key())
    }

    /// Chunk `c`'s segments of numeric dimension `di`'s facet ranges (built on first use;
    /// `None` for another dimension, see `SegmentCol`).
    pub(crate) fn segment_col(&self, c: usize, di: usize) -> Option<&SegmentCol> {
        let discern_dimensions::DimensionKind::Numeric(spec) = &self.dims.dims.get(di)?.kind else {
            return None;
        };
        let cols = self.chunk_cols(c)?;
        let col = cols.col(di)?;
        cols.segments
            .get(di)?
            .get_or_init(|| {
                let table = RangeTable::of(spec);
                SegmentCol::build(col, &table).map(Arc::new)
            })
            .as_deref()
    }

    /// Chunk `c`'s key column of keyword or groupBy dimension `di` (built on first use).
    pub(crate) fn key_col(&self, c: usize, di: usize) -> Option<&KeyCol> {
        let numbers = self.key_numbers(di)?;
        let chunk = self.chunks.get(c)?;
        let col = chunk.cols(&self.dims).keys.get(di)?;
        Some(col.get_or_init(|| Arc::new(KeyCol::build(&chunk.docs, di, numbers))))
    }

    /// Builds from its postings the key columns of keyword or groupBy dimension `di`
    /// that the chunks `wanted` names lack, a block of chunks at a time (`keys::BLOCK`),
    /// in parallel — in the blocks that lack enough of them to pay; `key_col` builds the
    /// others from the rows. From the rows, a first facet over a million documents took
    /// 80–220 ms a dimension: a hash lookup of every document's every key, each row a
    /// cache miss. From the postings, a key is numbered once and its documents are
    /// read in order.
    pub(crate) fn build_key_cols(&self, di: usize, wanted: impl Fn(usize) -> bool) {
        // (a block's columns from the postings cost a lookup per key besides its
        // documents: not for a dimension of more keys than a block has documents, an
        // address, nor for a block missing few columns)
        const MIN_MISSING: usize = if cfg!(test) { 1 } else { 16 };
        let per_block = keys::BLOCK / CHUNK;
        let (Some(numbers), Some(p)) = (self.key_numbers(di), self.postings(di)) else {
            return;
        };
        if p.len() > keys::BLOCK {
            return;
        }
        let lacking = |c: usize| {
            wanted(c)
                && (self.chunks[c].cols.get())
                    .is_none_or(|cols| cols.keys.get(di).is_some_and(|k| k.get().is_none()))
        };
        // (one pass on this thread: once the columns are built, every request's check)
        let blocks: Vec<(usize, Vec<usize>)> = (0..self.chunks.len().div_ceil(per_block))
            .map(|b| {
                let chunks = b * per_block..((b + 1) * per_block).min(self.chunks.len());
                (b, chunks.filter(|&c| lacking(c)).collect::<Vec<_>>())
            })
            .filter(|(_, missing)| missing.len() >= MIN_MISSING)
            .collect();
        if blocks.is_empty() {
            return;
        }
        let Some(entries) = keys::numbered_postings(p, numbers) else {
            return;
        };
        // contiguous runs of blocks, one a thread: a run's walk seeks each key once
        let runs = blocks.len().div_ceil(rayon::current_num_threads().max(1));
        blocks.par_chunks(runs).for_each(|run| {
            let mut bufs = keys::BlockBufs::default();
            let mut walk = keys::KeyWalk::new(&entries, (run[0].0 * keys::BLOCK) as u32);
            for (b, missing) in run {
                let spans: Vec<(u32, usize)> = (missing.iter())
                    .map(|&c| ((c * CHUNK) as u32, self.chunks[c].docs.len()))
                    .collect();
                let base = (b * keys::BLOCK) as u32;
                let made = KeyCol::from_postings(&mut walk, base, &spans, &mut bufs);
                for (&c, col) in missing.iter().zip(made) {
                    let cols = self.chunks[c].cols(&self.dims);
                    if let Some(k) = cols.keys.get(di) {
                        let _ = k.set(Arc::new(col));
                    }
                }
            }
        });
    }

    /// The chunks whose columns `before` (the snapshot this one replaced) had built and
    /// this one has not — the chunks an apply copied, whose columns it dropped — each with
    /// the chunk it copied (see `build_columns`).
    pub fn columns_to_rebuild(&self, before: &Snapshot) -> Vec<ColumnsToBuild> {
        if !Arc::ptr_eq(&self.dims, &before.dims) {
            return Vec::new(); // other dimensions: other columns
        }
        self.chunks
            .iter()
            .zip(&before.chunks)
            .enumerate()
            .filter(|(_, (now, old))| {
                !Arc::ptr_eq(now, old) && now.cols.get().is_none() && old.cols.get().is_some()
            })
            .map(|(chunk, (_, old))| ColumnsToBuild {
                chunk,
                old: old.clone(),
            })
            .collect()
    }

    /// The text fields, as (dimension, field), whose length classes are not united yet:
    /// every one of a text dimension whose postings an apply copied (a copy starts
    /// without them), or of an index built or loaded whole.
    pub fn length_unions_missing(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (di, d) in self.dims.dims.iter().enumerate() {
            let (discern_dimensions::DimensionKind::Text(spec), Some(p)) =
                (&d.kind, self.postings(di))
            else {
                continue;
            };
            let made = p.shorter.fields();
            out.extend(
                (0..spec.fields.len())
                    .filter(|f| !made.contains(f))
                    .map(|f| (di, f)),
            );
        }
        out
    }

    /// Unites the length classes of `fields` (`length_unions_missing`) ahead of the text
    /// requests that read them.
    pub fn build_length_unions(&self, fields: &[(usize, usize)]) {
        for &(di, field) in fields {
            if let Some(p) = self.postings(di) {
                p.shorter_than(field);
            }
        }
    }

    /// Builds the columns `job` names, with the key and segment columns the chunk it
    /// copied had built, from that chunk's columns (for a request that would otherwise
    /// build them on its way: the engine does so in the background after an apply).
    /// When the job holds the copied chunk alone (the snapshot it was in is let go of),
    /// its columns are changed in place rather than copied.
    pub fn build_columns(&self, job: ColumnsToBuild) {
        let ColumnsToBuild { chunk: c, old } = job;
        let Some(chunk) = self.chunks.get(c) else {
            return;
        };
        if chunk.cols.get().is_some() || old.cols.get().is_none() {
            return; // (a request built them meanwhile, or there are none to patch)
        }
        let changed = chunk.docs.changed_since(&old.docs);
        let cols = match Arc::try_unwrap(old) {
            Ok(Chunk {
                docs: was,
                mut cols,
                ..
            }) => match cols.take() {
                Some(cols) => cols.patch(&self.dims, &was, &chunk.docs, &changed, &self.keys),
                None => return,
            },
            Err(old) => match old.cols.get() {
                Some(cols) => {
                    cols.clone()
                        .patch(&self.dims, &old.docs, &chunk.docs, &changed, &self.keys)
                }
                None => return,
            },
        };
        let _ = chunk.cols.set(cols);
    }
}
