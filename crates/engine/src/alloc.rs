//! The global allocator: mimalloc, wrapped to count bytes in use
//! (`vm_memory_bytes_used{area="heap"}`, `/ws/info/runtime`). The binary installs it
//! with `#[global_allocator]`. mimalloc rather than glibc's malloc: the apply path makes
//! many short-lived allocations on several threads, and on glibc's fragmented arenas
//! a 1,000-item delta took ~35% longer (measured: 160–250 ms → 100–120 ms per delta
//! at 100k items; start-up index build 4.7 → 3.9 s).

use std::alloc::{GlobalAlloc, Layout};
use std::os::raw::c_void;

use libmimalloc_sys as mi;
use mimalloc::MiMalloc;
use std::sync::atomic::{AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

pub struct Counting;

/// The alignment every block of `mi_malloc` has once it is at least this large: mimalloc
/// is a drop-in `malloc` and keeps C's guarantee (`max_align_t`, 16 bytes on the
/// platforms we build for). Its pages start 16-aligned and every block size from 16 up
/// is a multiple of 16 (`alloc.c` asserts `block_size < MI_MAX_ALIGN_SIZE ||
/// aligned(block, MI_MAX_ALIGN_SIZE)`); the one smaller block size, 8, is laid out at
/// multiples of 8.
const MALLOC_ALIGN: usize = 16;

/// Whether a plain `mi_malloc(size)` already meets `align`: the rule the standard
/// library's own `System` allocator applies to `malloc` (alignment at most the
/// guarantee, and at most the size, so that a block smaller than 16 bytes, 8-aligned,
/// is never asked for more).
///
/// Why not always `mi_malloc_aligned` (what `MiMalloc` does): mimalloc v3 serves an
/// aligned request for more than 1 KiB from its size class only when that class is a
/// power of two up to 4 KiB; any other — a `[f64; 1024]` column of 8 KiB, a roaring
/// bitset container, a 24 KiB geo column, every `Vec` grown past 4 KiB — is
/// over-allocated by the alignment and lands one size class up (8 KiB → 10 KiB). At 1M
/// items that was ~35 MB of the columns alone.
#[inline(always)]
fn plain(align: usize, size: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

// SAFETY: every method hands out memory from mimalloc with at least the layout's size
// and alignment: through `MiMalloc` (whose guarantees hold, arguments forwarded
// unchanged), or, when `plain` holds, through `mi_malloc`/`mi_zalloc`, whose blocks of
// `size >= align` bytes are aligned to `min(16, block size) >= align` (see
// `MALLOC_ALIGN`). Every block, however obtained, is freed with `mi_free` (which is what
// `MiMalloc::dealloc` calls, and accepts any mimalloc block). `realloc` takes the plain
// path only when the block was made by it (`plain` of the old layout) and the new size
// keeps `plain` true, so `mi_realloc` gets a block of its own kind and returns one whose
// alignment meets the unchanged `align`. The only addition is a relaxed atomic counter
// update, which neither allocates nor touches the memory handed out.
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if plain(layout.align(), layout.size()) {
            // SAFETY: see the impl's comment (a plain block meets the layout).
            unsafe { mi::mi_malloc(layout.size()) as *mut u8 }
        } else {
            // SAFETY: same contract as our caller's (forwarded).
            unsafe { MiMalloc.alloc(layout) }
        };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract), so from
        // mimalloc, and `mi_free` frees any mimalloc block.
        unsafe { mi::mi_free(ptr as *mut c_void) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if plain(layout.align(), layout.size()) {
            // SAFETY: see the impl's comment; `mi_zalloc` zeroes the block.
            unsafe { mi::mi_zalloc(layout.size()) as *mut u8 }
        } else {
            // SAFETY: forwarded contract.
            unsafe { MiMalloc.alloc_zeroed(layout) }
        };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = if plain(layout.align(), layout.size()) && plain(layout.align(), new_size) {
            // SAFETY: `ptr` is a plain block (made by `alloc` or an earlier plain
            // `realloc` with this layout), and the new size keeps `plain`: see the impl's
            // comment. On failure `mi_realloc` leaves `ptr` as it was, as the contract
            // requires.
            unsafe { mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8 }
        } else {
            // SAFETY: forwarded contract (`mi_realloc_aligned` takes any mimalloc block).
            unsafe { MiMalloc.realloc(ptr, layout, new_size) }
        };
        if !p.is_null() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

/// mimalloc's option number for its purge delay (`mi_option_purge_delay` in v3's
/// `mimalloc.h`, the sixteenth of `mi_option_e`; `libmimalloc-sys` names no constant
/// for it). `tests/purge_delay.rs` checks the effect, not the number.
const MI_OPTION_PURGE_DELAY: mi::mi_option_t = 15;

/// How long the allocator keeps memory freed to it before returning it to the OS:
/// 10 s, not mimalloc's 1 s.
///
/// Why: on the VMs this engine is measured on, memory returned to the OS goes back to
/// the host within seconds, and touching it again costs ~4 ms a 2 MiB page against
/// ~0.2 ms for memory kept (`crates/bench/scripts/fresh_pages.py`). mimalloc purges an
/// arena's freed memory all at once when its delay runs out, however recently each
/// part was freed, so with 1 s the requests' working memory was returned about once a
/// second and faulted in again. The engine returns memory itself where it frees much
/// of it at once (`process::release_free_memory`: after a large apply, when applies
/// pause, after a large export, after an index is built, loaded or saved in the
/// background), which a forced purge does whatever the delay. `MIMALLOC_PURGE_DELAY`
/// in the environment wins.
pub const PURGE_DELAY_MS: i64 = 10_000;

/// Sets the allocator's purge delay to `PURGE_DELAY_MS` unless the environment sets
/// one. The binary calls it first thing.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set takes two plain integers and stores the value; any
        // thread may call it at any time.
        unsafe { mi::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) };
    }
}

