//! Request and response bodies: bounded JSON, async bodies read from blocking threads,
//! blocking producers streamed as response bodies.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use bytes::BytesMut;
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::Value as J;
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::errors::ApiError;

/// Largest JSON request body (SPEC §15.4).
pub const MAX_JSON_BYTES: usize = 16 << 20;

/// Reads and parses a JSON request body: 413 over 16 MiB, 400 when malformed.
pub async fn read_json(body: Body, headers: &HeaderMap) -> Result<J, ApiError> {
    let bytes = read_bounded(body, headers, MAX_JSON_BYTES).await?;
    parse_json(&bytes)
}

pub fn parse_json(bytes: &[u8]) -> Result<J, ApiError> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(J::Object(Default::default()));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad(format!("malformed JSON request body: {e}")))
}

pub async fn read_bounded(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {limit} bytes"),
        )
    };
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limit {
            return Err(too_large());
        }
    }
    match axum::body::to_bytes(body, limit).await {
        Ok(b) => Ok(b),
        Err(e) => {
            let msg = e.to_string();
            if msg.contains("length limit") {
                Err(too_large())
            } else {
                Err(ApiError::bad(format!(
                    "could not read the request body: {msg}"
                )))
            }
        }
    }
}

/// Bytes a request body's frames are gathered into before the reading thread gets them.
const BODY_CHUNK: usize = 256 * 1024;

/// A blocking `Read` over an async request body. A task forwards the body through a
/// bounded channel, its frames gathered into chunks of `BODY_CHUNK`: a frame is often
/// 16 KiB or less, and handing each over on its own (a thread woken per frame, before
/// this a blocking-pool task per frame) took a tenth of a bulk load's CPU.
pub struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, String>>,
    cur: Bytes,
}

impl ChannelReader {
    pub fn spawn(body: Body) -> ChannelReader {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, String>>(8);
        tokio::spawn(async move {
            let mut body = body;
            let mut pending = BytesMut::new();
            loop {
                let chunk = match body.frame().await {
                    None => break,
                    Some(Err(e)) => Err(e.to_string()),
                    Some(Ok(frame)) => {
                        let Ok(data) = frame.into_data() else {
                            continue;
                        };
                        if pending.is_empty() && data.len() >= BODY_CHUNK {
                            Ok(data)
                        } else {
                            if pending.is_empty() {
                                pending.reserve(BODY_CHUNK);
                            }
                            pending.extend_from_slice(&data);
                            if pending.len() < BODY_CHUNK {
                                continue;
                            }
                            Ok(std::mem::take(&mut pending).freeze())
                        }
                    }
                };
                let failed = chunk.is_err();
                // the reader went away (the apply failed): stop reading
                if tx.send(chunk).await.is_err() || failed {
                    return;
                }
            }
            if !pending.is_empty() {
                let _ = tx.send(Ok(pending.freeze())).await;
            }
        });
        ChannelReader {
            rx,
            cur: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    /// Blocks: call it from a blocking thread, never from an async worker.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(io::Error::other(format!("request body: {e}"))),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        let _ = self.cur.split_to(n);
        Ok(n)
    }
}

/// Fails reads past `limit` bytes and remembers that it did (→ 413, not 400).
pub struct LimitReader<R> {
    pub inner: R,
    pub left: u64,
    pub exceeded: Arc<AtomicBool>,
}

impl<R: Read> Read for LimitReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.exceeded.store(true, Ordering::Release);
            return Err(io::Error::other(
                "changeset larger than max-changeset-bytes",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Wraps a reader in the decoder `Content-Encoding` names.
pub fn decoder(
    encoding: Option<&str>,
    r: impl Read + Send + 'static,
) -> Result<Box<dyn Read + Send>, ApiError> {
    match encoding.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("identity") => Ok(Box::new(r)),
        Some("gzip") | Some("x-gzip") => Ok(Box::new(flate2::read::MultiGzDecoder::new(r))),
        Some("deflate") => Ok(Box::new(flate2::read::ZlibDecoder::new(r))),
        Some("zstd") => Ok(Box::new(
            zstd::stream::read::Decoder::new(r)
                .map_err(|e| ApiError::bad(format!("zstd body: {e}")))?,
        )),
        Some(other) => Err(ApiError::bad(format!(
            "unsupported Content-Encoding {other:?}"
        ))),
    }
}

/// Runs `f` on a blocking thread (store reads, evaluation, anything that may wait).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// Runs `f` — a request's own computation, which its response waits for (a query, a
/// suggestion) — on the thread serving the request, which the runtime lets block
/// (`block_in_place`: its other tasks move to another worker). Handing `f` to a
/// blocking-pool thread and its result back cost two thread wake-ups, ~60 µs of a
/// ~1 ms query. A current-thread runtime cannot lend its thread: there `f` goes to the
/// pool. A panic in `f` is an error, as from the pool.
pub(crate) async fn in_place<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let error = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e);
    // one message for a panic on either path, naming what it said
    let panicked = |panic: Box<dyn std::any::Any + Send>| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        error(format!("the request's computation failed: {why}"))
    };
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
            .map_err(panicked)
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| match e.try_into_panic() {
                Ok(panic) => panicked(panic),
                Err(e) => error(e.to_string()),
            })
    }
}

