use std::path::{Path, PathBuf};
use std::time::Instant;

use diskvec_graph::{FullVectors, Graph, Sq8Vectors, VamanaParams};
use diskvec_io::storage::{FsStorage, Storage};
use diskvec_io::{StripedWriter, SECTOR};
use diskvec_vector::{
    mips_to_l2, ElementType, Metric, ProductQuantizer, Rows, ScalarQuantizer4, ScalarQuantizer8,
};

use super::budget::{BuildShape, MemoryBudget};
use super::compact::compact_path;
use super::graph_builder::{GraphBuilder, Scope};
use super::layout::{seal_sectors, SECTOR_PAYLOAD};
use super::meta_writer::{stage_meta, MetaParts};
use super::nav::{nav_path, Navigation, SteppedAside, WalkCodes};
use super::reorder::sector_order;
use super::source::{check_complete, next_checked, round_to_element, VectorSource};
use super::{commit, Header};
use crate::error::file_error;
use crate::{IndexError, Progress, Result};

/// Parameters of a DISKANN build.
#[derive(Clone, Debug)]
pub struct BuildParams {
    pub metric: Metric,
    /// R: out-degree bound of the graph.
    pub max_degree: usize,
    /// L: candidate-list size while building.
    pub build_list: usize,
    pub alpha: f32,
    /// Bytes of PQ code per vector kept in DRAM; `None` picks dim/4.
    pub pq_bytes: Option<usize>,
    /// Rows sampled to train the PQ codebook.
    pub pq_sample: usize,
    /// Entry nodes besides the medoid (a seeded sample); searches start from the closest.
    pub entry_points: usize,
    /// Directories (one per device or NVMe-oF namespace) to stripe the nodes over; empty
    /// keeps them in the index directory as `nodes.dvn`.
    pub paths: Vec<PathBuf>,
    /// Stripe size when striping over several paths.
    pub stripe_bytes: u64,
    /// Keep a second copy of every stripe on the next path, so reads survive a path failure.
    pub mirror: bool,
    pub seed: u64,
    /// The vectors are already metric-prepared (unit length for cosine): the build reads
    /// them in place instead of preparing a copy (a database seal's vectors are stored so).
    pub input_prepared: bool,
    /// What the graph's distances are computed on while it is built (the node file always
    /// holds the full vectors).
    pub graph_precision: GraphPrecision,
    /// The algorithm the graph comes from (Vamana or PiPNN).
    pub graph_builder: GraphBuilder,
    /// How the node records store the full vectors (float32, float16 or uint8). Narrower
    /// types round each vector once, after the metric preparation, and everything else
    /// (codes, graph, reranking) works on the rounded values.
    pub element: ElementType,
    /// A PQ codebook to encode with instead of training one, when it fits the build (its
    /// dimension, code size and distance) and its rows (`codebook.rs`); a database's seals
    /// reuse their collection's.
    pub codebook: Option<std::sync::Arc<super::Codebook>>,
    /// Where a build in shards keeps each finished shard's graph until it commits, so that
    /// the same build, interrupted, resumes after them when run again (resume.rs); `None`
    /// keeps them in the index directory (`build-checkpoint`).
    pub checkpoint: Option<PathBuf>,
    /// What every durable file of the build is written through (the file system; a crash
    /// model in tests).
    pub storage: std::sync::Arc<dyn Storage>,
}

/// The vectors a graph is built over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GraphPrecision {
    /// 8-bit codes (one step shared by all dimensions): a quarter of the memory and of the
    /// memory traffic of f32, the build's main cost.
    #[default]
    Sq8,
    /// The f32 vectors themselves.
    Full,
}

impl std::str::FromStr for GraphPrecision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "sq8" => Ok(Self::Sq8),
            "f32" | "full" => Ok(Self::Full),
            _ => Err(format!(
                "unknown graph precision {s:?}: expected sq8 or f32"
            )),
        }
    }
}

impl GraphPrecision {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sq8 => "sq8",
            Self::Full => "f32",
        }
    }
}

