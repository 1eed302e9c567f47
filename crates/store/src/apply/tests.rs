//! The tests of `apply.rs`.

use super::*;
use discern_model::Value;

fn store() -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), 2, 8 << 20).unwrap();
    (d, s)
}

fn apply(s: &Store, ty: ChangesetType, doc: &str) -> Result<ApplyOutcome> {
    s.apply_changeset(ty, doc.as_bytes(), &mut |_| Ok(()))
}

/// Applies a changeset of type `ty` adding the one (empty) item `id`.
fn add_item(s: &Store, ty: ChangesetType, id: &str) {
    apply(
        s,
        ty,
        &format!("<changeset><add-item id='{id}'/></changeset>"),
    )
    .unwrap();
}

fn sv(x: &str) -> Value {
    Value::Str(x.into())
}

/// The parser hands every action to the store side and its item to the read-ahead,
/// in order, the last partial batch too.
#[test]
fn every_action_is_handed_over_and_read_ahead() {
    let ids: Vec<String> = (0..150).map(|i| format!("i{i:03}")).collect();
    let doc = format!(
        "<changeset>{}</changeset>",
        ids.iter()
            .map(|id| format!("<remove-item id='{id}'/>"))
            .collect::<String>()
    );
    let (tx, batches) = std::sync::mpsc::sync_channel(ids.len());
    let read = std::cell::RefCell::new(Vec::new());
    let read_ahead = |batch: &[Action]| {
        read.borrow_mut()
            .extend(batch.iter().map(|a| a.id().to_string()))
    };
    let summary = parse_in_batches(doc.as_bytes(), &tx, &read_ahead)
        .unwrap_or_else(|_| panic!("a valid changeset"));
    assert_eq!(summary.actions, 150);
    drop(tx);
    let applied: Vec<String> = batches
        .iter()
        .flatten()
        .map(|a: Action| a.id().to_string())
        .collect();
    let read = read.into_inner();
    assert_eq!(applied, ids);
    assert_eq!(read, ids);
}

/// Every change reaches the callback before the commit, which is announced by
/// `Flush`; an error there aborts the apply: no item, no listing, no log file.
#[test]
fn flush_error_aborts_the_apply() {
    let (d, s) = store();
    let mut seen = Vec::new();
    let r = s.apply_changeset(
        ChangesetType::Delta,
        "<changeset><set-item id='a'/><remove-item id='b'/></changeset>".as_bytes(),
        &mut |ch| {
            seen.push(match ch {
                ItemChange::Upsert(id, _) => format!("upsert {id}"),
                ItemChange::Delete(id) => format!("delete {id}"),
                ItemChange::Clear => "clear".into(),
                ItemChange::Flush => {
                    return Err(Error::Internal("the index refused".into()));
                }
            });
            Ok(())
        },
    );
    assert!(r.is_err());
    assert_eq!(seen, ["upsert a"]);
    assert!(s.get("a").unwrap().is_none());
    assert!(s.list(true).unwrap().is_empty());
    let files: Vec<_> = std::fs::read_dir(d.path().join("changesets"))
        .unwrap()
        .collect();
    assert!(files.is_empty(), "{files:?}");
    // the same changeset with a willing callback applies
    apply(
        &s,
        ChangesetType::Delta,
        "<changeset><set-item id='a'/></changeset>",
    )
    .unwrap();
    assert!(s.get("a").unwrap().is_some());
}

