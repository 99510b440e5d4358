//! The build for data larger than its memory budget (budget.rs decides when). The input is
//! read three times and never copied whole (`VectorSource::rewind`; each pass is checked
//! to read what the first did):
//!
//! 1. Scan: ids, mean, largest norm, a seeded reservoir sample, every row checked,
//!    prepared (unit length for cosine) and rounded to the storage type, as in every pass.
//! 2. The sample trains the PQ codebook, the 4-bit bounds and k-means centroids, one per
//!    shard. A second pass encodes every vector (PQ, compact and 4-bit codes, straight into
//!    the index files when nodes keep input order, else to scratch files: sharded_codes.rs),
//!    writes the row its shards' graphs are built from (an 8-bit code) once to the rows
//!    file, and the two nearest centroids with room to the shards file.
//! 3. Each shard is loaded by one scan of the rows file and its graph built in memory at
//!    two thirds of R, and its lists (with their distances) written out, sorted by vector,
//!    to the build's checkpoint directory (resume.rs): a build of the same input killed
//!    part-way takes up the shards it finished when run again.
//! 4. The merge walks all shard lists in vector order: a vector's lists from its two
//!    shards are joined and pruned back to R (robust prune, distances between candidates
//!    from the 4-bit codes held in memory, or, without room for them, the closest R).
//! 5. Navigation file and meta.dvm are written from the scratch files, the node file from
//!    a third pass over the input (sharded_write.rs), and committed as any build is
//!    (commit.rs). The scratch files are named in the build's intent record, so a crash
//!    leaves nothing the next build or open does not remove. What all this needs on disk
//!    is checked before the first row is read (sharded_disk.rs).
//!
//! Every scratch file is written and read through `SpillWriter`/`SpillReader`, which drop
//! the pages behind them: the page cache a build dirties counts against its memory cgroup.

use std::path::{Path, PathBuf};
use std::time::Instant;

use diskvec_graph::{FullVectors, GraphVectors, Sq8Vectors, VamanaParams};
use diskvec_io::{SpillReader, SpillWriter};
use diskvec_vector::{
    kmeans, release_freed_memory, Metric, ProductQuantizer, ScalarQuantizer4, ScalarQuantizer8,
};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::budget::{shard_degree, BuildPlan, FILE_BUFFER, SHARD_OVERLAP};
use super::build::{
    advance_unless_cancelled, build_header, entry_sample, walk_codes, walk_sample, BuildParams,
    BuildReport, GraphPrecision, SampledCodes,
};
use super::commit;
use super::compact::{compact_code_bytes, compact_path};
use super::graph_builder::{GraphBuilder, Scope};
use super::meta_writer::staged_path;
use super::meta_writer::MetaParts;
use super::nav::nav_path;
use super::resume::{BucketHasher, Checkpoints, ListsWriter, ShardRecipe};
use super::sharded_codes::{CodeWriter, Codes, IndexTargets, ScratchCodes};
use super::sharded_disk::DiskNeed;
use super::sharded_write::{le_f32s, write_outputs, Inputs, NavChoice, Written};
use super::source::{check_complete, InputPass, VectorSource};
use crate::{IndexError, Progress, Result};

/// The scratch files of one build, named by its generation in the index directory.
struct Scratch {
    dir: PathBuf,
    generation: String,
}