impl Default for BuildParams {
    fn default() -> Self {
        Self {
            metric: Metric::Cosine,
            max_degree: 64,
            build_list: 100,
            alpha: 1.2,
            pq_bytes: None,
            pq_sample: diskvec_vector::PQ_TRAINING_ROWS,
            entry_points: 256,
            paths: Vec::new(),
            stripe_bytes: 64 * 1024,
            mirror: false,
            seed: 1,
            input_prepared: false,
            graph_precision: GraphPrecision::default(),
            graph_builder: GraphBuilder::default(),
            element: ElementType::Float32,
            codebook: None,
            checkpoint: None,
            storage: std::sync::Arc::new(FsStorage),
        }
    }
}

/// What a build did, phase by phase.
#[derive(Clone, Debug, Default)]
pub struct BuildReport {
    pub count: usize,
    pub dim: usize,
    pub pq_bytes: usize,
    pub pq_seconds: f64,
    pub graph_seconds: f64,
    pub write_seconds: f64,
    pub total_seconds: f64,
    pub nodes_file_bytes: u64,
    pub meta_file_bytes: u64,
    /// 1 for a build held in memory; more when the budget made it build that many shards.
    pub shards: usize,
    /// The memory budget the build was planned for, in bytes (0: none was given).
    pub memory_budget: u64,
    /// Navigation was left off because it would not pay on this data (its navigation file
    /// says so and holds nothing else).
    pub navigation_off: Option<SteppedAside>,
    /// The PQ codebook the index's codes were made with (trained, or the one given).
    pub codebook: Option<std::sync::Arc<super::Codebook>>,
    /// Vectors that kept the lists of a graph the input already had (a merge of sealed
    /// segments in shards passes theirs on: `VectorSource::seed_lists`); 0 otherwise.
    pub seeded: usize,
    /// Shards of a build in shards whose graph an interrupted build of the same input had
    /// finished and this one took up.
    pub resumed_shards: usize,
    /// A build in shards: the disk it estimated it would hold at its peak (index and
    /// scratch, without the margin it also asked for), checked before it began.
    pub disk_peak_estimate: Option<u64>,
}

/// Checks a build's parameters for `n` vectors of `dim` dimensions; returns the PQ code size.
impl BuildParams {
    /// Where a build into `out` keeps its finished shard graphs.
    pub(crate) fn checkpoint_dir(&self, out: &Path) -> PathBuf {
        self.checkpoint
            .clone()
            .unwrap_or_else(|| out.join(super::resume::CHECKPOINT_DIR))
    }

    /// What a build of `n` vectors of `dim` dimensions with these parameters needs of
    /// memory, to plan it under a budget; refuses parameters no build takes.
    pub fn shape(&self, n: usize, dim: usize) -> Result<BuildShape> {
        Ok(BuildShape {
            n,
            dim,
            max_degree: self.max_degree,
            pq_bytes: check_build(self, dim, n)?,
            threads: rayon::current_num_threads(),
            inner_product: self.metric == Metric::InnerProduct,
            quantized_graph: self.graph_precision == GraphPrecision::Sq8,
            graph_builder: self.graph_builder,
        })
    }
}

fn check_build(params: &BuildParams, dim: usize, n: usize) -> Result<usize> {
    let pq_bytes = check_params(params, dim)?;
    if params.stripe_bytes == 0 || !params.stripe_bytes.is_multiple_of(SECTOR as u64) {
        return Err(IndexError::InvalidArgument(format!(
            "stripe size must be a positive multiple of 4 KiB, got {} bytes",
            params.stripe_bytes
        )));
    }
    if params.mirror && params.paths.len() < 2 {
        return Err(IndexError::InvalidArgument(
            "--mirror needs at least two paths".into(),
        ));
    }
    if n > u32::MAX as usize - 1 {
        return Err(IndexError::InvalidArgument(format!(
            "{n} vectors exceed the 2^32-1 limit of one index"
        )));
    }
    // The navigation file numbers neighbour ids with u32 offsets.
    if n as u64 * params.max_degree as u64 > u32::MAX as u64 {
        return Err(IndexError::InvalidArgument(format!(
            "{n} vectors of out-degree up to {} exceed the 2^32 neighbour ids one index \
             holds; lower --max-degree or split the data",
            params.max_degree
        )));
    }
    Ok(pq_bytes)
}

