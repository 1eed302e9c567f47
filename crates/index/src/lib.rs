//! The in-memory index (SPEC §6, §7): per item, the values every dimension indexes,
//! held in copy-on-write chunks so that an apply builds the next immutable snapshot
//! while queries keep reading the current one.

mod bits;
mod candidates;
mod columns;
mod criteria;
mod eval;
mod exact;
mod facets;
mod fuzzy;
mod geo;
mod ids;
mod intern;
mod kernels;
mod keys;
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

pub use criteria::Criterion;
pub use eval::{criteria_dims, evaluate, text_terms, Filter, Hit, Matched, Results, Want};
pub use facets::{compute_drill_down, compute_facets, DrillDown, FacetRequest};
pub use query::{parse_export, parse_query, Explain, ExportRequest, GroupBy, Highlighting, Query};
pub use sort::{sort_hits, SortKey};

use std::sync::{Arc, OnceLock};

use columns::{ChunkCols, SegmentCol};
use keys::KeyCol;
use numbering::{Numbering, Vocabularies};
use ranges::RangeTable;

/// Hash maps on the apply path (ids, terms, postings keys): hashbrown with its default
/// foldhash hasher, randomly seeded per process, several times cheaper per lookup than
/// SipHash.
pub(crate) type FastMap<K, V> = hashbrown::HashMap<K, V>;
use discern_dimensions::{extract, Dimensions, IndexedValue, Slot, ValueRef};
use discern_model::Record;
pub use postings::SpareSlot;
use postings::{Postings, PostingsDelta};
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

/// A document of the index: its id and one indexed value per dimension, each in one
/// word (`Slot`), in one allocation behind a one-word pointer (a clone costs a
/// reference count). Reads as its `DocHead` (`doc.id`, `doc.id_key()`); `value` and
/// `values` give the values.
#[derive(Clone)]
pub struct Doc(triomphe::ThinArc<DocHead, Option<Slot>>);

/// What a document holds beside its values: its id, behind a one-word pointer (with
/// 21 dimensions, the document's allocation is then 192 bytes, not 224).
pub struct DocHead {
    pub id: DocId,
}

impl DocHead {
    /// `eval::id_key(id)` (the columns keep it for ordering ties: `ChunkCols::id_key`).
    #[inline]
    pub fn id_key(&self) -> u64 {
        eval::id_key(&self.id)
    }
}

/// A document's id: shared, immutable, one word (its length lives in the allocation).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DocId(discern_dimensions::Many<u8>);

impl From<&str> for DocId {
    fn from(id: &str) -> DocId {
        DocId(id.as_bytes().into())
    }
}

impl std::ops::Deref for DocId {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        // SAFETY: a `DocId` is made only from a `str` (`From<&str>`), and its bytes are
        // never changed.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl std::fmt::Debug for DocId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl std::fmt::Display for DocId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Doc {
    /// Document `id` with `values`, one per dimension in document order.
    pub fn new(id: DocId, values: DocValues) -> Doc {
        Doc(triomphe::ThinArc::from_header_and_iter(
            DocHead { id },
            values.into_vec().into_iter().map(|v| v.map(Slot::from)),
        ))
    }

    /// The value of dimension `di` (`None`: none, or no such dimension).
    #[inline]
    pub fn value(&self, di: usize) -> Option<ValueRef<'_>> {
        self.0.slice.get(di)?.as_ref().map(Slot::get)
    }

    /// One entry per dimension, in document order; `None` = no indexed value.
    pub fn values(&self) -> impl ExactSizeIterator<Item = Option<ValueRef<'_>>> + '_ {
        self.0.slice.iter().map(|s| s.as_ref().map(Slot::get))
    }

    /// The values as the row holds them (for comparing rows).
    pub(crate) fn slots(&self) -> &[Option<Slot>] {
        &self.0.slice
    }

    /// Whether `a` and `b` are the same allocation (one document, shared).
    pub fn ptr_eq(a: &Doc, b: &Doc) -> bool {
        std::ptr::eq(&a.0.header, &b.0.header)
    }
}

impl std::ops::Deref for Doc {
    type Target = DocHead;
    #[inline]
    fn deref(&self) -> &DocHead {
        &self.0.header.header
    }
}

