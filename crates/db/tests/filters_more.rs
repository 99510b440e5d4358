//! Qdrant's further filter conditions through a collection: `nested` (each array element on
//! its own), geo radius / box / polygon, `values_count`, datetime ranges, and what strict
//! mode asks of them; on points in both the mutable and sealed segments, with payload
//! indexes present on the keys involved (which must not change any answer).

mod common;

use std::sync::Arc;

use common::small_config;
use diskvec_db::{Collection, Database, Filter, PointId, PointRecord, StrictMode};
use serde_json::{json, Value};

fn filter(v: Value) -> Filter {
    Filter::from_json(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn refused(v: Value) -> String {
    match Filter::from_json(&v) {
        Ok(f) => panic!("{v} accepted as {f:?}"),
        Err(e) => e.to_string(),
    }
}

/// Points `(id, payload)`, the first half sealed and optimized, the rest in the mutable
/// segment.
fn collection(db: &Database, name: &str, payloads: Vec<(u64, Value)>) -> Arc<Collection> {
    let c = db.create_collection(name, small_config(1000)).unwrap();
    let records: Vec<PointRecord> = payloads
        .into_iter()
        .map(|(id, p)| {
            PointRecord::new(
                PointId::Num(id),
                vec![id as f32, 1.0, 0.5, 2.0],
                p.as_object().unwrap().clone(),
            )
        })
        .collect();
    let half = records.len() / 2;
    let mut records = records.into_iter();
    c.upsert(records.by_ref().take(half).collect()).unwrap();
    c.optimize(true).unwrap();
    c.upsert(records.collect()).unwrap();
    c
}

/// The ids matching `f`, by scroll, checked against `count`.
fn ids(c: &Collection, f: Value) -> Vec<u64> {
    let f = filter(f);
    let (page, next) = c.scroll(Some(&f), 100, None, false, false).unwrap();
    assert!(next.is_none());
    let got: Vec<u64> = page
        .iter()
        .map(|r| match r.id {
            PointId::Num(n) => n,
            PointId::Uuid(_) => panic!("uuid"),
        })
        .collect();
    assert_eq!(
        c.count(Some(&f)).unwrap(),
        got.len(),
        "count and scroll differ"
    );
    got
}

fn countries() -> Vec<(u64, Value)> {
    let city = |name: &str, pop: f64, sights: &[&str], lon: f64, lat: f64| {
        json!({"name": name, "population": pop, "sightseeing": sights,
               "location": {"lon": lon, "lat": lat}})
    };
    vec![
        (
            1,
            json!({"country": {"name": "Germany", "cities": [
                city("Berlin", 3.7, &["Brandenburg Gate", "Reichstag"], 13.405, 52.52),
                city("Munich", 1.5, &["Marienplatz", "Olympiapark"], 11.576, 48.137),
            ]}}),
        ),
        (
            2,
            json!({"country": {"name": "Japan", "cities": [
                city("Tokyo", 9.3, &["Tokyo Tower", "Tokyo Skytree"], 139.69, 35.69),
                city("Kyoto", 1.5, &["Kiyomizu-dera", "Fushimi Inari", "Ginkaku-ji", "Kinkaku-ji"], 135.77, 35.01),
            ]}}),
        ),
        (
            3,
            json!({"country": {"name": "France", "cities": [
                city("Paris", 2.1, &["Louvre", "Eiffel Tower", "Notre-Dame"], 2.35, 48.86),
            ]}}),
        ),
        (
            4,
            json!({"country": {"name": "England", "cities": [
                city("London", 8.9, &["Big Ben", "London Eye", "Tower Bridge"], -0.13, 51.51),
            ]}}),
        ),
        (
            5,
            json!({"country": {"name": "Nauru", "cities": [{"name": null, "population": 0.01}]}}),
        ),
        (6, json!({"country": {"name": "Nowhere", "cities": []}})),
        (
            7,
            json!({"country": {"name": "Odd", "cities": {"name": "Solo", "population": 9.9}}}),
        ),
        (8, json!({"unrelated": true})),
    ]
}

fn nested(key: &str, inner: Value) -> Value {
    json!({"must": [{"nested": {"key": key, "filter": inner}}]})
}

#[test]
fn nested_matches_within_one_element() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(&db, "nested", countries());
    // Indexes on the keys the nested conditions reach must not change any answer.
    c.create_payload_index("country.cities[].population", "float")
        .unwrap();
    c.create_payload_index("country.cities[].name", "keyword")
        .unwrap();
    let pop = |r: Value| json!({"key": "population", "range": r});
    let sights = |n: Value| json!({"key": "sightseeing", "values_count": n});

    assert_eq!(
        ids(
            &c,
            nested(
                "country.cities",
                json!({"must": [pop(json!({"gte": 9.0}))]})
            )
        ),
        [2]
    );
    // `[]` written out is the same key.
    assert_eq!(
        ids(
            &c,
            nested(
                "country.cities[]",
                json!({"must": [pop(json!({"gte": 9.0}))]})
            )
        ),
        [2]
    );
    // Both conditions on one city: only London is big (8.9) with more than 2 sights; Tokyo
    // is big with 2, and Kyoto's 4 sights are in a small city.
    let big_and_sights = json!({"must": [pop(json!({"gte": 8.0})), sights(json!({"gt": 2}))]});
    assert_eq!(ids(&c, nested("country.cities", big_and_sights)), [4]);
    // Without nested, the conditions may hold in different cities: Japan passes.
    assert_eq!(
        ids(
            &c,
            json!({"must": [
                {"key": "country.cities[].population", "range": {"gte": 9.0}},
                {"key": "country.cities[].sightseeing", "values_count": {"gt": 3}}
            ]})
        ),
        [2]
    );
    let small_sights = json!({"must": [pop(json!({"gte": 8.0})), sights(json!({"lt": 3}))]});
    assert_eq!(ids(&c, nested("country.cities", small_sights)), [2]);
    // must_not inside: some city that is not small and has a name.
    let not_small = json!({"must_not": [pop(json!({"lt": 8.0})), {"is_null": {"key": "name"}}]});
    assert_eq!(ids(&c, nested("country.cities", not_small)), [2, 4]);
    // Outside, must_not of a nested: no city is big.
    assert_eq!(
        ids(
            &c,
            json!({"must_not": [{"nested": {"key": "country.cities", "filter": {"must": [pop(json!({"gte": 8.0}))]}}}]})
        ),
        [1, 3, 5, 6, 7, 8]
    );
    assert_eq!(
        ids(
            &c,
            nested(
                "country.cities",
                json!({"must": [{"is_null": {"key": "name"}}]})
            )
        ),
        [5]
    );
    // An empty inner filter: some element that is an object.
    assert_eq!(
        ids(&c, nested("country.cities", json!({}))),
        [1, 2, 3, 4, 5]
    );
    // An object where the array should be is no array: `[]` reaches nothing there.
    assert_eq!(
        ids(
            &c,
            nested("country.cities", json!({"must": [pop(json!({"gt": 9.5}))]}))
        ),
        Vec::<u64>::new()
    );
    // Geo inside nested: Berlin's box, and 1 km around Berlin's centre.
    let berlin_box = json!({"key": "location", "geo_bounding_box": {
        "top_left": {"lon": 13.08835, "lat": 52.67551},
        "bottom_right": {"lon": 13.76117, "lat": 52.33825}}});
    assert_eq!(
        ids(&c, nested("country.cities", json!({"must": [berlin_box]}))),
        [1]
    );
    let near_berlin = json!({"key": "location", "geo_radius": {
        "center": {"lon": 13.40, "lat": 52.52}, "radius": 1000}});
    assert_eq!(
        ids(&c, nested("country.cities", json!({"must": [near_berlin]}))),
        [1]
    );
}

#[test]
fn nested_inside_nested() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(
        &db,
        "nesting",
        vec![
            (
                1,
                json!({"arr1": [{"arr2": [{"a": 1, "b": 2}]}, {"arr2": [{"a": 3, "b": 4}, {"a": 5, "b": 6}]}]}),
            ),
            (
                2,
                json!({"arr1": [{"arr2": [{"a": 2, "b": 3}]}, {"arr2": [{"a": 3, "b": 5}, {"a": 5, "b": 7}]}]}),
            ),
        ],
    );
    c.create_payload_index("arr1[].arr2[].a", "integer")
        .unwrap();
    let eq = |k: &str, v: i64| json!({"key": k, "match": {"value": v}});
    assert_eq!(
        ids(&c, nested("arr1", json!({"must": [eq("arr2[].a", 5)]}))),
        [1, 2]
    );
    assert_eq!(
        ids(&c, nested("arr1", json!({"must": [eq("arr2[].b", 6)]}))),
        [1]
    );
    assert_eq!(
        ids(&c, nested("arr1[].arr2", json!({"must": [eq("b", 8)]}))),
        Vec::<u64>::new()
    );
    let twice = |inner: Value| nested("arr1", nested("arr2", inner));
    assert_eq!(ids(&c, twice(json!({"must": [eq("a", 5)]}))), [1, 2]);
    // Same innermost element: a = 5 with b = 6 is point 1's only.
    assert_eq!(
        ids(&c, twice(json!({"must": [eq("a", 5), eq("b", 6)]}))),
        [1]
    );
    // a = 1 and b = 4 are in different elements of point 1's arrays.
    assert_eq!(
        ids(&c, twice(json!({"must": [eq("a", 1), eq("b", 4)]}))),
        Vec::<u64>::new()
    );
    // Within one outer element but different inner ones: a = 3 (b = 4) beside b = 6.
    assert_eq!(
        ids(
            &c,
            nested(
                "arr1",
                json!({"must": [nested("arr2", json!({"must": [eq("a", 3)]})), nested("arr2", json!({"must": [eq("b", 6)]}))]})
            )
        ),
        [1]
    );
    assert_eq!(
        ids(&c, twice(json!({"should": [eq("a", 5), eq("b", 6)]}))),
        [1, 2]
    );
}

