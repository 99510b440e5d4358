//! Named, optional and sparse vector spaces through a collection's life: the growing
//! segment, seals, deletes, rewrites, a merge and a reopen. At each step every search
//! answers from the points that have a vector in its space (never one without), sparse
//! scores are the exact dot products (times IDF where the space asks for it), dense
//! results agree with brute force, and stored vectors come back as written.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{clustered_vector, wait_until};
use diskvec_db::{
    Collection, CollectionConfig, Database, DenseSpace, NamedVectors, PointId, PointRecord,
    SearchRequest, SparseModifier, SparseSpace, SparseVector, Vector,
};
use diskvec_vector::Metric;

const POINTS: u64 = 420;

fn config() -> CollectionConfig {
    let dense = |name: &str, dim, metric| DenseSpace::new(name, dim, metric);
    let sparse = |name: &str, modifier| SparseSpace::new(name, modifier);
    let mut c = CollectionConfig::with_spaces(
        vec![dense("a", 4, Metric::L2), dense("b", 6, Metric::Cosine)],
        vec![
            sparse("s", SparseModifier::None),
            sparse("t", SparseModifier::Idf),
        ],
    );
    c.seal_threshold = 150;
    c.max_segment_points = 10_000;
    c.max_degree = 8;
    c.build_list = 16;
    c.idle_merge_ms = 0;
    c
}

fn sparse(pairs: &[(u32, f32)]) -> SparseVector {
    SparseVector {
        indices: pairs.iter().map(|p| p.0).collect(),
        values: pairs.iter().map(|p| p.1).collect(),
    }
}

/// Point `i`'s vectors in generation `g`: each space holds some of the points, a few hold
/// none at all.
fn vectors(i: u64, g: u64) -> NamedVectors {
    let mut v = NamedVectors::new();
    if i % 30 == 29 {
        return v;
    }
    if !i.is_multiple_of(3) {
        v.insert("a".into(), Vector::Dense(clustered_vector(i + g, 4, 5)));
    }
    if i.is_multiple_of(2) {
        v.insert("b".into(), Vector::Dense(clustered_vector(i + 7 * g, 6, 3)));
    }
    if i % 5 != 1 {
        // Unsorted on the way in: stored sorted.
        let terms = [
            (40, 0.5),
            ((i % 11) as u32, 1.0 + g as f32),
            (20 + (i * 7 % 13) as u32, 2.0),
        ];
        v.insert("s".into(), Vector::Sparse(sparse(&terms)));
    }
    if i.is_multiple_of(4) {
        v.insert("t".into(), Vector::Sparse(sparse(&[((i % 6) as u32, 1.0)])));
    }
    v
}

/// What the collection should hold: each live point's vectors (dense ones as stored:
/// unit length in the cosine space).
type Model = BTreeMap<u64, NamedVectors>;

fn stored(mut v: NamedVectors) -> NamedVectors {
    if let Some(Vector::Dense(b)) = v.get_mut("b") {
        Metric::Cosine.prepare(b);
    }
    if let Some(Vector::Sparse(s)) = v.get_mut("s") {
        *s = s.clone().checked().unwrap();
    }
    v
}

fn upsert(c: &Collection, model: &mut Model, ids: impl Iterator<Item = u64>, g: u64) {
    let points: Vec<PointRecord> = ids
        .map(|i| {
            model.insert(i, stored(vectors(i, g)));
            PointRecord {
                id: PointId::Num(i),
                vectors: vectors(i, g),
                payload: Default::default(),
            }
        })
        .collect();
    c.upsert(points).unwrap();
}

fn dot(a: &SparseVector, b: &SparseVector) -> f32 {
    a.entries()
        .filter_map(|(i, x)| b.indices.binary_search(&i).ok().map(|at| x * b.values[at]))
        .sum()
}

