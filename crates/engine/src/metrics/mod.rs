//! The Prometheus registry (SPEC §12): HTTP server and per-path recordings made by the
//! server's middleware; the text exposition of every family is `render.rs`. Recording
//! is atomics only; the per-path table takes a read lock (an uncontended atomic) except
//! the first time a path is seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use discern_store::ChangesetType;
use parking_lot::RwLock;

mod render;
pub use render::{render, EngineFigures, IndexSaveFigures, PoolFigures, RUSTC_VERSION};

/// Upper bounds (seconds) of the response-time histogram buckets.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Distinct (method, path) label pairs kept; later ones are counted under `path="other"`
/// so that clients requesting random paths cannot grow the registry without bound.
const MAX_PATHS: usize = 256;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn class_index(status: u16) -> usize {
    (status / 100).clamp(1, 5) as usize - 1
}

#[derive(Default)]
struct ClassMetrics {
    count: AtomicU64,
    bytes: AtomicU64,
    nanos: AtomicU64,
    buckets: [AtomicU64; BUCKETS.len()],
}

/// Recordings for one method and path (the first two path components).
#[derive(Default)]
pub struct PathMetrics {
    active: AtomicI64,
    requests: AtomicU64,
    request_bytes: AtomicU64,
    classes: [ClassMetrics; 5],
}

impl PathMetrics {
    pub fn add_request_bytes(&self, n: u64) {
        self.request_bytes.fetch_add(n, Ordering::Relaxed);
    }
}

/// Jetty-style server statistics: a request is *dispatched* while its handler runs
/// (until the response head is ready); it is *async* when its body streams after that,
/// and it ends when the last body byte is written (or the client goes away).
pub struct HttpMetrics {
    since: Instant,
    requests: AtomicU64,
    request_nanos: AtomicU64,
    request_nanos_max: AtomicU64,
    dispatched: AtomicU64,
    dispatched_nanos: AtomicU64,
    dispatched_nanos_max: AtomicU64,
    async_requests: AtomicU64,
    response_bytes: AtomicU64,
    responses: [AtomicU64; 5],
    active: AtomicI64,
    active_max: AtomicI64,
    dispatched_active: AtomicI64,
    dispatched_active_max: AtomicI64,
    async_waiting: AtomicI64,
    async_waiting_max: AtomicI64,
    paths: RwLock<HashMap<(String, String), Arc<PathMetrics>>>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        HttpMetrics {
            since: Instant::now(),
            requests: AtomicU64::new(0),
            request_nanos: AtomicU64::new(0),
            request_nanos_max: AtomicU64::new(0),
            dispatched: AtomicU64::new(0),
            dispatched_nanos: AtomicU64::new(0),
            dispatched_nanos_max: AtomicU64::new(0),
            async_requests: AtomicU64::new(0),
            response_bytes: AtomicU64::new(0),
            responses: Default::default(),
            active: AtomicI64::new(0),
            active_max: AtomicI64::new(0),
            dispatched_active: AtomicI64::new(0),
            dispatched_active_max: AtomicI64::new(0),
            async_waiting: AtomicI64::new(0),
            async_waiting_max: AtomicI64::new(0),
            paths: RwLock::new(HashMap::new()),
        }
    }
}

