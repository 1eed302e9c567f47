//! The index saved to a file and read back, so that a restart does not re-extract
//! every item (SPEC §16: restart to queryable ≤ 5 s).
//!
//! The file describes one snapshot exactly: every document's indexed values, the
//! postings, the did-you-mean dictionaries (overlays folded in) and the writer's
//! counters. It starts with a caller-given header (the engine puts there what the item
//! store and the dimensions were when it was written) so that a stale file is
//! recognised before its body is read.
//!
//! Layout: `MAGIC`, `FORMAT` (u32 LE), then blocks, each `len (u64 LE) crc32 (u32 LE)
//! bytes`: the header; the counts; the live documents; per dimension its postings; per
//! dimension its dictionary; per dimension its vocabulary (text dimensions' token
//! numbers); one block per chunk; an end block. The checksums
//! catch a torn or damaged file; decoding checks every length and value besides, so a
//! bad file is an error, never a panic or a wrong index.

use std::io::{self, Read, Seek, Write};
use std::sync::Arc;

use discern_dimensions::Dimensions;
use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::intern::{Interner, SharedInterner};
use crate::terms::TermDict;
use crate::{Chunk, IndexWriter, Snapshot, CHUNK};

mod blocks;
mod parts;

use parts::{
    decode_bitmap, decode_chunk, decode_postings, decode_vocab, encode_bitmap, encode_chunk,
    encode_vocab, write_postings,
};

use blocks::{write_block, BlockReader, SPILL_AT};
pub use blocks::{Corrupt, LoadError};
pub(crate) use blocks::{Dec, Enc, StreamedBlock};

const MAGIC: &[u8; 8] = b"discernI";
/// Bump whenever the layout or what extraction produces for a record changes: a file
/// of another format is ignored (the index is rebuilt from the item store). 9: string
/// lists' numbers as narrow as their values (`StrList`). 10: a frozen dimension's
/// postings as its FST, shared sets and overlay (`parts::encode_frozen`).
pub const FORMAT: u32 = 10;
/// Chunks encoded or decoded together (in parallel).
const CHUNK_BATCH: usize = 64;

/// What of the writer a saved index keeps, taken together with the snapshot it goes
/// with (while no apply can run), so that the file can be written after the writer is
/// let go.
#[derive(Debug, Clone)]
pub struct WriterCounts {
    errors: u64,
    next: u32,
    free: Vec<u32>,
}

impl IndexWriter {
    pub fn counts(&self) -> WriterCounts {
        WriterCounts {
            errors: self.errors,
            next: self.next,
            free: self.free.clone(),
        }
    }
}

/// How many threads `save` encodes the documents on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encode {
    /// Every core (rayon's pool): a save at shutdown, which nothing else waits for.
    Parallel,
    /// The calling thread only: a save while the engine serves requests.
    OnThisThread,
}

/// Writes `snap` (and the writer's counters that go with it) after `header`. Lets go of
/// `snap` before the documents, and of each chunk once written: a save beside applies
/// does not hold the chunks they replaced longer than it needs them. The postings and
/// dictionaries are written as they are encoded (the writer seeks back to put each
/// one's length before it), so a save needs little memory beyond the index's own.
pub fn save(
    snap: Arc<Snapshot>,
    writer: &WriterCounts,
    header: &[u8],
    w: impl Write + Seek,
    encode: Encode,
) -> io::Result<()> {
    save_spilling_at(snap, writer, header, w, encode, SPILL_AT)
}

