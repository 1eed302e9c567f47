//! Did-you-mean quality (issue #4): on a generated dataset, 200 words that occur in the
//! data, each misspelt with one random edit (fixed seed); the first suggestion must be
//! the original word for at least 90% of them. Also reports the share on the
//! generator's own realistic misspellings (`queries.jsonl`, class `didyoumean`).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{post_ok, request, start};

fn generator() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/gen_dataset.py");
    assert!(
        root.exists(),
        "the dataset generator is missing: {}",
        root.display()
    );
    root
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One Levenshtein edit: insert, delete or substitute one letter.
fn misspell(word: &str, rng: &mut Rng) -> String {
    let mut c: Vec<char> = word.chars().collect();
    let letter = (b'a' + rng.below(26) as u8) as char;
    match rng.below(3) {
        0 => {
            let at = rng.below(c.len() + 1);
            c.insert(at, letter);
        }
        1 => {
            let at = rng.below(c.len());
            c.remove(at);
        }
        _ => {
            let at = rng.below(c.len());
            let mut l = letter;
            while l == c[at] {
                l = (b'a' + rng.below(26) as u8) as char;
            }
            c[at] = l;
        }
    }
    c.into_iter().collect()
}

fn first_suggestion(port: u16, dim: &str, q: &str) -> Option<String> {
    let path = format!(
        "/ws/didyoumean/{dim}?highlighting=false&query={}",
        q.replace(' ', "%20")
    );
    let (s, b) = request(port, "GET", &path, b"").unwrap();
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let j: serde_json::Value = serde_json::from_slice(&b).unwrap();
    j["suggestions"][0]["value"].as_str().map(str::to_string)
}

#[test]
fn first_suggestion_restores_nine_in_ten_misspellings() {
    let ds = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .arg(generator())
        .args([
            "--n",
            "3000",
            "--deltas",
            "0",
            "--queries",
            "2000",
            "--quiet",
            "--out",
        ])
        .arg(ds.path())
        .status()
        .expect("python3 runs the generator");
    assert!(out.success());
    let data = tempfile::tempdir().unwrap();
    let e = start(data.path());
    post_ok(
        e.port,
        "/ws/dimensions",
        &std::fs::read(ds.path().join("dimensions.xml")).unwrap(),
    );
    post_ok(
        e.port,
        "/ws/changeset?type=bulk",
        &std::fs::read(ds.path().join("bulk.xml")).unwrap(),
    );

    // words of five or more letters from titles (which keep stop words) and descriptions
    let items = std::fs::read_to_string(ds.path().join("items.ndjson")).unwrap();
    let mut vocabulary = BTreeSet::new();
    for line in items.lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        for key in ["title", "description"] {
            for w in item[key]
                .as_str()
                .unwrap_or("")
                .split(|c: char| !c.is_alphabetic())
            {
                if w.len() >= 5 && w.chars().all(|c| c.is_ascii_alphabetic()) {
                    vocabulary.insert(w.to_ascii_lowercase());
                }
            }
        }
    }
    let vocabulary: Vec<String> = vocabulary.into_iter().collect();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut hits = 0;
    let mut misses = Vec::new();
    let total = 200;
    for _ in 0..total {
        let word = &vocabulary[rng.below(vocabulary.len())];
        let typo = misspell(word, &mut rng);
        match first_suggestion(e.port, "freetext", &typo) {
            Some(s) if &s == word => hits += 1,
            other => misses.push(format!("{word}→{typo}→{other:?}")),
        }
    }
    let share = hits as f64 / total as f64;
    eprintln!(
        "did-you-mean quality: {hits}/{total} = {:.1}% first suggestions restore the word; misses: {misses:?}",
        share * 100.0
    );

    // the generator's realistic misspellings
    let queries = std::fs::read_to_string(ds.path().join("queries.jsonl")).unwrap();
    let (mut n, mut ok) = (0, 0);
    for line in queries.lines() {
        let q: serde_json::Value = serde_json::from_str(line).unwrap();
        if q["_class"] != "didyoumean" {
            continue;
        }
        let (dim, query, orig) = (
            q["dimension"].as_str().unwrap(),
            q["query"].as_str().unwrap(),
            q["_original"].as_str().unwrap(),
        );
        n += 1;
        let got = first_suggestion(e.port, dim, query);
        if got.as_deref().map(str::to_lowercase) == Some(orig.to_lowercase()) {
            ok += 1;
        }
    }
    eprintln!(
        "did-you-mean on the generator's misspellings: {ok}/{n} = {:.1}%",
        100.0 * ok as f64 / n.max(1) as f64
    );
    assert!(share >= 0.9, "only {:.1}% restored", share * 100.0);
}
