//! Compiles the `zipcodes` crate's table of US ZIP codes into a sorted Rust array that
//! `zip.rs` includes: `(ZIP as a number, latitude, longitude)` per code. Read at run
//! time, the crate's own table kept ~40 MB of parsed records (every field of every ZIP
//! code as strings) for the engine's life.

use std::fmt::Write as _;

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
        if z.zip_code.len() == 5 && lat.is_finite() && lon.is_finite() {
            rows.push((zip, lat, lon));
        }
    }
    // a ZIP code listed twice keeps its last entry (as a map filled in order would)
    rows.reverse();
    rows.sort_by_key(|r| r.0); // stable: the last entry first among equals
    rows.dedup_by_key(|r| r.0);
    // (`{:?}` writes a double's shortest form that parses back to the same bits)
    let mut out = format!("static ZIPS: [(u32, f64, f64); {}] = [\n", rows.len());
    for (zip, lat, lon) in rows {
        let _ = writeln!(out, "({zip}, {lat:?}, {lon:?}),");
    }
    out.push_str("];\n");
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("zips.rs");
    std::fs::write(&path, out).expect("cannot write the ZIP table");
}
