//! The snapshot's own tests: its documents' estimate, columns and length unions
//! rebuilt after an apply.

use super::*;
use crate::columns::SegmentCol;
use crate::keys::KeyCol;
use crate::ranges::RangeTable;
use discern_model::{Record, Value};
use proptest::test_runner::TestCaseError;

use crate::test_support::keyword_dims as dims;

/// The documents' estimate, from a sample of slots, is their measured size scaled to
/// the live ones: it skips empty slots and reaches the last chunks (here, where the
/// documents' ids are longer).
#[test]
fn the_documents_estimate_samples_the_whole_index() {
    let mut w = IndexWriter::new();
    let s0 = Snapshot::empty(dims());
    let rec = Record(vec![("k".into(), Value::Str("v".into()))]);
    let mut b = w.begin(&s0);
    let n = 20 * CHUNK;
    let id = |i: usize| match i < n / 2 {
        true => format!("s{i:05}"),
        false => format!("{i:0>200}"),
    };
    for i in 0..n {
        b.upsert(&id(i), &rec);
    }
    for i in (0..n / 2).step_by(3) {
        b.delete(&id(i));
    }
    let s = b.commit();
    let exact: usize = s.docs().map(Snapshot::doc_bytes).sum();
    let estimate = s.rows_bytes_sampled().expect("documents sampled");
    let off = estimate.abs_diff(exact) as f64 / exact as f64;
    assert!(off < 0.02, "estimate {estimate}, exact {exact}");
}

/// The chunks an apply copied are named for rebuilding with the columns the replaced
/// snapshot had built — those only — and `build_columns` builds them.
#[test]
fn copied_chunks_get_their_columns_back() {
    let mut w = IndexWriter::new();
    let s0 = Snapshot::empty(dims());
    let rec = |v: &str| Record(vec![("k".into(), Value::Str(v.into()))]);
    let mut b = w.begin(&s0);
    for i in 0..CHUNK + 10 {
        b.upsert(&format!("i{i:05}"), &rec("v"));
    }
    let s1 = b.commit();
    // the first chunk's columns and key column are built, the second's not
    s1.key_col(0, 0).expect("a key column");
    let mut b = w.begin(&s1);
    b.upsert("i00003", &rec("w"));
    b.upsert(&format!("i{:05}", CHUNK + 3), &rec("w"));
    let s2 = b.commit();
    assert!(s2.chunks[0].cols.get().is_none());
    assert_eq!(
        s2.estimated_bytes_parts().columns,
        0,
        "no columns built yet"
    );
    let jobs = s2.columns_to_rebuild(&s1);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].chunk, 0);
    s2.build_columns(jobs.into_iter().next().expect("one job"));
    let cols = s2.chunks[0].cols.get().expect("columns built");
    assert!(cols.keys[0].get().is_some());
    // the estimate counts them: at least the key column and the id keys
    assert!(s2.estimated_bytes_parts().columns >= CHUNK * (4 + 8));
    assert!(s2.chunks[1].cols.get().is_none());
    // nothing copied since: nothing to build
    assert!(s2.clone().columns_to_rebuild(&s2).is_empty());
}

/// A frozen dimension's overlay, due and folded off a snapshot, is adopted by that
/// snapshot — the same postings, the overlay merged — and not by one an apply changed
/// since.
#[test]
fn folded_postings_are_adopted_only_where_unchanged() {
    let mut w = IndexWriter::new();
    let rec = |v: String| Record(vec![("k".into(), Value::Str(v))]);
    let mut b = w.begin(&Snapshot::empty(dims()));
    for i in 0..10 {
        b.upsert(&format!("i{i}"), &rec(format!("v{i}")));
    }
    let s1 = b.commit();
    assert!(!s1.postings_to_fold());
    let mut b = w.begin(&s1);
    for i in 10..13 {
        b.upsert(&format!("i{i}"), &rec(format!("v{i}")));
    }
    let s2 = b.commit();
    assert!(
        s2.postings_to_fold(),
        "three new keys beside ten: due, not overdue"
    );
    let folded = s2.fold_postings();
    assert!(!folded.is_empty());
    let s3 = s2.adopt_folded(&folded).expect("adopted");
    assert!(!s3.postings_to_fold());
    assert_eq!(postings_of(&s3), postings_of(&s2));
    assert_eq!(
        postings_of(&s3),
        postings_of(&s2.clone().with_built_postings())
    );
    let mut b = w.begin(&s2);
    b.upsert("i13", &rec("v13".into()));
    let s4 = b.commit();
    assert!(s4.adopt_folded(&folded).is_none());
}

