//! Geographic references and great-circle distances (SPEC §7.2 geoloc).

use discern_model::Result;
use serde_json::{Map, Value as J};

use crate::query::{as_f64, bad, member, text_of};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    Miles,
    Km,
}

impl Unit {
    pub fn parse(s: &str) -> Option<Unit> {
        match s.to_ascii_lowercase().as_str() {
            "miles" | "mile" | "mi" => Some(Unit::Miles),
            "km" | "kilometers" | "kilometres" => Some(Unit::Km),
            _ => None,
        }
    }
    pub fn earth_radius(self) -> f64 {
        match self {
            Unit::Miles => 3958.8,
            Unit::Km => 6371.0,
        }
    }
}

pub fn haversine(lat1: f64, lon1: f64, lat2: f64, lon2: f64, unit: Unit) -> f64 {
    haversine_pre(&GeoPoint::new(lat1, lon1), &GeoPoint::new(lat2, lon2), unit)
}

/// A point with its latitude in radians and that latitude's cosine, computed once for
/// the many distances it takes part in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeoPoint {
    pub lon: f64,
    pub phi: f64,
    pub cos_phi: f64,
}

impl GeoPoint {
    pub fn new(lat: f64, lon: f64) -> GeoPoint {
        let phi = lat.to_radians();
        GeoPoint {
            lon,
            phi,
            cos_phi: phi.cos(),
        }
    }
}

/// The haversine distance; bit for bit the same as `haversine` on the same points.
#[inline]
pub fn haversine_pre(a: &GeoPoint, b: &GeoPoint, unit: Unit) -> f64 {
    distance_of_term(haversine_term(a, b), unit)
}

/// The haversine term `h` of the distance between `a` and `b`. The distance,
/// `distance_of_term(h)`, never decreases as `h` grows: the nearest of many points is
/// the one with the least `h`, and only its distance need be computed.
#[inline]
fn haversine_term(a: &GeoPoint, b: &GeoPoint) -> f64 {
    let dp = b.phi - a.phi;
    let dl = (b.lon - a.lon).to_radians();
    (dp / 2.0).sin().powi(2) + a.cos_phi * b.cos_phi * (dl / 2.0).sin().powi(2)
}

#[inline]
fn distance_of_term(h: f64, unit: Unit) -> f64 {
    2.0 * unit.earth_radius() * h.sqrt().min(1.0).asin()
}

type Ring = Vec<(f64, f64)>; // (lat, lon)

/// A reference: points, lines and polygons (each polygon = outer ring + holes).
#[derive(Debug, Default, Clone)]
pub struct GeoRef {
    points: Vec<(f64, f64)>,
    lines: Vec<Ring>,
    polygons: Vec<Vec<Ring>>,
}

/// Relative and absolute slack of `GeoRef::distance_floor` below the computed distance:
/// far above the rounding of `haversine_pre`, whose worst case (points nearly antipodal,
/// where `asin` is steep) is a relative ~1e-8.
pub(crate) const FLOOR_SLACK: f64 = 1e-6;

/// No computed distance exceeds this: half the circumference, with the same slack.
pub fn max_distance(unit: Unit) -> f64 {
    std::f64::consts::PI * unit.earth_radius() * (1.0 + FLOOR_SLACK)
}

impl GeoRef {
    /// The reference of one point.
    #[cfg(test)]
    pub(crate) fn of_point(lat: f64, lon: f64) -> GeoRef {
        GeoRef {
            points: vec![(lat, lon)],
            ..Default::default()
        }
    }

    /// The reference's point when it is exactly one point.
    pub(crate) fn single_point(&self) -> Option<(f64, f64)> {
        match (
            &self.points[..],
            self.lines.is_empty(),
            self.polygons.is_empty(),
        ) {
            (&[p], true, true) => Some(p),
            _ => None,
        }
    }

    /// The latitude bands, in radians, that hold the nearest point of the reference to
    /// any place (from `boxes`), for `distance_floor`.
    pub fn lat_bands(&self) -> Vec<(f64, f64)> {
        self.boxes()
            .iter()
            .map(|b| (b.0.to_radians(), b.1.to_radians()))
            .collect()
    }

