//! Valid encodings each target starts from, written by the project's own encoders and
//! writers, and the committed inputs that once broke a decoder (`regressions/<target>/`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float64Builder, Int32Builder, ListBuilder};
use arrow_array::{ArrayRef, Int32Array, RecordBatch};
use diskvec_dataset::{write_neighbors, write_vectors, Matrix, Neighbors};
use diskvec_index::diskann::{build, BuildParams, Header};
use diskvec_index::NoProgress;
use diskvec_vector::{Metric, ProductQuantizer};

fn small_vectors(n: usize, dim: usize) -> Vec<f32> {
    (0..n * dim)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

fn sample_header() -> Header {
    Header {
        metric: Metric::Cosine,
        dim: 8,
        max_degree: 4,
        count: 40,
        medoid: 3,
        build_list: 16,
        alpha: 1.2,
        pq_bytes: 2,
        build_id: 0xfeed,
        meta_crc: 0xabcd,
        stripe_bytes: 65536,
        path_count: 1,
        mirrored: false,
        element: diskvec_vector::ElementType::Float32,
    }
}

/// A tiny index built by `diskann::build`, so `meta.dvm` is exactly what a build writes.
fn built_meta() -> Vec<u8> {
    built_file(|name| name == diskvec_index::diskann::META_FILE)
}

/// The navigation file of the same tiny build.
fn built_nav() -> Vec<u8> {
    built_file(|name| name.starts_with("nav.") && name.ends_with(".dvr"))
}

/// The compact code file of a tiny build whose codes are large enough to have one.
fn built_compact() -> Vec<u8> {
    built_file_of(8, 8, |name| name.ends_with(".dvq"))
}

/// A file of a tiny index, picked by name.
fn built_file(pick: impl Fn(&str) -> bool) -> Vec<u8> {
    built_file_of(4, 2, pick)
}

/// A file of a tiny index of `dim` dimensions and `pq_bytes` codes, picked by name.
fn built_file_of(dim: usize, pq_bytes: usize, pick: impl Fn(&str) -> bool) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let n = 40;
    let data = small_vectors(n, dim);
    let ids: Vec<i64> = (0..n as i64).map(|i| 1000 + i).collect();
    let params = BuildParams {
        metric: Metric::L2,
        max_degree: 4,
        build_list: 8,
        pq_bytes: Some(pq_bytes),
        pq_sample: n,
        entry_points: 3,
        ..BuildParams::default()
    };
    build(&data, dim, &ids, &params, dir.path(), &NoProgress).expect("a tiny build");
    let file = std::fs::read_dir(dir.path())
        .expect("the index directory")
        .flatten()
        .find(|e| pick(&e.file_name().to_string_lossy()))
        .expect("the file");
    std::fs::read(file.path()).expect("the file's bytes")
}

fn pq_codebook(dim: usize, subspaces: usize, use_l2: bool) -> Vec<u8> {
    let data = small_vectors(300, dim);
    ProductQuantizer::train(&data, dim, subspaces, use_l2, 300, 1)
        .expect("a codebook")
        .to_bytes()
}

fn npy_bytes(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(body);
    out
}

fn vecs_bytes(rows: usize, dim: usize, elem: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in 0..rows {
        out.extend_from_slice(&(dim as i32).to_le_bytes());
        for d in 0..dim {
            out.extend(elem.iter().map(|b| b.wrapping_add((r * dim + d) as u8)));
        }
    }
    out
}

fn scratch_file(name: &str, write: impl FnOnce(&Path)) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let p = dir.path().join(name);
    write(&p);
    std::fs::read(&p).expect("the file just written")
}

fn parquet_of(columns: Vec<(&str, ArrayRef)>) -> Vec<u8> {
    scratch_file("x.parquet", |p| {
        let batch = RecordBatch::try_from_iter(columns).expect("a batch");
        let file = std::fs::File::create(p).expect("a scratch file");
        let mut w =
            parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).expect("a writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
    })
}

