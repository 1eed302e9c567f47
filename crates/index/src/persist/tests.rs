//! The tests of the index file (`persist/mod.rs`).

use super::parts::encode_postings_of;
use super::*;
use crate::numbering::Numbering;
use crate::test_support::put_strings;
use discern_dimensions::IndexedValue;
use discern_model::{Record, Value};
use proptest::prelude::*;

const DIMS: &[u8] = br#"<dimensions>
        <dimension id="k" type="keyword"/>
        <dimension id="t" type="tree"><element id="A"><element id="A1"/></element><element id="B"/></dimension>
        <dimension id="g" type="geoloc" latitude="lat" longitude="lon"/>
        <dimension id="n" type="integer"/>
        <dimension id="d" type="double"/>
        <dimension id="x" type="text"><field id="x"/><field id="y"/></dimension>
    </dimensions>"#;

const WORDS: [&str; 6] = ["red", "green", "blue", "car", "cart", "ünï"];

/// (keywords, tree ids, point, integers, double, words of x, words of y)
type Spec = (
    Vec<usize>,
    Vec<usize>,
    Option<(f64, f64)>,
    Vec<i64>,
    Option<f64>,
    Vec<usize>,
    Vec<usize>,
);

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(0usize..4, 0..3),
        prop::collection::vec(0usize..3, 0..2),
        prop::option::of((-90.0f64..90.0, -180.0f64..180.0)),
        prop::collection::vec(-5i64..5, 0..3),
        prop::option::of(-1e9f64..1e9),
        prop::collection::vec(0usize..6, 0..5),
        prop::collection::vec(0usize..6, 0..3),
    )
}

fn record(s: &Spec) -> Record {
    let (kw, el, pt, ns, d, x, y) = s;
    let mut r = Record::default();
    put_strings(&mut r, "k", kw.iter().map(|k| format!("k{k}")).collect());
    put_strings(
        &mut r,
        "t",
        el.iter().map(|e| ["A", "A1", "B"][*e].into()).collect(),
    );
    put_strings(&mut r, "n", ns.iter().map(|n| n.to_string()).collect());
    if let Some((la, lo)) = pt {
        r.0.push(("lat".into(), Value::Str(la.to_string())));
        r.0.push(("lon".into(), Value::Str(lo.to_string())));
    }
    if let Some(d) = d {
        r.0.push(("d".into(), Value::Str(d.to_string())));
    }
    let words = |w: &[usize]| w.iter().map(|i| WORDS[*i]).collect::<Vec<_>>().join(" ");
    if !x.is_empty() {
        r.0.push(("x".into(), Value::Str(words(x))));
    }
    if !y.is_empty() {
        r.0.push(("y".into(), Value::Str(words(y))));
    }
    r
}

/// Every document and every structure of two snapshots, compared.
fn assert_same(a: &Snapshot, b: &Snapshot) {
    assert_eq!(a.generation, b.generation);
    assert_eq!(a.live, b.live);
    assert_eq!(a.chunks.len(), b.chunks.len());
    for n in 0..(a.chunks.len() * CHUNK) as u32 {
        let (x, y) = (a.doc(n), b.doc(n));
        assert_eq!(
            x.map(|d| (&d.id, d.id_key(), d.slots())),
            y.map(|d| (&d.id, d.id_key(), d.slots()))
        );
        for di in 0..a.dims.dims.len() {
            assert_eq!(a.shown_value(n, di), b.shown_value(n, di));
        }
    }
    for di in 0..a.dims.dims.len() {
        assert_eq!(
            a.vocab(di).map(|v| v.read().all().to_vec()),
            b.vocab(di).map(|v| v.read().all().to_vec())
        );
    }
    assert_eq!(*a.live_docs, *b.live_docs);
    for di in 0..a.dims.dims.len() {
        let (p, q) = (a.postings(di).unwrap(), b.postings(di).unwrap());
        assert_eq!(*p.has, *q.has);
        assert_eq!(p.field_stats, q.field_stats);
        // (every key, the map's or a frozen dimension's FST and overlay)
        let keys = |p: &crate::postings::DimPostings| -> Vec<_> {
            p.entries()
                .map(|(k, v)| (k.into_owned(), v.bitmap().into_owned()))
                .collect()
        };
        assert_eq!(keys(p), keys(q));
        assert_eq!(p.len(), q.len());
        assert_eq!(p.frozen.is_some(), q.frozen.is_some());
        for k in keys(p).iter().map(|(k, _)| k) {
            assert_eq!(
                p.get(k).map(|v| v.bitmap().into_owned()),
                q.get(k).map(|v| v.bitmap().into_owned())
            );
        }
        assert_eq!(
            a.term_dict(di).map(TermDict::entries),
            b.term_dict(di).map(TermDict::entries)
        );
    }
}