    /// A distance from `p` no greater than the one `distance_pre` computes, without
    /// trigonometry: that distance is a haversine to a point of one of `bands` (the
    /// reference's `lat_bands`), so at least the earth's radius times the difference
    /// in latitude (radians) to the nearest band — here less a slack that covers the
    /// computed distance's rounding.
    #[inline]
    pub fn distance_floor(p: &GeoPoint, bands: &[(f64, f64)], unit: Unit) -> f64 {
        let dphi = bands
            .iter()
            .map(|&(lo, hi)| {
                if p.phi < lo {
                    lo - p.phi
                } else if p.phi > hi {
                    p.phi - hi
                } else {
                    0.0
                }
            })
            .fold(f64::INFINITY, f64::min);
        (unit.earth_radius() * dphi * (1.0 - FLOOR_SLACK) - 1e-9).max(0.0)
    }

    pub fn is_area(&self) -> bool {
        !self.polygons.is_empty() && self.points.is_empty() && self.lines.is_empty()
    }

    /// Latitude/longitude boxes `(lat_lo, lat_hi, lon_lo, lon_hi)` holding the nearest
    /// point of the reference to any place: each point alone, and each line's and
    /// polygon's vertex box (`polyline_distance` measures to a point interpolated between
    /// two vertices in latitude and longitude, and `inside` holds only places within the
    /// rings' box).
    pub(crate) fn boxes(&self) -> Vec<(f64, f64, f64, f64)> {
        let vertex_box = |rings: &mut dyn Iterator<Item = &Ring>| {
            let mut b = (
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::NEG_INFINITY,
            );
            for &(lat, lon) in rings.flatten() {
                b = (b.0.min(lat), b.1.max(lat), b.2.min(lon), b.3.max(lon));
            }
            b
        };
        let mut out: Vec<(f64, f64, f64, f64)> = self
            .points
            .iter()
            .map(|&(la, lo)| (la, la, lo, lo))
            .collect();
        out.extend(
            self.lines
                .iter()
                .map(|l| vertex_box(&mut std::iter::once(l))),
        );
        out.extend(self.polygons.iter().map(|p| vertex_box(&mut p.iter())));
        out.retain(|b| b.0 <= b.1 && b.2 <= b.3);
        out
    }

    /// The reference's points when it has nothing else (lines, polygons).
    pub fn only_points(&self) -> Option<&[(f64, f64)]> {
        (self.lines.is_empty() && self.polygons.is_empty()).then_some(self.points.as_slice())
    }

    /// The distance from `p` when the reference is only points (`pre`: those points as
    /// `GeoPoint`s); else the general distance.
    #[inline]
    pub fn distance_pre(&self, p: &GeoPoint, lat: f64, pre: &[GeoPoint], unit: Unit) -> f64 {
        if !self.lines.is_empty() || !self.polygons.is_empty() {
            return self.distance(lat, p.lon, unit);
        }
        pre.iter()
            .map(|q| haversine_pre(p, q, unit))
            .fold(f64::INFINITY, f64::min)
    }

    /// The reference's points as `GeoPoint`s.
    pub fn geo_points(&self) -> Vec<GeoPoint> {
        self.points
            .iter()
            .map(|&(a, b)| GeoPoint::new(a, b))
            .collect()
    }

    /// Distance from (lat, lon) to the nearest part of the reference (0 inside a polygon).
    pub fn distance(&self, lat: f64, lon: f64, unit: Unit) -> f64 {
        let mut d = f64::INFINITY;
        for &(a, b) in &self.points {
            d = d.min(haversine(lat, lon, a, b, unit));
        }
        for line in &self.lines {
            d = d.min(polyline_distance(line, lat, lon, unit));
        }
        for poly in &self.polygons {
            if inside(poly, lat, lon) {
                return 0.0;
            }
            for ring in poly {
                d = d.min(polyline_distance(ring, lat, lon, unit));
            }
        }
        d
    }