#[test]
fn geo_conditions_on_locations() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(
        &db,
        "geo",
        vec![
            (1, json!({"location": {"lon": 50.52, "lat": 50.405}})),
            (2, json!({"location": {"lon": 60.52, "lat": 60.405}})),
            (3, json!({"location": {"lon": -60.52, "lat": -60.405}})),
            (4, json!({"location": {"lon": 80.52, "lat": 80.405}})),
            // A list of locations matches when any does.
            (
                5,
                json!({"location": [{"lon": 0.0, "lat": 0.0}, {"lon": 179.5, "lat": 0.5}]}),
            ),
            (6, json!({"location": "50.52,50.405"})),
            (7, json!({"location": [50.52, 50.405]})),
            (8, json!({})),
        ],
    );
    c.create_payload_index("location", "geo").unwrap();
    let geo = |kind: &str, arg: Value| json!({"must": [{"key": "location", kind: arg}]});
    let ring = |pts: &[(f64, f64)]| json!({"points": pts.iter().map(|(lon, lat)| json!({"lon": lon, "lat": lat})).collect::<Vec<_>>()});
    let square = |lo: f64, hi: f64| ring(&[(lo, lo), (hi, lo), (hi, hi), (lo, hi), (lo, lo)]);

    assert_eq!(
        ids(
            &c,
            geo(
                "geo_radius",
                json!({"center": {"lon": 50.5, "lat": 50.4}, "radius": 5000})
            )
        ),
        [1]
    );
    assert_eq!(
        ids(
            &c,
            geo(
                "geo_radius",
                json!({"center": {"lon": 50.5, "lat": 50.4}, "radius": 1000})
            )
        ),
        Vec::<u64>::new()
    );
    assert_eq!(
        ids(
            &c,
            geo(
                "geo_bounding_box",
                json!({"top_left": {"lon": 40, "lat": 70}, "bottom_right": {"lon": 70, "lat": 40}})
            )
        ),
        [1, 2]
    );
    // Across the antimeridian.
    assert_eq!(
        ids(
            &c,
            geo(
                "geo_bounding_box",
                json!({"top_left": {"lon": 170, "lat": 10}, "bottom_right": {"lon": -170, "lat": -10}})
            )
        ),
        [5]
    );
    assert_eq!(
        ids(
            &c,
            geo("geo_polygon", json!({"exterior": square(55.0, 86.0)}))
        ),
        [2, 4]
    );
    assert_eq!(
        ids(
            &c,
            geo("geo_polygon", json!({"exterior": square(-70.0, 60.0)}))
        ),
        [1, 3, 5]
    );
    assert_eq!(
        ids(
            &c,
            geo(
                "geo_polygon",
                json!({"exterior": square(-70.0, 60.0), "interiors": [square(-65.0, 0.5)]})
            )
        ),
        [1]
    );
    assert_eq!(
        ids(
            &c,
            json!({"should": [
                {"key": "location", "geo_polygon": {"exterior": square(55.0, 65.0)}},
                {"key": "location", "geo_polygon": {"exterior": square(75.0, 85.0)}}
            ]})
        ),
        [2, 4]
    );
    // Validation, in Qdrant's words.
    let open = ring(&[
        (-180.0, -90.0),
        (180.0, -90.0),
        (180.0, 90.0),
        (-180.0, 90.0),
    ]);
    assert!(refused(geo("geo_polygon", json!({"exterior": open})))
        .contains("the first and the last points should be the same"));
    let short = ring(&[(-180.0, -90.0), (180.0, -90.0), (-180.0, -90.0)]);
    assert!(refused(geo("geo_polygon", json!({"exterior": short})))
        .contains("the size must be at least 4, got 3"));
    assert!(refused(geo(
        "geo_radius",
        json!({"center": {"lon": 0, "lat": 91}, "radius": 1})
    ))
    .contains("within [-90;90]"));
}

