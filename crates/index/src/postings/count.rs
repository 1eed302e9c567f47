//! Postings counted from the documents, not recorded change by change: a bulk load into
//! an empty index and the start-up rebuild count each dimension's keys in runs of
//! documents on every core, then join the runs in document order.

use std::sync::Arc;

use discern_dimensions::{Dimension, DimensionKind, Dimensions, IndexedValue};
use rayon::prelude::*;
use roaring::RoaringBitmap;

use super::{
    bitmap_of_sorted, freezable, length_class, text_key, text_length_key, text_level_key,
    text_level_key_into, tree_of, DimPostings, Key, KeyBuf, Posting, Postings, MAX_LEVEL,
};
use crate::numbering::{Numbered, Vocabularies};
use crate::FastMap;

/// Postings counted from scratch from `docs` (doc number, values), in ascending doc
/// order; dimensions in parallel.
pub(crate) fn build(
    dims: &Dimensions,
    vocab: &Vocabularies,
    docs: &[(u32, &crate::Doc)],
) -> (Postings, RoaringBitmap) {
    // Each dimension's documents in runs, counted on every core and joined in document
    // order: one dimension (a text's words) is most of the work.
    let run = docs
        .len()
        .div_ceil(4 * rayon::current_num_threads())
        .max(BUILD_RUN);
    // The dimensions whose postings may be frozen first (a keyword dimension of many
    // keys, such as addresses, ends in an FST built on one core), then text (the most
    // keys a document), then the rest: the pool takes them about in this order, and a
    // long step on one core is best begun while other work can share the other core.
    let mut order: Vec<usize> = (0..dims.dims.len()).collect();
    order.sort_by_key(|&di| match &dims.dims[di].kind {
        _ if freezable(&dims.dims[di]) => 0,
        DimensionKind::Text(_) => 1,
        _ => 2,
    });
    let mut made: Vec<(usize, Option<Arc<DimPostings>>)> = order
        .into_par_iter()
        .map(|di| {
            let d = &dims.dims[di];
            let vocab = vocab.get(di).and_then(|v| v.as_deref()).map(|v| v.read());
            let mut built = docs
                .par_chunks(run)
                .map(|docs| count_run(d, di, vocab.as_deref(), docs))
                .reduce(Counted::default, Counted::join);
            if let DimensionKind::Text(t) = &d.kind {
                if built.stats.len() < t.fields.len() {
                    built.stats.resize(t.fields.len(), (0, 0));
                }
            }
            let entries = built
                .keys
                .into_par_iter()
                .filter_map(|(k, list)| Some((k, Posting::of(bitmap_of_sorted(&list))?)))
                .collect();
            let postings = Some(Arc::new(DimPostings {
                has: Arc::new(bitmap_of_sorted(&built.has)),
                field_stats: built.stats,
                ..DimPostings::of_entries(entries, freezable(d))
            }));
            (di, postings)
        })
        .collect();
    made.sort_unstable_by_key(|(di, _)| *di);
    let per_dim: Vec<Option<Arc<DimPostings>>> = made.into_iter().map(|(_, p)| p).collect();
    let live: RoaringBitmap = docs.iter().map(|(n, _)| *n).collect();
    (Arc::new(per_dim), live)
}

/// Documents a task of `build` counts at least (tests join runs of a few).
const BUILD_RUN: usize = if cfg!(test) { 3 } else { 16_384 };

/// One dimension's postings counted over a run of documents (`count_run`).
#[derive(Default)]
struct Counted {
    /// Per key, in key order: its documents, ascending.
    keys: Vec<(Key, Vec<u32>)>,
    /// The documents with a value, ascending.
    has: Vec<u32>,
    /// A text dimension's (tokens, documents with the field) per field.
    stats: Vec<(u64, u64)>,
}