impl Scratch {
    fn file(&self, what: &str) -> PathBuf {
        self.dir.join(format!("build.{}.{what}", self.generation))
    }
    /// The storage-type vectors in input order, written only where nodes are placed by
    /// position (sharded_write.rs); otherwise the node file is written from the input.
    fn vectors(&self) -> PathBuf {
        self.file("vectors")
    }
    fn pq(&self) -> PathBuf {
        self.file("pq")
    }
    fn sq4(&self) -> PathBuf {
        self.file("sq4")
    }
    fn compact(&self) -> PathBuf {
        self.file("compact")
    }
    fn graph(&self) -> PathBuf {
        self.file("graph")
    }
    /// The lists the input's own graph gave (`VectorSource::seed_lists`), in shard-list form.
    fn seeds(&self) -> PathBuf {
        self.file("seeds")
    }
    /// Every vector once, in input order, as the shard graphs see it (`ShardRow`).
    fn rows(&self) -> PathBuf {
        self.file("rows")
    }
    /// The shards each vector went to: `SHARD_OVERLAP` u16 a vector, `NO_SHARD` for none.
    fn shards(&self) -> PathBuf {
        self.file("shards")
    }
    fn all(&self) -> Vec<PathBuf> {
        vec![
            self.vectors(),
            self.pq(),
            self.compact(),
            self.sq4(),
            self.graph(),
            self.seeds(),
            self.rows(),
            self.shards(),
        ]
    }
    fn remove(&self) {
        for f in self.all() {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The space graphs are built in: the prepared vectors, with one more coordinate for inner
/// product (`mips_to_l2`: sqrt(M^2 - |x|^2), M the largest norm), searched by L2 there.
#[derive(Clone, Copy)]
struct GraphSpace {
    metric: Metric,
    dim: usize,
    max_norm_sq: f32,
}

impl GraphSpace {
    fn new(metric: Metric, dim: usize, max_norm_sq: f32) -> Self {
        Self {
            metric,
            dim,
            max_norm_sq,
        }
    }
    fn dim(&self) -> usize {
        self.dim + (self.metric == Metric::InnerProduct) as usize
    }
    fn metric(&self) -> Metric {
        if self.metric == Metric::InnerProduct {
            Metric::L2
        } else {
            self.metric
        }
    }
    fn push(&self, v: &[f32], out: &mut Vec<f32>) {
        out.extend_from_slice(v);
        if self.metric == Metric::InnerProduct {
            let norm: f32 = v.iter().map(|x| x * x).sum();
            out.push((self.max_norm_sq - norm).max(0.0).sqrt());
        }
    }
}

fn f32s_le(values: &[f32], out: &mut Vec<u8>) {
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
}

/// What the first pass over the input learned.
struct Scanned {
    ids: Vec<i64>,
    sample: Vec<f32>,
    max_norm_sq: f32,
    mean: Vec<f32>,
    /// Rows whose lists the input seeded, a bit each.
    seeded: Vec<u64>,
    seeded_count: usize,
    /// The walk check's query rows (`walk_sample`), prepared, in row order.
    walk_queries: Vec<f32>,
    /// What later passes must read again (`InputPass::fingerprint`).
    fingerprint: u64,
}

impl Scanned {
    fn is_seeded(&self, row: usize) -> bool {
        self.seeded[row / 64] & (1 << (row % 64)) != 0
    }
}

/// Entries of a seed list a merge takes: half of R. With the shard list (two thirds of R)
/// the union is about R and a third, which the merge re-prunes to R; whole seed lists
/// made unions of about 1.7R, and re-pruning them cost a 1M x 768 merge 40-54 s.
fn seed_room(max_degree: usize) -> usize {
    max_degree.div_ceil(2)
}

/// Writes the seed lists of a chunk's rows (`first` the first row's number) in shard-list
/// form, with no distances (NaN: the merge computes them), leaving out ids outside the
/// `n` rows and the row itself, and keeping at most `keep`: the list's first, which in a
/// Vamana graph are its last prune's choices, closest first (reverse edges added since come
/// after them); marks the rows with a list in `seeded`.
#[allow(clippy::too_many_arguments)]
fn write_seeds(
    out: &mut SpillWriter,
    first: usize,
    n: usize,
    keep: usize,
    lists: &[Vec<u32>],
    seeded: &mut [u64],
    bytes: &mut Vec<u8>,
) -> Result<usize> {
    let mut count = 0;
    bytes.clear();
    for (i, list) in lists.iter().enumerate() {
        let row = first + i;
        let kept = || {
            list.iter()
                .filter(|&&q| (q as usize) < n && q as usize != row)
                .take(keep)
        };
        let degree = kept().count();
        if degree == 0 {
            continue;
        }
        bytes.extend_from_slice(&(row as u32).to_le_bytes());
        bytes.extend_from_slice(&(degree as u32).to_le_bytes());
        for &q in kept() {
            bytes.extend_from_slice(&q.to_le_bytes());
            bytes.extend_from_slice(&f32::NAN.to_le_bytes());
        }
        seeded[row / 64] |= 1 << (row % 64);
        count += 1;
    }
    out.write_all(bytes)?;
    Ok(count)
}

/// Pass 1 over the input: its ids (checked unique), a seeded reservoir sample of
/// `plan.sample_rows` rows, the mean and largest norm, the walk check's query rows, and the
/// seed lists a merge of segments passes on. Nothing of the vectors is written.
fn scan(
    mut pass: InputPass,
    params: &BuildParams,
    plan: &BuildPlan,
    scratch: &Scratch,
    progress: &dyn Progress,
) -> Result<Scanned> {
    let (dim, n) = (pass.source().dim(), pass.source().rows());
    progress.phase("reading input", n as u64);
    // Seeds are taken only where the merge can rank them (it computes their distances
    // from the 4-bit codes it holds when it re-prunes).
    let mut seeds_out = if plan.reprune {
        Some(SpillWriter::create(&scratch.seeds(), FILE_BUFFER)?)
    } else {
        None
    };
    let mut seeded = vec![0u64; n.div_ceil(64)];
    let mut seeded_count = 0;
    let (mut lists, mut seed_bytes) = (Vec::new(), Vec::new());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(params.seed ^ 0x5a3e);
    let mut sample = Vec::with_capacity(plan.sample_rows * dim);
    let mut ids = Vec::with_capacity(n);
    let mut sums = vec![0f64; dim];
    let mut max_norm_sq = 0f32;
    let walk_rows = walk_sample(n).1;
    let mut walk_queries = Vec::with_capacity(walk_rows.len() * dim);
    let mut data = Vec::new();
    loop {
        let seen = ids.len();
        let rows = pass.next(&mut data)?;
        if rows == 0 {
            break;
        }
        if let Some(seeds_out) = seeds_out.as_mut() {
            pass.source().seed_lists(&mut lists);
            if lists.len() == rows {
                seeded_count += write_seeds(
                    seeds_out,
                    seen,
                    n,
                    seed_room(params.max_degree),
                    &lists,
                    &mut seeded,
                    &mut seed_bytes,
                )?;
            }
        }
        for (i, v) in data.chunks_exact(dim).enumerate() {
            for (s, &x) in sums.iter_mut().zip(v) {
                *s += x as f64;
            }
            max_norm_sq = max_norm_sq.max(v.iter().map(|x| x * x).sum());
            // Reservoir sampling: row `seen + i` replaces a random sampled row with
            // probability sample_rows / (seen + i + 1).
            let row = seen + i;
            if row < plan.sample_rows {
                sample.extend_from_slice(v);
            } else {
                let j = rng.random_range(0..=row);
                if j < plan.sample_rows {
                    sample[j * dim..(j + 1) * dim].copy_from_slice(v);
                }
            }
            if walk_rows.get(walk_queries.len() / dim) == Some(&row) {
                walk_queries.extend_from_slice(v);
            }
        }
        ids.extend_from_slice(pass.ids());
        // A background build that gave way stops between chunks here too: at 10M a merge
        // spent 20 minutes reading and encoding its input before its graph began.
        if !advance_unless_cancelled(progress, rows as u64) {
            return Err(IndexError::Cancelled);
        }
    }
    if let Some(seeds_out) = seeds_out {
        seeds_out.finish(false)?;
    }
    check_complete(n, ids.len())?;
    let mut sorted = ids.clone();
    sorted.par_sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(IndexError::InvalidArgument(format!(
            "id {} appears more than once",
            w[0]
        )));
    }
    drop(sorted);
    let mut mean: Vec<f32> = sums.iter().map(|s| (s / n as f64) as f32).collect();
    params.metric.prepare(&mut mean);
    Ok(Scanned {
        ids,
        sample,
        max_norm_sq,
        mean,
        seeded,
        seeded_count,
        walk_queries,
        fingerprint: pass.fingerprint(),
    })
}

/// What the walk-codes check needs, gathered during pass 2: the query rows' vectors (read
/// first), and for each pool row its codes and exact distance to every query.
struct WalkRows {
    queries: Vec<usize>,
    query_vectors: Vec<f32>,
    pool: Vec<usize>,
    /// Pool row `j`'s distance to query `q` at `j * queries + q`.
    exact: Vec<f32>,
    pq: Vec<u8>,
    sq: Vec<u8>,
}

impl WalkRows {
    fn new(n: usize, query_vectors: Vec<f32>) -> Self {
        let (pool, queries) = walk_sample(n);
        Self {
            queries,
            query_vectors,
            exact: Vec::with_capacity(pool.len()),
            pool,
            pq: Vec::new(),
            sq: Vec::new(),
        }
    }

    fn query(&self, row: usize) -> &[f32] {
        let dim = self.query_vectors.len() / self.queries.len().max(1);
        let q = self.queries.binary_search(&row).expect("a sampled query");
        &self.query_vectors[q * dim..(q + 1) * dim]
    }
}

/// Shards a vector's assignment looks at, nearest first.
const NEAREST_KEPT: usize = 8;

/// One vector as pass 2 encodes it besides its PQ codes: 4-bit record, shards nearest
/// first, distance to the mean, and its bucket record's vector (8-bit code, or f32 little
/// endian).
type Encoded = (Vec<u8>, Vec<u32>, f32, Vec<u8>);

/// Bytes of a bucket record's vector: the graph space's 8-bit code, or the f32 vector.
fn bucket_vector_bytes(space: GraphSpace, dim: usize, sq8: Option<&ScalarQuantizer8>) -> usize {
    match sq8 {
        Some(_) => space.dim(),
        None => 4 * dim,
    }
}

/// What pass 2 found: the medoid (the vector closest to the mean), each bucket's size and
/// content hash, and the walk-check rows.
struct Partitioned {
    medoid: u32,
    sizes: Vec<usize>,
    hashes: Vec<BucketHasher>,
    walk: WalkRows,
}

/// A shard slot of the shards file that holds no shard.
const NO_SHARD: u16 = u16::MAX;

/// Pass 2 over the input: PQ, compact and 4-bit codes of every vector to their scratch
/// files, its shard row (`bucket_vector_bytes`) once to the rows file, and the two nearest
/// shards with room to the shards file.
#[allow(clippy::too_many_arguments)]
fn encode_and_partition(
    mut pass: InputPass,
    scratch: &Scratch,
    codes: &mut CodeWriter,
    plan: &BuildPlan,
    space: GraphSpace,
    (pq, compact): (&ProductQuantizer, Option<&ProductQuantizer>),
    sq: &ScalarQuantizer4,
    sq8: Option<&ScalarQuantizer8>,
    centroids: &[f32],
    scanned: &Scanned,
    progress: &dyn Progress,
) -> Result<Partitioned> {
    let (dim, n) = (pass.source().dim(), pass.source().rows());
    progress.phase("encoding and partitioning", n as u64);
    let (shards, mean) = (centroids.len() / space.dim(), &scanned.mean[..]);
    if shards >= NO_SHARD as usize {
        return Err(IndexError::InvalidArgument(format!(
            "{shards} shards are more than a build can number (a larger memory budget gives \
             fewer)"
        )));
    }
    let gdim = space.dim();
    let (m, sq_record) = (pq.code_bytes(), sq.code_bytes() + 4);
    let mc = compact.map_or(0, ProductQuantizer::code_bytes);
    let mut rows_out = SpillWriter::create(&scratch.rows(), FILE_BUFFER)?;
    let mut shards_out = SpillWriter::create(&scratch.shards(), FILE_BUFFER)?;
    let mut sizes = vec![0usize; shards];
    let mut hashes: Vec<BucketHasher> = (0..shards).map(|_| BucketHasher::new()).collect();
    let mut walk = WalkRows::new(n, scanned.walk_queries.clone());
    let mut next_wanted = 0usize;
    let mut medoid = (f32::INFINITY, 0u32);
    // As the in-memory build: the vector nearest the mean, by L2 for inner product (-dot
    // would pick the largest vector in the mean's direction).
    let medoid_metric = space.metric();
    let (mut data, mut record, mut slots) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let row = pass.seen();
        let rows = pass.next(&mut data)?;
        if rows == 0 {
            break;
        }
        // PQ and compact codes a block of rows at a time (a matrix product each); then per
        // row: 4-bit record, shards by distance to their centroid, distance to the mean.
        let pq_codes = pq.encode_all(&data);
        let compact_codes = compact.map_or_else(Vec::new, |c| c.encode_all(&data));
        let encoded: Vec<Encoded> = data
            .par_chunks_exact(dim)
            .map(|v| {
                let mut rec = vec![0u8; sq_record];
                sq.encode(v, &mut rec[..sq_record - 4]);
                let norm: f32 = v.iter().map(|x| x * x).sum();
                rec[sq_record - 4..].copy_from_slice(&norm.to_le_bytes());
                let mut g = Vec::with_capacity(gdim);
                space.push(v, &mut g);
                let mut by_centroid: Vec<(f32, u32)> = centroids
                    .chunks_exact(gdim)
                    .enumerate()
                    .map(|(s, c)| (Metric::L2.distance(&g, c), s as u32))
                    .collect();
                by_centroid.sort_by(|a, b| a.0.total_cmp(&b.0));
                // The nearest few: a vector goes to the first two of them with room.
                let order = by_centroid.iter().take(NEAREST_KEPT).map(|c| c.1).collect();
                let mut stored = Vec::with_capacity(bucket_vector_bytes(space, dim, sq8));
                match sq8 {
                    Some(sq8) => {
                        stored.resize(gdim, 0);
                        sq8.encode(&g, &mut stored);
                    }
                    None => f32s_le(v, &mut stored),
                }
                (rec, order, medoid_metric.distance(v, mean), stored)
            })
            .collect();
        slots.clear();
        for (i, (rec, order, to_mean, stored)) in encoded.into_iter().enumerate() {
            let gid = row + i;
            let v = &data[i * dim..(i + 1) * dim];
            let code = &pq_codes[i * m..(i + 1) * m];
            // Without compact codes `mc` is 0 and the slice empty.
            codes.write(code, &compact_codes[i * mc..(i + 1) * mc], &rec)?;
            rows_out.write_all(&stored)?;
            if to_mean < medoid.0 {
                medoid = (to_mean, gid as u32);
            }
            if walk.pool.get(next_wanted) == Some(&gid) {
                for q in walk.query_vectors.chunks_exact(dim) {
                    walk.exact.push(space.metric.distance(q, v));
                }
                walk.pq.extend_from_slice(code);
                walk.sq.extend_from_slice(&rec);
                next_wanted += 1;
            }
            let chosen = choose_shards(&order, &sizes, plan, scanned.is_seeded(gid), gid)?;
            // The record a shard's key hashes: what its graph is built from.
            record.clear();
            record.extend_from_slice(&(gid as u32).to_le_bytes());
            record.extend_from_slice(&stored);
            for slot in 0..SHARD_OVERLAP {
                let s = chosen.get(slot).copied();
                if let Some(s) = s {
                    hashes[s].add(&record);
                    sizes[s] += 1;
                }
                slots.extend_from_slice(&s.map_or(NO_SHARD, |s| s as u16).to_le_bytes());
            }
        }
        shards_out.write_all(&slots)?;
        // As in the first pass.
        if !advance_unless_cancelled(progress, rows as u64) {
            return Err(IndexError::Cancelled);
        }
    }
    pass.finish_same_as(scanned.fingerprint)?;
    rows_out.finish(false)?;
    shards_out.finish(false)?;
    Ok(Partitioned {
        medoid: medoid.1,
        sizes,
        hashes,
        walk,
    })
}

/// The shards vector `gid` goes to: the nearest with room of `order` (nearest first), two
/// (`SHARD_OVERLAP`: the overlap joins neighbouring shards' graphs), or one for a seeded
/// vector, which has edges beyond its shard already. All of its nearest shards full (rare:
/// shards are sized with slack): the first shard with room.
fn choose_shards(
    order: &[u32],
    sizes: &[usize],
    plan: &BuildPlan,
    seeded: bool,
    gid: usize,
) -> Result<Vec<usize>> {
    let shards = sizes.len();
    let has_room = |s: &usize| sizes[*s] < plan.shard_capacity;
    let copies = if seeded { 1 } else { SHARD_OVERLAP };
    let mut chosen: Vec<usize> = order
        .iter()
        .map(|&s| s as usize)
        .filter(has_room)
        .take(copies.min(shards))
        .collect();
    if chosen.is_empty() {
        chosen.extend((0..shards).find(has_room));
    }
    if chosen.is_empty() {
        return Err(IndexError::InvalidArgument(format!(
            "the build plan's {shards} shards of {} vectors are full at vector {gid} \
             (a larger memory budget gives larger shards)",
            plan.shard_capacity
        )));
    }
    Ok(chosen)
}

/// Insertion passes of each shard's graph: one, with alpha. Every vector is inserted into
/// two shards and its lists are pruned again at the merge, so a second pass bought no
/// recall on either shipped set (measured: recall@10 and @100 within 0.0005 of two passes,
/// at two thirds of the graph time).
const SHARD_PASSES: usize = 1;

/// Pass 3: shard `s`'s graph, built in memory from its rows of the rows file (8-bit codes
/// when `sq8` is given), written to `out` as lists of (neighbour, distance) by vector, in
/// vector order.
#[allow(clippy::too_many_arguments)]
fn build_shard(
    scratch: &Scratch,
    out: &mut ListsWriter,
    s: usize,
    size: usize,
    (n, dim): (usize, usize),
    space: GraphSpace,
    sq8: Option<&ScalarQuantizer8>,
    params: &BuildParams,
    plan: &BuildPlan,
    progress: &dyn Progress,
) -> Result<()> {
    let gdim = space.dim();
    let mut gids = Vec::with_capacity(size);
    let mut data = diskvec_vector::vec_with_huge_pages(if sq8.is_some() { 0 } else { size * gdim });
    let mut codes =
        diskvec_vector::vec_with_huge_pages(if sq8.is_some() { size * gdim } else { 0 });
    let mut v = Vec::with_capacity(dim);
    scan_shard_rows(
        scratch,
        s,
        n,
        bucket_vector_bytes(space, dim, sq8),
        plan,
        |gid, row| {
            gids.push(gid);
            match sq8 {
                Some(_) => codes.extend_from_slice(row),
                None => {
                    le_f32s(row, &mut v);
                    space.push(&v, &mut data);
                }
            }
        },
    )?;
    if gids.len() != size {
        return Err(IndexError::InvalidArgument(format!(
            "shard {s}: {} rows in the scratch files, {size} expected (scratch file damaged?)",
            gids.len()
        )));
    }
    let vamana = VamanaParams {
        max_degree: shard_degree(params.max_degree),
        build_list: params.build_list,
        alpha: params.alpha,
        seed: params.seed ^ s as u64,
        two_passes: SHARD_PASSES == 2,
    };
    let go_on = |k| advance_unless_cancelled(progress, k);
    match sq8 {
        Some(sq) => {
            let scale = Sq8Vectors::scale_for(space.metric(), sq.l2_scale())
                .expect("the graph space is never inner product");
            let vectors = Sq8Vectors::new(&codes, gdim, scale);
            write_shard_lists(out, &gids, &vectors, params.graph_builder, vamana, &go_on)
        }
        None => {
            let vectors = FullVectors::new(&data, gdim, space.metric());
            write_shard_lists(out, &gids, &vectors, params.graph_builder, vamana, &go_on)
        }
    }
}

/// Hands `sink` each row of the rows file (`row_bytes` each) that went to shard `s`, with
/// its vector number, in vector order: one sequential scan of the rows and shards files
/// (a shard's rows are spread over the input, and one file read once per shard costs less
/// disk than a copy of every row per shard).
fn scan_shard_rows(
    scratch: &Scratch,
    s: usize,
    n: usize,
    row_bytes: usize,
    plan: &BuildPlan,
    mut sink: impl FnMut(u32, &[u8]),
) -> Result<()> {
    let mut rows = SpillReader::open(&scratch.rows(), FILE_BUFFER)?;
    let mut shards = SpillReader::open(&scratch.shards(), FILE_BUFFER)?;
    let slot_bytes = 2 * SHARD_OVERLAP;
    let chunk = plan.chunk_rows.max(1);
    let (mut row_buf, mut slot_buf) = (vec![0u8; chunk * row_bytes], vec![0u8; chunk * slot_bytes]);
    let mut first = 0usize;
    while first < n {
        let count = chunk.min(n - first);
        shards.read_exact(&mut slot_buf[..count * slot_bytes])?;
        rows.read_exact(&mut row_buf[..count * row_bytes])?;
        for (i, slots) in slot_buf[..count * slot_bytes]
            .chunks_exact(slot_bytes)
            .enumerate()
        {
            let member = slots
                .chunks_exact(2)
                .any(|b| u16::from_le_bytes([b[0], b[1]]) as usize == s);
            if member {
                sink(
                    (first + i) as u32,
                    &row_buf[i * row_bytes..(i + 1) * row_bytes],
                );
            }
        }
        first += count;
    }
    Ok(())
}

/// Builds the graph of one shard's `vectors` (local rows; `gids` their vector numbers) and
/// writes its lists with their distances.
fn write_shard_lists<V: GraphVectors>(
    out: &mut ListsWriter,
    gids: &[u32],
    vectors: &V,
    builder: GraphBuilder,
    vamana: VamanaParams,
    go_on: &(dyn Fn(u64) -> bool + Sync),
) -> Result<()> {
    let graph = builder
        .build(vectors, vamana, Scope::Shard, go_on)
        .ok_or(IndexError::Cancelled)?;
    let mut bytes = Vec::new();
    for (local, list) in graph.lists().enumerate() {
        bytes.clear();
        bytes.extend_from_slice(&gids[local].to_le_bytes());
        bytes.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for &q in list {
            bytes.extend_from_slice(&gids[q as usize].to_le_bytes());
            let d = vectors.distance(local as u32, q);
            bytes.extend_from_slice(&d.to_le_bytes());
        }
        out.write_all(&bytes)?;
    }
    Ok(())
}

/// One shard's list file, read a vector's list at a time.
struct ListReader {
    input: SpillReader,
    /// The next list: its vector and its (distance, neighbour) pairs.
    head: Option<(u32, Vec<(f32, u32)>)>,
}

impl ListReader {
    fn open(path: &Path) -> Result<Self> {
        let mut r = Self {
            input: SpillReader::open(path, FILE_BUFFER)?,
            head: None,
        };
        r.advance()?;
        Ok(r)
    }

