//! The built-in demo data set: a few thousand real-estate listings generated from a
//! fixed seed, so every run serves the same items.

use std::sync::Arc;

use discern_changeset::ChangesetWriter;
use discern_engine::discern_store::ChangesetType;
use discern_engine::Engine;
use discern_model::{Record, Value};

pub const DEMO_DIMENSIONS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<dimensions>
  <dimension id="type" type="mutex">
    <element id="sales" name="For sale"/>
    <element id="rentals" name="For rent"/>
  </dimension>
  <dimension id="style" type="keyword" ignoreCase="true"/>
  <dimension id="bedroom" type="integer" min="0" max="20">
    <element id="studio" name="Studio" value="[0,1)"/>
    <element id="1" name="One" value="[1,2)"/>
    <element id="2-3" name="Two or three" value="[2,3]"/>
    <element id="4+" name="Four or more" value="[4,]"/>
  </dimension>
  <dimension id="price" type="integer"/>
  <dimension id="location" type="geoloc" latitude="latitude" longitude="longitude" zipcode="zipcode"/>
  <dimension id="condition" type="ordered">
    <element id="1" name="Poor"/><element id="2" name="Fair"/><element id="3" name="Good"/>
    <element id="4" name="Very good"/><element id="5" name="Excellent"/>
  </dimension>
  <dimension id="listed" type="time" key="listed_at"/>
  <dimension id="description" type="text"/>
</dimensions>
"#;

const ITEMS: usize = 3000;

/// splitmix64: tiny, fixed, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const CITIES: &[(&str, f64, f64, &str)] = &[
    ("New York", 40.7255, -73.9983, "10012"),
    ("Brooklyn", 40.6782, -73.9442, "11201"),
    ("Hoboken", 40.7440, -74.0324, "07030"),
    ("Jersey City", 40.7178, -74.0431, "07302"),
    ("Yonkers", 40.9312, -73.8988, "10701"),
];
const STYLES: &[&str] = &[
    "loft",
    "condo",
    "colonial",
    "victorian",
    "ranch",
    "townhouse",
    "studio",
    "duplex",
];
const ADJ: &[&str] = &[
    "sunny",
    "spacious",
    "renovated",
    "quiet",
    "charming",
    "modern",
    "bright",
    "cozy",
];
const FEATURES: &[&str] = &[
    "terrace",
    "garden",
    "fireplace",
    "doorman",
    "river view",
    "garage",
    "pool",
    "gym",
];

pub fn items() -> Vec<(String, Record)> {
    let mut rng = Rng(42);
    (0..ITEMS)
        .map(|i| {
            let (city, lat, lon, zip) = CITIES[rng.below(CITIES.len() as u64) as usize];
            let rent = rng.below(3) == 0;
            let bedrooms = rng.below(6);
            let price = if rent {
                1200 + rng.below(60) * 50
            } else {
                150_000 + rng.below(400) * 5_000
            };
            let style = rng.pick(STYLES);
            let desc = format!(
                "{} {} {} with {} in {}",
                rng.pick(ADJ),
                bedrooms.max(1),
                style,
                rng.pick(FEATURES),
                city
            );
            let day = 1 + rng.below(28);
            let month = 1 + rng.below(12);
            let mut r = Record::new();
            let s = |x: String| Value::Str(x);
            r.set(
                "type".into(),
                s(if rent { "rentals" } else { "sales" }.into()),
            );
            r.set("style".into(), s(style.into()));
            r.set("bedroom".into(), s(bedrooms.to_string()));
            r.set("price".into(), s(price.to_string()));
            r.set(
                "latitude".into(),
                s(format!(
                    "{:.4}",
                    lat + (rng.below(2000) as f64 - 1000.0) / 20000.0
                )),
            );
            r.set(
                "longitude".into(),
                s(format!(
                    "{:.4}",
                    lon + (rng.below(2000) as f64 - 1000.0) / 20000.0
                )),
            );
            r.set("zipcode".into(), s(zip.into()));
            r.set("condition".into(), s((1 + rng.below(5)).to_string()));
            r.set("listed_at".into(), s(format!("2026-{month:02}-{day:02}")));
            r.set("description".into(), s(desc));
            (format!("L{:05}", i + 1), r)
        })
        .collect()
}

/// Loads the demo data into an empty engine and prints example requests.
pub fn load(engine: &Arc<Engine>, base: &str) -> anyhow::Result<()> {
    let mut guard = engine.lock_writer_blocking();
    let dims = engine.set_dimensions(&mut guard, DEMO_DIMENSIONS.as_bytes())?;
    engine.reindex(&mut guard, dims)?;
    let mut w = ChangesetWriter::new(Vec::new())?;
    for (id, rec) in items() {
        w.set_item(&id, &rec)?;
    }
    let doc = w.finish()?;
    engine.apply(&mut guard, ChangesetType::Bulk, doc.as_slice())?;
    println!("discern demo: {ITEMS} listings loaded; try:");
    println!("  curl -s {base}/ws/query -d '{{\"criteria\": [{{\"dimension\": \"bedroom\", \"value\": 3}}, {{\"dimension\": \"location\", \"zipcode\": \"10012\"}}], \"pageSize\": 5, \"properties\": [\"description\", \"price\"]}}'");
    println!("  curl -s {base}/ws/query -d '{{\"criteria\": [{{\"dimension\": \"description\", \"value\": \"sunny loft terrace\"}}], \"pageSize\": 5}}'");
    println!("  curl -s {base}/ws/item/L00001");
    println!("  curl -s {base}/ws/changeset");
    println!("  curl -s '{base}/ws/export' | head");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn deterministic() {
        assert_eq!(super::items(), super::items());
        assert_eq!(super::items().len(), super::ITEMS);
    }
}
