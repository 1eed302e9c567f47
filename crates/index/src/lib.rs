//! The in-memory index (SPEC §6, §7): per item, the values every dimension indexes,
//! held in copy-on-write chunks so that an apply builds the next immutable snapshot
//! while queries keep reading the current one.

mod admit;
mod bits;
mod candidates;
mod columns;
mod criteria;
mod doc;
mod estimate;
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
mod spans;
pub mod terms;
mod text;
mod upkeep;
mod writer;

pub use criteria::Criterion;
pub use doc::{Doc, DocHead, DocId, DocValues};
pub use estimate::IndexBytes;
pub use eval::{criteria_dims, evaluate, text_terms, Filter};
pub use facets::{compute_drill_down, compute_facets, DrillDown, FacetRequest};
pub use hits::{Hit, Matched, Results, Want};
pub use query::{parse_export, parse_query, Explain, ExportRequest, GroupBy, Highlighting, Query};
pub use sort::{sort_hits, SortKey};
pub use upkeep::ColumnsToBuild;
pub use writer::{index_values, Builder, IndexWriter, Prepared};

use std::sync::{Arc, OnceLock};

use columns::ChunkCols;
use numbering::{Numbering, Vocabularies};

/// Hash maps on the apply path (ids, terms, postings keys): hashbrown with its default
/// foldhash hasher, randomly seeded per process, several times cheaper per lookup than
/// SipHash.
pub(crate) type FastMap<K, V> = hashbrown::HashMap<K, V>;
use discern_dimensions::{Dimensions, IndexedValue, ValueRef};
use postings::Postings;
pub use postings::SpareSlot;
use roaring::RoaringBitmap;
use slots::Slots;
use spans::{unknown_spans, Spans};
use terms::{TermDict, TermDicts};

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

    /// Every live document, in doc-number order.
    pub fn docs(&self) -> impl Iterator<Item = &Doc> {
        self.chunks.iter().flat_map(|c| c.docs.iter().flatten())
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