    fn advance(&mut self) -> Result<()> {
        if self.input.remaining() == 0 {
            self.head = None;
            return Ok(());
        }
        let mut head = [0u8; 8];
        self.input.read_exact(&mut head)?;
        let gid = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let degree = u32::from_le_bytes(head[4..].try_into().expect("4 bytes")) as usize;
        let mut body = vec![0u8; degree * 8];
        self.input.read_exact(&mut body)?;
        let list = body
            .chunks_exact(8)
            .map(|e| {
                (
                    f32::from_le_bytes(e[4..].try_into().expect("4 bytes")),
                    u32::from_le_bytes(e[..4].try_into().expect("4 bytes")),
                )
            })
            .collect();
        self.head = Some((gid, list));
        Ok(())
    }
}

/// Pass 4: every vector's shard lists (`lists`, one file a shard) joined and pruned back to
/// R, written to the scratch graph file as (degree, R slots) in vector order. Returns the
/// number of edges.
#[allow(clippy::too_many_arguments)]
fn merge(
    scratch: &Scratch,
    n: usize,
    space: GraphSpace,
    params: &BuildParams,
    plan: &BuildPlan,
    lists: &[PathBuf],
    (sq, sq_records): (&ScalarQuantizer4, &mut Codes),
    progress: &dyn Progress,
) -> Result<u64> {
    progress.phase("merging shard graphs", n as u64);
    let r = params.max_degree;
    let record = sq.code_bytes() + 4;
    // The 4-bit records of every vector, for distances between candidates.
    let codes = if plan.reprune {
        let (path, at) = sq_records.sq4_records()?;
        let mut input = SpillReader::open(&path, FILE_BUFFER)?;
        let mut skipped = vec![0u8; at as usize];
        input.read_exact(&mut skipped)?;
        let mut all = vec![0u8; n * record];
        input.read_exact(&mut all)?;
        Some(all)
    } else {
        None
    };
    let mut readers = lists
        .iter()
        .cloned()
        .chain(plan.reprune.then(|| scratch.seeds()))
        .map(|path| ListReader::open(&path))
        .collect::<Result<Vec<_>>>()?;
    let mut out = SpillWriter::create(&scratch.graph(), FILE_BUFFER)?;
    let mut edges = 0u64;
    const BATCH: usize = 4096;
    let mut gid = 0usize;
    let mut bytes = Vec::new();
    while gid < n {
        let end = (gid + BATCH).min(n);
        let mut unions: Vec<Vec<(f32, u32)>> = Vec::with_capacity(end - gid);
        for g in gid..end {
            let mut union = Vec::new();
            for reader in readers.iter_mut() {
                if reader.head.as_ref().is_some_and(|h| h.0 as usize == g) {
                    union.extend(reader.head.take().expect("checked").1);
                    reader.advance()?;
                }
            }
            unions.push(union);
        }
        let pruned: Vec<Vec<u32>> = unions
            .into_par_iter()
            .enumerate()
            .map_init(Vec::new, |decoded, (i, mut pool)| {
                let node = (gid + i) as u32;
                // By id, a measured distance before a seed's NaN, so that a candidate
                // found both ways keeps the measured one.
                pool.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.is_nan().cmp(&b.0.is_nan())));
                pool.dedup_by_key(|c| c.1);
                pool.retain(|c| c.1 != node);
                // Closest first (a seed's NaN last; the prune sorts again once it is known).
                pool.sort_by(diskvec_graph::by_distance);
                let seeded = pool.iter().any(|c| c.0.is_nan());
                let Some(codes) = codes.as_ref().filter(|_| seeded || pool.len() > r) else {
                    // No codes, no re-prune (and no seeds), or nothing to prune: the closest R.
                    return pool.iter().take(r).map(|c| c.1).collect::<Vec<u32>>();
                };
                // The node as local row 0, its candidates as rows 1.., decoded from their
                // 4-bit codes into the graph space; a seed's distance is measured there.
                decode_rows(node, &pool, codes, record, sq, space, decoded);
                let rows = FullVectors::new(decoded, space.dim(), space.metric());
                let mut local: Vec<(f32, u32)> = pool
                    .iter()
                    .enumerate()
                    .map(|(j, c)| {
                        let j = j as u32 + 1;
                        let d = if c.0.is_nan() {
                            rows.distance(0, j)
                        } else {
                            c.0
                        };
                        (d, j)
                    })
                    .collect();
                diskvec_graph::robust_prune(0, &mut local, params.alpha, r, &rows)
                    .into_iter()
                    .map(|j| pool[j as usize - 1].1)
                    .collect()
            })
            .collect();
        bytes.clear();
        for list in &pruned {
            bytes.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for slot in 0..r {
                bytes.extend_from_slice(&list.get(slot).copied().unwrap_or(0).to_le_bytes());
            }
            edges += list.len() as u64;
        }
        out.write_all(&bytes)?;
        progress.advance((end - gid) as u64);
        gid = end;
    }
    if let Some(left) = readers.iter().find_map(|r| r.head.as_ref()) {
        return Err(IndexError::InvalidArgument(format!(
            "shard list for vector {} left over after the merge (scratch file damaged?)",
            left.0
        )));
    }
    out.finish(false)?;
    let _ = std::fs::remove_file(scratch.seeds());
    Ok(edges)
}