/// Every space searched and checked against the model.
fn check(c: &Collection, model: &Model, step: &str) {
    let ids = |hits: &[diskvec_db::Hit]| -> Vec<u64> {
        hits.iter()
            .map(|h| match h.id {
                PointId::Num(n) => n,
                PointId::Uuid(_) => panic!("uuid"),
            })
            .collect()
    };
    // Dense spaces: only points with a vector there, and the brute-force top 10.
    for (space, metric, dim) in [("a", Metric::L2, 4), ("b", Metric::Cosine, 6)] {
        for q in 0..5u64 {
            let mut query = clustered_vector(1_000 + q, dim, 5);
            let mut req = SearchRequest::new(10);
            req.using = space.into();
            req.search_list = Some(200);
            let hits = c.search(&query, &req).unwrap();
            metric.prepare(&mut query);
            let mut truth: Vec<(f32, u64)> = model
                .iter()
                .filter_map(|(&id, v)| match v.get(space) {
                    Some(Vector::Dense(d)) => Some((metric.distance(&query, d), id)),
                    _ => None,
                })
                .collect();
            truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let want: Vec<u64> = truth.iter().take(10).map(|t| t.1).collect();
            let got = ids(&hits);
            for id in &got {
                assert!(
                    matches!(model[id].get(space), Some(Vector::Dense(_))),
                    "{step}: point {id} without a vector in {space} was found"
                );
            }
            let overlap = got.iter().filter(|i| want.contains(i)).count();
            assert!(
                overlap >= 9,
                "{step}, space {space}: {got:?} against {want:?}"
            );
        }
    }
    // Sparse spaces: exact scores, in order, only over shared terms.
    let live_t: Vec<&SparseVector> = model
        .values()
        .filter_map(|v| match v.get("t") {
            Some(Vector::Sparse(s)) => Some(s),
            _ => None,
        })
        .collect();
    for (space, query) in [
        ("s", sparse(&[(3, 1.0), (40, 2.0), (25, 0.5)])),
        ("t", sparse(&[(0, 1.0), (4, 2.0)])),
    ] {
        let mut req = SearchRequest::new(20);
        req.using = space.into();
        let hits = c.search_sparse(query.clone(), &req).unwrap();
        let mut weighted = query.clone();
        if space == "t" {
            for (term, w) in weighted.indices.iter().zip(weighted.values.iter_mut()) {
                let df = live_t.iter().filter(|s| s.indices.contains(term)).count() as f64;
                let n = live_t.len() as f64;
                *w *= (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
            }
        }
        let mut truth: Vec<(f32, u64)> = model
            .iter()
            .filter_map(|(&id, v)| match v.get(space) {
                Some(Vector::Sparse(s)) if s.indices.iter().any(|i| query.indices.contains(i)) => {
                    Some((dot(&weighted, s), id))
                }
                _ => None,
            })
            .collect();
        truth.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        truth.truncate(20);
        assert_eq!(hits.len(), truth.len(), "{step}, space {space}");
        for (h, (score, id)) in hits.iter().zip(&truth) {
            assert!(
                (h.score - score).abs() < 1e-4 * score.abs().max(1.0),
                "{step}, space {space}: point {:?} scored {}, want {score} (point {id})",
                h.id,
                h.score
            );
        }
    }
    // Stored vectors come back as written, every space of them.
    let all: Vec<PointId> = model.keys().map(|&i| PointId::Num(i)).collect();
    let records = c.get(&all, false, true).unwrap();
    assert_eq!(records.len(), model.len(), "{step}");
    for r in records {
        let PointId::Num(id) = r.id else { panic!() };
        let got = r.vectors.unwrap();
        let want = &model[&id];
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{step}: spaces of point {id}"
        );
        for (name, v) in want {
            match (v, &got[name]) {
                (Vector::Dense(a), Vector::Dense(b)) => {
                    assert!(
                        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5),
                        "{step}: {id}"
                    )
                }
                (a, b) => assert_eq!(a, b, "{step}: point {id}, space {name}"),
            }
        }
    }
}

