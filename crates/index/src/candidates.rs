//! Candidate documents: before any item is scored, the postings narrow a query to a
//! superset of the documents that can survive it — those its culled criteria cannot
//! drop and, with `exactMatchesOnly`, those every criterion can find exact. Scoring then
//! runs the §7.2 rules (`criteria/`) on the candidates only, so results are identical
//! to a full scan; a criterion the postings cannot bound (groups, ...) simply does not
//! narrow.

use std::ops::Bound;

use roaring::RoaringBitmap;

use crate::criteria::{Criterion, ElementRule, Leaf, Matcher, Node};
use crate::geo::Unit;
use crate::postings::{cell, cell_key, numeric_key, subtree_key, union, DimPostings, PostingRef};
use crate::Snapshot;
use discern_dimensions::Interval;

/// Grid cells a geo bound may cover before it is not worth narrowing by.
const MAX_CELLS: u64 = 20_000;

/// A superset of the documents that survive `criteria` (and are exact on all of them
/// when `exact_only`); `None` when nothing narrows.
pub fn candidates(
    snap: &Snapshot,
    criteria: &[Criterion],
    exact_only: bool,
) -> Option<RoaringBitmap> {
    let mut out: Option<RoaringBitmap> = None;
    for c in criteria {
        let Node::Leaf(leaf) = &c.node else { continue };
        let need_exact = exact_only && !c.exact_match;
        if let Some(s) = leaf_survivors(snap, leaf, need_exact, c.cull) {
            out = Some(match out {
                None => s,
                Some(o) => o & s,
            });
        }
    }
    out
}

/// A superset of the documents that are exact on `leaf` (when `need_exact`), have
/// relevance above 0 (when `cull`) and are not beyond its `cullDistance`.
fn leaf_survivors(
    snap: &Snapshot,
    leaf: &Leaf,
    need_exact: bool,
    cull: bool,
) -> Option<RoaringBitmap> {
    let dim = leaf.dim?;
    let post = snap.postings(dim)?;
    let geo_cull = matches!(leaf.matcher, Matcher::Geo { cull: Some(_), .. });
    if !need_exact && !cull && !geo_cull {
        return None;
    }
    // documents with a value: each condition that applies narrows them
    let mut with_value: Option<RoaringBitmap> = None;
    let mut narrow = |s: RoaringBitmap| {
        with_value = Some(match with_value.take() {
            None => s,
            Some(w) => w & s,
        });
    };
    if need_exact {
        narrow(exact_set(leaf, post)?);
    }
    if cull {
        narrow(positive_set(leaf, post)?);
    }
    if let Matcher::Geo {
        reference,
        cull: Some(c),
        iso,
        unit,
        ..
    } = &leaf.matcher
    {
        // an iso step rounds distances down by less than one step
        narrow(within(
            post,
            &reference.boxes(),
            c + iso.unwrap_or(0.0),
            *unit,
        )?);
    }
    let mut out = with_value?;
    // documents without a value are decided by nullExactMatch and nullRelevance alone
    let nulls_pass = (!need_exact || leaf.null_exact) && (!cull || leaf.null_rel > 0.0);
    if nulls_pass {
        out |= snap.live_docs() - &*post.has;
    }
    Some(out)
}

/// A superset of the documents with a value that are exact on `leaf`.
pub(crate) fn exact_set(leaf: &Leaf, post: &DimPostings) -> Option<RoaringBitmap> {
    match &leaf.matcher {
        Matcher::Has => Some((*post.has).clone()),
        Matcher::Keyword { values, .. } if values.is_empty() => Some((*post.has).clone()),
        Matcher::Keyword { values, .. } => Some(post.union(values.iter().map(|v| v.as_bytes()))),
        Matcher::Elements { only_not, .. } => {
            if *only_not {
                return Some((*post.has).clone());
            }
            // (exclusions left out: a superset)
            Some(union(element_lists(leaf, post)?.0))
        }
        Matcher::Geo {
            reference,
            exact,
            iso,
            unit,
            ..
        } => within(post, &reference.boxes(), exact + iso.unwrap_or(0.0), *unit),
        Matcher::Text(t) => Some(t.matched().clone()),
        Matcher::Numeric { set, .. } => Some(numeric_range(post, set)),
    }
}

