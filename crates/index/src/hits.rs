//! What an evaluation hands its results to and in what order: a hit (one result), the
//! page sinks a scan offers results to (`Sink`: the best `k`, every doc number, every
//! hit), the counts kept beside a page (`Tally`), and the default order (exact first,
//! relevance descending, id ascending).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use roaring::RoaringBitmap;

use crate::criteria::EvalCtx;
use crate::sort::SortKey;

#[derive(Clone, Debug)]
pub struct Hit {
    pub doc: u32,
    pub id: crate::DocId,
    pub exact: bool,
    pub r: f64,
    /// The id's first bytes (`id_key`): most id comparisons stop here.
    pub id_key: u64,
}

impl Hit {
    /// A hit whose id key is read from the document's row (the reference scan's).
    #[cfg(test)]
    pub(crate) fn new(n: u32, doc: &crate::Doc, exact: bool, r: f64) -> Hit {
        Hit::keyed(n, doc, doc.id_key(), exact, r)
    }

    /// A hit of document `n`, with its `id_key` as its chunk's column gives it.
    pub(crate) fn keyed(n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) -> Hit {
        debug_assert_eq!(id_key, doc.id_key());
        Hit {
            doc: n,
            id: doc.id.clone(),
            exact,
            r,
            id_key,
        }
    }
}

/// The first 8 bytes of an id, zero-padded, big-endian: ordered as the ids are up to
/// those bytes, so equal keys alone need the whole ids compared.
pub(crate) fn id_key(id: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = id.len().min(8);
    b[..n].copy_from_slice(&id.as_bytes()[..n]);
    u64::from_be_bytes(b)
}

pub struct Results {
    /// Every result (`Want::All`, `Want::Sorted`) or the first ones (`Want::Top`).
    pub hits: Vec<Hit>,
    /// Number of results, and of exact ones (also when `hits` holds only the top).
    pub total: usize,
    pub exact_count: usize,
    /// Every result's doc number (`Want::TopAndMatched`).
    pub matched: Option<Matched>,
    pub(crate) ctx: EvalCtx,
}

/// The doc numbers of every result, exact and not: what facets and drillDown count
/// when only a page of hits is kept.
#[derive(Default, Debug, PartialEq)]
pub struct Matched {
    pub exact: RoaringBitmap,
    pub other: RoaringBitmap,
}

impl Matched {
    pub fn of_hits(hits: &[Hit]) -> Matched {
        let mut m = MatchedDocs::default();
        for h in hits {
            m.push(h.doc, h.exact);
        }
        m.into_matched()
    }

    /// Every result.
    pub fn all(&self) -> RoaringBitmap {
        &self.exact | &self.other
    }
}

/// `Matched` while a scan collects it: doc numbers in the order they come.
#[derive(Default)]
struct MatchedDocs {
    exact: Vec<u32>,
    other: Vec<u32>,
}

impl MatchedDocs {
    fn push(&mut self, doc: u32, exact: bool) {
        if exact {
            self.exact.push(doc)
        } else {
            self.other.push(doc)
        }
    }

    fn append(&mut self, mut other: MatchedDocs) {
        self.exact.append(&mut other.exact);
        self.other.append(&mut other.other);
    }

    fn into_matched(mut self) -> Matched {
        // (parts come in doc order: nearly sorted already)
        self.exact.sort_unstable();
        self.other.sort_unstable();
        let set = |docs: Vec<u32>| RoaringBitmap::from_sorted_iter(docs).unwrap_or_default();
        Matched {
            exact: set(self.exact),
            other: set(self.other),
        }
    }
}

/// What `evaluate` returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want<'s> {
    /// Every result, unordered.
    All,
    /// Every result, in the default order.
    Sorted,
    /// The first `n` results in the default order, and the counts.
    Top(usize),
    /// As `Top`, and every result's doc number (`Results::matched`).
    TopAndMatched(usize),
    /// The first `k` results in the order of `keys` (`sort_hits`'s, the default order
    /// breaking ties), and the counts; with `matched`, every result's doc number. Only
    /// the page's hits are made: a `sortBy` over half a million results made them all
    /// (cloning every id) to keep twenty.
    TopBy {
        k: usize,
        keys: &'s [SortKey],
        matched: bool,
    },
}

