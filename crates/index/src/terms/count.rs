//! Every term of a whole index counted from its documents (start-up, a bulk load into an
//! empty index, new dimensions): per dimension, tasks of `CHUNKS_A_TASK` chunks each
//! counting document frequencies, joined, and the dictionary built from the sum.

use std::sync::Arc;

use discern_dimensions::{IndexedValue, ValueRef};
use rayon::prelude::*;

use super::{each_row_term, has_terms, TermDict, TermDicts};
use crate::numbering::Numbered;
use crate::{FastMap, Snapshot};

/// Counts every term of the snapshot from its documents (start-up, new dimensions).
pub fn build_dicts(snap: &Snapshot) -> TermDicts {
    let dims = &snap.dims;
    // (the dimensions side by side: one's dictionary is built while another's terms
    // are counted)
    let dicts = dims
        .dims
        .par_iter()
        .enumerate()
        .map(|(di, d)| {
            if !has_terms(&d.kind) {
                return None;
            }
            let vocab = snap.vocab(di).map(|v| v.read());
            let vocab = vocab.as_deref();
            let counts = snap
                .chunks()
                .par_chunks(CHUNKS_A_TASK)
                .enumerate()
                .map(|(at, chunks)| {
                    let mut acc = TermCounts::new(vocab);
                    for (c, chunk) in chunks.iter().enumerate() {
                        let c = at * CHUNKS_A_TASK + c;
                        for (i, doc) in chunk.docs.iter().enumerate() {
                            let Some(doc) = doc else { continue };
                            acc.count((c * crate::CHUNK + i) as u32, doc.value(di), vocab);
                        }
                    }
                    acc
                })
                .reduce(|| TermCounts::new(vocab), TermCounts::join);
            Some(Arc::new(TermDict::from_counts(
                counts.into_named(vocab),
                snap.generation,
            )))
        })
        .collect();
    Arc::new(dicts)
}

/// Chunks whose terms one task of `build_dicts` counts.
const CHUNKS_A_TASK: usize = 32;

/// Vocabularies larger than this are counted by name, not in an array by number (an
/// array a task: a million numbers are 8 MB each). Tests count their small vocabularies
/// both ways.
const MAX_COUNTED_BY_NUMBER: usize = if cfg!(test) { 8 } else { 1 << 20 };

/// Document frequencies over some documents: per term, (documents, last document
/// counted), so that a term counts once per document without sorting each document's
/// terms. A text value's terms are counted by vocabulary number in an array (hashing
/// each token's name was most of counting a bulk load's text), others by name.
struct TermCounts<'a> {
    by_number: Vec<(u32, u32)>,
    by_name: FastMap<&'a str, (u32, u32)>,
}

impl<'a> TermCounts<'a> {
    fn new(vocab: Option<&Numbered>) -> TermCounts<'a> {
        let numbers = vocab.map_or(0, |v| v.all().len());
        TermCounts {
            by_number: if numbers <= MAX_COUNTED_BY_NUMBER {
                vec![(0, u32::MAX); numbers]
            } else {
                Vec::new()
            },
            by_name: FastMap::default(),
        }
    }

    fn count(&mut self, doc: u32, v: Option<ValueRef<'a>>, vocab: Option<&'a Numbered>) {
        let once = |e: &mut (u32, u32)| {
            if e.1 != doc {
                *e = (e.0 + 1, doc);
            }
        };
        if let (Some(IndexedValue::Terms(t)), false) = (v.as_deref(), self.by_number.is_empty()) {
            for n in t.iter() {
                if let Some(e) = self.by_number.get_mut(n as usize) {
                    once(e);
                }
            }
            return;
        }
        each_row_term(v, vocab, |t| {
            once(self.by_name.entry(t).or_insert((0, u32::MAX)))
        });
    }

    /// These counts and `other`'s (of other documents).
    fn join(mut self, other: TermCounts<'a>) -> TermCounts<'a> {
        for (a, b) in self.by_number.iter_mut().zip(&other.by_number) {
            a.0 += b.0;
        }
        self.by_name = if self.by_name.len() < other.by_name.len() {
            merge_counts(other.by_name, self.by_name)
        } else {
            merge_counts(self.by_name, other.by_name)
        };
        self
    }

    /// Every term counted, by name, with its document frequency.
    fn into_named(self, vocab: Option<&'a Numbered>) -> impl Iterator<Item = (&'a str, u32)> {
        let numbered = (self.by_number.into_iter().enumerate())
            .filter(|(_, (n, _))| *n > 0)
            .filter_map(move |(i, (n, _))| Some((vocab?.get(i as u32)?, n)));
        // (a term both ways — a text value not held as numbers — counts its sum)
        let mut all = self.by_name;
        for (t, n) in numbered {
            all.entry(t).or_insert((0, u32::MAX)).0 += n;
        }
        all.into_iter().map(|(t, (n, _))| (t, n))
    }
}

fn merge_counts<'a>(
    mut into: FastMap<&'a str, (u32, u32)>,
    from: FastMap<&'a str, (u32, u32)>,
) -> FastMap<&'a str, (u32, u32)> {
    // the two sides counted different documents
    for (k, (n, _)) in from {
        into.entry(k).or_insert((0, u32::MAX)).0 += n;
    }
    into
}
