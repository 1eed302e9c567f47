//! Requests whose results are exactly a set of documents, all exact and all of one
//! relevance: every top-level criterion a leaf whose exact documents the postings name
//! (has-a-value, keyword, tree/ordered/mutex; numeric intervals and geo distances up to
//! the buckets or grid cells they cut, whose documents the criterion's own rule decides)
//! and whose other documents are out — culled with relevance 0, beyond `cullDistance`,
//! or left out by `exactMatchesOnly`. Then the results are the intersection of the
//! criteria's exact sets, every one of them gets Σ w·exactRelevance / Σ w, and the
//! default order is the id order: no document is scored. `from_set` turns the set into
//! `Results` (the first page by id, skipping chunks); the evaluation property tests
//! (`candidates.rs`) hold it equal, to the bit, to an item-by-item scan.

use rayon::prelude::*;
use roaring::{MultiOps, RoaringBitmap};

use crate::candidates::{element_lists, numeric_buckets, within_cells};
use crate::columns::ChunkCols;
use crate::criteria::{Criterion, EvalCtx, ItemRef, Leaf, Matcher, Node, WeightedMean};
use crate::geo::{GeoRef, Unit, FLOOR_SLACK};
use crate::hits::{default_order, Hit, Matched, Results, Sink, TopK, Want};
use crate::postings::{key_cell, union, DimPostings, PostingRef, CELL_DEG, NUMERIC_MANTISSA_BITS};
use crate::sort::SortTop;
use crate::{Doc, Snapshot};
use discern_dimensions::{DimensionKind, Interval};

/// Every result of `criteria` (prepared) and the relevance each one has, when the
/// results are exactly a set of exact documents of one relevance; `None` when the
/// criteria must be scored document by document.
pub(crate) fn exact_results(
    snap: &Snapshot,
    criteria: &[Criterion],
    ctx: &EvalCtx,
    exact_only: bool,
) -> Option<(RoaringBitmap, f64)> {
    let mut mean = WeightedMean::default();
    let mut leaves: Vec<&Leaf> = Vec::with_capacity(criteria.len());
    let mut culled_all = false;
    for c in criteria {
        let Node::Leaf(leaf) = &c.node else {
            return None;
        };
        if c.exact_match || leaf.null_exact {
            return None; // exact documents of different relevances, or nulls exact
        }
        // every document this criterion does not find exact must be out: culled, or
        // (the only criterion, weighing) of relevance 0 and so not a result
        let alone = criteria.len() == 1 && c.weight > 0.0;
        if !(exact_only || (c.cull || alone) && others_score_zero(leaf)) {
            return None;
        }
        mean.add(c.weight, leaf.exact_relevance());
        leaves.push(leaf);
        culled_all |= c.cull && leaf.dim.is_some() && leaf.exact_rel == 0.0;
    }
    if culled_all {
        return Some((RoaringBitmap::new(), 0.0));
    }
    let out = exact_intersection(snap, &leaves, ctx, None)?;
    // (1 when every weight is 0, or there are no criteria)
    Some((out, mean.value()))
}

