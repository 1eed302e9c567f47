use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use md5::{Digest, Md5};

/// Receives a changeset body: compresses it into `<id>.xml.zst` while hashing and
/// counting the uncompressed bytes, on a thread of its own so that parsing and applying
/// (the caller's thread) overlap with hashing and compression; then fsyncs the file and
/// its directory. Nothing is visible until the apply commits and lists it (a file no
/// listing names is an orphan, deleted at open).
pub struct LogWriter {
    pub(crate) id: String,
    pub(crate) path: PathBuf,
    tx: Option<SyncSender<Vec<u8>>>,
    /// Bytes written and not yet handed to the thread: it gets them `LOG_CHUNK` at a
    /// time, not a read's worth at a time (a thread wake-up each).
    pending: Vec<u8>,
    /// Chunks the thread is done with, emptied, for `pending` to take again.
    spent: Receiver<Vec<u8>>,
    /// Chunks `pending` took new rather than from `spent` (tests).
    fresh_chunks: u64,
    worker: Option<JoinHandle<io::Result<(String, u64)>>>,
    pub(crate) length: u64,
}

const LOG_CHUNK: usize = 1 << 20;

/// Spent chunks kept for `pending`: a new chunk costs fresh memory, which on this
/// project's VMs is ~4 ms a 2 MiB page to touch (a 1M-item bulk load sends 1.87 GB
/// through 1,800 chunks; its writer's fresh pages were ~6% of the parser thread's
/// CPU: DECISIONS, session 60).
const SPENT_CHUNKS: usize = 4;

static THREADS_STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Log-writer threads started since the process began (one per stored changeset).
pub fn threads_started() -> u64 {
    THREADS_STARTED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) struct Staged {
    pub id: String,
    pub path: PathBuf,
    pub md5: String,
    pub length: u64,
    pub raw_length: u64,
}

/// Whether `id` is a changeset id as engines make them: hex digits and dashes, at most
/// 64 of them. Such an id is safe as a file or directory name.
pub fn is_engine_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

impl LogWriter {
    pub(crate) fn create(dir: &std::path::Path) -> io::Result<LogWriter> {
        Self::start(dir, new_id())
    }