impl std::fmt::Debug for Doc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doc")
            .field("id", &self.id)
            .field("values", &self.slots())
            .finish()
    }
}

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

    /// This snapshot with postings counted from its documents (after a `Builder` that
    /// skipped them, see `Builder::skip_postings`).
    pub fn with_built_postings(mut self) -> Snapshot {
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
        self.postings = postings;
        self.live_docs = Arc::new(live);
        self
    }

    /// This snapshot with dictionaries counted from its documents.
    pub fn with_built_terms(mut self) -> Snapshot {
        self.terms = terms::build_dicts(&self);
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

    /// The dictionaries whose overlay outgrew `BACKGROUND_MERGE_TERMS`, overlay folded
    /// in, each tagged with the tiers it started from (for `adopt_terms`); `None` for
    /// the others, which stay as they are.
    pub fn merge_terms(&self) -> Vec<Option<(TermDict, (u64, u64))>> {
        self.terms
            .iter()
            .map(|d| {
                d.as_ref()
                    .filter(|d| d.overlay_len() > terms::BACKGROUND_MERGE_TERMS)
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
        number_text(&self.vocab, values);
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
    pub fn build_columns(&self, job: &ColumnsToBuild) {
        let (Some(chunk), Some(old)) = (self.chunks.get(job.chunk), job.old.cols.get()) else {
            return;
        };
        if chunk.cols.get().is_some() {
            return; // (a request built them meanwhile)
        }
        let changed = chunk.docs.changed_since(&job.old.docs);
        let _ = chunk.cols.set(old.patched(
            &self.dims,
            &job.old.docs,
            &chunk.docs,
            &changed,
            &self.keys,
        ));
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

/// `Snapshot::number_text` with the vocabularies `vocab`.
fn number_text(vocab: &Vocabularies, values: &mut DocValues) {
    for (v, vocab) in values.iter_mut().zip(vocab.iter()) {
        if let (Some(IndexedValue::Text(fields)), Some(vocab)) = (v.as_ref(), vocab) {
            *v = Some(IndexedValue::Terms(vocab.number_text(fields)));
        }
    }
}

/// One indexed value slot per dimension, in document order.
pub type DocValues = Box<[Option<IndexedValue>]>;

/// The values every dimension indexes for a record, and the count of unreadable values.
pub fn index_values(dims: &Dimensions, record: &Record) -> (DocValues, u64) {
    let mut errors = 0u64;
    let values = dims
        .dims
        .iter()
        .map(|d| {
            let ex = extract(d, record);
            errors += ex.errors as u64;
            // (on the extracting thread, not the writer's: see `boxed_for_slot`)
            ex.value.map(IndexedValue::boxed_for_slot)
        })
        .collect();
    (values, errors)
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

/// Writer-side state: id → doc number and free doc numbers. Owned by the single writer.
pub struct IndexWriter {
    by_id: ids::IdIndex,
    free: Vec<u32>,
    next: u32,
    /// Values that could not be indexed since start (`item.errors`).
    pub errors: u64,
    /// The previous snapshot's postings, for the next commit to update in place.
    spare: SpareSlot,
    /// The keyword values documents share.
    interner: intern::Interner,
}

enum Undo {
    Added {
        id: DocId,
        from_free: bool,
        doc: u32,
    },
    Removed {
        id: DocId,
        doc: u32,
    },
    Cleared {
        by_id: ids::IdIndex,
        free: Vec<u32>,
        next: u32,
    },
}

/// Builds the next snapshot from the current one. Dropping it without `commit`
/// (a rejected changeset) leaves the writer as it was.
pub struct Builder<'w> {
    writer: &'w mut IndexWriter,
    dims: Arc<Dimensions>,
    chunks: Vec<Arc<Chunk>>,
    live: usize,
    undo: Vec<Undo>,
    errors: u64,
    committed: bool,
    generation: u64,
    terms: TermDicts,
    /// Document-frequency changes per dimension (`None`: not tracked, see `begin_untracked`).
    term_deltas: Option<Vec<terms::TermDelta>>,
    postings: Postings,
    live_docs: Arc<RoaringBitmap>,
    keys: Arc<[Option<Arc<Numbering>>]>,
    vocab: Vocabularies,
    postings_delta: PostingsDelta,
    /// Off for a bulk rebuild that counts postings once at the end.
    track_postings: bool,
    cleared: bool,
}

impl IndexWriter {
    /// The spare postings the next commit updates in place (`SpareSlot::catch_up`).
    pub fn spare(&self) -> SpareSlot {
        self.spare.clone()
    }

    pub fn new() -> IndexWriter {
        IndexWriter {
            by_id: ids::IdIndex::default(),
            free: Vec::new(),
            next: 0,
            errors: 0,
            spare: SpareSlot::default(),
            interner: Default::default(),
        }
    }

    pub fn begin<'w>(&'w mut self, base: &Snapshot) -> Builder<'w> {
        let deltas = base.dims.dims.iter().map(|_| Default::default()).collect();
        let mut b = self.begin_untracked(base);
        b.term_deltas = Some(deltas);
        b
    }

    /// Like `begin`, without keeping the did-you-mean dictionaries current (a full
    /// rebuild counts them afterwards with `Snapshot::with_built_terms`).
    pub fn begin_untracked<'w>(&'w mut self, base: &Snapshot) -> Builder<'w> {
        Builder {
            dims: base.dims.clone(),
            chunks: base.chunks.clone(),
            live: base.live,
            writer: self,
            undo: Vec::new(),
            errors: 0,
            committed: false,
            generation: base.generation,
            terms: base.terms.clone(),
            term_deltas: None,
            postings: base.postings.clone(),
            live_docs: base.live_docs.clone(),
            keys: base.keys.clone(),
            vocab: base.vocab.clone(),
            postings_delta: PostingsDelta::new(&base.dims, base.vocab.clone()),
            track_postings: true,
            cleared: false,
        }
    }
}

impl Default for IndexWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl<'w> Builder<'w> {
    /// Stops keeping the postings current: the committed snapshot's postings are stale
    /// until `Snapshot::with_built_postings`, which must run before it answers queries.
    pub fn skip_postings(&mut self) {
        self.track_postings = false;
    }

    fn slot(&mut self, doc: u32) -> &mut Option<Doc> {
        let (c, i) = (doc as usize / CHUNK, doc as usize % CHUNK);
        while self.chunks.len() <= c {
            self.chunks.push(Arc::default());
        }
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        // a chunk this builder owns may carry columns of its old contents
        chunk.cols = OnceLock::new();
        chunk.min_id_key = OnceLock::new();
        chunk.docs.get_mut(i)
    }

    /// Indexes `record` as the current state of item `id`.
    pub fn upsert(&mut self, id: &str, record: &Record) {
        let (values, errors) = index_values(&self.dims, record);
        self.upsert_values(DocId::from(id), values, errors);
    }

    /// Like `upsert`, with values extracted beforehand (e.g. in parallel), and the id
    /// made there too: a new document keeps it. (Made on the writer's thread, each new
    /// id sat among the apply's short-lived allocations of its size, freed when the
    /// apply ends: see `IndexedValue::boxed_for_slot`.)
    pub fn upsert_values(&mut self, id: DocId, mut values: DocValues, errors: u64) {
        self.errors += errors;
        number_text(&self.vocab, &mut values);
        self.writer.interner.intern(&mut values);
        let known = self.doc_of(&id);
        let (doc, key) = match known.and_then(|n| Some((n, doc_at(&self.chunks, n)?.id.clone()))) {
            Some(found) => found,
            None => {
                let key = id;
                let (doc, from_free) = match self.writer.free.pop() {
                    Some(d) => (d, true),
                    None => {
                        self.writer.next += 1;
                        (self.writer.next - 1, false)
                    }
                };
                self.writer.by_id.insert(&key, doc);
                self.undo.push(Undo::Added {
                    id: key.clone(),
                    from_free,
                    doc,
                });
                self.live += 1;
                (doc, key)
            }
        };
        let new = Doc::new(key, values);
        let old = self.slot(doc).replace(new.clone());
        if self.track_postings {
            self.postings_delta.change(doc, old.as_ref(), Some(&new));
        }
        self.track_terms(old.as_ref(), Some(&new));
    }

    fn track_terms(&mut self, old: Option<&Doc>, new: Option<&Doc>) {
        let Some(deltas) = self.term_deltas.as_mut() else {
            return;
        };
        for (di, d) in self.dims.dims.iter().enumerate() {
            if !terms::has_terms(&d.kind) {
                continue;
            }
            let (old, new) = (old.and_then(|o| o.value(di)), new.and_then(|n| n.value(di)));
            let (old, new) = (old.as_deref(), new.as_deref());
            // (most updates leave most values as they were: comparing them is far
            // cheaper than sorting both term lists)
            if old == new {
                continue;
            }
            let vocab = self
                .vocab
                .get(di)
                .and_then(|v| v.as_deref())
                .map(|v| v.read());
            deltas[di].change(old, new, vocab.as_deref());
        }
    }

    /// The document number of item `id`, if it has one.
    fn doc_of(&self, id: &str) -> Option<u32> {
        self.writer.by_id.get(id, |n| doc_id(&self.chunks, n))
    }

    pub fn delete(&mut self, id: &str) {
        if let Some(doc) = self.doc_of(id) {
            self.writer.by_id.remove(id, doc);
            let old = self.slot(doc).take();
            let key = old
                .as_ref()
                .map_or_else(|| DocId::from(id), |d| d.id.clone());
            if self.track_postings {
                self.postings_delta.change(doc, old.as_ref(), None);
            }
            self.track_terms(old.as_ref(), None);
            self.writer.free.push(doc);
            self.live -= 1;
            self.undo.push(Undo::Removed { id: key, doc });
        }
    }

    pub fn clear(&mut self) {
        let by_id = std::mem::take(&mut self.writer.by_id);
        let free = std::mem::take(&mut self.writer.free);
        let next = std::mem::replace(&mut self.writer.next, 0);
        self.undo.push(Undo::Cleared { by_id, free, next });
        self.chunks.clear();
        self.live = 0;
        self.cleared = true;
        self.postings = postings::empty(&self.dims);
        self.live_docs = Arc::default();
        self.postings_delta.clear();
        if let Some(d) = self.term_deltas.as_mut() {
            d.iter_mut().for_each(terms::TermDelta::clear);
        }
    }

    /// The new snapshot, the changes made final.
    pub fn commit(self) -> Snapshot {
        self.prepare().keep()
    }

    /// The new snapshot, built while the apply may still fail (its store commit runs
    /// meanwhile): `Prepared::keep` makes the changes final, dropping it undoes them as
    /// dropping the builder does. Building it changes nothing a reader sees nor anything
    /// the next apply relies on: the spare postings it uses are the writer's own, and
    /// the next apply finds them one snapshot off and copies from its base instead.
    pub fn prepare(mut self) -> Prepared<'w> {
        let snapshot = self.build();
        Prepared {
            snapshot,
            builder: self,
        }
    }

    fn build(&mut self) -> Snapshot {
        let generation = self.generation + 1;
        let mut terms = self.terms.clone();
        if self.cleared {
            terms = terms::empty_dicts(&self.dims, generation);
        }
        if let Some(deltas) = self.term_deltas.take() {
            let mut next: Vec<Option<Arc<TermDict>>> = terms.iter().cloned().collect();
            for (di, d) in deltas.into_iter().enumerate() {
                let vocab = self.vocab.get(di).and_then(|v| v.as_deref());
                let d = d.into_terms(vocab.map(|v| v.read()).as_deref());
                if d.is_empty() {
                    continue;
                }
                let Some(cur) = next[di].as_ref() else {
                    continue;
                };
                let many = d.len() > terms::SYNC_MERGE_TERMS;
                let mut changed = cur.with_changes(d, generation);
                if many || changed.overlay_len() > terms::SYNC_MERGE_TERMS {
                    changed = changed.merged(generation);
                }
                next[di] = Some(Arc::new(changed));
            }
            terms = Arc::new(next);
        }
        let delta = std::mem::replace(
            &mut self.postings_delta,
            PostingsDelta::new(&self.dims, self.vocab.clone()),
        );
        let (postings, live_docs) = if self.track_postings {
            postings::commit(
                &self.writer.spare,
                &self.postings,
                &self.live_docs,
                delta.resolve(),
            )
        } else {
            // stale until `with_built_postings`, which makes new ones
            self.writer.spare.clear();
            (self.postings.clone(), self.live_docs.clone())
        };
        Snapshot {
            dims: self.dims.clone(),
            chunks: std::mem::take(&mut self.chunks),
            live: self.live,
            generation,
            terms,
            postings,
            live_docs,
            keys: self.keys.clone(),
            vocab: self.vocab.clone(),
            spans: unknown_spans(&self.dims),
        }
    }
}

