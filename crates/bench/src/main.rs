//! discern's benchmark driver (SPEC §16): loads a generated dataset into a running
//! `discern serve` over HTTP and prints each figure beside its target.
//!
//! ```sh
//! python3 ../shared/tools/gen_dataset.py --n 1000000 --out /tmp/ds1m
//! cargo build --release && cargo run --release -p discern-bench -- --dataset /tmp/ds1m
//! ```

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;

// the engine's allocator, so that the in-process figures are the engine's own
#[global_allocator]
static ALLOC: discern_engine::alloc::Counting = discern_engine::alloc::Counting;

#[derive(Parser)]
#[command(about = "Benchmark discern against the SPEC §16 targets")]
struct Args {
    /// Directory written by gen_dataset.py (dimensions.xml, bulk.xml, delta-*.xml, queries.jsonl).
    #[arg(long)]
    dataset: PathBuf,
    /// The engine binary.
    #[arg(long, default_value = "target/release/discern")]
    binary: PathBuf,
    /// Where the engine's data dir goes (default: a temp dir, removed afterwards).
    #[arg(long)]
    work: Option<PathBuf>,
    /// Queries replayed per class (at most).
    #[arg(long, default_value_t = 100)]
    per_class: usize,
    /// Only replay the queries in this process, on the data dir a previous run left in
    /// `--work` (no load, no HTTP).
    #[arg(long, requires = "work")]
    in_process_only: bool,
    /// In-process passes over the queries: each query's figure is its fastest pass (more
    /// than one compares builds on a noisy machine; the SPEC figures are one pass).
    #[arg(long, default_value_t = 1)]
    passes: usize,
}

struct Engine {
    child: Child,
    port: u16,
}

