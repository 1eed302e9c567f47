//! US ZIP code centroids, from the table the `zipcodes` crate bundles, compiled into
//! the binary as sorted fixed-size records (`build.rs`): a lookup is a binary search
//! over them, with nothing to load or allocate.

/// Per ZIP code, in ascending order: the code (4 bytes), the latitude's and the
/// longitude's bits (8 each), little-endian.
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/zips.bin"));

const RECORD: usize = 20;

fn record(i: usize) -> Option<(u32, f64, f64)> {
    let r = TABLE.get(i * RECORD..(i + 1) * RECORD)?;
    let word = |at: usize| -> Option<[u8; 8]> { r.get(at..at + 8)?.try_into().ok() };
    Some((
        u32::from_le_bytes(r.get(..4)?.try_into().ok()?),
        f64::from_bits(u64::from_le_bytes(word(4)?)),
        f64::from_bits(u64::from_le_bytes(word(12)?)),
    ))
}

/// Centroid of a US ZIP code (`"10012"`, `"10012-1234"`, or a number like 7030).
pub fn centroid(zip: &str) -> Option<(f64, f64)> {
    let z = zip.trim();
    let five = z.split('-').next().unwrap_or(z);
    if five.is_empty() || five.len() > 5 || !five.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let code: u32 = five.parse().ok()?;
    let (mut lo, mut hi) = (0, TABLE.len() / RECORD);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let (at, lat, lon) = record(mid)?;
        match at.cmp(&code) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some((lat, lon)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_zips() {
        assert_eq!(centroid("10012"), Some((40.7255, -73.9983)));
        assert_eq!(centroid("10012-1234"), centroid("10012"));
        assert!(centroid("07030").is_some());
        assert_eq!(centroid("7030"), centroid("07030"));
        assert!(centroid("abcde").is_none());
        assert!(centroid("").is_none());
        assert!(centroid("123456").is_none());
    }

    /// The compiled table is whole, sorted and distinct, and every code is found.
    #[test]
    fn the_table_is_sorted_and_whole() {
        let n = TABLE.len() / RECORD;
        assert_eq!(TABLE.len() % RECORD, 0);
        assert!(n > 40_000, "{n} ZIP codes");
        let codes: Vec<u32> = (0..n).filter_map(|i| record(i).map(|r| r.0)).collect();
        assert_eq!(codes.len(), n);
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        for (i, &c) in codes.iter().enumerate().step_by(97) {
            let (_, lat, lon) = record(i).unwrap();
            assert_eq!(centroid(&format!("{c:05}")), Some((lat, lon)));
        }
    }
}
