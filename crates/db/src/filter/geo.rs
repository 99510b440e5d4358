//! Geo conditions against one location, with Qdrant's meanings: haversine distance on a
//! sphere of the Earth's mean radius, boxes that may cross the antimeridian, polygons on the
//! plane of (lon, lat) with their boundary outside.

use serde_json::Value;

use super::model::{Geo, GeoPoint};

/// The Earth's mean radius in metres (IUGG), the one Qdrant's distance uses.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

impl Geo {
    /// Whether `v` is a location (`{"lon": x, "lat": y}`, numbers) in the area.
    pub(crate) fn check_value(&self, v: &Value) -> bool {
        let Value::Object(obj) = v else { return false };
        let coord = |k: &str| obj.get(k).and_then(Value::as_f64);
        match (coord("lon"), coord("lat")) {
            (Some(lon), Some(lat)) => self.contains(GeoPoint { lon, lat }),
            _ => false,
        }
    }

    pub(crate) fn contains(&self, p: GeoPoint) -> bool {
        match self {
            Geo::Radius { center, radius } => haversine_m(*center, p) < *radius,
            Geo::BoundingBox {
                top_left,
                bottom_right,
            } => {
                let lon_ok = if top_left.lon > bottom_right.lon {
                    p.lon > top_left.lon || p.lon < bottom_right.lon
                } else {
                    top_left.lon < p.lon && p.lon < bottom_right.lon
                };
                lon_ok && bottom_right.lat < p.lat && p.lat < top_left.lat
            }
            Geo::Polygon {
                exterior,
                interiors,
            } => {
                ring_position(exterior, p) == Position::Inside
                    && interiors
                        .iter()
                        .all(|hole| ring_position(hole, p) == Position::Outside)
            }
        }
    }
}