const COLUMN_DIMS: &[u8] = b"<dimensions>
  <dimension id='k' type='keyword'/>
  <dimension id='a' type='groupBy'/>
  <dimension id='t' type='tree'>
    <element id='A'><element id='A1'/><element id='A2'/></element>
    <element id='B'><element id='B1'/></element>
  </dimension>
  <dimension id='o' type='ordered'><element id='1'/><element id='2'/><element id='3'/></dimension>
  <dimension id='m' type='mutex'><element id='s'/><element id='r'/></dimension>
  <dimension id='g' type='geoloc' latitude='lat' longitude='lon'/>
  <dimension id='x' type='text'><field id='h'/><field id='b'/></dimension>
  <dimension id='n' type='integer'>
    <element id='low' value='[,0)'/><element id='mid' value='[0,5]'/><element id='high' value='(5,]'/>
  </dimension>
  <dimension id='d' type='double'/>
</dimensions>";

/// The id of the `i`-th item of `numbered_snapshot`.
fn id(i: usize) -> String {
    format!("i{i:03}")
}

/// A first snapshot of `records`, the `i`-th as item `id(i)`.
fn numbered_snapshot(
    w: &mut IndexWriter,
    dims: &Arc<Dimensions>,
    records: impl Iterator<Item = Record>,
) -> Snapshot {
    let mut b = w.begin(&Snapshot::empty(dims.clone()));
    for (i, r) in records.enumerate() {
        b.upsert(&id(i), &r);
    }
    b.commit()
}

/// A record holding, for each of `COLUMN_DIMS`, 0 to 2 values picked by `pick`.
fn column_record(pick: &[u8]) -> Record {
    let p = |i: usize| pick.get(i).copied().unwrap_or(0) as usize;
    let mut r: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, vs: &[String]| match vs {
        [] => {}
        [one] => r.push((k.into(), Value::Str(one.clone()))),
        _ => r.push((
            k.into(),
            Value::Array(vs.iter().map(|v| Value::Str(v.clone())).collect()),
        )),
    };
    let some = |n: usize, of: &[&str], at: usize| -> Vec<String> {
        (0..n % 3)
            .map(|j| of[(at + j) % of.len()].to_string())
            .collect()
    };
    put("k", &some(p(0), &["a", "b", "c", "d"], p(1)));
    put("a", &some(p(2), &["x", "y"], p(3)));
    put("t", &some(p(4), &["A", "A1", "A2", "B", "B1"], p(5)));
    put("o", &some(p(6), &["1", "2", "3"], p(7)));
    put("m", &some(p(8), &["s", "r"], p(9)));
    if p(10) % 3 > 0 {
        put("lat", &[format!("{}", 39 + p(11) % 3)]);
        put("lon", &[format!("-7{}", p(12) % 3)]);
    }
    put("h", &some(p(13), &["red car", "blue", "green cart"], p(14)));
    put("b", &some(p(15), &["one two three", "x"], p(16)));
    // (49 values each: a bound is often held by one document alone)
    // (mostly one value: the bound is then often a row's alone)
    let nums = (0..[0, 1, 1, 1, 1, 1, 2][p(17)])
        .map(|j| format!("{}", (p(18 + j) * 7 + p(1 + j)) as i64 - 20));
    put("n", &nums.collect::<Vec<_>>());
    // (halves are held as f32s; a tenth is not, and widens its chunk's column)
    let ds = (0..[0, 1, 1, 1, 1, 1, 2][p(20)]).map(|j| {
        let tenth = if p(15 + j) == 6 { 1 } else { 5 };
        format!("{}.{tenth}", p(21 + j) * 7 + p(5 + j))
    });
    put("d", &ds.collect::<Vec<_>>());
    Record(r)
}