/// The documents that every one of `leaves` finds exact and does not cull (with a value:
/// `nullExactMatch` must be false), among `within` (every live document when `None`);
/// `None` when a leaf's exact documents are not named by the postings.
///
/// The leaves are taken smallest first (by the size of the postings they read). A leaf
/// whose exact set is one posting list is intersected with it; one whose set is a union
/// of many lists (a state's counties and cities, a date range's buckets, grid cells) is
/// united and intersected only while the documents left are many: once they are few
/// beside the postings the union would read, each one left is checked by the leaf's
/// rule instead (uniting a few hundred thousand documents to keep a few hundred of them
/// was most of an exact request's time).
pub(crate) fn exact_intersection(
    snap: &Snapshot,
    leaves: &[&Leaf],
    ctx: &EvalCtx,
    within: Option<&RoaringBitmap>,
) -> Option<RoaringBitmap> {
    let mut plans: Vec<(Volume, &Leaf, usize, &DimPostings)> = Vec::with_capacity(leaves.len());
    for leaf in leaves {
        // (`{"dimension": ""}` finds every item exact)
        if let Some(dim) = leaf.dim {
            // (postings not built yet: scored instead)
            let post = snap.postings(dim)?;
            plans.push((volume(leaf, post)?, leaf, dim, post));
        }
    }
    plans.sort_by_key(|(v, ..)| v.docs);
    let mut out: Option<RoaringBitmap> = within.cloned();
    // sets whose postings leave documents for the rule to decide: checked last, on the
    // documents every other criterion kept
    let mut unsure: Vec<Exact<'_>> = Vec::new();
    for (v, leaf, dim, post) in plans {
        let mut cut_to = None;
        if let Some(o) = &out {
            if o.is_empty() {
                break;
            }
            match way(&v, !v.one_list && !leaf.null_exact, o.len()) {
                Way::Rule => {
                    out = Some(members_exact_on(snap, leaf, ctx, o));
                    continue;
                }
                Way::Cut => cut_to = Some(o),
                Way::Unite => {}
            }
        }
        let mut s = exact_set(snap, dim, leaf, post, cut_to)?;
        let cut_down = cut_to.is_some();
        let maybe = match &s.unsure {
            Some(u) => &s.sure | &u.docs,
            None => std::mem::take(&mut s.sure),
        };
        out = Some(match out {
            Some(o) if !cut_down => o & maybe,
            _ => maybe,
        });
        if s.unsure.is_some() {
            unsure.push(s);
        }
    }
    let mut out = out.unwrap_or_else(|| snap.live_docs().clone());
    // then the documents left that a criterion's postings cannot decide, by its rule
    for s in &unsure {
        if let Some(u) = &s.unsure {
            let check = (&out & &u.docs) - &s.sure;
            if !check.is_empty() {
                out -= &check - members_exact_on(snap, u.leaf, ctx, &check);
            }
        }
    }
    Some(out)
}

/// What a leaf's exact set costs to make from the postings: `docs`, the documents of the
/// posting lists it reads (a bound on its size), `work`, what uniting them costs (in
/// array elements merged: see `union_work`), and whether it is one list as it stands
/// (nothing to unite).
struct Volume {
    docs: u64,
    work: u64,
    one_list: bool,
}

/// How a leaf narrows the documents left (`left` of them) once another has made them:
/// by its rule on each of them (`rule_ok`: a leaf of more than one list whose rule
/// decides nulls as its postings do), by cutting each of its lists down to them before
/// uniting what is left of them, or by uniting its lists whole and intersecting.
enum Way {
    Rule,
    Cut,
    Unite,
}

fn way(v: &Volume, rule_ok: bool, left: u64) -> Way {
    if cfg!(test) {
        // by thirds in tests, so that the property tests take every way (cutting
        // several lists too: `exact_set` does that right, should the costs change)
        return match left % 3 {
            0 if rule_ok => Way::Rule,
            1 => Way::Cut,
            _ if v.one_list => Way::Cut,
            _ => Way::Unite,
        };
    }
    // A rule check costs about as much as merging `RULE_CHECK_COST` array elements into
    // a union. A single list is cut down rather than copied whole; several are united
    // whole: cutting each one down first (each cut a new bitmap, then their union) was
    // slower on the benchmark's requests even where the documents left were far fewer
    // than the lists' elements (exact class, best of 7: 69 -> 78 ms in all).
    if rule_ok && left.saturating_mul(RULE_CHECK_COST) < v.work {
        Way::Rule
    } else if v.one_list {
        Way::Cut
    } else {
        Way::Unite
    }
}

/// Checking a document by a leaf's rule (its chunk's column, the rule) costs about as
/// much as merging this many array elements into a union.
const RULE_CHECK_COST: u64 = 24;

/// What uniting `b` into a union costs, in array elements merged: an array container
/// is merged an element at a time, a bitset container a 1,024-word block at a time.
fn union_work(b: PostingRef) -> u64 {
    let PostingRef::Many(b) = b else {
        return 1;
    };
    let s = b.statistics();
    s.n_values_array_containers as u64
        + 128 * s.n_bitset_containers as u64
        + s.n_bytes_run_containers / 2
}