impl Counted {
    /// `self` then `later` (a run of later documents).
    fn join(mut self, later: Counted) -> Counted {
        // (the identity, or a run without values of a dimension without fields)
        if self.keys.is_empty() && self.has.is_empty() && self.stats.is_empty() {
            return later;
        }
        let mut keys = Vec::with_capacity(self.keys.len().max(later.keys.len()));
        let mut b = later.keys.into_iter().peekable();
        for (k, mut list) in self.keys {
            while let Some(e) = b.next_if(|(bk, _)| *bk < k) {
                keys.push(e);
            }
            if let Some((_, more)) = b.next_if(|(bk, _)| *bk == k) {
                list.extend(more);
            }
            keys.push((k, list));
        }
        keys.extend(b);
        self.keys = keys;
        self.has.extend(later.has);
        if self.stats.len() < later.stats.len() {
            self.stats.resize(later.stats.len(), (0, 0));
        }
        for (s, l) in self.stats.iter_mut().zip(later.stats) {
            (s.0, s.1) = (s.0 + l.0, s.1 + l.1);
        }
        self
    }
}

/// Document `n` appended to `key`'s list in `count_run`'s map (documents come in
/// ascending order).
fn push_doc(map: &mut FastMap<Key, (Vec<u32>, u32)>, key: &[u8], n: u32) {
    match map.get_mut(key) {
        Some((list, _)) => list.push(n),
        None => {
            map.insert(key.into(), (vec![n], 1));
        }
    }
}

/// Dimension `di`'s postings over `docs` (ascending document numbers).
fn count_run(
    d: &Dimension,
    di: usize,
    vocab: Option<&Numbered>,
    docs: &[(u32, &crate::Doc)],
) -> Counted {
    // doc numbers per key pushed in ascending order; beside them, how often the last
    // document holds the key (for level keys)
    let mut map: FastMap<Key, (Vec<u32>, u32)> = FastMap::default();
    let mut has = Vec::new();
    let mut stats: Vec<(u64, u64)> = match &d.kind {
        DimensionKind::Text(t) => vec![(0, 0); t.fields.len()],
        _ => Vec::new(),
    };
    let mut kb = KeyBuf::new();
    let tree = tree_of(d).map(|t| &**t);
    let mut level_key = Vec::new();
    let mut slots = TokenSlots::new(d, vocab);
    for &(n, doc) in docs {
        let Some(v) = doc.value(di) else {
            continue;
        };
        let v = &*v;
        has.push(n);
        let text = matches!(v, IndexedValue::Terms(_));
        if let IndexedValue::Terms(terms) = v {
            if stats.len() < terms.groups() {
                stats.resize(terms.groups(), (0, 0));
            }
            for (st, (fi, len)) in stats.iter_mut().zip(terms.group_lens().enumerate()) {
                if len > 0 {
                    st.0 += len as u64;
                    st.1 += 1;
                    push_doc(&mut map, &text_length_key(fi, length_class(len)), n);
                }
            }
            if let Some(slots) = slots.as_mut() {
                for fi in 0..terms.groups() {
                    for number in terms.group(fi) {
                        if !slots.add(fi, number, n) {
                            let token = vocab.and_then(|v| v.get(number)).unwrap_or_default();
                            count_key(&mut map, &text_key(fi, token), n, true, &mut level_key);
                        }
                    }
                }
                continue;
            }
        }
        kb.fill_unsorted(v, tree, vocab);
        for k in kb.keys() {
            count_key(&mut map, k, n, text, &mut level_key);
        }
    }
    let mut keys: Vec<(Key, Vec<u32>)> = map.into_iter().map(|(k, (list, _))| (k, list)).collect();
    if let (Some(slots), Some(vocab)) = (slots, vocab) {
        slots.into_keys(vocab, &mut keys);
    }
    keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Counted { keys, has, stats }
}

/// Document `n` holds key `k` once more (in `count_run`'s map): appended to its list
/// when first held, and for a text token held again, to its level key's.
fn count_key(
    map: &mut FastMap<Key, (Vec<u32>, u32)>,
    k: &[u8],
    n: u32,
    text: bool,
    level_key: &mut Vec<u8>,
) {
    let level = match map.get_mut(k) {
        Some((list, count)) => held_again(list, count, n),
        None => {
            map.insert(k.into(), (vec![n], 1));
            1
        }
    };
    if text && (2..=MAX_LEVEL as u32).contains(&level) {
        let field = u16::from_be_bytes([k[0], k[1]]);
        text_level_key_into(level_key, field, level as u8, &k[2..]);
        push_doc(map, level_key, n);
    }
}

