//! The ranked answers equal an item-by-item scan; bounds bound scores.

use super::bounds::Bounds;
use super::*;
use crate::eval::{evaluate, reference_hits, Filter};
use crate::hits::default_order;
use crate::postings::{length_class, length_class_bounds};
use crate::{parse_query, IndexWriter};
use discern_dimensions::Dimensions;
use discern_model::{Record, Value};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{json, Value as J};
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;

thread_local! {
    /// Requests `ranked_results` answered on this thread.
    pub(crate) static ANSWERED: Cell<usize> = const { Cell::new(0) };
    /// Documents searches on this thread scored.
    pub(super) static SCORED: Cell<u64> = const { Cell::new(0) };
    /// Whether searches on this thread may score only as many documents as there are
    /// results (else any number).
    static LIMITED: Cell<bool> = const { Cell::new(false) };
}

/// The most documents a search may score in tests (`find`).
pub(super) fn score_limit(results: u64) -> u64 {
    if LIMITED.with(Cell::get) {
        results
    } else {
        u64::MAX
    }
}

const DIMS: &[u8] = b"<dimensions>
  <dimension id='k' type='keyword'/>
  <dimension id='x' type='text' stopWords=''>
    <field id='title'/>
    <field id='body'/>
    <field id='place' ignoreFieldLength='true'/>
  </dimension>
</dimensions>";

const WORDS: [&str; 6] = ["red", "green", "blue", "car", "cart", "carpet"];

/// A document: keyword values, and per field its words (indexes into `WORDS`, or
/// filler that lengthens the field).
type DocSpec = (Vec<usize>, [Vec<usize>; 3]);

fn doc_spec() -> impl Strategy<Value = DocSpec> {
    let field = |n| prop::collection::vec(0usize..12, 0..n);
    (
        prop::collection::vec(0usize..3, 0..2),
        [field(6), field(30), field(4)],
    )
}

fn snapshot(docs: &[DocSpec], pad: usize) -> crate::Snapshot {
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    let mut w = IndexWriter::new();
    let mut b = w.begin(&crate::Snapshot::empty(dims));
    let specs = (0..pad).map(|i| &docs[i % docs.len()]).chain(docs);
    for (i, spec) in specs.enumerate() {
        b.upsert(&id(i), &record(spec));
    }
    // a later apply removes some: postings and length classes must follow
    let snap = b.commit();
    let mut b = w.begin(&snap);
    for i in (0..pad + docs.len()).step_by(5) {
        b.delete(&id(i));
    }
    b.commit()
}

fn id(i: usize) -> String {
    format!("i{:04}", (i * 37) % 10_000)
}

fn record((kw, fields): &DocSpec) -> Record {
    let mut rec = Record::default();
    let kws: Vec<String> = kw.iter().map(|k| ["a", "b", "c"][*k].to_string()).collect();
    crate::test_support::put_strings(&mut rec, "k", kws);
    for (name, words) in ["title", "body", "place"].iter().zip(fields) {
        let text: Vec<&str> = words
            .iter()
            .map(|w| WORDS.get(*w).copied().unwrap_or("filler"))
            .collect();
        if !text.is_empty() {
            rec.0.push((name.to_string(), Value::Str(text.join(" "))));
        }
    }
    rec
}

fn text_criterion() -> impl Strategy<Value = J> {
    (
        prop::collection::vec(0usize..6, 1..4),
        any::<bool>(),
        any::<bool>(),
        prop::option::of((0usize..4, 0usize..4)),
        prop::option::of(0usize..3),
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(words, prefix, all, boosts, only, rel, ignore)| {
            let words: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
            let mut o = json!({"dimension": "x", "value": words.join(" "), "cull": true});
            if prefix {
                o["searchStyle"] = json!("startsWith");
            }
            if all {
                o["exactRequires"] = json!("all");
            }
            if let Some((t, b)) = boosts {
                let v = [0.0, 0.5, 1.0, 3.0];
                o["fieldBoosts"] = json!({"title": v[t], "body": v[b]});
            }
            if let Some(f) = only {
                let fields: [&[&str]; 3] = [&["title", "body"], &["body", "place"], &["title"]];
                o["fields"] = json!(fields[f]);
            }
            let (er, fr) = [(1.0, 1.0), (0.7, 1.0), (1.0, 0.5)][rel];
            o["exactRelevance"] = json!(er);
            o["fuzzyRelevance"] = json!(fr);
            if ignore {
                o["ignoreInverseDocumentFrequency"] = json!(true);
            }
            o
        })
}

