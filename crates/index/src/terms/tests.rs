//! The tests of the did-you-mean dictionaries (`terms/mod.rs`).

use super::*;
use proptest::prelude::*;

fn dict(words: &[(&str, u32)]) -> TermDict {
    TermDict::from_counts(words.iter().copied().collect::<HashMap<_, _>>(), 0)
}

/// Frequency changes counted by number (text) and by name (anything else) come out
/// by name, each term once per document, and add up whichever way they were counted.
#[test]
fn term_changes_by_number_and_by_name_add_up() {
    let numbering = crate::numbering::Numbering::from_strings(
        ["loft", "park", "view"].iter().map(|&t| t.into()).collect(),
    )
    .unwrap();
    let vocab = numbering.read();
    let text = |groups: &[&[u32]]| {
        IndexedValue::Terms(discern_dimensions::TermList::from_groups(groups.iter()))
    };
    let strings =
        |ts: &[&str]| IndexedValue::Strings(discern_dimensions::StrList::from_strs(ts.iter()));
    let mut d = TermDelta::default();
    // loft twice and park → park and view (in two fields)
    d.change(
        Some(&text(&[&[0, 1, 0]])),
        Some(&text(&[&[1], &[2]])),
        Some(&vocab),
    );
    // a new document: loft
    d.change(None, Some(&text(&[&[0]])), Some(&vocab));
    // a value that is not text, by name: view → loft
    d.change(
        Some(&strings(&["view"])),
        Some(&strings(&["loft"])),
        Some(&vocab),
    );
    let mut got: Vec<(String, i64)> = d
        .into_terms(Some(&vocab))
        .into_iter()
        .map(|(t, by)| (t.into(), by))
        .collect();
    got.sort();
    // (view: +1 by number, -1 by name; park unchanged, never counted)
    assert_eq!(got, vec![("loft".into(), 1), ("view".into(), 0)]);
}

fn near(d: &TermDict, t: &str, max: u8, tr: bool) -> Vec<(String, u8, u32)> {
    let mut v = d.within(t, max, tr);
    v.sort();
    v
}

#[test]
fn finds_terms_within_the_distance() {
    let d = dict(&[("chicken", 2), ("kitchen", 1), ("soup", 3), ("soap", 1)]);
    assert_eq!(near(&d, "chiken", 2, false), [("chicken".into(), 1, 2)]);
    assert_eq!(
        near(&d, "soup", 1, false),
        [("soap".into(), 1, 1), ("soup".into(), 0, 3)]
    );
    assert!(near(&d, "sopu", 1, false).is_empty());
    assert_eq!(near(&d, "sopu", 1, true), [("soup".into(), 1, 3)]);
}

#[test]
fn overlay_changes_are_exact_and_merge() {
    let d = dict(&[("a", 1), ("b", 2)]);
    let mut delta = HashMap::new();
    delta.insert("b".into(), -2);
    delta.insert("c".into(), 1);
    let d2 = d.with_changes(delta, 1);
    assert_eq!((d2.df("a"), d2.df("b"), d2.df("c")), (1, 0, 1));
    assert_eq!(d.df("b"), 2, "the old dictionary is unchanged");
    assert!(near(&d2, "b", 1, false).iter().all(|(t, _, _)| t != "b"));
    let m = d2.merged(1);
    assert_eq!(m.overlay_len(), 0);
    assert_eq!((m.df("a"), m.df("b"), m.df("c")), (1, 0, 1));
    assert_eq!(m.len(), 2);
}

#[test]
fn adopt_keeps_later_changes_only() {
    let d = dict(&[("a", 1)]);
    let mut delta = HashMap::new();
    delta.insert("b".into(), 1);
    let at1 = d.with_changes(delta, 1);
    let merged = at1.merged(1);
    let mut delta = HashMap::new();
    delta.insert("c".into(), 1);
    let at2 = at1.with_changes(delta, 2);
    let adopted = at2.adopt(&merged, at1.stamp()).unwrap();
    assert_eq!(adopted.overlay_len(), 1);
    assert_eq!(
        (adopted.df("a"), adopted.df("b"), adopted.df("c")),
        (1, 1, 1)
    );
    let reset = TermDict::empty(3);
    assert!(reset.adopt(&merged, at1.stamp()).is_none());
    // a fold into the recent tier replaces it: a fold begun before is stale
    let recent = at2.fold(2, false);
    assert_eq!(recent.recent_len(), 2);
    assert!(Arc::ptr_eq(&recent.base, &at2.base));
    assert!(recent.adopt(&merged, at1.stamp()).is_none());
    let again = recent.with_changes([("d".into(), 1)], 3).fold(3, false);
    assert!(recent.adopt(&again, recent.stamp()).is_some());
}

