//! Compiles the `zipcodes` crate's table of US ZIP codes into the compact form `zip.rs`
//! reads: sorted records of (ZIP as a number, latitude, longitude), little-endian, 20
//! bytes each. Read at run time, the crate's own table kept ~40 MB of parsed records
//! (every field of every ZIP code as strings) for the engine's life.

use std::io::Write;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let mut rows: Vec<(u32, f64, f64)> = Vec::new();
    for z in zipcodes::database() {
        let (Ok(zip), Ok(lat), Ok(lon)) = (
            z.zip_code.parse::<u32>(),
            z.lat.parse::<f64>(),
            z.long.parse::<f64>(),
        ) else {
            continue;
        };
        if z.zip_code.len() == 5 {
            rows.push((zip, lat, lon));
        }
    }
    // a ZIP code listed twice keeps its last entry (as a map filled in order would)
    rows.reverse();
    rows.sort_by_key(|r| r.0); // stable: the last entry first among equals
    rows.dedup_by_key(|r| r.0);
    let mut out = Vec::with_capacity(rows.len() * 20);
    for (zip, lat, lon) in rows {
        out.extend_from_slice(&zip.to_le_bytes());
        out.extend_from_slice(&lat.to_bits().to_le_bytes());
        out.extend_from_slice(&lon.to_bits().to_le_bytes());
    }
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("zips.bin");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&out))
        .expect("cannot write the ZIP table");
}