/// Beside the text: a keyword filter, a keyword that only makes documents non-exact,
/// or every item.
fn other_criterion() -> impl Strategy<Value = J> {
    prop_oneof![
        (0usize..3, 0usize..3).prop_map(|(v, w)| {
            let (v, w) = (["a", "b", "c"][v], [1.0, 2.0, 0.0][w]);
            json!({"dimension": "k", "value": v, "cull": true, "weight": w})
        }),
        (0usize..3, 0usize..3).prop_map(|(v, w)| {
            let (v, w) = (["a", "b", "c"][v], [1.0, 2.0, 0.0][w]);
            json!({"dimension": "k", "value": v, "weight": w, "exactRelevance": 0.8})
        }),
        Just(json!({"dimension": ""})),
    ]
}

/// `items` and `notItems` of a request, as documents' places (`id`).
#[derive(Clone, Debug, Default)]
struct Named {
    only: Option<HashSet<usize>>,
    not: Option<HashSet<usize>>,
}

fn named() -> impl Strategy<Value = Named> {
    let places = |n| prop::option::of(prop::collection::hash_set(0usize..1200, 0..n));
    (places(400), places(30)).prop_map(|(only, not)| Named { only, not })
}

/// The page, the counts and the documents facets count equal an item-by-item scan's.
fn equals_full_scan(
    criteria: Vec<J>,
    docs: &[DocSpec],
    pad: usize,
    k: usize,
    exact_only: bool,
    named: &Named,
) -> Result<(), TestCaseError> {
    equals_full_scan_on(&snapshot(docs, pad), criteria, k, exact_only, named)
}