fn save_spilling_at(
    snap: Arc<Snapshot>,
    writer: &WriterCounts,
    header: &[u8],
    mut w: impl Write + Seek,
    encode: Encode,
    spill_at: usize,
) -> io::Result<()> {
    w.write_all(MAGIC)?;
    w.write_all(&FORMAT.to_le_bytes())?;
    write_block(&mut w, header)?;
    let mut counts = Enc::default();
    counts.u64(snap.generation);
    counts.u64(writer.errors);
    counts.u32(writer.next);
    counts.u32(snap.chunks.len() as u32);
    counts.u32(snap.dims.dims.len() as u32);
    // in order: the next new item takes the last
    counts.u32(writer.free.len() as u32);
    writer.free.iter().for_each(|&n| counts.u32(n));
    write_block(&mut w, &counts.0)?;
    let mut live = Enc::default();
    encode_bitmap(&mut live, &snap.live_docs);
    write_block(&mut w, &live.0)?;
    for p in snap.postings.iter() {
        write_postings(p.as_deref(), &mut w, spill_at)?;
    }
    for t in snap.terms.iter() {
        let mut out = StreamedBlock::begin(&mut w, spill_at)?;
        match t {
            None => out.e.u8(0),
            Some(t) => {
                out.e.u8(1);
                t.encode(snap.generation, &mut out)?;
            }
        }
        out.end()?;
    }
    for v in snap.vocab.iter() {
        write_block(&mut w, &encode_vocab(v.as_deref()))?;
    }
    let chunks = snap.chunks.clone();
    drop(snap);
    match encode {
        Encode::Parallel => {
            for batch in chunks.chunks(CHUNK_BATCH) {
                let blocks: Vec<Vec<u8>> = batch.par_iter().map(|c| encode_chunk(c)).collect();
                for b in &blocks {
                    write_block(&mut w, b)?;
                }
            }
        }
        Encode::OnThisThread => {
            for c in chunks {
                write_block(&mut w, &encode_chunk(&c))?;
            }
        }
    }
    write_block(&mut w, b"end")?;
    w.flush()
}

/// Reads a file `save` wrote, if its header is `header` and its dimensions count is
/// `dims`'s: the snapshot and the writer state that goes with it. `len` is the file's
/// length (no block may claim more).
pub fn load<R: Read + Send>(
    dims: Arc<Dimensions>,
    header: &[u8],
    r: R,
    len: u64,
) -> Result<(Snapshot, IndexWriter), LoadError> {
    load_if(dims, |h| h == header, r, len)
}

