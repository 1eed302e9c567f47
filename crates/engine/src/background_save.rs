//! The index saved while the engine runs, so that a restart after a crash or a kill finds
//! a recent saved index (`saved.rs`) rather than rebuilding from the item store (~30 s at
//! 1M items) or catching up over a long run of deltas.
//!
//! A save writes the whole index (~1 GB at 1M items), so it is made only when a crash
//! would otherwise cost something worth that: a change a catch-up cannot make (any
//! changeset but a delta, a dimensions change, a rebuild at start-up), or enough deltas'
//! bytes (`Policy::worth`). It waits for applies to pause (`index-save-idle`), for at
//! most `Policy::longest`, and not at all once the deltas since the last save near the
//! catch-up limit. It takes the snapshot and the writer's counts under the writer lock
//! and writes them on a thread of its own at a low priority, one core, the writer let
//! go: applies and queries go on meanwhile. The save at shutdown stops one under way.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use discern_index::persist::{self, Encode, WriterCounts};
use discern_index::Snapshot;
use discern_model::Result;
use discern_store::ChangesetType;
use parking_lot::Mutex;

use crate::metrics::IndexSaveFigures;
use crate::{process, Engine};

/// Applies pausing this long make a save due, by default (`index-save-idle`).
pub const SAVE_IDLE_DEFAULT: Duration = Duration::from_secs(60);

/// Deltas (uncompressed bytes) worth a save once applies pause: catching up over them
/// at start-up would take ~0.5 s at 1M items (~11,000 items indexed again).
const WORTH: u64 = 16 << 20;

/// A save becomes due this long after the first change it would save at the latest,
/// pause or not.
const LONGEST: Duration = Duration::from_secs(600);

/// After a failed save (a full disk), the next waits at least this long.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// One save's file written at a time in this process (the temp file's name is fixed).
pub(crate) static WRITING: Mutex<()> = Mutex::new(());

/// When a save is due.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Applies paused this long.
    pub(crate) idle: Duration,
    /// At the latest this long after the first unsaved change.
    pub(crate) longest: Duration,
    /// Deltas' bytes that make a save worth its cost.
    pub(crate) worth: u64,
    /// Deltas' bytes that make a save due without a pause.
    pub(crate) at_once: u64,
}

impl Policy {
    /// The engine's policy; `None`: no background saves (`index-save-idle = 0`).
    pub(crate) fn of(config: &crate::Config) -> Option<Policy> {
        (config.index_save_idle_ms > 0).then(|| Policy {
            idle: Duration::from_millis(config.index_save_idle_ms),
            longest: LONGEST,
            worth: WORTH,
            at_once: crate::saved::CATCH_UP_AT_MOST / 2,
        })
    }
}

/// What changed the index since the last save took its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsaved {
    first: Instant,
    last: Instant,
    /// Uncompressed bytes of the deltas among the changes.
    delta_bytes: u64,
    /// A change a catch-up cannot make: a crash now means a rebuild.
    rebuild: bool,
}

impl Unsaved {
    fn at(now: Instant) -> Unsaved {
        Unsaved {
            first: now,
            last: now,
            delta_bytes: 0,
            rebuild: false,
        }
    }

    /// `self` and the changes of `later` together.
    fn and(self, later: Unsaved) -> Unsaved {
        Unsaved {
            first: self.first.min(later.first),
            last: self.last.max(later.last),
            delta_bytes: self.delta_bytes + later.delta_bytes,
            rebuild: self.rebuild || later.rebuild,
        }
    }

    pub(crate) fn due(&self, now: Instant, p: &Policy) -> bool {
        let waited = now.saturating_duration_since(self.last) >= p.idle
            || now.saturating_duration_since(self.first) >= p.longest;
        if self.rebuild {
            waited
        } else {
            self.delta_bytes >= p.at_once || (self.delta_bytes >= p.worth && waited)
        }
    }
}