/// `node` and then each candidate of `pool`, decoded from their 4-bit codes into the graph
/// space, one row each, into `out`.
fn decode_rows(
    node: u32,
    pool: &[(f32, u32)],
    codes: &[u8],
    record: usize,
    sq: &ScalarQuantizer4,
    space: GraphSpace,
    out: &mut Vec<f32>,
) {
    out.clear();
    let mut v = Vec::with_capacity(space.dim);
    for id in std::iter::once(node).chain(pool.iter().map(|c| c.1)) {
        v.clear();
        let at = id as usize * record;
        sq.decode_into(&codes[at..at + record - 4], &mut v);
        space.push(&v, out);
    }
}

/// Builds an index from `source` within `plan` (sharded), into `out`.
pub(crate) fn build_sharded(
    source: &mut dyn VectorSource,
    params: &BuildParams,
    pq_bytes: usize,
    plan: &BuildPlan,
    out: &Path,
    progress: &dyn Progress,
) -> Result<BuildReport> {
    let start = Instant::now();
    let (dim, n) = (source.dim(), source.rows());
    let storage = params.storage.as_ref();
    diskvec_io::storage::create_dir_all_durable(storage, out)
        .map_err(crate::error::file_error(out))?;
    let _lock = commit::lock(out)?;
    commit::remove_interrupted(storage, out);
    let previous = commit::current_files(out);
    let build_id = commit::new_build_id();
    let scratch = Scratch {
        dir: out.to_path_buf(),
        generation: format!("{build_id:016x}"),
    };
    let (targets, stored_paths) = commit::placement(out, &params.paths, build_id)?;
    let nav_target = nav_path(out, build_id);
    let compact_target = compact_code_bytes(pq_bytes).map(|_| compact_path(out, build_id));
    let generation: Vec<PathBuf> = targets
        .iter()
        .cloned()
        .chain([nav_target.clone()])
        .chain(compact_target.clone())
        .collect();
    let new_files: Vec<PathBuf> = generation.iter().cloned().chain(scratch.all()).collect();
    // Whether nodes will be placed by position: decided before the first code, from the
    // most edges the merged graph can have (sharded_codes.rs).
    let placed = super::sharded_write::placement_fits(
        plan,
        n,
        (n * params.max_degree) as u64,
        dim * params.element.bytes(),
        pq_bytes,
    ) && std::env::var_os(super::build::INPUT_ORDER_VAR).is_none();
    let need = DiskNeed::of((n, dim), params, pq_bytes, plan, placed);
    log::info!("{}", need.describe());
    need.check(out)?;
    let intent = commit::record_intent(storage, out, build_id, &new_files, &previous)?;
    let checkpoints = Checkpoints::new(&params.checkpoint_dir(out), params.storage.clone());
    let outputs = Outputs {
        targets: &targets,
        stored_paths,
        nav: &nav_target,
        compact: compact_target.as_deref(),
        build_id,
        placed,
    };
    let result = build_files(
        source,
        params,
        pq_bytes,
        plan,
        progress,
        &scratch,
        &checkpoints,
        outputs,
    );
    scratch.remove();
    let (
        report_parts,
        Written {
            meta_file_bytes,
            header,
            navigation_off,
        },
        codebook,
    ) = match result {
        Ok(built) => built,
        Err(e) => {
            // Nothing of a failed build stays: its files (under their final or temporary
            // names), then, once their removal is durable, its intent record.
            let mut failed: Vec<PathBuf> = generation
                .iter()
                .flat_map(|f| [f.clone(), f.with_extension("tmp")])
                .chain([staged_path(out)])
                .collect();
            failed.retain(|f| f.exists());
            commit::remove_then_forget(storage, &failed, &intent);
            return Err(e);
        }
    };
    commit::commit(storage, out, &generation, &previous, &intent)?;
    checkpoints.clear();
    let Phases {
        pq_seconds,
        graph_seconds,
        write_seconds,
        shards,
        seeded,
        resumed,
    } = report_parts;
    Ok(BuildReport {
        count: n,
        dim,
        pq_bytes,
        pq_seconds,
        graph_seconds,
        write_seconds,
        total_seconds: start.elapsed().as_secs_f64(),
        nodes_file_bytes: header.nodes_file_bytes(),
        meta_file_bytes,
        shards,
        memory_budget: plan.budget,
        navigation_off,
        codebook: Some(codebook),
        seeded,
        resumed_shards: resumed,
        disk_peak_estimate: Some(need.peak()),
    })
}