    pub fn parse(obj: &Map<String, J>, path: &str) -> Result<Option<GeoRef>> {
        let mut r = GeoRef::default();
        let p = |n: &str| format!("{path}.{n}");
        match (member(obj, "latitude"), member(obj, "longitude")) {
            (Some(J::Array(la)), Some(J::Array(lo))) => {
                if la.len() != lo.len() {
                    return Err(bad(
                        &p("latitude"),
                        "latitude and longitude arrays differ in length",
                    ));
                }
                for (i, (a, b)) in la.iter().zip(lo).enumerate() {
                    let lat = as_f64(a, &format!("{path}.latitude[{i}]"))?;
                    let lon = as_f64(b, &format!("{path}.longitude[{i}]"))?;
                    r.points.push(check_point(lat, lon, path)?);
                }
            }
            (Some(a), Some(b)) => {
                let lat = as_f64(a, &p("latitude"))?;
                let lon = as_f64(b, &p("longitude"))?;
                r.points.push(check_point(lat, lon, path)?);
            }
            (Some(_), None) => {
                return Err(bad(&p("longitude"), "latitude given without longitude"))
            }
            (None, Some(_)) => return Err(bad(&p("latitude"), "longitude given without latitude")),
            (None, None) => {}
        }
        if let Some(z) = member(obj, "zipcode") {
            let zips: Vec<String> = match z {
                J::Array(a) => a.iter().map(text_of).collect(),
                other => vec![text_of(other)],
            };
            for zc in zips {
                match discern_dimensions::zip::centroid(&zc) {
                    Some(pt) => r.points.push(pt),
                    None => return Err(bad(&p("zipcode"), format!("unknown US ZIP code {zc:?}"))),
                }
            }
        }
        if let Some(g) = member(obj, "placemarks") {
            r.add_geojson(g, &p("placemarks"), 0)?;
        }
        if let Some(s) = member(obj, "shapes") {
            let J::Array(shapes) = s else {
                return Err(bad(&p("shapes"), "expected an array"));
            };
            for (i, sh) in shapes.iter().enumerate() {
                let sp = format!("{path}.shapes[{i}]");
                let (Some(J::Array(la)), Some(J::Array(lo))) =
                    (sh.get("latitude"), sh.get("longitude"))
                else {
                    return Err(bad(&sp, "a shape needs latitude and longitude arrays"));
                };
                if la.len() != lo.len() || la.len() < 3 {
                    return Err(bad(
                        &sp,
                        "a shape needs at least 3 points in equal-length arrays",
                    ));
                }
                let mut ring = Vec::new();
                for (a, b) in la.iter().zip(lo) {
                    ring.push((as_f64(a, &sp)?, as_f64(b, &sp)?));
                }
                r.polygons.push(vec![ring]);
            }
        }
        if r.points.is_empty() && r.lines.is_empty() && r.polygons.is_empty() {
            return Ok(None);
        }
        Ok(Some(r))
    }

    fn add_geojson(&mut self, g: &J, path: &str, depth: usize) -> Result<()> {
        if depth > 8 {
            return Err(bad(path, "GeoJSON nested too deep"));
        }
        match g {
            J::Array(items) => {
                for (i, it) in items.iter().enumerate() {
                    self.add_geojson(it, &format!("{path}[{i}]"), depth + 1)?;
                }
                return Ok(());
            }
            J::Object(_) => {}
            other => {
                return Err(bad(
                    path,
                    format!("expected a GeoJSON geometry, got {other}"),
                ))
            }
        }
        let ty = g.get("type").and_then(J::as_str).unwrap_or("");
        let coords = g.get("coordinates");
        let need = || bad(path, format!("GeoJSON {ty} needs coordinates"));
        match ty {
            "Feature" => {
                return self.add_geojson(
                    g.get("geometry").unwrap_or(&J::Null),
                    &format!("{path}.geometry"),
                    depth + 1,
                )
            }
            "FeatureCollection" => {
                return self.add_geojson(
                    g.get("features").unwrap_or(&J::Null),
                    &format!("{path}.features"),
                    depth + 1,
                )
            }
            "GeometryCollection" => {
                return self.add_geojson(
                    g.get("geometries").unwrap_or(&J::Null),
                    &format!("{path}.geometries"),
                    depth + 1,
                )
            }
            "Point" => self.points.push(position(coords.ok_or_else(need)?, path)?),
            "MultiPoint" => self
                .points
                .extend(positions(coords.ok_or_else(need)?, path)?),
            "LineString" => self.lines.push(positions(coords.ok_or_else(need)?, path)?),
            "MultiLineString" => {
                for l in array(coords.ok_or_else(need)?, path)? {
                    self.lines.push(positions(l, path)?);
                }
            }
            "Polygon" => self.polygons.push(rings(coords.ok_or_else(need)?, path)?),
            "MultiPolygon" => {
                for poly in array(coords.ok_or_else(need)?, path)? {
                    self.polygons.push(rings(poly, path)?);
                }
            }
            other => return Err(bad(path, format!("unsupported GeoJSON type {other:?}"))),
        }
        Ok(())
    }
}

