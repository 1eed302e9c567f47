//! The in-memory index (SPEC §6, §7): per item, the values every dimension indexes,
//! held in copy-on-write chunks so that an apply builds the next immutable snapshot
//! while queries keep reading the current one.

mod admit;
mod bits;
mod candidates;
mod columns;
mod criteria;
mod doc;
mod eval;
mod exact;
mod facets;
mod fuzzy;
mod geo;
mod hits;
mod ids;
mod intern;
mod kernels;
mod keys;
mod narrow;
mod numbering;
pub mod persist;
pub mod postings;
mod query;
mod ranges;
mod ranked;
mod reach;
mod slots;
mod sort;
mod sorted;
pub mod terms;
mod text;
mod writer;

pub use criteria::Criterion;
pub use doc::{Doc, DocHead, DocId, DocValues};
pub use eval::{criteria_dims, evaluate, text_terms, Filter};
pub use facets::{compute_drill_down, compute_facets, DrillDown, FacetRequest};
pub use hits::{Hit, Matched, Results, Want};
pub use query::{parse_export, parse_query, Explain, ExportRequest, GroupBy, Highlighting, Query};
pub use sort::{sort_hits, SortKey};
pub use writer::{index_values, Builder, IndexWriter, Prepared};

use std::sync::{Arc, OnceLock};

use columns::{ChunkCols, SegmentCol};
use keys::KeyCol;
use numbering::{Numbering, Vocabularies};
use ranges::RangeTable;

/// Hash maps on the apply path (ids, terms, postings keys): hashbrown with its default
/// foldhash hasher, randomly seeded per process, several times cheaper per lookup than
/// SipHash.
pub(crate) type FastMap<K, V> = hashbrown::HashMap<K, V>;
use discern_dimensions::{Dimensions, IndexedValue, Slot, ValueRef};
use postings::Postings;
pub use postings::SpareSlot;
use rayon::prelude::*;
use roaring::RoaringBitmap;
use slots::Slots;
use terms::{TermDict, TermDicts};

/// Documents `Snapshot::observed_span` reads from a numeric dimension's extreme buckets
/// before it asks the chunks' columns instead.
const SPAN_DOCS: u64 = 4096;

/// Items per chunk: an apply copies only the chunks it touches — each copy bumps the
/// reference count of every document in it and drops the chunk's columns, which the
/// next request scanning that chunk builds again — while facet counting pays per chunk
/// (numeric facets add up a histogram per chunk counted whole). Measured at 1M (session
/// 20, DECISIONS): 256 made a 1,000-item delta ~15% cheaper and the first ranked or geo
/// request after one 3–4× faster, but the facets class 10–15% slower; 512 was in
/// between, and the benchmark's facets p50 went from 4.97 to 5.76 ms. Smaller chunks
/// wait for facet counting whose cost does not follow the chunk count.
const CHUNK: usize = 1024;

/// Docs are shared between snapshots: copying a chunk on write shares its slots' blocks
/// (`slots.rs`) and drops its columns, rebuilt on first use.
#[derive(Default)]
struct Chunk {
    docs: Slots,
    cols: OnceLock<ChunkCols>,
    /// The smallest `Doc::id_key` of the chunk (`u64::MAX` when empty), found on first
    /// use: a first page by id skips chunks by it without building their columns.
    min_id_key: OnceLock<u64>,
}

impl Clone for Chunk {
    fn clone(&self) -> Chunk {
        Chunk {
            docs: self.docs.clone(),
            cols: OnceLock::new(),
            min_id_key: OnceLock::new(),
        }
    }
}

impl Chunk {
    fn cols(&self, dims: &Dimensions) -> &ChunkCols {
        self.cols.get_or_init(|| ChunkCols::build(dims, &self.docs))
    }

    /// From the columns when they are built (after an apply, the background rebuilds
    /// those of every chunk it copied): walking the rows reads every document's id, a
    /// cache miss each — ~600 copied chunks cost the first request by id after a
    /// 1,000-item delta 30–60 ms.
    fn min_id_key(&self) -> u64 {
        *self.min_id_key.get_or_init(|| match self.cols.get() {
            Some(cols) => cols.min_id_key,
            None => {
                let keys = self.docs.iter().flatten().map(|d| d.id_key());
                keys.min().unwrap_or(u64::MAX)
            }
        })
    }
}