fn saved(snap: &Snapshot, w: &IndexWriter, header: &[u8]) -> Vec<u8> {
    saved_as(snap, &w.counts(), header, Encode::Parallel, SPILL_AT)
}

fn saved_as(
    snap: &Snapshot,
    counts: &WriterCounts,
    header: &[u8],
    encode: Encode,
    spill_at: usize,
) -> Vec<u8> {
    let mut out = io::Cursor::new(Vec::new());
    let snap = Arc::new(snap.clone());
    save_spilling_at(snap, counts, header, &mut out, encode, spill_at).unwrap();
    out.into_inner()
}

fn reload(file: &[u8], header: &[u8]) -> Result<(Snapshot, IndexWriter), LoadError> {
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    load(dims, header, file, file.len() as u64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// A saved and loaded index is the index: the same documents under the same
    /// numbers, postings, dictionaries and counters, and later applies to either
    /// give the same next snapshot.
    #[test]
    fn save_then_load_is_the_same_index(
        specs in prop::collection::vec(spec(), 1..40),
        pad in 0usize..1500,
        deleted in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        later in prop::collection::vec(spec(), 0..5),
    ) {
        let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
        let mut w = IndexWriter::new();
        let mut b = w.begin(&Snapshot::empty(dims));
        let total = pad + specs.len();
        for i in 0..total {
            b.upsert(&format!("i{i}"), &record(&specs[i % specs.len()]));
        }
        let snap = b.commit();
        let mut b = w.begin(&snap);
        for d in &deleted {
            b.delete(&format!("i{}", d.index(total)));
        }
        let snap = b.commit();

        let file = saved(&snap, &w, b"state 7");
        // encoded on one thread: the same bytes
        let counts = w.counts();
        let one = saved_as(&snap, &counts, b"state 7", Encode::OnThisThread, SPILL_AT);
        prop_assert!(one == file);
        // the large blocks written in pieces of a few bytes: the same bytes
        let pieces = saved_as(&snap, &counts, b"state 7", Encode::Parallel, 5);
        prop_assert!(pieces == file);
        let (loaded, mut lw) = reload(&file, b"state 7").unwrap();
        assert_same(&snap, &loaded);
        prop_assert_eq!(lw.errors, w.errors);
        prop_assert_eq!(lw.by_id.len(), w.by_id.len());

        // the same apply on both: new items take the same free numbers
        let apply = |w: &mut IndexWriter, s: &Snapshot| {
            let mut b = w.begin(s);
            for (i, sp) in later.iter().enumerate() {
                b.upsert(&format!("new{i}"), &record(sp));
                b.upsert(&format!("i{}", i * 3 % total), &record(sp));
            }
            b.delete("i1");
            b.commit()
        };
        let (s1, s2) = (apply(&mut w, &snap), apply(&mut lw, &loaded));
        prop_assert_eq!(&w.free, &lw.free);
        assert_same(&s1, &s2);
        // counts taken with a snapshot still save that snapshot once the writer
        // has moved on (its text vocabularies, shared and only appended to, may
        // number more tokens by then)
        let later_save = saved_as(&snap, &counts, b"state 7", Encode::OnThisThread, SPILL_AT);
        let (later_loaded, mut llw) = reload(&later_save, b"state 7").unwrap();
        assert_same(&snap, &later_loaded);
        prop_assert_eq!(llw.errors, lw.errors);
        let s3 = apply(&mut llw, &later_loaded);
        prop_assert_eq!(&w.free, &llw.free);
        assert_same(&s1, &s3);
    }
}

fn small() -> (Snapshot, IndexWriter) {
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims));
    let s: Spec = (
        vec![1],
        vec![1],
        Some((40.0, -75.0)),
        vec![3],
        Some(2.5),
        vec![0, 5],
        vec![3],
    );
    b.upsert("a", &record(&s));
    b.upsert("b", &Record::default());
    let snap = b.commit();
    (snap, w)
}

/// The keyword value (dimension 0) of document `n`, as the address of its bytes.
fn keyword_at(snap: &Snapshot, n: u32) -> *const u8 {
    match snap.doc(n).and_then(|d| d.value(0)).as_deref() {
        Some(IndexedValue::Strings(l)) => l.as_raw().as_ptr(),
        other => panic!("no keyword value: {other:?}"),
    }
}

/// The text value (dimension 5) of document `n`, as the address of its bytes.
fn text_at(snap: &Snapshot, n: u32) -> *const u8 {
    match snap.doc(n).and_then(|d| d.value(5)).as_deref() {
        Some(IndexedValue::Terms(l)) => l.as_raw().as_ptr(),
        other => panic!("no text value: {other:?}"),
    }
}