impl Engine {
    fn start(binary: &Path, data: &Path) -> anyhow::Result<(Engine, Duration)> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let started = Instant::now();
        let child = Command::new(binary)
            .args([
                "serve",
                "--data-dir",
                &data.to_string_lossy(),
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let e = Engine { child, port };
        let deadline = Instant::now() + Duration::from_secs(600);
        while Instant::now() < deadline {
            if let Ok((204, _)) = e.request("GET", "/ws/queryable", Body::None) {
                return Ok((e, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("engine not queryable within 600 s")
    }

    fn request(&self, method: &str, path: &str, body: Body) -> std::io::Result<(u16, Vec<u8>)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_nodelay(true)?;
        let len = match &body {
            Body::None => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::File(p) => std::fs::metadata(p)?.len(),
        };
        // the head (and a small body) in one write, as HTTP clients send them: written
        // piecemeal on a no-delay socket, each piece would be a packet of its own
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n").into_bytes();
        match body {
            Body::None => s.write_all(&head)?,
            Body::Bytes(b) => {
                head.extend_from_slice(&b);
                s.write_all(&head)?
            }
            Body::File(p) => {
                s.write_all(&head)?;
                std::io::copy(&mut std::fs::File::open(p)?, &mut s)?;
            }
        }
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        let head_end = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| p + 4)
            .unwrap_or(out.len());
        let head = String::from_utf8_lossy(&out[..head_end]).to_string();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut body = out[head_end..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = dechunk(&body);
        }
        Ok((status, body))
    }

    /// GET `path` and count the lines of its body as it streams in, as a consumer that
    /// processes an export line by line would (no copy of the whole body is kept).
    fn count_lines(&self, path: &str) -> std::io::Result<(u16, u64)> {
        let s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_nodelay(true)?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, s);
        write!(
            r.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )?;
        let mut line = String::new();
        r.read_line(&mut line)?;
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut chunked = false;
        loop {
            line.clear();
            if r.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            chunked |= line
                .to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked");
        }
        let mut lines = 0u64;
        let mut count =
            |r: &mut std::io::BufReader<TcpStream>, mut n: u64| -> std::io::Result<()> {
                while n > 0 {
                    let buf = r.fill_buf()?;
                    if buf.is_empty() {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    let take = buf.len().min(n as usize);
                    lines += buf[..take].iter().filter(|&&b| b == b'\n').count() as u64;
                    r.consume(take);
                    n -= take as u64;
                }
                Ok(())
            };
        if chunked {
            loop {
                line.clear();
                r.read_line(&mut line)?;
                let size = u64::from_str_radix(line.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                count(&mut r, size)?;
                line.clear();
                r.read_line(&mut line)?; // the CRLF after the chunk
            }
        } else {
            count(&mut r, u64::MAX).or_else(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    Ok(())
                } else {
                    Err(e)
                }
            })?;
        }
        Ok((status, lines))
    }

    /// Field `field` of `/proc/<engine>/<file>`, a count of KiB (`None`: not there).
    fn proc_kib(&self, file: &str, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/{file}", self.child.id())).ok()?;
        let line = text.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// CPU seconds the engine has used (user and system, all threads), from
    /// `/proc/<engine>/stat` in Linux's fixed 100 ticks a second (`None`: not there).
    fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // (the fields after the command's name, which may hold spaces, in parentheses)
        let mut fields = stat.rsplit_once(") ")?.1.split_whitespace().skip(11);
        let user: u64 = fields.next()?.parse().ok()?;
        let system: u64 = fields.next()?.parse().ok()?;
        Some((user + system) as f64 / 100.0)
    }

    /// Resident memory and, after it, how much of it is in transparent huge pages
    /// (`AnonHugePages`; a restarted engine holds nearly all of its index in them, a
    /// bulk-loaded one far less, and the difference is part of its slower requests).
    fn memory(&self) -> String {
        let mb = |kib: u64| kib as f64 * 1024.0 / 1e6;
        let rss = mb(self.proc_kib("status", "VmRSS:").unwrap_or(0));
        match self.proc_kib("smaps_rollup", "AnonHugePages:") {
            Some(huge) => format!("{rss:.0} MB ({:.0} MB in huge pages)", mb(huge)),
            None => format!("{rss:.0} MB"),
        }
    }

    fn stop(mut self) {
        // SIGTERM, so the restart measures a clean start
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

enum Body {
    None,
    Bytes(Vec<u8>),
    File(PathBuf),
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = nl + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

/// A query class's p50 / p99 (`sorted`: latencies in ms, ascending).
fn latency_row(class: &str, how: &str, sorted: &[f64], target: &str) {
    row(
        &format!("query class {class} ({} queries, {how})", sorted.len()),
        format!(
            "p50 {:.2} / p99 {:.2} ms",
            percentile(sorted, 0.5),
            percentile(sorted, 0.99)
        ),
        target,
    );
}

/// Distinct terms per did-you-mean dictionary, from the engine's metrics.
fn dictionary_terms(engine: &Engine) -> std::io::Result<std::collections::HashMap<String, f64>> {
    let (_, body) = engine.request("GET", "/ws/metrics", Body::None)?;
    let text = String::from_utf8_lossy(&body);
    Ok(text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("engine_didyoumean_terms{dimension=\"")?;
            let (dim, rest) = rest.split_once("\"}")?;
            Some((dim.to_string(), rest.trim().parse().ok()?))
        })
        .collect())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn row(what: &str, figure: String, target: &str) {
    println!("{what:<52} {figure:>22}   target {target}");
}

/// The §16 target of a query class.
fn target(class: &str) -> &'static str {
    match class {
        "exact" => "p50 <= 1 ms, p99 <= 5 ms",
        "rank" | "geo" => "p50 <= 5 ms, p99 <= 20 ms",
        "facets" => "p50 <= 5 ms",
        "text" => "p50 <= 1 ms",
        "didyoumean" => "p50 <= 2 ms",
        _ => "-",
    }
}

/// The processor's model and clock, as `/proc/cpuinfo` gives them for the first core.
fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_string())
    };
    match (field("model name"), field("cpu MHz")) {
        (Some(model), Some(mhz)) => format!("{model} at {mhz} MHz"),
        (Some(model), None) => model,
        _ => "processor unknown".into(),
    }
}

/// How fast one core parses the dataset's delta changesets and how fast it takes their
/// MD5 (MB/s, each the best of three passes over them in memory). Machines of one kind
/// differ about twofold (the parser's `parse_throughput` test: 195–199 MB/s in session
/// 58, 83–90 in session 64), and every figure below moves with them, so a run's figures
/// are read beside these. The parse rate also moves with the parser (session 73's took
/// it from ~150 to ~450 MB/s on one machine); the MD5 rate is the same code from run to
/// run (a dependency locked by `Cargo.lock`). `None` without deltas, or if one fails to
/// parse.
fn yardsticks(ds: &Path) -> Option<(f64, f64)> {
    use md5::Digest;
    let bodies: Vec<Vec<u8>> = (1..)
        .map(|k| ds.join(format!("delta-{k}.xml")))
        .take_while(|p| p.exists())
        .filter_map(|p| std::fs::read(p).ok())
        .collect();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    if bytes == 0 {
        return None;
    }
    let best_of_3 = |pass: &dyn Fn() -> Option<()>| -> Option<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            pass()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Some(bytes as f64 / best / 1e6)
    };
    let parse = best_of_3(&|| {
        for body in &bodies {
            discern_changeset::read_changeset::<_, discern_changeset::ParseError>(
                &body[..],
                |_| Ok(()),
            )
            .ok()?;
        }
        Some(())
    })?;
    let md5 = best_of_3(&|| {
        let mut h = md5::Md5::new();
        for body in &bodies {
            h.update(body);
        }
        std::hint::black_box(h.finalize());
        Some(())
    })?;
    Some((parse, md5))
}