/// A snapshot built by `Builder::prepare`, not yet final.
pub struct Prepared<'w> {
    snapshot: Snapshot,
    builder: Builder<'w>,
}

impl Prepared<'_> {
    /// The snapshot, the builder's changes to the writer made final.
    pub fn keep(mut self) -> Snapshot {
        let b = &mut self.builder;
        b.committed = true;
        b.writer.errors += b.errors;
        b.undo.clear();
        self.snapshot
    }
}

impl Drop for Builder<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Added { id, from_free, doc } => {
                    self.writer.by_id.remove(&id, doc);
                    if from_free {
                        self.writer.free.push(doc);
                    } else {
                        self.writer.next -= 1;
                    }
                }
                Undo::Removed { id, doc } => {
                    self.writer.free.pop();
                    self.writer.by_id.insert(&id, doc);
                }
                Undo::Cleared { by_id, free, next } => {
                    self.writer.by_id = by_id;
                    self.writer.free = free;
                    self.writer.next = next;
                }
            }
        }
    }
}

/// Helpers shared by the tests of several modules.
#[cfg(test)]
pub(crate) mod test_support {
    use discern_model::{Record, Value};

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
mod tests {
    use super::*;
    use discern_model::Value;

    fn dims() -> Arc<Dimensions> {
        Arc::new(
            Dimensions::parse(b"<dimensions><dimension id='k' type='keyword'/></dimensions>")
                .unwrap(),
        )
    }

