//! `quantization` (Qdrant's `quantization_config`) sizes the codes sealed segments keep in
//! DRAM: the bits per dimension its kind implies (8 for scalar int8, 32 / N for product xN,
//! 1 for binary), a space's own setting ahead of the collection's; searches through any of them still re-rank by the
//! full vectors.

mod common;

use common::clustered_points;
use diskvec_db::{CollectionConfig, Database, Quantization, SearchRequest};
use diskvec_vector::Metric;
use serde_json::json;

const DIM: usize = 32;
const POINTS: u64 = 800;

/// Code bytes per point of a collection sealed with `configure`, and its recall@10 on its
/// own points.
fn sealed_with(
    db: &Database,
    name: &str,
    configure: impl FnOnce(&mut CollectionConfig),
) -> (u64, f64) {
    let mut c = CollectionConfig::new(DIM, Metric::L2);
    c.seal_threshold = 1000;
    c.idle_merge_ms = 0;
    configure(&mut c);
    let col = db.create_collection(name, c).unwrap();
    col.upsert(clustered_points(0..POINTS, DIM, 8)).unwrap();
    col.optimize(true).unwrap();
    let info = col.info();
    let per_point = info.search_memory.code_bytes / POINTS;
    let mut found = 0;
    for q in (0..POINTS).step_by(40) {
        let query = common::clustered_vector(q, DIM, 8);
        let hits = col.search(&query, &SearchRequest::new(10)).unwrap();
        found += usize::from(
            hits.first()
                .is_some_and(|h| h.id == diskvec_db::PointId::Num(q)),
        );
    }
    (per_point, found as f64 / (POINTS / 40) as f64)
}

#[test]
fn quantization_sets_the_size_of_the_dram_codes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let q = |bits_per_dim: f32, given: serde_json::Value| Quantization {
        bits_per_dim,
        given,
    };
    let scalar = q(8.0, json!({"scalar": {"type": "int8", "quantile": 0.99}}));
    let (bytes, hit) = sealed_with(&db, "scalar", |c| c.quantization = Some(scalar.clone()));
    assert_eq!(bytes, DIM as u64);
    assert_eq!(hit, 1.0, "each point finds itself first");
    let x16 = q(
        2.0,
        json!({"product": {"compression": "x16", "always_ram": true}}),
    );
    let (bytes, hit) = sealed_with(&db, "x16", |c| c.quantization = Some(x16));
    assert_eq!(bytes, (4 * DIM / 16) as u64);
    assert_eq!(hit, 1.0, "re-ranked by the full vectors");
    // A space's own setting comes first.
    let (bytes, _) = sealed_with(&db, "own", |c| {
        c.quantization = Some(scalar);
        c.dense[0].quantization = Some(q(1.0, json!({"binary": {}})));
    });
    assert_eq!(bytes, (DIM / 8) as u64);
}