/// The saved file as this process knows it, and the state of background saves.
#[derive(Default)]
pub(crate) struct Saving {
    /// The header of the file in the data dir, when this process loaded or wrote it.
    file: Mutex<Option<Vec<u8>>>,
    unsaved: Mutex<Option<Unsaved>>,
    /// A background save is under way.
    busy: AtomicBool,
    /// Background saves are numbered as they take their snapshot; those numbered up to
    /// `cancelled` stop.
    started: AtomicU64,
    cancelled: AtomicU64,
    /// No background save starts before this (after one failed).
    not_before: Mutex<Option<Instant>>,
    /// Saves written, failed, stopped; nanoseconds spent writing (metrics).
    saved: AtomicU64,
    failed: AtomicU64,
    stopped: AtomicU64,
    nanos: AtomicU64,
}

/// A saved file written.
pub(crate) struct Written {
    pub(crate) bytes: u64,
    pub(crate) ms: u64,
}

impl Saving {
    pub(crate) fn figures(&self) -> IndexSaveFigures {
        let unsaved = *self.unsaved.lock();
        IndexSaveFigures {
            saved: self.saved.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            stopped: self.stopped.load(Ordering::Relaxed),
            seconds: self.nanos.load(Ordering::Relaxed) as f64 / 1e9,
            unsaved_delta_bytes: unsaved.map_or(0, |u| u.delta_bytes),
            unsaved_rebuild: unsaved.is_some_and(|u| u.rebuild),
        }
    }

    pub(crate) fn file_holds(&self, header: &[u8]) -> bool {
        self.file.lock().as_deref() == Some(header)
    }

    /// Start-up found the file holding `file`'s state (`None`: no usable file). What
    /// the index it made holds beyond that is told next, through `applied` (each
    /// changeset caught up over) or `rebuilt`.
    pub(crate) fn started_with(&self, file: Option<Vec<u8>>) {
        *self.file.lock() = file;
        *self.unsaved.lock() = None;
    }

    /// A changeset of type `ty` and `bytes` (uncompressed) was applied.
    pub(crate) fn applied(&self, ty: ChangesetType, bytes: u64) {
        let mut change = Unsaved::at(Instant::now());
        match ty {
            ChangesetType::Delta => change.delta_bytes = bytes,
            // A checkpoint changes no item, but retention may retire the deltas a
            // catch-up would read: counted as a rebuild, to be safe.
            _ => change.rebuild = true,
        }
        self.put_back(Some(change));
    }

    /// The index was rebuilt (other dimensions, or at start-up).
    pub(crate) fn rebuilt(&self) {
        self.put_back(Some(Unsaved {
            rebuild: true,
            ..Unsaved::at(Instant::now())
        }));
    }

    /// What a save about to take its snapshot saves (it puts it back if it fails).
    pub(crate) fn take_unsaved(&self) -> Option<Unsaved> {
        self.unsaved.lock().take()
    }

    pub(crate) fn put_back(&self, taken: Option<Unsaved>) {
        let mut unsaved = self.unsaved.lock();
        *unsaved = match (*unsaved, taken) {
            (Some(a), Some(b)) => Some(a.and(b)),
            (a, b) => a.or(b),
        };
    }

    /// Whether a background save should start now.
    fn due(&self, now: Instant, p: &Policy) -> bool {
        !self.busy.load(Ordering::Acquire)
            && self.not_before.lock().is_none_or(|t| now >= t)
            && self.unsaved.lock().is_some_and(|u| u.due(now, p))
    }

    /// Stops a background save under way, and any that took its snapshot before now.
    pub(crate) fn cancel_background(&self) {
        self.cancelled
            .fetch_max(self.started.load(Ordering::Acquire), Ordering::AcqRel);
    }

