//! Postings: per dimension, the documents holding each indexed key, as roaring bitmaps in
//! a persistent ordered map (an apply copies only the paths and bitmaps it touches, and
//! text prefixes are key ranges). They narrow a query to the documents that can survive
//! its culled and exact criteria (`candidates.rs`) and give text criteria their document
//! frequencies and matching documents without a scan (`text/`).
//!
//! Keys per dimension type: keyword/groupBy values; tree/ordered/mutex element numbers
//! (big-endian u32); text `field (big-endian u16) ++ token`, and for a token repeated in
//! a field its *level* keys `field | LEVEL_BIT (big-endian u16) ++ k ++ token`, one per
//! k in 2..=tf (at most `MAX_LEVEL`): the documents holding the token at least k times,
//! so that BM25 reads term frequencies from postings, not from rows, and per field the
//! documents of each class of field lengths (`text_length_key`), so that a score can be
//! bounded from sets; geoloc grid cells of
//! `CELL_DEG` degrees; numeric values' buckets (`numeric_key`), so that a range criterion
//! narrows to the buckets it overlaps.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use discern_dimensions::{DimensionKind, Dimensions, ElementSet, IndexedValue};
use imbl::OrdMap;

use crate::numbering::Numbered;
use roaring::RoaringBitmap;

mod apply;
mod codes;
mod count;
mod frozen;
mod lengths;
mod posting;
pub use apply::SpareSlot;
pub(crate) use apply::{commit, PostingsDelta};
pub(crate) use count::build;
pub(crate) use frozen::Frozen;
use frozen::FROZEN_MIN_KEYS;
#[cfg(test)]
pub(crate) use lengths::length_class_bounds;
pub(crate) use lengths::{length_class, ShorterCache, ShorterThan};
pub(crate) use posting::{union, Posting, PostingRef};

/// A postings key: inline up to 16 bytes (a text key's field and token, most words;
/// a number's bucket; a grid cell; an element), so that the map's searches compare
/// keys where the node holds them, and a node copied copies them without allocating.
pub(crate) type Key = smallvec::SmallVec<[u8; 16]>;
const _: () = assert!(std::mem::size_of::<Key>() == 24); // (smallvec's `union`)

/// Side of a geoloc grid cell, in degrees.
pub(crate) const CELL_DEG: f64 = 0.1;

#[derive(Clone, Default)]
pub struct DimPostings {
    /// Every key's documents — but a frozen dimension's (`frozen`), whose map is empty.
    /// Read through `get`, `len` and `entries`; the prefix and range reads below are
    /// for the dimensions that are never frozen (text, numeric, geoloc, elements).
    pub(crate) map: OrdMap<Key, Posting>,
    /// A keyword or groupBy dimension of many keys: its postings in an FST and an
    /// overlay (`frozen.rs`).
    pub(crate) frozen: Option<Frozen>,
    /// Documents with a value in this dimension.
    pub(crate) has: Arc<RoaringBitmap>,
    /// Text: per field, (tokens in all documents, documents with a non-empty field).
    pub(crate) field_stats: Vec<(u64, u64)>,
    /// Text: per field, its length classes as running unions, made on first use.
    pub(crate) shorter: ShorterCache,
}