fn check_point(lat: f64, lon: f64, path: &str) -> Result<(f64, f64)> {
    if lat.abs() > 90.0 || lon.abs() > 180.0 {
        return Err(bad(
            path,
            format!("({lat}, {lon}) is not a valid coordinate"),
        ));
    }
    Ok((lat, lon))
}

fn array<'a>(v: &'a J, path: &str) -> Result<&'a Vec<J>> {
    v.as_array()
        .ok_or_else(|| bad(path, "expected GeoJSON coordinates array"))
}

fn position(v: &J, path: &str) -> Result<(f64, f64)> {
    let a = array(v, path)?;
    if a.len() < 2 {
        return Err(bad(path, "a GeoJSON position needs [lon, lat]"));
    }
    check_point(as_f64(&a[1], path)?, as_f64(&a[0], path)?, path)
}

fn positions(v: &J, path: &str) -> Result<Ring> {
    array(v, path)?.iter().map(|p| position(p, path)).collect()
}

fn rings(v: &J, path: &str) -> Result<Vec<Ring>> {
    array(v, path)?.iter().map(|r| positions(r, path)).collect()
}

/// Even-odd rule over all rings (holes subtract).
fn inside(poly: &[Ring], lat: f64, lon: f64) -> bool {
    let mut inside = false;
    for ring in poly {
        let n = ring.len();
        if n < 3 {
            continue;
        }
        let mut j = n - 1;
        for i in 0..n {
            let (yi, xi) = ring[i];
            let (yj, xj) = ring[j];
            if (yi > lat) != (yj > lat) && lon < (xj - xi) * (lat - yi) / (yj - yi) + xi {
                inside = !inside;
            }
            j = i;
        }
    }
    inside
}

/// Distance to the nearest point of a polyline, projecting in a local equirectangular
/// frame and measuring the great-circle distance to the projected point.
fn polyline_distance(line: &[(f64, f64)], lat: f64, lon: f64, unit: Unit) -> f64 {
    if line.len() == 1 {
        return haversine(lat, lon, line[0].0, line[0].1, unit);
    }
    let p = GeoPoint::new(lat, lon);
    let k = p.cos_phi.max(1e-6);
    let term = |a: (f64, f64), b: (f64, f64)| {
        let (cy, cx) = nearest_on_segment(a, b, lat, lon, k);
        haversine_term(&p, &GeoPoint::new(cy, cx))
    };
    // The least term, then one distance (`haversine_term`). Segments whose box puts
    // them no nearer than the best so far are skipped: their term could not be less.
    let segments = line.len() - 1;
    if segments > BOUNDED_SEGMENTS {
        let best = line
            .windows(2)
            .map(|w| term(w[0], w[1]))
            .fold(f64::INFINITY, f64::min);
        return distance_of_term(best, unit);
    }
    let mut bounds = [0.0f64; BOUNDED_SEGMENTS];
    for (i, w) in line.windows(2).enumerate() {
        bounds[i] = segment_term_bound(&p, lat, lon, w[0], w[1]);
    }
    let bounds = &bounds[..segments];
    let mut first = 0;
    for (i, &b) in bounds.iter().enumerate() {
        if b < bounds[first] {
            first = i;
        }
    }
    let mut best = term(line[first], line[first + 1]);
    for (i, &b) in bounds.iter().enumerate() {
        // (the margin covers the rounding of both the bound and the terms)
        if i != first && b < best * (1.0 + 1e-9) {
            best = best.min(term(line[i], line[i + 1]));
        }
    }
    distance_of_term(best, unit)
}