/// One chunk's columns to build again (`Snapshot::columns_to_rebuild`): from the
/// columns of the chunk it copied.
pub struct ColumnsToBuild {
    chunk: usize,
    /// The chunk copied, its columns built.
    old: Arc<Chunk>,
}

/// Folded postings (`Snapshot::fold_postings`): per dimension, the postings folded from
/// and the fold.
pub struct FoldedPostings(
    Vec<(
        usize,
        Arc<postings::DimPostings>,
        Arc<postings::DimPostings>,
    )>,
);

impl FoldedPostings {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An immutable view of the index. Cheap to clone (chunks are shared).
#[derive(Clone)]
pub struct Snapshot {
    pub dims: Arc<Dimensions>,
    chunks: Vec<Arc<Chunk>>,
    live: usize,
    /// Incremented by every commit.
    pub generation: u64,
    /// Did-you-mean dictionaries per dimension.
    terms: TermDicts,
    /// Per dimension, the documents holding each key.
    postings: Postings,
    /// Every live document number.
    live_docs: Arc<RoaringBitmap>,
    /// Per keyword and groupBy dimension, its keys' numbers (see `keys`).
    keys: Arc<[Option<Arc<Numbering>>]>,
    /// Per text dimension, its vocabulary: documents hold their tokens as its numbers
    /// (`IndexedValue::Terms`).
    vocab: Vocabularies,
    /// Per dimension, the smallest and largest numeric value its documents hold, found
    /// on first use (a request's default scale reads it: a pass over every chunk's
    /// columns, ~0.1 ms at 1M items, is too much to repeat per request).
    spans: Spans,
}

/// Per dimension, its values' smallest and largest once found (`None`: it holds none).
type Spans = Arc<[OnceLock<Option<(f64, f64)>>]>;

/// A span cache for `dims`, every dimension's span not yet found.
fn unknown_spans(dims: &Dimensions) -> Spans {
    dims.dims.iter().map(|_| OnceLock::new()).collect()
}

impl Snapshot {
    pub fn empty(dims: Arc<Dimensions>) -> Snapshot {
        Snapshot {
            keys: keys::numbers_for(&dims),
            vocab: numbering::vocabularies_for(&dims),
            spans: unknown_spans(&dims),
            terms: terms::empty_dicts(&dims, 0),
            postings: postings::empty(&dims),
            live_docs: Arc::default(),
            dims,
            chunks: Vec::new(),
            live: 0,
            generation: 0,
        }
    }

    /// The did-you-mean dictionary of dimension `di` (text and keyword dimensions).
    pub fn term_dict(&self, di: usize) -> Option<&TermDict> {
        self.terms.get(di)?.as_deref()
    }

    /// This snapshot with postings counted from its documents: the tests' measure of
    /// the postings an apply keeps.
    #[cfg(test)]
    pub(crate) fn with_built_postings(mut self) -> Snapshot {
        (self.postings, self.live_docs) = self.built_postings();
        self
    }

