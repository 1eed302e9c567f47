//! Reading a few named items' pages several at once: the items of a query's page, those
//! `/ws/items` names, or those an apply is about to change.
//!
//! A query page's properties are read from the item store one record after the other.
//! On a store larger than what stays in memory (the pages of a million-item store are
//! mostly cold: the machine pages out file pages it has not touched lately), each of a
//! page's 20 records is a leaf not in memory, read from the disk in 60–400 µs: a page of
//! results took 1.2–3.4 ms more with its properties than without them. Here the ids are
//! handed to a few long-lived threads that read them through the caller's own read
//! transaction, several reads in flight at once, while the caller reads them in order:
//! its reads then find the pages in memory, or already on their way. The caller never
//! waits for these threads.
//!
//! A page's reads (`Reads`) hand their ids over only once one of them came from the
//! disk. When the store's pages are in the OS's memory (a store that fits in it, as the
//! benchmark's does), a read takes 1–15 µs and waking up to 16 reader threads for a page
//! costs more than it saves: on two cores they run ahead of the caller, which then
//! waits its turn — a first pass of text requests after a restart took 0.26–2.2 ms at
//! the median to write a page's properties with the reader threads, 0.23–0.33 without.
//!
//! An apply's write transaction reads every page on the path from the root to each
//! item's leaf, on its one store thread. As the parser hands a batch of actions over,
//! it reads the first one's item through a read transaction of the last commit (the
//! tree the write transaction starts from); if that came from the disk, the rest come
//! here, so that the leaves are in memory — redb's cache and the OS's — when the store
//! thread reaches them (`ReadAhead::start_on_if_from_disk`).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use discern_model::{decode_record, Record, Result};
use redb::ReadOnlyTable;

use crate::db_err;

pub(crate) type ItemsTable = ReadOnlyTable<&'static str, &'static [u8]>;

/// Reader threads: enough reads in flight for most of a page of 20 at once (8 left a
/// cold page 50 µs slower at the median, 20 did no better than 16).
/// A query's reads mostly wait on the disk; an apply's copy its pages (it keeps at
/// most four of them busy per batch, `apply::READ_AHEAD_THREADS`).
const THREADS: usize = 16;

/// Jobs waiting for a reader thread. When they are this many, a caller reads on its own.
const QUEUE: usize = 64;

thread_local! {
    /// Ids this thread has handed to the reader threads.
    static HANDED_OVER: Cell<u64> = const { Cell::new(0) };
}

/// Ids the calling thread has handed to the reader threads so far: which of its reads
/// were read ahead (tests and diagnostics).
pub fn handed_over_here() -> u64 {
    HANDED_OVER.with(Cell::get)
}

/// A store's reads under way by the reader threads, each holding a read transaction
/// (which keeps the store's file open and locked): the store waits for none to be left
/// when it closes (`wait_for_reads`).
pub(crate) type ReadsUnderWay = Arc<AtomicUsize>;

/// The items one caller is about to read.
struct Job {
    /// Lent while the caller holds its `ReadAhead`: a read transaction keeps the item
    /// store's file open and locked, and a store closed and opened again at once (a
    /// restart in the same process) must not find it still held by a reader thread.
    table: Mutex<Option<Arc<ItemsTable>>>,
    /// Of the store the table is of.
    reading: ReadsUnderWay,
    ids: Vec<String>,
    /// The next id a reader thread takes.
    next: AtomicUsize,
    /// Reader threads the job was handed to, and how many it wants at most.
    handed: AtomicUsize,
    wanted: usize,
    /// Set when the caller is done: what is not read by then is not needed.
    done: AtomicBool,
}

/// The reader threads, started on first use; `None` if none could start.
fn pool() -> Option<&'static SyncSender<Arc<Job>>> {
    static POOL: OnceLock<Option<SyncSender<Arc<Job>>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = sync_channel::<Arc<Job>>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for _ in 0..THREADS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name("store-pages".into())
                .spawn(move || serve(&rx));
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(tx)
    })
    .as_ref()
}

fn serve(rx: &Mutex<Receiver<Arc<Job>>>) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if wants_one_more(&job) {
            if let Some(pool) = pool() {
                let _ = pool.try_send(job.clone());
            }
        }
        read(&job);
    }
}

