//! The text exposition (format 0.0.4) of every family: the process, the VM-style
//! memory and thread figures, the HTTP server's and per-path recordings (`mod.rs`), and
//! the engine's figures.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use super::{HttpMetrics, PathMetrics, BUCKETS, CLASSES};

/// Figures the engine supplies to the exposition.
pub struct EngineFigures {
    pub dimensions: u64,
    pub items: u64,
    pub index_bytes: u64,
    /// (dimension, distinct terms) of every did-you-mean dictionary.
    pub dictionary_terms: Vec<(String, u64)>,
    pub created: u64,
    pub updated: u64,
    pub deleted: u64,
    pub changeset_bytes: Vec<(&'static str, u64)>,
    pub checkpoint_seconds: f64,
    pub index_saves: IndexSaveFigures,
    /// `(lag in changesets, last success as Unix seconds, started from an image)` when
    /// following a feed.
    pub feed: Option<(u64, f64, bool)>,
}

/// The saved index (`background_save.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct IndexSaveFigures {
    /// Saves written, failed, and stopped by the shutdown save.
    pub saved: u64,
    pub failed: u64,
    pub stopped: u64,
    pub seconds: f64,
    /// Deltas' bytes applied since the last save took its snapshot.
    pub unsaved_delta_bytes: u64,
    /// Whether a change a catch-up cannot make came since: a restart after a crash now
    /// would rebuild the index.
    pub unsaved_rebuild: bool,
}

/// Figures of the tokio runtime serving HTTP.
pub struct PoolFigures {
    pub threads: u64,
    pub queued_jobs: u64,
}

struct Out {
    s: String,
}

