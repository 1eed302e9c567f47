//! What reading one item costs at random, by the item store's cache size: each round
//! reads the same 4,000 random ids (`L` and seven digits, as the generated datasets name
//! items) of an existing data dir, the record alone, then written as a query page's
//! properties are. A measurement, not a check:
//!
//! ```sh
//! RT_DIR=/tmp/bench-work/data [RT_CACHE=bytes] \
//!     cargo test --release -p discern-store --test read_throughput -- --ignored --nocapture
//! ```
//!
//! Session 64, a 1M data dir whose file the OS had in memory: 5.4–6.4 µs a read with the
//! engine's 16 MiB cache (a leaf page missed: `pread` into a zeroed buffer, copied into
//! the cache), 1.5 µs once every page read is cached; ~2 µs more to write the record's
//! JSON.

// the engine's allocator, as in the server
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[test]
#[ignore]
fn read_throughput() {
    let Ok(dir) = std::env::var("RT_DIR") else {
        return;
    };
    let cache: u64 = std::env::var("RT_CACHE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16 << 20);
    let store =
        discern_store::Store::open(std::path::Path::new(&dir), 1, cache).expect("a data dir");
    let mut x: u64 = 12345;
    let ids: Vec<String> = (0..4000)
        .map(|_| {
            // xorshift: the same ids every run
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("L{:07}", x % 1_000_000)
        })
        .collect();
    for round in 0..4 {
        let reader = store.reader().expect("a read snapshot");
        let started = std::time::Instant::now();
        let mut found = 0;
        for id in &ids {
            found += reader
                .with_raw(id, |_| ())
                .expect("a read")
                .map_or(0, |()| 1);
        }
        let read = started.elapsed().as_secs_f64();
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        for id in &ids {
            out.clear();
            let _ = reader.with_raw(id, |raw| {
                discern_model::write_props_json(raw, None, &mut out)
            });
        }
        let written = started.elapsed().as_secs_f64();
        let n = ids.len() as f64;
        println!(
            "round {round}: {found} of {} found; read {:.2} µs, read and written {:.2} µs an item",
            ids.len(),
            read * 1e6 / n,
            written * 1e6 / n
        );
    }
}