/// Whether the thread that took `job` hands it on to one more before it reads: each does
/// until `wanted` threads have it, so that none is woken for a caller that is already
/// done (its pages were in memory) or for ids all taken.
fn wants_one_more(job: &Job) -> bool {
    !job.done.load(Ordering::Relaxed)
        && job.next.load(Ordering::Relaxed) < job.ids.len()
        && job.handed.fetch_add(1, Ordering::Relaxed) < job.wanted
}

/// Reads the job's items until every one is taken or the caller is done.
fn read(job: &Job) {
    loop {
        // (counted before `done` is checked: a store that closes waits for every read
        // counted to end, and once its callers have set `done` none starts)
        job.reading.fetch_add(1, Ordering::SeqCst);
        let table = if job.done.load(Ordering::SeqCst) {
            None
        } else {
            job.table.lock().ok().and_then(|t| t.clone())
        };
        let more = table.is_some_and(|table| {
            let i = job.next.fetch_add(1, Ordering::Relaxed);
            let Some(id) = job.ids.get(i) else {
                return false;
            };
            // only the pages matter: what the read found, or failed to, does not
            let _ = table.get(id.as_str());
            true
        });
        job.reading.fetch_sub(1, Ordering::SeqCst);
        if !more {
            return;
        }
    }
}

/// A read slower than this came from the disk, not from memory (`Reads`): reads of
/// pages in the OS's memory took 1–15 µs here (99% under 36 µs), reads from the disk
/// 60–400 µs (the median 155 µs).
pub const FROM_DISK: Duration = Duration::from_micros(100);

/// The reads of a few named items, in the order named (a page of results, the ids of
/// `/ws/items`), through one read transaction. The items not yet read are read ahead
/// once a read takes `from_disk` or longer — once the pages turn out not to be in memory.
pub struct Reads<'r> {
    items: &'r Arc<ItemsTable>,
    reading: &'r ReadsUnderWay,
    ids: Vec<String>,
    /// How many of `ids` have been read, in order.
    done: usize,
    from_disk: Duration,
    ahead: Option<ReadAhead>,
}

impl<'r> Reads<'r> {
    pub(crate) fn new(
        items: &'r Arc<ItemsTable>,
        reading: &'r ReadsUnderWay,
        ids: Vec<String>,
        from_disk: Duration,
    ) -> Reads<'r> {
        Reads {
            items,
            reading,
            ids,
            done: 0,
            from_disk,
            ahead: None,
        }
    }

    /// Calls `f` with the item's encoded record (`ItemReader::with_raw`). An id out of
    /// the order named is read too, but only the named ids after the last one read in
    /// order are read ahead.
    pub fn with_raw<T>(&mut self, id: &str, f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        let started = Instant::now();
        let got = self.items.get(id).map_err(db_err)?;
        let took = started.elapsed();
        if self.ids.get(self.done).is_some_and(|next| next == id) {
            self.done += 1;
        }
        if self.ahead.is_none() && took >= self.from_disk && self.done < self.ids.len() {
            let rest = self.ids[self.done..].to_vec();
            self.ahead = Some(ReadAhead::start(self.items, rest, self.reading));
        }
        Ok(got.map(|v| f(v.value())))
    }

    /// The item's record (`ItemReader::get`), read as `with_raw` reads it.
    pub fn get(&mut self, id: &str) -> Result<Option<Record>> {
        self.with_raw(id, |raw| decode_record(raw).map_err(db_err))?
            .transpose()
    }

    /// Whether the items not yet read are being read ahead.
    #[cfg(test)]
    fn reading_ahead(&self) -> bool {
        self.ahead.is_some()
    }
}

/// Items being read ahead for a caller; dropping it tells the reader threads the caller
/// is done.
pub struct ReadAhead {
    job: Option<Arc<Job>>,
}

impl ReadAhead {
    /// Hands `ids` to a reader thread, which hands them on (never waiting for a queue
    /// with room); a single id is left for the caller to read.
    pub(crate) fn start(
        table: &Arc<ItemsTable>,
        ids: Vec<String>,
        reading: &ReadsUnderWay,
    ) -> ReadAhead {
        Self::start_on(table, ids, THREADS, reading)
    }

