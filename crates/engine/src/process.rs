//! Process facts read from /proc (Linux); zero where unavailable.

use std::sync::atomic::{AtomicU64, Ordering};

fn page_size() -> u64 {
    4096
}

fn statm_field(n: usize) -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(n)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(|pages| pages * page_size())
        .unwrap_or(0)
}

/// Resident set size in bytes.
pub fn resident_bytes() -> u64 {
    statm_field(1)
}

/// Virtual memory size in bytes.
pub fn virtual_bytes() -> u64 {
    statm_field(0)
}

/// Memory the machine makes available (MemTotal).
pub fn available_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value; it has no memory preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Fields of /proc/self/stat after the command name (field 3 onwards, 0-based here).
fn stat_fields() -> Vec<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the command name is in parentheses and may contain spaces
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .collect()
}

/// User + system CPU time in seconds.
pub fn cpu_seconds() -> f64 {
    let f = stat_fields();
    // utime and stime are fields 14 and 15 (1-based); index 11 and 12 after the name
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks as f64 / clock_ticks_per_second()
}

/// When the process started, as a Unix time in seconds.
pub fn start_time_seconds() -> f64 {
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("btime "))
                .and_then(|l| l[6..].trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    // starttime is field 22 (1-based): index 19 after the name
    let start_ticks = stat_fields().get(19).copied().unwrap_or(0);
    boot as f64 + start_ticks as f64 / clock_ticks_per_second()
}

/// Open file descriptors.
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// The soft limit on open file descriptors.
pub fn max_fds() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill in.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if rc == 0 {
        lim.rlim_cur
    } else {
        0
    }
}

/// Threads of this process right now.
pub fn threads_current() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l[8..].trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// Threads started since the process began: the main thread, every thread whose start
/// hook called `thread_started` (tokio workers and blocking threads, rayon workers) and
/// the store's changeset-log writers.
static THREADS_STARTED: AtomicU64 = AtomicU64::new(1);
static THREADS_PEAK: AtomicU64 = AtomicU64::new(1);

pub fn thread_started() {
    THREADS_STARTED.fetch_add(1, Ordering::Relaxed);
    THREADS_PEAK.fetch_max(threads_current(), Ordering::Relaxed);
}

pub fn threads_started_total() -> u64 {
    THREADS_STARTED.load(Ordering::Relaxed) + discern_store::log_threads_started()
}

/// The most threads seen at once (sampled at each thread start and each read).
pub fn threads_peak() -> u64 {
    THREADS_PEAK.fetch_max(threads_current(), Ordering::Relaxed);
    THREADS_PEAK.load(Ordering::Relaxed)
}

/// Bytes the allocator counts as committed (`committed` heap), at least the bytes in
/// use. On Linux mimalloc's purge returns pages (`MADV_DONTNEED`) without lowering
/// this count: resident memory, not this, shows what a purge gave back.
pub fn heap_committed_bytes(in_use: u64) -> u64 {
    let mut commit = 0usize;
    let mut ignored = [0usize; 7];
    let [a, b, c, d, e, f, g] = &mut ignored;
    // SAFETY: mi_process_info writes one usize through each pointer; every pointer is
    // to a distinct live local.
    unsafe {
        libmimalloc_sys::mi_process_info(a, b, c, d, e, &mut commit, f, g);
    }
    (commit as u64).max(in_use)
}

/// Runs `f` — upkeep after an apply: the spare postings' catch-up, rebuilding columns,
/// merging term dictionaries — on a pool of one thread, so that its parallel loops
/// take one core, never both from the requests (the first request after a delta waited
/// 25–50 ms behind the catch-up's tasks in the shared pool).
pub fn in_background<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "upkeep".into())
            .start_handler(|_| thread_started())
            .build()
            .ok()
    });
    match pool {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// Returns the allocator's free memory to the operating system. Building, loading or
/// replacing a whole index frees gigabytes of temporaries the allocator would otherwise
/// keep. A thread's heap is collected only by that thread (and an idle one never
/// purges what it freed), so every thread of the rayon pool, where the index is built
/// and decoded, collects its own (1M items loaded: resident 2.44 -> ~2.2 GB).
pub fn release_free_memory() {
    fn collect() {
        // SAFETY: mi_collect takes a plain bool and only walks mimalloc's own heaps.
        unsafe {
            libmimalloc_sys::mi_collect(true);
        }
    }
    rayon::broadcast(|_| collect());
    collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_are_plausible() {
        assert!(resident_bytes() > 0);
        assert!(virtual_bytes() >= resident_bytes());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let st = start_time_seconds();
        assert!(
            st <= now + 2.0 && st > now - 86400.0 * 365.0,
            "{st} vs {now}"
        );
        assert!(open_fds() > 0 && open_fds() <= max_fds());
        assert!(threads_current() >= 1);
        assert!(cpu_seconds() >= 0.0);
        // this process has allocated through mimalloc, so it has committed memory
        let held: Vec<u8> = vec![1; 1 << 20];
        assert!(heap_committed_bytes(0) >= held.len() as u64);
        release_free_memory();
    }
}
