//! The index saved at shutdown (SPEC §16, restart ≤ 5 s) and in the background, over real
//! HTTP on a real data dir: a clean restart loads it and answers exactly as before; deltas
//! applied after it (then a kill) are caught up over; one saved while running is loaded
//! after a kill; a snapshot applied after it, a damaged file or
//! other dimensions make the engine rebuild from the item store, never answer from a
//! stale or broken index.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{changeset, free_port, json, kill9, post_ok, request, wait_queryable, Engine};

/// Starts the engine with its log in `log`; waits until queryable.
fn start_logged(data: &Path, log: &Path) -> Engine {
    start_logged_with(data, log, &[])
}

/// `start_logged`, with environment variables `env` set.
fn start_logged_with(data: &Path, log: &Path, env: &[(&str, &str)]) -> Engine {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_discern"))
        .args([
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            &listen,
        ])
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let e = Engine { child, port };
    wait_queryable(port, Duration::from_secs(60));
    e
}

/// SIGTERM, as a service manager stops it; waits for the exit.
fn stop(e: &mut Engine) {
    let status = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while e.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_says(log: &Path, what: &str) -> bool {
    std::fs::read_to_string(log).unwrap().contains(what)
}

const DIMS: &[u8] = b"<dimensions><dimension id='kind' type='keyword'/>\
    <dimension id='words' type='text' key='kind'/></dimensions>";

/// Responses that cover documents, postings (exact criteria, text) and dictionaries.
fn answers(port: u16) -> Vec<serde_json::Value> {
    let mut out = vec![
        json(
            port,
            "/ws/query",
            r#"{"criteria": [{"dimension": "kind", "value": ["kind3", "kind7"]}], "pageSize": 1000}"#,
        ),
        json(
            port,
            "/ws/query",
            r#"{"criteria": [{"dimension": "words", "value": "kind5 kind9"}], "pageSize": 50,
                "facets": {"k": {"dimension": "kind"}}}"#,
        ),
    ];
    let (s, b) = request(port, "GET", "/ws/didyoumean/kind?query=kinb3", b"").unwrap();
    assert_eq!(s, 200);
    out.push(serde_json::from_slice(&b).unwrap());
    out
}

#[test]
fn a_clean_restart_loads_the_saved_index_and_answers_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log");
    let mut e = start_logged(&data, &log);
    post_ok(e.port, "/ws/dimensions", DIMS);
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset((0..3000).map(|i| (format!("i{i:05}"), format!("kind{}", i % 13)))),
    );
    // a deletion leaves a free document number the loaded writer must reuse
    post_ok(
        e.port,
        "/ws/changeset",
        b"<changeset><remove-item id='i00042'/></changeset>",
    );
    let before = answers(e.port);
    stop(&mut e);
    assert!(log_says(&log, "index saved"));
    assert!(data.join("index.saved").exists());

    let mut e = start_logged(&data, &log);
    assert!(
        log_says(&log, "saved index loaded"),
        "the start rebuilt instead"
    );
    assert_eq!(answers(e.port), before);
    // applies continue from the loaded state
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset([("new".to_string(), "kind3".to_string())].into_iter()),
    );
    let r = json(
        e.port,
        "/ws/query",
        r#"{"criteria": [{"dimension": "kind", "value": "kind3"}], "exactMatchesOnly": true}"#,
    );
    let kind3 = (0..3000).filter(|i| i % 13 == 3 && *i != 42).count() + 1;
    assert_eq!(r["totalSize"], kind3);
    assert_eq!(r["datasetSize"], 3000);
    stop(&mut e);
}