/// A reader keeps the state it was opened in; its cursor finds items in id order,
/// passes over missing ids without losing the next item.
#[test]
fn reader_and_cursor() {
    let (_d, s) = store();
    apply(&s, ChangesetType::Delta, "<changeset><set-item id='b'/><set-item id='d'/><set-item id='f'><properties><struct><entry name='x'><string>1</string></entry></struct></properties></set-item></changeset>").unwrap();
    let reader = s.reader().unwrap();
    apply(
        &s,
        ChangesetType::Delta,
        "<changeset><remove-item id='d'/><set-item id='c'/></changeset>",
    )
    .unwrap();
    assert!(reader.get("d").unwrap().is_some());
    assert!(reader.get("c").unwrap().is_none());
    assert!(s.get("d").unwrap().is_none());
    let mut cur = reader.cursor_from("a").unwrap();
    let len = |raw: &[u8]| raw.len();
    assert!(cur.seek_raw("b", len).unwrap().is_some());
    assert!(cur.seek_raw("c", len).unwrap().is_none());
    assert!(cur.seek_raw("d", len).unwrap().is_some());
    assert!(cur.seek_raw("e", len).unwrap().is_none());
    assert!(cur.seek_raw("e2", len).unwrap().is_none());
    let f = cur
        .seek_raw("f", |raw| decode_record(raw).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(f.get("x"), Some(&sv("1")));
    assert!(cur.seek_raw("g", len).unwrap().is_none());
}

#[test]
fn actions_and_types() {
    let (_d, s) = store();
    apply(&s, ChangesetType::Delta, "<changeset><set-item id='a'><properties><struct><entry name='style'><string>loft</string></entry><entry name='tags'><array><element><string>a</string></element><element><string>b</string></element></array></entry></struct></properties></set-item><add-item id='b'/></changeset>").unwrap();
    apply(&s, ChangesetType::Delta, "<changeset><add-to-item id='a'><properties><struct><entry name='style'><string>view</string></entry><entry name='tags'><array><element><string>b</string></element><element><string>c</string></element></array></entry></struct></properties></add-to-item></changeset>").unwrap();
    let a = s.get("a").unwrap().unwrap();
    assert_eq!(
        a.get("style"),
        Some(&Value::Array(vec![sv("loft"), sv("view")]))
    );
    assert_eq!(
        a.get("tags"),
        Some(&Value::Array(vec![sv("a"), sv("b"), sv("c")]))
    );
    apply(&s, ChangesetType::Delta, "<changeset><remove-from-item id='a'><properties><struct><entry name='style'><string>view</string></entry><entry name='tags'/></struct></properties></remove-from-item></changeset>").unwrap();
    let a = s.get("a").unwrap().unwrap();
    assert_eq!(a.get("style"), Some(&Value::Array(vec![sv("loft")])));
    assert!(a.get("tags").is_none());
    // snapshot deletes b
    apply(
        &s,
        ChangesetType::Snapshot,
        "<changeset><add-item id='c'/><add-item id='a'/></changeset>",
    )
    .unwrap();
    assert!(s.get("b").unwrap().is_none());
    assert_eq!(s.item_count().unwrap(), 2);
    // empty: nothing stored
    assert!(matches!(
        apply(&s, ChangesetType::Snapshot, "<changeset/>").unwrap(),
        ApplyOutcome::Empty
    ));
    assert_eq!(s.item_count().unwrap(), 2);
    // invalid: nothing changes, no file left
    assert!(apply(
        &s,
        ChangesetType::Delta,
        "<changeset><remove-item id='a'/><bogus/></changeset>"
    )
    .is_err());
    assert!(apply(
        &s,
        ChangesetType::Bulk,
        "<changeset><set-item id='x'/><set-item id='x'/></changeset>"
    )
    .is_err());
    assert!(apply(
        &s,
        ChangesetType::Full,
        "<changeset><add-item id='x'/></changeset>"
    )
    .is_err());
    assert_eq!(s.item_count().unwrap(), 2);
    let files = fs::read_dir(s.dir().join("changesets")).unwrap().count();
    assert_eq!(files, s.list(true).unwrap().len());
    // empty reset clears
    apply(&s, ChangesetType::Reset, "<changeset/>").unwrap();
    assert_eq!(s.item_count().unwrap(), 0);
    assert_eq!(s.list(true).unwrap().len(), 1);
}

/// The parser runs ahead of the store on its own thread: an error on either side,
/// early or late in a long document, fails the whole apply (no hang, nothing
/// stored, the parser stopped), and the error named is the one that happened.
#[test]
fn errors_on_either_side_of_a_long_document() {
    let (d, s) = store();
    let many = |n: usize| -> String { (0..n).map(|i| format!("<set-item id='i{i}'/>")).collect() };
    // the store side refuses the 3rd action; thousands follow, queued by the parser
    let dup = format!(
        "<changeset><set-item id='x'/><set-item id='y'/><set-item id='x'/>{}</changeset>",
        many(20_000)
    );
    let err = apply(&s, ChangesetType::Bulk, &dup).unwrap_err();
    assert!(
        err.to_string().contains("names item \"x\" more than once"),
        "{err}"
    );
    // the parser fails after 5,000 good actions
    let bad = format!("<changeset>{}<bogus/></changeset>", many(5_000));
    let err = apply(&s, ChangesetType::Delta, &bad).unwrap_err();
    assert!(
        matches!(err, Error::BadRequest(_)) && err.to_string().contains("bogus"),
        "{err}"
    );
    // the callback fails late
    let mut seen = 0;
    let err = s
        .apply_changeset(
            ChangesetType::Delta,
            format!("<changeset>{}</changeset>", many(3_000)).as_bytes(),
            &mut |_| {
                seen += 1;
                if seen == 2_500 {
                    return Err(Error::Internal("the index refused".into()));
                }
                Ok(())
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("the index refused"), "{err}");
    assert_eq!(s.item_count().unwrap(), 0);
    assert!(s.list(true).unwrap().is_empty());
    assert_eq!(
        fs::read_dir(d.path().join("changesets")).unwrap().count(),
        0
    );
    // and a long document applies whole
    apply(
        &s,
        ChangesetType::Delta,
        &format!("<changeset>{}</changeset>", many(3_000)),
    )
    .unwrap();
    assert_eq!(s.item_count().unwrap(), 3_000);
}

/// A bulk load into an empty store keeps no list of the ids it named (every item it
/// leaves, it named) and refuses a repeated id from its insert; a bulk into a store
/// with items removes those it did not name.
#[test]
fn bulk_loads_into_an_empty_store_and_over_one() {
    let (_d, s) = store();
    let err = apply(
        &s,
        ChangesetType::Bulk,
        "<changeset><set-item id='a'/><set-item id='b'/><set-item id='a'/></changeset>",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("names item \"a\" more than once"),
        "{err}"
    );
    assert_eq!(s.item_count().unwrap(), 0);
    // (ids; then created, modified and deleted)
    for (ids, counts) in [
        ("'a'/><set-item id='b'", (2, 0, 0)),
        ("'b'/><set-item id='c'", (1, 1, 1)),
    ] {
        let doc = format!("<changeset><set-item id={ids}/></changeset>");
        match apply(&s, ChangesetType::Bulk, &doc).unwrap() {
            ApplyOutcome::Applied {
                created,
                modified,
                deleted,
                ..
            } => assert_eq!((created, modified, deleted), counts, "{doc}"),
            other => panic!("{doc}: {other:?}"),
        }
    }
    assert!(s.get("a").unwrap().is_none());
    assert_eq!(s.item_count().unwrap(), 2);
}

#[test]
fn retention_and_checkpoint() {
    let (_d, s) = store();
    for i in 0..3 {
        add_item(&s, ChangesetType::Snapshot, &format!("s{i}"));
        add_item(&s, ChangesetType::Delta, &format!("d{i}"));
    }
    let all = s.list(true).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(s.list(false).unwrap().len(), 2);
    let cp = s.checkpoint().unwrap();
    let (_, mut r) = s.open_changeset(&cp.id).unwrap().unwrap();
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    assert!(body.contains("<set-item id=\"d2\">"));
    assert_eq!(s.list(false).unwrap().len(), 1);
}

/// The changesets listed after a state, while the catalog lists them all.
#[test]
fn changesets_listed_since_a_state() {
    let (_d, s) = store();
    assert_eq!(
        s.listed_since(&s.state_token().unwrap()).unwrap(),
        Some(vec![])
    );
    let mut tokens = vec![s.state_token().unwrap()];
    for i in 0..3 {
        add_item(&s, ChangesetType::Delta, &format!("d{i}"));
        tokens.push(s.state_token().unwrap());
    }
    let all = s.list(true).unwrap();
    for (k, token) in tokens.iter().enumerate() {
        assert_eq!(s.listed_since(token).unwrap().unwrap(), all[k..], "{token}");
    }
    // a state the catalog never listed
    let other_md5 = tokens[1].replace(&all[0].md5, "0123456789abcdef0123456789abcdef");
    for token in [
        "changeset 1 nope nope",
        "changeset x",
        "",
        other_md5.as_str(),
    ] {
        assert_eq!(s.listed_since(token).unwrap(), None, "{token}");
    }
    // retention retires the state's changeset and those after it (two snapshots kept)
    for i in 0..3 {
        add_item(&s, ChangesetType::Snapshot, &format!("s{i}"));
    }
    assert_eq!(s.listed_since(&tokens[2]).unwrap(), None);
    assert_eq!(s.listed_since(&tokens[0]).unwrap(), None);
}
