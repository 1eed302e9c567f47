//! The engine: owns the store and the current index snapshot, runs the apply pipeline
//! (one writer at a time, in arrival order), rebuilds the index when the dimensions
//! change, and answers queries from immutable snapshots.

pub mod alloc;
mod apply;
mod background_save;
mod config;
pub mod didyoumean;
pub mod feed;
mod highlight;
pub mod image;
pub mod metrics;
mod populate;
pub mod process;
mod respond;
mod saved;
pub mod stats;

pub use config::Config;
pub use discern_store::ItemReader;
pub use respond::{export_line_meta, query_response, QueryResponse};
pub use saved::Populated;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use discern_dimensions::Dimensions;
use discern_index::{IndexWriter, Snapshot};
use discern_model::{Error, Record, Result};
use discern_store::{ChangesetMeta, Store};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The item store is synced (`Store::sync`: one durable commit for every apply since
/// the last, the commit journal emptied) once applies pause this long, or at the latest
/// when the oldest unsynced apply is this old: an apply waits for a sync in progress,
/// so syncs are kept off a burst of applies, and the journal replayed after a crash
/// stays short.
const SYNC_IDLE: std::time::Duration = std::time::Duration::from_millis(200);
const SYNC_LONGEST: std::time::Duration = std::time::Duration::from_secs(2);

/// Syncs the engine's item store when due, and starts a background index save when one
/// is due, until the engine is gone. (It holds the engine while it checks or syncs, so
/// the last `Arc` may be dropped here: code that drops an engine and opens its data dir
/// again in the same process must wait for the store to close.)
fn spawn_store_sync(engine: std::sync::Weak<Engine>) -> Result<()> {
    std::thread::Builder::new()
        .name("store-sync".into())
        .spawn(move || loop {
            std::thread::sleep(SYNC_IDLE / 4);
            let Some(engine) = engine.upgrade() else {
                return;
            };
            if engine.store.sync_due(SYNC_IDLE, SYNC_LONGEST) {
                let started = std::time::Instant::now();
                match engine.store.sync() {
                    Ok(()) => tracing::debug!(
                        us = started.elapsed().as_micros() as u64,
                        "item store synced"
                    ),
                    Err(e) => tracing::warn!(error = %e, "syncing the item store failed"),
                }
            }
            engine.save_if_due();
        })?;
    Ok(())
}

pub use discern_store;

/// Counters the statistics and metrics read (SPEC §4 counters).
#[derive(Default)]
pub struct Counters {
    pub applied: AtomicU64,
    pub created: AtomicU64,
    pub modified: AtomicU64,
    pub deleted: AtomicU64,
    /// Uncompressed bytes stored per changeset type, indexed by `ChangesetType as usize`.
    pub changeset_bytes: [AtomicU64; 6],
    pub checkpoint_nanos: AtomicU64,
}

/// Gauges refreshed every 30 s (SPEC §12): walking the index for its size is not free.
#[derive(Default)]
pub struct SlowGauges {
    pub dimensions: AtomicU64,
    pub items: AtomicU64,
    pub index_bytes: AtomicU64,
}

/// What only the single writer touches.
pub struct WriterState {
    index: IndexWriter,
}

pub type WriterGuard = OwnedMutexGuard<WriterState>;

pub struct Engine {
    pub config: Config,
    store: Store,
    snapshot: ArcSwap<Snapshot>,
    /// The current dimensions document, byte for byte (may be ahead of the snapshot
    /// while a rebuild runs).
    dims_doc: ArcSwap<Vec<u8>>,
    writer: Arc<Mutex<WriterState>>,
    queryable: AtomicBool,
    pub counters: Counters,
    pub stats: stats::Statistics,
    pub http: Arc<metrics::HttpMetrics>,
    pub gauges: SlowGauges,
    /// Values the current index could not read (`item.errors`).
    item_errors: AtomicU64,
    /// Whether applies maintain the in-memory index (off for offline `load`).
    indexing: bool,
    merging_terms: AtomicBool,
    /// The saved index this process knows of, and what changed since.
    saving: Arc<background_save::Saving>,
    pub feed: feed::FeedStatus,
    /// The index of a follower's bootstrap image, until `populate` takes it.
    preloaded: parking_lot::Mutex<Option<image::Preloaded>>,
    /// Odd from just before an apply commits the item store until its snapshot is
    /// current (see `view`).
    commit_seq: AtomicU64,
    /// This engine, for background work that outlives a borrow.
    me: std::sync::Weak<Engine>,
}

/// A snapshot and the item store as of that snapshot (`Engine::view`).
pub struct View {
    pub snap: Arc<Snapshot>,
    pub items: discern_store::ItemReader,
}

pub const EMPTY_DIMENSIONS: &[u8] = b"<dimensions/>";

impl Engine {
    /// Opens the data dir. The index is empty until `populate` has run.
    pub fn open(config: Config, indexing: bool) -> Result<Arc<Engine>> {
        let store = Store::open(
            &config.data_dir,
            config.retain_snapshots,
            config.store_cache_bytes,
        )?;
        let doc = store
            .read_dimensions()?
            .unwrap_or_else(|| EMPTY_DIMENSIONS.to_vec());
        let dims = Dimensions::parse(&doc)
            .map_err(|e| Error::Internal(format!("stored dimensions.xml is invalid: {e}")))?;
        // a new follower of an engine answers queries only once it has caught up
        let empty = store.list(true)?.is_empty();
        let feed_status = feed::FeedStatus::new(
            !(empty && config.feed.as_deref().is_some_and(feed::names_an_engine)),
        );
        let engine = Arc::new_cyclic(|me| Engine {
            config,
            store,
            snapshot: ArcSwap::from_pointee(Snapshot::empty(Arc::new(dims))),
            dims_doc: ArcSwap::from_pointee(doc),
            writer: Arc::new(Mutex::new(WriterState {
                index: IndexWriter::new(),
            })),
            queryable: AtomicBool::new(false),
            counters: Counters::default(),
            stats: stats::Statistics::default(),
            http: Arc::default(),
            gauges: SlowGauges::default(),
            item_errors: AtomicU64::new(0),
            indexing,
            merging_terms: AtomicBool::new(false),
            saving: Arc::default(),
            feed: feed_status,
            preloaded: parking_lot::Mutex::new(None),
            commit_seq: AtomicU64::new(0),
            me: me.clone(),
        });
        engine.remove_unfinished_images();
        spawn_store_sync(Arc::downgrade(&engine))?;
        Ok(engine)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The current snapshot and a reader of the item store in the same state, so that
    /// the sources a response shows are those of the items it lists (an apply may
    /// commit the store a moment before it publishes its snapshot). Blocking: waits
    /// out such a moment.
    pub fn view(&self) -> Result<View> {
        loop {
            let before = self.commit_seq.load(Ordering::SeqCst);
            if before.is_multiple_of(2) {
                let snap = self.snapshot.load_full();
                let items = self.store.reader()?;
                if self.commit_seq.load(Ordering::SeqCst) == before {
                    return Ok(View { snap, items });
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    pub fn dimensions_doc(&self) -> Arc<Vec<u8>> {
        self.dims_doc.load_full()
    }

    pub fn is_queryable(&self) -> bool {
        self.queryable.load(Ordering::Acquire) && self.feed.synced.load(Ordering::Acquire)
    }

    /// Items indexed so far may be queried (start-up with `queryable-while-replaying`).
    pub fn queries_allowed(&self) -> bool {
        self.is_queryable() || self.config.queryable_while_replaying
    }

    /// Waits for the writer (FIFO: applies happen in arrival order).
    pub async fn lock_writer(&self) -> WriterGuard {
        self.writer.clone().lock_owned().await
    }

    pub fn lock_writer_blocking(&self) -> WriterGuard {
        self.writer.clone().blocking_lock_owned()
    }

    pub fn checkpoint(&self, guard: &mut WriterGuard) -> Result<ChangesetMeta> {
        let started = std::time::Instant::now();
        let meta = self.store.checkpoint()?;
        let took = started.elapsed();
        self.stats
            .record("checkpoint", &[("time", took.as_millis() as f64)]);
        self.counters
            .checkpoint_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.record_stored(&meta);
        self.start_image(guard, &meta);
        Ok(meta)
    }

    fn record_stored(&self, meta: &ChangesetMeta) {
        if self.indexing {
            self.saving.applied(meta.ty, meta.length);
        }
        self.counters.changeset_bytes[meta.ty as usize].fetch_add(meta.length, Ordering::Relaxed);
        let family = format!("changeset.{}", meta.ty.as_str());
        self.stats.record(&family, &[("size", meta.length as f64)]);
        self.stats
            .add_sum(&family, "compressed", meta.raw_length as f64);
    }

    pub fn item(&self, id: &str) -> Result<Option<Record>> {
        self.store.get(id)
    }

    /// The records of `ids`, in order, as of one commit; read several at once once
    /// their pages turn out not to be in memory (`ItemReader::reads`).
    pub fn items(&self, ids: &[String]) -> Result<Vec<Option<Record>>> {
        let reader = self.store.reader()?;
        let mut reads = reader.reads(ids.iter().map(String::as_str));
        ids.iter().map(|id| reads.get(id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use discern_store::ChangesetType;

    /// An engine opened on `dir`, not yet populated.
    pub(crate) fn open(dir: &std::path::Path) -> Arc<Engine> {
        let config = Config {
            data_dir: dir.to_path_buf(),
            ..Config::default()
        };
        Engine::open(config, true).unwrap()
    }

    pub(crate) fn engine(dir: &std::path::Path) -> Arc<Engine> {
        let e = open(dir);
        e.populate(&mut e.lock_writer_blocking()).unwrap();
        e
    }

    /// An engine opened on `dir` with the dimensions document `dims`, not yet populated.
    pub(crate) fn engine_with(dir: &std::path::Path, dims: &[u8]) -> (Arc<Engine>, WriterGuard) {
        let e = open(dir);
        let mut g = e.lock_writer_blocking();
        e.set_dimensions(&mut g, dims).unwrap();
        (e, g)
    }

    pub(crate) fn apply(e: &Engine, doc: &str) {
        let mut g = e.lock_writer_blocking();
        e.apply(&mut g, ChangesetType::Delta, doc.as_bytes())
            .unwrap();
    }

    /// A `set-item` of `id` with one property `name` holding `value` (a typed XML value,
    /// `<string>…</string>`).
    pub(crate) fn set_item(id: &str, name: &str, value: &str) -> String {
        format!(
            "<set-item id='{id}'><properties><struct><entry name='{name}'>{value}</entry>\
             </struct></properties></set-item>"
        )
    }

    /// Waits (at most 30 s) until `done`, which background work makes true; `what`
    /// names it in the failure.
    pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < until, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// An apply is durable through the commit journal at first; once applies pause,
    /// the store-sync thread commits the item store durably and empties the journal.
    #[test]
    fn the_item_store_is_synced_once_applies_pause() {
        let d = tempfile::tempdir().unwrap();
        let (e, mut g) = engine_with(d.path(), b"<dimensions/>");
        e.populate(&mut g).unwrap();
        drop(g);
        let journal = || std::fs::metadata(d.path().join("journal")).unwrap().len();
        apply(&e, "<changeset><add-item id='a'/></changeset>");
        assert!(journal() > 0, "the apply should be in the journal");
        let until = std::time::Instant::now() + SYNC_LONGEST + SYNC_IDLE * 10;
        while journal() > 0 {
            assert!(
                std::time::Instant::now() < until,
                "the item store was not synced"
            );
            std::thread::sleep(SYNC_IDLE / 4);
        }
    }

    /// An engine on `dir` with an integer dimension `n` and a text dimension `t`, its
    /// index built.
    pub(crate) fn populated_with_number_and_text(dir: &std::path::Path) -> Arc<Engine> {
        populated(
            dir,
            b"<dimensions><dimension id='n' type='integer'/><dimension id='t' type='text'/>\
              </dimensions>",
        )
    }

    /// An engine on `dir` with dimensions `dims`, populated (queryable).
    pub(crate) fn populated(dir: &std::path::Path, dims: &[u8]) -> Arc<Engine> {
        let (e, mut g) = engine_with(dir, dims);
        e.populate(&mut g).unwrap();
        drop(g);
        e
    }

    /// Every chunk's columns and every text field's length unions are built in the
    /// background after an apply, and at start-up before the engine is queryable, so
    /// that the first requests do not build them on their way.
    #[test]
    fn columns_are_built_in_the_background() {
        let d = tempfile::tempdir().unwrap();
        let e = populated_with_number_and_text(d.path());
        let items: String = (0..2500)
            .map(|i| {
                format!(
                    "<set-item id='i{i}'><properties><struct><entry name='n'><int>{i}</int>\
                     </entry><entry name='t'><string>word {i}</string></entry></struct></properties>\
                     </set-item>"
                )
            })
            .collect();
        apply(&e, &format!("<changeset>{items}</changeset>"));
        let all_built = |what: &str| {
            wait_until(
                &format!("{what}: columns or length unions not built"),
                || {
                    let now = e.snapshot();
                    now.chunks_without_columns() == 0 && now.length_unions_missing().is_empty()
                },
            )
        };
        assert_eq!(e.snapshot().chunk_count(), 3);
        all_built("after the apply");
        // An index built whole or loaded has them before it is read: done once
        // `populate` (built anew from the store; loaded from a saved index) or
        // `reindex` (a dimensions change) returns.
        let built_before_reading = |what: &str| {
            let now = e.snapshot();
            assert_eq!(now.chunks_without_columns(), 0, "columns {what}");
            assert!(now.length_unions_missing().is_empty(), "unions {what}");
        };
        let mut g = e.lock_writer_blocking();
        e.populate(&mut g).unwrap();
        built_before_reading("when built at start-up");
        e.save_index(&mut g).unwrap();
        let doc = e.dimensions_doc();
        let dims = Arc::new(Dimensions::parse(&doc).unwrap());
        assert!(
            e.load_saved_index(&dims, &doc).is_some(),
            "no saved index to load"
        );
        e.populate(&mut g).unwrap();
        built_before_reading("when loaded at start-up");
        let dims = e.set_dimensions(&mut g, &doc).unwrap();
        e.reindex(&mut g, dims).unwrap();
        built_before_reading("after a dimensions change");
    }

    /// An apply adding more than `BACKGROUND_MERGE_TERMS` did-you-mean terms (as a bulk
    /// load does) has them merged in the background, which replaces its snapshot with one
    /// sharing its chunks: the background walk still builds every chunk's columns.
    #[test]
    fn columns_are_built_after_a_term_merge() {
        let d = tempfile::tempdir().unwrap();
        let e = populated_with_number_and_text(d.path());
        // four words of letters only per item, each its own term
        let word = |mut k: usize| {
            let mut w = String::from("w");
            loop {
                w.push((b'a' + (k % 26) as u8) as char);
                k /= 26;
                if k == 0 {
                    break w;
                }
            }
        };
        let items: String = (0..2500)
            .map(|i| {
                let words: Vec<String> = (0..4).map(|j| word(i * 4 + j)).collect();
                format!(
                    "<set-item id='i{i}'><properties><struct><entry name='n'><int>{i}</int>\
                     </entry><entry name='t'><string>{}</string></entry></struct></properties>\
                     </set-item>",
                    words.join(" ")
                )
            })
            .collect();
        // (10,001 terms, "w" and the 10,000 words: the apply leaves them to a merge)
        const { assert!(2500 * 4 > discern_index::terms::BACKGROUND_MERGE_TERMS) };
        let generation = e.snapshot().generation;
        apply(&e, &format!("<changeset>{items}</changeset>"));
        wait_until("the terms were not merged", || {
            e.snapshot().terms_overlay_len() <= discern_index::terms::BACKGROUND_MERGE_TERMS
        });
        assert_eq!(e.snapshot().generation, generation + 1, "no other apply");
        wait_until("columns not built after the term merge", || {
            e.snapshot().chunks_without_columns() == 0
        });
    }

    /// A keyword dimension of many keys keeps its postings frozen (an FST and an
    /// overlay); the overlay an apply leaves due is folded off the apply path and
    /// installed, keys and documents unchanged.
    #[test]
    fn a_frozen_postings_overlay_is_folded_in_the_background() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(
            d.path(),
            b"<dimensions><dimension id='a' type='keyword'/></dimensions>",
        );
        let items = |from: usize, to: usize| -> String {
            (from..to)
                .map(|i| {
                    set_item(
                        &format!("i{i}"),
                        "a",
                        &format!("<string>{i} main st</string>"),
                    )
                })
                .collect()
        };
        // (65,536 keys freeze a dimension; 9,000 new ones beside them are due a fold)
        apply(&e, &format!("<changeset>{}</changeset>", items(0, 66_000)));
        let generation = e.snapshot().generation;
        apply(
            &e,
            &format!("<changeset>{}</changeset>", items(66_000, 75_000)),
        );
        wait_until("the postings overlay was not folded", || {
            !e.snapshot().postings_to_fold()
        });
        let snap = e.snapshot();
        assert_eq!(snap.generation, generation + 1, "no other apply");
        for i in [0, 65_999, 66_000, 74_999] {
            let found = snap.docs_with_key(0, &format!("{i} main st"));
            assert_eq!(found, 1, "key {i}");
        }
    }

    /// The few did-you-mean terms a small apply leaves in a dictionary's overlay (which
    /// every request for suggestions reads term by term) are folded in once applies
    /// pause, far below the overlay size that asks for a merge at once.
    #[test]
    fn a_small_overlay_is_folded_once_applies_pause() {
        let d = tempfile::tempdir().unwrap();
        let e = populated_with_number_and_text(d.path());
        // (an apply into an empty index counts its dictionaries whole: no overlay)
        let first = set_item("i9", "t", "<string>omega</string>");
        apply(&e, &format!("<changeset>{first}</changeset>"));
        assert_eq!(e.snapshot().terms_overlay_len(), 0);
        let items: String = ["alpha beta", "gamma", "delta epsilon"]
            .iter()
            .enumerate()
            .map(|(i, words)| set_item(&format!("i{i}"), "t", &format!("<string>{words}</string>")))
            .collect();
        let generation = e.snapshot().generation;
        apply(&e, &format!("<changeset>{items}</changeset>"));
        let left = e.snapshot().terms_overlay_len();
        assert!(
            (1..=discern_index::terms::BACKGROUND_MERGE_TERMS).contains(&left),
            "the apply leaves a small overlay ({left} terms)"
        );
        wait_until("the overlay was not folded", || {
            e.snapshot().terms_overlay_len() == 0
        });
        assert_eq!(e.snapshot().generation, generation + 1, "no other apply");
        // (the folded dictionary still knows the apply's words)
        let snap = e.snapshot();
        let dict = snap.term_dict(1).unwrap();
        assert_eq!(
            dict.within("gamma", 0, false),
            [("gamma".to_string(), 0, 1)]
        );
        assert_eq!(
            dict.within("epsilom", 1, false),
            [("epsilon".to_string(), 1, 1)]
        );
    }

    /// A query's `properties` show each record's properties in stored order (all, or
    /// those asked for), as text and as a value alike.
    #[test]
    fn query_properties_keep_the_stored_order() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(
            d.path(),
            b"<dimensions><dimension id='k' type='keyword'/></dimensions>",
        );
        let entry = |n: &str, v: &str| format!("<entry name='{n}'><string>{v}</string></entry>");
        apply(
            &e,
            &format!(
                "<changeset><set-item id='a'><properties><struct>{}{}{}{}</struct></properties></set-item></changeset>",
                entry("z", "1"),
                entry("k", "v"),
                entry("m", "q\"x"),
                entry("a", "2")
            ),
        );
        let ask = |props: serde_json::Value| {
            let body = serde_json::json!({"criteria": [{"dimension": "k", "value": "v"}], "pageSize": 10, "properties": props});
            query_response(&e, &body).unwrap()
        };
        let all = ask(serde_json::json!([]));
        assert_eq!(all.total_size(), Some(1));
        let text = all.to_text();
        assert!(
            text.contains(r#""properties":[{"z":"1","k":"v","m":"q\"x","a":"2"}]"#),
            "{text}"
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(all.into_value().unwrap(), value);
        let picked = ask(serde_json::json!(["a", "z", "none"])).to_text();
        assert!(
            picked.contains(r#""properties":[{"z":"1","a":"2"}]"#),
            "{picked}"
        );
    }

    /// Items named together are read as of one commit, in order, several at once once
    /// a read of them comes from the disk (here: any read).
    #[test]
    fn items_are_read_together() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(
            d.path(),
            b"<dimensions><dimension id='k' type='keyword'/></dimensions>",
        );
        e.store.set_from_disk(std::time::Duration::ZERO);
        let doc =
            set_item("a", "k", "<string>1</string>") + &set_item("b", "k", "<string>2</string>");
        apply(&e, &format!("<changeset>{doc}</changeset>"));
        let ids: Vec<String> = ["b", "none", "a", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let before = discern_store::pages_handed_over_here();
        let got = e.items(&ids).unwrap();
        // (the first read here, the three after it handed over)
        assert_eq!(discern_store::pages_handed_over_here() - before, 3);
        let k = |r: &Option<Record>| r.as_ref().map(|r| r.get("k").cloned());
        assert_eq!(
            got.iter().map(k).collect::<Vec<_>>(),
            vec![
                Some(Some(discern_model::Value::Str("2".into()))),
                None,
                Some(Some(discern_model::Value::Str("1".into()))),
                Some(Some(discern_model::Value::Str("2".into()))),
            ]
        );
    }

    /// A page's records are read ahead, several at once, once a read of them comes from
    /// the disk (here: any read), whether its properties are written as stored or from
    /// decoded records (highlights merged into them).
    #[test]
    fn a_pages_records_are_read_ahead() {
        let d = tempfile::tempdir().unwrap();
        let e = populated(
            d.path(),
            b"<dimensions><dimension id='k' type='keyword'/><dimension id='t' type='text'/></dimensions>",
        );
        e.store.set_from_disk(std::time::Duration::ZERO);
        let mut doc = String::from("<changeset>");
        for i in 0..5 {
            doc.push_str(&format!("<set-item id='i{i}'><properties><struct><entry name='k'><string>v</string></entry><entry name='t'><string>red house {i}</string></entry></struct></properties></set-item>"));
        }
        apply(&e, &(doc + "</changeset>"));
        let handed_over = |body: serde_json::Value| {
            let before = discern_store::pages_handed_over_here();
            let r = query_response(&e, &body).unwrap();
            assert_eq!(r.total_size(), Some(5));
            discern_store::pages_handed_over_here() - before
        };
        let criteria = serde_json::json!([{"dimension": "t", "value": "red"}]);
        // (the first read by the request itself, the rest handed over after it)
        assert_eq!(
            handed_over(serde_json::json!({"criteria": criteria, "pageSize": 3, "properties": []})),
            2
        );
        let merged = serde_json::json!({"criteria": criteria, "pageSize": 4, "properties": ["t"],
            "highlighting": {"merge": "properties"}});
        assert_eq!(handed_over(merged), 3);
        assert_eq!(
            handed_over(serde_json::json!({"criteria": criteria, "pageSize": 3})),
            0
        );
    }

    /// After an apply, the text fields whose postings it copied have their length
    /// classes united again in the background, ahead of the next text request.
    #[test]
    fn length_unions_are_united_again_after_an_apply() {
        let d = tempfile::tempdir().unwrap();
        let (e, mut g) = engine_with(
            d.path(),
            b"<dimensions><dimension id='x' type='text'/></dimensions>",
        );
        e.populate(&mut g).unwrap();
        drop(g);
        let items: String = (0..1500)
            .map(|i| {
                let words = ["red", "red red", "red blue green", "blue"][i % 4];
                set_item(&format!("i{i}"), "x", &format!("<string>{words}</string>"))
            })
            .collect();
        apply(&e, &format!("<changeset>{items}</changeset>"));
        let before = e.snapshot();
        let item = set_item("i1", "x", "<string>red red red</string>");
        apply(&e, &format!("<changeset>{item}</changeset>"));
        // (without the background step this waits out its 30 s: the apply emptied
        // the field's classes)
        let now = e.snapshot();
        assert!(!Arc::ptr_eq(&now, &before));
        wait_until("not united again", || {
            now.length_unions_missing().is_empty()
        });
    }

    /// A view keeps the items of its snapshot, whatever commits after it.
    #[test]
    fn a_view_reads_the_items_of_its_snapshot() {
        let d = tempfile::tempdir().unwrap();
        let e = engine(d.path());
        let item = set_item("a", "x", "<string>1</string>");
        apply(&e, &format!("<changeset>{item}</changeset>"));
        let view = e.view().unwrap();
        apply(
            &e,
            "<changeset><remove-item id='a'/><set-item id='b'/></changeset>",
        );
        assert_eq!(view.snap.len(), 1);
        let a = view.items.get("a").unwrap().expect("a, as of the view");
        assert_eq!(a.get("x"), Some(&discern_model::Value::Str("1".into())));
        assert!(view.items.get("b").unwrap().is_none());
        let now = e.view().unwrap();
        assert!(now.items.get("a").unwrap().is_none());
        assert_eq!(now.snap.len(), 1);
        // each apply marked the store ahead once, and cleared the mark
        assert_eq!(e.commit_seq.load(Ordering::SeqCst), 4);
    }

    /// While an apply has committed the store but not yet published its snapshot, a
    /// view waits; it is taken once both agree.
    #[test]
    fn a_view_waits_for_the_snapshot_of_a_commit() {
        let d = tempfile::tempdir().unwrap();
        let e = engine(d.path());
        let ahead = crate::apply::StoreAhead::on(&e.commit_seq);
        ahead.mark();
        ahead.mark();
        let (tx, rx) = std::sync::mpsc::channel();
        let e2 = e.clone();
        std::thread::spawn(move || tx.send(e2.view().map(|v| v.snap.generation)));
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err());
        drop(ahead);
        assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok());
        assert_eq!(e.commit_seq.load(Ordering::SeqCst), 2);
    }
}
