//! A collection's storage datatypes (Qdrant's `datatype`): float16 and uint8 spaces round
//! each vector once where it enters, answer with the values they hold before and after a
//! seal and a reopen, seal into node records of that type, and refuse values the type
//! cannot hold naming point and dimension.

mod common;

use std::path::{Path, PathBuf};

use common::{clustered_vector, wait_until};
use diskvec_db::{
    CollectionConfig, Database, ElementType, NamedVectors, PointId, PointRecord, SearchRequest,
    Vector,
};
use diskvec_vector::Metric;

const DIM: usize = 12;

fn config(metric: Metric, datatype: ElementType) -> CollectionConfig {
    let mut c = CollectionConfig::new(DIM, metric);
    c.dense[0].datatype = datatype;
    c.seal_threshold = 200;
    c.max_degree = 12;
    c.build_list = 32;
    c.idle_merge_ms = 0;
    c
}

/// Point `i`'s vector: clustered values with long fractions, or whole numbers 0-255.
fn vector(i: u64, datatype: ElementType) -> Vec<f32> {
    let v = clustered_vector(i, DIM, 5);
    match datatype {
        ElementType::Uint8 => v.iter().map(|x| ((x + 4.0) * 30.0).round()).collect(),
        _ => v.iter().map(|x| x * 1000.3).collect(),
    }
}

fn node_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "dvn") {
                found.push(p);
            }
        }
    }
    found
}

fn stored(c: &diskvec_db::Collection, i: u64) -> Vec<f32> {
    c.get(&[PointId::Num(i)], false, true).unwrap()[0]
        .vector()
        .unwrap()
        .to_vec()
}

#[test]
fn narrow_spaces_keep_the_rounded_values_through_seal_and_reopen() {
    for (metric, datatype) in [
        (Metric::L2, ElementType::Float16),
        (Metric::Cosine, ElementType::Float16),
        (Metric::L2, ElementType::Uint8),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let want = |i: u64| {
            let mut v = vector(i, datatype);
            metric.prepare(&mut v);
            datatype.round_in_place(&mut v).unwrap();
            v
        };
        {
            let db = Database::open(dir.path()).unwrap();
            let c = db
                .create_collection("typed", config(metric, datatype))
                .unwrap();
            let points = (0..500)
                .map(|i| PointRecord::new(PointId::Num(i), vector(i, datatype), Default::default()))
                .collect();
            c.upsert(points).unwrap();
            // Growing: the rounded values already.
            assert_eq!(stored(&c, 450), want(450), "{metric} {datatype}");
            wait_until("sealed", std::time::Duration::from_secs(60), || {
                c.info().indexed_points >= 400
            });
            assert_eq!(stored(&c, 7), want(7), "{metric} {datatype} sealed");
            let hits = c
                .search(&vector(3, datatype), &SearchRequest::new(1))
                .unwrap();
            assert_eq!(hits[0].id, PointId::Num(3), "{metric} {datatype}");
            db.close().unwrap();
        }
        // The sealed segments' records hold the type: layout version 4 and its code.
        let files = node_files(dir.path());
        assert!(!files.is_empty());
        for f in &files {
            let head = std::fs::read(f).unwrap();
            assert_eq!(head[8..12], 4u32.to_le_bytes(), "{}", f.display());
            assert_eq!(head[96..100], datatype.code().to_le_bytes());
        }
        let db = Database::open(dir.path()).unwrap();
        let c = db.collection("typed").unwrap();
        assert_eq!(c.config().dense[0].datatype, datatype);
        for i in [0, 7, 250, 499] {
            assert_eq!(
                stored(&c, i),
                want(i),
                "{metric} {datatype} reopened, point {i}"
            );
        }
    }
}

#[test]
fn values_a_space_cannot_hold_are_refused_and_qdrants_cast_is_offered() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let half = db
        .create_collection("half", config(Metric::L2, ElementType::Float16))
        .unwrap();
    let mut v = vector(1, ElementType::Float16);
    v[4] = 70_000.0;
    let err = half
        .upsert(vec![PointRecord::new(
            PointId::Num(17),
            v,
            Default::default(),
        )])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("point 17") && err.contains("dimension 4") && err.contains("65504"),
        "{err}"
    );
    let bytes = db
        .create_collection("bytes", config(Metric::L2, ElementType::Uint8))
        .unwrap();
    for bad in [256.0, -1.0, 2.5] {
        let mut v = vector(1, ElementType::Uint8);
        v[2] = bad;
        let err = bytes
            .upsert(vec![PointRecord::new(
                PointId::Num(3),
                v,
                Default::default(),
            )])
            .unwrap_err()
            .to_string();
        assert!(err.contains("point 3") && err.contains("0 to 255"), "{err}");
    }
    assert_eq!(bytes.info().points, 0);
    // Qdrant's API truncates and saturates instead; the server applies it before writing.
    let mut named = NamedVectors::new();
    named.insert(String::new(), Vector::Dense(vec![256.19, 1.81, -3.0, 2.75]));
    bytes.config().cast_uint8_like_qdrant(&mut named);
    assert_eq!(named[""], Vector::Dense(vec![255.0, 1.0, 0.0, 2.0]));
    // Cosine vectors are unit vectors, which uint8 cannot hold.
    let Err(err) = db.create_collection("cos", config(Metric::Cosine, ElementType::Uint8)) else {
        panic!("uint8 with cosine was accepted");
    };
    let err = err.to_string();
    assert!(err.contains("uint8") && err.contains("Cosine"), "{err}");
}