/// `load`, for a file whose header `accept` takes (any other is `Stale`).
pub fn load_if<R: Read + Send>(
    dims: Arc<Dimensions>,
    accept: impl FnOnce(&[u8]) -> bool,
    r: R,
    len: u64,
) -> Result<(Snapshot, IndexWriter), LoadError> {
    let mut r = BlockReader { r, left: len };
    let mut head = [0u8; 12];
    r.r.read_exact(&mut head)?;
    r.left = r.left.saturating_sub(12);
    if &head[..8] != MAGIC {
        return Err(Corrupt("not a saved index").into());
    }
    if u32::from_le_bytes([head[8], head[9], head[10], head[11]]) != FORMAT {
        return Err(LoadError::Stale);
    }
    if !accept(&r.block()?) {
        return Err(LoadError::Stale);
    }
    let counts = r.block()?;
    let mut d = Dec(&counts);
    let generation = d.u64()?;
    let errors = d.u64()?;
    let next = d.u32()?;
    let nchunks = d.u32()? as usize;
    let ndims = d.u32()? as usize;
    let nfree = d.count(4)?;
    let free = (0..nfree)
        .map(|_| d.u32())
        .collect::<Result<Vec<u32>, _>>()?;
    d.done()?;
    if ndims != dims.dims.len() {
        return Err(LoadError::Stale);
    }
    if next as usize > nchunks * CHUNK {
        return Err(Corrupt("document count").into());
    }
    let live_block = r.block()?;
    let mut d = Dec(&live_block);
    let live_docs = decode_bitmap(&mut d)?;
    d.done()?;
    let postings_blocks = (0..ndims)
        .map(|_| r.block())
        .collect::<Result<Vec<_>, _>>()?;
    let term_blocks = (0..ndims)
        .map(|_| r.block())
        .collect::<Result<Vec<_>, _>>()?;
    let vocab = (0..ndims)
        .map(|_| decode_vocab(&r.block()?))
        .collect::<Result<Vec<_>, LoadError>>()?;
    let text = |d: &discern_dimensions::Dimension| {
        matches!(d.kind, discern_dimensions::DimensionKind::Text(_))
    };
    if vocab
        .iter()
        .zip(&dims.dims)
        .any(|(v, d)| v.is_some() != text(d))
    {
        return Err(Corrupt("vocabulary").into());
    }
    let vocab_len: Vec<usize> = vocab
        .iter()
        .map(|v| v.as_ref().map_or(0, |v| v.len()))
        .collect();
    let decode_terms = |b: Vec<u8>| {
        let mut d = Dec(&b);
        let t = match d.u8()? {
            0 => None,
            _ => Some(Arc::new(TermDict::decode(&mut d, generation)?)),
        };
        d.done()?;
        Ok(t)
    };
    // the postings and dictionaries are decoded while the documents are read: reading
    // is one thread's work, and the documents' decoding waits on memory
    let (structures, docs) = rayon::join(
        || {
            rayon::join(
                || {
                    postings_blocks
                        .into_par_iter()
                        .zip(dims.dims.par_iter())
                        .map(|(b, d)| decode_postings(&b, crate::postings::freezable(d)))
                        .collect::<Result<Vec<_>, _>>()
                },
                || {
                    term_blocks
                        .into_par_iter()
                        .map(decode_terms)
                        .collect::<Result<Vec<_>, Corrupt>>()
                },
            )
        },
        || load_docs(&mut r, nchunks, ndims, &vocab_len, next, &live_docs, &free),
    );
    let (postings, terms) = structures;
    let (postings, terms) = (postings?, terms?);
    let (chunks, by_id, interner) = docs?;
    if r.block()? != b"end" {
        return Err(Corrupt("no end block").into());
    }
    let live = by_id.len();
    let snap = Snapshot {
        keys: crate::keys::numbers_for(&dims),
        vocab: vocab.into(),
        spans: crate::unknown_spans(&dims),
        dims,
        chunks,
        live,
        generation,
        terms: Arc::new(terms),
        postings: Arc::new(postings),
        live_docs: Arc::new(live_docs),
    };
    let writer = IndexWriter {
        by_id,
        free,
        next,
        errors,
        spare: Default::default(),
        interner,
    };
    Ok((snap, writer))
}

type IdMap = crate::ids::IdIndex;

/// The chunks, read in batches — a batch decoded (in parallel) while the next is read
/// into the other set of buffers and the previous one's ids are mapped — the writer's
/// id map and the interner of the keyword values the documents share. Checks that the
/// documents, the live set and the free numbers (the empty slots below `next`) agree.
fn load_docs<R: Read + Send>(
    r: &mut BlockReader<R>,
    nchunks: usize,
    ndims: usize,
    vocab_len: &[usize],
    next: u32,
    live_docs: &RoaringBitmap,
    free: &[u32],
) -> Result<(Vec<Arc<Chunk>>, IdMap, Interner), LoadError> {
    let mut chunks: Vec<Arc<Chunk>> = Vec::with_capacity(nchunks);
    let mut by_id = IdMap::with_capacity(live_docs.len() as usize);
    let mut empty = Vec::new();
    let interner = SharedInterner::new(ndims);
    // (`chunks[first..]` are the batch to map, those before it mapped)
    let mut map_ids = |by_id: &mut IdMap, first: usize, chunks: &[Arc<Chunk>]| {
        for (c, chunk) in chunks.iter().enumerate().skip(first) {
            for (i, doc) in chunk.docs.iter().enumerate() {
                let n = (c * CHUNK + i) as u32;
                match doc {
                    Some(doc) => {
                        if n >= next || by_id.get(&doc.id, |d| crate::doc_id(chunks, d)).is_some() {
                            return Err(Corrupt("document numbers"));
                        }
                        by_id.insert(&doc.id, n);
                        if !live_docs.contains(n) {
                            return Err(Corrupt("live documents"));
                        }
                    }
                    None if n < next => empty.push(n),
                    None => {}
                }
            }
        }
        Ok(())
    };
    let mut read = 0;
    let mut read_batch = |r: &mut BlockReader<R>, bufs: &mut Vec<Vec<u8>>| {
        let n = CHUNK_BATCH.min(nchunks - read);
        read += n;
        bufs.resize_with(n, Vec::new);
        bufs.iter_mut().try_for_each(|b| r.block_into(b))
    };
    let (mut blocks, mut spare) = (Vec::new(), Vec::new());
    read_batch(r, &mut blocks)?;
    let mut mapped = 0;
    while !blocks.is_empty() {
        let (decoded, side) = rayon::join(
            || {
                blocks
                    .par_iter()
                    .map(|b| decode_chunk(b, ndims, &interner, vocab_len))
                    .collect::<Result<Vec<Chunk>, _>>()
            },
            || -> Result<(), LoadError> {
                map_ids(&mut by_id, mapped, &chunks)?;
                read_batch(r, &mut spare)
            },
        );
        side?;
        mapped = chunks.len();
        chunks.extend(decoded?.into_iter().map(Arc::new));
        std::mem::swap(&mut blocks, &mut spare);
    }
    map_ids(&mut by_id, mapped, &chunks)?;
    if live_docs.len() != by_id.len() as u64 {
        return Err(Corrupt("live documents").into());
    }
    let mut sorted = free.to_vec();
    sorted.sort_unstable();
    if sorted != empty {
        return Err(Corrupt("free document numbers").into());
    }
    Ok((chunks, by_id, interner.into_interner()))
}

