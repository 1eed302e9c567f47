use std::path::PathBuf;

/// Engine settings (SPEC §1.1).
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub max_paged_docs: usize,
    pub max_changeset_bytes: u64,
    pub retain_snapshots: usize,
    pub queryable_while_replaying: bool,
    pub admin_token: Option<String>,
    pub feed: Option<String>,
    pub feed_interval_ms: u64,
    /// Memory the item store may use to cache its pages (the OS caches the file too).
    /// 16 MiB holds every branch page of a million items' tree; a larger cache mostly
    /// keeps leaves a random delta rarely reads again, at 5 KiB of heap per 4 KiB page
    /// (64 MiB: +95 MB resident after ten deltas at 1M items, deltas no faster).
    pub store_cache_bytes: u64,
    /// Applies paused this long (ms) make a background save of the index due, when a
    /// crash would otherwise cost a rebuild or a long catch-up (`background_save.rs`);
    /// 0: the index is saved only at shutdown.
    pub index_save_idle_ms: u64,
    /// Whether each checkpoint's state is written as an image new followers start from
    /// (`image.rs`): ~2 GB of disk and ~15 s of one core in the background at 1M items.
    pub bootstrap_images: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./data"),
            max_paged_docs: 10_000,
            max_changeset_bytes: 4 << 30,
            retain_snapshots: 2,
            queryable_while_replaying: false,
            admin_token: None,
            feed: None,
            feed_interval_ms: 300_000,
            store_cache_bytes: 16 << 20,
            index_save_idle_ms: crate::background_save::SAVE_IDLE_DEFAULT.as_millis() as u64,
            bootstrap_images: false,
        }
    }
}