/// `/ws/item/abc` → `/ws/item`; `/queryable` → `/queryable`.
pub fn path_label(path: &str) -> &str {
    let mut slashes = 0;
    for (i, b) in path.bytes().enumerate() {
        if b == b'/' {
            slashes += 1;
            if slashes == 3 {
                return &path[..i];
            }
        }
    }
    path
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn raise(max: &AtomicI64, v: i64) {
    max.fetch_max(v, Ordering::Relaxed);
}

/// One request in flight; `dispatched` when the handler returned, `finish` when the
/// body is done. Dropping it unfinished (a panic, a vanished client) still finishes it.
pub struct RequestRecord {
    http: Arc<HttpMetrics>,
    pub path: Arc<PathMetrics>,
    started: Instant,
    status: u16,
    bytes: u64,
    dispatching: bool,
    streaming: bool,
    done: bool,
}

impl HttpMetrics {
    fn path(&self, method: &str, path: &str) -> Arc<PathMetrics> {
        let label = path_label(path);
        if let Some(p) = self
            .paths
            .read()
            .get(&(method.to_string(), label.to_string()))
        {
            return p.clone();
        }
        let mut paths = self.paths.write();
        let key = if paths.len() >= MAX_PATHS {
            (method.to_string(), "other".to_string())
        } else {
            (method.to_string(), label.to_string())
        };
        paths.entry(key).or_default().clone()
    }

    pub fn begin(self: &Arc<Self>, method: &str, path: &str) -> RequestRecord {
        let p = self.path(method, path);
        p.active.fetch_add(1, Ordering::Relaxed);
        p.requests.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.dispatched.fetch_add(1, Ordering::Relaxed);
        raise(
            &self.active_max,
            self.active.fetch_add(1, Ordering::Relaxed) + 1,
        );
        raise(
            &self.dispatched_active_max,
            self.dispatched_active.fetch_add(1, Ordering::Relaxed) + 1,
        );
        RequestRecord {
            http: self.clone(),
            path: p,
            started: Instant::now(),
            status: 200,
            bytes: 0,
            dispatching: true,
            streaming: false,
            done: false,
        }
    }
}

impl RequestRecord {
    /// The handler has produced the response head; `streaming` when the body follows
    /// over time (its length is not known yet).
    pub fn dispatched(&mut self, status: u16, streaming: bool) {
        if !self.dispatching {
            return;
        }
        self.dispatching = false;
        self.status = status;
        let h = &self.http;
        let n = nanos(self.started.elapsed());
        h.dispatched_nanos.fetch_add(n, Ordering::Relaxed);
        h.dispatched_nanos_max.fetch_max(n, Ordering::Relaxed);
        h.dispatched_active.fetch_sub(1, Ordering::Relaxed);
        if streaming {
            self.streaming = true;
            h.async_requests.fetch_add(1, Ordering::Relaxed);
            raise(
                &h.async_waiting_max,
                h.async_waiting.fetch_add(1, Ordering::Relaxed) + 1,
            );
        }
    }

    pub fn add_response_bytes(&mut self, n: u64) {
        self.bytes += n;
    }

    pub fn finish(&mut self) {
        if self.done {
            return;
        }
        let status = self.status;
        let streaming = self.streaming;
        self.dispatched(status, streaming);
        self.done = true;
        let h = &self.http;
        let n = nanos(self.started.elapsed());
        h.request_nanos.fetch_add(n, Ordering::Relaxed);
        h.request_nanos_max.fetch_max(n, Ordering::Relaxed);
        h.response_bytes.fetch_add(self.bytes, Ordering::Relaxed);
        let class = class_index(self.status);
        h.responses[class].fetch_add(1, Ordering::Relaxed);
        h.active.fetch_sub(1, Ordering::Relaxed);
        if self.streaming {
            h.async_waiting.fetch_sub(1, Ordering::Relaxed);
        }
        let p = &self.path;
        p.active.fetch_sub(1, Ordering::Relaxed);
        let c = &p.classes[class];
        c.count.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(self.bytes, Ordering::Relaxed);
        c.nanos.fetch_add(n, Ordering::Relaxed);
        let secs = n as f64 / 1e9;
        if let Some(b) = BUCKETS.iter().position(|&le| secs <= le) {
            c.buckets[b].fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        self.finish();
    }
}

impl crate::Engine {
    /// Re-reads the gauges that `/ws/metrics` reports as refreshed every 30 s.
    pub fn refresh_gauges(&self) {
        let snap = self.snapshot();
        let g = &self.gauges;
        g.dimensions
            .store(snap.dims.dims.len() as u64, Ordering::Relaxed);
        g.items.store(snap.len() as u64, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let bytes = snap.estimated_bytes_parts();
        g.index_bytes.store(bytes.total() as u64, Ordering::Relaxed);
        tracing::debug!(
            us = started.elapsed().as_micros() as u64,
            documents_mb = bytes.documents >> 20,
            columns_mb = bytes.columns >> 20,
            postings_mb = bytes.postings >> 20,
            dictionaries_mb = bytes.dictionaries >> 20,
            "index estimate"
        );
    }

    /// The Prometheus exposition (SPEC §12).
    pub fn metrics_text(&self, pool: &PoolFigures) -> String {
        let c = &self.counters;
        let g = &self.gauges;
        let figures = EngineFigures {
            dimensions: g.dimensions.load(Ordering::Relaxed),
            items: g.items.load(Ordering::Relaxed),
            index_bytes: g.index_bytes.load(Ordering::Relaxed),
            dictionary_terms: {
                let snap = self.snapshot();
                snap.dims
                    .dims
                    .iter()
                    .enumerate()
                    .filter_map(|(i, d)| Some((d.id.clone(), snap.term_dict(i)?.len() as u64)))
                    .collect()
            },
            created: c.created.load(Ordering::Relaxed),
            updated: c.modified.load(Ordering::Relaxed),
            deleted: c.deleted.load(Ordering::Relaxed),
            changeset_bytes: ChangesetType::ALL
                .iter()
                .map(|t| {
                    (
                        t.as_str(),
                        c.changeset_bytes[*t as usize].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            checkpoint_seconds: c.checkpoint_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            index_saves: self.saving.figures(),
            feed: self.config.feed.as_ref().map(|_| self.feed.figures()),
        };
        render(&self.http, pool, &figures)
    }
}

#[cfg(test)]
mod tests {
    use super::render::{count, gauge};
    use super::*;

    /// What recording costs one query request: the HTTP record (begin, dispatched,
    /// bytes, finish) and the statistics families a query records. Printed, and held far
    /// below 3% of the 1 ms exact-query target.
    #[test]
    fn recording_cost_per_request() {
        let h = Arc::new(HttpMetrics::default());
        let stats = crate::stats::Statistics::default();
        let n = 100_000;
        let started = std::time::Instant::now();
        for i in 0..n {
            let mut r = h.begin("POST", "/ws/query");
            r.dispatched(200, false);
            r.add_response_bytes(1000);
            r.finish();
            stats.record("query.total", &[("time", (i % 7) as f64)]);
            stats.record("index.query.keyword", &[("time", 1.0)]);
            stats.record("index.query.geoloc", &[("time", 1.0)]);
            stats.record("json.query", &[("time", 1.0), ("size", 20.0)]);
        }
        let per = started.elapsed().as_nanos() as f64 / n as f64;
        println!("recording per query request: {per:.0} ns");
        assert!(per < 30_000.0, "{per} ns per request");
    }

    #[test]
    fn path_label_keeps_two_components() {
        assert_eq!(path_label("/ws/item/abc/def"), "/ws/item");
        assert_eq!(path_label("/ws/query"), "/ws/query");
        assert_eq!(path_label("/queryable"), "/queryable");
        assert_eq!(path_label("/"), "/");
    }

    #[test]
    fn a_request_lands_in_its_bucket_and_class() {
        let h = Arc::new(HttpMetrics::default());
        {
            let mut r = h.begin("GET", "/ws/item/x");
            r.dispatched(404, false);
            r.add_response_bytes(10);
        }
        {
            let mut r = h.begin("POST", "/ws/export");
            r.dispatched(200, true);
            assert_eq!(h.async_waiting.load(Ordering::Relaxed), 1);
            r.finish();
        }
        assert_eq!(count(&h.requests), 2.0);
        assert_eq!(count(&h.responses[3]), 1.0);
        assert_eq!(count(&h.response_bytes), 10.0);
        assert_eq!(count(&h.async_requests), 1.0);
        assert_eq!(gauge(&h.async_waiting), 0.0);
        assert_eq!(gauge(&h.active), 0.0);
        let text = render_for_test(&h);
        assert!(text.contains("webapp_requests_total{method=\"GET\",path=\"/ws/item\"} 1\n"));
        assert!(text.contains(
            "webapp_response_seconds_total_bucket{method=\"GET\",path=\"/ws/item\",code=\"4xx\",le=\"+Inf\"} 1\n"
        ));
    }

    #[test]
    fn random_paths_do_not_grow_the_table_without_bound() {
        let h = Arc::new(HttpMetrics::default());
        for i in 0..1000 {
            h.begin("GET", &format!("/x{i}/y"));
        }
        assert!(h.paths.read().len() <= MAX_PATHS + 1);
    }

    fn render_for_test(h: &HttpMetrics) -> String {
        render(
            h,
            &PoolFigures {
                threads: 2,
                queued_jobs: 0,
            },
            &EngineFigures {
                dimensions: 1,
                items: 2,
                index_bytes: 3,
                dictionary_terms: vec![("title".into(), 7)],
                created: 0,
                updated: 0,
                deleted: 0,
                changeset_bytes: vec![("delta", 5)],
                checkpoint_seconds: 0.5,
                index_saves: IndexSaveFigures {
                    saved: 3,
                    unsaved_rebuild: true,
                    ..IndexSaveFigures::default()
                },
                feed: Some((0, 1.0, true)),
            },
        )
    }

    /// Every line is a comment or a sample of a declared family, and the exposition
    /// parses with a Prometheus text-format parser.
    #[test]
    fn exposition_parses() {
        let h = Arc::new(HttpMetrics::default());
        h.begin("POST", "/ws/query").dispatched(200, false);
        let text = render_for_test(&h);
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("parses");
        let names: std::collections::HashSet<&str> =
            scrape.samples.iter().map(|s| s.metric.as_str()).collect();
        for f in [
            "process_resident_memory_bytes",
            "vm_info",
            "httpsrv_requests_total",
            "webapp_requests_total",
            "engine_applied_changeset_action_total",
            "engine_didyoumean_terms",
            "engine_index_saves_total",
            "engine_index_unsaved_rebuild",
        ] {
            assert!(names.contains(f), "{f} missing");
        }
        assert!(text.contains("engine_index_saves_total{result=\"saved\"} 3\n"));
        assert!(text.contains("engine_index_unsaved_rebuild 1\n"));
        assert!(
            text.contains("engine_didyoumean_terms{dimension=\"title\"} 7\n"),
            "dictionary sizes are labelled by dimension"
        );
        for s in &scrape.samples {
            assert!(
                scrape.docs.contains_key(&s.metric) || {
                    let base = s
                        .metric
                        .trim_end_matches("_bucket")
                        .trim_end_matches("_sum")
                        .trim_end_matches("_count");
                    scrape.docs.contains_key(base)
                },
                "{} has no HELP",
                s.metric
            );
        }
    }
}