fn check_params(p: &BuildParams, dim: usize) -> Result<usize> {
    crate::limits::MAX_DEGREE.check(p.max_degree)?;
    crate::limits::BUILD_LIST.check(p.build_list)?;
    if !(p.alpha >= 1.0 && p.alpha.is_finite()) {
        return Err(IndexError::InvalidArgument(format!(
            "alpha must be a finite number >= 1.0, got {}",
            p.alpha
        )));
    }
    if p.element == ElementType::Uint8 && p.metric == Metric::Cosine {
        return Err(IndexError::InvalidArgument(
            "uint8 storage holds whole numbers and cosine vectors are scaled to unit length \
             first: use float16 or float32 for cosine, or the l2 or ip metric"
                .into(),
        ));
    }
    crate::limits::pq_bytes(dim).check(p.pq_bytes.unwrap_or((dim / 4).max(1)))
}

/// A seeded uniform sample of node positions, sorted: spread over the data in proportion
/// to its density, which is where queries land.
pub(crate) fn entry_sample(n: usize, count: usize, seed: u64) -> Vec<u32> {
    use rand::SeedableRng;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ 0xe17e);
    let mut picked: Vec<u32> = rand::seq::index::sample(&mut rng, n, count.min(n))
        .into_iter()
        .map(|i| i as u32)
        .collect();
    picked.sort_unstable();
    picked
}

/// The navigation data of a build, by disk position: 4-bit codes of the (prepared)
/// vectors with their squared norms, and the graph's neighbour lists.
fn navigation(
    prepared: &[f32],
    dim: usize,
    metric: Metric,
    pq: (&ProductQuantizer, &[u8]),
    graph: &Graph,
    order: &[u32],
    position: &[u32],
) -> Navigation {
    let sq = ScalarQuantizer4::train(prepared, dim);
    let m = sq.code_bytes();
    let n = order.len();
    let mut codes = vec![0u8; n * (m + 4)];
    let mut offsets = Vec::with_capacity(n + 1);
    let mut adjacency = Vec::new();
    offsets.push(0u32);
    for (&old, record) in order.iter().zip(codes.chunks_exact_mut(m + 4)) {
        let v = &prepared[old as usize * dim..(old as usize + 1) * dim];
        sq.encode(v, &mut record[..m]);
        let norm: f32 = v.iter().map(|x| x * x).sum();
        record[m..].copy_from_slice(&norm.to_le_bytes());
        adjacency.extend(graph.neighbors(old).iter().map(|&q| position[q as usize]));
        offsets.push(adjacency.len() as u32);
    }
    // Row `i` of the data is node `position[i]`: its code and norm are in `codes` already.
    let record = |i: usize| {
        let at = position[i] as usize * (m + 4);
        &codes[at..at + m + 4]
    };
    let (pq, pq_codes) = pq;
    let pq_bytes = pq.code_bytes();
    let row = |i: usize| &prepared[i * dim..(i + 1) * dim];
    let (walk, code_recall) = walk_codes(
        n,
        metric,
        pq,
        &sq,
        row,
        |q, i| metric.distance(row(q), row(i)),
        |i| SampledCodes {
            pq: &pq_codes[i * pq_bytes..(i + 1) * pq_bytes],
            sq: record(i),
        },
    );
    Navigation {
        walk,
        code_recall,
        sq,
        codes,
        offsets,
        neighbors: adjacency,
    }
}

/// The rows the walk-codes check looks at, for an index of `n` rows: an evenly spaced pool of
/// up to 20,000 rows, and up to 50 query rows spread between them. (On a sparser sample
/// neighbours lie farther apart and are easier to rank, so the share would flatter the
/// codes on large indexes.)
pub(crate) fn walk_sample(n: usize) -> (Vec<usize>, Vec<usize>) {
    const QUERIES: usize = 50;
    const POOL: usize = 20_000;
    let pool: Vec<usize> = (0..n).step_by(n.div_ceil(POOL).max(1)).collect();
    let queries = (n.div_ceil(POOL) / 2..n)
        .step_by(n.div_ceil(QUERIES).max(1))
        .take(QUERIES)
        .collect();
    (pool, queries)
}

/// What the walk-codes check reads of a pool row: its PQ code and 4-bit record (code and
/// norm).
pub(crate) struct SampledCodes<'a> {
    pub pq: &'a [u8],
    pub sq: &'a [u8],
}