#[test]
fn deltas_after_the_save_are_caught_up_and_a_snapshot_makes_it_stale() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log");
    let mut e = start_logged(&data, &log);
    post_ok(e.port, "/ws/dimensions", DIMS);
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset((0..200).map(|i| (format!("i{i}"), "old".to_string()))),
    );
    stop(&mut e);

    // loaded, then changed, then killed: the items the delta named are indexed again
    let mut e = start_logged(&data, &log);
    assert!(log_says(&log, "saved index loaded"));
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset((0..50).map(|i| (format!("i{i}"), "new".to_string()))),
    );
    let before = answers(e.port);
    kill9(&mut e);

    let mut e = start_logged(&data, &log);
    assert!(
        log_says(&log, "saved index caught up"),
        "the start did not catch the saved index up"
    );
    assert_eq!(answers(e.port), before);
    let r = json(
        e.port,
        "/ws/query",
        r#"{"criteria": [{"dimension": "kind", "value": "new"}], "exactMatchesOnly": true}"#,
    );
    assert_eq!(r["totalSize"], 50);

    // a snapshot after the save deletes the items it does not name: rebuilt
    post_ok(
        e.port,
        "/ws/changeset?type=snapshot",
        &changeset((0..10).map(|i| (format!("i{i}"), "snap".to_string()))),
    );
    kill9(&mut e);
    let mut e = start_logged(&data, &log);
    assert!(log_says(&log, "saved index is stale"));
    let r = json(
        e.port,
        "/ws/query",
        r#"{"criteria": [{"dimension": "kind", "value": "snap"}], "exactMatchesOnly": true}"#,
    );
    assert_eq!(r["totalSize"], 10);
    assert_eq!(r["datasetSize"], 10);

    // new dimensions rebuild the index; the one saved after them has their values
    stop(&mut e);
    let mut e = start_logged(&data, &log);
    post_ok(
        e.port,
        "/ws/dimensions",
        b"<dimensions><dimension id='kind' type='keyword' ignoreCase='true'/></dimensions>",
    );
    stop(&mut e);
    let e2 = start_logged(&data, &log);
    assert!(log_says(&log, "saved index loaded"));
    let r = json(
        e2.port,
        "/ws/query",
        r#"{"criteria": [{"dimension": "kind", "value": "SNAP"}], "exactMatchesOnly": true}"#,
    );
    assert_eq!(r["totalSize"], 10);
}

/// Waits (at most 60 s) until a line of the log says `what` and `and`.
fn wait_for_log(log: &Path, what: &str, and: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let said = || {
        let text = std::fs::read_to_string(log).unwrap();
        text.lines().any(|l| l.contains(what) && l.contains(and))
    };
    while !said() {
        assert!(
            Instant::now() < deadline,
            "the log never said {what:?} with {and:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A change a catch-up cannot make (new dimensions, a snapshot) is saved in the
/// background once applies pause: a kill -9 after it loses nothing, and the restart
/// loads the index instead of rebuilding it.
#[test]
fn an_index_saved_while_running_is_loaded_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log");
    let quick = [("DISCERN_INDEX_SAVE_IDLE", "200")];
    let mut e = start_logged_with(&data, &log, &quick);
    post_ok(e.port, "/ws/dimensions", DIMS);
    post_ok(
        e.port,
        "/ws/changeset?type=snapshot",
        &changeset((0..2000).map(|i| (format!("i{i:05}"), format!("kind{}", i % 11)))),
    );
    // (the state a save wrote: the last changeset's id)
    let saved = |port| {
        let last = common::listing_ids(port).pop().unwrap();
        wait_for_log(&log, "index saved in the background", &last);
    };
    saved(e.port);
    // applies go on after a save; a snapshot makes another due
    post_ok(
        e.port,
        "/ws/changeset?type=snapshot",
        &changeset((0..1500).map(|i| (format!("i{i:05}"), format!("kind{}", i % 13)))),
    );
    saved(e.port);
    let metrics = common::get_text(e.port, "/ws/metrics");
    assert!(
        metrics.contains("engine_index_unsaved_rebuild 0\n"),
        "{metrics}"
    );
    assert!(!metrics.contains("engine_index_saves_total{result=\"saved\"} 0\n"));
    let before = answers(e.port);
    kill9(&mut e);
    assert!(!data.join("index.tmp").exists());

    let e = start_logged(&data, &log);
    assert!(
        log_says(&log, "saved index loaded") && !log_says(&log, "caught up"),
        "the start did not load the index saved in the background"
    );
    assert_eq!(answers(e.port), before);
    let r = json(
        e.port,
        "/ws/query",
        r#"{"criteria": [{"dimension": "kind", "value": "kind3"}], "exactMatchesOnly": true}"#,
    );
    assert_eq!(r["datasetSize"], 1500);
}

#[test]
fn a_damaged_file_is_rebuilt_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log");
    let mut e = start_logged(&data, &log);
    post_ok(e.port, "/ws/dimensions", DIMS);
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset((0..500).map(|i| (format!("i{i:03}"), format!("kind{}", i % 7)))),
    );
    let before = answers(e.port);
    stop(&mut e);
    let path = data.join("index.saved");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let e = start_logged(&data, &log);
    assert!(log_says(&log, "saved index is damaged"));
    assert_eq!(answers(e.port), before);
}