impl Out {
    fn family(&mut self, name: &str, ty: &str, help: &str) {
        let _ = writeln!(self.s, "# HELP {name} {help}");
        let _ = writeln!(self.s, "# TYPE {name} {ty}");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.s.push_str(name);
        if !labels.is_empty() {
            self.s.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.s.push(',');
                }
                let _ = write!(self.s, "{k}=\"{}\"", escape_label(val));
            }
            self.s.push('}');
        }
        let _ = writeln!(self.s, " {}", number(v));
    }
    fn one(&mut self, name: &str, ty: &str, help: &str, v: f64) {
        self.family(name, ty, help);
        self.sample(name, &[], v);
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn secs(n: &AtomicU64) -> f64 {
    n.load(Ordering::Relaxed) as f64 / 1e9
}

pub(super) fn count(n: &AtomicU64) -> f64 {
    n.load(Ordering::Relaxed) as f64
}

pub(super) fn gauge(n: &AtomicI64) -> f64 {
    n.load(Ordering::Relaxed).max(0) as f64
}

pub const RUSTC_VERSION: &str = env!("DISCERN_RUSTC_VERSION");

/// The whole exposition (text format 0.0.4).
pub fn render(http: &HttpMetrics, pool: &PoolFigures, engine: &EngineFigures) -> String {
    let mut o = Out {
        s: String::with_capacity(16 * 1024),
    };
    render_process(&mut o);
    render_vm(&mut o);
    render_httpsrv(&mut o, http, pool);
    render_webapp(&mut o, http);
    render_engine(&mut o, engine);
    o.s
}

fn render_process(o: &mut Out) {
    use crate::process as p;
    o.one(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        p::cpu_seconds(),
    );
    o.one(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        p::start_time_seconds(),
    );
    o.one(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        p::open_fds() as f64,
    );
    o.one(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        p::max_fds() as f64,
    );
    o.one(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        p::virtual_bytes() as f64,
    );
    o.one(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        p::resident_bytes() as f64,
    );
}

fn render_vm(o: &mut Out) {
    use crate::process as p;
    let resident = p::resident_bytes();
    let heap_used = crate::alloc::allocated_bytes();
    let heap_committed = p::heap_committed_bytes(heap_used);
    let heap_max = p::available_memory_bytes().max(heap_committed);
    let nonheap = resident.saturating_sub(heap_used);
    let memory: [(&str, &str, u64, f64); 3] = [
        (
            "vm_memory_bytes_used",
            "Used bytes of a given memory area (heap: allocated through the global allocator; nonheap: resident minus heap).",
            heap_used,
            nonheap as f64,
        ),
        (
            "vm_memory_bytes_committed",
            "Committed bytes of a given memory area (heap: held by the C allocator).",
            heap_committed,
            nonheap as f64,
        ),
        (
            "vm_memory_bytes_max",
            "Max bytes of a given memory area (heap: the machine's memory; nonheap: no limit, -1).",
            heap_max,
            -1.0,
        ),
    ];
    for (name, help, heap, non) in memory {
        o.family(name, "gauge", help);
        o.sample(name, &[("area", "heap")], heap as f64);
        o.sample(name, &[("area", "nonheap")], non);
    }
    for (suffix, v) in [
        ("used", heap_used as f64),
        ("committed", heap_committed as f64),
        ("max", heap_max as f64),
    ] {
        let name = format!("vm_memory_pool_bytes_{suffix}");
        o.family(
            &name,
            "gauge",
            &format!("{suffix} bytes of a given memory pool (one pool: the global allocator)."),
        );
        o.sample(&name, &[("pool", "default")], v);
    }
    o.family(
        "vm_gc_collection_seconds",
        "summary",
        "Time spent in garbage collection: always 0, memory is freed deterministically.",
    );
    o.sample("vm_gc_collection_seconds_count", &[("gc", "none")], 0.0);
    o.sample("vm_gc_collection_seconds_sum", &[("gc", "none")], 0.0);
    let current = p::threads_current();
    o.one(
        "vm_threads_current",
        "gauge",
        "Current thread count.",
        current as f64,
    );
    o.one(
        "vm_threads_daemon",
        "gauge",
        "Threads that do not keep the process alive (every thread but main).",
        current.saturating_sub(1) as f64,
    );
    o.one(
        "vm_threads_peak",
        "gauge",
        "Peak thread count.",
        p::threads_peak() as f64,
    );
    o.one(
        "vm_threads_deadlocked",
        "gauge",
        "Threads in a detected deadlock (no detector runs: 0).",
        0.0,
    );
    o.one(
        "vm_threads_deadlocked_monitor",
        "gauge",
        "Threads in a detected monitor deadlock (no detector runs: 0).",
        0.0,
    );
    o.one(
        "vm_threads_started_total",
        "counter",
        "Threads started since the process began.",
        p::threads_started_total() as f64,
    );
    o.one(
        "vm_classes_loaded",
        "gauge",
        "Classes currently loaded (none: the code is compiled ahead of time).",
        0.0,
    );
    o.one(
        "vm_classes_loaded_total",
        "counter",
        "Classes loaded since the process began (none).",
        0.0,
    );
    o.one(
        "vm_classes_unloaded_total",
        "counter",
        "Classes unloaded since the process began (none).",
        0.0,
    );
    o.family(
        "vm_info",
        "gauge",
        "Runtime information: compiler version and vendor.",
    );
    o.sample(
        "vm_info",
        &[("version", RUSTC_VERSION), ("vendor", "rust")],
        1.0,
    );
}

fn render_httpsrv(o: &mut Out, h: &HttpMetrics, pool: &PoolFigures) {
    o.one(
        "httpsrv_requests_total",
        "counter",
        "Number of requests.",
        count(&h.requests),
    );
    o.one(
        "httpsrv_request_time_seconds_total",
        "counter",
        "Total time spent in all request handling, including streamed bodies.",
        secs(&h.request_nanos),
    );
    o.one(
        "httpsrv_dispatched_total",
        "counter",
        "Number of dispatches to handlers.",
        count(&h.dispatched),
    );
    o.one(
        "httpsrv_dispatched_time_seconds_total",
        "counter",
        "Total time spent in handlers, up to the response head.",
        secs(&h.dispatched_nanos),
    );
    o.one(
        "httpsrv_async_requests_total",
        "counter",
        "Requests whose response body streamed after the handler returned.",
        count(&h.async_requests),
    );
    o.one(
        "httpsrv_async_dispatches_total",
        "counter",
        "Re-dispatches of async requests (never: a streamed body needs no re-dispatch).",
        0.0,
    );
    o.one(
        "httpsrv_expires_total",
        "counter",
        "Async requests that expired (none: streamed responses have no timeout).",
        0.0,
    );
    o.one(
        "httpsrv_responses_bytes_total",
        "counter",
        "Total body bytes of all responses.",
        count(&h.response_bytes),
    );
    o.family(
        "httpsrv_responses_total",
        "counter",
        "Number of responses by status code class.",
    );
    for (i, c) in CLASSES.iter().enumerate() {
        o.sample(
            "httpsrv_responses_total",
            &[("code", c)],
            count(&h.responses[i]),
        );
    }
    o.one(
        "httpsrv_requests_active",
        "gauge",
        "Requests in progress.",
        gauge(&h.active),
    );
    o.one(
        "httpsrv_requests_active_max",
        "gauge",
        "Most requests in progress at once.",
        gauge(&h.active_max),
    );
    o.one(
        "httpsrv_request_time_max_seconds",
        "gauge",
        "Longest request.",
        secs(&h.request_nanos_max),
    );
    o.one(
        "httpsrv_dispatched_active",
        "gauge",
        "Dispatches in progress.",
        gauge(&h.dispatched_active),
    );
    o.one(
        "httpsrv_dispatched_active_max",
        "gauge",
        "Most dispatches in progress at once.",
        gauge(&h.dispatched_active_max),
    );
    o.one(
        "httpsrv_dispatched_time_max",
        "gauge",
        "Longest dispatch in seconds.",
        secs(&h.dispatched_nanos_max),
    );
    o.one(
        "httpsrv_async_requests_waiting",
        "gauge",
        "Streamed responses in progress.",
        gauge(&h.async_waiting),
    );
    o.one(
        "httpsrv_async_requests_waiting_max",
        "gauge",
        "Most streamed responses in progress at once.",
        gauge(&h.async_waiting_max),
    );
    o.one(
        "httpsrv_stats_seconds",
        "gauge",
        "Seconds since these statistics started.",
        h.since.elapsed().as_secs_f64(),
    );
    let busy = h.dispatched_active.load(Ordering::Relaxed).max(0) as u64;
    o.one(
        "httpsrv_queued_thread_pool_threads",
        "gauge",
        "Worker threads of the HTTP runtime.",
        pool.threads as f64,
    );
    o.one(
        "httpsrv_queued_thread_pool_threads_idle",
        "gauge",
        "Worker threads not running a handler (estimate: workers minus dispatches in progress).",
        pool.threads.saturating_sub(busy) as f64,
    );
    o.one(
        "httpsrv_queued_thread_pool_jobs",
        "gauge",
        "Tasks queued for a worker thread.",
        pool.queued_jobs as f64,
    );
}

fn render_webapp(o: &mut Out, h: &HttpMetrics) {
    let mut paths: Vec<((String, String), Arc<PathMetrics>)> = h
        .paths
        .read()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    o.family(
        "webapp_requests_active",
        "gauge",
        "Requests in progress by method and path.",
    );
    for ((m, p), v) in &paths {
        o.sample(
            "webapp_requests_active",
            &[("method", m), ("path", p)],
            gauge(&v.active),
        );
    }
    o.family(
        "webapp_requests_total",
        "counter",
        "Requests by method and path.",
    );
    for ((m, p), v) in &paths {
        o.sample(
            "webapp_requests_total",
            &[("method", m), ("path", p)],
            count(&v.requests),
        );
    }
    o.family(
        "webapp_request_bytes_total",
        "counter",
        "Request body bytes by method and path.",
    );
    for ((m, p), v) in &paths {
        o.sample(
            "webapp_request_bytes_total",
            &[("method", m), ("path", p)],
            count(&v.request_bytes),
        );
    }
    o.family(
        "webapp_response_bytes_total",
        "counter",
        "Response body bytes by method, path and status class.",
    );
    for ((m, p), v) in &paths {
        for (i, c) in CLASSES.iter().enumerate() {
            let cm = &v.classes[i];
            if cm.count.load(Ordering::Relaxed) > 0 {
                o.sample(
                    "webapp_response_bytes_total",
                    &[("method", m), ("path", p), ("code", c)],
                    count(&cm.bytes),
                );
            }
        }
    }
    o.family(
        "webapp_response_seconds_total",
        "histogram",
        "Response times by method, path and status class.",
    );
    for ((m, p), v) in &paths {
        for (i, c) in CLASSES.iter().enumerate() {
            let cm = &v.classes[i];
            let n = cm.count.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let mut cumulative = 0u64;
            for (b, le) in BUCKETS.iter().enumerate() {
                cumulative += cm.buckets[b].load(Ordering::Relaxed);
                let le = number(*le);
                o.sample(
                    "webapp_response_seconds_total_bucket",
                    &[("method", m), ("path", p), ("code", c), ("le", &le)],
                    cumulative as f64,
                );
            }
            o.sample(
                "webapp_response_seconds_total_bucket",
                &[("method", m), ("path", p), ("code", c), ("le", "+Inf")],
                n as f64,
            );
            o.sample(
                "webapp_response_seconds_total_sum",
                &[("method", m), ("path", p), ("code", c)],
                secs(&cm.nanos),
            );
            o.sample(
                "webapp_response_seconds_total_count",
                &[("method", m), ("path", p), ("code", c)],
                n as f64,
            );
        }
    }
}

fn render_engine(o: &mut Out, e: &EngineFigures) {
    o.one(
        "engine_dimensions_count",
        "gauge",
        "Dimensions in the current document (refreshed every 30 s).",
        e.dimensions as f64,
    );
    o.one(
        "engine_items_count",
        "gauge",
        "Items in the index (refreshed every 30 s).",
        e.items as f64,
    );
    o.one(
        "engine_index_bytes",
        "gauge",
        "Estimated bytes of the in-memory index (refreshed every 30 s).",
        e.index_bytes as f64,
    );
    o.family(
        "engine_didyoumean_terms",
        "gauge",
        "Distinct terms in each dimension's did-you-mean dictionary (terms added since the last merge may count twice).",
    );
    for (dim, n) in &e.dictionary_terms {
        o.sample("engine_didyoumean_terms", &[("dimension", dim)], *n as f64);
    }
    o.family(
        "engine_applied_changeset_action_total",
        "counter",
        "Items created, updated and deleted by applied changesets.",
    );
    for (a, v) in [
        ("create", e.created),
        ("update", e.updated),
        ("delete", e.deleted),
    ] {
        o.sample(
            "engine_applied_changeset_action_total",
            &[("action", a)],
            v as f64,
        );
    }
    o.family(
        "engine_changeset_bytes_total",
        "counter",
        "Uncompressed bytes of stored changesets by type.",
    );
    for (t, v) in &e.changeset_bytes {
        o.sample("engine_changeset_bytes_total", &[("type", t)], *v as f64);
    }
    o.one(
        "engine_checkpoint_seconds_total",
        "counter",
        "Time spent writing checkpoints.",
        e.checkpoint_seconds,
    );
    let saves = &e.index_saves;
    o.family(
        "engine_index_saves_total",
        "counter",
        "Saves of the index to the data dir, by result (stopped: by the save at shutdown).",
    );
    for (result, v) in [
        ("saved", saves.saved),
        ("failed", saves.failed),
        ("stopped", saves.stopped),
    ] {
        o.sample("engine_index_saves_total", &[("result", result)], v as f64);
    }
    o.one(
        "engine_index_save_seconds_total",
        "counter",
        "Time spent saving the index.",
        saves.seconds,
    );
    o.one(
        "engine_index_unsaved_delta_bytes",
        "gauge",
        "Uncompressed bytes of the deltas applied since the last index save took its snapshot.",
        saves.unsaved_delta_bytes as f64,
    );
    o.one(
        "engine_index_unsaved_rebuild",
        "gauge",
        "1 when a change a catch-up cannot make is not yet saved: a restart after a crash would rebuild the index.",
        if saves.unsaved_rebuild { 1.0 } else { 0.0 },
    );
    if let Some((lag, last, from_image)) = e.feed {
        o.one(
            "engine_feed_lag_changesets",
            "gauge",
            "Changesets listed by the feed and not yet applied here.",
            lag as f64,
        );
        o.one(
            "engine_feed_last_success_timestamp_seconds",
            "gauge",
            "When the feed was last read and applied without error (Unix seconds).",
            last,
        );
        o.one(
            "engine_feed_bootstrapped_from_image",
            "gauge",
            "1 when this process started from the primary's bootstrap image (its item store and index).",
            if from_image { 1.0 } else { 0.0 },
        );
    }
}