/// The element list (dimension 1) of document `n`, as the address of its elements.
fn elements_at(snap: &Snapshot, n: u32) -> *const u32 {
    match snap.doc(n).and_then(|d| d.value(1)).as_deref() {
        Some(IndexedValue::Elements(e)) => e.as_ptr(),
        other => panic!("no elements: {other:?}"),
    }
}

/// Documents with equal keyword (or text, or element) values share one copy, as built and as
/// loaded (where the copies are never made), and an apply after a load shares the
/// loaded copy.
#[test]
fn equal_keyword_values_are_one_copy() {
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims));
    let s: Spec = (vec![1, 2], vec![1], None, vec![], None, vec![0], vec![]);
    let other: Spec = (vec![3], vec![1], None, vec![], None, vec![0], vec![]);
    for i in 0..3 {
        b.upsert(&format!("i{i}"), &record(&s));
    }
    b.upsert("o", &record(&other));
    let snap = b.commit();
    assert_eq!(keyword_at(&snap, 0), keyword_at(&snap, 2));
    assert_ne!(keyword_at(&snap, 0), keyword_at(&snap, 3));

    let (loaded, mut lw) = reload(&saved(&snap, &w, b"h"), b"h").unwrap();
    assert_same(&snap, &loaded);
    assert_eq!(keyword_at(&loaded, 0), keyword_at(&loaded, 1));
    assert_eq!(keyword_at(&loaded, 0), keyword_at(&loaded, 2));
    assert_ne!(keyword_at(&loaded, 0), keyword_at(&snap, 0));
    // every document has the same text and elements: one copy
    assert_eq!(text_at(&snap, 0), text_at(&snap, 3));
    assert_eq!(text_at(&loaded, 0), text_at(&loaded, 3));
    assert_eq!(elements_at(&snap, 0), elements_at(&snap, 3));
    assert_eq!(elements_at(&loaded, 0), elements_at(&loaded, 3));
    let mut b = lw.begin(&loaded);
    b.upsert("new", &record(&s));
    let next = b.commit();
    assert_eq!(keyword_at(&next, 4), keyword_at(&loaded, 0));
}

#[test]
fn another_state_or_format_is_stale() {
    let (snap, w) = small();
    let file = saved(&snap, &w, b"state 1");
    assert!(matches!(reload(&file, b"state 2"), Err(LoadError::Stale)));
    let mut other = file.clone();
    other[8] ^= 0xff; // FORMAT
    assert!(matches!(reload(&other, b"state 1"), Err(LoadError::Stale)));
    assert!(reload(&file, b"state 1").is_ok());
}

#[test]
fn a_damaged_file_is_an_error_never_an_index() {
    let (snap, w) = small();
    let file = saved(&snap, &w, b"h");
    for cut in 0..file.len() {
        assert!(reload(&file[..cut], b"h").is_err(), "truncated at {cut}");
    }
    for at in 0..file.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = file.clone();
            bad[at] ^= bit;
            assert!(reload(&bad, b"h").is_err(), "byte {at} flipped by {bit:#x}");
        }
    }
}

/// The contents of a saved file's blocks, after its 12-byte head (each block: its
/// length, a 4-byte checksum, its contents).
fn blocks_of(file: &[u8]) -> Vec<Vec<u8>> {
    let mut blocks = Vec::new();
    let mut at = 12;
    while at < file.len() {
        let len = u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
        blocks.push(file[at + 12..at + 12 + len].to_vec());
        at += 12 + len;
    }
    blocks
}

/// A postings block says which form follows its head: a frozen form is refused for
/// a dimension that cannot be frozen, and an unknown form for any.
#[test]
fn a_postings_form_must_fit_its_dimension() {
    let dims = Arc::new(Dimensions::parse(DIMS).unwrap());
    let mut w = IndexWriter::new();
    let mut b = w.begin(&Snapshot::empty(dims));
    for i in 0..8 {
        let s: Spec = (vec![i % 4], vec![], None, vec![], None, vec![], vec![]);
        b.upsert(&format!("i{i}"), &record(&s));
    }
    let snap = b.commit();
    assert!(snap.postings(0).unwrap().frozen.is_some());
    let file = saved(&snap, &w, b"h");
    let blocks = blocks_of(&file);
    // (blocks: header, counts, live set, then the first dimension's postings)
    let frozen = &blocks[3];
    assert!(decode_postings(frozen, true)
        .unwrap()
        .unwrap()
        .frozen
        .is_some());
    assert!(matches!(
        decode_postings(frozen, false),
        Err(Corrupt("postings form"))
    ));
    // the form byte follows the head: present, the documents with a value, and no
    // text fields' figures (a keyword dimension)
    let has_len = u64::from_le_bytes(frozen[1..9].try_into().unwrap()) as usize;
    let form_at = 1 + 8 + has_len + 4;
    assert_eq!(frozen[form_at], 1);
    let mut unknown = frozen.clone();
    unknown[form_at] = 7;
    assert!(matches!(
        decode_postings(&unknown, true),
        Err(Corrupt("postings form"))
    ));
}