/// Document `n` holds a key already met once more: appended to the key's documents
/// (`list`) if it is new there, and its level — how many times `n` holds the key so far,
/// kept in `count` — returned. Documents come in ascending order, so a key this
/// document repeats has it last in its list already.
fn held_again(list: &mut Vec<u32>, count: &mut u32, n: u32) -> u32 {
    if list.last() == Some(&n) {
        *count += 1;
    } else {
        list.push(n);
        *count = 1;
    }
    *count
}

/// Slots for `TokenSlots` at most (a text dimension's fields × its vocabulary; in tests
/// few, so that small vocabularies are counted both ways).
const MAX_TOKEN_SLOTS: usize = if cfg!(test) { 8 } else { 1 << 22 };

/// A text dimension's tokens counted by vocabulary number in a run of `count_run`: a slot
/// per field and number, found by indexing, where a key's bytes would be made and hashed
/// for every token of every document (the largest part of a bulk load's count at its
/// end: a million descriptions of ~100 tokens). Each slot's keys are made once, at the
/// end of the run.
struct TokenSlots {
    /// The vocabulary's size when the run began: numbers at or past it (none, as the
    /// documents were numbered before) are counted by their keys' bytes.
    numbers: usize,
    /// Per field and number (`field * numbers + number`): 1 + its entry in `lists`, or 0.
    slot_of: Vec<u32>,
    /// (field * numbers + number, its documents, how often the last one holds it).
    lists: Vec<(u32, Vec<u32>, u32)>,
    /// The documents of each (field * numbers + number, level ≥ 2): the level keys.
    levels: FastMap<(u32, u8), Vec<u32>>,
}

impl TokenSlots {
    /// Slots for dimension `d`'s tokens, if it is a text dimension with a vocabulary
    /// small enough (`MAX_TOKEN_SLOTS`).
    fn new(d: &Dimension, vocab: Option<&Numbered>) -> Option<TokenSlots> {
        let (DimensionKind::Text(t), Some(vocab)) = (&d.kind, vocab) else {
            return None;
        };
        let numbers = vocab.all().len();
        let slots = t.fields.len().checked_mul(numbers)?;
        (slots > 0 && slots <= MAX_TOKEN_SLOTS).then(|| TokenSlots {
            numbers,
            slot_of: vec![0; slots],
            lists: Vec::new(),
            levels: FastMap::default(),
        })
    }

    /// Document `n` holds token `number` in field `field` once more, as `count_key`
    /// counts a key; `false` (nothing counted) for a slot it has not.
    fn add(&mut self, field: usize, number: u32, n: u32) -> bool {
        if number as usize >= self.numbers {
            return false;
        }
        let code = field * self.numbers + number as usize;
        let Some(slot) = self.slot_of.get_mut(code) else {
            return false;
        };
        let code = code as u32;
        if *slot == 0 {
            self.lists.push((code, vec![n], 1));
            *slot = self.lists.len() as u32;
            return true;
        }
        let (_, list, count) = &mut self.lists[*slot as usize - 1];
        let level = held_again(list, count, n);
        if (2..=MAX_LEVEL as u32).contains(&level) {
            self.levels.entry((code, level as u8)).or_default().push(n);
        }
        true
    }

    /// The keys counted, with their documents, appended to `keys` (unsorted).
    fn into_keys(self, vocab: &Numbered, keys: &mut Vec<(Key, Vec<u32>)>) {
        let numbers = self.numbers as u32;
        let token = |code: u32| vocab.get(code % numbers).unwrap_or_default();
        keys.reserve(self.lists.len() + self.levels.len());
        for (code, list, _) in self.lists {
            let field = (code / numbers) as usize;
            keys.push((text_key(field, token(code)).into(), list));
        }
        for ((code, level), list) in self.levels {
            let field = (code / numbers) as usize;
            keys.push((text_level_key(field, level, token(code)).into(), list));
        }
    }
}
