//! What extraction costs per record, on one core: `index_values` (every dimension's
//! values; text analysed) and `Snapshot::number_text` (a text's tokens numbered), and the
//! two in one pass as the engine runs them (`Snapshot::indexed_values`), over the
//! set-items of a real changeset, three rounds; and what text analysis alone reaches, in
//! MB/s of the text fields' strings. Measurements, not checks:
//!
//! ```sh
//! XT_FILE=/tmp/ds100k/bulk.xml XT_DIMS=/tmp/ds100k/dimensions.xml \
//!     cargo test --release -p discern-engine --test extract_throughput -- --ignored --nocapture
//! ```
//!
//! (The whole file is held in memory with its records: a 40 MB part of a bulk file is
//! plenty.)

use std::sync::Arc;

// the engine's allocator, as in the server
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The dimensions named by `XT_DIMS` and the set-items' records of the changeset named
/// by `XT_FILE`; `None` without them.
fn inputs() -> Option<(discern_dimensions::Dimensions, Vec<discern_model::Record>)> {
    let (Ok(path), Ok(dims)) = (std::env::var("XT_FILE"), std::env::var("XT_DIMS")) else {
        return None;
    };
    let dims = std::fs::read(dims).expect("readable dimensions");
    let dims = discern_dimensions::Dimensions::parse(&dims).expect("valid dimensions");
    let bytes = std::fs::read(&path).expect("readable changeset");
    let mut records = Vec::new();
    discern_changeset::read_changeset::<_, discern_changeset::ParseError>(&bytes[..], |a| {
        if let discern_changeset::Action::Set { record, .. } = a {
            records.push(record);
        }
        Ok(())
    })
    .expect("valid changeset");
    Some((dims, records))
}

#[test]
#[ignore]
fn extract_throughput() {
    let Some((dims, records)) = inputs() else {
        return;
    };
    let dims = Arc::new(dims);
    let n = records.len().max(1) as f64;
    // (one snapshot for every round: the later rounds number known tokens, as a
    // running engine mostly does)
    let snap = discern_index::Snapshot::empty(dims.clone());
    for round in 0..3 {
        let started = std::time::Instant::now();
        let mut values: Vec<_> = records
            .iter()
            .map(|r| discern_index::index_values(&dims, r).0)
            .collect();
        let extracted = started.elapsed().as_secs_f64();
        let started = std::time::Instant::now();
        values.iter_mut().for_each(|v| snap.number_text(v));
        let numbered = started.elapsed().as_secs_f64();
        let started = std::time::Instant::now();
        let at_once: Vec<_> = records.iter().map(|r| snap.indexed_values(r).0).collect();
        let in_one_pass = started.elapsed().as_secs_f64();
        drop(at_once);
        println!(
            "round {round}: {} records, index_values {:.2} µs + number_text {:.2} µs; \
             indexed_values {:.2} µs a record",
            records.len(),
            extracted * 1e6 / n,
            numbered * 1e6 / n,
            in_one_pass * 1e6 / n
        );
    }
}

#[test]
#[ignore]
fn analysis_throughput() {
    let Some((dims, records)) = inputs() else {
        return;
    };
    let fields: Vec<_> = dims
        .dims
        .iter()
        .filter_map(|d| match &d.kind {
            discern_dimensions::DimensionKind::Text(spec) => Some(spec.fields.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    // (each text field's strings with the field's analyser)
    let mut texts = Vec::new();
    for record in &records {
        for field in &fields {
            for key in &field.keys {
                if let Some(discern_model::Value::Str(s)) = record.get(key) {
                    texts.push((&field.analyzer, s.as_str()));
                }
            }
        }
    }
    let total: usize = texts.iter().map(|(_, s)| s.len()).sum();
    for round in 0..3 {
        let started = std::time::Instant::now();
        let mut token_bytes = 0usize;
        for (analyzer, s) in &texts {
            analyzer.for_each_token(s, |token| token_bytes += token.len());
        }
        let took = started.elapsed().as_secs_f64();
        println!(
            "round {round}: {} strings, {total} bytes ({token_bytes} in tokens): {:.0} MB/s",
            texts.len(),
            total as f64 / took / 1e6
        );
    }
}