/// A fold rebuilds the base only once the changed terms are a large share of it.
#[test]
fn folds_into_recent_while_changes_are_few() {
    let words: Vec<String> = (0..SMALL_BASE_TERMS).map(|i| format!("w{i}")).collect();
    let d = TermDict::from_counts(words.iter().map(|w| (w.as_str(), 1)), 0);
    let few = d.with_changes([("new".into(), 1)], 1).merged(1);
    assert!(Arc::ptr_eq(&few.base, &d.base));
    assert_eq!((few.recent_len(), few.df("new"), few.df("w7")), (1, 1, 1));
    let many = few
        .with_changes(
            words[..SMALL_BASE_TERMS / RECENT_SHARE + 1]
                .iter()
                .map(|w| (w.as_str().into(), -1)),
            2,
        )
        .merged(2);
    assert!(many.recent.is_empty());
    assert_eq!((many.df("new"), many.df("w7")), (1, 0));
}

/// Folds after many small applies keep few recent tiers, each more than `TIER_RATIO`
/// times the size of the next, and rebuild far fewer terms than one recent tier rebuilt
/// whole by every fold would.
#[test]
fn folds_keep_few_tiers() {
    let words: Vec<String> = (0..SMALL_BASE_TERMS).map(|i| format!("w{i}")).collect();
    let mut d = TermDict::from_counts(words.iter().map(|w| (w.as_str(), 1)), 0);
    let base = d.base.clone();
    let mut rebuilt = 0;
    for g in 1..=50u64 {
        let changes = (0..100).map(|i| (format!("n{g}-{i}").into_boxed_str(), 1));
        d = d.with_changes(changes, g).merged(g);
        rebuilt += d.recent.last().map_or(0, |r| r.map.len());
        assert!(Arc::ptr_eq(&d.base, &base));
        for pair in d.recent.windows(2) {
            assert!(pair[0].map.len() > TIER_RATIO * pair[1].map.len());
        }
    }
    assert!(d.recent.len() <= 4, "{} tiers", d.recent.len());
    assert_eq!(d.recent_len(), 5_000);
    // one tier rebuilt whole by every fold: 100 + 200 + ... + 5,000 terms
    assert!(rebuilt < 127_500 / 3, "{rebuilt} terms rebuilt");
    assert_eq!((d.df("n1-0"), d.df("n50-99"), d.df("w7")), (1, 1, 1));
    let added: Vec<String> = (1..=50)
        .flat_map(|g| (0..100).map(move |i| format!("n{g}-{i}")))
        .collect();
    let fresh = TermDict::from_counts(words.iter().chain(&added).map(|w| (w.as_str(), 1)), 0);
    for q in ["n1-0", "n25-37", "w7"] {
        assert_eq!(near(&d, q, 1, false), near(&fresh, q, 1, false));
    }
}

/// A dictionary large enough to be searched in parallel ranges finds exactly what a
/// plain scan finds, including terms on the range boundaries.
#[test]
fn parallel_ranges_find_what_a_scan_finds() {
    let words: Vec<String> = (0..150_000u32)
        .map(|i| format!("{}{:05}", ["ab", "ac", "bd", "zz"][(i % 4) as usize], i / 4))
        .collect();
    let d = TermDict::from_counts(
        words
            .iter()
            .map(|w| (w.as_str(), 1))
            .collect::<HashMap<_, _>>(),
        0,
    );
    assert_eq!(d.base.splits.len(), RANGES - 1);
    let mut queries: Vec<String> = d
        .base
        .splits
        .iter()
        .map(|k| String::from_utf8(k.clone()).unwrap())
        .collect();
    queries.extend([
        "ab00017".to_string(),
        "xb00017".to_string(),
        "ab0001".to_string(),
    ]);
    for q in &queries {
        let mut got: Vec<String> = d.within(q, 2, false).into_iter().map(|x| x.0).collect();
        got.sort();
        let mut want: Vec<String> = words
            .iter()
            .filter(|w| strsim::levenshtein(q, w) <= 2)
            .cloned()
            .collect();
        want.sort();
        assert_eq!(got, want, "query {q}");
    }
}

/// Deriving a dictionary with overlay changes shares the FSTs instead of copying
/// them (an apply on a million-term dictionary must not copy megabytes).
#[test]
fn changes_share_the_base() {
    let d = dict(&[("alpha", 1), ("beta", 2)]);
    let mut m = HashMap::new();
    m.insert(Box::<str>::from("gamma"), 1i64);
    let d2 = d.with_changes(m, 1);
    assert!(Arc::ptr_eq(&d.base, &d2.base));
    assert_eq!(d2.df("gamma"), 1);
}

