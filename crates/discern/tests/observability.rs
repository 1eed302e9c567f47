//! `/ws/metrics` over real HTTP (SPEC §12): the scrape parses as Prometheus text, every
//! sample has a declared family, and the counters move with the work done.

mod common;

use common::{changeset, get_text, post_ok, request, start};

fn scrape(port: u16) -> prometheus_parse::Scrape {
    let text = get_text(port, "/ws/metrics");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses")
}

fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .sum()
}

#[test]
fn metrics_parse_and_follow_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let e = start(dir.path());
    let before = scrape(e.port);
    post_ok(
        e.port,
        "/ws/changeset?type=reset",
        &changeset((0..10).map(|i| (format!("i{i}"), "a".to_string()))),
    );
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset((5..15).map(|i| (format!("i{i}"), "b".to_string()))),
    );
    for _ in 0..3 {
        let _ = request(e.port, "GET", "/ws/item/nope/deeper", b"").unwrap();
    }
    let after = scrape(e.port);
    assert_eq!(
        value(
            &after,
            "engine_applied_changeset_action_total",
            &[("action", "create")]
        ),
        15.0
    );
    assert_eq!(
        value(
            &after,
            "engine_applied_changeset_action_total",
            &[("action", "update")]
        ),
        5.0
    );
    assert!(value(&after, "engine_changeset_bytes_total", &[("type", "reset")]) > 0.0);
    assert!(
        value(&after, "httpsrv_requests_total", &[])
            >= value(&before, "httpsrv_requests_total", &[]) + 6.0
    );
    assert_eq!(
        value(
            &after,
            "webapp_requests_total",
            &[("method", "GET"), ("path", "/ws/item")]
        ),
        3.0
    );
    assert!(
        value(
            &after,
            "webapp_request_bytes_total",
            &[("method", "POST"), ("path", "/ws/changeset")]
        ) > 0.0
    );
    // every sample belongs to a family with HELP
    for s in &after.samples {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suf| s.metric.strip_suffix(suf))
            .filter(|b| after.docs.contains_key(*b))
            .unwrap_or(&s.metric);
        assert!(after.docs.contains_key(base), "{} has no # HELP", s.metric);
    }
    let hist = after
        .samples
        .iter()
        .find(|s| {
            s.metric == "webapp_response_seconds_total" && s.labels.get("path") == Some("/ws/item")
        })
        .expect("histogram for /ws/item");
    match &hist.value {
        prometheus_parse::Value::Histogram(b) => {
            assert_eq!(b.last().map(|x| x.count), Some(3.0));
        }
        other => panic!("not a histogram: {other:?}"),
    }
}