/// The postings `exact_set` reads for `leaf`; `None` where it gives up.
fn volume(leaf: &Leaf, post: &DimPostings) -> Option<Volume> {
    let lists = |sets: &mut dyn Iterator<Item = PostingRef>| {
        sets.fold((0u64, 0u64, 0usize), |(docs, work, n), b| {
            (docs + b.len(), work + union_work(b), n + 1)
        })
    };
    let one = |b: &RoaringBitmap| Volume {
        docs: b.len(),
        work: 0,
        one_list: true,
    };
    Some(match &leaf.matcher {
        Matcher::Has => one(&post.has),
        Matcher::Keyword {
            docs: Some((holding, _)),
            ..
        } => one(holding),
        Matcher::Keyword { docs: None, .. } => return None,
        Matcher::Elements { only_not, .. } => {
            let (wanted, excluded) = element_lists(leaf, post)?;
            let excluded = lists(&mut excluded.into_iter());
            let wanted = if *only_not {
                (post.has.len(), 0, 1)
            } else {
                lists(&mut wanted.into_iter())
            };
            Volume {
                docs: wanted.0,
                work: wanted.1 + excluded.1,
                one_list: wanted.2 <= 1 && excluded.2 == 0,
            }
        }
        Matcher::Numeric { set, .. } => {
            let (docs, work, _) =
                lists(&mut numeric_buckets(post, set).into_iter().map(|(_, b)| b));
            Volume {
                docs,
                work,
                one_list: false,
            }
        }
        Matcher::Geo { .. } => {
            let cells = near_cells(leaf, post)?;
            let (docs, work, _) = lists(&mut cells.into_iter().map(|(_, b)| b));
            Volume {
                docs,
                work,
                one_list: false,
            }
        }
        Matcher::Text(_) => return None,
    })
}

/// Whether every document `leaf` does not find exact gets relevance 0 from it (so that
/// `cull` drops it) or is dropped by its `cullDistance`: nulls by `nullRelevance`, others
/// by a closeness that is always 0, a `fuzzyRelevance` of 0, or a `cullDistance` no
/// farther than `exactDistance` (the same rounded distance decides both).
pub(crate) fn others_score_zero(leaf: &Leaf) -> bool {
    leaf.null_rel == 0.0
        && match &leaf.matcher {
            Matcher::Has | Matcher::Keyword { .. } => true,
            Matcher::Elements { tree, ordered, .. } => {
                leaf.fuzzy_rel == 0.0 || (!*tree && !*ordered)
            }
            Matcher::Numeric { .. } => leaf.fuzzy_rel == 0.0,
            Matcher::Geo { exact, cull, .. } => {
                leaf.fuzzy_rel == 0.0 || cull.is_some_and(|c| c <= *exact)
            }
            Matcher::Text(_) => false,
        }
}

/// The documents a criterion finds exact: `sure`, and those of `unsure` its rule finds
/// exact.
struct Exact<'a> {
    sure: RoaringBitmap,
    unsure: Option<Unsure<'a>>,
}

/// Documents the postings cannot decide (in numeric buckets an interval cuts, in geo grid
/// cells near the reference), and the criterion whose rule decides them.
struct Unsure<'a> {
    docs: RoaringBitmap,
    leaf: &'a Leaf,
}

impl From<RoaringBitmap> for Exact<'_> {
    fn from(sure: RoaringBitmap) -> Self {
        Exact { sure, unsure: None }
    }
}