/// What a shard's lists depend on besides its bucket.
fn shard_recipe(
    s: usize,
    space: GraphSpace,
    sq8: Option<&ScalarQuantizer8>,
    params: &BuildParams,
) -> ShardRecipe {
    ShardRecipe {
        shard: s,
        graph_dim: space.dim(),
        max_degree: shard_degree(params.max_degree),
        build_list: params.build_list,
        alpha: params.alpha,
        seed: params.seed,
        passes: SHARD_PASSES,
        // A Vamana shard keeps the key it had before other builders existed.
        space: format!(
            "{:?}/{}{}",
            space.metric(),
            if sq8.is_some() { "sq8" } else { "f32" },
            params.graph_builder.recipe()
        ),
        space_numbers: [
            space.max_norm_sq.to_bits(),
            sq8.map_or(0, |q| q.l2_scale().to_bits()),
        ],
    }
}

/// What the phases of a build took and found.
struct Phases {
    pq_seconds: f64,
    graph_seconds: f64,
    write_seconds: f64,
    shards: usize,
    seeded: usize,
    /// Shards whose graph an interrupted build had finished.
    resumed: usize,
}

/// The phases, what the outputs' writer returned, and the codebook.
type Built = (Phases, Written, std::sync::Arc<super::Codebook>);