    /// Extraction boxes a number a slot cannot hold in place (on the extracting thread:
    /// `IndexedValue::boxed_for_slot`), and the row reads it back as one number.
    #[test]
    fn extraction_boxes_numbers_for_their_slots() {
        let dims = Dimensions::parse(
            b"<dimensions><dimension id='d' type='double'/><dimension id='i' type='integer'/></dimensions>",
        )
        .unwrap();
        let rec = Record(vec![
            ("d".into(), Value::Real(0.37)),
            ("i".into(), Value::Int(7)),
        ]);
        let (values, _) = index_values(&dims, &rec);
        assert!(
            matches!(&values[0], Some(IndexedValue::Doubles(xs)) if xs[..] == [0.37]),
            "{:?}",
            values[0]
        );
        assert!(matches!(values[1], Some(IndexedValue::Int(7))));
        let doc = Doc::new(DocId::from("a"), values);
        assert_eq!(doc.value(0).as_deref(), Some(&IndexedValue::Double(0.37)));
        assert_eq!(doc.value(1).as_deref(), Some(&IndexedValue::Int(7)));
    }

    #[test]
    fn the_spare_is_dropped_once_applies_pause() {
        let mut w = IndexWriter::new();
        let rec = |v: &str| Record(vec![("k".into(), Value::Str(v.into()))]);
        let mut snap = Snapshot::empty(dims());
        for (id, v) in [("a", "x"), ("b", "y"), ("a", "y")] {
            let mut b = w.begin(&snap);
            b.upsert(id, &rec(v));
            snap = b.commit();
        }
        let spare = w.spare();
        assert!(spare.is_held());
        let started = std::time::Instant::now();
        assert!(spare.drop_when_idle(std::time::Duration::from_millis(30)));
        assert!(started.elapsed() >= std::time::Duration::from_millis(20));
        assert!(!spare.is_held());
        // nothing left to drop; the next apply works from the snapshot and leaves a
        // spare again
        assert!(!spare.drop_when_idle(std::time::Duration::ZERO));
        let mut b = w.begin(&snap);
        b.upsert("c", &rec("x"));
        let next = b.commit();
        assert!(spare.is_held());
        let x = next
            .postings(0)
            .and_then(|p| p.get(b"x".as_slice()).map(|b| b.bitmap().into_owned()));
        assert_eq!(x.map(|x| x.iter().collect::<Vec<_>>()), Some(vec![2]));
    }