#[test]
fn checksummed_but_inconsistent_blocks_are_rejected() {
    // blocks rewritten with valid checksums around wrong contents
    let (snap, w) = small();
    let file = saved(&snap, &w, b"h");
    let blocks = blocks_of(&file);
    let rebuild = |blocks: &[Vec<u8>]| {
        let mut out = file[..12].to_vec();
        for b in blocks {
            write_block(&mut out, b).unwrap();
        }
        out
    };
    assert!(reload(&rebuild(&blocks), b"h").is_ok());
    // the block before the end one is the one chunk: a change in it gives an error
    // or a valid index, never a panic
    let chunk = blocks.len() - 2;
    for i in 0..blocks[chunk].len() {
        let mut b = blocks.clone();
        b[chunk][i] ^= 0x80;
        let _ = reload(&rebuild(&b), b"h");
    }
    let mut b = blocks.clone();
    b[1][16] = 0; // `next` says no documents
    assert!(reload(&rebuild(&b), b"h").is_err());
    // the text dimension's vocabulary (after the header, counts, live documents and
    // six postings and six dictionary blocks: block 15 + 5) with a word fewer: the
    // document's last token number has no word
    let text_vocab = 3 + 2 * 6 + 5;
    let vocab = decode_vocab(&blocks[text_vocab]).unwrap().unwrap();
    let words = vocab.read().all().to_vec();
    assert_eq!(words.len(), 3, "{words:?}");
    let shorter = Numbering::from_strings(words[..2].to_vec());
    let mut b = blocks.clone();
    b[text_vocab] = encode_vocab(shorter.as_ref());
    assert!(matches!(
        reload(&rebuild(&b), b"h"),
        Err(LoadError::Corrupt(Corrupt("token numbers")))
    ));
    // two documents with one id ("b" renamed "a"; with the same number of ids as
    // live documents, only the lookup of each id before it is listed catches it)
    let mut b = blocks.clone();
    let named_b: &[u8] = &[1, 1, 0, 0, 0, 0, 0, 0, 0, b'b'];
    let at = (b[chunk].windows(named_b.len()))
        .position(|w| w == named_b)
        .expect("document b in the chunk block");
    b[chunk][at + named_b.len() - 1] = b'a';
    assert!(matches!(
        reload(&rebuild(&b), b"h"),
        Err(LoadError::Corrupt(Corrupt("document numbers")))
    ));
    // a word twice, or a vocabulary for a dimension that is not text
    let mut e = Enc::default();
    e.u8(1);
    e.u32(3);
    [&words[0], &words[1], &words[0]]
        .iter()
        .for_each(|w| e.bytes(w.as_bytes()));
    let mut b = blocks.clone();
    b[text_vocab] = e.0;
    assert!(reload(&rebuild(&b), b"h").is_err());
    let mut b = blocks.clone();
    b[text_vocab - 1] = b[text_vocab].clone();
    assert!(matches!(
        reload(&rebuild(&b), b"h"),
        Err(LoadError::Corrupt(Corrupt("vocabulary")))
    ));
    // a key listed with no documents (an apply removes such a key): the first
    // dimension's postings (block 3) with its first key's set emptied
    let keyword = decode_postings(&blocks[3], false).unwrap().unwrap();
    assert!(!keyword.map.is_empty());
    let emptied = keyword.map.iter().enumerate().map(|(i, (k, b))| {
        let set = if i == 0 {
            std::borrow::Cow::Owned(RoaringBitmap::new())
        } else {
            b.get().bitmap()
        };
        (&k[..], set)
    });
    let mut b = blocks.clone();
    let mut file = io::Cursor::new(Vec::new());
    let mut out = StreamedBlock::begin(&mut file, SPILL_AT).unwrap();
    encode_postings_of(&keyword, keyword.map.len(), emptied, &mut out).unwrap();
    out.end().unwrap();
    b[3] = file.into_inner()[12..].to_vec();
    assert!(matches!(
        reload(&rebuild(&b), b"h"),
        Err(LoadError::Corrupt(Corrupt("an empty postings set")))
    ));
}
