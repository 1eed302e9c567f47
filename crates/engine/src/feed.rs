//! Feeds (SPEC §14): every `feed-interval` ms, pull changesets from another engine (a
//! follower) or from a changeset publisher, and apply them like POSTed ones — all or
//! nothing; a failed pull is logged, counted and retried at the next interval.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use discern_model::{Error, Result};
use discern_store::{ApplyOutcome, ChangesetType, Listed};

use crate::Engine;

/// How a follower is doing, for `/ws/queryable` and the metrics.
pub struct FeedStatus {
    /// False while a new follower has not caught up with its primary yet.
    pub synced: AtomicBool,
    /// Changesets the primary lists that are not applied here yet.
    pub lag: AtomicU64,
    /// Unix milliseconds of the last pull that ended without error (0 = never).
    pub last_success_ms: AtomicU64,
    pub failures: AtomicU64,
    pub applied: AtomicU64,
    /// Whether this process started from the primary's bootstrap image (`image.rs`): its
    /// item store installed and its index in use.
    pub from_image: AtomicBool,
}

impl FeedStatus {
    pub fn new(synced: bool) -> FeedStatus {
        FeedStatus {
            synced: AtomicBool::new(synced),
            lag: AtomicU64::new(0),
            last_success_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            from_image: AtomicBool::new(false),
        }
    }

    /// (lag in changesets, last success in Unix seconds, started from an image).
    pub fn figures(&self) -> (u64, f64, bool) {
        (
            self.lag.load(Ordering::Relaxed),
            self.last_success_ms.load(Ordering::Relaxed) as f64 / 1e3,
            self.from_image.load(Ordering::Relaxed),
        )
    }

    /// After this process installed the primary's image: answers queries once the
    /// first poll has applied what the primary stored since the image's checkpoint.
    pub fn started_from_image(&self) {
        self.synced.store(false, Ordering::Release);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A feed URL with no path (or `/`) names an engine; any other URL a publisher.
pub fn names_an_engine(url: &str) -> bool {
    match reqwest::Url::parse(url) {
        Ok(u) => matches!(u.path(), "" | "/") && u.query().is_none(),
        Err(_) => false,
    }
}

/// Starts the feed thread when `feed` is configured. It runs until the process ends.
pub fn start(engine: Arc<Engine>) {
    let Some(url) = engine.config.feed.clone() else {
        return;
    };
    let interval = Duration::from_millis(engine.config.feed_interval_ms.max(10));
    let spawned = std::thread::Builder::new()
        .name("feed".into())
        .spawn(move || {
            crate::process::thread_started();
            let client = match reqwest::blocking::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                // a whole changeset download; generous for a million items
                .timeout(Duration::from_secs(3600))
                .build()
            {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "feed: cannot make an HTTP client");
                    return;
                }
            };
            let engine_feed = names_an_engine(&url);
            let mut first_pull = true;
            tracing::info!(%url, engine = engine_feed, ms = interval.as_millis() as u64, "feed started");
            loop {
                let started = Instant::now();
                let r = if engine_feed {
                    follow_engine(&engine, &client, url.trim_end_matches('/'))
                } else {
                    pull_publisher(&engine, &client, &url, first_pull)
                };
                first_pull = false;
                match r {
                    Ok(()) => {
                        engine
                            .feed
                            .last_success_ms
                            .store(now_ms(), Ordering::Relaxed);
                    }
                    Err(e) => {
                        engine.feed.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%url, error = %e, "feed pull failed; retrying at the next interval");
                    }
                }
                std::thread::sleep(interval.saturating_sub(started.elapsed()));
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "feed: cannot start its thread");
    }
}

pub(crate) fn http_err(e: reqwest::Error) -> Error {
    Error::Unavailable(format!("feed: {e}"))
}

/// Downloads a body to a temporary file in the data dir before the writer is taken, so
/// that a slow or stalled network never holds up other writers.
fn spool(engine: &Engine, mut body: impl Read) -> Result<std::fs::File> {
    let mut f = tempfile::tempfile_in(engine.store().dir())?;
    std::io::copy(&mut body, &mut f)
        .map_err(|e| Error::Unavailable(format!("feed: download interrupted: {e}")))?;
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0))?;
    Ok(f)
}

pub(crate) fn get(
    client: &reqwest::blocking::Client,
    url: &str,
) -> Result<reqwest::blocking::Response> {
    let r = client.get(url).send().map_err(http_err)?;
    if !r.status().is_success() {
        return Err(Error::Unavailable(format!(
            "feed: GET {url} answered {}",
            r.status()
        )));
    }
    Ok(r)
}