    #[test]
    fn rollback_restores_writer() {
        let mut w = IndexWriter::new();
        let s0 = Snapshot::empty(dims());
        let rec = Record(vec![("k".into(), Value::Str("v".into()))]);
        let mut b = w.begin(&s0);
        b.upsert("a", &rec);
        b.upsert("b", &rec);
        let s1 = b.commit();
        assert_eq!(s1.len(), 2);
        {
            let mut b = w.begin(&s1);
            b.delete("a");
            b.upsert("c", &rec);
            b.clear();
            b.upsert("d", &rec);
        } // dropped: rolled back
        {
            let mut b = w.begin(&s1);
            b.upsert("c", &rec);
            b.delete("b");
        } // rolled back too: the writer lists "a" and "b" only
        assert_eq!(w.by_id.len(), 2);
        let listed = |id| w.by_id.get(id, |n| doc_id(&s1.chunks, n));
        assert!(listed("a").is_some() && listed("b").is_some() && listed("c").is_none());
        let mut b = w.begin(&s1);
        b.upsert("a", &rec);
        let s2 = b.commit();
        assert_eq!(s2.len(), 2);
        assert_eq!(s1.docs().count(), 2);
        let ids: Vec<_> = s2.docs().map(|d| d.id.to_string()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    /// A document's allocation is its count, its id's pointer, its length and one word
    /// per dimension; its id reads back, and its id key is the id's.
    #[test]
    fn a_document_is_three_words_and_one_per_dimension() {
        assert_eq!(std::mem::size_of::<DocHead>(), 8);
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 8);
        let d = Doc::new(
            "item-7".into(),
            vec![None, Some(IndexedValue::Int(3))].into(),
        );
        assert_eq!(&*d.id, "item-7");
        assert_eq!(d.id_key(), eval::id_key("item-7"));
        assert_eq!(d.value(1).as_deref(), Some(&IndexedValue::Int(3)));
        assert!(d.value(0).is_none() && d.value(2).is_none());
    }

    /// The documents' estimate, from a sample of slots, is their measured size scaled to
    /// the live ones: it skips empty slots and reaches the last chunks (here, where the
    /// documents' ids are longer).
    #[test]
    fn the_documents_estimate_samples_the_whole_index() {
        let mut w = IndexWriter::new();
        let s0 = Snapshot::empty(dims());
        let rec = Record(vec![("k".into(), Value::Str("v".into()))]);
        let mut b = w.begin(&s0);
        let n = 20 * CHUNK;
        let id = |i: usize| match i < n / 2 {
            true => format!("s{i:05}"),
            false => format!("{i:0>200}"),
        };
        for i in 0..n {
            b.upsert(&id(i), &rec);
        }
        for i in (0..n / 2).step_by(3) {
            b.delete(&id(i));
        }
        let s = b.commit();
        let exact: usize = s.docs().map(Snapshot::doc_bytes).sum();
        let estimate = s.rows_bytes_sampled().expect("documents sampled");
        let off = estimate.abs_diff(exact) as f64 / exact as f64;
        assert!(off < 0.02, "estimate {estimate}, exact {exact}");
    }

    /// The chunks an apply copied are named for rebuilding with the columns the replaced
    /// snapshot had built — those only — and `build_columns` builds them.
    #[test]
    fn copied_chunks_get_their_columns_back() {
        let mut w = IndexWriter::new();
        let s0 = Snapshot::empty(dims());
        let rec = |v: &str| Record(vec![("k".into(), Value::Str(v.into()))]);
        let mut b = w.begin(&s0);
        for i in 0..CHUNK + 10 {
            b.upsert(&format!("i{i:05}"), &rec("v"));
        }
        let s1 = b.commit();
        // the first chunk's columns and key column are built, the second's not
        s1.key_col(0, 0).expect("a key column");
        let mut b = w.begin(&s1);
        b.upsert("i00003", &rec("w"));
        b.upsert(&format!("i{:05}", CHUNK + 3), &rec("w"));
        let s2 = b.commit();
        assert!(s2.chunks[0].cols.get().is_none());
        assert_eq!(
            s2.estimated_bytes_parts().columns,
            0,
            "no columns built yet"
        );
        let jobs = s2.columns_to_rebuild(&s1);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].chunk, 0);
        s2.build_columns(&jobs[0]);
        let cols = s2.chunks[0].cols.get().expect("columns built");
        assert!(cols.keys[0].get().is_some());
        // the estimate counts them: at least the key column and the id keys
        assert!(s2.estimated_bytes_parts().columns >= CHUNK * (4 + 8));
        assert!(s2.chunks[1].cols.get().is_none());
        // nothing copied since: nothing to build
        assert!(s2.clone().columns_to_rebuild(&s2).is_empty());
    }