/// The same queries in this process, without HTTP: what the engine itself takes.
fn replay_in_process(
    data: &Path,
    class_names: &[String],
    replayed: &[(usize, serde_json::Value)],
    passes: usize,
) -> anyhow::Result<()> {
    let local = discern_engine::Engine::open(
        discern_engine::Config {
            data_dir: data.to_path_buf(),
            ..Default::default()
        },
        true,
    )?;
    local.populate(&mut local.lock_writer_blocking())?;
    // per query replayed, its fastest pass (`None`: not answered)
    let mut fastest: Vec<Option<f64>> = vec![None; replayed.len()];
    for _ in 0..passes.max(1) {
        for ((_, body), best) in replayed.iter().zip(&mut fastest) {
            let t = Instant::now();
            if discern_engine::query_response(&local, body).is_ok() {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                *best = Some(best.map_or(ms, |b| b.min(ms)));
            }
        }
    }
    let mut local_times: Vec<Vec<f64>> = vec![Vec::new(); class_names.len()];
    for ((class, _), best) in replayed.iter().zip(fastest) {
        local_times[*class].extend(best);
    }
    let how = match passes {
        0 | 1 => "in-process".to_string(),
        n => format!("in-process, fastest of {n} passes"),
    };
    for (class, mut times) in class_names.iter().zip(local_times) {
        if times.is_empty() {
            continue;
        }
        times.sort_by(f64::total_cmp);
        latency_row(class, &how, &times, target(class));
        if passes > 1 {
            println!("  {class}: total {:.1} ms", times.iter().sum::<f64>());
        }
    }
    drop(local);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // (the in-process replay runs the engine's code: on the engine's allocator settings)
    discern_engine::alloc::keep_freed_memory();
    let args = Args::parse();
    let ds = &args.dataset;
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).context("manifest.json")?)?;
    let n = manifest["n"].as_u64().unwrap_or(0);
    let tmp;
    let work = match &args.work {
        Some(w) => w.clone(),
        None => {
            tmp = std::env::temp_dir().join(format!("discern-bench-{}", std::process::id()));
            tmp.clone()
        }
    };
    let data = work.join("data");
    if args.in_process_only {
        let mut class_names: Vec<String> = Vec::new();
        let mut replayed: Vec<(usize, serde_json::Value)> = Vec::new();
        let file = std::fs::File::open(ds.join("queries.jsonl"))?;
        for line in std::io::BufReader::new(file).lines() {
            let mut q: serde_json::Value = serde_json::from_str(&line?)?;
            let class = q["_class"].as_str().unwrap_or("?").to_string();
            if class == "didyoumean" {
                continue;
            }
            let pos = class_names
                .iter()
                .position(|c| *c == class)
                .unwrap_or_else(|| {
                    class_names.push(class);
                    class_names.len() - 1
                });
            if replayed.iter().filter(|(c, _)| *c == pos).count() >= args.per_class {
                continue;
            }
            if let Some(o) = q.as_object_mut() {
                o.retain(|k, _| !k.starts_with('_'));
            }
            replayed.push((pos, q));
        }
        return replay_in_process(&data, &class_names, &replayed, args.passes);
    }
    let _ = std::fs::remove_dir_all(&work);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default();
    println!("machine: {cores} cores, {}, {}", mem.trim(), cpu_model());
    if let Some((parse, md5)) = yardsticks(ds) {
        println!(
            "one core parses the dataset's deltas at {parse:.0} MB/s and takes their MD5 at \
             {md5:.0} MB/s (best of 3; the MD5 rate compares machines)"
        );
    }
    println!("dataset: {} ({n} items)", ds.display());

    let (engine, _) = Engine::start(&args.binary, &data)?;
    let (s, _) = engine.request(
        "POST",
        "/ws/dimensions",
        Body::File(ds.join("dimensions.xml")),
    )?;
    if s != 204 {
        bail!("POST /ws/dimensions: {s}");
    }
    let t = Instant::now();
    let (s, b) = engine.request(
        "POST",
        "/ws/changeset?type=bulk",
        Body::File(ds.join("bulk.xml")),
    )?;
    let secs = t.elapsed().as_secs_f64();
    if s != 201 {
        bail!("bulk load: HTTP {s}: {}", String::from_utf8_lossy(&b));
    }
    row(
        "bulk changeset -> applied, durable, queryable",
        format!("{:.0} items/s", n as f64 / secs),
        ">= 100,000 items/s",
    );
    row(
        "resident memory after the bulk load",
        engine.memory(),
        "<= 1,200 MB",
    );
    // the columns of every chunk are built in the background after the 201 (~1 s at
    // 1M items): the figure a loaded, idle engine holds
    std::thread::sleep(std::time::Duration::from_secs(5));
    row(
        "resident memory 5 s after the bulk load (columns built)",
        engine.memory(),
        "<= 1,200 MB",
    );

    let mut delta_ms = Vec::new();
    let cpu_before = engine.cpu_seconds();
    for k in 1.. {
        let p = ds.join(format!("delta-{k}.xml"));
        if !p.exists() {
            break;
        }
        let t = Instant::now();
        let (s, _) = engine.request("POST", "/ws/changeset", Body::File(p))?;
        if s != 201 {
            bail!("delta-{k}: HTTP {s}");
        }
        delta_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let cpu_after = engine.cpu_seconds();
    delta_ms.sort_by(f64::total_cmp);
    row(
        &format!("delta of 1,000 -> visible (median of {})", delta_ms.len()),
        format!("{:.1} ms", percentile(&delta_ms, 0.5)),
        "<= 50 ms",
    );
    // Back to back, both cores are busy through the deltas (one apply's upkeep beside
    // the next apply): the median follows half the engine's CPU per delta (DECISIONS,
    // session 75), the figure that says whether a change saved work.
    if let (Some(before), Some(after), false) = (cpu_before, cpu_after, delta_ms.is_empty()) {
        row(
            "  the engine's CPU per delta (all threads)",
            format!("{:.0} ms", (after - before) * 1e3 / delta_ms.len() as f64),
            "-",
        );
    }

    // query classes
    let mut classes: Vec<(String, Vec<f64>)> = Vec::new();
    // (class, body) of every /ws/query replayed, for the in-process replay below
    let mut replayed: Vec<(usize, serde_json::Value)> = Vec::new();
    // did-you-mean latencies per dimension: the target is for a ~1M-term dictionary
    let mut dym_by_dim: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let file = std::fs::File::open(ds.join("queries.jsonl"))?;
    for line in std::io::BufReader::new(file).lines() {
        let mut q: serde_json::Value = serde_json::from_str(&line?)?;
        let class = q["_class"].as_str().unwrap_or("?").to_string();
        let pos = match classes.iter().position(|(c, _)| *c == class) {
            Some(p) => p,
            None => {
                classes.push((class.clone(), Vec::new()));
                classes.len() - 1
            }
        };
        if classes[pos].1.len() >= args.per_class {
            continue;
        }
        let (path, body) = if class == "didyoumean" {
            let dim = q["dimension"].as_str().unwrap_or("").to_string();
            (format!("/ws/didyoumean/{dim}"), q.clone())
        } else {
            if let Some(o) = q.as_object_mut() {
                o.retain(|k, _| !k.starts_with('_'));
            }
            ("/ws/query".to_string(), q)
        };
        let t = Instant::now();
        let (s, _) = engine.request("POST", &path, Body::Bytes(body.to_string().into_bytes()))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if s == 200 {
            classes[pos].1.push(ms);
            if class == "didyoumean" {
                let dim = body["dimension"].as_str().unwrap_or("?").to_string();
                dym_by_dim.entry(dim).or_default().push(ms);
            } else {
                replayed.push((pos, body));
            }
        }
    }
    let class_names: Vec<String> = classes.iter().map(|(c, _)| c.clone()).collect();
    for (class, mut times) in classes {
        times.sort_by(f64::total_cmp);
        if times.is_empty() {
            row(
                &format!("query class {class} (over HTTP)"),
                "not answered".into(),
                target(&class),
            );
            continue;
        }
        latency_row(&class, "over HTTP", &times, target(&class));
    }
    let terms = dictionary_terms(&engine)?;
    for (dim, mut times) in dym_by_dim {
        times.sort_by(f64::total_cmp);
        let n = terms
            .get(&dim)
            .map_or("?".to_string(), |n| format!("{n:.0}"));
        latency_row(
            &format!("didyoumean on {dim} ({n} terms)"),
            "over HTTP",
            &times,
            "p50 <= 2 ms",
        );
    }

    let t = Instant::now();
    let (s, lines) = engine.count_lines("/ws/export")?;
    let secs = t.elapsed().as_secs_f64();
    if s == 200 {
        // header + 2 lines per item + final empty line
        let items = lines.saturating_sub(2) / 2;
        row(
            "export of all items with sources",
            format!("{:.0} items/s", items as f64 / secs),
            ">= 300,000 items/s",
        );
    }
    row(
        "resident memory after queries and export",
        engine.memory(),
        "<= 1,200 MB",
    );

    engine.stop();
    let (engine, took) = Engine::start(&args.binary, &data)?;
    row(
        "restart to queryable",
        format!("{:.2} s", took.as_secs_f64()),
        "<= 5 s",
    );
    engine.stop();

    replay_in_process(&data, &class_names, &replayed, args.passes)?;
    if args.work.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(())
}