/// A tree column whose side list (documents with several elements) passes what a byte
/// numbers is held in two bytes a document, and in one again once a patch leaves each
/// document one element: as the column built whole is.
#[test]
fn element_columns_widen_and_narrow_again() {
    use crate::columns::Col;
    use crate::narrow::ElemIds;
    let dims = Arc::new(Dimensions::parse(COLUMN_DIMS).unwrap());
    let t = dims.dims.iter().position(|d| d.id == "t").unwrap();
    let with = |i: usize, values: u8| {
        let mut pick = vec![0u8; 23];
        (pick[4], pick[5]) = (values, (i % 5) as u8);
        column_record(&pick)
    };
    let mut w = IndexWriter::new();
    let s1 = numbered_snapshot(&mut w, &dims, (0..200).map(|i| with(i, 2)));
    let e_of = |c: Option<&Col>| match c {
        Some(Col::Elem { e, deepest, .. }) => (e.clone(), deepest.clone()),
        other => panic!("not an element column: {other:?}"),
    };
    let (e, deepest) = e_of(s1.chunks[0].cols(&dims).col(t));
    assert!(matches!(e, ElemIds::Mid(_)), "{e:?}");
    assert!(matches!(deepest, ElemIds::Narrow(_)), "{deepest:?}");
    let mut b = w.begin(&s1);
    for i in 0..200 {
        b.upsert(&id(i), &with(i, 1));
    }
    let s2 = b.commit();
    let jobs = s2.columns_to_rebuild(&s1);
    drop(s1);
    jobs.into_iter().for_each(|job| s2.build_columns(job));
    let patched = s2.chunks[0].cols.get().expect("patched");
    let whole = ChunkCols::build(&dims, &s2.chunks[0].docs);
    let (e, _) = e_of(patched.col(t));
    assert!(matches!(e, ElemIds::Narrow(_)), "{e:?}");
    assert_eq!(
        format!("{:?}", patched.col(t)),
        format!("{:?}", whole.col(t))
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The columns of a chunk an apply copied, made from the columns of the chunk it
    /// copied and the documents it changed, are the columns built whole: every
    /// column, the key and segment columns the old chunk had built, the numeric
    /// bounds and the side lists.
    #[test]
    fn patched_columns_are_the_columns_built_whole(
        before in proptest::collection::vec(proptest::collection::vec(0u8..7, 23), 1..60),
        changes in proptest::collection::vec(
            (0usize..80, 0u8..3, proptest::collection::vec(0u8..7, 23), 0usize..23, 0u8..7),
            0..40),
        in_place: bool,
    ) {
        let dims = Arc::new(Dimensions::parse(COLUMN_DIMS).unwrap());
        let mut w = IndexWriter::new();
        let s1 = numbered_snapshot(&mut w, &dims, before.iter().map(|p| column_record(p)));
        // every column the first chunk has: its columns, keys, segments
        for di in 0..dims.dims.len() {
            s1.key_col(0, di);
            s1.segment_col(0, di);
        }
        let mut b = w.begin(&s1);
        for (i, how, pick, at, to) in &changes {
            match how {
                0 => b.delete(&id(*i)),
                1 => b.upsert(&id(*i), &column_record(pick)),
                // (one value changed, as an update changes a price: most columns kept)
                _ => {
                    let mut pick = before[i % before.len()].clone();
                    pick[*at] = *to;
                    b.upsert(&id(i % before.len()), &column_record(&pick))
                }
            }
        }
        let s2 = b.commit();
        let jobs = s2.columns_to_rebuild(&s1);
        let copied = !jobs.is_empty();
        let first_shared = Arc::ptr_eq(&s1.chunks[0], &s2.chunks[0]);
        if in_place {
            // the jobs then hold the copied chunks alone: patched in place
            drop(s1);
            proptest::prop_assert!(jobs.iter().all(|j| Arc::strong_count(&j.old) == 1));
        }
        for job in jobs {
            s2.build_columns(job);
        }
        let whole = ChunkCols::build(&dims, &s2.chunks[0].docs);
        for di in 0..dims.dims.len() {
            if let Some(numbers) = s2.key_numbers(di) {
                let _ = whole.keys[di].set(Arc::new(KeyCol::build(&s2.chunks[0].docs, di, numbers)));
            }
            if let (discern_dimensions::DimensionKind::Numeric(spec), Some(col)) =
                (&dims.dims[di].kind, whole.col(di))
            {
                let table = RangeTable::of(spec);
                let _ = whole.segments[di].set(SegmentCol::build(col, &table).map(Arc::new));
            }
        }
        let rows_min = s2.chunks[0].docs.iter().flatten().map(|d| d.id_key()).min();
        proptest::prop_assert_eq!(whole.min_id_key, rows_min.unwrap_or(u64::MAX));
        match s2.chunks[0].cols.get() {
            Some(patched) => proptest::prop_assert_eq!(format!("{patched:?}"), format!("{whole:?}")),
            // (nothing changed: the chunk was not copied)
            None => proptest::prop_assert!(!copied && first_shared),
        }
    }
}

/// The same postings, live documents and did-you-mean dictionaries in `a` and `b`.
fn same_index(a: &Snapshot, b: &Snapshot, after: &str) -> Result<(), TestCaseError> {
    proptest::prop_assert_eq!(postings_of(a), postings_of(b), "after {}", after);
    proptest::prop_assert_eq!(&*a.live_docs, &*b.live_docs, "after {}", after);
    for di in 0..a.dims.dims.len() {
        proptest::prop_assert_eq!(
            a.term_dict(di).map(TermDict::entries),
            b.term_dict(di).map(TermDict::entries),
            "dimension {} after {}",
            di,
            after
        );
    }
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// An apply into an empty index that counts its postings and dictionaries at the
    /// end (`Builder::count_at_end`, a first bulk load) makes the snapshot an apply
    /// recording each change makes — every dimension type, items written twice and
    /// deleted within the apply — and the applies after it keep both alike.
    #[test]
    fn counted_at_end_equals_recorded(
        first in proptest::collection::vec((0usize..50, 0u8..4, proptest::collection::vec(0u8..7, 23)), 1..80),
        then in proptest::collection::vec((0usize..60, 0u8..4, proptest::collection::vec(0u8..7, 23)), 0..30),
    ) {
        let dims = Arc::new(Dimensions::parse(COLUMN_DIMS).unwrap());
        let apply = |b: &mut crate::Builder<'_>, changes: &[(usize, u8, Vec<u8>)]| {
            for (i, how, pick) in changes {
                match how {
                    0 => b.delete(&id(*i)),
                    _ => b.upsert(&id(*i), &column_record(pick)),
                }
            }
        };
        let (mut recording, mut counting) = (IndexWriter::new(), IndexWriter::new());
        let empty = Snapshot::empty(dims.clone());
        let mut b = recording.begin(&empty);
        apply(&mut b, &first);
        let recorded = b.commit();
        let mut b = counting.begin(&empty);
        b.count_at_end();
        apply(&mut b, &first);
        let counted = b.commit();
        same_index(&recorded, &counted, "the first apply")?;
        let mut b = recording.begin(&recorded);
        apply(&mut b, &then);
        let recorded = b.commit();
        let mut b = counting.begin(&counted);
        apply(&mut b, &then);
        let counted = b.commit();
        same_index(&recorded, &counted, "the apply after it")?;
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// A numeric dimension's span read from its extreme buckets' documents is the
    /// span of every chunk's column bounds — for whole numbers (a bucket of one
    /// integer, or wide buckets of several) and doubles, several values per item,
    /// after deletes and replacements — and a walk over more documents than its
    /// budget gives up rather than answer from part of them.
    #[test]
    fn span_from_buckets_is_the_columns_span(
        before in proptest::collection::vec(
            proptest::collection::vec((0u8..4, -3000i64..3000), 0..3), 1..200),
        changes in proptest::collection::vec(
            (0usize..220, proptest::collection::vec((0u8..4, -3000i64..3000), 0..3)),
            0..60),
        budget in 0u64..8,
    ) {
        let dims = Arc::new(
            Dimensions::parse(
                b"<dimensions><dimension id='i' type='integer'/>
                  <dimension id='l' type='long'/><dimension id='d' type='double'/>
                  <dimension id='k' type='keyword'/></dimensions>",
            )
            .unwrap(),
        );
        // (dimension, value): integers near 0 (a bucket each) or wide apart, doubles
        // with fractions, and now and then a value that is not a number
        let to_record = |vals: &[(u8, i64)]| {
            let mut by_key: Vec<(String, Vec<Value>)> = Vec::new();
            for &(dim, x) in vals {
                let (key, v) = match dim {
                    0 => ("i", (x / 20).to_string()),
                    1 => ("l", (x * 1_000_003).to_string()),
                    2 => ("d", format!("{}", x as f64 / 7.0)),
                    _ => ("d", "not a number".to_string()),
                };
                match by_key.iter_mut().find(|(k, _)| k == key) {
                    Some((_, vs)) => vs.push(Value::Str(v)),
                    None => by_key.push((key.into(), vec![Value::Str(v)])),
                }
            }
            let mut r: Vec<(String, Value)> = vec![("k".into(), Value::Str("v".into()))];
            r.extend(by_key.into_iter().map(|(k, mut vs)| {
                (k, if vs.len() == 1 { vs.remove(0) } else { Value::Array(vs) })
            }));
            Record(r)
        };
        let mut w = IndexWriter::new();
        let s1 = numbered_snapshot(&mut w, &dims, before.iter().map(|v| to_record(v)));
        let mut b = w.begin(&s1);
        for (i, vals) in &changes {
            if vals.is_empty() && i % 2 == 0 {
                b.delete(&id(*i));
            } else {
                b.upsert(&id(*i), &to_record(vals));
            }
        }
        let s2 = b.commit();
        for snap in [&s1, &s2] {
            for dim in 0..3 {
                let columns = snap.span_from_columns(dim);
                proptest::prop_assert_eq!(snap.span_from_postings(dim, u64::MAX), Some(columns));
                if let Some(span) = snap.span_from_postings(dim, budget) {
                    proptest::prop_assert_eq!(span, columns);
                }
            }
        }
    }
}

/// The text fields whose length classes are not united are named — every field of
/// a new index, and of a text dimension whose postings an apply copied — and
/// `build_length_unions` unites them from the new postings.
#[test]
fn changed_text_fields_get_their_length_unions_back() {
    let dims = Arc::new(
        Dimensions::parse(
            b"<dimensions><dimension id='k' type='keyword'/>
              <dimension id='x' type='text'><field id='a'/><field id='b'/></dimension>
              </dimensions>",
        )
        .unwrap(),
    );
    let mut w = IndexWriter::new();
    let rec = |k: &str, a: &str| {
        Record(vec![
            ("k".into(), Value::Str(k.into())),
            ("a".into(), Value::Str(a.into())),
            ("b".into(), Value::Str("some words".into())),
        ])
    };
    let mut b = w.begin(&Snapshot::empty(dims));
    b.upsert("i1", &rec("v", "one two"));
    b.upsert("i2", &rec("v", "one two three"));
    let s1 = b.commit();
    assert_eq!(s1.length_unions_missing(), [(1, 0), (1, 1)]);
    s1.build_length_unions(&s1.length_unions_missing());
    assert!(s1.length_unions_missing().is_empty());
    let before = s1.postings(1).unwrap().shorter_than(0);
    let mut b = w.begin(&s1);
    b.upsert("i3", &rec("v", "one"));
    let s2 = b.commit();
    assert_eq!(s2.length_unions_missing(), [(1, 0), (1, 1)]);
    s2.build_length_unions(&s2.length_unions_missing());
    assert!(s2.length_unions_missing().is_empty());
    // united from the new postings: the one-word field is the shortest class
    let after = s2.postings(1).unwrap().shorter_than(0);
    assert_eq!(before.first().map(|c| c.0), Some(2));
    assert_eq!(after.first().map(|c| (c.0, c.1.len())), Some((1, 1)));
}

/// One dimension's postings as plain values: (key, set) pairs, `has`, field stats.
type PlainPostings = (
    Vec<(Vec<u8>, RoaringBitmap)>,
    RoaringBitmap,
    Vec<(u64, u64)>,
);

fn postings_of(s: &Snapshot) -> Vec<Option<PlainPostings>> {
    s.postings
        .iter()
        .map(|p| {
            p.as_ref().map(|p| {
                let keys: Vec<_> = p
                    .entries()
                    .map(|(k, b)| (k.into_owned(), b.bitmap().into_owned()))
                    .collect();
                assert_eq!(p.len(), keys.len(), "the keys counted");
                (keys, (*p.has).clone(), p.field_stats.clone())
            })
        })
        .collect()
}

/// One apply: (item, new state: None deletes) pairs, whether a reset comes first,
/// whether a reader keeps the resulting snapshot, whether the spare catches up
/// before the next apply (as the engine does in the background), and whether the
/// apply fails after its snapshot was prepared (its store commit failed).
type Step = (Vec<(u8, Option<(Vec<u8>, u8)>)>, bool, bool, bool, bool);

proptest::proptest! {
    /// Postings kept current through the writer's spare copy, and did-you-mean
    /// dictionaries, equal those counted from the documents, after every apply,
    /// also after prepared applies that failed; the documents are those the
    /// applies that did not fail made; and no snapshot a reader holds ever changes
    /// (the spare is updated in place only where nothing else holds it).
    #[test]
    fn spare_postings_equal_a_recount_and_readers_see_no_change(
        steps in proptest::collection::vec(
            (proptest::collection::vec(
                (0u8..24, proptest::option::weighted(0.8, (proptest::collection::vec(0u8..6, 0..5), 0u8..4))),
                0..12),
             proptest::bool::weighted(0.05),
             proptest::bool::ANY,
             proptest::bool::ANY,
             proptest::bool::weighted(0.25)),
            1..14)
    ) {
        let steps: Vec<Step> = steps;
        let dims = Arc::new(
            Dimensions::parse(
                b"<dimensions><dimension id='k' type='keyword'/>\
                  <dimension id='t' type='text'/><dimension id='n' type='integer'/></dimensions>",
            )
            .unwrap(),
        );
        let words = ["red", "green", "blue", "red red", "teal green", "blue blue blue"];
        let mut w = IndexWriter::new();
        let mut snap = Snapshot::empty(dims.clone());
        let mut held: Vec<(Snapshot, Vec<_>)> = Vec::new();
        let mut items = std::collections::BTreeSet::new();
        for (changes, reset, keep, catch_up, fail) in steps {
            let before = items.clone();
            let mut b = w.begin(&snap);
            if reset {
                b.clear();
                items.clear();
            }
            for (item, state) in changes {
                let id = format!("i{item}");
                match state {
                    None => {
                        b.delete(&id);
                        items.remove(&id);
                    }
                    Some((ws, n)) => {
                        items.insert(id.clone());
                        let mut props = Vec::new();
                        if let Some(&first) = ws.first() {
                            props.push(("k".to_string(), Value::Str(words[first as usize].into())));
                        }
                        let text: Vec<&str> = ws.iter().map(|&x| words[x as usize]).collect();
                        props.push(("t".to_string(), Value::Str(text.join(" "))));
                        if n > 0 {
                            props.push(("n".to_string(), Value::Int(n as i64 * 10)));
                        }
                        b.upsert(&id, &Record(props));
                    }
                }
            }
            if fail {
                drop(b.prepare());
                items = before;
                continue;
            }
            snap = b.commit();
            let ids: std::collections::BTreeSet<String> =
                snap.docs().map(|d| d.id.to_string()).collect();
            proptest::prop_assert_eq!(&ids, &items);
            let want = postings_of(&snap.clone().with_built_postings());
            proptest::prop_assert_eq!(&postings_of(&snap), &want);
            let live: RoaringBitmap = snap.clone().with_built_postings().live_docs.as_ref().clone();
            proptest::prop_assert_eq!(&*snap.live_docs, &live);
            // the length unions the apply changed in place are those united anew; the
            // rest are united now, as the engine's upkeep does
            same_length_unions(&snap, 1)?;
            snap.build_length_unions(&snap.length_unions_missing());
            // did-you-mean frequencies tracked through the applies (an update that
            // leaves a dimension's value as it was changes none of its terms)
            let counted = snap.clone().with_built_terms();
            for di in 0..dims.dims.len() {
                proptest::prop_assert_eq!(
                    snap.term_dict(di).map(TermDict::entries),
                    counted.term_dict(di).map(TermDict::entries),
                    "dimension {}", di
                );
            }
            if keep {
                held.push((snap.clone(), want));
            }
            if catch_up {
                w.spare().catch_up();
            }
        }
        for (s, seen) in &held {
            proptest::prop_assert_eq!(&postings_of(s), seen);
            same_length_unions(s, 1)?;
        }
    }
}

/// Every length union text dimension `di` holds is the one its postings give.
fn same_length_unions(s: &Snapshot, di: usize) -> Result<(), TestCaseError> {
    let p = s.postings(di).expect("text postings");
    for field in p.shorter.fields() {
        proptest::prop_assert_eq!(
            &p.shorter_than(field)[..],
            &p.united_length_classes(field)[..],
            "field {}",
            field
        );
    }
    Ok(())
}

/// A burst of applies through the writer's spare unites no text field's length classes
/// anew: the unions of the postings the spare holds are changed with them.
#[test]
fn applies_through_the_spare_keep_length_unions() {
    let dims = Arc::new(
        Dimensions::parse(
            b"<dimensions><dimension id='x' type='text'><field id='a'/><field id='b'/>\
              </dimension></dimensions>",
        )
        .unwrap(),
    );
    let rec = |a: &str| {
        Record(vec![
            ("a".into(), Value::Str(a.into())),
            ("b".into(), Value::Str("some words".into())),
        ])
    };
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims));
    for (id, a) in [
        ("i1", "one two"),
        ("i2", "one two three"),
        ("i3", "x y"),
        ("i4", "x y z"),
    ] {
        b.upsert(id, &rec(a));
    }
    let mut snap = b.commit();
    // each apply makes or empties no class: in place once the spare holds unions
    for (i, (id, a)) in [
        ("i5", "p q"),
        ("i1", "k l m"),
        ("i6", "r s t"),
        ("i1", "d e"),
    ]
    .into_iter()
    .enumerate()
    {
        snap.build_length_unions(&snap.length_unions_missing());
        let mut b = w.begin(&snap);
        b.upsert(id, &rec(a));
        snap = b.commit();
        w.spare().catch_up();
        // (the first two applies' spares held the postings of no united snapshot)
        if i >= 2 {
            assert!(snap.length_unions_missing().is_empty(), "apply {i}");
        }
        same_length_unions(&snap, 0).unwrap();
    }
    let a = snap.postings(0).expect("text postings").shorter_than(0);
    let sizes: Vec<(usize, u64)> = a.iter().map(|(len, docs)| (*len, docs.len())).collect();
    assert_eq!(sizes, [(2, 3), (3, 6)]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Key columns built from the postings, a block at a time, are the columns built
    /// from the rows — for one key or several per document (repeats, other cases), a
    /// dimension of many keys, after deletes and replacements (copied chunks, overlaid
    /// postings) — and only the chunks asked for that lacked one are built.
    #[test]
    fn key_columns_from_postings_are_the_rows_columns(
        docs in 2 * CHUNK..5 * CHUNK,
        seed in 0u64..1_000_000,
        changes in proptest::collection::vec((0usize..6 * CHUNK, 0u8..3), 0..300),
        wanted in proptest::collection::vec(proptest::bool::ANY, 5),
    ) {
        let dims = Arc::new(
            Dimensions::parse(
                b"<dimensions><dimension id='k' type='keyword' ignoreCase='true'/>
                  <dimension id='a' type='groupBy'/><dimension id='w' type='keyword'/>
                  </dimensions>",
            )
            .unwrap(),
        );
        // a few keys, several a document; one key a document; many keys (a city's)
        let pick = |i: usize, salt: u64| (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
        let record = |i: usize, salt: u64| {
            let h = pick(i, salt);
            let mut r: Vec<(String, Value)> = Vec::new();
            let ks: Vec<Value> = (0..h % 5)
                .map(|j| Value::Str(["a", "B", "b", "c", "d", "e"][((h >> (8 + 3 * j)) % 6) as usize].into()))
                .collect();
            match ks.len() {
                0 => {}
                1 => r.push(("k".into(), ks[0].clone())),
                _ => r.push(("k".into(), Value::Array(ks))),
            }
            if h % 7 != 0 {
                r.push(("a".into(), Value::Str(format!("g{}", (h >> 30) % 3))));
            }
            r.push(("w".into(), Value::Str(format!("w{}", (h >> 40) % 700))));
            Record(r)
        };
        let mut w = IndexWriter::new();
        let s1 = numbered_snapshot(&mut w, &dims, (0..docs).map(|i| record(i, 0)));
        let mut b = w.begin(&s1);
        for (k, (i, how)) in changes.iter().enumerate() {
            match how {
                0 => b.delete(&id(*i)),
                _ => b.upsert(&id(*i), &record(*i, 1 + k as u64)),
            }
        }
        let s2 = b.commit();
        let wanted = |c: usize| wanted.get(c).copied().unwrap_or(true);
        for di in 0..dims.dims.len() {
            s2.build_key_cols(di, wanted);
            let numbers = s2.key_numbers(di).expect("a keyword dimension");
            for (c, chunk) in s2.chunks.iter().enumerate() {
                let built = chunk.cols.get().and_then(|cols| cols.keys[di].get());
                match (wanted(c), built) {
                    (true, Some(col)) => {
                        // (every key numbered by the build: the rows' column numbers alike)
                        let rows = KeyCol::build(&chunk.docs, di, numbers);
                        proptest::prop_assert_eq!(format!("{col:?}"), format!("{rows:?}"));
                    }
                    (true, None) => proptest::prop_assert!(false, "chunk {c} not built"),
                    (false, built) => proptest::prop_assert!(built.is_none(), "chunk {c} built"),
                }
            }
        }
        // the columns of the chunks a second apply copies, patched from these (lists or
        // masks), are the rows' columns too
        let mut b = w.begin(&s2);
        for (k, (i, how)) in changes.iter().enumerate() {
            match how {
                0 => b.upsert(&id(*i), &record(*i, 500 + k as u64)),
                _ => b.delete(&id(*i)),
            }
        }
        let s3 = b.commit();
        for job in s3.columns_to_rebuild(&s2) {
            s3.build_columns(job);
        }
        for di in 0..dims.dims.len() {
            let numbers = s3.key_numbers(di).expect("a keyword dimension");
            for chunk in s3.chunks.iter() {
                if let Some(col) = chunk.cols.get().and_then(|cols| cols.keys[di].get()) {
                    let rows = KeyCol::build(&chunk.docs, di, numbers);
                    proptest::prop_assert_eq!(format!("{col:?}"), format!("{rows:?}"));
                }
            }
        }
    }
}
