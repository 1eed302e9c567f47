//! Replication with real processes on loopback (SPEC §14): a primary and two followers,
//! a stream of deltas, a follower killed with SIGKILL in the middle of a large apply, a
//! primary restart, history trimmed past a lagging follower (which must start again
//! from the primary's checkpoint), and a follower of a changeset publisher serving the
//! fixture changesets with the Data Tool's headers. Every follower must converge to
//! exactly the primary's items, compared through `/ws/export`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{changeset, free_port, kill9, listing_ids, post_ok, request, start_with, Engine};

const DIMS: &[u8] = b"<dimensions><dimension id='kind' type='keyword'/></dimensions>";

fn config(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

fn follower(data: &Path, cfg: &str, port: u16) -> Engine {
    start_with(data, &["--config", cfg], port)
}

/// Every item, as sorted export lines.
fn items(port: u16) -> Vec<String> {
    let (s, b) = request(port, "POST", "/ws/export", b"{}").unwrap();
    assert_eq!(s, 200);
    let mut lines: Vec<String> = String::from_utf8(b)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

fn converge(primary: u16, follower: u16, what: &str) -> Duration {
    let started = Instant::now();
    let want = items(primary);
    while started.elapsed() < Duration::from_secs(60) {
        if request(follower, "GET", "/ws/queryable", b"")
            .map(|r| r.0)
            .ok()
            == Some(204)
            && items(follower) == want
        {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{what}: follower on {follower} has {} items, the primary {}",
        items(follower).len(),
        want.len()
    );
}

fn delta(from: usize, n: usize, kind: &str) -> Vec<u8> {
    changeset((from..from + n).map(|i| (format!("it{i:07}"), kind.to_string())))
}

#[test]
fn followers_converge_through_kills_restarts_and_trimmed_history() {
    let dir = tempfile::tempdir().unwrap();
    let (pd, f1d, f2d) = (
        dir.path().join("p"),
        dir.path().join("f1"),
        dir.path().join("f2"),
    );
    let pport = free_port();
    let pcfg = config(dir.path(), "p.properties", "retain-snapshots = 1\n");
    let mut p = start_with(&pd, &["--config", &pcfg], pport);
    post_ok(pport, "/ws/dimensions", DIMS);
    post_ok(pport, "/ws/changeset?type=reset", &delta(0, 500, "base"));

    let fcfg = config(
        dir.path(),
        "f.properties",
        &format!("feed = http://127.0.0.1:{pport}\nfeed-interval = 200\n"),
    );
    let (f1port, f2port) = (free_port(), free_port());
    let mut f1 = follower(&f1d, &fcfg, f1port);
    let mut f2 = follower(&f2d, &fcfg, f2port);
    converge(pport, f1port, "initial sync f1");
    converge(pport, f2port, "initial sync f2");
    assert_eq!(
        std::fs::read(f1d.join("dimensions.xml")).unwrap_or_default(),
        DIMS,
        "the follower mirrors the dimensions"
    );

    // a stream of deltas
    for k in 0..10 {
        post_ok(
            pport,
            "/ws/changeset",
            &delta(k * 100, 150, &format!("d{k}")),
        );
    }
    converge(pport, f1port, "after ten deltas (f1)");
    converge(pport, f2port, "after ten deltas (f2)");

    // lag: a 1,000-item delta visible on a follower after the primary's 201
    let mut lags = Vec::new();
    for k in 0..5 {
        let body = delta(10_000 + k * 1000, 1000, "lag");
        post_ok(pport, "/ws/changeset", &body);
        let acked = Instant::now();
        let last = format!("/ws/item/it{:07}", 10_000 + k * 1000 + 999);
        while request(f1port, "GET", &last, b"").unwrap().0 != 200 {
            assert!(
                acked.elapsed() < Duration::from_secs(10),
                "delta never reached f1"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        lags.push(acked.elapsed().as_millis() as u64);
    }
    lags.sort_unstable();
    eprintln!(
        "replication lag of a 1,000-item delta (feed-interval 200 ms): {lags:?} ms, median {} ms",
        lags[2]
    );
    assert!(lags[2] <= 1000, "median lag {} ms exceeds 1 s", lags[2]);

    // SIGKILL a follower in the middle of a large apply, then restart it
    post_ok(
        pport,
        "/ws/changeset?type=bulk",
        &delta(100_000, 40_000, "bulk"),
    );
    std::thread::sleep(Duration::from_millis(450));
    kill9(&mut f1);
    let mut f1 = follower(&f1d, &fcfg, f1port);
    converge(pport, f1port, "f1 after SIGKILL mid-apply");

    // restart the primary (SIGKILL), then more deltas
    kill9(&mut p);
    let mut p = start_with(&pd, &["--config", &pcfg], pport);
    post_ok(pport, "/ws/changeset", &delta(0, 50, "after-restart"));
    converge(pport, f1port, "f1 after the primary's restart");
    converge(pport, f2port, "f2 after the primary's restart");

    // f2 falls behind while the primary checkpoints twice and trims its history
    kill9(&mut f2);
    post_ok(pport, "/ws/changeset", &delta(200, 20, "while-f2-away"));
    post_ok(pport, "/ws/checkpoint", b"");
    post_ok(pport, "/ws/changeset", &delta(300, 20, "between"));
    post_ok(pport, "/ws/checkpoint", b"");
    post_ok(pport, "/ws/changeset", &delta(400, 20, "last"));
    let mut f2 = follower(&f2d, &fcfg, f2port);
    converge(pport, f2port, "f2 restarting from the checkpoint");
    converge(pport, f1port, "f1 through the checkpoints");

    // a follower of a follower
    let f3port = free_port();
    let f3cfg = config(
        dir.path(),
        "f3.properties",
        &format!("feed = http://127.0.0.1:{f1port}\nfeed-interval = 200\n"),
    );
    let f3 = follower(&dir.path().join("f3"), &f3cfg, f3port);
    converge(pport, f3port, "a follower of a follower");

    let (_, metrics) = request(f1port, "GET", "/ws/metrics", b"").unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("\nengine_feed_lag_changesets 0\n"),
        "lag metric"
    );
    assert!(metrics.contains("engine_feed_last_success_timestamp_seconds "));
    assert!(
        metrics.contains("\nengine_feed_bootstrapped_from_image 0\n"),
        "a primary without images: the checkpoint applied"
    );
    drop((f3, &mut f2, &mut f1, &mut p));
}

/// The image of `id` on `port`, once written (a background job after the checkpoint).
fn image_of(port: u16, id: &str, part: &str) -> Vec<u8> {
    let started = Instant::now();
    loop {
        let (s, b) = request(
            port,
            "GET",
            &format!("/ws/changeset/{id}/image/{part}"),
            b"",
        )
        .unwrap();
        if s == 200 {
            return b;
        }
        assert_eq!(s, 404, "{}", String::from_utf8_lossy(&b));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no image of {id}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A new follower of a primary with `bootstrap-images` starts from the newest
/// checkpoint's image (the item store installed, the index loaded, not rebuilt), then
/// applies what the primary stored after it; restarted, it keeps its own data.
#[test]
fn a_new_follower_starts_from_the_checkpoints_image() {
    let dir = tempfile::tempdir().unwrap();
    let (pd, fd) = (dir.path().join("p"), dir.path().join("f"));
    let pport = free_port();
    let pcfg = config(dir.path(), "p.properties", "bootstrap-images = true\n");
    let p = start_with(&pd, &["--config", &pcfg], pport);
    post_ok(pport, "/ws/dimensions", DIMS);
    post_ok(pport, "/ws/changeset?type=bulk", &delta(0, 3000, "base"));
    post_ok(pport, "/ws/changeset", &delta(100, 50, "d1"));
    let cp = post_ok(pport, "/ws/checkpoint", b"").trim().to_string();
    let image = image_of(pport, &cp, "store");
    let head = String::from_utf8_lossy(&image[..40]).into_owned();
    assert!(head.starts_with("changeset.xml.zst "), "{head}");
    assert!(image.ends_with(b".\nend\n"));
    // only a checkpoint has an image
    let d2 = post_ok(pport, "/ws/changeset", &delta(200, 50, "after"));
    for path in [
        format!("/ws/changeset/{}/image/store", d2.trim()),
        format!("/ws/changeset/{cp}/image/other"),
    ] {
        assert_eq!(request(pport, "GET", &path, b"").unwrap().0, 404, "{path}");
    }

    let fport = free_port();
    let fcfg = config(
        dir.path(),
        "f.properties",
        &format!("feed = http://127.0.0.1:{pport}\nfeed-interval = 200\n"),
    );
    let mut f = follower(&fd, &fcfg, fport);
    converge(pport, fport, "a follower from the image");
    let metric = |port: u16| {
        let (_, m) = request(port, "GET", "/ws/metrics", b"").unwrap();
        String::from_utf8(m)
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("engine_feed_bootstrapped_from_image ")
                    .map(str::to_string)
            })
            .unwrap()
    };
    assert_eq!(metric(fport), "1");
    // it stores the checkpoint and what came after, under the primary's ids
    assert_eq!(listing_ids(fport), [cp.clone(), d2.trim().to_string()]);
    assert!(!fd.join("image.tmp").exists());

    // a later checkpoint's image replaces it
    let cp2 = post_ok(pport, "/ws/checkpoint", b"").trim().to_string();
    image_of(pport, &cp2, "index");
    let started = Instant::now();
    while request(
        pport,
        "GET",
        &format!("/ws/changeset/{cp}/image/index"),
        b"",
    )
    .unwrap()
    .0 != 404
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the older image stays"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // restarted, the follower goes on from its own data
    kill9(&mut f);
    post_ok(pport, "/ws/changeset", &delta(300, 50, "while-away"));
    let f = follower(&fd, &fcfg, fport);
    converge(pport, fport, "the follower restarted");
    assert_eq!(metric(fport), "0");
    drop((f, p));
}

/// Serves the fixture changesets like the Data Tool: the snapshot first (gzip when
/// asked), then the delta, then empty deltas; records each request line and headers.
fn publisher(log: Arc<Mutex<Vec<String>>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/changesets");
    let snapshot = std::fs::read(fixtures.join("datatool-snapshot.xml")).unwrap();
    let delta = std::fs::read(fixtures.join("datatool-delta.xml")).unwrap();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let gzip = head.to_ascii_lowercase().contains("accept-encoding: gzip");
            log.lock().unwrap().push(head);
            let (ty, body): (&str, Vec<u8>) = match n {
                0 => ("snapshot", snapshot.clone()),
                1 => ("delta", delta.clone()),
                _ => (
                    "delta",
                    b"<?xml version='1.0' encoding='UTF-8'?>\n<changeset>\n</changeset>\n".to_vec(),
                ),
            };
            let body = if gzip {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&body).unwrap();
                e.finish().unwrap()
            } else {
                body
            };
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nDate: Sun, 22 Nov 2026 11:15:36 GMT\r\nX-t11e-type: {ty}\r\n{}Content-Length: {}\r\nConnection: close\r\n\r\n",
                if gzip { "Content-Encoding: gzip\r\n" } else { "" },
                body.len()
            );
            let _ = conn.write_all(&body);
            let mut rest = Vec::new();
            let _ = conn.read(&mut rest);
        }
    });
    port
}