#[cfg(test)]
mod tests {
    use super::parts::encode_postings_of;
    use super::*;
    use crate::numbering::Numbering;
    use crate::test_support::put_strings;
    use discern_dimensions::IndexedValue;
    use discern_model::{Record, Value};
    use proptest::prelude::*;

    const DIMS: &[u8] = br#"<dimensions>
        <dimension id="k" type="keyword"/>
        <dimension id="t" type="tree"><element id="A"><element id="A1"/></element><element id="B"/></dimension>
        <dimension id="g" type="geoloc" latitude="lat" longitude="lon"/>
        <dimension id="n" type="integer"/>
        <dimension id="d" type="double"/>
        <dimension id="x" type="text"><field id="x"/><field id="y"/></dimension>
    </dimensions>"#;

    const WORDS: [&str; 6] = ["red", "green", "blue", "car", "cart", "ünï"];

    /// (keywords, tree ids, point, integers, double, words of x, words of y)
    type Spec = (
        Vec<usize>,
        Vec<usize>,
        Option<(f64, f64)>,
        Vec<i64>,
        Option<f64>,
        Vec<usize>,
        Vec<usize>,
    );

    fn spec() -> impl Strategy<Value = Spec> {
        (
            prop::collection::vec(0usize..4, 0..3),
            prop::collection::vec(0usize..3, 0..2),
            prop::option::of((-90.0f64..90.0, -180.0f64..180.0)),
            prop::collection::vec(-5i64..5, 0..3),
            prop::option::of(-1e9f64..1e9),
            prop::collection::vec(0usize..6, 0..5),
            prop::collection::vec(0usize..6, 0..3),
        )
    }

    fn record(s: &Spec) -> Record {
        let (kw, el, pt, ns, d, x, y) = s;
        let mut r = Record::default();
        put_strings(&mut r, "k", kw.iter().map(|k| format!("k{k}")).collect());
        put_strings(
            &mut r,
            "t",
            el.iter().map(|e| ["A", "A1", "B"][*e].into()).collect(),
        );
        put_strings(&mut r, "n", ns.iter().map(|n| n.to_string()).collect());
        if let Some((la, lo)) = pt {
            r.0.push(("lat".into(), Value::Str(la.to_string())));
            r.0.push(("lon".into(), Value::Str(lo.to_string())));
        }
        if let Some(d) = d {
            r.0.push(("d".into(), Value::Str(d.to_string())));
        }
        let words = |w: &[usize]| w.iter().map(|i| WORDS[*i]).collect::<Vec<_>>().join(" ");
        if !x.is_empty() {
            r.0.push(("x".into(), Value::Str(words(x))));
        }
        if !y.is_empty() {
            r.0.push(("y".into(), Value::Str(words(y))));
        }
        r
    }

