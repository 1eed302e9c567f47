//! How each part of a saved index is encoded: a document's indexed values, a chunk of
//! documents, a set, a dimension's postings and its vocabulary. Every decode checks
//! lengths, tags and order, so a damaged part is `Corrupt`, never a panic.

use std::io::{self, Seek, Write};
use std::sync::Arc;

use discern_dimensions::{IndexedValue, StrList, TermList};
use roaring::RoaringBitmap;

use super::{Corrupt, Dec, Enc, LoadError, StreamedBlock};
use crate::intern::SharedInterner;
use crate::numbering::Numbering;
use crate::postings::{DimPostings, Frozen, Key, Posting};
use crate::{Chunk, Doc, CHUNK};

const TAG_STRINGS: u8 = 1;
const TAG_INTS: u8 = 2;
const TAG_DOUBLES: u8 = 3;
const TAG_POINTS: u8 = 4;
const TAG_ELEMENTS: u8 = 5;
/// Text as tokens: never written (the index holds text as `Terms`), refused when read.
const TAG_TEXT: u8 = 6;
const TAG_TERMS: u8 = 7;

pub(super) fn encode_value(e: &mut Enc, v: Option<&IndexedValue>) {
    let Some(v) = v else {
        e.u8(0);
        return;
    };
    match v {
        IndexedValue::Strings(s) | IndexedValue::Text(s) => {
            e.u8(if matches!(v, IndexedValue::Text(_)) {
                TAG_TEXT
            } else {
                TAG_STRINGS
            });
            e.bytes(s.as_raw());
        }
        IndexedValue::Terms(t) => {
            e.u8(TAG_TERMS);
            e.bytes(t.as_raw());
        }
        IndexedValue::Int(_) | IndexedValue::Ints(_) => {
            let x = v.ints().unwrap_or_default();
            e.u8(TAG_INTS);
            e.u32(x.len() as u32);
            x.iter().for_each(|&x| e.u64(x as u64));
        }
        IndexedValue::Double(_) | IndexedValue::Doubles(_) => {
            let x = v.doubles().unwrap_or_default();
            e.u8(TAG_DOUBLES);
            e.u32(x.len() as u32);
            x.iter().for_each(|&x| e.u64(x.to_bits()));
        }
        IndexedValue::Points(p) => {
            e.u8(TAG_POINTS);
            e.u32(p.len() as u32);
            for &(lat, lon) in p.iter() {
                e.u64(lat.to_bits());
                e.u64(lon.to_bits());
            }
        }
        IndexedValue::Elements(x) => {
            e.u8(TAG_ELEMENTS);
            e.u32(x.len() as u32);
            x.iter().for_each(|&x| e.u32(x));
        }
    }
}

/// Decodes dimension `dim`'s value, through `interner`; `vocab_len`: per dimension, how
/// many tokens its vocabulary numbers; `elements` is scratch space.
pub(super) fn decode_value(
    d: &mut Dec<'_>,
    dim: usize,
    interner: &SharedInterner,
    vocab_len: &[usize],
    elements: &mut Vec<u32>,
) -> Result<Option<IndexedValue>, Corrupt> {
    let tag = d.u8()?;
    Ok(Some(match tag {
        0 => return Ok(None),
        TAG_STRINGS => {
            let raw = d.bytes()?;
            IndexedValue::Strings(interner.list(dim, raw, || {
                StrList::from_raw(raw).ok_or(Corrupt("string list"))
            })?)
        }
        TAG_TERMS => {
            let raw = d.bytes()?;
            let words = vocab_len.get(dim).copied().unwrap_or(0);
            IndexedValue::Terms(interner.terms(dim, raw, || {
                TermList::from_raw(raw)
                    .filter(|t| t.max().is_none_or(|n| (n as usize) < words))
                    .ok_or(Corrupt("token numbers"))
            })?)
        }
        TAG_INTS => {
            let n = d.count(8)?;
            IndexedValue::from_ints(
                (0..n)
                    .map(|_| d.u64().map(|x| x as i64))
                    .collect::<Result<_, _>>()?,
            )
        }
        TAG_DOUBLES => {
            let n = d.count(8)?;
            IndexedValue::from_doubles(
                (0..n)
                    .map(|_| d.u64().map(f64::from_bits))
                    .collect::<Result<_, _>>()?,
            )
        }
        TAG_POINTS => {
            let n = d.count(16)?;
            IndexedValue::Points(
                (0..n)
                    .map(|_| Ok((f64::from_bits(d.u64()?), f64::from_bits(d.u64()?))))
                    .collect::<Result<Vec<_>, Corrupt>>()?
                    .into(),
            )
        }
        TAG_ELEMENTS => {
            let n = d.count(4)?;
            elements.clear();
            for _ in 0..n {
                elements.push(d.u32()?);
            }
            IndexedValue::Elements(interner.elements(dim, elements))
        }
        _ => return Err(Corrupt("value type")),
    }))
}