    fn built_postings(&self) -> (Postings, Arc<RoaringBitmap>) {
        let docs: Vec<(u32, &Doc)> = self
            .chunks
            .iter()
            .enumerate()
            .flat_map(|(c, chunk)| {
                chunk
                    .docs
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, d)| Some(((c * CHUNK + i) as u32, d.as_ref()?)))
            })
            .collect();
        let (postings, live) = postings::build(&self.dims, &self.vocab, &docs);
        (postings, Arc::new(live))
    }

    /// This snapshot with dictionaries counted from its documents.
    pub fn with_built_terms(mut self) -> Snapshot {
        self.terms = terms::build_dicts(&self);
        self
    }

    /// This snapshot with postings and dictionaries counted from its documents, the two
    /// side by side (each a pass over every document, and FSTs to build).
    pub fn with_built_postings_and_terms(mut self) -> Snapshot {
        let ((postings, live_docs), terms) =
            rayon::join(|| self.built_postings(), || terms::build_dicts(&self));
        (self.postings, self.live_docs, self.terms) = (postings, live_docs, terms);
        self
    }

    /// The largest overlay of any dictionary (the engine merges when it grows).
    pub fn terms_overlay_len(&self) -> usize {
        self.terms
            .iter()
            .flatten()
            .map(|d| d.overlay_len())
            .max()
            .unwrap_or(0)
    }

    /// The dictionaries whose overlay holds more than `over` terms, overlay folded in,
    /// each tagged with the tiers it started from (for `adopt_terms`); `None` for the
    /// others, which stay as they are.
    pub fn merge_terms(&self, over: usize) -> Vec<Option<(TermDict, (u64, u64))>> {
        self.terms
            .iter()
            .map(|d| {
                d.as_ref()
                    .filter(|d| d.overlay_len() > over)
                    .map(|d| (d.merged(self.generation), d.stamp()))
            })
            .collect()
    }

    /// This snapshot with the merged dictionaries installed where their base is still
    /// the one they were merged from; changes made since the merge stay in the overlay.
    pub fn adopt_terms(&self, merged: &[Option<(TermDict, (u64, u64))>]) -> Snapshot {
        let terms: Vec<Option<Arc<TermDict>>> = self
            .terms
            .iter()
            .enumerate()
            .map(|(i, cur)| {
                let cur = cur.as_ref()?;
                match merged.get(i).and_then(|m| m.as_ref()) {
                    Some((m, was)) => Some(
                        cur.adopt(m, *was)
                            .map(Arc::new)
                            .unwrap_or_else(|| cur.clone()),
                    ),
                    None => Some(cur.clone()),
                }
            })
            .collect();
        let mut s = self.clone();
        s.terms = Arc::new(terms);
        s
    }

    /// How many documents hold `key` in dimension `di`'s postings (a keyword's value).
    pub fn docs_with_key(&self, di: usize, key: &str) -> u64 {
        self.postings(di)
            .and_then(|p| p.get(key.as_bytes()))
            .map_or(0, |p| p.len())
    }

    /// Whether a frozen dimension's postings overlay is due to be merged into a new FST
    /// (`postings::frozen`; `fold_postings`).
    pub fn postings_to_fold(&self) -> bool {
        self.postings.iter().flatten().any(|p| p.fold_due())
    }

    /// The postings whose frozen overlay is due, folded: made off the apply path (a fold
    /// of an address's million keys takes most of a second), each with the postings it
    /// was made from, for `adopt_folded`.
    pub fn fold_postings(&self) -> FoldedPostings {
        let folded = (self.postings.iter().enumerate())
            .filter_map(|(di, p)| {
                let p = p.as_ref()?;
                Some((di, p.clone(), Arc::new(p.folded()?)))
            })
            .collect();
        FoldedPostings(folded)
    }

    /// This snapshot with the folds of `folded` whose dimension no apply changed since
    /// they were made (its postings are the ones they came from); `None` when there is
    /// none.
    pub fn adopt_folded(&self, folded: &FoldedPostings) -> Option<Snapshot> {
        let mut postings: Option<postings::DimsPostings> = None;
        for (di, from, to) in &folded.0 {
            let current = self.postings.get(*di).and_then(|p| p.as_ref());
            if current.is_some_and(|p| Arc::ptr_eq(p, from)) {
                let p = postings.get_or_insert_with(|| (*self.postings).clone());
                p[*di] = Some(to.clone());
            }
        }
        let mut s = self.clone();
        s.postings = Arc::new(postings?);
        Some(s)
    }

    /// Number of items indexed.
    pub fn len(&self) -> usize {
        self.live
    }
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The document with doc number `n`.
    pub fn doc(&self, n: u32) -> Option<&Doc> {
        self.chunks
            .get(n as usize / CHUNK)?
            .docs
            .get(n as usize % CHUNK)?
            .as_ref()
    }

    /// Document `n` as the rules read it: its row and its chunk's columns.
    pub(crate) fn item(&self, n: u32) -> Option<criteria::ItemRef<'_>> {
        let chunk = self.chunks.get(n as usize / CHUNK)?;
        let i = n as usize % CHUNK;
        let doc = chunk.docs.get(i)?.as_ref()?;
        Some(criteria::ItemRef {
            doc,
            n,
            cols: Some((chunk.cols(&self.dims), i)),
        })
    }

    /// The postings of dimension `di` (`None` only while they are not built).
    pub(crate) fn postings(&self, di: usize) -> Option<&postings::DimPostings> {
        self.postings.get(di)?.as_deref()
    }

    pub(crate) fn live_docs(&self) -> &RoaringBitmap {
        &self.live_docs
    }

    pub(crate) fn chunks(&self) -> &[Arc<Chunk>] {
        &self.chunks
    }

    /// The typed columns of chunk `c` (built on first use).
    pub(crate) fn chunk_cols(&self, c: usize) -> Option<&ChunkCols> {
        Some(self.chunks.get(c)?.cols(&self.dims))
    }

    /// The smallest and largest value of numeric dimension `dim` over every document
    /// (`None` when none holds one), once per snapshot: from the documents of its lowest
    /// and highest buckets, else from each chunk's column bounds.
    pub(crate) fn observed_span(&self, dim: usize) -> Option<(f64, f64)> {
        let cell = self.spans.get(dim)?;
        if let Some(&span) = cell.get() {
            return span;
        }
        // found outside the cell's initialisation: a parallel loop run inside it could
        // block other requests on it, or (were a pool thread to take on a task that
        // asks again) on itself; requests that race compute the same span
        let span = self
            .span_from_postings(dim, SPAN_DOCS)
            .unwrap_or_else(|| self.span_from_columns(dim));
        let _ = cell.set(span);
        span
    }

    /// `observed_span` from every chunk's column bounds: each chunk's columns are built
    /// if they are not (~0.4 ms a chunk: ~0.4 s of CPU at 1M items after a restart).
    fn span_from_columns(&self, dim: usize) -> Option<(f64, f64)> {
        let (lo, hi) = (0..self.chunks.len())
            .into_par_iter()
            .filter_map(|c| self.chunk_cols(c)?.span(dim))
            .reduce(
                || (f64::INFINITY, f64::NEG_INFINITY),
                |a, b| (a.0.min(b.0), a.1.max(b.1)),
            );
        (lo <= hi).then_some((lo, hi))
    }

    /// `observed_span` from the postings: the lowest value is in the lowest bucket
    /// holding a number (`numeric_key` keeps the values' order), so it is the least
    /// number of that bucket's documents; likewise the highest. `None` (ask the
    /// columns) when the buckets walked hold more than `budget` documents.
    fn span_from_postings(&self, dim: usize, budget: u64) -> Option<Option<(f64, f64)>> {
        let discern_dimensions::DimensionKind::Numeric(spec) = &self.dims.dims.get(dim)?.kind
        else {
            return None;
        };
        let whole = spec.whole_numbers();
        let post = self.postings(dim)?;
        let buckets = || post.map.iter().filter(|(k, _)| k.len() == 4);
        let lo = self.extreme_of(dim, whole, buckets(), f64::min, budget)?;
        let hi = self.extreme_of(dim, whole, buckets().rev(), f64::max, budget)?;
        Some(lo.zip(hi))
    }

    /// The least (`pick` = `f64::min`) or greatest number of numeric dimension `dim`,
    /// walking `buckets` from that end (`None`: more than `budget` documents to read;
    /// `Some(None)`: no number at all).
    fn extreme_of<'p>(
        &self,
        dim: usize,
        whole: bool,
        buckets: impl Iterator<Item = (&'p postings::Key, &'p postings::Posting)>,
        pick: fn(f64, f64) -> f64,
        mut budget: u64,
    ) -> Option<Option<f64>> {
        let mut found: Option<f64> = None;
        for (key, docs) in buckets {
            let docs = docs.get();
            // (None: the bucket of NaN and the infinities, whose documents may hold
            // their least number in another bucket)
            let extremes = exact::bucket_extremes(key);
            if let Some((a, b)) = extremes.filter(|_| whole) {
                // a bucket holding one whole number holds it in every document
                if a.ceil() == b.floor() {
                    let x = a.ceil() + 0.0;
                    return Some(Some(found.map_or(x, |f| pick(f, x))));
                }
            }
            budget = budget.checked_sub(docs.len())?;
            for d in docs.iter() {
                let value = self.doc(d)?.value(dim);
                columns::for_each_number(value.as_deref(), |x| {
                    if !x.is_nan() {
                        found = Some(found.map_or(x, |f| pick(f, x)));
                    }
                });
            }
            // every number beyond this bucket's was in the buckets walked
            if extremes.is_some() && found.is_some() {
                return Some(found);
            }
        }
        Some(found)
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

    /// The vocabulary of text dimension `di`.
    pub(crate) fn vocab(&self, di: usize) -> Option<&Numbering> {
        self.vocab.get(di)?.as_deref()
    }

    /// `values` (one per dimension, as extracted) as the index holds them: each text
    /// value's tokens as numbers of its dimension's vocabulary (`IndexedValue::Terms`),
    /// numbering the tokens met for the first time. Safe to run on many threads at
    /// once; `Builder::upsert_values` does it for values not yet numbered.
    pub fn number_text(&self, values: &mut DocValues) {
        writer::number_text(&self.vocab, values);
    }

    /// The values every dimension indexes for `record`, text already numbered (as
    /// `index_values` then `number_text` make them, in one pass), and the count of
    /// unreadable values. Safe to run on many threads at once.
    pub fn indexed_values(&self, record: &discern_model::Record) -> (DocValues, u64) {
        writer::index_values_numbered(&self.dims, &self.vocab, record)
    }

    /// Dimension `di`'s value of document `doc` as extraction gave it: a text value's
    /// numbers turned back into its tokens (for showing it, or sorting by it).
    pub fn shown_value(&self, doc: u32, di: usize) -> Option<ShownValue<'_>> {
        let v = self.doc(doc)?.value(di)?;
        Some(match (&*v, self.vocab(di)) {
            (IndexedValue::Terms(terms), Some(vocab)) => {
                ShownValue::Words(IndexedValue::Text(vocab.read().tokens(terms)))
            }
            _ => ShownValue::Row(v),
        })
    }

    /// The key numbers of keyword or groupBy dimension `di`.
    pub(crate) fn key_numbers(&self, di: usize) -> Option<&Numbering> {
        self.keys.get(di)?.as_deref()
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

    /// Every live document, in doc-number order.
    pub fn docs(&self) -> impl Iterator<Item = &Doc> {
        self.chunks.iter().flat_map(|c| c.docs.iter().flatten())
    }

    /// Rough bytes held by the index (for metrics): the documents from a sample
    /// (`rows_bytes_sampled`), so that a refresh at a million items costs milliseconds,
    /// not seconds.
    pub fn estimated_bytes(&self) -> usize {
        self.estimated_bytes_parts().total()
    }

    /// `estimated_bytes` part by part.
    pub fn estimated_bytes_parts(&self) -> IndexBytes {
        let Some(rows) = self.rows_bytes_sampled() else {
            return IndexBytes::default();
        };
        let slot_bytes = self.chunks.len() * CHUNK * std::mem::size_of::<Option<Doc>>();
        let vocab: usize = self.vocab.iter().flatten().map(|v| v.bytes()).sum();
        IndexBytes {
            documents: slot_bytes + vocab + rows,
            columns: (self.chunks.iter())
                .filter_map(|c| c.cols.get())
                .map(ChunkCols::bytes)
                .sum(),
            postings: self.postings.iter().flatten().map(|p| p.bytes()).sum(),
            dictionaries: self.terms.iter().flatten().map(|t| t.bytes()).sum(),
        }
    }

    /// The live documents' own bytes (`doc_bytes`), measured in up to 8,192 slots spread
    /// evenly over the index and scaled to all of them; `None` when the sample holds none.
    fn rows_bytes_sampled(&self) -> Option<usize> {
        const SAMPLE: usize = 8192;
        // every stride-th slot, reached by its number (stepping through the live
        // documents visited every slot on the way: ~1M at 1M items)
        let slots = self.chunks.len() * CHUNK;
        let stride = (slots / SAMPLE).max(1);
        let (mut sampled, mut bytes) = (0usize, 0usize);
        for n in (0..slots).step_by(stride) {
            if let Some(d) = doc_at(&self.chunks, n as u32) {
                sampled += 1;
                bytes += Self::doc_bytes(d);
            }
        }
        (sampled > 0).then(|| bytes / sampled * self.live)
    }

    fn doc_bytes(d: &Doc) -> usize {
        // the document's allocation (reference count, head, length, values) and its id's
        let total = 8
            + std::mem::size_of::<DocHead>()
            + 8
            + std::mem::size_of_val(d.slots())
            + 16
            + d.id.len();
        total
            + d.slots()
                .iter()
                .flatten()
                .map(Slot::heap_bytes_share)
                .sum::<usize>()
    }
}