    /// Every document and every structure of two snapshots, compared.
    fn assert_same(a: &Snapshot, b: &Snapshot) {
        assert_eq!(a.generation, b.generation);
        assert_eq!(a.live, b.live);
        assert_eq!(a.chunks.len(), b.chunks.len());
        for n in 0..(a.chunks.len() * CHUNK) as u32 {
            let (x, y) = (a.doc(n), b.doc(n));
            assert_eq!(
                x.map(|d| (&d.id, d.id_key(), d.slots())),
                y.map(|d| (&d.id, d.id_key(), d.slots()))
            );
            for di in 0..a.dims.dims.len() {
                assert_eq!(a.shown_value(n, di), b.shown_value(n, di));
            }
        }
        for di in 0..a.dims.dims.len() {
            assert_eq!(
                a.vocab(di).map(|v| v.read().all().to_vec()),
                b.vocab(di).map(|v| v.read().all().to_vec())
            );
        }
        assert_eq!(*a.live_docs, *b.live_docs);
        for di in 0..a.dims.dims.len() {
            let (p, q) = (a.postings(di).unwrap(), b.postings(di).unwrap());
            assert_eq!(*p.has, *q.has);
            assert_eq!(p.field_stats, q.field_stats);
            // (every key, the map's or a frozen dimension's FST and overlay)
            let keys = |p: &crate::postings::DimPostings| -> Vec<_> {
                p.entries()
                    .map(|(k, v)| (k.into_owned(), v.bitmap().into_owned()))
                    .collect()
            };
            assert_eq!(keys(p), keys(q));
            assert_eq!(p.len(), q.len());
            assert_eq!(p.frozen.is_some(), q.frozen.is_some());
            for k in keys(p).iter().map(|(k, _)| k) {
                assert_eq!(
                    p.get(k).map(|v| v.bitmap().into_owned()),
                    q.get(k).map(|v| v.bitmap().into_owned())
                );
            }
            assert_eq!(
                a.term_dict(di).map(TermDict::entries),
                b.term_dict(di).map(TermDict::entries)
            );
        }
    }

    fn saved(snap: &Snapshot, w: &IndexWriter, header: &[u8]) -> Vec<u8> {
        saved_as(snap, &w.counts(), header, Encode::Parallel, SPILL_AT)
    }

    fn saved_as(
        snap: &Snapshot,
        counts: &WriterCounts,
        header: &[u8],
        encode: Encode,
        spill_at: usize,
    ) -> Vec<u8> {
        let mut out = io::Cursor::new(Vec::new());
        let snap = Arc::new(snap.clone());
        save_spilling_at(snap, counts, header, &mut out, encode, spill_at).unwrap();
        out.into_inner()
    }