#[test]
fn a_follower_of_a_publisher_matches_the_same_changesets_posted() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let pub_port = publisher(log.clone());
    let cfg = config(
        dir.path(),
        "f.properties",
        &format!("feed = http://127.0.0.1:{pub_port}/ws/publisher/listings\nfeed-interval = 100\n"),
    );
    let fport = free_port();
    let f = start_with(&dir.path().join("f"), &["--config", &cfg], fport);

    // the same fixtures posted to a plain engine
    let rport = free_port();
    let r = start_with(&dir.path().join("r"), &[], rport);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/changesets");
    post_ok(
        rport,
        "/ws/changeset?type=snapshot",
        &std::fs::read(fixtures.join("datatool-snapshot.xml")).unwrap(),
    );
    post_ok(
        rport,
        "/ws/changeset?type=delta",
        &std::fs::read(fixtures.join("datatool-delta.xml")).unwrap(),
    );

    let started = Instant::now();
    while log.lock().unwrap().len() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the publisher was not polled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    converge(
        rport,
        fport,
        "publisher follower vs the same changesets posted",
    );
    let requests = log.lock().unwrap().clone();
    assert!(
        requests[0].starts_with("GET /ws/publisher/listings?forceSnapshot=true "),
        "{}",
        requests[0]
    );
    assert!(!requests[1].contains("forceSnapshot"), "{}", requests[1]);
    assert!(requests[0]
        .to_ascii_lowercase()
        .contains("accept-encoding: gzip"));
    let (_, listing) = request(fport, "GET", "/ws/changeset", b"").unwrap();
    let listing = String::from_utf8(listing).unwrap();
    assert_eq!(listing.matches("<changeset id=").count(), 2, "{listing}");
    assert!(
        listing.contains("date=\"Sun, 22 Nov 2026 11:15:36 GMT\""),
        "the publisher's Date: {listing}"
    );
    drop((f, r));
}