/// Great-circle distance in metres.
pub(crate) fn haversine_m(a: GeoPoint, b: GeoPoint) -> f64 {
    let (lat1, lat2) = (a.lat.to_radians(), b.lat.to_radians());
    let dlat = (b.lat - a.lat).to_radians();
    let dlon = (b.lon - a.lon).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

#[derive(Debug, PartialEq, Eq)]
enum Position {
    Inside,
    OnBoundary,
    Outside,
}

/// Where `p` lies against the closed ring (first point equal to the last), by crossing
/// count, with points on an edge told apart.
fn ring_position(ring: &[GeoPoint], p: GeoPoint) -> Position {
    let edges = || ring.windows(2).map(|w| (w[0], w[1]));
    if edges().any(|(a, b)| on_segment(a, b, p)) {
        return Position::OnBoundary;
    }
    let mut inside = false;
    for (a, b) in edges() {
        if (a.lat > p.lat) != (b.lat > p.lat) {
            let x = a.lon + (p.lat - a.lat) * (b.lon - a.lon) / (b.lat - a.lat);
            if p.lon < x {
                inside = !inside;
            }
        }
    }
    if inside {
        Position::Inside
    } else {
        Position::Outside
    }
}

fn on_segment(a: GeoPoint, b: GeoPoint, p: GeoPoint) -> bool {
    let cross = (b.lon - a.lon) * (p.lat - a.lat) - (b.lat - a.lat) * (p.lon - a.lon);
    cross == 0.0
        && p.lon >= a.lon.min(b.lon)
        && p.lon <= a.lon.max(b.lon)
        && p.lat >= a.lat.min(b.lat)
        && p.lat <= a.lat.max(b.lat)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pt(lon: f64, lat: f64) -> GeoPoint {
        GeoPoint { lon, lat }
    }

    fn ring(points: &[(f64, f64)]) -> Vec<GeoPoint> {
        points.iter().map(|&(lon, lat)| pt(lon, lat)).collect()
    }

    #[test]
    fn haversine_matches_known_distances() {
        // Berlin to Moscow, about 1,609 km (Qdrant's own test pairs them).
        let berlin = pt(13.413637435864272, 52.52197645);
        let moscow = pt(37.62137960067377, 55.7536283);
        let d = haversine_m(berlin, moscow);
        assert!((1_600_000.0..1_620_000.0).contains(&d), "{d}");
        assert_eq!(haversine_m(berlin, berlin), 0.0);
        // A quarter of the equator.
        let q = haversine_m(pt(0.0, 0.0), pt(90.0, 0.0));
        assert!((q - EARTH_RADIUS_M * std::f64::consts::FRAC_PI_2).abs() < 1e-6);
        // Antipodes: no NaN from rounding past 1.
        assert!(haversine_m(pt(0.0, 0.0), pt(180.0, 0.0)).is_finite());
        let near = Geo::Radius {
            center: pt(13.413637, 52.521976),
            radius: 2000.0,
        };
        assert!(near.contains(berlin));
        assert!(!near.contains(moscow));
        let zero = Geo::Radius {
            center: berlin,
            radius: 0.0,
        };
        assert!(!zero.contains(berlin), "strictly within the radius");
    }

    #[test]
    fn boxes_are_open_and_may_cross_the_antimeridian() {
        let b = Geo::BoundingBox {
            top_left: pt(10.0, 50.0),
            bottom_right: pt(20.0, 40.0),
        };
        assert!(b.contains(pt(15.0, 45.0)));
        assert!(!b.contains(pt(10.0, 45.0)), "edge");
        assert!(!b.contains(pt(15.0, 50.0)), "edge");
        assert!(!b.contains(pt(25.0, 45.0)));
        assert!(!b.contains(pt(15.0, 35.0)));
        let across = Geo::BoundingBox {
            top_left: pt(170.0, 10.0),
            bottom_right: pt(-170.0, -10.0),
        };
        assert!(across.contains(pt(175.0, 0.0)));
        assert!(across.contains(pt(-175.0, 0.0)));
        assert!(!across.contains(pt(0.0, 0.0)));
    }

    #[test]
    fn polygons_with_holes_and_boundaries() {
        let square = ring(&[
            (-70.0, -70.0),
            (60.0, -70.0),
            (60.0, 60.0),
            (-70.0, 60.0),
            (-70.0, -70.0),
        ]);
        let hole = ring(&[
            (-65.0, -65.0),
            (0.0, -65.0),
            (0.0, 0.0),
            (-65.0, 0.0),
            (-65.0, -65.0),
        ]);
        let plain = Geo::Polygon {
            exterior: square.clone(),
            interiors: vec![],
        };
        let holed = Geo::Polygon {
            exterior: square,
            interiors: vec![hole],
        };
        for g in [&plain, &holed] {
            assert!(g.contains(pt(50.52, 50.405)));
            assert!(!g.contains(pt(60.52, 60.405)));
            assert!(!g.contains(pt(60.0, 0.0)), "on the exterior");
            assert!(!g.contains(pt(-70.0, -70.0)), "a vertex");
        }
        assert!(plain.contains(pt(-60.52, -60.405)));
        assert!(!holed.contains(pt(-60.52, -60.405)), "in the hole");
        assert!(!holed.contains(pt(0.0, -10.0)), "on the hole's edge");
        assert!(holed.contains(pt(10.0, -10.0)));
        // A concave ring (a "C"): the notch is outside.
        let c = Geo::Polygon {
            exterior: ring(&[
                (0.0, 0.0),
                (10.0, 0.0),
                (10.0, 2.0),
                (2.0, 2.0),
                (2.0, 8.0),
                (10.0, 8.0),
                (10.0, 10.0),
                (0.0, 10.0),
                (0.0, 0.0),
            ]),
            interiors: vec![],
        };
        assert!(c.contains(pt(1.0, 5.0)));
        assert!(!c.contains(pt(5.0, 5.0)));
        assert!(c.contains(pt(5.0, 1.0)));
        // Collinear with an edge's line but beyond it: not on the boundary.
        assert!(!c.contains(pt(12.0, 0.0)));
    }

    #[test]
    fn values_must_be_lon_lat_objects() {
        let g = Geo::Radius {
            center: pt(0.0, 0.0),
            radius: 1000.0,
        };
        assert!(g.check_value(&json!({"lon": 0.001, "lat": 0})));
        assert!(g.check_value(&json!({"lat": 0, "lon": 0, "name": "x"})));
        assert!(!g.check_value(&json!({"lon": "0", "lat": 0})));
        assert!(!g.check_value(&json!({"lon": 0})));
        assert!(!g.check_value(&json!([0, 0])));
        assert!(!g.check_value(&json!("0,0")));
        assert!(!g.check_value(&json!(null)));
    }
}
