//! Reading ahead the item store's pages an apply is about to read and write.
//!
//! A write transaction reads every page on the path from the root to an item's leaf.
//! On a store larger than the memory it stays in (the pages of a million-item store
//! are mostly cold), a 1,000-item delta reads ~1,000 leaves that are not in memory, one
//! after the other on the apply's single store thread. Here, as the parser hands the
//! actions over, a few threads read the same items through read transactions of the
//! last commit (the tree the write transaction starts from), several at once, so that
//! the pages are in memory — redb's cache and the OS's — when the store thread reaches
//! them. Best effort: a read ahead that fails or falls behind only costs the read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use discern_changeset::Action;
use redb::Database;

use crate::ITEMS;

/// Threads reading ahead: enough to keep several reads in flight for one store thread.
const THREADS: usize = 4;

/// Batches of ids waiting to be read ahead. When they are this many, the parser does not
/// wait: the store thread reads those items itself.
const QUEUE: usize = 32;

/// One apply's reading ahead.
pub(crate) struct Prefetch {
    /// Set once the store thread has applied every action: what is not read by then is
    /// not needed any more.
    done: AtomicBool,
    /// Items read ahead.
    read: AtomicU64,
}

/// Takes the ids of the actions the parser hands over.
pub(crate) struct Reader {
    tx: SyncSender<Vec<String>>,
}

impl Prefetch {
    pub(crate) fn new() -> Prefetch {
        Prefetch {
            done: AtomicBool::new(false),
            read: AtomicU64::new(0),
        }
    }

    /// Starts the threads (within `scope`, so that they end with the apply); `None` if
    /// none could start.
    pub(crate) fn start<'scope>(
        &'scope self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        db: &'scope Database,
    ) -> Option<Reader> {
        let (tx, rx) = sync_channel::<Vec<String>>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for _ in 0..THREADS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name("store-prefetch".into())
                .spawn_scoped(scope, move || self.read_ahead(db, &rx));
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(Reader { tx })
    }

    /// The store thread is done: the threads stop at their next item.
    pub(crate) fn stop(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    /// Items read ahead so far.
    pub(crate) fn items_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    fn read_ahead(&self, db: &Database, rx: &Mutex<Receiver<Vec<String>>>) {
        let Ok(read) = db.begin_read() else { return };
        let Ok(items) = read.open_table(ITEMS) else {
            return;
        };
        loop {
            let next = match rx.lock() {
                Ok(rx) => rx.recv(),
                Err(_) => return,
            };
            // (the parser finished and every batch is taken)
            let Ok(ids) = next else { return };
            for id in ids {
                if self.done.load(Ordering::Relaxed) {
                    return;
                }
                // only the pages matter: what the read found, or failed to, does not
                let _ = items.get(id.as_str());
                self.read.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Reader {
    /// Queues a batch of actions' items to be read ahead, unless the queue is full.
    pub(crate) fn read(&self, batch: &[Action]) {
        let ids = batch.iter().map(|a| a.id().to_string()).collect();
        let _ = self.tx.try_send(ids);
    }

    /// A reader queueing into `tx` (tests: what an apply hands over).
    #[cfg(test)]
    pub(crate) fn queueing_into(tx: SyncSender<Vec<String>>) -> Reader {
        Reader { tx }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_of(n: usize) -> (tempfile::TempDir, Database) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("items.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut items = txn.open_table(ITEMS).unwrap();
            for i in 0..n {
                items
                    .insert(format!("i{i:05}").as_str(), b"{}".as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
        (dir, db)
    }

    fn removals(n: usize) -> Vec<Action> {
        (0..n)
            .map(|i| Action::Remove {
                id: format!("i{i:05}"),
            })
            .collect()
    }

    /// Hands 300 of a 500-item store's items to `ahead` in batches of 64 and waits for
    /// its threads to end.
    fn hand_over(ahead: &Prefetch) {
        let (_dir, db) = store_of(500);
        std::thread::scope(|scope| {
            let reader = ahead.start(scope, &db).expect("read-ahead threads");
            for batch in removals(300).chunks(64) {
                reader.read(batch);
            }
            // dropping the reader ends the threads once the queue is read
        });
    }

    #[test]
    fn reads_every_item_handed_over() {
        let ahead = Prefetch::new();
        hand_over(&ahead);
        assert_eq!(ahead.items_read(), 300);
    }

    #[test]
    fn reads_nothing_once_the_store_thread_is_done() {
        let ahead = Prefetch::new();
        ahead.stop();
        hand_over(&ahead);
        assert_eq!(ahead.items_read(), 0);
    }

    #[test]
    fn a_full_queue_never_holds_the_parser_up() {
        // no thread takes from this queue: a parser that waited would wait forever
        let (tx, _rx) = sync_channel(1);
        let reader = Reader { tx };
        let batch = removals(64);
        for _ in 0..3 {
            reader.read(&batch);
        }
    }
}