#[test]
fn values_count_counts_values_and_missing_keys_hold_none() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(
        &db,
        "counts",
        vec![
            (1, json!({"tags": ["a", "b", "c"]})),
            (2, json!({"tags": ["x"]})),
            (3, json!({"title": "no tags"})),
            (4, json!({"tags": "solo"})),
            (5, json!({"tags": null})),
            (6, json!({"tags": []})),
        ],
    );
    c.create_payload_index("tags", "keyword").unwrap();
    let count = |r: Value| ids(&c, json!({"must": [{"key": "tags", "values_count": r}]}));
    assert_eq!(count(json!({"lt": 1})), [3, 5, 6]);
    assert_eq!(count(json!({"gte": 0})), [1, 2, 3, 4, 5, 6]);
    assert_eq!(count(json!({"lte": 0})), [3, 5, 6]);
    assert_eq!(count(json!({"gt": 1})), [1]);
    assert_eq!(count(json!({"gte": 1, "lte": 1})), [2, 4]);
    assert_eq!(count(json!({"gt": 3})), Vec::<u64>::new());
    assert_eq!(count(json!({})), [1, 2, 3, 4, 5, 6]);
    // Each value reached is counted on its own.
    let c2 = collection(
        &db,
        "counts2",
        vec![
            (1, json!({"a": [{"b": [1, 2, 3]}, {"b": [1]}]})),
            (2, json!({"a": [{"b": [1, 2]}]})),
        ],
    );
    let at = |r: Value| ids(&c2, json!({"must": [{"key": "a[].b", "values_count": r}]}));
    assert_eq!(at(json!({"gte": 3})), [1]);
    assert_eq!(at(json!({"lt": 2})), [1]);
    assert_eq!(at(json!({"gte": 2, "lte": 2})), [2]);
}

