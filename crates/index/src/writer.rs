//! The write side: the single writer's id map and free numbers, and the builder that
//! makes the next snapshot from the current one (undone when dropped uncommitted).

use std::sync::{Arc, OnceLock};

use discern_dimensions::{extract, DimensionKind, Dimensions, IndexedValue};
use discern_model::Record;
use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::numbering::{Numbering, Vocabularies};
use crate::postings::{self, Postings, PostingsDelta, SpareSlot};
use crate::terms::{self, TermDict, TermDicts};
use crate::{
    doc_at, doc_id, ids, intern, spans::unknown_spans, Chunk, Doc, DocId, DocValues, Snapshot,
    CHUNK,
};

/// `Snapshot::number_text` with the vocabularies `vocab`.
pub(crate) fn number_text(vocab: &Vocabularies, values: &mut DocValues) {
    for (v, vocab) in values.iter_mut().zip(vocab.iter()) {
        if let (Some(IndexedValue::Text(fields)), Some(vocab)) = (v.as_ref(), vocab) {
            *v = Some(IndexedValue::Terms(vocab.number_text(fields)));
        }
    }
}

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

/// `index_values` and then `number_text` in one pass: a text dimension's tokens go from
/// the analysis straight to their numbers in `vocab` (`Numbering::number_record_text`).
pub(crate) fn index_values_numbered(
    dims: &Dimensions,
    vocab: &Vocabularies,
    record: &Record,
) -> (DocValues, u64) {
    let mut errors = 0u64;
    let values = dims
        .dims
        .iter()
        .zip(vocab.iter())
        .map(|(d, vocab)| match (&d.kind, vocab) {
            (DimensionKind::Text(spec), Some(vocab)) => {
                let terms = vocab.number_record_text(spec, record);
                (!terms.is_empty()).then_some(IndexedValue::Terms(terms))
            }
            _ => {
                let ex = extract(d, record);
                errors += ex.errors as u64;
                ex.value.map(IndexedValue::boxed_for_slot)
            }
        })
        .collect();
    (values, errors)
}

/// Writer-side state: id → doc number and free doc numbers. Owned by the single writer.
pub struct IndexWriter {
    pub(crate) by_id: ids::IdIndex,
    pub(crate) free: Vec<u32>,
    pub(crate) next: u32,
    /// Values that could not be indexed since start (`item.errors`).
    pub errors: u64,
    /// The previous snapshot's postings, for the next commit to update in place.
    pub(crate) spare: SpareSlot,
    /// The keyword values documents share.
    pub(crate) interner: intern::Interner,
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
    /// The postings and dictionaries are counted from the documents when the snapshot
    /// is built (`count_at_end`).
    count_at_end: bool,
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
            count_at_end: false,
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
    /// until `Snapshot::with_built_postings_and_terms`, which must run before it answers
    /// queries. (`count_at_end` runs it as it commits.)
    pub fn skip_postings(&mut self) {
        self.track_postings = false;
    }

    /// Counts the postings and the did-you-mean dictionaries once, from the documents,
    /// when the snapshot is built, instead of recording each document's changes as it
    /// comes: for an apply into an empty index (a first bulk load), where recording them
    /// cost the index thread ~20 µs of CPU a document, and counting them at the end is
    /// a pass over the documents on every core.
    pub fn count_at_end(&mut self) {
        self.track_postings = false;
        self.term_deltas = None;
        self.count_at_end = true;
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
        let (values, errors) = index_values_numbered(&self.dims, &self.vocab, record);
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
        // what follows fills an empty index, as a first bulk load does
        self.count_at_end();
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
        let term_deltas = self.term_deltas.take();
        let delta = std::mem::replace(
            &mut self.postings_delta,
            PostingsDelta::new(&self.dims, self.vocab.clone()),
        );
        let (vocab, spare) = (&self.vocab, &self.writer.spare);
        let (postings, live_docs) = (&self.postings, &self.live_docs);
        let track_postings = self.track_postings;
        // The dictionaries and the postings take the changes side by side: a bulk load's
        // dictionaries are seconds of one core (its address's 855,000 terms made an FST,
        // forwards and reversed), on the way to its 201 as the postings are.
        let (terms, (postings, live_docs)) = rayon::join(
            || match term_deltas {
                Some(deltas) => changed_terms(&terms, deltas, vocab, generation),
                None => terms,
            },
            || {
                if track_postings {
                    postings::commit(spare, postings, live_docs, delta.resolve())
                } else {
                    // stale: counted from the documents below (`count_at_end`) or
                    // by the caller (`skip_postings`)
                    spare.clear();
                    (postings.clone(), live_docs.clone())
                }
            },
        );
        let snapshot = Snapshot {
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
        };
        if self.count_at_end {
            snapshot.with_built_postings_and_terms()
        } else {
            snapshot
        }
    }
}