    const COLUMN_DIMS: &[u8] = b"<dimensions>
      <dimension id='k' type='keyword'/>
      <dimension id='a' type='groupBy'/>
      <dimension id='t' type='tree'>
        <element id='A'><element id='A1'/><element id='A2'/></element>
        <element id='B'><element id='B1'/></element>
      </dimension>
      <dimension id='o' type='ordered'><element id='1'/><element id='2'/><element id='3'/></dimension>
      <dimension id='m' type='mutex'><element id='s'/><element id='r'/></dimension>
      <dimension id='g' type='geoloc' latitude='lat' longitude='lon'/>
      <dimension id='x' type='text'><field id='h'/><field id='b'/></dimension>
      <dimension id='n' type='integer'>
        <element id='low' value='[,0)'/><element id='mid' value='[0,5]'/><element id='high' value='(5,]'/>
      </dimension>
      <dimension id='d' type='double'/>
    </dimensions>";

    /// The id of the `i`-th item of `numbered_snapshot`.
    fn id(i: usize) -> String {
        format!("i{i:03}")
    }

    /// A first snapshot of `records`, the `i`-th as item `id(i)`.
    fn numbered_snapshot(
        w: &mut IndexWriter,
        dims: &Arc<Dimensions>,
        records: impl Iterator<Item = Record>,
    ) -> Snapshot {
        let mut b = w.begin(&Snapshot::empty(dims.clone()));
        for (i, r) in records.enumerate() {
            b.upsert(&id(i), &r);
        }
        b.commit()
    }