impl Want<'_> {
    /// The page's length and whether every result's doc number is wanted, for the
    /// top-k forms in the default order.
    pub(crate) fn top(self) -> Option<(usize, bool)> {
        match self {
            Want::Top(k) => Some((k, false)),
            Want::TopAndMatched(k) => Some((k, true)),
            Want::All | Want::Sorted | Want::TopBy { .. } => None,
        }
    }
}

/// What a page sink counts of every result offered, kept or not: the results, the
/// exact ones and, when asked for, every result's doc number (`Results::matched`).
pub(crate) struct Tally {
    total: usize,
    exact: usize,
    matched: Option<MatchedDocs>,
}

impl Tally {
    pub(crate) fn new(matched: bool) -> Tally {
        Tally {
            total: 0,
            exact: 0,
            matched: matched.then(MatchedDocs::default),
        }
    }

    pub(crate) fn add(&mut self, n: u32, exact: bool) {
        self.total += 1;
        self.exact += exact as usize;
        if let Some(m) = &mut self.matched {
            m.push(n, exact);
        }
    }

    /// Another scan's counts (of other documents).
    pub(crate) fn absorb(&mut self, other: Tally) {
        self.total += other.total;
        self.exact += other.exact;
        if let (Some(m), Some(o)) = (&mut self.matched, other.matched) {
            m.append(o);
        }
    }

    /// `hits`, the page in order, with these counts.
    pub(crate) fn into_results(self, hits: Vec<Hit>, ctx: EvalCtx) -> Results {
        Results {
            hits,
            total: self.total,
            exact_count: self.exact,
            matched: self.matched.map(MatchedDocs::into_matched),
            ctx,
        }
    }
}

/// The best `k` hits seen so far (a max-heap whose top is the worst kept), and counts.
pub(crate) struct TopK {
    k: usize,
    /// What a result must beat, known beforehand (`above`).
    floor: Option<(bool, f64)>,
    heap: BinaryHeap<Ranked>,
    tally: Tally,
}

struct Ranked(Hit);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        default_order(&self.0, &other.0)
    }
}

impl TopK {
    pub(crate) fn new(k: usize, collect: bool) -> TopK {
        TopK {
            k,
            floor: None,
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
            tally: Tally::new(collect),
        }
    }

    /// The same, where a result that cannot beat `floor` (the `k`-th best of some of
    /// the documents, say) is known not to be among the best `k`: a scan can leave it
    /// out from the start (`Sink::bar`).
    pub(crate) fn above(mut self, floor: Option<(bool, f64)>) -> TopK {
        self.floor = floor;
        self
    }

    /// Counts a result and keeps it if it is among the best `k`; the id is cloned only
    /// then.
    /// `id_key`: the document's, from its chunk's column (its row is read only when
    /// it is kept, or ties on that key).
    pub(crate) fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        self.tally.add(n, exact);
        if self.heap.len() < self.k {
            self.heap.push(Ranked(Hit::keyed(n, doc, id_key, exact, r)));
            return;
        }
        let Some(worst) = self.heap.peek() else {
            return;
        };
        let w = &worst.0;
        // the document's row (for its id) is read only on a tie
        let better = match w
            .exact
            .cmp(&exact)
            .then_with(|| w.r.partial_cmp(&r).unwrap_or(Ordering::Equal))
        {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => {
                order_parts((exact, r, id_key), (w.exact, w.r, w.id_key), || {
                    (&doc.id, &w.id)
                }) == Ordering::Less
            }
        };
        if better {
            self.heap.pop();
            self.heap.push(Ranked(Hit::keyed(n, doc, id_key, exact, r)));
        }
    }

    /// Both scans' results: the best `k` of them all, and every count (the documents
    /// each scanned are apart).
    pub(crate) fn merge(mut self, other: TopK) -> TopK {
        self.tally.absorb(other.tally);
        for h in other.heap {
            self.offer_hit(h.0);
        }
        self
    }

    /// The id key of the worst hit kept, once `k` are.
    pub(crate) fn worst_id_key(&self) -> Option<u64> {
        let worst = self.heap.peek()?;
        (self.heap.len() == self.k).then_some(worst.0.id_key)
    }

    /// The hits kept, in order, and the counts.
    pub(crate) fn into_results(self, ctx: EvalCtx) -> Results {
        let (hits, tally) = self.into_parts();
        tally.into_results(hits, ctx)
    }

    /// The hits kept, in order.
    pub(crate) fn into_hits(self) -> Vec<Hit> {
        self.into_parts().0
    }

    fn into_parts(self) -> (Vec<Hit>, Tally) {
        let sorted = self.heap.into_sorted_vec();
        (sorted.into_iter().map(|r| r.0).collect(), self.tally)
    }

    fn offer_hit(&mut self, h: Hit) {
        if self.heap.len() < self.k {
            self.heap.push(Ranked(h));
        } else if self
            .heap
            .peek()
            .is_some_and(|w| default_order(&h, &w.0) == Ordering::Less)
        {
            self.heap.pop();
            self.heap.push(Ranked(h));
        }
    }
}

