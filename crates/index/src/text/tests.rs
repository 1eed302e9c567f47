//! The tests of the text criterion (`text/mod.rs`).

use super::*;
use crate::criteria::{Matcher, Node};
use crate::postings::union;
use crate::{parse_query, IndexWriter};
use discern_dimensions::Dimensions;
use discern_model::{Record, Value};
use proptest::prelude::*;
use std::sync::Arc;

/// The text score of one document counted from its row, as the engine did before
/// term frequencies were kept in postings: (exact, score, m).
fn row_score(t: &TextMatcher, snap: &Snapshot, dim: usize, doc: u32) -> Option<(bool, f64, f64)> {
    let post = snap.postings(dim)?;
    let n_docs = snap.len().max(1) as f64;
    let nt = t.n_terms;
    let idf = |df: u64| {
        if t.ignore_idf {
            1.0
        } else {
            (1.0 + (n_docs - df as f64 + 0.5) / (df as f64 + 0.5)).ln()
        }
    };
    let holds = |fq: &FieldQuery, i: usize| -> RoaringBitmap {
        let term = fq.terms.get(i).map(String::as_str).unwrap_or("");
        if t.prefix_last && i + 1 == nt {
            union(post.prefix(&text_key(fq.index, term)))
        } else {
            post.get(&text_key(fq.index, term))
                .map(|b| b.bitmap().into_owned())
                .unwrap_or_default()
        }
    };
    let weights: Vec<f64> = (0..nt)
        .map(|i| {
            let any = t
                .fields
                .iter()
                .fold(RoaringBitmap::new(), |a, fq| a | holds(fq, i));
            idf(any.len())
        })
        .collect();
    let wsum: f64 = weights.iter().sum();
    let shown = snap.shown_value(doc, dim)?;
    let IndexedValue::Text(toks) = &*shown else {
        return None;
    };
    let (mut score, mut contained, mut n_in) = (0.0, vec![false; nt], 0);
    for fq in &t.fields {
        let mut tf = vec![0u32; nt];
        t.count_row(toks.group(fq.index), fq, &mut tf);
        let len = toks.group(fq.index).count() as f64;
        let avg = average_length(post.field_stats[fq.index]);
        let mut fs = 0.0;
        for (i, ct) in contained.iter_mut().enumerate() {
            let f = tf[i] as f64;
            if f > 0.0 {
                if !*ct {
                    n_in += 1;
                }
                *ct = true;
                fs += bm25_term(idf(holds(fq, i).len()), f, len, avg, fq.ignore_length);
            }
        }
        score += fq.boost * fs;
    }
    if n_in == 0 {
        return None;
    }
    let m = contained
        .iter()
        .zip(&weights)
        .filter(|(c, _)| **c)
        .map(|(_, w)| w)
        .sum::<f64>()
        / wsum;
    Some((!t.require_all || n_in == nt, score, m))
}

fn dims() -> Arc<Dimensions> {
    Arc::new(
        Dimensions::parse(
            b"<dimensions><dimension id='t' type='text' stopWords=''>\
                  <field id='a'/><field id='b' ignoreFieldLength='true'/></dimension></dimensions>",
        )
        .unwrap(),
    )
}

fn text_matcher(q: &mut crate::Query) -> &mut TextMatcher {
    match &mut q.criteria[0].node {
        Node::Leaf(leaf) => match &mut leaf.matcher {
            Matcher::Text(t) => t,
            _ => panic!("not a text criterion"),
        },
        _ => panic!("not a leaf"),
    }
}

/// A document's prepared (exact, score, m), if it holds a query term.
fn prepared(t: &TextMatcher, doc: u32) -> Option<(bool, f64, f64)> {
    let s = t.scored[t.rank.get(doc)?];
    s.holds.then_some((s.exact, s.score, s.m))
}

/// Checks every document's prepared score against its row.
fn check(snap: &Snapshot, body: serde_json::Value) -> Result<(), TestCaseError> {
    let mut q = parse_query(&body, &snap.dims, 1000).unwrap();
    let t = text_matcher(&mut q);
    t.prepare(snap, 0);
    for (c, chunk) in snap.chunks().iter().enumerate() {
        for (i, d) in chunk.docs.iter().enumerate() {
            let doc = (c * crate::CHUNK + i) as u32;
            let want = d.as_ref().and_then(|_| row_score(t, snap, 0, doc));
            let got = prepared(t, doc);
            prop_assert_eq!(got, want, "doc {} query {}", doc, body);
        }
    }
    Ok(())
}