    /// A record holding, for each of `COLUMN_DIMS`, 0 to 2 values picked by `pick`.
    fn column_record(pick: &[u8]) -> Record {
        let p = |i: usize| pick.get(i).copied().unwrap_or(0) as usize;
        let mut r: Vec<(String, Value)> = Vec::new();
        let mut put = |k: &str, vs: &[String]| match vs {
            [] => {}
            [one] => r.push((k.into(), Value::Str(one.clone()))),
            _ => r.push((
                k.into(),
                Value::Array(vs.iter().map(|v| Value::Str(v.clone())).collect()),
            )),
        };
        let some = |n: usize, of: &[&str], at: usize| -> Vec<String> {
            (0..n % 3)
                .map(|j| of[(at + j) % of.len()].to_string())
                .collect()
        };
        put("k", &some(p(0), &["a", "b", "c", "d"], p(1)));
        put("a", &some(p(2), &["x", "y"], p(3)));
        put("t", &some(p(4), &["A", "A1", "A2", "B", "B1"], p(5)));
        put("o", &some(p(6), &["1", "2", "3"], p(7)));
        put("m", &some(p(8), &["s", "r"], p(9)));
        if p(10) % 3 > 0 {
            put("lat", &[format!("{}", 39 + p(11) % 3)]);
            put("lon", &[format!("-7{}", p(12) % 3)]);
        }
        put("h", &some(p(13), &["red car", "blue", "green cart"], p(14)));
        put("b", &some(p(15), &["one two three", "x"], p(16)));
        // (49 values each: a bound is often held by one document alone)
        // (mostly one value: the bound is then often a row's alone)
        let nums = (0..[0, 1, 1, 1, 1, 1, 2][p(17)])
            .map(|j| format!("{}", (p(18 + j) * 7 + p(1 + j)) as i64 - 20));
        put("n", &nums.collect::<Vec<_>>());
        let ds =
            (0..[0, 1, 1, 1, 1, 1, 2][p(20)]).map(|j| format!("{}.5", p(21 + j) * 7 + p(5 + j)));
        put("d", &ds.collect::<Vec<_>>());
        Record(r)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The columns of a chunk an apply copied, made from the columns of the chunk it
        /// copied and the documents it changed, are the columns built whole: every
        /// column, the key and segment columns the old chunk had built, the numeric
        /// bounds and the side lists.
        #[test]
        fn patched_columns_are_the_columns_built_whole(
            before in proptest::collection::vec(proptest::collection::vec(0u8..7, 23), 1..60),
            changes in proptest::collection::vec(
                (0usize..80, 0u8..3, proptest::collection::vec(0u8..7, 23), 0usize..23, 0u8..7),
                0..40),
        ) {
            let dims = Arc::new(Dimensions::parse(COLUMN_DIMS).unwrap());
            let mut w = IndexWriter::new();
            let s1 = numbered_snapshot(&mut w, &dims, before.iter().map(|p| column_record(p)));
            // every column the first chunk has: its columns, keys, segments
            for di in 0..dims.dims.len() {
                s1.key_col(0, di);
                s1.segment_col(0, di);
            }
            let mut b = w.begin(&s1);
            for (i, how, pick, at, to) in &changes {
                match how {
                    0 => b.delete(&id(*i)),
                    1 => b.upsert(&id(*i), &column_record(pick)),
                    // (one value changed, as an update changes a price: most columns kept)
                    _ => {
                        let mut pick = before[i % before.len()].clone();
                        pick[*at] = *to;
                        b.upsert(&id(i % before.len()), &column_record(&pick))
                    }
                }
            }
            let s2 = b.commit();
            let jobs = s2.columns_to_rebuild(&s1);
            for job in &jobs {
                s2.build_columns(job);
            }
            let whole = ChunkCols::build(&dims, &s2.chunks[0].docs);
            for di in 0..dims.dims.len() {
                if let Some(numbers) = s2.key_numbers(di) {
                    let _ = whole.keys[di].set(Arc::new(KeyCol::build(&s2.chunks[0].docs, di, numbers)));
                }
                if let (discern_dimensions::DimensionKind::Numeric(spec), Some(col)) =
                    (&dims.dims[di].kind, whole.col(di))
                {
                    let table = RangeTable::of(spec);
                    let _ = whole.segments[di].set(SegmentCol::build(col, &table).map(Arc::new));
                }
            }
            let rows_min = s2.chunks[0].docs.iter().flatten().map(|d| d.id_key()).min();
            proptest::prop_assert_eq!(whole.min_id_key, rows_min.unwrap_or(u64::MAX));
            match s2.chunks[0].cols.get() {
                Some(patched) => proptest::prop_assert_eq!(format!("{patched:?}"), format!("{whole:?}")),
                // (nothing changed: the chunk was not copied)
                None => proptest::prop_assert!(jobs.is_empty() && Arc::ptr_eq(&s1.chunks[0], &s2.chunks[0])),
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// A numeric dimension's span read from its extreme buckets' documents is the
        /// span of every chunk's column bounds — for whole numbers (a bucket of one
        /// integer, or wide buckets of several) and doubles, several values per item,
        /// after deletes and replacements — and a walk over more documents than its
        /// budget gives up rather than answer from part of them.
        #[test]
        fn span_from_buckets_is_the_columns_span(
            before in proptest::collection::vec(
                proptest::collection::vec((0u8..4, -3000i64..3000), 0..3), 1..200),
            changes in proptest::collection::vec(
                (0usize..220, proptest::collection::vec((0u8..4, -3000i64..3000), 0..3)),
                0..60),
            budget in 0u64..8,
        ) {
            let dims = Arc::new(
                Dimensions::parse(
                    b"<dimensions><dimension id='i' type='integer'/>
                      <dimension id='l' type='long'/><dimension id='d' type='double'/>
                      <dimension id='k' type='keyword'/></dimensions>",
                )
                .unwrap(),
            );
            // (dimension, value): integers near 0 (a bucket each) or wide apart, doubles
            // with fractions, and now and then a value that is not a number
            let to_record = |vals: &[(u8, i64)]| {
                let mut by_key: Vec<(String, Vec<Value>)> = Vec::new();
                for &(dim, x) in vals {
                    let (key, v) = match dim {
                        0 => ("i", (x / 20).to_string()),
                        1 => ("l", (x * 1_000_003).to_string()),
                        2 => ("d", format!("{}", x as f64 / 7.0)),
                        _ => ("d", "not a number".to_string()),
                    };
                    match by_key.iter_mut().find(|(k, _)| k == key) {
                        Some((_, vs)) => vs.push(Value::Str(v)),
                        None => by_key.push((key.into(), vec![Value::Str(v)])),
                    }
                }
                let mut r: Vec<(String, Value)> = vec![("k".into(), Value::Str("v".into()))];
                r.extend(by_key.into_iter().map(|(k, mut vs)| {
                    (k, if vs.len() == 1 { vs.remove(0) } else { Value::Array(vs) })
                }));
                Record(r)
            };
            let mut w = IndexWriter::new();
            let s1 = numbered_snapshot(&mut w, &dims, before.iter().map(|v| to_record(v)));
            let mut b = w.begin(&s1);
            for (i, vals) in &changes {
                if vals.is_empty() && i % 2 == 0 {
                    b.delete(&id(*i));
                } else {
                    b.upsert(&id(*i), &to_record(vals));
                }
            }
            let s2 = b.commit();
            for snap in [&s1, &s2] {
                for dim in 0..3 {
                    let columns = snap.span_from_columns(dim);
                    proptest::prop_assert_eq!(snap.span_from_postings(dim, u64::MAX), Some(columns));
                    if let Some(span) = snap.span_from_postings(dim, budget) {
                        proptest::prop_assert_eq!(span, columns);
                    }
                }
            }
        }
    }

    /// The text fields whose length classes are not united are named — every field of
    /// a new index, and of a text dimension whose postings an apply copied — and
    /// `build_length_unions` unites them from the new postings.
    #[test]
    fn changed_text_fields_get_their_length_unions_back() {
        let dims = Arc::new(
            Dimensions::parse(
                b"<dimensions><dimension id='k' type='keyword'/>
                  <dimension id='x' type='text'><field id='a'/><field id='b'/></dimension>
                  </dimensions>",
            )
            .unwrap(),
        );
        let mut w = IndexWriter::new();
        let rec = |k: &str, a: &str| {
            Record(vec![
                ("k".into(), Value::Str(k.into())),
                ("a".into(), Value::Str(a.into())),
                ("b".into(), Value::Str("some words".into())),
            ])
        };
        let mut b = w.begin(&Snapshot::empty(dims));
        b.upsert("i1", &rec("v", "one two"));
        b.upsert("i2", &rec("v", "one two three"));
        let s1 = b.commit();
        assert_eq!(s1.length_unions_missing(), [(1, 0), (1, 1)]);
        s1.build_length_unions(&s1.length_unions_missing());
        assert!(s1.length_unions_missing().is_empty());
        let before = s1.postings(1).unwrap().shorter_than(0);
        let mut b = w.begin(&s1);
        b.upsert("i3", &rec("v", "one"));
        let s2 = b.commit();
        assert_eq!(s2.length_unions_missing(), [(1, 0), (1, 1)]);
        s2.build_length_unions(&s2.length_unions_missing());
        assert!(s2.length_unions_missing().is_empty());
        // united from the new postings: the one-word field is the shortest class
        let after = s2.postings(1).unwrap().shorter_than(0);
        assert_eq!(before.first().map(|c| c.0), Some(2));
        assert_eq!(after.first().map(|c| (c.0, c.1.len())), Some((1, 1)));
    }

    /// One dimension's postings as plain values: (key, set) pairs, `has`, field stats.
    type PlainPostings = (
        Vec<(Vec<u8>, RoaringBitmap)>,
        RoaringBitmap,
        Vec<(u64, u64)>,
    );

    fn postings_of(s: &Snapshot) -> Vec<Option<PlainPostings>> {
        s.postings
            .iter()
            .map(|p| {
                p.as_ref().map(|p| {
                    let keys = p
                        .map
                        .iter()
                        .map(|(k, b)| (k.to_vec(), b.get().bitmap().into_owned()))
                        .collect();
                    (keys, (*p.has).clone(), p.field_stats.clone())
                })
            })
            .collect()
    }

    /// One apply: (item, new state: None deletes) pairs, whether a reset comes first,
    /// whether a reader keeps the resulting snapshot, whether the spare catches up
    /// before the next apply (as the engine does in the background), and whether the
    /// apply fails after its snapshot was prepared (its store commit failed).
    type Step = (Vec<(u8, Option<(Vec<u8>, u8)>)>, bool, bool, bool, bool);

    proptest::proptest! {
        /// Postings kept current through the writer's spare copy, and did-you-mean
        /// dictionaries, equal those counted from the documents, after every apply,
        /// also after prepared applies that failed; the documents are those the
        /// applies that did not fail made; and no snapshot a reader holds ever changes
        /// (the spare is updated in place only where nothing else holds it).
        #[test]
        fn spare_postings_equal_a_recount_and_readers_see_no_change(
            steps in proptest::collection::vec(
                (proptest::collection::vec(
                    (0u8..24, proptest::option::weighted(0.8, (proptest::collection::vec(0u8..6, 0..5), 0u8..4))),
                    0..12),
                 proptest::bool::weighted(0.05),
                 proptest::bool::ANY,
                 proptest::bool::ANY,
                 proptest::bool::weighted(0.25)),
                1..14)
        ) {
            let steps: Vec<Step> = steps;
            let dims = Arc::new(
                Dimensions::parse(
                    b"<dimensions><dimension id='k' type='keyword'/>\
                      <dimension id='t' type='text'/><dimension id='n' type='integer'/></dimensions>",
                )
                .unwrap(),
            );
            let words = ["red", "green", "blue", "red red", "teal green", "blue blue blue"];
            let mut w = IndexWriter::new();
            let mut snap = Snapshot::empty(dims.clone());
            let mut held: Vec<(Snapshot, Vec<_>)> = Vec::new();
            let mut items = std::collections::BTreeSet::new();
            for (changes, reset, keep, catch_up, fail) in steps {
                let before = items.clone();
                let mut b = w.begin(&snap);
                if reset {
                    b.clear();
                    items.clear();
                }
                for (item, state) in changes {
                    let id = format!("i{item}");
                    match state {
                        None => {
                            b.delete(&id);
                            items.remove(&id);
                        }
                        Some((ws, n)) => {
                            items.insert(id.clone());
                            let mut props = Vec::new();
                            if let Some(&first) = ws.first() {
                                props.push(("k".to_string(), Value::Str(words[first as usize].into())));
                            }
                            let text: Vec<&str> = ws.iter().map(|&x| words[x as usize]).collect();
                            props.push(("t".to_string(), Value::Str(text.join(" "))));
                            if n > 0 {
                                props.push(("n".to_string(), Value::Int(n as i64 * 10)));
                            }
                            b.upsert(&id, &Record(props));
                        }
                    }
                }
                if fail {
                    drop(b.prepare());
                    items = before;
                    continue;
                }
                snap = b.commit();
                let ids: std::collections::BTreeSet<String> =
                    snap.docs().map(|d| d.id.to_string()).collect();
                proptest::prop_assert_eq!(&ids, &items);
                let want = postings_of(&snap.clone().with_built_postings());
                proptest::prop_assert_eq!(&postings_of(&snap), &want);
                let live: RoaringBitmap = snap.clone().with_built_postings().live_docs.as_ref().clone();
                proptest::prop_assert_eq!(&*snap.live_docs, &live);
                // did-you-mean frequencies tracked through the applies (an update that
                // leaves a dimension's value as it was changes none of its terms)
                let counted = snap.clone().with_built_terms();
                for di in 0..dims.dims.len() {
                    proptest::prop_assert_eq!(
                        snap.term_dict(di).map(TermDict::entries),
                        counted.term_dict(di).map(TermDict::entries),
                        "dimension {}", di
                    );
                }
                if keep {
                    held.push((snap.clone(), want));
                }
                if catch_up {
                    w.spare().catch_up();
                }
            }
            for (s, seen) in &held {
                proptest::prop_assert_eq!(&postings_of(s), seen);
            }
        }
    }
}
