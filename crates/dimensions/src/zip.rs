//! US ZIP code centroids, from the table the `zipcodes` crate bundles into the binary.

use std::collections::HashMap;
use std::sync::OnceLock;

static TABLE: OnceLock<HashMap<String, (f64, f64)>> = OnceLock::new();

fn table() -> &'static HashMap<String, (f64, f64)> {
    TABLE.get_or_init(|| {
        let mut m = HashMap::new();
        if let Ok(all) = zipcodes::filter_by(Vec::<fn(&zipcodes::Zipcode) -> bool>::new(), None) {
            for z in all {
                if let (Ok(lat), Ok(lon)) = (z.lat.parse::<f64>(), z.long.parse::<f64>()) {
                    m.insert(z.zip_code, (lat, lon));
                }
            }
        }
        m
    })
}

/// Loads the table now, on a thread of its own (a no-op once loaded): its first use
/// otherwise stalls whichever apply first meets a ZIP code (~0.5 s).
pub fn load_in_background() {
    let _ = std::thread::Builder::new()
        .name("zip-table".into())
        .spawn(|| {
            table();
        });
}

/// Whether the table is loaded.
pub fn loaded() -> bool {
    TABLE.get().is_some()
}

/// Centroid of a US ZIP code (`"10012"`, `"10012-1234"`, or a number like 7030).
pub fn centroid(zip: &str) -> Option<(f64, f64)> {
    let z = zip.trim();
    let five = z.split('-').next().unwrap_or(z);
    if five.is_empty() || five.len() > 5 || !five.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let padded = format!("{five:0>5}");
    table().get(&padded).copied()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_zips() {
        assert_eq!(super::centroid("10012"), Some((40.7255, -73.9983)));
        assert!(super::centroid("07030").is_some());
        assert!(super::centroid("7030").is_some());
        assert!(super::centroid("abcde").is_none());
    }
}
