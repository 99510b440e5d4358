#![allow(dead_code)]
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Clustered vectors with low intrinsic dimension, like real embeddings.
pub fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..32)
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0..1.0)).collect())
        .collect();
    let basis: Vec<Vec<f32>> = (0..8)
        .map(|_| (0..dim).map(|_| rng.random_range(-0.3..0.3)).collect())
        .collect();
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let c = &centres[(i * 7919) % centres.len()];
        let w: Vec<f32> = (0..basis.len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        for d in 0..dim {
            let lowrank: f32 = basis.iter().zip(&w).map(|(b, w)| b[d] * w).sum();
            out.push(c[d] + lowrank + rng.random_range(-0.02..0.02));
        }
    }
    out
}

pub fn recall(got: &[i64], truth: &[i64], k: usize) -> f64 {
    let truth = &truth[..k.min(truth.len())];
    got.iter().take(k).filter(|id| truth.contains(id)).count() as f64 / truth.len() as f64
}

/// Exact nearest rows of each query (row number, distance), both prepared for `metric`.
pub fn exact_rows(
    data: &[f32],
    queries: &[f32],
    dim: usize,
    metric: diskvec_vector::Metric,
    k: usize,
) -> Vec<Vec<(usize, f32)>> {
    use diskvec_vector::Rows;
    let prepare = |v: &[f32]| {
        let mut out = v.to_vec();
        out.chunks_exact_mut(dim).for_each(|r| metric.prepare(r));
        out
    };
    let (base, q) = (prepare(data), prepare(queries));
    let found = diskvec_index::flat::search(
        Rows::new(&base, dim),
        Rows::new(&q, dim),
        metric,
        k,
        &diskvec_index::NoProgress,
    )
    .unwrap();
    found
        .into_iter()
        .map(|r| r.into_iter().map(|(i, d)| (i as usize, d)).collect())
        .collect()
}

/// The ids (`ids[row]`) of each query's exact 10 nearest rows under `metric`, closest first.
pub fn exact_ids_10(
    data: &[f32],
    queries: &[f32],
    dim: usize,
    metric: diskvec_vector::Metric,
    ids: &[i64],
) -> Vec<Vec<i64>> {
    exact_rows(data, queries, dim, metric, 10)
        .into_iter()
        .map(|r| r.into_iter().map(|(i, _)| ids[i]).collect())
        .collect()
}

/// The engines to test: pread, and io_uring by name wherever it can run (so a silent
/// fallback cannot pass for it). DISKVEC_REQUIRE_URING (set by CI) makes its absence fail.
pub fn engines() -> Vec<diskvec_io::EngineChoice> {
    use diskvec_io::EngineChoice;
    if diskvec_io::uring_available() {
        return vec![EngineChoice::Pread, EngineChoice::Uring];
    }
    assert!(
        std::env::var_os("DISKVEC_REQUIRE_URING").is_none(),
        "io_uring is required (DISKVEC_REQUIRE_URING) but cannot be set up here"
    );
    vec![EngineChoice::Pread]
}

/// The shard knob (`SHARD_CAPACITY_VAR`) is process-wide: a test file's builds, and its tests
/// that set it, take turns under this lock.
pub static SHARD_KNOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Builds `data` (rows of `dim`, one id each) into `dir` within 1 GiB: in memory, or with
/// `shard_capacity` in shards of at most that many vectors.
pub fn build_in(
    data: &[f32],
    dim: usize,
    ids: &[i64],
    params: &diskvec_index::diskann::BuildParams,
    dir: &std::path::Path,
    shard_capacity: Option<usize>,
) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
    build_in_order(data, dim, ids, params, dir, shard_capacity, false)
}

/// As `build_in`; `input_order`: a build in shards keeps nodes in input order, its codes
/// streamed into the index files (the path of a build whose merged graph does not fit).
pub fn build_in_order(
    data: &[f32],
    dim: usize,
    ids: &[i64],
    params: &diskvec_index::diskann::BuildParams,
    dir: &std::path::Path,
    shard_capacity: Option<usize>,
    input_order: bool,
) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
    build_source(
        &mut diskvec_index::diskann::SliceSource::new(data, dim, ids),
        params,
        dir,
        Knobs {
            shard_capacity,
            input_order,
        },
        &diskvec_index::NoProgress,
    )
}

/// The process-wide build knobs a test sets for one build.
#[derive(Clone, Copy, Debug, Default)]
pub struct Knobs {
    /// Shards of at most this many vectors (`SHARD_CAPACITY_VAR`); `None`: as the budget says.
    pub shard_capacity: Option<usize>,
    /// A build in shards keeps nodes in input order (`INPUT_ORDER_VAR`).
    pub input_order: bool,
}

/// Builds `source` into `dir` within 1 GiB with `knobs` set for this build only (taking
/// turns under `SHARD_KNOB`), telling `progress`.
pub fn build_source(
    source: &mut dyn diskvec_index::diskann::VectorSource,
    params: &diskvec_index::diskann::BuildParams,
    dir: &std::path::Path,
    knobs: Knobs,
    progress: &dyn diskvec_index::Progress,
) -> diskvec_index::Result<diskvec_index::diskann::BuildReport> {
    use diskvec_index::diskann::{build_from, MemoryBudget, INPUT_ORDER_VAR, SHARD_CAPACITY_VAR};
    let _turn = SHARD_KNOB.lock().unwrap_or_else(|e| e.into_inner());
    match knobs.shard_capacity {
        Some(c) => std::env::set_var(SHARD_CAPACITY_VAR, c.to_string()),
        None => std::env::remove_var(SHARD_CAPACITY_VAR),
    }
    match knobs.input_order {
        true => std::env::set_var(INPUT_ORDER_VAR, "1"),
        false => std::env::remove_var(INPUT_ORDER_VAR),
    }
    let result = build_from(source, params, MemoryBudget::Bytes(1 << 30), dir, progress);
    std::env::remove_var(SHARD_CAPACITY_VAR);
    std::env::remove_var(INPUT_ORDER_VAR);
    result
}

/// The names of the files in `dir`, sorted.
pub fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Mean recall@10 of `queries` (rows of `dim`) searched in the index in `dir` at
/// `search_list`, against `truth` (ids, closest first).
pub fn recall_at_10(
    dir: &std::path::Path,
    queries: &[f32],
    dim: usize,
    truth: &[Vec<i64>],
    search_list: usize,
    navigation: bool,
) -> f64 {
    use diskvec_index::diskann::{DiskIndex, OpenOptions, SearchParams};
    let options = OpenOptions {
        navigation,
        ..Default::default()
    };
    let index = DiskIndex::open(dir, &options).unwrap();
    let params = SearchParams {
        k: 10,
        search_list,
        ..Default::default()
    };
    let (results, _) = index
        .search_batch(diskvec_vector::Rows::new(queries, dim), &params, 1)
        .unwrap();
    let total: f64 = results
        .iter()
        .zip(truth)
        .map(|(r, t)| recall(&r.ids, t, 10))
        .sum();
    total / truth.len() as f64
}
