//! Process facts read from /proc (Linux); zero where unavailable.

fn page_size() -> u64 {
    4096
}

/// Resident set size in bytes.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(|pages| pages * page_size())
        .unwrap_or(0)
}

/// Virtual memory size in bytes.
pub fn virtual_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(|pages| pages * page_size())
        .unwrap_or(0)
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