    /// `start`, read by at most `threads` reader threads.
    pub(crate) fn start_on(
        table: &Arc<ItemsTable>,
        ids: Vec<String>,
        threads: usize,
        reading: &ReadsUnderWay,
    ) -> ReadAhead {
        let Some(pool) = pool().filter(|_| ids.len() > 1) else {
            return ReadAhead { job: None };
        };
        let job = Arc::new(Job {
            table: Mutex::new(Some(table.clone())),
            reading: reading.clone(),
            next: AtomicUsize::new(0),
            handed: AtomicUsize::new(1),
            wanted: ids.len().min(threads),
            done: AtomicBool::new(false),
            ids,
        });
        if pool.try_send(job.clone()).is_ok() {
            HANDED_OVER.with(|n| n.set(n.get() + job.ids.len() as u64));
        }
        ReadAhead { job: Some(job) }
    }

    /// `start_on`, if the first of `ids`, read here first, came from the disk (took
    /// `from_disk` or longer); else nothing is read ahead. An apply's batches are read
    /// ahead through the last commit while its store thread reads them again through
    /// its write transaction: when the pages are in the OS's memory, that second
    /// descent and the reader threads' wake-ups cost more than they save (ten 1,000-item
    /// deltas after a 1M bulk load, four alternated pairs: 204–229 ticks of CPU without
    /// read-ahead, 184–264 with it; DECISIONS, session 74).
    pub(crate) fn start_on_if_from_disk(
        table: &Arc<ItemsTable>,
        mut ids: Vec<String>,
        threads: usize,
        reading: &ReadsUnderWay,
        from_disk: Duration,
    ) -> ReadAhead {
        if ids.is_empty() {
            return ReadAhead { job: None };
        }
        let first = ids.remove(0);
        let started = Instant::now();
        let _ = table.get(first.as_str());
        if started.elapsed() < from_disk {
            return ReadAhead { job: None };
        }
        Self::start_on(table, ids, threads, reading)
    }

    /// Ids the reader threads have taken so far.
    pub(crate) fn taken(&self) -> usize {
        self.job
            .as_ref()
            .map_or(0, |j| j.next.load(Ordering::Relaxed).min(j.ids.len()))
    }
}

impl Drop for ReadAhead {
    /// Stops the reads and takes the table back from the job: a reader thread that
    /// still holds the job then holds the item store open only for a read under way
    /// (`wait_for_reads`), not for as long as it keeps the job. (The caller does not
    /// wait for that read, on a request's way out: the store waits when it closes.)
    fn drop(&mut self) {
        if let Some(job) = &self.job {
            job.done.store(true, Ordering::SeqCst);
            if let Ok(mut table) = job.table.lock() {
                table.take();
            }
        }
    }
}

