//! Crash safety over real HTTP on a real data dir (SPEC §4): SIGKILL the engine right
//! after 201s and in the middle of a large bulk apply; after a restart every
//! acknowledged changeset and item is there, and a half-applied changeset never is.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Engine {
    child: Child,
    port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(data: &Path) -> Engine {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_discern"))
        .args([
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let e = Engine { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok((204, _)) = request(port, "GET", "/ws/queryable", b"") {
            return e;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("engine did not become queryable");
}

/// One HTTP/1.1 request with `Connection: close`; returns (status, body).
fn request(port: u16, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n", body.len())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(out.len());
    Ok((status, out[split..].to_vec()))
}

fn json(port: u16, path: &str, body: &str) -> serde_json::Value {
    let (status, b) = request(port, "POST", path, body.as_bytes()).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
    serde_json::from_slice(&b).unwrap()
}

fn changeset(items: impl Iterator<Item = (String, String)>) -> Vec<u8> {
    let mut s = String::from("<?xml version=\"1.0\"?>\n<changeset>\n");
    for (id, kind) in items {
        s.push_str(&format!("<set-item id=\"{id}\"><properties><struct><entry name=\"kind\"><string>{kind}</string></entry></struct></properties></set-item>\n"));
    }
    s.push_str("</changeset>\n");
    s.into_bytes()
}

fn listing_ids(port: u16) -> Vec<String> {
    let (_, b) = request(port, "GET", "/ws/changeset?full", b"").unwrap();
    let text = String::from_utf8(b).unwrap();
    text.split("<changeset id=\"")
        .skip(1)
        .map(|s| s[..32].to_string())
        .collect()
}

fn kill9(e: &mut Engine) {
    e.child.kill().unwrap(); // SIGKILL
    e.child.wait().unwrap();
}

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