/// Bytes currently allocated through the counting allocator (0 when not installed).
pub fn allocated_bytes() -> u64 {
    ALLOCATED.load(Ordering::Relaxed) as u64
}

/// The engine's own unit tests run on the allocator the binary installs.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: Counting = Counting;

#[cfg(test)]
mod tests {
    use super::*;

    fn usable(p: *const u8) -> usize {
        // SAFETY: `p` is a live block of this allocator, so of mimalloc.
        unsafe { mi::mi_usable_size(p as *const c_void) }
    }

    #[test]
    fn a_column_takes_its_own_size_class() {
        // 8 KiB and 24 KiB are size classes of their own: a column of 1,024 doubles or
        // geo points must not land a class up (10 and 28 KiB) as an aligned request did
        let col = vec![0f64; 1024].into_boxed_slice();
        assert_eq!(usable(col.as_ptr() as *const u8), 8192);
        let pts = vec![[0f64; 3]; 1024].into_boxed_slice();
        assert_eq!(usable(pts.as_ptr() as *const u8), 24576);
        let mut grown: Vec<u32> = Vec::new();
        grown.extend(0..4096u32); // grown by doubling to 16 KiB
        assert_eq!(grown.capacity() * 4, 16384);
        assert_eq!(usable(grown.as_ptr() as *const u8), 16384);
    }

    #[test]
    fn every_layout_gets_its_alignment_and_size() {
        let a = Counting;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..=64).chain([100, 1000, 1024, 1025, 4096, 8192, 8193, 24576, 70000]) {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                // SAFETY: `layout` has a non-zero size; every block is checked, written
                // within its size, reallocated with its own layout and freed once with
                // the layout it last had.
                unsafe {
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed {size}/{align}");
                    assert!(usable(z) >= size);
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    a.dealloc(z, layout);
                    for new_size in [size / 2 + 1, size * 3 + 5] {
                        let p = a.alloc(layout);
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "alloc {size}/{align}");
                        assert!(usable(p) >= size);
                        std::ptr::write_bytes(p, 0xab, size);
                        let q = a.realloc(p, layout, new_size);
                        assert!(!q.is_null());
                        assert_eq!(q as usize % align, 0, "realloc {size}->{new_size}/{align}");
                        assert!(usable(q) >= new_size);
                        let kept = size.min(new_size);
                        assert!(std::slice::from_raw_parts(q, kept)
                            .iter()
                            .all(|&b| b == 0xab));
                        a.dealloc(q, Layout::from_size_align(new_size, align).unwrap());
                    }
                }
            }
        }
    }
}