/// The documents `leaf` finds exact (with a value: nulls are not, as `nullExactMatch` is
/// false), among `within` when given (only those are wanted: each list is cut down to
/// them before any union); `None` for matchers the postings cannot say exactly.
fn exact_set<'a>(
    snap: &Snapshot,
    dim: usize,
    leaf: &'a Leaf,
    post: &DimPostings,
    within: Option<&RoaringBitmap>,
) -> Option<Exact<'a>> {
    let one = |b: &RoaringBitmap| within.map_or_else(|| b.clone(), |w| w & b);
    Some(match &leaf.matcher {
        Matcher::Has => one(&post.has).into(),
        // (`prepare` has made the keyword's postings unions)
        Matcher::Keyword {
            values,
            docs: Some((holding, excluding)),
            ..
        } => if values.is_empty() {
            one(&post.has) - excluding
        } else {
            one(holding) - excluding
        }
        .into(),
        Matcher::Keyword { docs: None, .. } => return None,
        Matcher::Elements { only_not, .. } => {
            let (wanted, excluded) = element_lists(leaf, post)?;
            let excluded = unite(excluded, within);
            let wanted = if *only_not {
                one(&post.has)
            } else {
                unite(wanted, within)
            };
            (wanted - excluded).into()
        }
        Matcher::Numeric { set, .. } => {
            let whole = match &snap.dims.dims[dim].kind {
                DimensionKind::Numeric(spec) => spec.whole_numbers(),
                _ => true,
            };
            let (sure, cut) = split_buckets(post, set, whole, within);
            Exact {
                sure,
                unsure: Some(Unsure { docs: cut, leaf }),
            }
        }
        Matcher::Geo {
            reference,
            exact,
            cull,
            unit,
            ..
        } => {
            // the documents of cells wholly within the distance are exact (and kept)
            // without a distance each: a 25-mile circle holds dozens of whole cells
            let limit = exact.min(cull.unwrap_or(f64::INFINITY));
            let (inside, near): (Vec<_>, Vec<_>) =
                near_cells(leaf, post)?.into_iter().partition(|(k, _)| {
                    reference
                        .single_point()
                        .is_some_and(|p| cell_within(k, p, limit, reference, *unit))
                });
            Exact {
                sure: unite(inside.into_iter().map(|(_, b)| b), within),
                unsure: Some(Unsure {
                    docs: unite(near.into_iter().map(|(_, b)| b), within),
                    leaf,
                }),
            }
        }
        Matcher::Text(_) => return None,
    })
}

/// The union of `lists`, or of their documents among `within` when given.
fn unite<'a>(
    lists: impl IntoIterator<Item = PostingRef<'a>>,
    within: Option<&RoaringBitmap>,
) -> RoaringBitmap {
    match within {
        None => union(lists),
        Some(w) => lists.into_iter().map(|b| b.and(w)).union(),
    }
}

/// The postings of the grid cells holding every document a geo `leaf` may find exact;
/// `None` for another leaf, or where `within_cells` gives up.
fn near_cells<'p>(leaf: &Leaf, post: &'p DimPostings) -> Option<Vec<(&'p [u8], PostingRef<'p>)>> {
    let Matcher::Geo {
        reference,
        exact,
        iso,
        unit,
        ..
    } = &leaf.matcher
    else {
        return None;
    };
    // (an iso step rounds distances down by less than one step)
    within_cells(post, &reference.boxes(), exact + iso.unwrap_or(0.0), *unit)
}

/// Whether every place in the grid cell keyed `key` is within `limit` of `point` (the
/// whole of `reference`), by the rule's distance. The farthest place of a cell spanning
/// less than a quarter turn of longitude from the point is one of its corners: along a
/// parallel the distance grows with the longitude difference, and along a meridian its
/// cosine is `R cos(φ − α)`, highest at one latitude, so the distance is largest at an
/// end. The corners are taken a hair outside the cell, and the distance a millionth
/// short of `limit` (far above the rounding of any distance computed).
fn cell_within(key: &[u8], point: (f64, f64), limit: f64, reference: &GeoRef, unit: Unit) -> bool {
    let Some((row, col)) = key_cell(key) else {
        return false;
    };
    let (row, col) = (row as f64, col as f64);
    const PAD: f64 = 1e-9;
    let (lat0, lon0) = (row * CELL_DEG - 90.0 - PAD, col * CELL_DEG - 180.0 - PAD);
    let (lat1, lon1) = (lat0 + CELL_DEG + 2.0 * PAD, lon0 + CELL_DEG + 2.0 * PAD);
    if lat0 < -90.0
        || lat1 > 90.0
        || (lon0 - point.1).abs() >= 90.0
        || (lon1 - point.1).abs() >= 90.0
    {
        return false;
    }
    let within = limit * (1.0 - FLOOR_SLACK);
    [(lat0, lon0), (lat0, lon1), (lat1, lon0), (lat1, lon1)]
        .iter()
        .all(|&(la, lo)| reference.distance(la, lo, unit) <= within)
}