/// What a scan hands every result to, one per parallel part.
pub(crate) trait Sink: Send {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64);
    fn merge(self, other: Self) -> Self;
    /// What a result must beat, in (exactness, relevance), to be kept by `offer`
    /// (`None`: every result is kept). A result that cannot is handed to `count`.
    fn bar(&self) -> Option<(bool, f64)> {
        None
    }
    /// A non-exact result that cannot beat the bar.
    fn count(&mut self, _n: u32) {}
}

impl Sink for TopK {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        TopK::offer(self, n, doc, id_key, exact, r)
    }
    fn merge(self, other: TopK) -> TopK {
        TopK::merge(self, other)
    }
    fn bar(&self) -> Option<(bool, f64)> {
        if self.k == 0 {
            return Some((true, f64::INFINITY));
        }
        if self.heap.len() < self.k {
            return self.floor;
        }
        stronger(self.heap.peek().map(|w| (w.0.exact, w.0.r)), self.floor)
    }
    fn count(&mut self, n: u32) {
        self.tally.add(n, false);
    }
}

/// Every result's doc number, in scan order: only membership counts.
impl Sink for Vec<u32> {
    fn offer(&mut self, n: u32, _: &crate::Doc, _: u64, _: bool, _: f64) {
        self.push(n);
    }
    fn merge(mut self, mut other: Self) -> Self {
        self.append(&mut other);
        self
    }
    fn bar(&self) -> Option<(bool, f64)> {
        Some((true, f64::INFINITY))
    }
    fn count(&mut self, n: u32) {
        self.push(n);
    }
}

impl Sink for Vec<Hit> {
    fn offer(&mut self, n: u32, doc: &crate::Doc, id_key: u64, exact: bool, r: f64) {
        self.push(Hit::keyed(n, doc, id_key, exact, r));
    }
    fn merge(mut self, mut other: Self) -> Self {
        self.append(&mut other);
        self
    }
}

/// The higher of two bars, in the default order (exact above not, then relevance).
pub(crate) fn stronger(a: Option<(bool, f64)>, b: Option<(bool, f64)>) -> Option<(bool, f64)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if (x.0, x.1) >= (y.0, y.1) { x } else { y }),
        (x, None) | (None, x) => x,
    }
}

/// Exact first, then relevance descending, then id ascending.
pub fn default_order(a: &Hit, b: &Hit) -> Ordering {
    order_parts((a.exact, a.r, a.id_key), (b.exact, b.r, b.id_key), || {
        (&a.id, &b.id)
    })
}

/// The default order of two results by their parts: exactness, relevance, id key, then
/// — only when all those tie — their ids (`ids`: reaching a document's id reads its
/// row, a cache miss per document a scan offers).
pub(crate) fn order_parts<'i>(
    a: (bool, f64, u64),
    b: (bool, f64, u64),
    ids: impl FnOnce() -> (&'i str, &'i str),
) -> Ordering {
    b.0.cmp(&a.0)
        .then_with(|| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal))
        .then_with(|| a.2.cmp(&b.2))
        .then_with(|| {
            let (a, b) = ids();
            a.as_bytes().cmp(b.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Comparing id keys first, then whole ids, orders ids as their bytes do.
        #[test]
        fn id_key_then_bytes_is_byte_order(a in "[\\x00-\\x7fé]{0,12}", b in "[\\x00-\\x7fé]{0,12}") {
            let by_key = id_key(&a)
                .cmp(&id_key(&b))
                .then_with(|| a.as_bytes().cmp(b.as_bytes()));
            prop_assert_eq!(by_key, a.as_bytes().cmp(b.as_bytes()));
        }
    }
}