pub(super) fn encode_chunk(chunk: &Chunk) -> Vec<u8> {
    let mut e = Enc::default();
    for doc in chunk.docs.iter() {
        match doc {
            None => e.u8(0),
            Some(doc) => {
                e.u8(1);
                e.bytes(doc.id.as_bytes());
                for v in doc.values() {
                    encode_value(&mut e, v.as_deref());
                }
            }
        }
    }
    e.0
}

pub(super) fn decode_chunk(
    b: &[u8],
    dims: usize,
    interner: &SharedInterner,
    vocab_len: &[usize],
) -> Result<Chunk, Corrupt> {
    let mut d = Dec(b);
    let mut docs: Vec<Option<Doc>> = Vec::with_capacity(CHUNK);
    let mut elements = Vec::new();
    for _ in 0..CHUNK {
        if d.u8()? == 0 {
            docs.push(None);
            continue;
        }
        let id: crate::DocId = std::str::from_utf8(d.bytes()?)
            .map_err(|_| Corrupt("item id"))?
            .into();
        let values = (0..dims)
            .map(|dim| decode_value(&mut d, dim, interner, vocab_len, &mut elements))
            .collect::<Result<_, _>>()?;
        docs.push(Some(Doc::new(id, values)));
    }
    d.done()?;
    Ok(Chunk {
        docs: docs.into_iter().collect(),
        ..Default::default()
    })
}

pub(super) fn encode_bitmap(e: &mut Enc, b: &RoaringBitmap) {
    e.u64(b.serialized_size() as u64);
    // writing into a Vec cannot fail
    let _ = b.serialize_into(&mut e.0);
}

pub(super) fn decode_bitmap(d: &mut Dec<'_>) -> Result<RoaringBitmap, Corrupt> {
    RoaringBitmap::deserialize_from(d.bytes()?).map_err(|_| Corrupt("bitmap"))
}

pub(super) fn write_postings<W: Write + Seek>(
    p: Option<&DimPostings>,
    w: &mut W,
    spill_at: usize,
) -> io::Result<()> {
    let mut out = StreamedBlock::begin(w, spill_at)?;
    match p {
        None => out.e.u8(0),
        Some(p) => match &p.frozen {
            Some(f) => encode_frozen(p, f, &mut out)?,
            None => {
                let sets = p.entries().map(|(k, b)| (k, b.bitmap()));
                encode_postings_of(p, p.len(), sets, &mut out)?;
            }
        },
    }
    out.end()
}

/// The forms of a postings block's rest, after its head: every key with its set (a map
/// dimension's)...
const POSTINGS_ENTRIES: u8 = 0;
/// ...or a frozen dimension's FST as it is, the sets its outputs index and its overlay.
const POSTINGS_FROZEN: u8 = 1;

/// The head of `p`'s postings block: the documents with a value and the text fields'
/// figures, then which form the rest takes.
fn encode_postings_head(e: &mut Enc, p: &DimPostings, form: u8) {
    e.u8(1);
    encode_bitmap(e, &p.has);
    e.u32(p.field_stats.len() as u32);
    for &(tokens, docs) in &p.field_stats {
        e.u64(tokens);
        e.u64(docs);
    }
    e.u8(form);
}

/// `p`'s postings block with `sets` (`n` keys and their documents, in key order) for its
/// map's.
pub(super) fn encode_postings_of<'a, W: Write + Seek>(
    p: &DimPostings,
    n: usize,
    sets: impl Iterator<Item = (impl AsRef<[u8]>, std::borrow::Cow<'a, RoaringBitmap>)>,
    out: &mut StreamedBlock<'_, W>,
) -> io::Result<()> {
    encode_postings_head(&mut out.e, p, POSTINGS_ENTRIES);
    out.e.u32(n as u32);
    for (k, b) in sets {
        out.e.bytes(k.as_ref());
        encode_bitmap(&mut out.e, &b);
        out.spill()?;
    }
    Ok(())
}

