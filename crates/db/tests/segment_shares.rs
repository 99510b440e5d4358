//! A collection of several sealed segments asks each for its share of k and of the search
//! list. Points that arrive by topic (each segment one cluster) break the share's premise
//! that a segment is a sample of the whole: the segment that holds the answer must be asked
//! again with the whole list, and the answer must equal the exact one.

mod common;
use common::wait_until;
use std::time::Duration;

use diskvec_db::{CollectionConfig, Database, PointId, PointRecord, SearchRequest};
use diskvec_vector::Metric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CLUSTERS: u64 = 5;
const PER_CLUSTER: u64 = 300;
const DIM: usize = 16;

/// Cluster `c`'s points: one seeded centre, far from the others, and noise around it.
fn cluster(c: u64) -> Vec<PointRecord> {
    let mut centre_rng = SmallRng::seed_from_u64(c);
    let centre: Vec<f32> = (0..DIM)
        .map(|_| centre_rng.random_range(-1.0f32..1.0) * 50.0)
        .collect();
    let mut rng = SmallRng::seed_from_u64(1000 + c);
    (0..PER_CLUSTER)
        .map(|i| {
            let v = centre
                .iter()
                .map(|x| x + rng.random_range(-1.0f32..1.0))
                .collect();
            PointRecord::new(PointId::Num(c * PER_CLUSTER + i), v, Default::default())
        })
        .collect()
}

fn config() -> CollectionConfig {
    let mut c = CollectionConfig::new(DIM, Metric::L2);
    c.seal_threshold = PER_CLUSTER as usize;
    c.max_segment_points = PER_CLUSTER as usize;
    c.max_degree = 16;
    c.build_list = 32;
    c.idle_merge_ms = 0;
    c
}

#[test]
fn a_segment_holding_the_whole_answer_is_asked_again_with_the_whole_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = db.create_collection("c", config()).unwrap();
    for c in 0..CLUSTERS {
        col.upsert(cluster(c)).unwrap();
    }
    wait_until("every cluster sealed", Duration::from_secs(120), || {
        let info = col.info();
        common::sealed_count(&info) == CLUSTERS as usize
            && info.indexed_points == (CLUSTERS * PER_CLUSTER) as usize
    });
    // A query in cluster 2: its 100 nearest are all there, a fifth of the points, which
    // its share (about 33 of k = 100) would not cover.
    let query = cluster(2)[7].vector().unwrap().to_vec();
    let k = 100;
    let exact = col
        .search(
            &query,
            &SearchRequest {
                exact: true,
                ..SearchRequest::new(k)
            },
        )
        .unwrap();
    assert!(exact
        .iter()
        .all(|h| matches!(h.id, PointId::Num(n) if n / PER_CLUSTER == 2)));
    let found = col
        .search(
            &query,
            &SearchRequest {
                search_list: Some(100),
                ..SearchRequest::new(k)
            },
        )
        .unwrap();
    let same = found
        .iter()
        .filter(|h| exact.iter().any(|e| e.id == h.id))
        .count();
    assert!(
        same >= 95,
        "{same} of the exact 100 found (the cluster's segment was not asked again whole)"
    );
    db.close().unwrap();
}
