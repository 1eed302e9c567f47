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
        spans: crate::spans::unknown_spans(&dims),
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
mod tests;