/// Waits until no reader thread reads through a table lent with `reading` (each read
/// a page in memory, or one from the disk). Once every `ReadAhead` made with it is
/// dropped, none starts again.
pub(crate) fn wait_for_reads(reading: &AtomicUsize) {
    while reading.load(Ordering::SeqCst) > 0 {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ITEMS;
    use redb::{ReadableDatabase, ReadableTableMetadata};

    fn table_of(n: usize) -> (tempfile::TempDir, Arc<ItemsTable>) {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("db")).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(ITEMS).unwrap();
            for i in 0..n {
                t.insert(format!("i{i}").as_str(), &b"record"[..]).unwrap();
            }
        }
        w.commit().unwrap();
        let table = db.begin_read().unwrap().open_table(ITEMS).unwrap();
        assert_eq!(table.len().unwrap(), n as u64);
        (dir, Arc::new(table))
    }

    #[test]
    fn every_id_is_taken_by_the_reader_threads() {
        let (_dir, table) = table_of(50);
        let ids: Vec<String> = (0..50).map(|i| format!("i{i}")).collect();
        let before = handed_over_here();
        let ahead = ReadAhead::start(&table, ids, &Arc::default());
        assert_eq!(handed_over_here() - before, 50);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while ahead.taken() < 50 {
            assert!(
                std::time::Instant::now() < deadline,
                "taken: {}",
                ahead.taken()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn nothing_is_read_once_the_caller_is_done() {
        let (_dir, table) = table_of(3);
        let job = Job {
            table: Mutex::new(Some(table)),
            reading: Arc::default(),
            ids: vec!["i0".into(), "i1".into(), "i2".into()],
            next: AtomicUsize::new(0),
            handed: AtomicUsize::new(1),
            wanted: 3,
            done: AtomicBool::new(true),
        };
        read(&job);
        assert_eq!(job.next.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_job_goes_to_no_more_threads_than_it_wants() {
        let (_dir, table) = table_of(3);
        for wanted in [1, 2, 4] {
            let job = Job {
                table: Mutex::new(Some(table.clone())),
                reading: Arc::default(),
                ids: vec!["i0".into(), "i1".into(), "i2".into()],
                next: AtomicUsize::new(0),
                handed: AtomicUsize::new(1),
                wanted,
                done: AtomicBool::new(false),
            };
            // the thread it was sent to, then each one it is handed on to
            let handed_on = (0..8).take_while(|_| wants_one_more(&job)).count();
            assert_eq!(handed_on, wanted - 1, "wanted {wanted}");
        }
    }

    /// A reader thread may still hold a job after its caller is done with it (queued,
    /// or between two jobs): the job must not keep the item store open then.
    #[test]
    fn a_job_its_caller_dropped_holds_no_table() {
        let (_dir, table) = table_of(50);
        let ids: Vec<String> = (0..50).map(|i| format!("i{i}")).collect();
        let reading = Arc::default();
        let ahead = ReadAhead::start(&table, ids, &reading);
        let held_by_a_reader = ahead.job.clone().expect("a job for 50 ids");
        drop(ahead);
        wait_for_reads(&reading);
        assert_eq!(Arc::strong_count(&table), 1, "the table is still lent");
        // and a reader that takes the job now reads nothing
        let next = held_by_a_reader.next.load(Ordering::SeqCst);
        read(&held_by_a_reader);
        assert_eq!(held_by_a_reader.next.load(Ordering::SeqCst), next);
    }

    /// Reads hand the ids after the one read over only once a read is as slow as a
    /// read from the disk, and only once.
    #[test]
    fn reads_are_read_ahead_after_a_slow_one() {
        let (_dir, table) = table_of(6);
        let reading = ReadsUnderWay::default();
        let ids = || (0..6).map(|i| format!("i{i}")).collect::<Vec<_>>();
        let record = |r: &mut Reads, id: &str| r.with_raw(id, <[u8]>::to_vec).unwrap();

        // from memory: nothing read ahead, every record read
        let before = handed_over_here();
        let mut fast = Reads::new(&table, &reading, ids(), Duration::from_secs(3600));
        for id in ids() {
            assert_eq!(record(&mut fast, &id).as_deref(), Some(&b"record"[..]));
        }
        assert!(!fast.reading_ahead());
        assert_eq!(handed_over_here(), before);

        // every read "from the disk": the five named after the first, handed over after
        // the first read; a later read, named or not, hands nothing more over
        let mut slow = Reads::new(&table, &reading, ids(), Duration::ZERO);
        assert_eq!(record(&mut slow, "i0").as_deref(), Some(&b"record"[..]));
        assert!(slow.reading_ahead());
        assert_eq!(handed_over_here() - before, 5);
        assert_eq!(record(&mut slow, "i9"), None);
        assert_eq!(record(&mut slow, "i1").as_deref(), Some(&b"record"[..]));
        assert_eq!(handed_over_here() - before, 5, "read ahead once");
    }

    /// A batch is read ahead, but for the first id, only if reading that one was as
    /// slow as a read from the disk.
    #[test]
    fn a_batch_is_read_ahead_if_its_first_read_was_slow() {
        let (_dir, table) = table_of(5);
        let reading = ReadsUnderWay::default();
        let ids = || (0..5).map(|i| format!("i{i}")).collect::<Vec<_>>();
        let before = handed_over_here();
        let fast = ReadAhead::start_on_if_from_disk(&table, ids(), 4, &reading, Duration::MAX);
        assert!(fast.job.is_none());
        assert_eq!(handed_over_here(), before);
        let slow = ReadAhead::start_on_if_from_disk(&table, ids(), 4, &reading, Duration::ZERO);
        let job = slow.job.as_ref().expect("read ahead");
        assert_eq!(job.ids, ids()[1..]);
        assert_eq!(job.wanted, 4);
        assert_eq!(handed_over_here() - before, 4);
        let none =
            ReadAhead::start_on_if_from_disk(&table, Vec::new(), 4, &reading, Duration::ZERO);
        assert!(none.job.is_none());
    }

    #[test]
    fn one_id_is_read_by_the_caller_alone() {
        let (_dir, table) = table_of(1);
        let before = handed_over_here();
        let ahead = ReadAhead::start(&table, vec!["i0".into()], &Arc::default());
        assert!(ahead.job.is_none());
        assert_eq!(handed_over_here(), before);
    }
}
