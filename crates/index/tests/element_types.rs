//! Node records in float16 and uint8: built in memory and in shards, they answer like float32
//! records, hand back the rounded values they hold, and refuse values their type cannot hold.

mod common;

use std::path::Path;

use common::{clustered, exact_ids_10};
use diskvec_index::diskann::{BuildParams, DiskIndex, OpenOptions};
use diskvec_index::NoProgress;
use diskvec_vector::{ElementType, Metric};

const DIM: usize = 48;

fn params(metric: Metric, element: ElementType) -> BuildParams {
    BuildParams {
        metric,
        element,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(12),
        ..Default::default()
    }
}

fn build(
    data: &[f32],
    ids: &[i64],
    params: &BuildParams,
    dir: &Path,
    shard_capacity: Option<usize>,
) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
    // In shards, nodes keep input order, the path of a build too large to place them: the
    // node records' vectors come from the input's last pass, rounded again.
    let input_order = shard_capacity.is_some();
    common::build_in_order(data, DIM, ids, params, dir, shard_capacity, input_order)
}

fn recall_at_10(dir: &Path, queries: &[f32], truth: &[Vec<i64>]) -> f64 {
    common::recall_at_10(dir, queries, DIM, truth, 150, false)
}

/// Whole numbers 0-255 with the clustered data's structure (as uint8 embeddings are).
fn as_bytes(data: &[f32]) -> Vec<f32> {
    let (lo, hi) = data
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    data.iter()
        .map(|&x| ((x - lo) / (hi - lo) * 255.0).round())
        .collect()
}

#[test]
fn narrow_records_answer_like_float32_in_memory_and_in_shards() {
    let n = 5000;
    let ids: Vec<i64> = (0..n as i64).map(|i| 3 * i + 1).collect();
    let cases = [
        (Metric::Cosine, ElementType::Float16, clustered(n, DIM, 3)),
        (Metric::L2, ElementType::Float16, clustered(n, DIM, 3)),
        (
            Metric::InnerProduct,
            ElementType::Float16,
            clustered(n, DIM, 3),
        ),
        (
            Metric::L2,
            ElementType::Uint8,
            as_bytes(&clustered(n, DIM, 3)),
        ),
        (
            Metric::InnerProduct,
            ElementType::Uint8,
            as_bytes(&clustered(n, DIM, 3)),
        ),
    ];
    for (metric, element, data) in cases {
        let queries = data[..100 * DIM].to_vec();
        let truth = exact_ids_10(&data, &queries, DIM, metric, &ids);
        let root = tempfile::tempdir().unwrap();
        let full = root.path().join("f32");
        build(
            &data,
            &ids,
            &params(metric, ElementType::Float32),
            &full,
            None,
        )
        .unwrap();
        let reference = recall_at_10(&full, &queries, &truth);
        for shards in [None, Some(1500)] {
            let dir = root.path().join(format!("{element}-{shards:?}"));
            let report = build(&data, &ids, &params(metric, element), &dir, shards).unwrap();
            assert_eq!(report.shards > 1, shards.is_some());
            let index = DiskIndex::open(&dir, &OpenOptions::default()).unwrap();
            assert_eq!(index.header().element, element);
            assert_eq!(
                index.layout().node_bytes,
                DIM * element.bytes() + 4 + 24 * 4
            );
            let got = recall_at_10(&dir, &queries, &truth);
            eprintln!(
                "{metric} {element} shards {shards:?}: recall@10 {got:.4} (f32 {reference:.4})"
            );
            assert!(
                got >= reference - 0.02,
                "{metric} {element} {shards:?}: {got} vs f32 {reference}"
            );
            // The stored values come back: the input rounded (after cosine's normalization).
            let some: Vec<i64> = ids.iter().step_by(97).copied().collect();
            let mut checked = 0;
            index
                .fetch_vectors(&some, |i, v| {
                    let row = (some[i] - 1) as usize / 3;
                    let mut want = data[row * DIM..(row + 1) * DIM].to_vec();
                    metric.prepare(&mut want);
                    element.round_in_place(&mut want).unwrap();
                    assert_eq!(v, &want[..], "{metric} {element}: row {row}");
                    checked += 1;
                })
                .unwrap();
            assert_eq!(checked, some.len());
            let verified = diskvec_index::diskann::verify(&dir, &NoProgress).unwrap();
            assert!(verified.damage.is_empty());
        }
    }
}

#[test]
fn values_a_type_cannot_hold_are_refused_naming_the_row() {
    let n = 600;
    let ids: Vec<i64> = (0..n as i64).collect();
    let root = tempfile::tempdir().unwrap();
    let mut data = clustered(n, DIM, 9);
    data[417 * DIM + 5] = 70_000.0;
    for shards in [None, Some(200)] {
        let err = build(
            &data,
            &ids,
            &params(Metric::L2, ElementType::Float16),
            &root.path().join("f16"),
            shards,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("vector 417") && err.contains("position 5") && err.contains("65504"),
            "{err}"
        );
    }
    // Cosine scales that row down first: nothing to refuse.
    build(
        &data,
        &ids,
        &params(Metric::Cosine, ElementType::Float16),
        &root.path().join("cos"),
        None,
    )
    .unwrap();
    let mut bytes = as_bytes(&clustered(n, DIM, 9));
    bytes[301 * DIM] = 256.0;
    let err = build(
        &bytes,
        &ids,
        &params(Metric::L2, ElementType::Uint8),
        &root.path().join("u8"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("vector 301") && err.contains("0 to 255"),
        "{err}"
    );
    let err = build(
        &as_bytes(&data),
        &ids,
        &params(Metric::Cosine, ElementType::Uint8),
        &root.path().join("u8cos"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cosine"), "{err}");
}