#[test]
fn datetime_ranges_compare_instants() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(
        &db,
        "dates",
        vec![
            (1, json!({"at": "2015-01-01T00:00:00Z"})),
            (2, json!({"at": "2015-02-01T08:00:00+02:00"})),
            (3, json!({"at": "2015-03-01T12:30"})),
            (4, json!({"at": ["1999-12-31", "2015-03-01 12:30:00.5"]})),
            (5, json!({"at": "not a date"})),
            (6, json!({"at": 1420070400})),
            (7, json!({})),
        ],
    );
    c.create_payload_index("at", "datetime").unwrap();
    let range = |r: Value| ids(&c, json!({"must": [{"key": "at", "range": r}]}));
    assert_eq!(
        range(json!({"gte": "2015-01-01", "lte": "2015-01-01 00:00"})),
        [1]
    );
    assert_eq!(
        range(json!({"gte": "2015-01-01T01:00:00+01:00", "lte": "2015-01-01T01:00:00+01:00"})),
        [1]
    );
    assert_eq!(
        range(json!({"gte": "2015-02-01T06:00:00", "lte": "2015-02-01T06:00:00Z"})),
        [2]
    );
    assert_eq!(
        range(
            json!({"gte": "2015-02-01T06:00:00.000000000", "lt": "2015-02-01T06:00:00.000000001"})
        ),
        [2]
    );
    assert_eq!(
        range(json!({"gte": "2015-03-01T12:30", "lte": "2015-03-01T12:30"})),
        [3]
    );
    assert_eq!(range(json!({"gt": "2015-03-01T12:30"})), [4]);
    assert_eq!(range(json!({"lt": "2000-01-01"})), [4]);
    assert_eq!(range(json!({"gte": "1970-01-01"})), [1, 2, 3, 4]);
    // A numeric range does not read datetime strings, nor a datetime range numbers.
    assert_eq!(range(json!({"gte": 0})), [6]);
    for bad in [
        json!({"gte": "Thu, 01 Jan 2015 01:00:00 +0100"}),
        json!({"gte": "1422758400000"}),
        json!({"gte": "2015-02-01 06:00:00 AM"}),
        json!({"gte": "20150201T060000.000Z"}),
        json!({"gte": "2015032T060000Z", "lte": "2015-02-01T06:00:00"}),
        json!({"gte": "2015-01-01", "lte": 5}),
    ] {
        let e = refused(json!({"must": [{"key": "at", "range": bad}]}));
        assert!(e.contains("range."), "{e}");
    }
}