/// The smallest and largest double whose bucket is `key` (`numeric_key` inverted).
pub(crate) fn bucket_extremes(key: &[u8]) -> Option<(f64, f64)> {
    let k = u32::from_be_bytes(key.try_into().ok()?) as u64;
    let shift = 52 - NUMERIC_MANTISSA_BITS;
    let from_ordered = |o: u64| match f64::from_bits(if o >> 63 == 1 { o & !(1 << 63) } else { !o })
    {
        // -0.0 is keyed with 0.0: the bucket below ends at the largest negative double
        x if x == 0.0 && x.is_sign_negative() => -f64::from_bits(1),
        x => x,
    };
    let (a, b) = (
        from_ordered(k << shift),
        from_ordered(k << shift | ((1 << shift) - 1)),
    );
    (!a.is_nan() && !b.is_nan()).then_some((a.min(b), a.max(b)))
}

/// The documents with a value in `set` (among `within` when given), from the postings:
/// those of the buckets inside it, and those of the buckets it cuts (whose values must
/// be checked). With `whole` (values are whole numbers) a bucket is inside when its
/// whole numbers are.
fn split_buckets(
    post: &DimPostings,
    set: &Interval,
    whole: bool,
    within: Option<&RoaringBitmap>,
) -> (RoaringBitmap, RoaringBitmap) {
    let (inside, cut): (Vec<_>, Vec<_>) =
        numeric_buckets(post, set).into_iter().partition(|(k, _)| {
            bucket_extremes(k).is_some_and(|(a, b)| {
                let (a, b) = if whole { (a.ceil(), b.floor()) } else { (a, b) };
                // (a bucket holding no whole number holds no document)
                a > b || set.contains(a) && set.contains(b)
            })
        });
    let union =
        |buckets: Vec<(&[u8], PostingRef)>| unite(buckets.into_iter().map(|(_, b)| b), within);
    (union(inside), union(cut))
}

/// The members of `docs` that `leaf`'s rule finds exact.
fn members_exact_on(
    snap: &Snapshot,
    leaf: &Leaf,
    ctx: &EvalCtx,
    docs: &RoaringBitmap,
) -> RoaringBitmap {
    fn members(
        snap: &Snapshot,
        leaf: &Leaf,
        ctx: &EvalCtx,
        docs: impl Iterator<Item = u32>,
    ) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        for_each_doc(snap, docs, |n, doc, cols| {
            let o = leaf.eval(&ItemRef { doc, n, cols }, ctx);
            // (exact but beyond a `cullDistance` shorter than `exactDistance`: dropped)
            if o.exact && !o.culled {
                let _ = out.try_push(n); // ascending: appended
            }
        });
        out
    }
    if docs.len() < PARALLEL_CHECKS {
        return members(snap, leaf, ctx, docs.iter());
    }
    // (a wide geo reference leaves tens of thousands of documents to check: on all
    // cores, in ascending runs whose results are disjoint)
    let all: Vec<u32> = docs.iter().collect();
    all.par_chunks(PARALLEL_CHECKS as usize / 4)
        .map(|part| members(snap, leaf, ctx, part.iter().copied()))
        .reduce(RoaringBitmap::new, |a, b| a | b)
}

/// Documents to check by rule from which the check is split across cores (few in
/// tests, so that the property tests check the split).
const PARALLEL_CHECKS: u64 = if cfg!(test) { 8 } else { 16_384 };

/// Calls `f` with each of `docs` (ascending) that holds a document: its number, the
/// document, and its chunk's columns with its position there (each chunk looked up once).
fn for_each_doc<'s>(
    snap: &'s Snapshot,
    docs: impl Iterator<Item = u32>,
    mut f: impl FnMut(u32, &'s Doc, Option<(&'s ChunkCols, usize)>),
) {
    let (mut chunk_no, mut chunk, mut cols) = (usize::MAX, None, None);
    for n in docs {
        let (c, i) = (n as usize / crate::CHUNK, n as usize % crate::CHUNK);
        if c != chunk_no {
            chunk_no = c;
            chunk = snap.chunks().get(c);
            // (columns are read where built, not built for the few documents a set
            // check or a page visits: after an apply, the chunks it copied have none)
            cols = snap.built_chunk_cols(c);
        }
        if let Some(Some(doc)) = chunk.and_then(|ch| ch.docs.get(i)) {
            f(n, doc, cols.map(|cc| (cc, i)));
        }
    }
}