/// A document's value as `Snapshot::shown_value` gives it: its row's, borrowed (no
/// count taken: requests sorting a million documents read one each, on every core), or
/// a text value's words.
#[derive(Debug)]
pub enum ShownValue<'a> {
    Row(ValueRef<'a>),
    Words(IndexedValue),
}

impl std::ops::Deref for ShownValue<'_> {
    type Target = IndexedValue;
    fn deref(&self) -> &IndexedValue {
        match self {
            ShownValue::Row(v) => v,
            ShownValue::Words(v) => v,
        }
    }
}

impl PartialEq for ShownValue<'_> {
    fn eq(&self, other: &ShownValue<'_>) -> bool {
        **self == **other
    }
}

/// The index's estimated bytes by part (`Snapshot::estimated_bytes_parts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexBytes {
    /// The documents' rows (with their lists) and the text vocabularies.
    pub documents: usize,
    /// The chunks' typed columns built so far.
    pub columns: usize,
    pub postings: usize,
    /// Did-you-mean term dictionaries.
    pub dictionaries: usize,
}

impl IndexBytes {
    pub fn total(&self) -> usize {
        self.documents + self.columns + self.postings + self.dictionaries
    }
}

/// Document `n` of `chunks`.
fn doc_at(chunks: &[Arc<Chunk>], n: u32) -> Option<&Doc> {
    let (c, i) = (n as usize / CHUNK, n as usize % CHUNK);
    let docs = &chunks.get(c)?.docs;
    (i < docs.len()).then(|| docs[i].as_ref())?
}