#[test]
fn strict_mode_asks_for_the_right_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(&db, "strict", countries());
    c.update_settings(|s| {
        s.strict_mode.merge(StrictMode {
            enabled: Some(true),
            unindexed_filtering_retrieve: Some(false),
            ..Default::default()
        });
        Ok(())
    })
    .unwrap();
    let check = |f: Value| c.check_filter(Some(&filter(f)), false);
    let big_few_sights = nested(
        "country.cities",
        json!({"must": [
            {"key": "population", "range": {"gte": 8.0}},
            {"key": "sightseeing", "values_count": {"lt": 3}}
        ]}),
    );
    let e = check(big_few_sights.clone()).unwrap_err().to_string();
    assert!(e.contains("country.cities[].population"), "{e}");
    c.create_payload_index("country.cities[].population", "float")
        .unwrap();
    let e = check(big_few_sights.clone()).unwrap_err().to_string();
    assert!(e.contains("country.cities[].sightseeing"), "{e}");
    // values_count is answered by an index of any kind.
    c.create_payload_index("country.cities[].sightseeing", "integer")
        .unwrap();
    check(big_few_sights.clone()).unwrap();
    assert_eq!(ids(&c, big_few_sights), [2]);

    // Nested inside nested joins the keys.
    let e = check(nested(
        "a",
        nested("b", json!({"must": {"key": "c", "match": {"value": 1}}})),
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("a[].b[].c"), "{e}");

    // Geo needs a geo index, a datetime range a datetime index, a numeric one a number index.
    let loc = json!({"must": {"key": "loc", "geo_radius": {"center": {"lon": 0, "lat": 0}, "radius": 1}}});
    let at = json!({"must": {"key": "at", "range": {"gte": "2015-01-01"}}});
    let n = json!({"must": {"key": "at", "range": {"gte": 1}}});
    for f in [&loc, &at, &n] {
        assert!(check(f.clone()).is_err(), "{f}");
    }
    c.create_payload_index("loc", "keyword").unwrap();
    c.create_payload_index("at", "datetime").unwrap();
    assert!(check(loc.clone()).is_err());
    assert!(
        check(n.clone()).is_err(),
        "a datetime index answers no numeric range"
    );
    check(at).unwrap();
    c.create_payload_index("loc", "geo").unwrap();
    check(loc).unwrap();
}

