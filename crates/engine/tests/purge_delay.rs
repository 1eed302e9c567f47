//! The allocator's purge delay, in a process of its own (the engine's unit tests share
//! one and force purges of their own): memory freed stays resident past mimalloc's
//! default second, and the engine's own release still returns it at once. (Resident
//! memory, not mimalloc's committed figure: on Linux a purge leaves that unchanged.)

use discern_engine::{alloc, process};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

const BLOCK: usize = 64 << 20;

#[test]
fn freed_memory_is_kept_until_the_engine_releases_it() {
    assert!(
        std::env::var_os("MIMALLOC_PURGE_DELAY").is_none(),
        "MIMALLOC_PURGE_DELAY is set: this test measures the engine's own delay"
    );
    alloc::keep_freed_memory();
    // one block of arena memory, every page touched, then freed
    let block = vec![1u8; BLOCK];
    assert_eq!(block[BLOCK - 1], 1);
    drop(block);
    let freed = process::resident_bytes();
    // past mimalloc's default delay (1 s); then a purge of what is due, as the next
    // allocation after the delay would make
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: mi_collect takes a plain bool and only walks mimalloc's own heaps.
    unsafe { libmimalloc_sys::mi_collect(false) };
    let later = process::resident_bytes();
    assert!(
        later + (BLOCK as u64) / 2 > freed,
        "returned within 1.5 s: resident {freed} -> {later} bytes"
    );
    process::release_free_memory();
    let released = process::resident_bytes();
    assert!(
        released + (BLOCK as u64) / 2 <= later,
        "not returned by the engine's release: resident {later} -> {released} bytes"
    );
}
