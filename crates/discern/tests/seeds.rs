//! The workspace's proptest seeds are read by the tests they were found by. proptest
//! keeps a test file's failing cases at `<crate>/proptest-regressions/<the file's path
//! under src, .rs → .txt>` and replays them before new cases; when tests move to another
//! file and their seeds stay behind, nothing reads them any more (six did, once).

use std::fs;
use std::path::{Path, PathBuf};

/// Every file under `dir`, recursively.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_seeds_file_belongs_to_a_file_of_property_tests() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut orphans = Vec::new();
    for krate in fs::read_dir(&crates).unwrap().flatten() {
        let seeds = krate.path().join("proptest-regressions");
        let mut found = Vec::new();
        files_under(&seeds, &mut found);
        for file in found {
            let rel = file.strip_prefix(&seeds).unwrap().with_extension("rs");
            let source = krate.path().join("src").join(&rel);
            let tests_here = fs::read_to_string(&source).is_ok_and(|s| s.contains("proptest!"));
            if !tests_here {
                orphans.push(file.display().to_string());
            }
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no seeds files found under {}",
        crates.display()
    );
    assert!(
        orphans.is_empty(),
        "seeds no test reads (move them to the file their tests are in now): {orphans:?}"
    );
}