#[test]
fn refusals_of_the_new_conditions() {
    let e = Filter::from_json(&json!({"must": [{"key": "city"}]})).unwrap_err();
    assert!(e.is_validation(), "{e}");
    assert!(
        e.to_string()
            .contains("At least one field condition must be specified"),
        "{e}"
    );
    // Other refusals are malformed bodies, not validation failures.
    let e = Filter::from_json(&json!({"must": [{"key": "city", "match": {"value": 1.5}}]}))
        .unwrap_err();
    assert!(!e.is_validation(), "{e}");
    // A key spelled like the message does not make another refusal one.
    let e = Filter::from_json(&json!({"must": [{
        "key": "At least one field condition must be specified",
        "match": {"value": 1}, "range": {"gt": 1}
    }]}))
    .unwrap_err();
    assert!(!e.is_validation(), "{e}");
    let e =
        refused(json!({"must": [{"nested": {"key": "a", "filter": {"must": {"has_id": [1]}}}}]}));
    assert!(
        e.contains("\"has_id\" is not supported inside \"nested\""),
        "{e}"
    );
    let e = refused(json!({"must": [{"key": "t", "values_count": {"gt": -1}}]}));
    assert!(e.contains("values_count.gt"), "{e}");
    // Nested filters count toward the depth bound.
    let mut v = json!({"key": "a", "match": {"value": 1}});
    for _ in 0..40 {
        v = json!({"nested": {"key": "x", "filter": {"must": [v]}}});
    }
    let e = refused(json!({"must": [v]}));
    assert!(e.contains("nest at most"), "{e}");
}

#[test]
fn prefix_matches_the_start_of_strings() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = collection(
        &db,
        "prefix",
        vec![
            (1, json!({"url": "https://qdrant.tech/documentation"})),
            (
                2,
                json!({"url": ["http://example.com", "https://qdrant.io"]}),
            ),
            (3, json!({"url": "HTTPS://QDRANT.TECH"})),
            (4, json!({"url": 42})),
            (5, json!({})),
        ],
    );
    let prefix =
        |c: &Collection, p: &str| ids(c, json!({"must": [{"key": "url", "match": {"prefix": p}}]}));
    let want: [(&str, Vec<u64>); 4] = [
        ("https://qdrant.", vec![1, 2]),
        ("http", vec![1, 2]),
        ("HTTPS", vec![3]),
        ("ftp", vec![]),
    ];
    for (p, ids) in &want {
        assert_eq!(&prefix(&c, p), ids, "{p}");
    }
    // The same through a keyword index.
    c.create_payload_index("url", "keyword").unwrap();
    for (p, ids) in &want {
        assert_eq!(&prefix(&c, p), ids, "{p} indexed");
    }
    let e = refused(json!({"must": [{"key": "url", "match": {"prefix": 1}}]}));
    assert!(e.contains("match.prefix"), "{e}");
}
