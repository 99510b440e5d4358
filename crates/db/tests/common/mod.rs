//! Helpers shared by the test files that include this module.

use diskvec_db::{PointId, PointRecord};

/// Points of 4 dimensions, no payload, each vector distinct and found by itself.
pub fn small_points(range: std::ops::Range<u64>) -> Vec<PointRecord> {
    range
        .map(|i| PointRecord {
            id: PointId::Num(i),
            vector: vec![i as f32, 1.0, (i % 7) as f32, 2.0],
            payload: Default::default(),
        })
        .collect()
}
