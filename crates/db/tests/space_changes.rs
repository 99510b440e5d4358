//! Adding and deleting vector spaces of a collection that holds points in sealed and
//! growing segments: an added space starts empty and fills as points are given vectors in
//! it; a deleted one disappears from every answer at once (search, retrieval, filters,
//! writes) and its vectors are gone from the segments rebuilt after; a space created again
//! under a deleted one's name is a new, empty space of its own shape. All of it survives
//! a seal, a merge and a reopen.

mod common;

use std::sync::Arc;

use common::clustered_vector;
use diskvec_db::{
    Collection, CollectionConfig, Database, DbError, DenseSpace, Filter, NamedVectors, NewSpace,
    PointId, PointRecord, SearchRequest, SparseModifier, SparseSpace, SparseVector, Vector,
};
use diskvec_vector::Metric;
use serde_json::json;

const POINTS: u64 = 250;

fn config() -> CollectionConfig {
    let mut c = CollectionConfig::with_spaces(
        vec![DenseSpace::new("a", 4, Metric::L2)],
        vec![SparseSpace::new("s", SparseModifier::None)],
    );
    c.seal_threshold = 100;
    c.max_degree = 8;
    c.build_list = 16;
    c.idle_merge_ms = 0;
    c
}

fn point(id: u64, vectors: Vec<(&str, Vector)>) -> PointRecord {
    PointRecord {
        id: PointId::Num(id),
        vectors: vectors
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
        payload: Default::default(),
    }
}

fn sparse(term: u32) -> Vector {
    Vector::Sparse(SparseVector {
        indices: vec![term],
        values: vec![1.0],
    })
}

/// The names of the spaces point `id` has a vector in, with their lengths.
fn shapes(c: &Collection, id: u64) -> Vec<(String, usize)> {
    let record = c
        .get(&[PointId::Num(id)], false, true)
        .unwrap()
        .pop()
        .unwrap();
    let vectors: NamedVectors = record.vectors.unwrap_or_default();
    vectors
        .into_iter()
        .map(|(name, v)| {
            let len = match v {
                Vector::Dense(d) => d.len(),
                Vector::Sparse(s) => s.indices.len(),
                Vector::Multi(m) => m.len(),
            };
            (name, len)
        })
        .collect()
}