    fn reload(file: &[u8], header: &[u8]) -> Result<(Snapshot, IndexWriter), LoadError> {
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        load(dims, header, file, file.len() as u64)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// A saved and loaded index is the index: the same documents under the same
        /// numbers, postings, dictionaries and counters, and later applies to either
        /// give the same next snapshot.
        #[test]
        fn save_then_load_is_the_same_index(
            specs in prop::collection::vec(spec(), 1..40),
            pad in 0usize..1500,
            deleted in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
            later in prop::collection::vec(spec(), 0..5),
        ) {
            let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
            let mut w = IndexWriter::new();
            let mut b = w.begin(&Snapshot::empty(dims));
            let total = pad + specs.len();
            for i in 0..total {
                b.upsert(&format!("i{i}"), &record(&specs[i % specs.len()]));
            }
            let snap = b.commit();
            let mut b = w.begin(&snap);
            for d in &deleted {
                b.delete(&format!("i{}", d.index(total)));
            }
            let snap = b.commit();

            let file = saved(&snap, &w, b"state 7");
            // encoded on one thread: the same bytes
            let counts = w.counts();
            let one = saved_as(&snap, &counts, b"state 7", Encode::OnThisThread, SPILL_AT);
            prop_assert!(one == file);
            // the large blocks written in pieces of a few bytes: the same bytes
            let pieces = saved_as(&snap, &counts, b"state 7", Encode::Parallel, 5);
            prop_assert!(pieces == file);
            let (loaded, mut lw) = reload(&file, b"state 7").unwrap();
            assert_same(&snap, &loaded);
            prop_assert_eq!(lw.errors, w.errors);
            prop_assert_eq!(lw.by_id.len(), w.by_id.len());

            // the same apply on both: new items take the same free numbers
            let apply = |w: &mut IndexWriter, s: &Snapshot| {
                let mut b = w.begin(s);
                for (i, sp) in later.iter().enumerate() {
                    b.upsert(&format!("new{i}"), &record(sp));
                    b.upsert(&format!("i{}", i * 3 % total), &record(sp));
                }
                b.delete("i1");
                b.commit()
            };
            let (s1, s2) = (apply(&mut w, &snap), apply(&mut lw, &loaded));
            prop_assert_eq!(&w.free, &lw.free);
            assert_same(&s1, &s2);
            // counts taken with a snapshot still save that snapshot once the writer
            // has moved on (its text vocabularies, shared and only appended to, may
            // number more tokens by then)
            let later_save = saved_as(&snap, &counts, b"state 7", Encode::OnThisThread, SPILL_AT);
            let (later_loaded, mut llw) = reload(&later_save, b"state 7").unwrap();
            assert_same(&snap, &later_loaded);
            prop_assert_eq!(llw.errors, lw.errors);
            let s3 = apply(&mut llw, &later_loaded);
            prop_assert_eq!(&w.free, &llw.free);
            assert_same(&s1, &s3);
        }
    }

    fn small() -> (Snapshot, IndexWriter) {
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        let s: Spec = (
            vec![1],
            vec![1],
            Some((40.0, -75.0)),
            vec![3],
            Some(2.5),
            vec![0, 5],
            vec![3],
        );
        b.upsert("a", &record(&s));
        b.upsert("b", &Record::default());
        let snap = b.commit();
        (snap, w)
    }

    /// The keyword value (dimension 0) of document `n`, as the address of its bytes.
    fn keyword_at(snap: &Snapshot, n: u32) -> *const u8 {
        match snap.doc(n).and_then(|d| d.value(0)).as_deref() {
            Some(IndexedValue::Strings(l)) => l.as_raw().as_ptr(),
            other => panic!("no keyword value: {other:?}"),
        }
    }

    /// The text value (dimension 5) of document `n`, as the address of its bytes.
    fn text_at(snap: &Snapshot, n: u32) -> *const u8 {
        match snap.doc(n).and_then(|d| d.value(5)).as_deref() {
            Some(IndexedValue::Terms(l)) => l.as_raw().as_ptr(),
            other => panic!("no text value: {other:?}"),
        }
    }

    /// The element list (dimension 1) of document `n`, as the address of its elements.
    fn elements_at(snap: &Snapshot, n: u32) -> *const u32 {
        match snap.doc(n).and_then(|d| d.value(1)).as_deref() {
            Some(IndexedValue::Elements(e)) => e.as_ptr(),
            other => panic!("no elements: {other:?}"),
        }
    }