/// Streams what a blocking producer writes as a response body.
pub fn blocking_stream<F>(produce: F) -> Body
where
    F: FnOnce(&mut ChunkSink) -> io::Result<()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let mut sink = ChunkSink {
            tx: tx.clone(),
            buf: Vec::with_capacity(64 * 1024),
        };
        let r = produce(&mut sink).and_then(|_| sink.flush_now());
        if let Err(e) = r {
            tracing::warn!(error = %e, "streamed response ended early");
            let _ = tx.blocking_send(Err(e));
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Body::from_stream(stream.boxed())
}

pub struct ChunkSink {
    tx: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChunkSink {
    /// Sends `chunk` as it is (after anything written before it), without copying.
    pub fn send_owned(&mut self, chunk: Vec<u8>) -> io::Result<()> {
        self.flush_now()?;
        self.buf = chunk;
        self.flush_now()
    }

    fn flush_now(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let chunk = Bytes::from(std::mem::replace(
                &mut self.buf,
                Vec::with_capacity(64 * 1024),
            ));
            self.tx
                .blocking_send(Ok(chunk))
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client went away"))?;
        }
        Ok(())
    }
}

impl io::Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 64 * 1024 {
            self.flush_now()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request's thread when a worker can lend it: `block_in_place` panics on a
    /// current-thread runtime, and a panic in the work is a 500, not a lost connection.
    async fn check_in_place() {
        let here = std::thread::current().id();
        let ran_on = in_place(move || std::thread::current().id()).await.unwrap();
        let lends = Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread;
        assert_eq!(ran_on == here, lends);
        let failed = in_place(|| -> u8 { panic!("a failing computation") }).await;
        let failed = failed.unwrap_err();
        assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            failed.message,
            "the request's computation failed: a failing computation"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_place_on_a_worker() {
        check_in_place().await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn in_place_on_a_current_thread_runtime() {
        check_in_place().await;
    }

    /// A body of many small frames reaches the reading thread whole and in order, in
    /// chunks of `BODY_CHUNK` (the first read gets a full chunk, not one frame); an
    /// error from the body ends the reading with that error (the apply fails, so the
    /// bytes gathered before it are not handed over).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_frames_are_gathered() {
        let frames: Vec<Vec<u8>> = (0..4000u32)
            .map(|i| i.to_le_bytes().repeat(25)) // 100 bytes each
            .collect();
        let whole: Vec<u8> = frames.concat();
        let stream = futures::stream::iter(
            frames
                .into_iter()
                .map(|f| Ok::<_, std::io::Error>(Bytes::from(f))),
        );
        let mut reader = ChannelReader::spawn(Body::from_stream(stream));
        let (first, all) = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; 1 << 20];
            let first = reader.read(&mut buf).unwrap();
            let mut all = buf[..first].to_vec();
            reader.read_to_end(&mut all).unwrap();
            (first, all)
        })
        .await
        .unwrap();
        // (the first frame at or past the chunk's size ends it)
        assert!((BODY_CHUNK..BODY_CHUNK + 100).contains(&first), "{first}");
        assert_eq!(all, whole);

        let failing = futures::stream::iter([
            Ok(Bytes::from_static(b"<changeset>")),
            Err(std::io::Error::other("connection reset")),
        ]);
        let mut reader = ChannelReader::spawn(Body::from_stream(failing));
        let read = tokio::task::spawn_blocking(move || {
            let mut got = Vec::new();
            reader.read_to_end(&mut got).map_err(|e| e.to_string())
        })
        .await
        .unwrap();
        let error = read.unwrap_err();
        assert!(error.contains("connection reset"), "{error}");
    }
}