impl DimPostings {
    pub(crate) fn get(&self, key: &[u8]) -> Option<PostingRef<'_>> {
        match &self.frozen {
            Some(f) => f.get(key),
            None => self.map.get(key).map(Posting::get),
        }
    }

    /// Whether `key` has documents — without reading its set (`get` merges an
    /// overlaid one).
    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        match &self.frozen {
            Some(f) => f.get(key).is_some(),
            None => self.map.contains_key(key),
        }
    }

    /// How many keys have documents.
    pub(crate) fn len(&self) -> usize {
        match &self.frozen {
            Some(f) => f.len(),
            None => self.map.len(),
        }
    }

    /// Every key and its documents, in key order.
    pub(crate) fn entries(
        &self,
    ) -> Box<dyn Iterator<Item = (Cow<'_, [u8]>, PostingRef<'_>)> + Send + '_> {
        match &self.frozen {
            Some(f) => Box::new(f.entries()),
            None => Box::new(
                self.map
                    .iter()
                    .map(|(k, p)| (Cow::Borrowed(&k[..]), p.get())),
            ),
        }
    }

    /// The postings of `entries` (sorted by key, keys distinct): frozen (`frozen.rs`)
    /// when `freezable` (a keyword or groupBy dimension) and they are many.
    pub(crate) fn of_entries<K: AsRef<[u8]> + Into<Key>>(
        entries: Vec<(K, Posting)>,
        freezable: bool,
    ) -> DimPostings {
        if freezable && entries.len() >= FROZEN_MIN_KEYS {
            DimPostings {
                frozen: Some(Frozen::of(entries.into_iter())),
                ..DimPostings::default()
            }
        } else {
            let entries = entries.into_iter().map(|(k, p)| (k.into(), p)).collect();
            DimPostings {
                map: packed(entries),
                ..DimPostings::default()
            }
        }
    }

    /// These postings with a frozen overlay that is due merged into a new FST
    /// (`Frozen::due`); `None` when none is due.
    pub(crate) fn folded(&self) -> Option<DimPostings> {
        let f = self.frozen.as_ref().filter(|f| f.due())?;
        Some(DimPostings {
            frozen: Some(f.folded()),
            ..self.clone()
        })
    }

    /// Whether a frozen overlay is due to be merged (`folded`).
    pub(crate) fn fold_due(&self) -> bool {
        self.frozen.as_ref().is_some_and(Frozen::due)
    }

    /// Freezes the map once it holds many keys (`of_entries`).
    pub(super) fn freeze_if_large(&mut self, freezable: bool) {
        if freezable && self.frozen.is_none() && self.map.len() >= FROZEN_MIN_KEYS {
            let map = std::mem::take(&mut self.map);
            self.frozen = Some(Frozen::of(map.into_iter()));
        }
    }

    /// The union of the postings of `keys`.
    pub(crate) fn union<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> RoaringBitmap {
        union(keys.into_iter().filter_map(|k| self.get(k)))
    }

    /// The postings of every key starting with `prefix`, in key order (not for a
    /// frozen dimension).
    pub(crate) fn prefix(&self, prefix: &[u8]) -> impl Iterator<Item = PostingRef<'_>> + '_ {
        self.prefix_entries(prefix).map(|(_, b)| b)
    }

    /// Every key starting with `prefix` and its postings, in key order.
    pub(crate) fn prefix_entries(
        &self,
        prefix: &[u8],
    ) -> impl Iterator<Item = (&[u8], PostingRef<'_>)> + '_ {
        let owned = prefix.to_vec();
        self.map
            .range::<_, [u8]>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(&owned))
            .map(|(k, b)| (&**k, b.get()))
    }

    /// An estimate: per key its map entry (key and posting, 32 bytes) and the bytes of
    /// a key too long to be held inline, and a shared set's count, container list and
    /// containers besides.
    pub(crate) fn bytes(&self) -> usize {
        const ENTRY: usize = std::mem::size_of::<(Key, Posting)>();
        self.frozen.as_ref().map_or(0, Frozen::bytes)
            + self
                .map
                .iter()
                .map(|(k, b)| {
                    (if k.spilled() { k.len() } else { 0 })
                        + ENTRY
                        + match b.set_bytes() {
                            0 => 0,
                            n => 40 + n,
                        }
                })
                .sum::<usize>()
            + self.has.serialized_size()
            + self.shorter.bytes()
    }
}

/// The map of `entries` (sorted by key, keys distinct) with its leaves full
/// (`insert_sorted`).
pub(crate) fn packed(entries: Vec<(Key, Posting)>) -> OrdMap<Key, Posting> {
    let mut map = OrdMap::new();
    insert_sorted(&mut map, entries);
    map
}

/// Inserts `entries` (sorted by key, keys distinct, none in `map`) so that the leaves
/// they fill are full. The map is a B+tree whose full leaf splits in halves, so keys
/// inserted in order leave every leaf they fill half full (at a million items, ~43k
/// leaves of 1.5 KB for ~1.4M keys). Inserted in two passes — every other key, then
/// the rest — each leaf the first pass leaves with 32 keys takes the 32 between them
/// and is full, without a split.
pub(crate) fn insert_sorted(map: &mut OrdMap<Key, Posting>, entries: Vec<(Key, Posting)>) {
    debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
    let mut second = Vec::with_capacity(entries.len() / 2);
    for (i, (k, p)) in entries.into_iter().enumerate() {
        if i % 2 == 0 {
            map.insert(k, p);
        } else {
            second.push((k, p));
        }
    }
    for (k, p) in second {
        map.insert(k, p);
    }
}

/// Per dimension (`None` only while a snapshot's postings are not built).
pub type DimsPostings = Vec<Option<Arc<DimPostings>>>;
pub type Postings = Arc<DimsPostings>;