proptest! {
    /// Changes through the overlay and folds of either kind (into the recent tier,
    /// into the base) answer frequencies and nearby terms as a dictionary counted
    /// from scratch does — by the split search on both tiers for long terms.
    #[test]
    fn tiers_answer_as_a_recount(
        ops in proptest::collection::vec(("[ab]{1,3}|aaaa[ab]{4}", -1i64..3, 0u8..5), 0..80),
        q in "[ab]{1,3}|aaaa[ab]{4}",
    ) {
        let mut truth: HashMap<String, i64> = HashMap::new();
        let mut d = TermDict::build(std::iter::empty(), 0, true);
        for (g, (t, delta, fold)) in ops.iter().enumerate() {
            let cur = truth.entry(t.clone()).or_default();
            let applied = (*cur + delta).max(0) - *cur;
            *cur += applied;
            let g = g as u64 + 1;
            d = d.with_changes([(t.as_str().into(), applied)], g);
            match fold {
                0 => d = d.fold(g, false),
                1 => d = d.fold(g, true),
                _ => {}
            }
        }
        for (t, n) in &truth {
            prop_assert_eq!(d.df(t) as i64, *n);
        }
        let fresh = TermDict::from_counts(
            truth.iter().filter(|(_, &n)| n > 0).map(|(t, &n)| (t.as_str(), n as u32)),
            0,
        );
        prop_assert_eq!(d.entries(), fresh.entries());
        for max in 0..=2 {
            for tr in [false, true] {
                prop_assert_eq!(near(&d, &q, max, tr), near(&fresh, &q, max, tr));
            }
        }
    }

    /// Applying random changes through the overlay and merging gives the same
    /// frequencies as counting from scratch.
    #[test]
    fn overlay_then_merge_matches_recount(
        ops in proptest::collection::vec(("[a-e]{1,2}", -1i64..3), 0..40)
    ) {
        let mut truth: HashMap<String, i64> = HashMap::new();
        let mut d = TermDict::empty(0);
        for (g, (t, delta)) in ops.iter().enumerate() {
            let cur = truth.entry(t.clone()).or_default();
            let applied = (*cur + delta).max(0) - *cur;
            *cur += applied;
            let mut m = HashMap::new();
            m.insert(t.as_str().into(), applied);
            d = d.with_changes(m, g as u64 + 1);
            if g % 7 == 6 {
                d = d.merged(g as u64 + 1);
            }
        }
        let m = d.merged(1000);
        for (t, n) in &truth {
            prop_assert_eq!(d.df(t) as i64, *n);
            prop_assert_eq!(m.df(t) as i64, *n);
        }
    }

    /// The split search (reversed terms kept) finds exactly the terms within 2 edits,
    /// with their distances and frequencies, for terms long enough to use it; words
    /// are drawn close to the query (same small alphabet, similar lengths, or the
    /// query with a few edits) so that many are within the distance.
    #[test]
    fn split_search_finds_what_a_plain_count_finds(
        q in "[ab1 ]{8,14}",
        words in proptest::collection::vec("[ab1 ]{5,16}", 0..40),
        edits in proptest::collection::vec(
            proptest::collection::vec((0usize..16, 0u8..3, "[ab1 c]"), 0..4), 0..40),
    ) {
        let mut all: Vec<String> = words.clone();
        for e in &edits {
            let mut w: Vec<char> = q.chars().collect();
            for (pos, kind, c) in e {
                let c = c.chars().next().unwrap();
                let p = pos % (w.len() + 1);
                match kind {
                    0 => w.insert(p, c),
                    1 if p < w.len() => { w.remove(p); }
                    _ if p < w.len() => w[p] = c,
                    _ => {}
                }
            }
            all.push(w.into_iter().collect());
        }
        all.retain(|w| !w.is_empty());
        all.sort();
        all.dedup();
        let counts: HashMap<&str, u32> =
            all.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32 + 1)).collect();
        // every other word arrives through the overlay
        let (base, over): (Vec<_>, Vec<_>) =
            counts.iter().map(|(w, n)| (*w, *n)).partition(|(w, _)| w.len() % 2 == 0);
        let d = TermDict::build(base, 0, true).with_changes(
            over.iter().map(|(w, n)| (Box::<str>::from(*w), *n as i64)),
            1,
        );
        prop_assert!(d.base.reversed.is_some());
        let mut got = d.within(&q, 2, false);
        got.sort();
        let mut want: Vec<(String, u8, u32)> = counts
            .iter()
            .filter_map(|(w, n)| {
                let dist = strsim::levenshtein(&q, w);
                (dist <= 2).then(|| (w.to_string(), dist as u8, *n))
            })
            .collect();
        want.sort();
        prop_assert_eq!(got, want);
    }

    /// Every term `within` returns is within the distance by a plain DP count.
    #[test]
    fn within_agrees_with_levenshtein(q in "[a-d]{0,6}", words in proptest::collection::vec("[a-d]{1,6}", 1..30)) {
        let counts: HashMap<&str, u32> = words.iter().map(|w| (w.as_str(), 1)).collect();
        let d = TermDict::from_counts(counts, 0);
        let found = d.within(&q, 2, false);
        for w in &words {
            let dist = strsim::levenshtein(&q, w);
            let hit = found.iter().find(|(t, _, _)| t == w);
            if dist <= 2 {
                prop_assert_eq!(hit.map(|h| h.1 as usize), Some(dist));
            } else {
                prop_assert!(hit.is_none());
            }
        }
    }
}