/// Which codes rank true neighbours better on this data, and the share of true neighbours
/// the 4-bit codes rank first: for the sample's query rows (`query(row)`: the prepared
/// vector), the true 10 nearest among its pool (`exact(query row, pool row)`), against the
/// 10 each code ranks first.
pub(crate) fn walk_codes<'a, 'q>(
    n: usize,
    metric: Metric,
    pq: &ProductQuantizer,
    sq: &ScalarQuantizer4,
    query: impl Fn(usize) -> &'q [f32],
    exact: impl Fn(usize, usize) -> f32,
    codes: impl Fn(usize) -> SampledCodes<'a>,
) -> (WalkCodes, f32) {
    const TOP: usize = 10;
    if n <= TOP + 1 {
        // Too few rows to tell; a search reads every candidate of so small an index anyway.
        return (WalkCodes::Pq, 0.0);
    }
    let (pool, queries) = walk_sample(n);
    let mut table = diskvec_vector::PqTable::default();
    let mut prepared_query = diskvec_vector::Sq4Query::default();
    let (mut sq_hits, mut pq_hits, mut total_truths) = (0usize, 0usize, 0usize);
    let top = |mut scored: Vec<(f32, usize)>| -> Vec<usize> {
        scored.sort_by(|a, b| a.0.total_cmp(&b.0));
        scored.iter().take(TOP).map(|e| e.1).collect()
    };
    // A query that is itself a pool row is left out of its own pool.
    for qi in queries {
        let q = query(qi);
        let others = pool.iter().enumerate().filter(|&(_, &i)| i != qi);
        let truth = top(others.clone().map(|(j, &i)| (exact(qi, i), j)).collect());
        pq.table_into(q, &mut table);
        let by_pq = top(others
            .clone()
            .map(|(j, &i)| (table.distance(codes(i).pq), j))
            .collect());
        sq.query_into(q, metric, &mut prepared_query);
        let by_sq = top(others
            .map(|(j, &i)| {
                let (code, norm) = Navigation::split(codes(i).sq);
                (prepared_query.distance(code, norm), j)
            })
            .collect());
        total_truths += truth.len();
        pq_hits += by_pq.iter().filter(|j| truth.contains(j)).count();
        sq_hits += by_sq.iter().filter(|j| truth.contains(j)).count();
    }
    log::info!(
        "navigation: 4-bit codes found {sq_hits}, PQ {pq_hits} of the sampled true neighbours"
    );
    let walk = if sq_hits >= pq_hits {
        WalkCodes::Sq4
    } else {
        WalkCodes::Pq
    };
    (walk, sq_hits as f32 / total_truths.max(1) as f32)
}

/// Reports `steps` done and says whether the caller still wants the build (the graph
/// build's progress callback).
pub(crate) fn advance_unless_cancelled(progress: &dyn Progress, steps: u64) -> bool {
    progress.advance(steps);
    !progress.cancelled()
}

/// Forces the sharded build with shards of at most this many vectors whatever the budget
/// (tests use it to shard inputs far smaller than the process itself).
pub const SHARD_CAPACITY_VAR: &str = "DISKVEC_BUILD_SHARD_CAPACITY";

/// Keeps a build in shards' nodes in input order whatever the budget, its codes streamed
/// into the index files as they are encoded (tests use it to take, on small inputs, the
/// path of a build whose merged graph does not fit its budget).
pub const INPUT_ORDER_VAR: &str = "DISKVEC_BUILD_INPUT_ORDER";