/// A superset of the documents with a value in `set`: those in the buckets it overlaps.
pub(crate) fn numeric_range(post: &DimPostings, set: &Interval) -> RoaringBitmap {
    union(numeric_buckets(post, set).into_iter().map(|(_, b)| b))
}

/// The numeric buckets overlapping `set` (key, documents), in key order: one key range.
pub(crate) fn numeric_buckets<'p>(
    post: &'p DimPostings,
    set: &Interval,
) -> Vec<(&'p [u8], PostingRef<'p>)> {
    let key = |x: Option<f64>| x.filter(|x| !x.is_nan()).map(numeric_key);
    let (lo, hi) = (key(set.lo), key(set.hi));
    if matches!((lo, hi), (Some(lo), Some(hi)) if lo > hi) {
        return Vec::new();
    }
    fn bound(k: &Option<[u8; 4]>) -> Bound<&[u8]> {
        k.as_ref()
            .map_or(Bound::Unbounded, |k| Bound::Included(k.as_slice()))
    }
    post.map
        .range::<_, [u8]>((bound(&lo), bound(&hi)))
        .map(|(k, b)| (&**k, b.get()))
        .collect()
}

/// A superset of the documents with a value whose relevance on `leaf` is above 0.
fn positive_set(leaf: &Leaf, post: &DimPostings) -> Option<RoaringBitmap> {
    let exact_only = |leaf: &Leaf| {
        if leaf.exact_rel > 0.0 {
            exact_set(leaf, post)
        } else {
            Some(RoaringBitmap::new())
        }
    };
    match &leaf.matcher {
        Matcher::Has | Matcher::Keyword { .. } => exact_only(leaf),
        Matcher::Elements {
            set,
            tree,
            ordered,
            wanted,
            isolated,
            only_not,
            ..
        } => {
            if leaf.fuzzy_rel == 0.0 || *only_not {
                return exact_only(leaf);
            }
            if *ordered {
                return None;
            }
            if !*tree {
                return exact_only(leaf); // mutex: no closeness between elements
            }
            // tree closeness is above 0 exactly within the same top-level subtree
            let root = |mut e: u32| {
                while let Some(p) = set.elements[e as usize].parent {
                    e = p;
                }
                e
            };
            let mut roots: Vec<u32> = wanted.iter().chain(isolated).map(|&e| root(e)).collect();
            roots.sort_unstable();
            roots.dedup();
            Some(union(subtree_lists(post, &roots)))
        }
        Matcher::Geo { .. } if leaf.fuzzy_rel > 0.0 => Some((*post.has).clone()),
        Matcher::Geo { .. } => exact_only(leaf),
        Matcher::Text(t) => Some(t.matched().clone()),
        // closeness to a range, 1 / (1 + d / s), is above 0 at any finite distance
        Matcher::Numeric { .. } if leaf.fuzzy_rel > 0.0 => Some((*post.has).clone()),
        Matcher::Numeric { .. } => exact_only(leaf),
    }
}

pub(crate) fn element_union(post: &DimPostings, elements: &[u32]) -> RoaringBitmap {
    let keys: Vec<[u8; 4]> = elements.iter().map(|e| e.to_be_bytes()).collect();
    post.union(keys.iter().map(|k| k.as_slice()))
}