#[test]
fn spaces_hold_any_subset_of_vectors_through_seals_merges_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db.create_collection("spaces", config()).unwrap();
        for start in (0..POINTS).step_by(60) {
            upsert(&c, &mut model, start..(start + 60).min(POINTS), 0);
        }
        check(&c, &model, "written");
        wait_until("two seals", Duration::from_secs(120), || {
            c.info()
                .segments
                .iter()
                .filter(|s| s.kind == "sealed")
                .count()
                >= 2
        });
        check(&c, &model, "sealed");
        let gone: Vec<u64> = (0..POINTS).filter(|i| i % 7 == 3).collect();
        c.delete(gone.iter().map(|&i| PointId::Num(i)).collect())
            .unwrap();
        for i in gone {
            model.remove(&i);
        }
        // Rewritten points change which spaces they have a vector in.
        upsert(&c, &mut model, (0..POINTS).filter(|i| i % 13 == 1), 1);
        check(&c, &model, "deleted and rewritten");
        c.optimize(true).unwrap();
        assert_eq!(
            c.info()
                .segments
                .iter()
                .filter(|s| s.kind == "sealed")
                .count(),
            1
        );
        check(&c, &model, "merged");
        db.close().unwrap();
    }
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("spaces").unwrap();
    check(&c, &model, "reopened");
}

/// Vectors a collection cannot hold are refused by name, and nothing is written.
#[test]
fn vectors_outside_the_spaces_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("spaces", config()).unwrap();
    let refused = |name: &str, v: Vector| {
        let p = PointRecord {
            id: PointId::Num(1),
            vectors: NamedVectors::from([(name.to_string(), v)]),
            payload: Default::default(),
        };
        c.upsert(vec![p]).unwrap_err().to_string()
    };
    assert!(refused("x", Vector::Dense(vec![1.0; 4])).contains("no vector space named \"x\""));
    assert!(refused("", Vector::Dense(vec![1.0; 4])).contains("no unnamed vector space"));
    assert!(refused("a", Vector::Dense(vec![1.0; 5])).contains("expected dim: 4, got 5"));
    assert!(refused("s", Vector::Dense(vec![1.0; 4])).contains("is sparse"));
    assert!(refused("a", Vector::Sparse(sparse(&[(1, 1.0)]))).contains("is dense"));
    assert!(refused("s", Vector::Sparse(sparse(&[(1, 1.0), (1, 2.0)]))).contains("repeats"));
    assert!(refused("s", Vector::Sparse(sparse(&[(1, f32::NAN)]))).contains("not finite"));
    assert_eq!(c.len(), 0);
    let mut req = SearchRequest::new(5);
    req.using = "s".into();
    assert!(c
        .search(&[0.0; 4], &req)
        .unwrap_err()
        .to_string()
        .contains("sparse space"));
    req.using = "a".into();
    assert!(c
        .search_sparse(sparse(&[(1, 1.0)]), &req)
        .unwrap_err()
        .to_string()
        .contains("dense space"));
    // A point with no vector at all is a point (Qdrant allows it), found by id only.
    c.upsert(vec![PointRecord {
        id: PointId::Num(9),
        vectors: NamedVectors::new(),
        payload: Default::default(),
    }])
    .unwrap();
    assert_eq!(c.len(), 1);
    assert!(c.search(&[0.0; 4], &req).unwrap().is_empty());
}

