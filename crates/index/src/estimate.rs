//! The index's size, estimated for metrics and logs.

use discern_dimensions::Slot;

use crate::columns::ChunkCols;
use crate::{doc_at, Doc, DocHead, Snapshot, CHUNK};

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

impl Snapshot {
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
    pub(crate) fn rows_bytes_sampled(&self) -> Option<usize> {
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

    pub(crate) fn doc_bytes(d: &Doc) -> usize {
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