pub(crate) fn empty(dims: &Dimensions) -> Postings {
    Arc::new(
        dims.dims
            .iter()
            .map(|d| {
                let fields = match &d.kind {
                    DimensionKind::Text(t) => t.fields.len(),
                    _ => 0,
                };
                Some(Arc::new(DimPostings {
                    field_stats: vec![(0, 0); fields],
                    ..DimPostings::default()
                }))
            })
            .collect(),
    )
}

/// The grid cell of a point.
pub(crate) fn cell(lat: f64, lon: f64) -> (u32, u32) {
    let row = ((lat.clamp(-90.0, 90.0) + 90.0) / CELL_DEG).floor() as u32;
    let col = ((lon.clamp(-180.0, 180.0) + 180.0) / CELL_DEG).floor() as u32;
    (row, col)
}

pub(crate) fn cell_key(row: u32, col: u32) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..4].copy_from_slice(&row.to_be_bytes());
    k[4..].copy_from_slice(&col.to_be_bytes());
    k
}

/// The grid cell a `cell_key` names.
pub(crate) fn key_cell(key: &[u8]) -> Option<(u32, u32)> {
    let key: [u8; 8] = key.try_into().ok()?;
    let (row, col) = key.split_at(4);
    Some((
        u32::from_be_bytes(row.try_into().ok()?),
        u32::from_be_bytes(col.try_into().ok()?),
    ))
}

/// The first byte of a subtree key (`subtree_key`).
const SUBTREE: u8 = b'^';

/// The key of the documents tagged with tree element `e` or one of its descendants,
/// kept for elements that have children (an element's own key is its 4 bytes; a leaf's
/// subtree is its own list): a tree criterion on a state is then one set, not the union
/// of its own and its every county's and city's (uniting even two lists of a state's
/// documents was a third of an exact request).
pub(crate) fn subtree_key(e: u32) -> [u8; 5] {
    let mut k = [SUBTREE; 5];
    k[1..].copy_from_slice(&e.to_be_bytes());
    k
}

/// An element dimension's key read back: its element, and whether the key is the
/// element's subtree key (`subtree_key`) rather than its own (its 4 bytes). `None` for
/// any other key.
pub(crate) fn element_of_key(key: &[u8]) -> Option<(u32, bool)> {
    match *key {
        [a, b, c, d] => Some((u32::from_be_bytes([a, b, c, d]), false)),
        [SUBTREE, a, b, c, d] => Some((u32::from_be_bytes([a, b, c, d]), true)),
        _ => None,
    }
}

/// Whether dimension `d`'s postings are frozen once they hold many keys (`frozen.rs`):
/// a keyword or groupBy dimension's (its keys are read whole, never by prefix or range).
pub(crate) fn freezable(d: &discern_dimensions::Dimension) -> bool {
    matches!(d.kind, DimensionKind::Keyword | DimensionKind::GroupBy)
}

/// The tree of dimension `d`, whose elements' subtrees are keyed too (`subtree_key`).
fn tree_of(d: &discern_dimensions::Dimension) -> Option<&Arc<ElementSet>> {
    match &d.kind {
        DimensionKind::Tree(set) => Some(set),
        _ => None,
    }
}

/// Mantissa bits a numeric bucket keeps: 256 buckets per power of two.
pub(crate) const NUMERIC_MANTISSA_BITS: u32 = 8;

/// The bucket of a numeric value (criteria compare integers as doubles too): the sign,
/// exponent and first mantissa bits of the double, mapped so that the keys' byte order
/// is the values' order. The buckets overlapping an interval are one key range.
pub(crate) fn numeric_key(x: f64) -> [u8; 4] {
    let x = if x == 0.0 { 0.0 } else { x }; // -0.0 in the bucket of 0.0
    let bits = x.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    ((ordered >> (52 - NUMERIC_MANTISSA_BITS)) as u32).to_be_bytes()
}

/// The key of a text token in field `field`.
pub(crate) fn text_key(field: usize, token: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + token.len());
    k.extend_from_slice(&(field as u16).to_be_bytes());
    k.extend_from_slice(token.as_bytes());
    k
}

/// Marks a text key as a level key (fields are numbered below it: `Dimensions::parse`
/// refuses more text fields).
pub(crate) const LEVEL_BIT: u16 = 0x8000;