/// A multivector space: each point holds some rows, scored by MaxSim (each query row's best
/// dot product among the point's rows, summed), in the growing segment, sealed and reopened.
#[test]
fn multivectors_score_by_max_sim_through_a_seal_and_a_reopen() {
    use diskvec_db::query::{Query, QueryRequest, VectorInput};
    let dir = tempfile::tempdir().unwrap();
    let rows = |i: u64| -> Vec<Vec<f32>> {
        (0..1 + i % 3)
            .map(|r| clustered_vector(i * 10 + r, 4, 6))
            .collect()
    };
    let max_sim = |q: &[Vec<f32>], doc: &[Vec<f32>]| -> f32 {
        q.iter()
            .map(|qr| {
                doc.iter()
                    .map(|d| qr.iter().zip(d).map(|(a, b)| a * b).sum::<f32>())
                    .fold(f32::NEG_INFINITY, f32::max)
            })
            .sum()
    };
    let query = vec![clustered_vector(7_001, 4, 6), clustered_vector(7_002, 4, 6)];
    let check = |c: &Collection, step: &str| {
        let mut q = QueryRequest::new(Some(Query::Nearest(VectorInput::Multi(query.clone()))), 10);
        q.using = "m".into();
        let hits = c.query(&q, false, true).unwrap();
        let mut want: Vec<(f32, u64)> = (0..200u64)
            .filter(|i| i % 5 != 0)
            .map(|i| (max_sim(&query, &rows(i)), i))
            .collect();
        want.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        assert_eq!(hits.len(), 10, "{step}");
        for (h, (score, id)) in hits.iter().zip(&want) {
            assert_eq!(h.id, PointId::Num(*id), "{step}");
            assert!(
                (h.score - score).abs() < 1e-3 * score.abs().max(1.0),
                "{step}"
            );
            let Some(Vector::Multi(got)) = h.vectors.as_ref().unwrap().get("m") else {
                panic!("{step}: no multivector back")
            };
            assert_eq!(got, &rows(*id), "{step}");
        }
    };
    let mut config = CollectionConfig::with_spaces(Vec::new(), Vec::new());
    config.multi = vec![DenseSpace::new("m", 4, Metric::InnerProduct)];
    config.seal_threshold = 80;
    config.idle_merge_ms = 0;
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db.create_collection("multi", config).unwrap();
        let points: Vec<PointRecord> = (0..200u64)
            .map(|i| PointRecord {
                id: PointId::Num(i),
                // Every fifth point has no multivector.
                vectors: if i % 5 == 0 {
                    NamedVectors::new()
                } else {
                    NamedVectors::from([("m".to_string(), Vector::Multi(rows(i)))])
                },
                payload: Default::default(),
            })
            .collect();
        c.upsert(points).unwrap();
        check(&c, "growing");
        c.optimize(true).unwrap();
        check(&c, "sealed");
        let bad = PointRecord {
            id: PointId::Num(1_000),
            vectors: NamedVectors::from([("m".to_string(), Vector::Multi(vec![vec![1.0; 3]]))]),
            payload: Default::default(),
        };
        assert!(c
            .upsert(vec![bad])
            .unwrap_err()
            .to_string()
            .contains("expected dim: 4, got 3"));
        db.close().unwrap();
    }
    let db = Database::open(dir.path()).unwrap();
    check(&db.collection("multi").unwrap(), "reopened");
}

/// `has_vector` filters ask each segment, growing or sealed, which spaces a point has a
/// vector in; scrolls, counts and searches agree with what was written.
#[test]
fn has_vector_filters_see_which_spaces_each_point_fills() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = db.create_collection("h", config()).unwrap();
    let point = |i: u64| {
        let mut v = NamedVectors::new();
        if i.is_multiple_of(2) {
            v.insert("a".into(), Vector::Dense(clustered_vector(i, 4, 3)));
        }
        if i.is_multiple_of(3) {
            v.insert(
                "s".into(),
                Vector::Sparse(SparseVector {
                    indices: vec![1, 2],
                    values: vec![1.0, 0.5],
                }),
            );
        }
        if v.is_empty() {
            v.insert("b".into(), Vector::Dense(clustered_vector(i, 6, 3)));
        }
        PointRecord {
            id: PointId::Num(i),
            vectors: v,
            payload: Default::default(),
        }
    };
    // Sealed first, then a growing tail.
    col.upsert((0..300).map(point).collect()).unwrap();
    col.optimize(true).unwrap();
    col.upsert((300..360).map(point).collect()).unwrap();
    let has = |name: &str| {
        diskvec_db::Filter::from_json(&serde_json::json!({"must": [{"has_vector": name}]})).unwrap()
    };
    assert_eq!(col.count(Some(&has("a"))).unwrap(), 180);
    assert_eq!(col.count(Some(&has("s"))).unwrap(), 120);
    let neither = (0..360u64)
        .filter(|i| !i.is_multiple_of(2) && !i.is_multiple_of(3))
        .count();
    assert_eq!(col.count(Some(&has("b"))).unwrap(), neither);
    assert_eq!(col.count(Some(&has("nope"))).unwrap(), 0);
    // In a search of another space too.
    let mut req = SearchRequest::new(20);
    req.using = "a".into();
    req.filter = Some(has("s"));
    let hits = col.search(&clustered_vector(6, 4, 3), &req).unwrap();
    assert!(!hits.is_empty());
    for h in hits {
        let PointId::Num(i) = h.id else { panic!() };
        assert!(i.is_multiple_of(6), "{i} has no sparse vector");
    }
}