#[allow(clippy::too_many_arguments)]
/// The index files a build in shards writes, and how it orders their nodes.
struct Outputs<'a> {
    targets: &'a [PathBuf],
    stored_paths: Vec<String>,
    nav: &'a Path,
    compact: Option<&'a Path>,
    build_id: u64,
    /// Nodes placed by position (the merged graph fits the budget), else input order.
    placed: bool,
}

#[allow(clippy::too_many_arguments)]
fn build_files(
    source: &mut dyn VectorSource,
    params: &BuildParams,
    pq_bytes: usize,
    plan: &BuildPlan,
    progress: &dyn Progress,
    scratch: &Scratch,
    checkpoints: &Checkpoints,
    outputs: Outputs,
) -> Result<Built> {
    let build_id = outputs.build_id;
    let (dim, n) = (source.dim(), source.rows());
    let start = Instant::now();
    let mut scanned = scan(
        InputPass::first(source, params),
        params,
        plan,
        scratch,
        progress,
    )?;
    commit::failpoint("build:spooled");
    // Seeded vectors go into one shard, the others into SHARD_OVERLAP: the shards are
    // counted for the copies there are.
    let seeded_count = scanned.seeded_count;
    let copies = seeded_count + SHARD_OVERLAP * (n - seeded_count);
    let shards = plan.shards_for(copies);
    if scanned.seeded_count > 0 {
        log::info!(
            "{} of {n} vectors keep the lists of their own graph; {shards} shards instead of {}",
            scanned.seeded_count,
            plan.shards
        );
    }
    let space = GraphSpace::new(params.metric, dim, scanned.max_norm_sq);
    progress.phase("PQ training", 1);
    let codebook = super::codebook::codebook_for(params, &scanned.sample, dim, pq_bytes)?;
    let pq = &codebook.pq;
    let sq = ScalarQuantizer4::train(&scanned.sample, dim);
    let mut graph_sample = Vec::with_capacity(scanned.sample.len() / dim * space.dim());
    for v in scanned.sample.chunks_exact(dim) {
        space.push(v, &mut graph_sample);
    }
    scanned.sample = Vec::new();
    let centroids = kmeans(&graph_sample, space.dim(), shards, 10, params.seed);
    // Shards are built over 8-bit codes, so their buckets hold the codes (a quarter of the
    // f32 vectors' scratch space and I/O).
    let sq8 = (params.graph_precision == GraphPrecision::Sq8)
        .then(|| ScalarQuantizer8::train(&graph_sample, space.dim()));
    drop(graph_sample);
    progress.advance(1);
    let codebook_bytes = pq.to_bytes();
    let entries = entry_sample(n, params.entry_points, params.seed);
    let mut code_writer = if outputs.placed {
        let files = ScratchCodes {
            pq: scratch.pq(),
            compact: scratch.compact(),
            sq4: scratch.sq4(),
        };
        CodeWriter::scratch(files, codebook.compact.is_some())?
    } else {
        CodeWriter::streamed(IndexTargets {
            storage: params.storage.as_ref(),
            out: &scratch.dir,
            meta: MetaParts {
                build_id,
                count: n,
                codebook: &codebook_bytes,
                code_bytes: pq.code_bytes(),
                entries: &entries,
                paths: &outputs.stored_paths,
            },
            element: params.element,
            compact: outputs.compact.zip(codebook.compact.as_ref()),
            nav: outputs.nav,
            build_id,
            sq: &sq,
        })?
    };
    let Partitioned {
        medoid,
        sizes,
        hashes,
        walk,
    } = encode_and_partition(
        InputPass::again(source, params)?,
        scratch,
        &mut code_writer,
        plan,
        space,
        (pq, codebook.compact.as_ref()),
        &sq,
        sq8.as_ref(),
        &centroids,
        &scanned,
        progress,
    )?;
    let mut codes = code_writer.close()?;
    let pq_seconds = start.elapsed().as_secs_f64();
    // The walk check on the rows gathered in pass 2.
    let (m, sq_record) = (pq.code_bytes(), sq.code_bytes() + 4);
    let queries = walk.queries.len();
    let pool_index = |row: usize| walk.pool.binary_search(&row).expect("sampled in pass 2");
    let (walk_mode, code_recall) = walk_codes(
        n,
        params.metric,
        pq,
        &sq,
        |row| walk.query(row),
        |q, row| {
            let qi = walk.queries.binary_search(&q).expect("a sampled query");
            walk.exact[pool_index(row) * queries + qi]
        },
        |row| {
            let i = pool_index(row);
            SampledCodes {
                pq: &walk.pq[i * m..(i + 1) * m],
                sq: &walk.sq[i * sq_record..(i + 1) * sq_record],
            }
        },
    );
    drop(walk);
    commit::failpoint("build:partitioned");

    let graph_start = Instant::now();
    let total: usize = sizes.iter().sum();
    progress.phase(
        &format!("graph ({shards} shards)"),
        (SHARD_PASSES * total) as u64,
    );
    // Each shard's lists go to the checkpoint directory under a key of its bucket and
    // recipe; those an interrupted build of the same input finished are taken as they are.
    let keys: Vec<u64> = hashes
        .iter()
        .zip(&sizes)
        .enumerate()
        .map(|(s, (hash, &size))| hash.key(size, &shard_recipe(s, space, sq8.as_ref(), params)))
        .collect();
    drop(hashes);
    checkpoints.retain(&keys);
    let (mut resumed, mut built) = (0, 0);
    for (s, &size) in sizes.iter().enumerate() {
        if checkpoints.finished(keys[s]) {
            progress.advance((SHARD_PASSES * size) as u64);
            resumed += 1;
            continue;
        }
        let mut lists = checkpoints.writer(keys[s])?;
        build_shard(
            scratch,
            &mut lists,
            s,
            size,
            (n, dim),
            space,
            sq8.as_ref(),
            params,
            plan,
            progress,
        )?;
        checkpoints.finish(lists)?;
        built += 1;
        // A shard's lists, freed by several threads, would stay resident under the next
        // shard (measured: 37 MiB above a 147 MiB budget at 200k x 768).
        release_freed_memory();
        if built == 1 {
            commit::failpoint("build:first-shard");
        }
    }
    if resumed > 0 {
        log::info!("{resumed} of {shards} shard graphs kept from an interrupted build");
    }
    let _ = std::fs::remove_file(scratch.rows());
    let _ = std::fs::remove_file(scratch.shards());
    let lists: Vec<PathBuf> = keys.iter().map(|&k| checkpoints.lists(k)).collect();
    let edges = merge(
        scratch,
        n,
        space,
        params,
        plan,
        &lists,
        (&sq, &mut codes),
        progress,
    )?;
    release_freed_memory();
    commit::failpoint("build:merged");
    let graph_seconds = graph_start.elapsed().as_secs_f64();

    let write_start = Instant::now();
    let header_probe = build_header(
        params,
        dim,
        n,
        pq_bytes,
        outputs.targets.len(),
        medoid,
        build_id,
    );
    let inputs = Inputs {
        vectors: InputPass::again(source, params)?,
        fingerprint: scanned.fingerprint,
        placed_vectors: scratch.vectors(),
        graph: scratch.graph(),
        ids: std::mem::take(&mut scanned.ids),
        targets: outputs.targets,
        stored_paths: &outputs.stored_paths,
        entries: &entries,
        nav_target: outputs.nav,
        compact_target: outputs.compact,
        out: &scratch.dir,
    };
    let nav_choice = NavChoice {
        sq: &sq,
        walk: walk_mode,
        code_recall,
    };
    let written = write_outputs(
        inputs,
        codes,
        params,
        plan,
        header_probe,
        (pq, codebook.compact.as_ref()),
        nav_choice,
        edges,
        build_id,
        progress,
    )?;
    let phases = Phases {
        pq_seconds,
        graph_seconds,
        write_seconds: write_start.elapsed().as_secs_f64(),
        shards,
        seeded: seeded_count,
        resumed,
    };
    Ok((phases, written, codebook))
}