/// One poll of a primary engine: mirror its dimensions, then apply every changeset it
/// lists after the newest one stored here (or restart from its listed snapshot).
fn follow_engine(
    engine: &Arc<Engine>,
    client: &reqwest::blocking::Client,
    base: &str,
) -> Result<()> {
    let mut dims = Vec::new();
    get(client, &format!("{base}/ws/dimensions"))?
        .read_to_end(&mut dims)
        .map_err(|e| Error::Unavailable(format!("feed: reading the dimensions: {e}")))?;
    if dims != **engine.dimensions_doc() {
        let mut guard = engine.lock_writer_blocking();
        let parsed = engine.set_dimensions(&mut guard, &dims)?;
        engine.reindex(&mut guard, parsed)?;
        tracing::info!("feed: mirrored the primary's dimensions");
    }

    let listing = get(client, &format!("{base}/ws/changeset?full"))?
        .text()
        .map_err(http_err)?;
    let listed = parse_listing(&listing)?;
    let newest_here = engine.store().list(true)?.last().map(|m| m.id.clone());
    let pending: Vec<Listed> = match newest_here
        .as_deref()
        .and_then(|id| listed.iter().position(|l| l.id == id))
    {
        Some(at) => listed[at + 1..].to_vec(),
        None => {
            // nothing here yet, or our newest changeset has left the primary's history:
            // start again from its newest complete state
            let from = listed.iter().rposition(|l| l.snapshot).unwrap_or(0);
            let mut v = listed[from.min(listed.len())..].to_vec();
            if let Some(first) = v.first_mut() {
                first.restart = newest_here.is_some();
            }
            v
        }
    };
    engine
        .feed
        .lag
        .store(pending.len() as u64, Ordering::Relaxed);
    for (i, l) in pending.iter().enumerate() {
        let body = spool(
            engine,
            get(client, &format!("{base}/ws/changeset/{}", l.id))?,
        )?;
        let mut guard = engine.lock_writer_blocking();
        engine.apply_replicated(&mut guard, l, std::io::BufReader::new(body))?;
        drop(guard);
        engine.feed.applied.fetch_add(1, Ordering::Relaxed);
        engine
            .feed
            .lag
            .store((pending.len() - i - 1) as u64, Ordering::Relaxed);
    }
    engine.feed.synced.store(true, Ordering::Release);
    Ok(())
}

/// `<changeset id=… type=… snapshot=… md5=… length=…/>` entries, oldest first. `type`
/// is a discern addition; without it a `snapshot="true"` entry is a snapshot.
pub fn parse_listing(xml: &str) -> Result<Vec<Listed>> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Empty(e)) | Ok(Event::Start(e)) if e.name().as_ref() == b"changeset" => {
                let mut l = Listed {
                    id: String::new(),
                    ty: ChangesetType::Delta,
                    md5: String::new(),
                    length: 0,
                    snapshot: false,
                    restart: false,
                };
                let mut ty = None;
                for a in e.attributes().flatten() {
                    let v = a
                        .unescape_value()
                        .map_err(|e| Error::Unavailable(format!("feed: listing: {e}")))?
                        .into_owned();
                    match a.key.as_ref() {
                        b"id" => l.id = v,
                        b"type" => ty = Some(v),
                        b"md5" => l.md5 = v,
                        b"length" => l.length = v.parse().unwrap_or(0),
                        b"snapshot" => l.snapshot = v == "true",
                        _ => {}
                    }
                }
                l.ty = match ty.as_deref() {
                    Some("checkpoint") => ChangesetType::Checkpoint,
                    Some(t) => ChangesetType::parse_posted(t)
                        .map_err(|e| Error::Unavailable(format!("feed: listing: {e}")))?,
                    None if l.snapshot => ChangesetType::Snapshot,
                    None => ChangesetType::Delta,
                };
                if l.id.is_empty() {
                    return Err(Error::Unavailable(
                        "feed: a listed changeset has no id".into(),
                    ));
                }
                out.push(l);
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => return Err(Error::Unavailable(format!("feed: listing: {e}"))),
        }
    }
    Ok(out)
}

/// One pull from a publisher: `X-t11e-type` gives the type (missing → delta), `Date`
/// the changeset's date; `forceSnapshot=true` on the first pull into an empty engine.
fn pull_publisher(
    engine: &Arc<Engine>,
    client: &reqwest::blocking::Client,
    url: &str,
    first_pull: bool,
) -> Result<()> {
    let mut target = url.to_string();
    if first_pull && engine.store().list(true)?.is_empty() {
        target.push(if target.contains('?') { '&' } else { '?' });
        target.push_str("forceSnapshot=true");
    }
    let resp = get(client, &target)?;
    let ty = match resp.headers().get("x-t11e-type") {
        Some(v) => {
            let t = v.to_str().unwrap_or("").trim().to_ascii_lowercase();
            ChangesetType::parse_posted(&t)
                .map_err(|e| Error::Unavailable(format!("feed: X-t11e-type: {e}")))?
        }
        None => ChangesetType::Delta,
    };
    let date = resp
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let body = spool(engine, resp)?;
    let mut guard = engine.lock_writer_blocking();
    match engine.apply_dated(&mut guard, ty, date, std::io::BufReader::new(body))? {
        ApplyOutcome::Empty => {}
        ApplyOutcome::Applied { meta, .. } => {
            engine.feed.applied.fetch_add(1, Ordering::Relaxed);
            tracing::info!(id = %meta.id, ty = ty.as_str(), "feed: applied a changeset");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_urls_have_no_path() {
        assert!(names_an_engine("http://primary:8090"));
        assert!(names_an_engine("http://primary:8090/"));
        assert!(!names_an_engine("http://pub:8089/ws/publisher/listings"));
        assert!(!names_an_engine("http://pub/?profile=x"));
        assert!(!names_an_engine("not a url"));
    }

    #[test]
    fn listing_entries_in_order() {
        let xml = r#"<changesets total="2">
<changeset id="aa" type="checkpoint" snapshot="true" date="x" md5="m1" href="h" length="10" rawLength="5"/>
<changeset id="bb" snapshot="false" md5="m2" length="3" rawLength="2"/>
</changesets>"#;
        let l = parse_listing(xml).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(
            (l[0].id.as_str(), l[0].ty, l[0].snapshot),
            ("aa", ChangesetType::Checkpoint, true)
        );
        assert_eq!(
            (l[1].id.as_str(), l[1].ty, l[1].length),
            ("bb", ChangesetType::Delta, 3)
        );
    }
}