fn parquet_vector_seeds() -> Vec<Vec<u8>> {
    let (n, dim) = (6, 3);
    let m = Matrix {
        data: small_vectors(n, dim),
        dim,
        ids: (0..n as i64).collect(),
    };
    let written = scratch_file("train.parquet", |p| write_vectors(p, &m).expect("write"));
    // Layouts other writers use: fixed-size lists of f64 and no id column.
    let mut fixed = FixedSizeListBuilder::new(Float64Builder::new(), 2);
    for r in 0..4 {
        fixed.values().append_slice(&[r as f64, 0.5]);
        fixed.append(true);
    }
    let fixed = parquet_of(vec![("emb", Arc::new(fixed.finish()) as ArrayRef)]);
    vec![written, fixed]
}

fn parquet_neighbor_seeds() -> Vec<Vec<u8>> {
    let gt = Neighbors {
        query_ids: vec![0, 1, 2],
        lists: vec![vec![5, 6, 7], vec![1, 2, 3], vec![9, 8, 7]],
    };
    let written = scratch_file("neighbors.parquet", |p| {
        write_neighbors(p, &gt).expect("write")
    });
    let mut lists = ListBuilder::new(Int32Builder::new());
    for r in 0..3 {
        lists.values().append_slice(&[r, r + 1]);
        lists.append(true);
    }
    let int32 = parquet_of(vec![
        ("id", Arc::new(Int32Array::from(vec![0, 1, 2])) as ArrayRef),
        ("neighbors", Arc::new(lists.finish()) as ArrayRef),
    ]);
    vec![written, int32]
}

/// Valid encodings for `target`.
pub fn valid(target: &str) -> Vec<Vec<u8>> {
    match target {
        "header" => {
            let mut mirrored = sample_header();
            (mirrored.path_count, mirrored.mirrored) = (3, true);
            let mut big = sample_header();
            (big.dim, big.count, big.medoid) = (1536, 5000, 4999);
            // A version-4 header too: float16 records, two more a sector.
            let mut half = sample_header();
            half.element = diskvec_vector::ElementType::Float16;
            vec![
                sample_header().encode(),
                mirrored.encode(),
                big.encode(),
                half.encode(),
            ]
        }
        "meta" => vec![built_meta()],
        "nav" => vec![built_nav()],
        "compact" => vec![built_compact()],
        "pq" => vec![pq_codebook(4, 2, true), pq_codebook(3, 3, false)],
        "npy" => {
            let f4: Vec<u8> = small_vectors(3, 2)
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let f8: Vec<u8> = small_vectors(2, 2)
                .iter()
                .flat_map(|&x| (x as f64).to_le_bytes())
                .collect();
            vec![
                npy_bytes("<f4", "(3, 2)", &f4),
                npy_bytes("<f8", "(2, 2)", &f8),
            ]
        }
        "vecs" => vec![
            vecs_bytes(3, 2, &1f32.to_le_bytes()),
            vecs_bytes(4, 3, &[7]),
            vecs_bytes(2, 3, &5i32.to_le_bytes()),
        ],
        "parquet_vectors" => parquet_vector_seeds(),
        "parquet_neighbors" => parquet_neighbor_seeds(),
        "operation" => diskvec_db::fuzzing::operation_seeds(),
        "wal_file" => vec![crate::log_file::wal_file_seed()],
        "manifest" => diskvec_db::fuzzing::manifest_seeds(),
        "snapshot" => vec![crate::outside::snapshot_seed()],
        "requests" => crate::outside::request_seeds(),
        other => panic!("no target named {other}"),
    }
}

/// Directory of committed inputs that once broke `target`.
pub fn regression_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(target)
}

/// The committed regression inputs of `target`, by file name.
pub fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(dir) = std::fs::read_dir(regression_dir(target)) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect();
    out.sort();
    out
}