/// `p`'s postings block, its postings frozen as `f`.
fn encode_frozen<W: Write + Seek>(
    p: &DimPostings,
    f: &Frozen,
    out: &mut StreamedBlock<'_, W>,
) -> io::Result<()> {
    let (fst, shared, over) = f.parts();
    encode_postings_head(&mut out.e, p, POSTINGS_FROZEN);
    out.e.bytes(fst);
    out.spill()?;
    out.e.u32(shared.len() as u32);
    for s in shared {
        encode_bitmap(&mut out.e, &s.get().bitmap());
        out.spill()?;
    }
    out.e.u32(over.len() as u32);
    for (k, s) in over {
        out.e.bytes(k);
        match s {
            None => out.e.u8(0),
            Some(s) => {
                out.e.u8(1);
                encode_bitmap(&mut out.e, &s.get().bitmap());
            }
        }
        out.spill()?;
    }
    Ok(())
}

/// A dimension's postings block (`write_postings`); `freezable`: `postings::freezable`
/// of its dimension.
pub(super) fn decode_postings(
    b: &[u8],
    freezable: bool,
) -> Result<Option<Arc<DimPostings>>, Corrupt> {
    let mut d = Dec(b);
    if d.u8()? == 0 {
        d.done()?;
        return Ok(None);
    }
    let has = Arc::new(decode_bitmap(&mut d)?);
    let n = d.count(16)?;
    let field_stats = (0..n)
        .map(|_| Ok((d.u64()?, d.u64()?)))
        .collect::<Result<_, Corrupt>>()?;
    match d.u8()? {
        POSTINGS_ENTRIES => {}
        POSTINGS_FROZEN if freezable => {
            let frozen = decode_frozen(&mut d)?;
            d.done()?;
            return Ok(Some(Arc::new(DimPostings {
                has,
                field_stats,
                frozen: Some(frozen),
                ..DimPostings::default()
            })));
        }
        _ => return Err(Corrupt("postings form")),
    }
    let n = d.count(16)?;
    // (keys lent from the block: a frozen dimension's are never boxed)
    let mut entries: Vec<(&[u8], Posting)> = Vec::with_capacity(n);
    for _ in 0..n {
        let k = d.bytes()?;
        if entries.last().is_some_and(|(prev, _)| *prev >= k) {
            return Err(Corrupt("postings keys out of order"));
        }
        let docs = decode_posting(&mut d)?;
        entries.push((k, docs));
    }
    d.done()?;
    Ok(Some(Arc::new(DimPostings {
        has,
        field_stats,
        ..DimPostings::of_entries(entries, freezable)
    })))
}

/// A key's documents: a set, never empty (an apply removes a key without documents).
fn decode_posting(d: &mut Dec<'_>) -> Result<Posting, Corrupt> {
    Posting::of(decode_bitmap(d)?).ok_or(Corrupt("an empty postings set"))
}

/// The rest of a frozen dimension's postings block (`encode_frozen`).
fn decode_frozen(d: &mut Dec<'_>) -> Result<Frozen, Corrupt> {
    let fst = d.bytes()?.to_vec();
    let n = d.count(8)?;
    let shared = (0..n)
        .map(|_| decode_posting(d))
        .collect::<Result<Vec<_>, _>>()?;
    let n = d.count(9)?;
    let over = (0..n)
        .map(|_| {
            let k: Key = d.bytes()?.into();
            let p = match d.u8()? {
                0 => None,
                1 => Some(decode_posting(d)?),
                _ => return Err(Corrupt("an overlay entry")),
            };
            Ok((k, p))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Frozen::from_parts(fst, shared, over).map_err(Corrupt)
}

/// A dimension's vocabulary block (`decode_vocab`): its words in number order.
pub(super) fn encode_vocab(v: Option<&Numbering>) -> Vec<u8> {
    let mut e = Enc::default();
    match v {
        None => e.u8(0),
        Some(v) => {
            e.u8(1);
            let v = v.read();
            e.u32(v.all().len() as u32);
            v.all().iter().for_each(|s| e.bytes(s.as_bytes()));
        }
    }
    e.0
}

/// A dimension's vocabulary block: `None` for a dimension that has none.
pub(super) fn decode_vocab(b: &[u8]) -> Result<Option<Arc<Numbering>>, LoadError> {
    let mut d = Dec(b);
    if d.u8()? == 0 {
        d.done()?;
        return Ok(None);
    }
    let n = d.count(8)?;
    let mut strings: Vec<Arc<str>> = Vec::with_capacity(n);
    for _ in 0..n {
        let s = std::str::from_utf8(d.bytes()?).map_err(|_| Corrupt("vocabulary"))?;
        strings.push(s.into());
    }
    d.done()?;
    let numbering = Numbering::from_strings(strings).ok_or(Corrupt("vocabulary"))?;
    Ok(Some(Arc::new(numbering)))
}