proptest! {
    /// Scores from postings (term frequencies as level keys, lengths from columns)
    /// equal scores counted from the rows, through applies that add, change and
    /// delete documents.
    #[test]
    fn postings_scores_equal_row_scores(
        steps in prop::collection::vec(
            prop::collection::vec((0usize..30, prop::option::of((0usize..8, "[abc]{1,2}( [abc]{1,2}){0,9}", "[abc]{1,2}( [abc]{1,2}){0,3}"))), 1..25),
            1..4),
        query in "[abc]{1,2}( [abc]{1,2}){0,2}",
        starts_with in any::<bool>(),
        all in any::<bool>(),
        boost in 1u32..4,
    ) {
        let mut w = IndexWriter::new();
        let mut snap = Snapshot::empty(dims());
        for step in steps {
            let mut b = w.begin(&snap);
            for (id, doc) in step {
                let id = format!("i{id}");
                match doc {
                    Some((_, a, bb)) => b.upsert(&id, &Record(vec![
                        ("a".to_string(), Value::Str(a)),
                        ("b".to_string(), Value::Str(bb)),
                    ])),
                    None => b.delete(&id),
                }
            }
            snap = b.commit();
        }
        let mut body = serde_json::json!({"criteria": [{"dimension": "t", "value": query,
            "fieldBoosts": {"a": boost}}]});
        if starts_with {
            body["criteria"][0]["searchStyle"] = "startsWith".into();
        }
        if all {
            body["criteria"][0]["exactRequires"] = "all".into();
        }
        check(&snap, body.clone())?;
        // postings counted from scratch, as at start-up
        check(&snap.with_built_postings(), body)?;
    }
}

proptest! {
    /// Ranks, counts below a document, ranges and splits agree with the plain
    /// definitions.
    #[test]
    fn doc_rank_is_the_rank(
        docs in prop::collection::btree_set(0u32..5_000, 0..400),
        probes in prop::collection::vec(0u32..5_200, 1..40),
        parts in 1usize..9,
    ) {
        let set: RoaringBitmap = docs.iter().copied().collect();
        let sorted: Vec<u32> = docs.iter().copied().collect();
        let rank = DocRank::new(&set);
        prop_assert_eq!(rank.len(), sorted.len());
        for &p in &probes {
            prop_assert_eq!(rank.get(p), sorted.binary_search(&p).ok());
            prop_assert_eq!(rank.below(p), sorted.partition_point(|&d| d < p));
        }
        for w in probes.windows(2) {
            let (a, b) = (w[0].min(w[1]), w[0].max(w[1]));
            let want: Vec<u32> = sorted.iter().copied().filter(|d| (a..b).contains(d)).collect();
            prop_assert_eq!(rank.count_in(a..b), want.len());
            prop_assert_eq!(rank.iter_range(a..b).collect::<Vec<_>>(), want);
        }
        let bounds = rank.split(parts);
        prop_assert_eq!(bounds[0], 0);
        prop_assert!(bounds.windows(2).all(|w| w[0] < w[1]) || sorted.is_empty());
        let mut all = Vec::new();
        for w in bounds.windows(2) {
            let part: Vec<u32> = rank.iter_range(w[0]..w[1]).collect();
            prop_assert_eq!(part.len(), rank.count_in(w[0]..w[1]));
            all.extend(part);
        }
        prop_assert_eq!(all, sorted);
    }
}

/// Enough matching documents to be scored in parallel ranges.
#[test]
fn parallel_ranges_score_like_rows() {
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims()));
    let words = ["ab", "ac", "b", "ab ab", "c ab ac ab"];
    for i in 0..40_000usize {
        let a = words[i % words.len()];
        let bb = words[(i / 7) % words.len()];
        b.upsert(
            &format!("i{i}"),
            &Record(vec![
                ("a".to_string(), Value::Str(a.into())),
                ("b".to_string(), Value::Str(bb.into())),
            ]),
        );
    }
    let snap = b.commit();
    let mut q = parse_query(
            &serde_json::json!({"criteria": [{"dimension": "t", "value": "ab a", "searchStyle": "startsWith"}]}),
            &snap.dims,
            10,
        )
        .unwrap();
    let t = text_matcher(&mut q);
    t.prepare(&snap, 0);
    assert!(
        t.rank.len() >= 16_384,
        "{} matches: not split",
        t.rank.len()
    );
    // one document of each pattern, far apart in doc order
    for doc in (0..40_000u32).step_by(997) {
        let got = prepared(t, doc);
        assert_eq!(got, row_score(t, &snap, 0, doc), "doc {doc}");
    }
}

/// A token repeated beyond the highest level key is counted from the row.
#[test]
fn frequencies_beyond_the_levels_come_from_the_row() {
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims()));
    let many = vec!["x"; 300].join(" ");
    b.upsert("big", &Record(vec![("a".to_string(), Value::Str(many))]));
    b.upsert(
        "small",
        &Record(vec![("a".to_string(), Value::Str("x x y".into()))]),
    );
    let snap = b.commit();
    for body in [
        serde_json::json!({"criteria": [{"dimension": "t", "value": "x"}]}),
        serde_json::json!({"criteria": [{"dimension": "t", "value": "x", "searchStyle": "startsWith"}]}),
    ] {
        check(&snap, body).unwrap();
    }
    // and the same from postings counted from scratch, as at start-up
    let rebuilt = snap.clone().with_built_postings();
    check(
        &rebuilt,
        serde_json::json!({"criteria": [{"dimension": "t", "value": "x y"}]}),
    )
    .unwrap();
}
