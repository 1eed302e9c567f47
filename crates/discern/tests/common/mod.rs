//! Helpers for tests that run the real binary over real HTTP on a real data dir.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Engine {
    pub child: Child,
    pub port: u16,
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `discern serve` on the data dir and waits until it is queryable.
pub fn start(data: &Path) -> Engine {
    start_with(data, &[], free_port())
}

/// Starts `discern serve` with extra arguments on the given port; waits until queryable.
pub fn start_with(data: &Path, extra: &[&str], port: u16) -> Engine {
    let e = spawn(data, extra, port);
    wait_queryable(e.port, Duration::from_secs(60));
    e
}

/// Starts `discern serve` without waiting.
pub fn spawn(data: &Path, extra: &[&str], port: u16) -> Engine {
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        &listen,
    ];
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_discern"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("DISCERN_TEST_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap();
    Engine { child, port }
}

pub fn wait_queryable(port: u16, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok((204, _)) = request(port, "GET", "/ws/queryable", b"") {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("engine on port {port} did not become queryable");
}

/// One HTTP/1.1 request with `Connection: close`; returns (status, body).
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let (status, _, body) = request_full(port, method, path, body)?;
    Ok((status, body))
}

/// One HTTP/1.1 request; returns (status, raw header block, body).
pub fn request_full(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n", body.len())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut body = out[split..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, head, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..start + size]);
        b = &b[start + size + 2..];
    }
}

pub fn json(port: u16, path: &str, body: &str) -> serde_json::Value {
    let (status, b) = request(port, "POST", path, body.as_bytes()).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
    serde_json::from_slice(&b).unwrap()
}

pub fn get_text(port: u16, path: &str) -> String {
    let (status, b) = request(port, "GET", path, b"").unwrap();
    assert_eq!(status, 200, "GET {path}: {}", String::from_utf8_lossy(&b));
    String::from_utf8(b).unwrap()
}

/// A changeset of `set-item`s, each with one string property `kind`.
pub fn changeset(items: impl Iterator<Item = (String, String)>) -> Vec<u8> {
    let mut s = String::from("<?xml version=\"1.0\"?>\n<changeset>\n");
    for (id, kind) in items {
        s.push_str(&format!("<set-item id=\"{id}\"><properties><struct><entry name=\"kind\"><string>{kind}</string></entry></struct></properties></set-item>\n"));
    }
    s.push_str("</changeset>\n");
    s.into_bytes()
}

pub fn post_ok(port: u16, path: &str, body: &[u8]) -> String {
    let (s, b) = request(port, "POST", path, body).unwrap();
    assert!(
        (200..300).contains(&s),
        "POST {path}: {s} {}",
        String::from_utf8_lossy(&b)
    );
    String::from_utf8(b).unwrap()
}

pub fn listing_ids(port: u16) -> Vec<String> {
    let (_, b) = request(port, "GET", "/ws/changeset?full", b"").unwrap();
    let text = String::from_utf8(b).unwrap();
    text.split("<changeset id=\"")
        .skip(1)
        .map(|s| s[..32].to_string())
        .collect()
}

pub fn kill9(e: &mut Engine) {
    e.child.kill().unwrap(); // SIGKILL
    e.child.wait().unwrap();
}
