//! `/ws/export` over real HTTP with more results than one formatting block: every
//! result exactly once, each with its source as the item store holds it — for results
//! that are much of the collection (put in id order, read with store cursors), whether
//! they arrived in id order or not, and for a few (read by id).

mod common;

use common::{post_ok, request, start, wait_queryable};
use std::collections::BTreeMap;
use std::time::Duration;

/// Item `iNNNNN`'s `kind`; some need JSON escapes.
fn kind(i: usize) -> String {
    match i % 5 {
        0 => "b".to_string(),
        1 => format!("quote\" back\\slash tab\t{i}"),
        _ => format!("a{i}"),
    }
}

fn changeset(ids: impl Iterator<Item = usize>) -> Vec<u8> {
    let mut cs = String::from("<changeset>\n");
    for i in ids {
        let k = kind(i).replace('"', "&quot;").replace('\t', "&#9;");
        cs.push_str(&format!("<set-item id=\"i{i:05}\"><properties><struct><entry name=\"kind\"><string>{k}</string></entry><entry name=\"n\"><string>{i}</string></entry></struct></properties></set-item>\n"));
    }
    cs.push_str("</changeset>\n");
    cs.into_bytes()
}

/// The exported items (number → exact), after checking the layout and every source.
fn exported(port: u16, method: &str, body: &[u8]) -> BTreeMap<usize, bool> {
    let (s, out) = request(port, method, "/ws/export", body).unwrap();
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&out));
    let text = std::str::from_utf8(&out).unwrap();
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(
        lines[0].starts_with("{\"format\":[\"meta\""),
        "{}",
        lines[0]
    );
    // the body ends with an empty line: the split's last two pieces are empty
    assert_eq!(&lines[lines.len() - 2..], ["", ""]);
    let items = &lines[1..lines.len() - 2];
    assert_eq!(items.len() % 2, 0);
    let mut seen = BTreeMap::new();
    for pair in items.chunks(2) {
        let meta: serde_json::Value = serde_json::from_str(pair[0]).unwrap();
        let source: serde_json::Value = serde_json::from_str(pair[1]).unwrap();
        let id = meta["id"].as_str().unwrap();
        assert_eq!(source["_id"], id);
        let i: usize = id[1..].parse().unwrap();
        assert_eq!(source["kind"], kind(i), "{id}");
        assert_eq!(source["n"], i.to_string(), "{id}");
        let exact = meta["exact"].as_bool().unwrap_or(true);
        assert!(seen.insert(i, exact).is_none(), "{id} exported twice");
    }
    seen
}

#[test]
fn export_many_blocks_every_item_once_with_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let e = start(dir.path());
    post_ok(
        e.port,
        "/ws/dimensions",
        b"<dimensions><dimension id=\"n\" type=\"integer\"/></dimensions>",
    );
    // first in id order: results come in id order, read with cursors
    post_ok(e.port, "/ws/changeset", &changeset(0..10_000));
    wait_queryable(e.port, Duration::from_secs(60));
    let all = exported(e.port, "GET", b"");
    assert!(all.keys().copied().eq(0..10_000));
    assert!(all.values().all(|&exact| exact));

    // then shuffled: documents are no longer in id order; the results are sorted
    post_ok(
        e.port,
        "/ws/changeset",
        &changeset((0..10_000).map(|i| 10_000 + i * 7_919 % 10_000)),
    );
    let all = exported(e.port, "GET", b"");
    assert!(all.keys().copied().eq(0..20_000));
    // (read in id order, the store's: the order SPEC §8 leaves open, chosen for speed)
    let (_, out) = request(e.port, "GET", "/ws/export", b"").unwrap();
    let ids: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("{\"id\":\""))
        .map(|l| l[..l.find('"').unwrap()].to_string())
        .collect();
    assert_eq!(ids.len(), 20_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));

    // with criteria: the query's results, exactness as the query decides it
    let query = br#"{"criteria":[{"dimension":"n","value":"[5000,14999]"}],"sources":true}"#;
    let some = exported(e.port, "POST", query);
    assert!(some.keys().copied().eq(0..20_000));
    assert!(some
        .iter()
        .all(|(&i, &exact)| exact == (5_000..15_000).contains(&i)));
    let query = br#"{"criteria":[{"dimension":"n","value":"[5000,14999]"}],"sources":true,"exactMatchesOnly":true}"#;
    let exact = exported(e.port, "POST", query);
    assert!(exact.keys().copied().eq(5_000..15_000));

    // a few results, some of the shuffled ones among them: read by id
    let query = br#"{"criteria":[{"dimension":"n","value":"[9900,10099]"}],"sources":true,"exactMatchesOnly":true}"#;
    let few = exported(e.port, "POST", query);
    assert!(few.keys().copied().eq(9_900..10_100));
}