fn ids_in(c: &Collection, using: &str, query: &[f32]) -> Vec<u64> {
    let mut req = SearchRequest::new(POINTS as usize);
    req.using = using.into();
    req.exact = true;
    let mut ids: Vec<u64> = c
        .search(query, &req)
        .unwrap()
        .into_iter()
        .map(|h| match h.id {
            PointId::Num(n) => n,
            PointId::Uuid(_) => unreachable!(),
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn has_vector(name: &str) -> Filter {
    Filter::from_json(&json!({"must": [{"has_vector": name}]})).unwrap()
}

/// Every check of the state after the changes, before and after a reopen.
fn check(c: &Arc<Collection>, step: &str) {
    assert_eq!(c.len(), POINTS as usize, "{step}");
    // "c" was added and given to points 0..50 only.
    assert_eq!(
        ids_in(c, "c", &[1.0, 0.0, 0.0]),
        (0..50).collect::<Vec<_>>(),
        "{step}"
    );
    // "a" was deleted and made again as a 6-dimensional space, given to points 7 and 160.
    assert_eq!(ids_in(c, "a", &[0.5; 6]), vec![7, 160], "{step}");
    assert_eq!(c.count(Some(&has_vector("a"))).unwrap(), 2, "{step}");
    assert_eq!(c.count(Some(&has_vector("c"))).unwrap(), 50, "{step}");
    assert_eq!(
        shapes(c, 7),
        vec![("a".into(), 6), ("c".into(), 3), ("s".into(), 1)],
        "{step}"
    );
    assert_eq!(
        shapes(c, 8),
        vec![("c".into(), 3), ("s".into(), 1)],
        "{step}"
    );
    assert_eq!(shapes(c, 200), vec![("s".into(), 1)], "{step}");
    // The deleted sparse space "u" is gone, and so is every name nobody made.
    let mut req = SearchRequest::new(5);
    req.using = "u".into();
    let err = c
        .search_sparse(sparse(1).sparse().clone(), &req)
        .unwrap_err();
    assert!(err.to_string().contains("u"), "{step}: {err}");
    let described = c.config().describe_spaces();
    assert!(!described.contains("\"u\""), "{step}: {described}");
}

trait SparseOf {
    fn sparse(&self) -> &SparseVector;
}

impl SparseOf for Vector {
    fn sparse(&self) -> &SparseVector {
        match self {
            Vector::Sparse(s) => s,
            _ => panic!("not sparse"),
        }
    }
}

#[test]
fn spaces_are_added_and_deleted_while_points_live_in_every_kind_of_segment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db.create_collection("c", config()).unwrap();
        let points = (0..POINTS)
            .map(|i| {
                point(
                    i,
                    vec![
                        ("a", Vector::Dense(clustered_vector(i, 4, 5))),
                        ("s", sparse((i % 7) as u32)),
                    ],
                )
            })
            .collect();
        c.upsert(points).unwrap();
        c.optimize(true).unwrap();
        // Two sealed segments and a growing one hold the points now.
        c.upsert(vec![point(POINTS - 1, vec![("s", sparse(3))])])
            .unwrap();
        c.upsert(
            (0..POINTS - 1)
                .filter(|i| i % 50 == 0)
                .map(|i| {
                    point(
                        i,
                        vec![
                            ("a", Vector::Dense(clustered_vector(i, 4, 5))),
                            ("s", sparse((i % 7) as u32)),
                        ],
                    )
                })
                .collect(),
        )
        .unwrap();

        let dense = |name: &str, dim, metric| NewSpace::Dense(DenseSpace::new(name, dim, metric));
        c.create_space(dense("c", 3, Metric::InnerProduct)).unwrap();
        c.create_space(NewSpace::Sparse(SparseSpace::new("u", SparseModifier::Idf)))
            .unwrap();
        let again = c.create_space(dense("c", 3, Metric::L2)).unwrap_err();
        assert!(matches!(again, DbError::InvalidInput(_)), "{again}");
        // A space added is empty until points are given vectors in it.
        assert!(ids_in(&c, "c", &[1.0, 0.0, 0.0]).is_empty());
        let with_c = (0..50u64)
            .map(|i| {
                let c = Vector::Dense(vec![1.0, i as f32, 0.5]);
                (PointId::Num(i), NamedVectors::from([("c".to_string(), c)]))
            })
            .collect();
        c.update_vectors(with_c).unwrap();
        c.update_vectors(vec![(
            PointId::Num(3),
            NamedVectors::from([("u".to_string(), sparse(9))]),
        )])
        .unwrap();

        c.delete_space("a").unwrap();
        c.delete_space("u").unwrap();
        assert!(matches!(
            c.delete_space("a").unwrap_err(),
            DbError::NotFound(_)
        ));
        // Gone from answers at once, and refused in writes.
        assert_eq!(shapes(&c, 8), vec![("c".into(), 3), ("s".into(), 1)]);
        assert_eq!(c.count(Some(&has_vector("a"))).unwrap(), 0);
        let write = c.upsert(vec![point(1, vec![("a", Vector::Dense(vec![0.0; 4]))])]);
        assert!(write.is_err());

        c.create_space(dense("a", 6, Metric::Cosine)).unwrap();
        assert_eq!(
            c.count(Some(&has_vector("a"))).unwrap(),
            0,
            "a new space, empty"
        );
        let six = |i: u64| {
            (
                PointId::Num(i),
                NamedVectors::from([("a".to_string(), Vector::Dense(vec![i as f32 + 1.0; 6]))]),
            )
        };
        c.update_vectors(vec![six(7), six(160)]).unwrap();
        check(&c, "after the changes");

        c.optimize(true).unwrap();
        check(&c, "after a merge");
    }
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    check(&c, "after a reopen");
    // Deleted spaces keep their slots but do not count toward the 64 spaces a collection
    // may have.
    for round in 0..70 {
        let name = format!("t{round}");
        c.create_space(NewSpace::Sparse(SparseSpace::new(
            &name,
            SparseModifier::None,
        )))
        .unwrap();
        c.delete_space(&name).unwrap();
    }
    // The last space standing cannot go: a collection needs one.
    c.delete_space("a").unwrap();
    c.delete_space("c").unwrap();
    let last = c.delete_space("s").unwrap_err();
    assert!(last.to_string().contains("at least one"), "{last}");
}