/// Builds a DISKANN index of the vectors `source` streams into the directory `out` within
/// `budget` (peak memory, as a memory cgroup counts it: resident memory and the page cache
/// the build dirties), replacing any index there only once the new one is complete. A build
/// that fits runs in memory; a larger one in shards (sharded.rs); a budget too small even
/// for that is refused before anything is read, naming the smallest that works.
pub fn build_from(
    source: &mut dyn VectorSource,
    params: &BuildParams,
    budget: MemoryBudget,
    out: &Path,
    progress: &dyn Progress,
) -> Result<BuildReport> {
    let (n, dim) = (source.rows(), source.dim());
    if n == 0 || dim == 0 {
        return Err(IndexError::InvalidArgument(
            "no vectors to build from".into(),
        ));
    }
    let shape = params.shape(n, dim)?;
    let pq_bytes = shape.pq_bytes;
    let budget_bytes = budget.resolve(shape.raw_bytes());
    let plan = shape.plan(budget_bytes)?;
    let plan = match std::env::var(SHARD_CAPACITY_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(capacity) => plan.with_shard_capacity(n, capacity),
        None => plan,
    };
    log::info!(
        "build of {n} x {dim} within {}: {}",
        super::budget::mib(budget_bytes),
        if plan.shards == 1 {
            "in memory".to_string()
        } else {
            format!(
                "{} shards of up to {} vectors{}",
                plan.shards,
                plan.shard_capacity,
                if plan.reprune {
                    ""
                } else {
                    ", merged without re-pruning"
                }
            )
        }
    );
    if plan.shards > 1 {
        return super::sharded::build_sharded(source, params, pq_bytes, &plan, out, progress);
    }
    progress.phase("reading input", n as u64);
    let mut data = diskvec_vector::vec_with_huge_pages(n * dim);
    let mut ids = Vec::with_capacity(n);
    let (mut chunk, mut chunk_ids) = (Vec::new(), Vec::new());
    loop {
        let rows = next_checked(source, ids.len(), &mut chunk, &mut chunk_ids)?;
        if rows == 0 {
            break;
        }
        let first = data.len();
        data.extend_from_slice(&chunk);
        if !params.input_prepared {
            data[first..]
                .chunks_exact_mut(dim)
                .for_each(|v| params.metric.prepare(v));
        }
        round_to_element(
            params.element,
            &mut data[first..],
            dim,
            ids.len(),
            &chunk_ids,
        )?;
        ids.extend_from_slice(&chunk_ids);
        // A background build that gave way stops between chunks of its input too.
        if !advance_unless_cancelled(progress, rows as u64) {
            return Err(IndexError::Cancelled);
        }
    }
    check_complete(n, ids.len())?;
    drop(chunk);
    let prepared = BuildParams {
        input_prepared: true,
        ..params.clone()
    };
    let mut report = build(&data, dim, &ids, &prepared, out, progress)?;
    report.memory_budget = budget_bytes;
    Ok(report)
}