/// The highest level keyed: a document at this level may hold the token more often, and
/// its frequency is counted from its row.
pub(crate) const MAX_LEVEL: u8 = u8::MAX;

/// The key of the documents holding `token` at least `level` (2..=`MAX_LEVEL`) times in
/// field `field`.
pub(crate) fn text_level_key(field: usize, level: u8, token: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + token.len());
    text_level_key_into(&mut k, field as u16, level, token.as_bytes());
    k
}

/// `text_level_key` made in `out` (emptied first), the token as bytes: a token key's
/// (`text_key`) after its field.
pub(crate) fn text_level_key_into(out: &mut Vec<u8>, field: u16, level: u8, token: &[u8]) {
    out.clear();
    out.extend_from_slice(&(field | LEVEL_BIT).to_be_bytes());
    out.push(level);
    out.extend_from_slice(token);
}

/// The key of the documents whose field `field` is `class` long (`length_class`):
/// `field | LEVEL_BIT (big-endian u16) ++ 0 ++ class (big-endian u16)` — beside the level
/// keys, whose levels start at 2. They bound a document's BM25 score without reading it
/// (`ranked.rs`).
pub(crate) fn text_length_key(field: usize, class: u16) -> [u8; 5] {
    let [f0, f1] = (field as u16 | LEVEL_BIT).to_be_bytes();
    let [c0, c1] = class.to_be_bytes();
    [f0, f1, 0, c0, c1]
}