    /// Writes `snap` (with the writer's `counts` taken with it) to `path`, unless `go_on`
    /// turns false meanwhile: a temp file, fsync, rename, the directory fsync'd, so that
    /// a crash never leaves a half-written file in its place. The file then holds
    /// `header`.
    pub(crate) fn write(
        &self,
        path: &Path,
        snap: Arc<Snapshot>,
        counts: &WriterCounts,
        header: Vec<u8>,
        encode: Encode,
        go_on: impl Fn() -> bool,
    ) -> Result<Written> {
        let _one_at_a_time = WRITING.lock();
        let started = Instant::now();
        let written = write_index_file(path, snap, counts, &header, encode, &go_on);
        self.nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match written {
            Ok(bytes) => {
                *self.file.lock() = Some(header);
                self.saved.fetch_add(1, Ordering::Relaxed);
                Ok(Written {
                    bytes,
                    ms: started.elapsed().as_millis() as u64,
                })
            }
            Err(e) => {
                let result = if go_on() { &self.failed } else { &self.stopped };
                result.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

/// Writes `snap` (with the writer's `counts` taken with it, the file's `header`) to
/// `path` through a temp file beside it, synced and renamed into place, the directory
/// synced: a crash never leaves a half-written file there. Fails once `go_on` turns
/// false. Returns the file's length.
pub(crate) fn write_index_file(
    path: &Path,
    snap: Arc<Snapshot>,
    counts: &WriterCounts,
    header: &[u8],
    encode: Encode,
    go_on: &impl Fn() -> bool,
) -> Result<u64> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let written = (|| -> Result<u64> {
        let file = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, StopWriter { inner: file, go_on });
        persist::save(snap, counts, header, &mut w, encode)?;
        w.flush()?;
        let file = w.into_inner().map_err(|e| e.into_error())?.inner;
        file.sync_all()?;
        let len = file.metadata()?.len();
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            discern_store::sync_dir(dir)?;
        }
        Ok(len)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Deletes the temp file a save that a crash cut short left beside `path` (up to the
/// index's size on disk), unless a save is writing it now.
pub(crate) fn remove_unfinished(path: &Path) {
    let _no_save_writing = WRITING.lock();
    let _ = std::fs::remove_file(path.with_extension("tmp"));
}

/// A writer that fails once `go_on` turns false (a save stopped).
struct StopWriter<'a, W, F> {
    inner: W,
    go_on: &'a F,
}

impl<W: std::io::Write, F: Fn() -> bool> std::io::Write for StopWriter<'_, W, F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !(self.go_on)() {
            return Err(std::io::Error::other("the save was stopped"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The save seeks back to put a streamed block's length before it.
impl<W: std::io::Seek, F> std::io::Seek for StopWriter<'_, W, F> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(to)
    }
}

/// Lowers the calling thread's scheduling priority, so that a save running beside
/// requests takes the cores they leave.
pub(crate) fn lower_this_threads_priority() {
    // SAFETY: gettid has no preconditions; setpriority with PRIO_PROCESS and a thread
    // id changes only that thread's nice value (Linux), and reads no memory of ours.
    let r = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10)
    };
    if r != 0 {
        tracing::debug!("could not lower the index save's priority");
    }
}

impl Engine {
    /// Starts a background save if one is due (called every few hundred ms).
    pub(crate) fn save_if_due(&self) {
        if !self.indexing || !self.queryable.load(Ordering::Acquire) {
            return;
        }
        let Some(policy) = Policy::of(&self.config) else {
            return;
        };
        if !self.saving.due(Instant::now(), &policy) {
            return;
        }
        // an apply under way: next time
        let Ok(guard) = self.writer.clone().try_lock_owned() else {
            return;
        };
        if self.saving.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let header = match self.saved_header(&self.dims_doc.load()) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "cannot save the index: the store's state is unreadable");
                *self.saving.not_before.lock() = Some(Instant::now() + RETRY_AFTER);
                self.saving.busy.store(false, Ordering::Release);
                return;
            }
        };
        let snap = self.snapshot.load_full();
        let counts = guard.index.counts();
        let taken = self.saving.take_unsaved();
        // (the header's first line)
        let state = String::from_utf8_lossy(header.split(|&b| b == b'\n').next().unwrap_or(&[]))
            .into_owned();
        let number = self.saving.started.fetch_add(1, Ordering::AcqRel) + 1;
        drop(guard);
        let saving = self.saving.clone();
        let path = self.saved_path();
        let spawned = std::thread::Builder::new()
            .name("index-save".into())
            .spawn(move || {
                process::thread_started();
                lower_this_threads_priority();
                let written =
                    saving.write(&path, snap, &counts, header, Encode::OnThisThread, || {
                        saving.cancelled.load(Ordering::Acquire) < number
                    });
                match written {
                    Ok(w) => tracing::info!(
                        mb = w.bytes >> 20,
                        ms = w.ms,
                        state,
                        "index saved in the background"
                    ),
                    Err(e) => {
                        saving.put_back(taken);
                        if saving.cancelled.load(Ordering::Acquire) >= number {
                            tracing::debug!("background index save stopped");
                        } else {
                            tracing::warn!(error = %e, "saving the index in the background failed");
                            *saving.not_before.lock() = Some(Instant::now() + RETRY_AFTER);
                        }
                    }
                }
                // the chunks applies replaced while the save held them, let go of as it
                // wrote them
                process::release_free_memory();
                saving.busy.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the index save");
            self.saving.put_back(taken);
            self.saving.busy.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{apply, set_item, wait_until};
    use crate::{Config, Populated};

    fn policy() -> Policy {
        Policy {
            idle: Duration::from_secs(60),
            longest: Duration::from_secs(600),
            worth: 100,
            at_once: 1000,
        }
    }

    /// A rebuild's worth of change is saved once applies pause (or at the latest
    /// `longest` after it); deltas only once they are worth it, and without a pause once
    /// they near the catch-up limit.
    #[test]
    fn when_a_save_is_due() {
        let p = policy();
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let u = |first: u64, last: u64, delta_bytes: u64, rebuild: bool| Unsaved {
            first: s(first),
            last: s(last),
            delta_bytes,
            rebuild,
        };
        // a rebuild: once applies pause, or at the latest
        assert!(!u(0, 0, 0, true).due(s(59), &p));
        assert!(u(0, 0, 0, true).due(s(60), &p));
        assert!(!u(0, 590, 0, true).due(s(599), &p));
        assert!(u(0, 590, 0, true).due(s(600), &p));
        // deltas not worth a save: never
        assert!(!u(0, 0, 99, false).due(s(10_000), &p));
        // worth it: as a rebuild is
        assert!(!u(0, 0, 100, false).due(s(59), &p));
        assert!(u(0, 0, 100, false).due(s(60), &p));
        assert!(u(0, 599, 100, false).due(s(600), &p));
        // near the limit: at once
        assert!(u(0, 0, 1000, false).due(s(0), &p));
        // changes together: the earliest first, the latest last, bytes added
        let both = u(5, 10, 600, false).and(u(20, 30, 400, true));
        assert_eq!(both, u(5, 30, 1000, true));
        let saving = Saving::default();
        saving.applied(ChangesetType::Delta, 60);
        saving.applied(ChangesetType::Delta, 50);
        let f = saving.figures();
        assert_eq!((f.unsaved_delta_bytes, f.unsaved_rebuild), (110, false));
        let taken = saving.take_unsaved().unwrap();
        assert_eq!((taken.delta_bytes, taken.rebuild), (110, false));
        assert!(saving.take_unsaved().is_none());
        saving.applied(ChangesetType::Snapshot, 5);
        saving.put_back(Some(taken));
        let back = saving.take_unsaved().unwrap();
        assert_eq!((back.delta_bytes, back.rebuild), (110, true));
        for ty in [
            ChangesetType::Checkpoint,
            ChangesetType::Bulk,
            ChangesetType::Full,
        ] {
            saving.applied(ty, 0);
            assert!(saving.take_unsaved().unwrap().rebuild, "{ty:?}");
        }
    }

    /// A save stopped (by the save at shutdown) leaves neither its file nor a temp
    /// file, and the file it would have replaced as it was; later saves go on.
    #[test]
    fn a_stopped_save_leaves_the_file_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let e = crate::tests::populated_with_number_and_text(d.path());
        apply(
            &e,
            &format!(
                "<changeset>{}</changeset>",
                set_item("a", "t", "<string>x y</string>")
            ),
        );
        let path = d.path().join("index.saved");
        let snap = e.snapshot();
        let counts = e.lock_writer_blocking().index.counts();
        let saving = Saving::default();
        saving
            .write(
                &path,
                snap.clone(),
                &counts,
                b"one".to_vec(),
                Encode::OnThisThread,
                || true,
            )
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        assert!(saving.file_holds(b"one"));
        // the third one started; the shutdown stops it and those before
        saving.started.store(3, Ordering::Release);
        saving.cancel_background();
        let cancelled = &saving.cancelled;
        let go_on = |n: u64| move || cancelled.load(Ordering::Acquire) < n;
        let stopped = saving.write(
            &path,
            snap.clone(),
            &counts,
            b"two".to_vec(),
            Encode::OnThisThread,
            go_on(3),
        );
        assert!(stopped.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(!path.with_extension("tmp").exists());
        assert!(saving.file_holds(b"one"));
        saving
            .write(
                &path,
                snap.clone(),
                &counts,
                b"two".to_vec(),
                Encode::OnThisThread,
                go_on(4),
            )
            .unwrap();
        assert!(saving.file_holds(b"two"));
        assert_ne!(std::fs::read(&path).unwrap(), before);
        let f = saving.figures();
        assert_eq!((f.saved, f.failed, f.stopped), (2, 0, 1));
        // a write that fails (no such directory) counts as failed
        let nowhere = d.path().join("gone").join("index.saved");
        let failed = saving.write(
            &nowhere,
            snap.clone(),
            &counts,
            b"3".to_vec(),
            Encode::OnThisThread,
            || true,
        );
        assert!(failed.is_err());
        assert!(saving.file_holds(b"two"));
        assert_eq!(saving.figures().failed, 1);
    }

    /// The engine saves its index in the background once applies pause, when a crash
    /// would otherwise cost a rebuild: start-up then loads it, whatever the last
    /// shutdown saved. A small delta is not worth a save: start-up catches up over it.
    #[test]
    fn the_index_is_saved_once_applies_pause() {
        let d = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: d.path().to_path_buf(),
            index_save_idle_ms: 100,
            ..Config::default()
        };
        let e = crate::Engine::open(config, true).unwrap();
        let mut g = e.lock_writer_blocking();
        let dims = b"<dimensions><dimension id='n' type='integer'/></dimensions>";
        e.set_dimensions(&mut g, dims).unwrap();
        assert_eq!(e.populate(&mut g).unwrap(), Populated::Rebuilt);
        drop(g);
        let current = |e: &crate::Engine| {
            let header = e.saved_header(&e.dimensions_doc()).unwrap();
            e.saving.file_holds(&header) && !e.saving.busy.load(Ordering::Acquire)
        };
        // the rebuild at start-up
        wait_until("the index built at start-up was not saved", || current(&e));
        let items: String = (0..300)
            .map(|i| set_item(&format!("i{i}"), "n", &format!("<int>{i}</int>")))
            .collect();
        let mut g = e.lock_writer_blocking();
        e.apply(
            &mut g,
            ChangesetType::Snapshot,
            format!("<changeset>{items}</changeset>").as_bytes(),
        )
        .unwrap();
        drop(g);
        assert!(!current(&e));
        wait_until("the snapshot's index was not saved", || current(&e));
        // (a restart: the file is read, nothing written first)
        let mut g = e.lock_writer_blocking();
        assert_eq!(e.populate(&mut g).unwrap(), Populated::Loaded);
        assert_eq!(e.snapshot().len(), 300);
        drop(g);
        apply(
            &e,
            &format!(
                "<changeset>{}</changeset>",
                set_item("late", "n", "<int>7</int>")
            ),
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(!current(&e), "a small delta was saved");
        let mut g = e.lock_writer_blocking();
        assert_eq!(
            e.populate(&mut g).unwrap(),
            Populated::CaughtUp {
                changesets: 1,
                items: 1
            }
        );
        assert_eq!(e.snapshot().len(), 301);
    }
}