/// The posting lists whose union is the documents an element `leaf` finds exact (its
/// wanted elements, unless it has only exclusions) and those whose union it excludes.
/// A tree's are each named element's subtree list (`subtree_lists`) and the isolated
/// elements' own; another's the lists of the elements its rules pick.
pub(crate) fn element_lists<'p>(
    leaf: &Leaf,
    post: &'p DimPostings,
) -> Option<(Vec<PostingRef<'p>>, Vec<PostingRef<'p>>)> {
    let Matcher::Elements {
        table,
        tree,
        wanted,
        isolated,
        not,
        ..
    } = &leaf.matcher
    else {
        return None;
    };
    if *tree {
        let subtrees = |ids: &[u32]| subtree_lists(post, ids).collect::<Vec<_>>();
        let mut exact = subtrees(wanted);
        exact.extend(isolated.iter().filter_map(|e| post.get(&e.to_be_bytes())));
        return Some((exact, subtrees(not)));
    }
    let picked = |pick: fn(&ElementRule) -> bool| -> Vec<PostingRef<'p>> {
        let picked = table.iter().enumerate().filter(|(_, rule)| pick(rule));
        picked
            .filter_map(|(e, _)| post.get(&(e as u32).to_be_bytes()))
            .collect()
    };
    Some((picked(|rule| rule.exact), picked(|rule| rule.excluded)))
}

/// The posting lists of the documents tagged with `ids` or one of their descendants in
/// a tree dimension: one per element, its `subtree_key` list, or its own where it has
/// none (a leaf, whose subtree is itself; an element with children has a subtree list
/// whenever a document is tagged with it or under it).
pub(crate) fn subtree_lists<'p, 'i>(
    post: &'p DimPostings,
    ids: &'i [u32],
) -> impl Iterator<Item = PostingRef<'p>> + use<'p, 'i> {
    ids.iter().filter_map(move |&e| {
        post.get(&subtree_key(e))
            .or_else(|| post.get(&e.to_be_bytes()))
    })
}

/// A superset of the documents with a point within `distance` of one of `points`: the
/// grid cells overlapping each point's bounding box on the sphere.
pub(crate) fn within(
    post: &DimPostings,
    boxes: &[(f64, f64, f64, f64)],
    distance: f64,
    unit: Unit,
) -> Option<RoaringBitmap> {
    Some(union(
        within_cells(post, boxes, distance, unit)?
            .into_iter()
            .map(|(_, b)| b),
    ))
}

/// The grid cells `within` unites, each its key and postings (`None` where it gives up).
pub(crate) fn within_cells<'p>(
    post: &'p DimPostings,
    boxes: &[(f64, f64, f64, f64)],
    distance: f64,
    unit: Unit,
) -> Option<Vec<(&'p [u8], PostingRef<'p>)>> {
    if distance.is_nan() || distance < 0.0 {
        return None;
    }
    // angular radius, widened for rounding
    let theta = (distance / unit.earth_radius()).to_degrees() * (1.0 + 1e-9) + 1e-9;
    let mut postings: Vec<(&[u8], PostingRef<'p>)> = Vec::new();
    for &(lat0, lat1, lon0, lon1) in boxes {
        let (lat_lo, lat_hi) = (lat0 - theta, lat1 + theta);
        if lat_lo <= -90.0 || lat_hi >= 90.0 || theta >= 90.0 {
            return None;
        }
        // the widest longitude span of a spherical cap of radius theta around any
        // centre in the box: at the box's latitude farthest from the equator
        let far = lat0.abs().max(lat1.abs());
        let ratio = theta.to_radians().sin() / far.to_radians().cos();
        if ratio >= 1.0 {
            return None;
        }
        let dlon = ratio.asin().to_degrees() * (1.0 + 1e-9) + 1e-9;
        let (lon_lo, lon_hi) = (lon0 - dlon, lon1 + dlon);
        if lon_lo < -180.0 || lon_hi > 180.0 {
            return None; // crosses the antimeridian
        }
        let (r0, c0) = cell(lat_lo, lon_lo);
        let (r1, c1) = cell(lat_hi, lon_hi);
        let cells = (r1 - r0 + 1) as u64 * (c1 - c0 + 1) as u64;
        if cells > MAX_CELLS {
            return None;
        }
        for r in r0..=r1 {
            // one row of cells is a contiguous key range
            let lo = cell_key(r, c0);
            let hi = cell_key(r, c1);
            postings.extend(
                post.map
                    .range::<_, [u8]>((
                        Bound::Included(lo.as_slice()),
                        Bound::Included(hi.as_slice()),
                    ))
                    .map(|(k, b)| (&**k, b.get())),
            );
        }
    }
    Some(postings)
}

#[cfg(test)]
mod tests;
