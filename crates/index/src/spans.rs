//! Each numeric dimension's observed span (its smallest and largest value), which a
//! request's default scale reads: found once per snapshot, on first use.

use std::sync::{Arc, OnceLock};

use discern_dimensions::Dimensions;
use rayon::prelude::*;

use crate::{columns, exact, postings, Snapshot};

/// Documents `Snapshot::observed_span` reads from a numeric dimension's extreme buckets
/// before it asks the chunks' columns instead.
const SPAN_DOCS: u64 = 4096;

/// Per dimension, its values' smallest and largest once found (`None`: it holds none).
pub(crate) type Spans = Arc<[OnceLock<Option<(f64, f64)>>]>;

/// A span cache for `dims`, every dimension's span not yet found.
pub(crate) fn unknown_spans(dims: &Dimensions) -> Spans {
    dims.dims.iter().map(|_| OnceLock::new()).collect()
}

impl Snapshot {
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
    pub(crate) fn span_from_columns(&self, dim: usize) -> Option<(f64, f64)> {
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
    pub(crate) fn span_from_postings(&self, dim: usize, budget: u64) -> Option<Option<(f64, f64)>> {
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
}