/// Builds a DISKANN index of `data` (row-major, `dim` columns; `ids` are the external ids)
/// into the directory `out`, replacing any index there only once the new one is complete.
pub fn build(
    data: &[f32],
    dim: usize,
    ids: &[i64],
    params: &BuildParams,
    out: &Path,
    progress: &dyn Progress,
) -> Result<BuildReport> {
    let start = Instant::now();
    let n = crate::input::check_build_input(data, dim, ids)?;
    let pq_bytes = check_build(params, dim, n)?;
    let storage = params.storage.as_ref();
    diskvec_io::storage::create_dir_all_durable(storage, out).map_err(file_error(out))?;
    let _lock = commit::lock(out)?;
    // Leftovers of an interrupted build go first, so they do not hold disk space twice.
    commit::remove_interrupted(storage, out);
    let previous = commit::current_files(out);

    // Cosine needs unit vectors; L2 and inner product use them as given; a narrower
    // element type rounds them (after the preparation). Copying only when something
    // changes keeps a large build at one copy of the data in DRAM.
    let unprepared = !params.input_prepared && params.metric == Metric::Cosine;
    let prepared: std::borrow::Cow<[f32]> = if !unprepared && params.element.holds_exactly(data) {
        std::borrow::Cow::Borrowed(data)
    } else {
        let mut owned = data.to_vec();
        if unprepared {
            owned
                .chunks_exact_mut(dim)
                .for_each(|v| params.metric.prepare(v));
        }
        round_to_element(params.element, &mut owned, dim, 0, ids)?;
        std::borrow::Cow::Owned(owned)
    };
    let rows = Rows::new(&prepared, dim);

    progress.phase("PQ training", 1);
    let codebook = super::codebook::codebook_for(params, &prepared, dim, pq_bytes)?;
    let pq = &codebook.pq;
    let codes = pq.encode_all(&prepared);
    let compact = codebook
        .compact
        .as_ref()
        .map(|c| (c, c.encode_all(&prepared)));
    progress.advance(1);
    let pq_seconds = start.elapsed().as_secs_f64();

    let vamana = VamanaParams {
        max_degree: params.max_degree,
        build_list: params.build_list,
        alpha: params.alpha,
        seed: params.seed,
        two_passes: true,
    };
    let builder = params.graph_builder;
    progress.phase(
        &format!("graph ({})", builder.name()),
        builder.progress_total(n, &vamana),
    );
    let graph_start = Instant::now();
    if progress.cancelled() {
        return Err(IndexError::Cancelled);
    }
    let graph = graph_of(&prepared, dim, params, vamana, progress)?;
    let graph_seconds = graph_start.elapsed().as_secs_f64();

    let write_start = Instant::now();
    let build_id = commit::new_build_id();
    let (targets, stored_paths) = commit::placement(out, &params.paths, build_id)?;
    let nav_target = nav_path(out, build_id);
    let compact_target = compact.as_ref().map(|_| compact_path(out, build_id));
    let new_files: Vec<PathBuf> = targets
        .iter()
        .cloned()
        .chain([nav_target.clone()])
        .chain(compact_target.clone())
        .collect();
    let intent = commit::record_intent(storage, out, build_id, &new_files, &previous)?;
    let header_probe = build_header(params, dim, n, pq_bytes, targets.len(), 0, 0);
    let layout = header_probe.layout();
    let order = sector_order(&graph, layout.nodes_per_sector);
    let mut position = vec![0u32; n];
    for (pos, &old) in order.iter().enumerate() {
        position[old as usize] = pos as u32;
    }
    progress.phase("navigation codes", 1);
    let nav = navigation(
        &prepared,
        dim,
        params.metric,
        (pq, &codes),
        &graph,
        &order,
        &position,
    );
    let geometry = Header {
        medoid: position[graph.medoid as usize],
        build_id,
        ..header_probe
    };
    let codebook_bytes = pq.to_bytes();
    let entries = entry_sample(n, params.entry_points, params.seed);
    let parts = MetaParts {
        build_id,
        count: n,
        codebook: &codebook_bytes,
        code_bytes: pq_bytes,
        entries: &entries,
        paths: &stored_paths,
    };
    let staged = stage_meta(storage, out, parts, &geometry, |w| {
        for &old in &order {
            let old = old as usize;
            w.codes(&codes[old * pq_bytes..(old + 1) * pq_bytes])?;
        }
        let placed: Vec<i64> = order.iter().map(|&old| ids[old as usize]).collect();
        w.ids(&placed)
    })?;
    let header = Header {
        meta_crc: staged.crc,
        ..geometry
    };

    let summary = nav.summary(build_id);
    let navigation_off = summary.step_aside(dim);
    match &navigation_off {
        Some(off) => {
            log::info!("navigation left off: {off}");
            summary.write_stepped_aside(storage, &nav_target, off.why)?;
        }
        None => nav.write(storage, &nav_target, build_id)?,
    }
    // Not held through the node layout's write (about 650 MB at 1M x 768).
    drop(nav);
    if let (Some((pq, codes)), Some(target)) = (compact, &compact_target) {
        let m = pq.code_bytes();
        let mut w = super::compact::create(storage, target, build_id, n, pq)?;
        for &old in &order {
            w.write(&codes[old as usize * m..(old as usize + 1) * m])?;
        }
        w.finish()?;
    }
    progress.advance(1);

    write_nodes(
        &targets,
        params,
        &header,
        n,
        progress,
        |pos, vector, neighbours| {
            let old = order[pos] as usize;
            vector.clear();
            vector.extend_from_slice(rows.get(old as u32));
            neighbours.clear();
            neighbours.extend(
                graph
                    .neighbors(old as u32)
                    .iter()
                    .map(|&q| position[q as usize]),
            );
            Ok(())
        },
    )?;
    commit::commit(storage, out, &new_files, &previous, &intent)?;
    let checkpoint = params.checkpoint_dir(out);
    if params.checkpoint.is_none() {
        // The index a build in shards was interrupted on is replaced: its shards are stale.
        super::resume::Checkpoints::new(&checkpoint, params.storage.clone()).clear();
    }
    Ok(BuildReport {
        count: n,
        dim,
        pq_bytes,
        pq_seconds,
        graph_seconds,
        write_seconds: write_start.elapsed().as_secs_f64(),
        total_seconds: start.elapsed().as_secs_f64(),
        nodes_file_bytes: header.nodes_file_bytes(),
        meta_file_bytes: staged.bytes,
        shards: 1,
        memory_budget: 0,
        navigation_off,
        codebook: Some(codebook),
        seeded: 0,
        resumed_shards: 0,
        disk_peak_estimate: None,
    })
}