fn equals_full_scan_on(
    snap: &crate::Snapshot,
    criteria: Vec<J>,
    k: usize,
    exact_only: bool,
    named: &Named,
) -> Result<(), TestCaseError> {
    let body = json!({"criteria": criteria, "exactMatchesOnly": exact_only});
    let ids = |places: &Option<HashSet<usize>>| {
        places
            .as_ref()
            .map(|p| p.iter().map(|&i| id(i)).collect::<HashSet<String>>())
    };
    let (only, not) = (ids(&named.only), ids(&named.not));
    let filter = Filter {
        items: only.as_ref(),
        not_items: not.as_ref(),
        exact_only,
    };
    // (ranked first: a few documents are scored where no chunk's columns are built yet
    // — after an apply, the chunks it copied — and the scan then builds them all)
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let mut top = evaluate(snap, &mut q.criteria, &filter, Want::TopAndMatched(k));
    // and without the result sets, as most requests ask (none is made for them): the
    // same page, counts and grades (counted once with it in `ANSWERED`)
    let answered = ANSWERED.with(Cell::get);
    let mut q1 = parse_query(&body, &snap.dims, 1000).unwrap();
    let top_only = evaluate(snap, &mut q1.criteria, &filter, Want::Top(k));
    ANSWERED.with(|n| n.set(answered));
    let mut q0 = parse_query(&body, &snap.dims, 1000).unwrap();
    let mut want = reference_hits(snap, &mut q0.criteria, &filter);
    want.sort_by(default_order);
    let key = |h: &Hit| (h.doc, h.exact, h.r.to_bits());
    prop_assert_eq!(top.total, want.len());
    prop_assert_eq!(top.exact_count, want.iter().filter(|h| h.exact).count());
    prop_assert_eq!(
        top.hits.iter().map(key).collect::<Vec<_>>(),
        want.iter().take(k).map(key).collect::<Vec<_>>()
    );
    prop_assert_eq!(
        (top_only.total, top_only.exact_count),
        (top.total, top.exact_count)
    );
    prop_assert_eq!(
        top_only.hits.iter().map(key).collect::<Vec<_>>(),
        want.iter().take(k).map(key).collect::<Vec<_>>()
    );
    let explained = |r: &Results, q: &[Criterion], doc| -> Vec<(bool, u64)> {
        let o = r.explain(snap, q, doc);
        o.iter().map(|(e, r)| (*e, r.to_bits())).collect()
    };
    for h in &top_only.hits {
        prop_assert_eq!(
            explained(&top_only, &q1.criteria, h.doc),
            explained(&top, &q.criteria, h.doc)
        );
    }
    let (m, all) = (
        top.matched.take().unwrap_or_default(),
        Matched::of_hits(&want),
    );
    prop_assert_eq!((m.exact, m.other), (all.exact, all.other));
    // explanations grade the page's documents as a full evaluation does
    for h in &top.hits {
        let o: Vec<(bool, f64)> = top.explain(snap, &q.criteria, h.doc);
        let mut q2 = parse_query(&body, &snap.dims, 1000).unwrap();
        let full = evaluate(snap, &mut q2.criteria, &filter, Want::Sorted);
        prop_assert_eq!(
            o.iter().map(|(e, r)| (*e, r.to_bits())).collect::<Vec<_>>(),
            full.explain(snap, &q2.criteria, h.doc)
                .iter()
                .map(|(e, r)| (*e, r.to_bits()))
                .collect::<Vec<_>>()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Text requests ranked from bounds equal an item-by-item scan, relevance to the
    /// bit; most of them are answered by `ranked_results`.
    #[test]
    fn ranked_equals_full_scan(
        text in text_criterion(),
        others in prop::collection::vec(other_criterion(), 0..2),
        docs in prop::collection::vec(doc_spec(), 1..80),
        pad in prop_oneof![Just(0usize), 1000usize..1100],
        k in 0usize..25,
        exact_only in prop::bool::weighted(0.2),
        named in prop_oneof![3 => Just(Named::default()), 1 => named()],
    ) {
        let mut criteria = others;
        criteria.insert(0, text);
        equals_full_scan(criteria, &docs, pad, k, exact_only, &named)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]
    /// Requests between applies that change documents and their fields' lengths equal
    /// an item-by-item scan of each snapshot: what a request kept from one snapshot's
    /// postings (length classes united) is not read in the next.
    #[test]
    fn ranked_follows_applies(
        text in text_criterion(),
        docs in prop::collection::vec(doc_spec(), 1..40),
        pad in prop_oneof![Just(0usize), 1000usize..1100],
        steps in prop::collection::vec(
            prop::collection::vec((0usize..1100, prop::option::of(doc_spec())), 1..20),
            1..4,
        ),
        k in 1usize..25,
    ) {
        let mut w = IndexWriter::new();
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut b = w.begin(&crate::Snapshot::empty(dims));
        let specs = (0..pad).map(|i| &docs[i % docs.len()]).chain(&docs);
        for (i, spec) in specs.enumerate() {
            b.upsert(&id(i), &record(spec));
        }
        let mut snap = b.commit();
        for step in steps {
            equals_full_scan_on(&snap, vec![text.clone()], k, false, &Named::default())?;
            let mut b = w.begin(&snap);
            for (i, spec) in &step {
                match spec {
                    Some(spec) => b.upsert(&id(*i), &record(spec)),
                    None => b.delete(&id(*i)),
                }
            }
            snap = b.commit();
        }
        equals_full_scan_on(&snap, vec![text], k, false, &Named::default())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// A part's documents reaching a bound are those whose frequency and length
    /// class's shortest length give at least that bound.
    #[test]
    fn reaching_is_the_documents_bounds_reach(
        docs in prop::collection::vec(doc_spec(), 1..80),
        word in 0usize..6,
        shares in prop::collection::vec(0.0f64..1.1, 1..4),
    ) {
        let snap = snapshot(&docs, 1000);
        let body = json!({"criteria": [{"dimension": "x", "value": WORDS[word], "fields": ["title", "body"]}]});
        let q = parse_query(&body, &snap.dims, 1000).unwrap();
        let Node::Leaf(leaf) = &q.criteria[0].node else { unreachable!() };
        let Matcher::Text(t) = &leaf.matcher else { unreachable!() };
        let dim = leaf.dim.unwrap();
        let g = t.gather(&snap, dim).unwrap();
        let b = Bounds::new(&snap, dim, t, &g).unwrap();
        for j in 0..b.parts.len() {
            let p = &b.parts[j];
            let mut lengths = lengths(&snap, dim, t.fields[p.field].index);
            // (document, frequency, length, its class's shortest length)
            let docs: Vec<(u32, usize, usize, usize)> = p.levels[0]
                .iter()
                .map(|d| {
                    let tf = p.levels.iter().filter(|l| l.contains(d)).count();
                    let len = lengths(d);
                    (d, tf, len, length_class_bounds(length_class(len)).0)
                })
                .collect();
            drop(lengths);
            let by_class = |at_least: f64| -> RoaringBitmap {
                let p = &b.parts[j];
                docs.iter()
                    .filter(|(_, tf, _, lo)| b.bound(p, *tf, *lo) >= at_least)
                    .map(|(d, ..)| *d)
                    .collect()
            };
            for share in &shares {
                let at_least = b.parts[j].max * share;
                let got = b.reaching(j, at_least, g.matched.set(), false);
                prop_assert_eq!(got, by_class(at_least), "part {} share {}", j, share);
                // (and within a subset of the holders: that subset's members of it)
                let half: RoaringBitmap = g.matched.set().iter().step_by(2).collect();
                let got = b.reaching(j, at_least, &half, false);
                let within_half = b.reaching(j, at_least, g.matched.set(), false) & &half;
                prop_assert_eq!(got, within_half, "part {} share {} within half", j, share);
                // (within documents that hold the part, said so: the same)
                let holding: RoaringBitmap = b.parts[j].levels[0].iter().step_by(2).collect();
                prop_assert_eq!(
                    b.reaching(j, at_least, &holding, true),
                    b.reaching(j, at_least, &holding, false),
                    "part {} share {} holding it", j, share
                );
            }
            // every threshold at once: each threshold's documents
            let thresholds: Vec<f64> = shares.iter().map(|s| b.parts[j].max * s).collect();
            let each = b.reaching_each(j, &thresholds, g.matched.set(), false);
            prop_assert_eq!(each.len(), thresholds.len());
            for (got, &at_least) in each.iter().zip(&thresholds) {
                prop_assert_eq!(got, &by_class(at_least), "part {} at least {} of several", j, at_least);
            }
        }
    }
}

/// Documents' lengths in text field `index`, as scoring reads them.
fn lengths(snap: &crate::Snapshot, dim: usize, index: usize) -> impl FnMut(u32) -> usize + '_ {
    move |doc| {
        let cols = snap.chunk_cols(doc as usize / crate::CHUNK);
        crate::text::field_length(snap, cols, dim, doc, index)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Every document outside the few-document parts scores at most the sum of its
    /// parts' bounds (at its frequencies and length).
    #[test]
    fn bounds_bound_scores(
        docs in prop::collection::vec(doc_spec(), 1..80),
        pad in prop_oneof![Just(0usize), 1000usize..1100],
        text in text_criterion(),
    ) {
        bounds_hold(&snapshot(&docs, pad), text)?;
    }
}

/// Frequencies beyond the last level key (`MAX_LEVEL`) are bounded too.
#[test]
fn bounds_bound_frequencies_beyond_the_levels() {
    let many = vec![0usize; 300];
    let docs: Vec<DocSpec> = vec![
        (vec![], [vec![0], many.clone(), vec![]]),
        (
            vec![],
            [vec![1], [many.clone(), vec![6; 40]].concat(), vec![]],
        ),
        (vec![], [vec![0, 0], vec![0, 6], vec![0]]),
    ];
    let snap = snapshot(&docs, 30);
    for value in ["red", "red green", "re"] {
        let text = json!({"dimension": "x", "value": value, "searchStyle": "startsWith"});
        bounds_hold(&snap, text).unwrap();
    }
}

fn bounds_hold(snap: &crate::Snapshot, text: J) -> Result<(), TestCaseError> {
    let body = json!({"criteria": [text]});
    let q = parse_query(&body, &snap.dims, 1000).unwrap();
    let Node::Leaf(leaf) = &q.criteria[0].node else {
        unreachable!()
    };
    let dim = leaf.dim.unwrap();
    let Matcher::Text(t) = &leaf.matcher else {
        unreachable!()
    };
    let g = t.gather(snap, dim).unwrap();
    let b = Bounds::new(snap, dim, t, &g).unwrap();
    let (rank, scored) = t.score_all(snap, dim, &g);
    for d in g.matched.set().iter() {
        if b.few.contains(d) {
            continue;
        }
        let mut sum = 0.0;
        for p in &b.parts {
            let tf = p.levels.iter().filter(|l| l.contains(d)).count();
            if tf > 0 {
                sum += b.bound(p, tf, lengths(snap, dim, t.fields[p.field].index)(d));
            }
        }
        let score = scored[rank.get(d).unwrap()].score;
        prop_assert!(
            score <= sum,
            "doc {} scores {} above its bound {}",
            d,
            score,
            sum
        );
    }
    Ok(())
}

/// How many of 100 generated requests `ranked_results` answers (each checked against
/// a full scan), with searches limited to scoring as many documents as there are
/// results or not.
fn ranked_of_100(limited: bool) -> usize {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (
        text_criterion(),
        prop::collection::vec(doc_spec(), 20..80),
        1usize..20,
    );
    LIMITED.with(|l| l.set(limited));
    let before = ANSWERED.with(Cell::get);
    for _ in 0..100 {
        let (text, docs, k) = strategy.new_tree(&mut runner).unwrap().current();
        equals_full_scan(vec![text], &docs, 0, k, false, &Named::default()).unwrap();
    }
    LIMITED.with(|l| l.set(false));
    ANSWERED.with(Cell::get) - before
}

#[test]
fn most_requests_are_ranked() {
    let answered = ranked_of_100(false);
    eprintln!("{answered} of 100 ranked");
    assert!(answered > 50, "only {answered} of 100 ranked");
}

/// A search's later rounds let in the documents earlier rounds scored: a budget that
/// counted them twice gave up on requests it could answer (59 of the 85 here).
#[test]
fn scoring_every_result_is_within_the_limit() {
    assert_eq!(ranked_of_100(true), ranked_of_100(false));
}

/// A common word's page scores a few pages' worth of its holders: the threshold falls
/// to where the length classes and frequencies are estimated to let in enough, not by
/// a fixed step from the largest bound past most of them at once.
#[test]
fn a_common_words_page_scores_few_of_its_holders() {
    // 3,000 documents with "red" in the body, once to three times, among 0–28 other
    // words; `snapshot` deletes every fifth, leaving 2,400 holders
    let docs: Vec<DocSpec> = (0..3000)
        .map(|i| {
            let mut body = vec![0; 1 + i % 3];
            body.extend(std::iter::repeat_n(6, i * 7 % 29));
            (Vec::new(), [Vec::new(), body, Vec::new()])
        })
        .collect();
    let text = json!({"dimension": "x", "value": "red", "cull": true, "fields": ["body"]});
    let (answered, scored) = (ANSWERED.with(Cell::get), SCORED.with(Cell::get));
    equals_full_scan(vec![text], &docs, 0, 10, false, &Named::default()).unwrap();
    assert_eq!(ANSWERED.with(Cell::get), answered + 1);
    let scored = SCORED.with(Cell::get) - scored;
    assert!(scored <= 120, "{scored} of 2,400 holders scored");
}