    /// Documents with equal keyword (or text, or element) values share one copy, as built and as
    /// loaded (where the copies are never made), and an apply after a load shares the
    /// loaded copy.
    #[test]
    fn equal_keyword_values_are_one_copy() {
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        let s: Spec = (vec![1, 2], vec![1], None, vec![], None, vec![0], vec![]);
        let other: Spec = (vec![3], vec![1], None, vec![], None, vec![0], vec![]);
        for i in 0..3 {
            b.upsert(&format!("i{i}"), &record(&s));
        }
        b.upsert("o", &record(&other));
        let snap = b.commit();
        assert_eq!(keyword_at(&snap, 0), keyword_at(&snap, 2));
        assert_ne!(keyword_at(&snap, 0), keyword_at(&snap, 3));

        let (loaded, mut lw) = reload(&saved(&snap, &w, b"h"), b"h").unwrap();
        assert_same(&snap, &loaded);
        assert_eq!(keyword_at(&loaded, 0), keyword_at(&loaded, 1));
        assert_eq!(keyword_at(&loaded, 0), keyword_at(&loaded, 2));
        assert_ne!(keyword_at(&loaded, 0), keyword_at(&snap, 0));
        // every document has the same text and elements: one copy
        assert_eq!(text_at(&snap, 0), text_at(&snap, 3));
        assert_eq!(text_at(&loaded, 0), text_at(&loaded, 3));
        assert_eq!(elements_at(&snap, 0), elements_at(&snap, 3));
        assert_eq!(elements_at(&loaded, 0), elements_at(&loaded, 3));
        let mut b = lw.begin(&loaded);
        b.upsert("new", &record(&s));
        let next = b.commit();
        assert_eq!(keyword_at(&next, 4), keyword_at(&loaded, 0));
    }

    #[test]
    fn another_state_or_format_is_stale() {
        let (snap, w) = small();
        let file = saved(&snap, &w, b"state 1");
        assert!(matches!(reload(&file, b"state 2"), Err(LoadError::Stale)));
        let mut other = file.clone();
        other[8] ^= 0xff; // FORMAT
        assert!(matches!(reload(&other, b"state 1"), Err(LoadError::Stale)));
        assert!(reload(&file, b"state 1").is_ok());
    }

