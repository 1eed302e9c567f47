//! The statistics registry (SPEC §11): timing/size series in the original engine's
//! `name: value` format, plus counters read from the engine when fetched.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

/// One recorded series: count, sum, min, max and Welford's running variance.
#[derive(Default, Clone, Copy)]
pub struct Series {
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
    mean: f64,
    m2: f64,
}

impl Series {
    fn record(&mut self, x: f64) {
        if self.n == 0 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        self.n += 1;
        self.sum += x;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
}

/// Integer form when the value is one (`91`), else Java's double form.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        float(x)
    }
}

/// Java's `Double.toString` for ordinary magnitudes (`70.0`, `29.698484809834994`).
fn float(x: f64) -> String {
    format!("{x:?}")
}

/// Lines of one sub-series (`prefix` = `query.regular.size`), without its count.
fn series_lines(prefix: &str, s: &Series, out: &mut Vec<(String, String)>) {
    if s.n == 1 {
        out.push((format!("{prefix}.mean"), num(s.mean)));
    } else {
        let var = s.m2 / (s.n - 1) as f64;
        out.push((format!("{prefix}.mean"), float(s.sum / s.n as f64)));
        out.push((format!("{prefix}.min"), num(s.min)));
        out.push((format!("{prefix}.max"), num(s.max)));
        out.push((format!("{prefix}.variance"), float(var)));
        out.push((format!("{prefix}.stddev"), float(var.sqrt())));
    }
    out.push((format!("{prefix}.sum"), num(s.sum)));
}

/// A family of one or more sub-series recorded together (`query.regular` has `size`
/// and `time`; `checkpoint` has `time` only).
#[derive(Default)]
struct Family {
    subs: BTreeMap<&'static str, Series>,
    /// Extra plain sums in the family (`changeset.delta.compressed.sum`).
    sums: BTreeMap<&'static str, f64>,
}

#[derive(Default)]
pub struct Statistics {
    families: Mutex<BTreeMap<String, Family>>,
}

/// Group names in the order `/ws/statistics` lists them (the `index.query.<type>`
/// groups follow).
pub const GROUPS: &[&str] = &[
    "http",
    "changeset",
    "item",
    "checkpoint",
    "changeset.apply",
    "index",
    "query",
    "json",
];

impl Statistics {
    /// Records one observation per sub-series of a family, e.g.
    /// `record("query.regular", &[("size", 2255.0), ("time", 9.0)])`.
    pub fn record(&self, family: &str, values: &[(&'static str, f64)]) {
        let mut fams = self.families.lock();
        let f = fams.entry(family.to_string()).or_default();
        for (sub, v) in values {
            f.subs.entry(sub).or_default().record(*v);
        }
    }

    pub fn add_sum(&self, family: &str, name: &'static str, v: f64) {
        let mut fams = self.families.lock();
        *fams
            .entry(family.to_string())
            .or_default()
            .sums
            .entry(name)
            .or_default() += v;
    }

    /// Every recorded line, families sorted by name.
    pub fn lines(&self, mut extra: Vec<(String, String)>) -> Vec<(String, String)> {
        let fams = self.families.lock();
        let mut out = Vec::new();
        for (name, f) in fams.iter() {
            let mut lines = Vec::new();
            let count = f.subs.values().map(|s| s.n).max().unwrap_or(0);
            if f.subs.len() > 1 {
                lines.push((format!("{name}.count"), count.to_string()));
                for (sub, s) in &f.subs {
                    series_lines(&format!("{name}.{sub}"), s, &mut lines);
                }
            } else if let Some((sub, s)) = f.subs.iter().next() {
                // "" = the family is the series itself (`json.success.count`)
                let prefix = if sub.is_empty() {
                    name.clone()
                } else {
                    format!("{name}.{sub}")
                };
                lines.push((format!("{prefix}.count"), s.n.to_string()));
                series_lines(&prefix, s, &mut lines);
            }
            for (k, v) in &f.sums {
                lines.push((format!("{name}.{k}.sum"), num(*v)));
            }
            out.push((name.clone(), lines));
        }
        drop(fams);
        // counters are single-line families
        for (k, v) in extra.drain(..) {
            out.push((k.clone(), vec![(k, v)]));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().flat_map(|(_, l)| l).collect()
    }
}

/// The group a line belongs to: the longest group name that prefixes it.
pub fn group_of<'a>(line: &str, groups: &'a [String]) -> Option<&'a str> {
    groups
        .iter()
        .filter(|g| line.starts_with(&format!("{g}.")))
        .max_by_key(|g| g.len())
        .map(|g| g.as_str())
}

impl crate::Engine {
    /// Every statistics line (SPEC §11): recorded series plus current counters.
    pub fn statistics_lines(&self) -> Vec<(String, String)> {
        let snap = self.snapshot();
        let index_count: usize = snap
            .dims
            .dims
            .iter()
            .map(|d| match &d.kind {
                discern_dimensions::DimensionKind::Text(t) => t.fields.len(),
                _ => 1,
            })
            .sum();
        let c = &self.counters;
        let counters = vec![
            (
                "changeset.apply.count".to_string(),
                c.applied.load(Ordering::Relaxed).to_string(),
            ),
            (
                "changeset.apply.created.sum".to_string(),
                c.created.load(Ordering::Relaxed).to_string(),
            ),
            (
                "changeset.apply.deleted.sum".to_string(),
                c.deleted.load(Ordering::Relaxed).to_string(),
            ),
            (
                "changeset.apply.modified.sum".to_string(),
                c.modified.load(Ordering::Relaxed).to_string(),
            ),
            ("index.count".to_string(), index_count.to_string()),
            ("index.items".to_string(), snap.len().to_string()),
            (
                "item.count".to_string(),
                self.store.item_count().unwrap_or(0).to_string(),
            ),
            ("item.disk".to_string(), self.store.disk_size().to_string()),
            (
                "item.errors".to_string(),
                self.item_errors.load(Ordering::Relaxed).to_string(),
            ),
        ];
        self.stats.lines(counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_original() {
        let s = Statistics::default();
        s.record("query.regular", &[("size", 22555.0), ("time", 91.0)]);
        let one: Vec<String> = s
            .lines(vec![])
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert_eq!(
            one,
            [
                "query.regular.count: 1",
                "query.regular.size.mean: 22555",
                "query.regular.size.sum: 22555",
                "query.regular.time.mean: 91",
                "query.regular.time.sum: 91"
            ]
        );
        s.record("query.regular", &[("size", 22557.0), ("time", 49.0)]);
        let two: Vec<String> = s
            .lines(vec![])
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert_eq!(
            two,
            [
                "query.regular.count: 2",
                "query.regular.size.mean: 22556.0",
                "query.regular.size.min: 22555",
                "query.regular.size.max: 22557",
                "query.regular.size.variance: 2.0",
                "query.regular.size.stddev: 1.4142135623730951",
                "query.regular.size.sum: 45112",
                "query.regular.time.mean: 70.0",
                "query.regular.time.min: 49",
                "query.regular.time.max: 91",
                "query.regular.time.variance: 882.0",
                "query.regular.time.stddev: 29.698484809834994",
                "query.regular.time.sum: 140"
            ]
        );
    }
}