/// The graph of the prepared vectors `data`, built over the vectors `params` names; inner
/// product builds over L2 in an augmented space (`mips_to_l2`).
fn graph_of(
    data: &[f32],
    dim: usize,
    params: &BuildParams,
    vamana: VamanaParams,
    progress: &dyn Progress,
) -> Result<Graph> {
    let augmented;
    let (space, sdim, metric) = if params.metric == Metric::InnerProduct {
        let (rows, adim) = mips_to_l2(data, dim);
        augmented = rows;
        (&augmented[..], adim, Metric::L2)
    } else {
        (data, dim, params.metric)
    };
    let go_on = |k| advance_unless_cancelled(progress, k);
    let builder = params.graph_builder;
    let graph = match params.graph_precision {
        GraphPrecision::Full => builder.build(
            &FullVectors::new(space, sdim, metric),
            vamana,
            Scope::Whole,
            &go_on,
        ),
        GraphPrecision::Sq8 => {
            let sq = ScalarQuantizer8::train(space, sdim);
            let mut codes = diskvec_vector::vec_with_huge_pages(space.len());
            sq.encode_rows(space, &mut codes);
            let scale = Sq8Vectors::scale_for(metric, sq.l2_scale()).expect("not inner product");
            let codes = Sq8Vectors::new(&codes, sdim, scale);
            builder.build(&codes, vamana, Scope::Whole, &go_on)
        }
    };
    graph.ok_or(IndexError::Cancelled)
}

/// The header a build writes, before its meta.dvm CRC is known (`meta_crc` 0).
pub(crate) fn build_header(
    params: &BuildParams,
    dim: usize,
    n: usize,
    pq_bytes: usize,
    path_count: usize,
    medoid: u32,
    build_id: u64,
) -> Header {
    Header {
        metric: params.metric,
        dim: dim as u32,
        max_degree: params.max_degree as u32,
        count: n as u64,
        medoid,
        build_list: params.build_list as u32,
        alpha: params.alpha,
        pq_bytes: pq_bytes as u32,
        build_id,
        meta_crc: 0,
        stripe_bytes: params.stripe_bytes,
        path_count: path_count as u32,
        mirrored: params.mirror,
        element: params.element,
    }
}

/// Writes the node file(s) of `header`: node `pos`'s vector and neighbour list (positions)
/// come from `node`, in position order, packed into checksummed sectors.
pub(crate) fn write_nodes(
    targets: &[PathBuf],
    params: &BuildParams,
    header: &Header,
    n: usize,
    progress: &dyn Progress,
    mut node: impl FnMut(usize, &mut Vec<f32>, &mut Vec<u32>) -> Result<()>,
) -> Result<()> {
    let layout = header.layout();
    let groups = n.div_ceil(layout.nodes_per_sector);
    progress.phase("layout write", groups as u64);
    let mut w = StripedWriter::create(
        params.storage.as_ref(),
        targets,
        params.stripe_bytes,
        params.mirror,
        header.nodes_file_bytes(),
    )?;
    w.write_all(&header.encode())?;
    let mut record = vec![0u8; layout.node_bytes];
    let mut sectors = vec![0u8; layout.read_bytes()];
    let mut vector = Vec::with_capacity(layout.dim);
    let mut neighbours = Vec::with_capacity(params.max_degree);
    for g in 0..groups {
        sectors.fill(0);
        for slot in 0..layout.nodes_per_sector {
            let pos = g * layout.nodes_per_sector + slot;
            if pos >= n {
                break;
            }
            node(pos, &mut vector, &mut neighbours)?;
            layout.encode(&vector, &neighbours, &mut record);
            if layout.sectors_per_node == 1 {
                sectors[slot * layout.node_bytes..(slot + 1) * layout.node_bytes]
                    .copy_from_slice(&record);
            } else {
                for (i, piece) in record.chunks(SECTOR_PAYLOAD).enumerate() {
                    sectors[i * SECTOR..i * SECTOR + piece.len()].copy_from_slice(piece);
                }
            }
        }
        seal_sectors(&mut sectors, (1 + g * layout.sectors_per_node) as u64);
        w.write_all(&sectors)?;
        progress.advance(1);
    }
    Ok(w.finish()?)
}
