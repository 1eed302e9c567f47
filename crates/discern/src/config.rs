//! Settings from a properties file, `DISCERN_*` environment variables and flags, in
//! rising precedence (SPEC §1.1).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use discern_engine::Config;

pub struct Settings {
    pub engine: Config,
    pub listen: String,
}

const KEYS: &[&str] = &[
    "port",
    "listen",
    "data-dir",
    "feed",
    "feed-interval",
    "max-paged-docs",
    "admin-token",
    "max-changeset-bytes",
    "retain-snapshots",
    "queryable-while-replaying",
    "store-cache",
    "index-save-idle",
    "bootstrap-images",
];

/// Parses a Java-style properties file: `key = value`, `key: value`, `#`/`!` comments.
pub fn parse_properties(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with('!') {
            continue;
        }
        let sep = l.find(['=', ':']).unwrap_or(l.len());
        let key = l[..sep].trim();
        let value = if sep < l.len() {
            l[sep + 1..].trim()
        } else {
            ""
        };
        if !key.is_empty() {
            out.insert(key.to_string(), value.to_string());
        }
    }
    out
}

/// A boolean setting's value, `true` or `false`; anything else an error naming `key`.
fn parse_bool(key: &str, v: &str) -> anyhow::Result<bool> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => bail!("{key} = {v:?}: expected true or false"),
    }
}

/// `4 GiB`, `2000`, `16MiB` → bytes.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let (num, mult) = [
        ("KiB", 1u64 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("KB", 1000),
        ("MB", 1_000_000),
        ("GB", 1_000_000_000),
    ]
    .iter()
    .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n.trim(), *m)))
    .unwrap_or((t, 1));
    let n: u64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a size"))?;
    Ok(n.saturating_mul(mult))
}

impl Settings {
    pub fn load(
        file: Option<&Path>,
        data_dir: Option<PathBuf>,
        listen: Option<String>,
    ) -> anyhow::Result<Settings> {
        let mut props = match file {
            Some(f) => parse_properties(
                &std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
            ),
            None => HashMap::new(),
        };
        for key in KEYS {
            let env = format!("DISCERN_{}", key.to_ascii_uppercase().replace('-', "_"));
            if let Ok(v) = std::env::var(&env) {
                props.insert(key.to_string(), v);
            }
        }
        let mut c = Config::default();
        let get = |k: &str| props.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
        if let Some(v) = get("data-dir") {
            c.data_dir = PathBuf::from(v);
        }
        if let Some(v) = get("max-paged-docs") {
            c.max_paged_docs = v
                .parse()
                .with_context(|| format!("max-paged-docs = {v:?}"))?;
        }
        if let Some(v) = get("max-changeset-bytes") {
            c.max_changeset_bytes =
                parse_size(v).with_context(|| format!("max-changeset-bytes = {v:?}"))?;
        }
        if let Some(v) = get("store-cache") {
            c.store_cache_bytes = parse_size(v).with_context(|| format!("store-cache = {v:?}"))?;
        }
        if let Some(v) = get("retain-snapshots") {
            c.retain_snapshots = v
                .parse()
                .with_context(|| format!("retain-snapshots = {v:?}"))?;
        }
        if let Some(v) = get("bootstrap-images") {
            c.bootstrap_images = parse_bool("bootstrap-images", v)?;
        }
        if let Some(v) = get("queryable-while-replaying") {
            c.queryable_while_replaying = parse_bool("queryable-while-replaying", v)?;
        }
        c.admin_token = get("admin-token").map(str::to_string);
        c.feed = get("feed").map(str::to_string);
        if let Some(v) = get("index-save-idle") {
            c.index_save_idle_ms = v
                .parse()
                .with_context(|| format!("index-save-idle = {v:?}"))?;
        }
        if let Some(v) = get("feed-interval") {
            c.feed_interval_ms = v
                .parse()
                .with_context(|| format!("feed-interval = {v:?}"))?;
        }
        let mut addr = "127.0.0.1:8090".to_string();
        if let Some(p) = get("port") {
            let port: u16 = p.parse().with_context(|| format!("port = {p:?}"))?;
            addr = format!("127.0.0.1:{port}");
        }
        if let Some(l) = get("listen") {
            addr = l.to_string();
        }
        if let Some(d) = data_dir {
            c.data_dir = d;
        }
        if let Some(l) = listen {
            addr = l;
        }
        Ok(Settings {
            engine: c,
            listen: addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_forms() {
        let p = parse_properties(
            "# c\n#admin-token = no\nadmin-token: tok123\nmax-paged-docs   =   4\n\n",
        );
        assert_eq!(p.get("admin-token").map(String::as_str), Some("tok123"));
        assert_eq!(p.get("max-paged-docs").map(String::as_str), Some("4"));
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn store_cache_from_file_and_bad_value_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("discern.properties");
        std::fs::write(&f, "store-cache = 64 MiB\n").unwrap();
        let s = Settings::load(Some(&f), None, None).unwrap();
        assert_eq!(s.engine.store_cache_bytes, 64 << 20);
        assert_eq!(Config::default().store_cache_bytes, 16 << 20);
        std::fs::write(&f, "store-cache = lots\n").unwrap();
        let err = format!("{:#}", Settings::load(Some(&f), None, None).err().unwrap());
        assert!(err.contains("store-cache"), "{err}");
    }

    /// The boolean settings take `true` or `false` and name themselves on anything else.
    #[test]
    fn booleans_from_file_and_bad_value_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("discern.properties");
        let both = "bootstrap-images = true\nqueryable-while-replaying = true\n";
        std::fs::write(&f, both).unwrap();
        let s = Settings::load(Some(&f), None, None).unwrap();
        assert!(s.engine.bootstrap_images);
        assert!(s.engine.queryable_while_replaying);
        for key in ["bootstrap-images", "queryable-while-replaying"] {
            std::fs::write(&f, format!("{key} = yes\n")).unwrap();
            let err = format!("{:#}", Settings::load(Some(&f), None, None).err().unwrap());
            assert!(err.contains(key) && err.contains("yes"), "{err}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4 GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("2000").unwrap(), 2000);
        assert!(parse_size("lots").is_err());
    }
}
