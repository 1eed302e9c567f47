//! US ZIP code centroids, from the table the `zipcodes` crate bundles, compiled into
//! the binary as a sorted array (`build.rs`): a lookup is a binary search, with nothing
//! to load or allocate.

// Per ZIP code, ascending and distinct: (the code, latitude, longitude).
include!(concat!(env!("OUT_DIR"), "/zips.rs"));

/// Centroid of a US ZIP code (`"10012"`, `"10012-1234"`, or a number like 7030).
pub fn centroid(zip: &str) -> Option<(f64, f64)> {
    let z = zip.trim();
    let five = z.split('-').next().unwrap_or(z);
    if five.is_empty() || five.len() > 5 || !five.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let code: u32 = five.parse().ok()?;
    let i = ZIPS.binary_search_by_key(&code, |z| z.0).ok()?;
    Some((ZIPS[i].1, ZIPS[i].2))
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
        assert!(ZIPS.len() > 40_000, "{} ZIP codes", ZIPS.len());
        assert!(ZIPS.windows(2).all(|w| w[0].0 < w[1].0));
        for &(code, lat, lon) in ZIPS.iter().step_by(97) {
            assert_eq!(centroid(&format!("{code:05}")), Some((lat, lon)));
        }
    }
}