/// `terms` with each dimension's document-frequency changes (`deltas`), the dimensions
/// on every core; a dictionary changed in many terms is merged at once.
fn changed_terms(
    terms: &TermDicts,
    deltas: Vec<terms::TermDelta>,
    vocab: &Vocabularies,
    generation: u64,
) -> TermDicts {
    let mut deltas: Vec<Option<terms::TermDelta>> = deltas.into_iter().map(Some).collect();
    deltas.resize_with(terms.len(), || None);
    let next: Vec<Option<Arc<TermDict>>> = terms
        .par_iter()
        .zip(deltas.into_par_iter())
        .enumerate()
        .map(|(di, (cur, d))| {
            let cur = cur.as_ref()?;
            let Some(d) = d else {
                return Some(cur.clone());
            };
            let vocab = vocab.get(di).and_then(|v| v.as_deref());
            let d = d.into_terms(vocab.map(|v| v.read()).as_deref());
            if d.is_empty() {
                return Some(cur.clone());
            }
            let many = d.len() > terms::SYNC_MERGE_TERMS;
            let mut changed = cur.with_changes(d, generation);
            if many || changed.overlay_len() > terms::SYNC_MERGE_TERMS {
                changed = changed.merged(generation);
            }
            Some(Arc::new(changed))
        })
        .collect();
    Arc::new(next)
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

#[cfg(test)]
mod tests {
    use super::*;
    use discern_model::Value;
    use proptest::prelude::*;

    use crate::test_support::keyword_dims as dims;

    /// Text dimensions of every tokenizer, with fields of their own keys, stop words or
    /// none and stemming, beside other kinds.
    const TEXT_DIMS: &[u8] = b"<dimensions>
      <dimension id='k' type='keyword'/>
      <dimension id='t' type='text'>
        <field id='title' stopWords=''/>
        <field id='body'/>
        <field id='place' key='city,street' stemmer='english'/>
      </dimension>
      <dimension id='n' type='integer'/>
      <dimension id='s' type='text' key='body' tokenizer='standard'/>
      <dimension id='w' type='text' key='title,city' tokenizer='whitespace' stopWords='the,of'/>
    </dimensions>";

    fn text_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => "(the|of|A|red|Red's|door|wi-fi|iPhone|X2|café|naïve|,|\\.| |  |'s|O'Brien){0,8}"
                .prop_map(Value::Str),
            1 => any::<i64>().prop_map(Value::Int),
            1 => proptest::collection::vec("(red|door|the|Wi-Fi|x)", 0..3)
                .prop_map(|v| Value::Array(v.into_iter().map(Value::Str).collect())),
        ]
    }

    proptest! {
        /// A record's values with text numbered in one pass (`index_values_numbered`)
        /// are those of `index_values` then `number_text`, with the same numbers given
        /// to tokens met for the first time, record after record.
        #[test]
        fn text_numbered_as_analysed_is_text_numbered_after(
            records in proptest::collection::vec(
                proptest::collection::vec(
                    ("(k|title|body|city|street|n)", text_value()),
                    0..7,
                ),
                1..12,
            ),
        ) {
            let dims = Arc::new(Dimensions::parse(TEXT_DIMS).unwrap());
            let after = Snapshot::empty(dims.clone());
            let at_once = Snapshot::empty(dims.clone());
            for entries in records {
                let mut rec = Record::new();
                for (name, value) in entries {
                    rec.set(name, value);
                }
                let (mut expected, errors) = index_values(&dims, &rec);
                after.number_text(&mut expected);
                prop_assert_eq!(at_once.indexed_values(&rec), (expected, errors));
            }
        }
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
            ("d".into(), Value::Real(1e300)),
            ("i".into(), Value::Int(7)),
        ]);
        let (values, _) = index_values(&dims, &rec);
        assert!(
            matches!(&values[0], Some(IndexedValue::Doubles(xs)) if xs[..] == [1e300]),
            "{:?}",
            values[0]
        );
        assert!(matches!(values[1], Some(IndexedValue::Int(7))));
        let doc = Doc::new(DocId::from("a"), values);
        assert_eq!(doc.value(0).as_deref(), Some(&IndexedValue::Double(1e300)));
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
}