    #[test]
    fn a_damaged_file_is_an_error_never_an_index() {
        let (snap, w) = small();
        let file = saved(&snap, &w, b"h");
        for cut in 0..file.len() {
            assert!(reload(&file[..cut], b"h").is_err(), "truncated at {cut}");
        }
        for at in 0..file.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = file.clone();
                bad[at] ^= bit;
                assert!(reload(&bad, b"h").is_err(), "byte {at} flipped by {bit:#x}");
            }
        }
    }

    /// The contents of a saved file's blocks, after its 12-byte head (each block: its
    /// length, a 4-byte checksum, its contents).
    fn blocks_of(file: &[u8]) -> Vec<Vec<u8>> {
        let mut blocks = Vec::new();
        let mut at = 12;
        while at < file.len() {
            let len = u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
            blocks.push(file[at + 12..at + 12 + len].to_vec());
            at += 12 + len;
        }
        blocks
    }

    /// A postings block says which form follows its head: a frozen form is refused for
    /// a dimension that cannot be frozen, and an unknown form for any.
    #[test]
    fn a_postings_form_must_fit_its_dimension() {
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        for i in 0..8 {
            let s: Spec = (vec![i % 4], vec![], None, vec![], None, vec![], vec![]);
            b.upsert(&format!("i{i}"), &record(&s));
        }
        let snap = b.commit();
        assert!(snap.postings(0).unwrap().frozen.is_some());
        let file = saved(&snap, &w, b"h");
        let blocks = blocks_of(&file);
        // (blocks: header, counts, live set, then the first dimension's postings)
        let frozen = &blocks[3];
        assert!(decode_postings(frozen, true)
            .unwrap()
            .unwrap()
            .frozen
            .is_some());
        assert!(matches!(
            decode_postings(frozen, false),
            Err(Corrupt("postings form"))
        ));
        // the form byte follows the head: present, the documents with a value, and no
        // text fields' figures (a keyword dimension)
        let has_len = u64::from_le_bytes(frozen[1..9].try_into().unwrap()) as usize;
        let form_at = 1 + 8 + has_len + 4;
        assert_eq!(frozen[form_at], 1);
        let mut unknown = frozen.clone();
        unknown[form_at] = 7;
        assert!(matches!(
            decode_postings(&unknown, true),
            Err(Corrupt("postings form"))
        ));
    }

    #[test]
    fn checksummed_but_inconsistent_blocks_are_rejected() {
        // blocks rewritten with valid checksums around wrong contents
        let (snap, w) = small();
        let file = saved(&snap, &w, b"h");
        let blocks = blocks_of(&file);
        let rebuild = |blocks: &[Vec<u8>]| {
            let mut out = file[..12].to_vec();
            for b in blocks {
                write_block(&mut out, b).unwrap();
            }
            out
        };
        assert!(reload(&rebuild(&blocks), b"h").is_ok());
        // the block before the end one is the one chunk: a change in it gives an error
        // or a valid index, never a panic
        let chunk = blocks.len() - 2;
        for i in 0..blocks[chunk].len() {
            let mut b = blocks.clone();
            b[chunk][i] ^= 0x80;
            let _ = reload(&rebuild(&b), b"h");
        }
        let mut b = blocks.clone();
        b[1][16] = 0; // `next` says no documents
        assert!(reload(&rebuild(&b), b"h").is_err());
        // the text dimension's vocabulary (after the header, counts, live documents and
        // six postings and six dictionary blocks: block 15 + 5) with a word fewer: the
        // document's last token number has no word
        let text_vocab = 3 + 2 * 6 + 5;
        let vocab = decode_vocab(&blocks[text_vocab]).unwrap().unwrap();
        let words = vocab.read().all().to_vec();
        assert_eq!(words.len(), 3, "{words:?}");
        let shorter = Numbering::from_strings(words[..2].to_vec());
        let mut b = blocks.clone();
        b[text_vocab] = encode_vocab(shorter.as_ref());
        assert!(matches!(
            reload(&rebuild(&b), b"h"),
            Err(LoadError::Corrupt(Corrupt("token numbers")))
        ));
        // two documents with one id ("b" renamed "a"; with the same number of ids as
        // live documents, only the lookup of each id before it is listed catches it)
        let mut b = blocks.clone();
        let named_b: &[u8] = &[1, 1, 0, 0, 0, 0, 0, 0, 0, b'b'];
        let at = (b[chunk].windows(named_b.len()))
            .position(|w| w == named_b)
            .expect("document b in the chunk block");
        b[chunk][at + named_b.len() - 1] = b'a';
        assert!(matches!(
            reload(&rebuild(&b), b"h"),
            Err(LoadError::Corrupt(Corrupt("document numbers")))
        ));
        // a word twice, or a vocabulary for a dimension that is not text
        let mut e = Enc::default();
        e.u8(1);
        e.u32(3);
        [&words[0], &words[1], &words[0]]
            .iter()
            .for_each(|w| e.bytes(w.as_bytes()));
        let mut b = blocks.clone();
        b[text_vocab] = e.0;
        assert!(reload(&rebuild(&b), b"h").is_err());
        let mut b = blocks.clone();
        b[text_vocab - 1] = b[text_vocab].clone();
        assert!(matches!(
            reload(&rebuild(&b), b"h"),
            Err(LoadError::Corrupt(Corrupt("vocabulary")))
        ));
        // a key listed with no documents (an apply removes such a key): the first
        // dimension's postings (block 3) with its first key's set emptied
        let keyword = decode_postings(&blocks[3], false).unwrap().unwrap();
        assert!(!keyword.map.is_empty());
        let emptied = keyword.map.iter().enumerate().map(|(i, (k, b))| {
            let set = if i == 0 {
                std::borrow::Cow::Owned(RoaringBitmap::new())
            } else {
                b.get().bitmap()
            };
            (&k[..], set)
        });
        let mut b = blocks.clone();
        let mut file = io::Cursor::new(Vec::new());
        let mut out = StreamedBlock::begin(&mut file, SPILL_AT).unwrap();
        encode_postings_of(&keyword, keyword.map.len(), emptied, &mut out).unwrap();
        out.end().unwrap();
        b[3] = file.into_inner()[12..].to_vec();
        assert!(matches!(
            reload(&rebuild(&b), b"h"),
            Err(LoadError::Corrupt(Corrupt("an empty postings set")))
        ));
    }
}