    /// A log file under an id another engine gave (replication). The id becomes a file
    /// name, so only ids of hex digits and dashes, as engines make them, are accepted.
    pub(crate) fn create_with_id(dir: &std::path::Path, id: &str) -> io::Result<LogWriter> {
        if !is_engine_id(id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("changeset id {id:?} is not an engine's id"),
            ));
        }
        Self::start(dir, id.to_string())
    }

    fn start(dir: &std::path::Path, id: String) -> io::Result<LogWriter> {
        let path = crate::log_file(dir, &id);
        let file = File::create(&path)?;
        let dir = dir.to_path_buf();
        let (tx, rx) = sync_channel::<Vec<u8>>(16);
        let (spent_tx, spent) = sync_channel::<Vec<u8>>(SPENT_CHUNKS);
        let worker = std::thread::Builder::new()
            .name("changeset-log".into())
            .spawn(move || {
                THREADS_STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut enc = zstd::stream::write::Encoder::new(
                    BufWriter::with_capacity(256 * 1024, file),
                    1,
                )?;
                let mut md5 = Md5::new();
                for mut chunk in rx {
                    md5.update(&chunk);
                    enc.write_all(&chunk)?;
                    chunk.clear();
                    // (never waits: with enough kept, or the writer gone, it is freed)
                    let _ = spent_tx.try_send(chunk);
                }
                let buf = enc.finish()?;
                let file = buf.into_inner().map_err(|e| e.into_error())?;
                file.sync_all()?;
                // the file's name too, before a commit lists it
                File::open(&dir)?.sync_all()?;
                let raw_length = file.metadata()?.len();
                Ok((hex::encode(md5.finalize()), raw_length))
            })?;
        Ok(LogWriter {
            id,
            path,
            tx: Some(tx),
            pending: Vec::new(),
            spent,
            fresh_chunks: 0,
            worker: Some(worker),
            length: 0,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Hands the pending bytes to the thread.
    fn send_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| io::Error::other("log writer finished"))?;
        if tx.send(std::mem::take(&mut self.pending)).is_err() {
            // the worker stopped: report its error
            return Err(self
                .join()
                .err()
                .unwrap_or_else(|| io::Error::other("changeset log thread stopped")));
        }
        Ok(())
    }

    fn join(&mut self) -> io::Result<(String, u64)> {
        self.tx.take();
        match self.worker.take() {
            Some(w) => w
                .join()
                .map_err(|_| io::Error::other("changeset log thread panicked"))?,
            None => Err(io::Error::other("log writer already finished")),
        }
    }

    /// Ends the body: the writer's thread finishes compressing and fsyncs while the
    /// caller does other work (then `finish`).
    pub(crate) fn close(&mut self) -> io::Result<()> {
        self.send_pending()?;
        self.tx.take();
        Ok(())
    }

    /// Waits for the file to be compressed, flushed and fsynced.
    pub(crate) fn finish(mut self) -> io::Result<Staged> {
        self.send_pending()?;
        let (md5, raw_length) = self.join()?;
        Ok(Staged {
            id: std::mem::take(&mut self.id),
            path: std::mem::take(&mut self.path),
            md5,
            length: self.length,
            raw_length,
        })
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.tx.is_none() {
            return Err(io::Error::other("log writer finished"));
        }
        if self.pending.is_empty() {
            match self.spent.try_recv() {
                Ok(chunk) => self.pending = chunk,
                Err(_) => self.fresh_chunks += 1,
            }
            self.pending.reserve(LOG_CHUNK.max(buf.len()));
        }
        self.pending.extend_from_slice(buf);
        if self.pending.len() >= LOG_CHUNK {
            self.send_pending()?;
        }
        self.length += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}

impl Drop for LogWriter {
    /// An unfinished writer (rejected changeset) leaves no file behind.
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = self.join();
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// 32 lowercase hex characters, random (SPEC §5.1).
fn new_id() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids engines make (and that name log files and image directories) pass; names
    /// that could leave a directory, or are empty or long, do not.
    #[test]
    fn engine_ids() {
        assert!(is_engine_id(&new_id()));
        assert!(is_engine_id("0a1b-2c3d"));
        for bad in ["", "..", "a/b", "x1", "ab.cd", &"a".repeat(65)] {
            assert!(!is_engine_id(bad), "{bad:?}");
        }
    }

    /// Written in pieces smaller and larger than `LOG_CHUNK`, the file holds every byte
    /// in order, and its md5 and lengths are the body's, whether the writer is closed
    /// first or finished at once (the tail below a chunk still reaches the file).
    #[test]
    fn pieces_reach_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..3 * LOG_CHUNK + 12_345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        for close_first in [false, true] {
            let mut w = LogWriter::create(dir.path()).unwrap();
            let mut rest = &body[..];
            for size in [1usize, 100, LOG_CHUNK + 5, 4096].iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let n = (*size).min(rest.len());
                w.write_all(&rest[..n]).unwrap();
                rest = &rest[n..];
            }
            if close_first {
                w.close().unwrap();
            }
            let staged = w.finish().unwrap();
            assert_eq!(staged.length, body.len() as u64);
            assert_eq!(staged.md5, hex::encode(Md5::digest(&body)));
            let stored = fs::read(&staged.path).unwrap();
            assert_eq!(staged.raw_length, stored.len() as u64);
            assert_eq!(zstd::decode_all(&stored[..]).unwrap(), body);
        }
    }

    /// A long body goes through a few chunks taken again and again, not a new one per
    /// `LOG_CHUNK`, and reaches the file whole (a chunk taken again starts empty).
    #[test]
    fn chunks_are_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let piece: Vec<u8> = (0..64 * 1024).map(|i| (i % 253) as u8).collect();
        let pieces = 96 * LOG_CHUNK / piece.len();
        let mut w = LogWriter::create(dir.path()).unwrap();
        for _ in 0..pieces {
            w.write_all(&piece).unwrap();
        }
        // at most the chunks queued for the thread, the one it holds, those it gave
        // back and the one being filled
        let fresh = w.fresh_chunks;
        assert!(
            fresh <= 16 + 1 + SPENT_CHUNKS as u64 + 1,
            "{fresh} new chunks for 96"
        );
        let staged = w.finish().unwrap();
        let stored = zstd::decode_all(&fs::read(&staged.path).unwrap()[..]).unwrap();
        assert_eq!(stored.len(), pieces * piece.len());
        assert!(stored.chunks(piece.len()).all(|c| c == &piece[..]));
    }
}