/// A document's `Doc::id_key`, from its chunk's column when there is one.
pub(crate) fn id_key(doc: &Doc, cols: Option<(&ChunkCols, usize)>) -> u64 {
    cols.map_or_else(|| doc.id_key(), |(cc, i)| cc.id_key(i))
}

/// Hands every document of `set` — results, all exact, of relevance `r` — to a sink made
/// by `make`, in parallel over ranges of documents when there are many.
fn scan_set<S: Sink>(
    snap: &Snapshot,
    set: &RoaringBitmap,
    r: f64,
    make: impl Fn() -> S + Sync + Send,
) -> S {
    let run = |mut sink: S, docs: std::ops::Range<u32>| {
        for_each_doc(snap, set.range(docs), |n, doc, cols| {
            sink.offer(n, doc, id_key(doc, cols), true, r);
        });
        sink
    };
    const PER_TASK: u64 = 65_536;
    if set.len() <= PER_TASK {
        return run(make(), 0..u32::MAX);
    }
    // ranges of whole chunks holding about PER_TASK members each
    let span = (snap.chunks().len() * crate::CHUNK) as u64;
    let parts = set
        .len()
        .div_ceil(PER_TASK)
        .min(span / crate::CHUNK as u64)
        .max(1);
    let step = (span / parts).div_ceil(crate::CHUNK as u64) * crate::CHUNK as u64;
    (0..parts)
        .into_par_iter()
        .map(|p| {
            let lo = (p * step).min(u32::MAX as u64) as u32;
            let hi = if p + 1 == parts {
                u32::MAX
            } else {
                ((p + 1) * step).min(u32::MAX as u64) as u32
            };
            run(make(), lo..hi)
        })
        .reduce(&make, S::merge)
}

/// The `k` members of `set` with the smallest ids, as hits of relevance `r`, in order:
/// a chunk none of whose ids can come before the `k` found so far is skipped whole (the
/// ids of documents loaded in id order are met in doc order, and then nearly every
/// chunk is).
fn first_by_id(snap: &Snapshot, set: &RoaringBitmap, r: f64, k: usize) -> Vec<Hit> {
    let mut top = TopK::new(k, false);
    if k == 0 {
        return Vec::new();
    }
    let mut next = 0u32;
    while let Some(first) = set.range(next..).next() {
        let c = first as usize / crate::CHUNK;
        let end = u32::try_from((c + 1) * crate::CHUNK).unwrap_or(u32::MAX);
        // (equal keys may still be smaller ids)
        let passed = top
            .worst_id_key()
            .is_some_and(|worst| snap.chunk_min_id_key(c) > worst);
        if !passed {
            for_each_doc(snap, set.range(first..end), |n, doc, cols| {
                top.offer(n, doc, id_key(doc, cols), true, r)
            });
        }
        if end == u32::MAX {
            break;
        }
        next = end;
    }
    top.into_hits()
}

/// `Results` for a request whose results are exactly `set`, all exact with relevance `r`
/// (`exact::exact_results`, the request's `items` and `notItems` applied to it).
pub(crate) fn from_set(
    snap: &Snapshot,
    set: &RoaringBitmap,
    r: f64,
    want: Want<'_>,
    ctx: EvalCtx,
) -> Results {
    match want {
        Want::Top(k) | Want::TopAndMatched(k) => {
            // every member a result: the counts are the set's, the page its first ids
            let total = set.len() as usize;
            let matched = (want != Want::Top(k)).then(|| Matched {
                exact: set.clone(),
                other: RoaringBitmap::new(),
            });
            Results {
                hits: first_by_id(snap, set, r, k),
                total,
                exact_count: total,
                matched,
                ctx,
            }
        }
        Want::TopBy { k, keys, matched } => {
            scan_set(snap, set, r, || SortTop::new(snap, keys, k, matched)).into_results(ctx)
        }
        Want::All | Want::Sorted => {
            let mut hits: Vec<Hit> = scan_set(snap, set, r, Vec::new);
            if want == Want::Sorted {
                // one relevance: the id order
                hits.par_sort_unstable_by(default_order);
            }
            let total = hits.len();
            Results {
                hits,
                total,
                exact_count: total,
                matched: None,
                ctx,
            }
        }
    }
}

#[cfg(test)]
mod tests;