/// The point of segment `a`–`b` nearest to (`lat`, `lon`) in a local equirectangular
/// frame (longitudes scaled by `k`, the cosine of `lat`).
fn nearest_on_segment(a: (f64, f64), b: (f64, f64), lat: f64, lon: f64, k: f64) -> (f64, f64) {
    let (ay, ax) = (a.0, a.1 * k);
    let (by, bx) = (b.0, b.1 * k);
    let (py, px) = (lat, lon * k);
    let (dx, dy) = (bx - ax, by - ay);
    let len2 = dx * dx + dy * dy;
    let t = if len2 == 0.0 {
        0.0
    } else {
        (((px - ax) * dx + (py - ay) * dy) / len2).clamp(0.0, 1.0)
    };
    (ay + t * dy, (ax + t * dx) / k)
}

/// Segments a polyline may have for `polyline_distance` to bound them on the stack.
const BOUNDED_SEGMENTS: usize = 64;

/// A lower bound of the haversine term between `p` (at `lat`, `lon`) and any point of
/// the segment `a`–`b`, from the segment's box and without trigonometry (sin y >=
/// y - y³/6 for y >= 0; cos x >= 1 - x²/2 + x⁴/24 - x⁶/720 for |x| <= π/2); 0 when the
/// segment may lie more than 180° of longitude from `p`, where the term stops growing
/// with the gap. `SLACK` (1.7e-11 rad) dwarfs the rounding of projected points and
/// radians (~1e-15 rad), so a skipped segment's computed term is never below the best.
fn segment_term_bound(p: &GeoPoint, lat: f64, lon: f64, a: (f64, f64), b: (f64, f64)) -> f64 {
    // degrees a projected point may stray outside the box by rounding
    const SLACK: f64 = 1e-9;
    if (a.1 - lon).abs().max((b.1 - lon).abs()) > 180.0 {
        return 0.0;
    }
    let gap = |x: f64, u: f64, v: f64| (u.min(v) - x).max(x - u.max(v)) - SLACK;
    let half_sin = |gap: f64| {
        let y = gap.max(0.0).to_radians() / 2.0;
        (y - y * y * y / 6.0).max(0.0)
    };
    let s_lat = half_sin(gap(lat, a.0, b.0));
    let s_lon = half_sin(gap(lon, a.1, b.1));
    let far = (a.0.abs().max(b.0.abs()) + SLACK).to_radians();
    let x2 = far * far;
    let cos_far = (1.0 - x2 / 2.0 * (1.0 - x2 / 12.0 * (1.0 - x2 / 30.0))).max(0.0);
    s_lat * s_lat + p.cos_phi * cos_far * s_lon * s_lon
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `polyline_distance` as the least of each segment's haversine distance (its
    /// definition before terms and bounds).
    fn polyline_distance_per_segment(line: &[(f64, f64)], lat: f64, lon: f64, unit: Unit) -> f64 {
        if line.len() == 1 {
            return haversine(lat, lon, line[0].0, line[0].1, unit);
        }
        let k = lat.to_radians().cos().max(1e-6);
        line.windows(2)
            .map(|w| {
                let (cy, cx) = nearest_on_segment(w[0], w[1], lat, lon, k);
                haversine(lat, lon, cy, cx, unit)
            })
            .fold(f64::INFINITY, f64::min)
    }

    proptest! {
        /// The trig-free floor never exceeds the computed distance, nor that distance
        /// `max_distance` (any points: near each other, near the poles, antipodal; lines
        /// and polygons anywhere).
        #[test]
        fn distance_floor_is_below_the_distance(
            a in (-90.0f64..=90.0, -180.0f64..=180.0),
            refs in prop::collection::vec((-90.0f64..=90.0, -180.0f64..=180.0), 1..4),
            near in prop::option::of((-1e-6f64..1e-6, -1e-6f64..1e-6)),
            antipode in any::<bool>(),
            km in any::<bool>(),
            line in prop::option::of(prop::collection::vec((-89.0f64..=89.0, -179.0f64..=179.0), 2..6)),
        ) {
            let unit = if km { Unit::Km } else { Unit::Miles };
            let mut refs = refs;
            if let Some((dla, dlo)) = near {
                refs.push(((a.0 + dla).clamp(-90.0, 90.0), a.1 + dlo));
            }
            if antipode {
                refs.push((-a.0, if a.1 > 0.0 { a.1 - 180.0 } else { a.1 + 180.0 }));
            }
            let mut r = GeoRef { points: refs, ..Default::default() };
            // a line and a polygon somewhere, or around the place
            if let Some(line) = line {
                r.lines.push(line.clone());
                let mut ring = line;
                ring.push(ring[0]);
                r.polygons.push(vec![ring]);
            }
            let pre = r.geo_points();
            let p = GeoPoint::new(a.0, a.1);
            let d = r.distance_pre(&p, a.0, &pre, unit);
            prop_assert!(GeoRef::distance_floor(&p, &r.lat_bands(), unit) <= d);
            prop_assert!(d <= max_distance(unit));
        }

        /// Comparing haversine terms finds the same nearest point, at the same distance
        /// to the bit, as comparing distances.
        #[test]
        fn polyline_distance_by_terms_is_exact(
            line in prop::collection::vec((-60.0f64..60.0, -170.0f64..170.0), 1..80),
            near in any::<bool>(),
            (lat, lon) in (-60.0f64..60.0, -170.0f64..170.0),
            (dlat, dlon) in (-0.05f64..0.05, -0.05f64..0.05),
        ) {
            // a point near the line's first vertex as often as anywhere
            let (lat, lon) = if near { (line[0].0 + dlat, line[0].1 + dlon) } else { (lat, lon) };
            for unit in [Unit::Miles, Unit::Km] {
                let got = polyline_distance(&line, lat, lon, unit);
                let want = polyline_distance_per_segment(&line, lat, lon, unit);
                prop_assert_eq!(got.to_bits(), want.to_bits());
            }
        }

        /// The same for a city-sized ring and points around it (the usual query).
        #[test]
        fn local_ring_distance_by_terms_is_exact(
            (clat, clon) in (-70.0f64..70.0, -179.0f64..179.0),
            ring in prop::collection::vec((-0.1f64..0.1, -0.1f64..0.1), 3..30),
            points in prop::collection::vec((-1.5f64..1.5, -1.5f64..1.5), 1..40),
        ) {
            let mut line: Vec<(f64, f64)> = ring.iter().map(|&(a, b)| (clat + a, clon + b)).collect();
            line.push(line[0]);
            for (a, b) in points {
                let (lat, lon) = (clat + a, clon + b);
                let got = polyline_distance(&line, lat, lon, Unit::Miles);
                let want = polyline_distance_per_segment(&line, lat, lon, Unit::Miles);
                prop_assert_eq!(got.to_bits(), want.to_bits());
            }
        }
    }

    #[test]
    fn distances() {
        let d = haversine(40.7255, -73.9983, 40.7255, -73.9983, Unit::Miles);
        assert_eq!(d, 0.0);
        let nyc_la = haversine(40.7128, -74.0060, 34.0522, -118.2437, Unit::Km);
        assert!((nyc_la - 3936.0).abs() < 10.0);
        let square = vec![vec![vec![
            (0.0, 0.0),
            (0.0, 1.0),
            (1.0, 1.0),
            (1.0, 0.0),
            (0.0, 0.0),
        ]]];
        let r = GeoRef {
            polygons: square,
            ..Default::default()
        };
        assert_eq!(r.distance(0.5, 0.5, Unit::Miles), 0.0);
        assert!(r.distance(0.5, 2.0, Unit::Miles) > 60.0);
    }
}