/// The keys of `value`, sorted and distinct, as ranges of `arena` (no allocation per key
/// once the buffers have grown).
struct KeyBuf {
    arena: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

impl KeyBuf {
    fn new() -> KeyBuf {
        KeyBuf {
            arena: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// The keys of `value` (none when absent), sorted and distinct; `tree`: the
    /// dimension's tree, when it is one. Not for text: an apply numbers a text value's
    /// keys (`codes::CodeBuf`).
    fn fill(&mut self, value: Option<&IndexedValue>, tree: Option<&ElementSet>) {
        match value {
            Some(v) => self.fill_unsorted(v, tree, None),
            None => {
                self.arena.clear();
                self.spans.clear();
            }
        }
        let arena = &self.arena;
        let key = |s: &(u32, u32)| &arena[s.0 as usize..s.1 as usize];
        self.spans.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        self.spans.dedup_by(|a, b| key(a) == key(b));
    }

    /// The keys of `value` in value order, repeats included; no level keys.
    fn fill_unsorted(
        &mut self,
        value: &IndexedValue,
        tree: Option<&ElementSet>,
        vocab: Option<&Numbered>,
    ) {
        self.arena.clear();
        self.spans.clear();
        let (arena, spans) = (&mut self.arena, &mut self.spans);
        let mut push = |bytes: &[&[u8]]| {
            let start = arena.len() as u32;
            bytes.iter().for_each(|b| arena.extend_from_slice(b));
            spans.push((start, arena.len() as u32));
        };
        match value {
            IndexedValue::Strings(vs) => vs.iter().for_each(|v| push(&[v.as_bytes()])),
            IndexedValue::Elements(es) => es.iter().for_each(|&e| {
                push(&[&e.to_be_bytes()]);
                let Some(tree) = tree else {
                    return;
                };
                let element = |e: u32| tree.elements.get(e as usize);
                if element(e).is_some_and(|el| !el.children.is_empty()) {
                    push(&[&subtree_key(e)]);
                }
                let mut up = element(e).and_then(|el| el.parent);
                while let Some(a) = up {
                    push(&[&subtree_key(a)]);
                    up = element(a).and_then(|el| el.parent);
                }
            }),
            IndexedValue::Terms(terms) => {
                for fi in 0..terms.groups() {
                    let f = (fi as u16).to_be_bytes();
                    terms.group(fi).for_each(|n| {
                        let token = vocab.and_then(|v| v.get(n)).unwrap_or_default();
                        push(&[&f, token.as_bytes()])
                    });
                }
            }
            // (the index holds text as `Terms`)
            IndexedValue::Text(_) => {}
            IndexedValue::Points(ps) => ps.iter().for_each(|&(la, lo)| {
                let (r, c) = cell(la, lo);
                push(&[&cell_key(r, c)]);
            }),
            IndexedValue::Int(_)
            | IndexedValue::Ints(_)
            | IndexedValue::Double(_)
            | IndexedValue::Doubles(_) => value.numbers().for_each(|x| push(&[&numeric_key(x)])),
        }
    }

    /// The keys, in their order.
    fn keys(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.spans
            .iter()
            .map(|&(a, b)| &self.arena[a as usize..b as usize])
    }
}

/// Doc numbers in ascending order (as `build` pushes them) as a bitmap.
fn bitmap_of_sorted(docs: &[u32]) -> RoaringBitmap {
    RoaringBitmap::from_sorted_iter(docs.iter().copied()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dims() -> Dimensions {
        Dimensions::parse(
            b"<dimensions><dimension id='k' type='keyword'/><dimension id='n' type='integer'/></dimensions>",
        )
        .unwrap()
    }

    fn kw(vs: &[&str]) -> Option<IndexedValue> {
        (!vs.is_empty()).then(|| IndexedValue::Strings(discern_dimensions::StrList::from_strs(vs)))
    }

    /// Keys inserted by `insert_sorted` fill the map's leaves: its nodes take at most
    /// 60% of what inserting the same keys in order takes (half-full leaves).
    #[test]
    fn sorted_keys_fill_the_leaves() {
        let entries = || -> Vec<(Key, Posting)> {
            (0..20_000u32)
                .map(|i| (i.to_be_bytes().as_slice().into(), Posting::one(i)))
                .collect()
        };
        let held = |build: &dyn Fn(Vec<(Key, Posting)>) -> OrdMap<Key, Posting>| {
            let entries = entries();
            let before = crate::test_support::thread_bytes();
            let map = build(entries);
            let bytes = crate::test_support::thread_bytes() - before;
            assert_eq!(map.len(), 20_000);
            assert!(map.keys().zip(0u32..).all(|(k, i)| **k == i.to_be_bytes()));
            (bytes, map)
        };
        let (in_order, _) = held(&|e| e.into_iter().collect());
        let (packed, map) = held(&|e| packed(e));
        assert!(
            packed * 10 <= in_order * 6,
            "nodes: {packed} bytes packed against {in_order} in order"
        );
        // and a second batch among them keeps every key
        let mut map = map;
        let more: Vec<(Key, Posting)> = (20_000..30_000u32)
            .map(|i| (i.to_be_bytes().as_slice().into(), Posting::one(i)))
            .collect();
        insert_sorted(&mut map, more);
        assert!(map
            .keys()
            .zip(0u32..30_000)
            .all(|(k, i)| **k == i.to_be_bytes()));
        assert_eq!(map.len(), 30_000);
    }

    /// Token numbers without a token (which numbering never makes) name one key, as
    /// when counted from scratch: an apply resolves them into one set, never into two
    /// entries for the same key.
    #[test]
    fn numbers_without_tokens_name_one_key() {
        let d =
            Dimensions::parse(b"<dimensions><dimension id='t' type='text'/></dimensions>").unwrap();
        let vocab = crate::numbering::vocabularies_for(&d);
        let doc = |n: u32, token: u32| {
            let terms = discern_dimensions::TermList::from_groups([[token]]);
            crate::Doc::new(
                format!("d{n}").as_str().into(),
                vec![Some(IndexedValue::Terms(terms))].into(),
            )
        };
        let docs = [(1, doc(1, 5)), (2, doc(2, 6))];
        let mut delta = PostingsDelta::new(&d, vocab.clone());
        for (n, doc) in &docs {
            delta.change(*n, None, Some(doc));
        }
        let mut post = empty(&d);
        let mut live = Arc::new(RoaringBitmap::new());
        delta.resolve().apply_to(&mut post, &mut live);
        let sorted: Vec<(u32, &crate::Doc)> = docs.iter().map(|(n, d)| (*n, d)).collect();
        let (built, _) = build(&d, &vocab, &sorted);
        let keys_of = |p: &Postings| -> Vec<(Vec<u8>, RoaringBitmap)> {
            let m = p[0].as_ref().unwrap();
            m.map
                .iter()
                .map(|(k, v)| (k.to_vec(), v.get().bitmap().into_owned()))
                .collect()
        };
        assert_eq!(keys_of(&post), keys_of(&built));
        let field_key = 0u16.to_be_bytes().to_vec();
        assert!(keys_of(&post).contains(&(field_key, RoaringBitmap::from_iter([1, 2]))));
    }

    proptest! {
        /// Postings kept current through random applies equal postings counted from the
        /// final documents.
        #[test]
        fn incremental_equals_recount(
            steps in prop::collection::vec(
                prop::collection::vec((0u32..40, prop::option::of(prop::collection::vec(0usize..5, 0..3))), 1..30),
                1..5)
        ) {
            let d = dims();
            let words = ["a", "b", "c", "d", "e"];
            let mut post = empty(&d);
            let mut live = Arc::new(RoaringBitmap::new());
            let mut docs: std::collections::HashMap<u32, crate::Doc> =
                std::collections::HashMap::new();
            for step in steps {
                let mut delta = PostingsDelta::new(&d, crate::numbering::vocabularies_for(&d));
                for (doc, val) in step {
                    let old = docs.get(&doc).cloned();
                    let new = val.map(|ws| {
                        let vs: Vec<&str> = ws.iter().map(|&i| words[i]).collect();
                        let ns: Vec<i64> = ws.iter().map(|&i| i as i64 * 1000 - 2000).collect();
                        let values = vec![kw(&vs), (!ns.is_empty()).then(|| IndexedValue::from_ints(ns))];
                        crate::Doc::new(format!("d{doc}").as_str().into(), values.into())
                    });
                    delta.change(doc, old.as_ref(), new.as_ref());
                    match new {
                        Some(n) => { docs.insert(doc, n); }
                        None => { docs.remove(&doc); }
                    }
                }
                delta.resolve().apply_to(&mut post, &mut live);
            }
            let p = post[0].as_ref().unwrap();
            for w in words {
                let want: RoaringBitmap = docs.iter()
                    .filter(|(_, v)| matches!(v.value(0).as_deref(), Some(IndexedValue::Strings(s)) if s.iter().any(|x| x == w)))
                    .map(|(d, _)| *d).collect();
                let got = p.get(w.as_bytes()).map(|b| b.bitmap().into_owned()).unwrap_or_default();
                prop_assert_eq!(got, want);
            }
            let has: RoaringBitmap = docs.iter().filter(|(_, v)| v.value(0).is_some()).map(|(d, _)| *d).collect();
            prop_assert_eq!(&*p.has, &has);
            let all: RoaringBitmap = docs.keys().copied().collect();
            prop_assert_eq!(&*live, &all);
            // counting from scratch gives the same postings
            let mut sorted: Vec<(u32, &crate::Doc)> = docs.iter().map(|(d, v)| (*d, v)).collect();
            sorted.sort_by_key(|x| x.0);
            let (built, built_live) = build(&d, &crate::numbering::vocabularies_for(&d), &sorted);
            let b = built[0].as_ref().unwrap();
            prop_assert_eq!(&built_live, &*live);
            prop_assert_eq!(&*b.has, &*p.has);
            let keys_of = |m: &DimPostings| -> Vec<(Vec<u8>, RoaringBitmap)> {
                m.entries().map(|(k, v)| (k.into_owned(), v.bitmap().into_owned())).collect()
            };
            prop_assert_eq!(keys_of(b), keys_of(p));
            prop_assert_eq!(b.len(), keys_of(b).len());
            prop_assert_eq!(p.len(), keys_of(p).len());
            let (bn, pn) = (built[1].as_ref().unwrap(), post[1].as_ref().unwrap());
            prop_assert_eq!(keys_of(bn), keys_of(pn));
            for i in 0..5i64 {
                let x = i * 1000 - 2000;
                let want: RoaringBitmap = docs.iter()
                    .filter(|(_, v)| v.value(1).is_some_and(|v| v.ints().is_some_and(|xs| xs.contains(&x))))
                    .map(|(d, _)| *d).collect();
                prop_assert_eq!(pn.get(&numeric_key(x as f64)).map(|b| b.bitmap().into_owned()).unwrap_or_default(), want);
            }
        }

        /// An element's own and subtree keys read back as it; other keys (a keyword's,
        /// a numeric bucket's lengths) as none.
        #[test]
        fn element_keys_read_back(e in any::<u32>(), other in prop::collection::vec(any::<u8>(), 0..8)) {
            prop_assert_eq!(element_of_key(&e.to_be_bytes()), Some((e, false)));
            prop_assert_eq!(element_of_key(&subtree_key(e)), Some((e, true)));
            let element_like = other.len() == 4 || other.len() == 5 && other[0] == SUBTREE;
            prop_assert_eq!(element_of_key(&other).is_some(), element_like);
        }

        /// Numeric buckets keep the values' order, so an interval's buckets are one key
        /// range.
        #[test]
        fn numeric_keys_keep_order(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(numeric_key(lo) <= numeric_key(hi));
            prop_assert_eq!(numeric_key(-0.0), numeric_key(0.0));
        }
    }
}
