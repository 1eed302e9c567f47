//! Crash safety over real HTTP on a real data dir (SPEC §4): SIGKILL the engine right
//! after 201s and in the middle of a large bulk apply; after a restart every
//! acknowledged changeset and item is there, and a half-applied changeset never is.

mod common;

use std::time::Duration;

use common::{changeset, json, kill9, listing_ids, request, start};

#[test]
fn sigkill_right_after_201_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = start(dir.path());
    let (s, _) = request(
        e.port,
        "POST",
        "/ws/dimensions",
        b"<dimensions><dimension id='kind' type='keyword'/></dimensions>",
    )
    .unwrap();
    assert_eq!(s, 204);
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let body = changeset(std::iter::once((format!("k{i}"), format!("v{i}"))));
        let (s, id) = request(e.port, "POST", "/ws/changeset", &body).unwrap();
        assert_eq!(s, 201);
        acknowledged.push(String::from_utf8(id).unwrap());
    }
    kill9(&mut e);
    let mut e = start(dir.path());
    let listed = listing_ids(e.port);
    for id in &acknowledged {
        assert!(
            listed.contains(id),
            "changeset {id} answered 201 is missing after SIGKILL"
        );
    }
    for i in 0..5 {
        let (s, b) = request(e.port, "GET", &format!("/ws/item/k{i}"), b"").unwrap();
        assert_eq!(s, 200, "item k{i}: {}", String::from_utf8_lossy(&b));
    }
    let r = json(
        e.port,
        "/ws/query",
        r#"{"criteria": [{"dimension": "kind", "value": "v3"}], "exactMatchesOnly": true, "pageSize": 5}"#,
    );
    assert_eq!(r["itemIds"], serde_json::json!(["k3"]));
    kill9(&mut e);
}

#[test]
fn sigkill_mid_bulk_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = start(dir.path());
    let (s, _) = request(
        e.port,
        "POST",
        "/ws/changeset?type=reset",
        &changeset(std::iter::once(("base".to_string(), "b".to_string()))),
    )
    .unwrap();
    assert_eq!(s, 201);
    let n = 60_000;
    let big = changeset((0..n).map(|i| (format!("m{i:06}"), format!("kind{}", i % 10))));
    let port = e.port;
    let poster = std::thread::spawn(move || request(port, "POST", "/ws/changeset?type=bulk", &big));
    std::thread::sleep(Duration::from_millis(200));
    kill9(&mut e);
    let answered = poster.join().unwrap().map(|(s, _)| s).unwrap_or(0);
    let mut e = start(dir.path());
    let size = json(e.port, "/ws/query", "{}")["datasetSize"]
        .as_u64()
        .unwrap();
    let listed = listing_ids(e.port).len();
    if answered == 201 {
        assert_eq!(size, n as u64, "a bulk answered 201 must survive");
    }
    assert!(
        size == 1 || size == n as u64,
        "half-applied bulk: {size} items"
    );
    assert_eq!(listed, if size == 1 { 1 } else { 2 }, "listed iff applied");
    // no orphaned log files remain
    let files = std::fs::read_dir(dir.path().join("changesets"))
        .unwrap()
        .count();
    assert_eq!(files, listed);
    kill9(&mut e);
}