/// The id of document `n` of `chunks`.
fn doc_id(chunks: &[Arc<Chunk>], n: u32) -> Option<&str> {
    doc_at(chunks, n).map(|d| &*d.id)
}

/// Helpers shared by the tests of several modules.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use discern_dimensions::Dimensions;
    use discern_model::{Record, Value};

    /// One keyword dimension, `k`.
    pub(crate) fn keyword_dims() -> Arc<Dimensions> {
        let doc = b"<dimensions><dimension id='k' type='keyword'/></dimensions>";
        Arc::new(Dimensions::parse(doc).expect("a valid dimensions document"))
    }

    /// Sets `name` to `vals`: nothing when empty, one string, or an array of several (a
    /// record holds a property once).
    pub(crate) fn put_strings(r: &mut Record, name: &str, vals: Vec<String>) {
        match vals.len() {
            0 => {}
            1 => r.0.push((name.to_string(), Value::Str(vals[0].clone()))),
            _ => r.0.push((
                name.to_string(),
                Value::Array(vals.into_iter().map(Value::Str).collect()),
            )),
        }
    }

    /// The tests' allocator: the system's, counting the bytes each thread holds, so
    /// that a test can measure what a structure it builds costs (`thread_bytes`).
    pub(crate) struct Counting;

    std::thread_local! {
        static HELD: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
    }

    fn count(bytes: isize) {
        // (`try_with`: a thread's last frees may come after its locals are gone)
        let _ = HELD.try_with(|h| h.set(h.get() + bytes));
    }

    // SAFETY: every method forwards to `System` with the caller's arguments unchanged,
    // so `System`'s guarantees hold; counting touches only a thread-local `Cell`, whose
    // constant initialiser allocates nothing.
    unsafe impl std::alloc::GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
            count(layout.size() as isize);
            // SAFETY: forwarded contract.
            unsafe { std::alloc::System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
            count(-(layout.size() as isize));
            // SAFETY: forwarded contract (`ptr` came from `System` with `layout`).
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOC: Counting = Counting;

    /// Bytes allocated and not freed by this thread so far.
    pub(crate) fn thread_bytes() -> isize {
        HELD.with(|h| h.get())
    }
}

#[cfg(test)]
mod tests;
