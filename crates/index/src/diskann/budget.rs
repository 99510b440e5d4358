//! How much memory a build may use, and how it spends it.
//!
//! A build whose whole working set fits the budget runs in memory (one graph over every
//! vector, the fastest and best graph). One that does not is partitioned: the vectors are
//! spooled to a scratch file, split into overlapping shards (each vector in the two shards
//! of its nearest centroids) sized to the budget, each shard's graph built in memory and
//! written out, and the shard graphs merged (sharded.rs). The estimates below are bytes
//! per vector of each phase's live data, checked against measured peaks (docs/benchmarks.md).

use std::str::FromStr;

use super::graph_builder::GraphBuilder;

use crate::{IndexError, Result};

/// A build's memory budget as the user gives it.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum MemoryBudget {
    /// A share of what the machine (or the memory cgroup the process runs in) has available
    /// when the build starts: `AUTO_SHARE`.
    #[default]
    Auto,
    Bytes(u64),
    /// A share (0 to 1) of the raw vectors' bytes (rows x dimensions x 4).
    ShareOfRaw(f64),
}

/// The share of available memory an unset budget takes: half, leaving the rest to the page
/// cache, searches and whatever else runs.
pub const AUTO_SHARE: f64 = 0.5;

impl FromStr for MemoryBudget {
    type Err = IndexError;

    /// `auto`, a byte count with an optional unit (`768MiB`, `1.5GiB`, `2G`, `500MB`,
    /// `1048576`), or a share of the raw vectors (`25%`).
    fn from_str(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            IndexError::InvalidArgument(format!(
                "memory budget {text:?}: {why} (give bytes with a unit, like 768MiB or 2GiB, \
                 a share of the raw vectors, like 25%, or auto)"
            ))
        };
        let t = text.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        if let Some(share) = t.strip_suffix('%') {
            let pct: f64 = share.trim().parse().map_err(|_| bad("not a number"))?;
            if !(pct.is_finite() && pct > 0.0 && pct <= 1000.0) {
                return Err(bad("the share must be above 0% and at most 1000%"));
            }
            return Ok(Self::ShareOfRaw(pct / 100.0));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kib" => 1024.0,
            "kb" => 1e3,
            "m" | "mib" => 1048576.0,
            "mb" => 1e6,
            "g" | "gib" => 1073741824.0,
            "gb" => 1e9,
            "t" | "tib" => 1099511627776.0,
            "tb" => 1e12,
            _ => return Err(bad("unknown unit")),
        };
        let bytes = value * scale;
        if !(1.0..1e18).contains(&bytes) {
            return Err(bad("must be at least one byte"));
        }
        Ok(Self::Bytes(bytes as u64))
    }
}

impl std::fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => write!(f, "auto"),
            Self::Bytes(b) => write!(f, "{}", mib(*b)),
            Self::ShareOfRaw(s) => write!(f, "{}%", s * 100.0),
        }
    }
}

/// Bytes as the budget messages print them.
pub fn mib(bytes: u64) -> String {
    if bytes >= 10 << 30 {
        format!("{:.1}GiB", bytes as f64 / 1073741824.0)
    } else {
        format!("{}MiB", bytes.div_ceil(1 << 20))
    }
}

impl MemoryBudget {
    /// The budget in bytes for a build of `raw_bytes` of vectors.
    pub fn resolve(&self, raw_bytes: u64) -> u64 {
        match *self {
            Self::Auto => (available_memory() as f64 * AUTO_SHARE) as u64,
            Self::Bytes(b) => b,
            Self::ShareOfRaw(s) => (raw_bytes as f64 * s) as u64,
        }
    }
}

/// Memory this process can still use: the machine's available memory, or less when a
/// memory cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`) caps the process below it.
pub fn available_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(4 << 30);
    available.min(cgroup_room().unwrap_or(u64::MAX))
}

/// Room left in the memory cgroup this process is in, if it has a limit: the limit minus
/// what it uses, counting the inactive page cache as room. A cgroup charges the page cache
/// its processes read or write (a streamed input, the write-ahead log) until the limit is
/// reached, and the kernel reclaims inactive, clean pages first, so without this a process
/// that has read more than its limit would see no room at all (measured: a 1 GiB cgroup
/// importing 1M x 768 saw 48 MiB and refused a merge that needed 94).
fn cgroup_room() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let read =
            |p: String| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        if controllers.is_empty() {
            let base = format!("/sys/fs/cgroup{path}");
            let limit = read(format!("{base}/memory.max"))?;
            let used = read(format!("{base}/memory.current")).unwrap_or(0);
            let cache = reclaimable_cache(&format!("{base}/memory.stat"), "");
            return Some(limit.saturating_sub(used.saturating_sub(cache)));
        }
        if controllers.split(',').any(|c| c == "memory") {
            let base = format!("/sys/fs/cgroup/memory{path}");
            let limit = read(format!("{base}/memory.limit_in_bytes"))?;
            if limit >= 1 << 60 {
                return None;
            }
            let used = read(format!("{base}/memory.usage_in_bytes")).unwrap_or(0);
            let cache = reclaimable_cache(&format!("{base}/memory.stat"), "total_");
            return Some(limit.saturating_sub(used.saturating_sub(cache)));
        }
    }
    None
}

/// Inactive page cache that is neither dirty nor under writeback, from a cgroup's
/// memory.stat (v1 names its hierarchical counters `total_...`; v2 has no prefix).
fn reclaimable_cache(stat_path: &str, prefix: &str) -> u64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    let value = |key: &str| -> u64 {
        let key = format!("{prefix}{key}");
        stat.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0)
    };
    let inactive = value("inactive_file");
    // v2 calls dirty page cache `file_dirty`.
    let dirty = value("dirty").max(value("file_dirty"));
    inactive.saturating_sub(dirty + value("writeback").max(value("file_writeback")))
}

/// What a build of a given size needs, and how it will run under a budget.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildPlan {
    pub budget: u64,
    /// Estimated peak of a build held wholly in memory.
    pub in_memory_bytes: u64,
    /// 1: in memory. More: that many overlapping shards.
    pub shards: usize,
    /// Most vectors one shard may hold.
    pub shard_capacity: usize,
    /// The merge re-prunes each node's union of shard lists with 4-bit codes held in
    /// memory; without room for them it keeps the closest `max_degree`.
    pub reprune: bool,
    /// Rows sampled to train the PQ codebook, the 4-bit bounds and the partition.
    pub sample_rows: usize,
    /// Rows per chunk read from the input or a scratch file.
    pub chunk_rows: usize,
    /// Estimated peak of the sharded build.
    pub estimated_peak: u64,
}

/// Fixed cost of the process besides the data: code, allocator slack, thread stacks, I/O
/// buffers, and the pages of the binary itself that a cgroup counts (measured: a build
/// planned with 24 MiB here peaked 3.7 MiB above its budget).
const OVERHEAD: u64 = 32 << 20;
/// Each vector of an index sits in this many shards.
pub const SHARD_OVERLAP: usize = 2;
/// Shards are sized for this many times the mean (k-means clusters are uneven; a full
/// shard sends further vectors to their next nearest).
const SHARD_SLACK: f64 = 1.15;
/// Most shards one build may have (each has a list file open during the merge).
const MAX_SHARDS: usize = 512;
/// Buffer of each file written or read during the sharded phases.
pub(crate) const FILE_BUFFER: usize = 64 << 10;

/// Bytes a node of a graph under construction takes, for out-degree `r`. Vamana: its slot
/// in the flat list array, room for the build's slack and a length (diskvec_graph's
/// adjacency). PiPNN: its reservoir (a count, then id, distance and bucket per entry), its
/// hash projections and its slot in the finished graph, alive together at the end.
fn graph_node_bytes(r: usize, builder: GraphBuilder) -> u64 {
    let r = r as u64;
    match builder {
        GraphBuilder::Vamana => ((r * 13).div_ceil(10) + 1) * 4,
        GraphBuilder::Pipnn => {
            let bits = diskvec_graph::PipnnParams::default().hash_bits as u64;
            (1 + 3 * r) * 4 + 4 * bits + (r + 1) * 4
        }
    }
}

/// The out-degree of each shard's graph: two thirds of R, as Microsoft DiskANN does, so the
/// union of a vector's two lists is about the R its merged list keeps.
pub fn shard_degree(max_degree: usize) -> usize {
    (max_degree * 2).div_ceil(3).max(4).min(max_degree)
}

/// What a build's memory needs depend on: its size and the parameters that set the
/// bytes per vector.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BuildShape {
    pub n: usize,
    pub dim: usize,
    pub max_degree: usize,
    pub pq_bytes: usize,
    /// Threads building at once (each has its own search buffers).
    pub threads: usize,
    /// Inner product builds over an augmented copy of the vectors.
    pub inner_product: bool,
    /// The graph is built over 8-bit codes of the vectors (`GraphPrecision::Sq8`).
    pub quantized_graph: bool,
    pub graph_builder: GraphBuilder,
}

impl BuildShape {
    /// Bytes of the raw vectors (what a budget given as a share is a share of).
    pub fn raw_bytes(&self) -> u64 {
        self.n as u64 * self.dim as u64 * 4
    }

    /// Plans the build under `budget` bytes; refuses, naming the smallest budget that
    /// works, when even the smallest shards would not fit.
    pub fn plan(&self, budget: u64) -> Result<BuildPlan> {
        match try_plan(self, budget) {
            Ok(plan) => Ok(plan),
            Err(Refusal::TooSmall { in_memory }) => {
                let smallest = self.smallest_budget()?;
                Err(IndexError::InvalidArgument(format!(
                    "a memory budget of {} is too small to build {} vectors of {} dimensions: \
                     the smallest that works is {} (the whole build in memory takes about {})",
                    mib(budget),
                    self.n,
                    self.dim,
                    mib(smallest),
                    mib(in_memory)
                )))
            }
            Err(Refusal::Other(e)) => Err(e),
        }
    }

    /// The smallest budget (a whole number of MiB) this build plans under. Chunks and
    /// samples grow with the budget, so it is searched for rather than computed: the figure
    /// returned does plan.
    pub fn smallest_budget(&self) -> Result<u64> {
        let in_memory = match try_plan(self, u64::MAX / 4) {
            Ok(plan) => plan.in_memory_bytes,
            Err(Refusal::Other(e)) => return Err(e),
            Err(Refusal::TooSmall { in_memory }) => in_memory,
        };
        // In whole MiB, so the figure returned is the smallest that plans, not just close.
        let (mut lo, mut hi) = (0u64, in_memory.div_ceil(1 << 20).max(1));
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match try_plan(self, mid << 20) {
                Ok(_) => hi = mid,
                Err(Refusal::TooSmall { .. }) => lo = mid,
                Err(Refusal::Other(e)) => return Err(e),
            }
        }
        Ok(hi << 20)
    }
}

enum Refusal {
    TooSmall { in_memory: u64 },
    Other(IndexError),
}

fn try_plan(shape: &BuildShape, budget: u64) -> std::result::Result<BuildPlan, Refusal> {
    let BuildShape {
        n,
        dim,
        max_degree,
        pq_bytes,
        threads,
        inner_product,
        quantized_graph,
        graph_builder,
    } = *shape;
    let n64 = n as u64;
    let d = dim as u64;
    let vector = 4 * (d + inner_product as u64);
    // What the graph is built over: the vectors, or their 8-bit codes.
    let graph_vector = if quantized_graph {
        d + inner_product as u64
    } else {
        vector
    };
    let sq4 = d.div_ceil(32) * 16 + 4;
    let t = threads.max(1) as u64;
    // One graph over everything: vectors, graph, PQ codes, ids and their duplicate check,
    // navigation codes and lists, layout order, visited sets.
    // Measured 909 MiB at 200k x 768 where the sum below says 853: a tenth more for
    // allocator slack and transient copies.
    let in_memory = OVERHEAD
        + n64 * 11 / 10
            * (vector
                + graph_node_bytes(max_degree, graph_builder)
                + pq_bytes as u64
                + 24
                + sq4
                + 4 * max_degree as u64
                + 8
                + 4 * t
                // Inner product builds over an augmented copy beside the prepared vectors.
                + if inner_product { 4 * (d + 1) } else { 0 }
                + if quantized_graph { graph_vector } else { 0 });
    let chunk_rows = ((budget / 64) / (4 * d)).clamp(64, 8192) as usize;
    let sample_rows = ((budget / 16) / (4 * d)).clamp(1000, 25_000).min(n64) as usize;
    if in_memory <= budget {
        return Ok(BuildPlan {
            budget,
            in_memory_bytes: in_memory,
            shards: 1,
            shard_capacity: n,
            reprune: false,
            sample_rows,
            chunk_rows,
            estimated_peak: in_memory,
        });
    }
    // Held through every sharded phase: ids (and their sorted copy while checked).
    let fixed = OVERHEAD + 16 * n64 + chunk_rows as u64 * 4 * d * 2;
    let per_shard_vector =
        graph_vector + graph_node_bytes(shard_degree(max_degree), graph_builder) + 4 * t + 8;
    // The training sample, and the walk check's pool: codes and distances to 50 queries.
    let sample = sample_rows as u64 * 4 * d + 20_000 * (pq_bytes as u64 + sq4 + 200);
    // The final phase streams meta.dvm (its writer's buffer, a chunk of codes) beside the
    // ids everything holds.
    let meta = 16 * n64 + (1 << 20) + chunk_rows as u64 * pq_bytes as u64;
    let smallest_shard = (n / 200).max(2_000).min(n) as u64;
    let min_shards =
        (SHARD_OVERLAP as f64 * n as f64 * SHARD_SLACK / smallest_shard as f64).ceil() as u64;
    let buffers = |shards: u64| shards * FILE_BUFFER as u64;
    let minimum = (fixed + buffers(min_shards) + smallest_shard * per_shard_vector)
        .max(fixed + sample)
        .max(OVERHEAD + meta);
    if budget < minimum {
        return Err(Refusal::TooSmall { in_memory });
    }
    if min_shards as usize > MAX_SHARDS {
        return Err(Refusal::Other(IndexError::InvalidArgument(format!(
            "{n} vectors need more than {MAX_SHARDS} shards"
        ))));
    }
    // The largest shards that fit next to their files' buffers.
    let mut shards = 2u64;
    let capacity = loop {
        let room = budget.saturating_sub(fixed + buffers(shards));
        let capacity = room / per_shard_vector;
        let needed =
            (SHARD_OVERLAP as f64 * n as f64 * SHARD_SLACK / capacity.max(1) as f64).ceil() as u64;
        if needed <= shards {
            break capacity.min(n64);
        }
        if needed as usize > MAX_SHARDS {
            return Err(Refusal::TooSmall { in_memory });
        }
        shards = needed;
    };
    if estimated_peak_of(
        fixed,
        buffers(shards),
        capacity,
        per_shard_vector,
        sample,
        meta,
    ) > budget
    {
        return Err(Refusal::TooSmall { in_memory });
    }
    let reprune = fixed + buffers(shards) + n64 * sq4 + 4 * (d + 1) * 200 * t <= budget;
    let estimated_peak = estimated_peak_of(
        fixed,
        buffers(shards),
        capacity,
        per_shard_vector,
        sample,
        meta,
    );
    Ok(BuildPlan {
        budget,
        in_memory_bytes: in_memory,
        shards: shards as usize,
        shard_capacity: capacity as usize,
        reprune,
        sample_rows,
        chunk_rows,
        estimated_peak,
    })
}

fn estimated_peak_of(
    fixed: u64,
    buffers: u64,
    capacity: u64,
    per_shard_vector: u64,
    sample: u64,
    meta: u64,
) -> u64 {
    (fixed + buffers + capacity * per_shard_vector)
        .max(fixed + sample)
        .max(OVERHEAD + meta)
}

impl BuildPlan {
    /// Shards for `copies` vector copies in all (a vector whose lists are seeded by an
    /// earlier graph goes into one shard, any other into `SHARD_OVERLAP`): at most the
    /// plan's, which were counted for every vector in `SHARD_OVERLAP` shards.
    pub fn shards_for(&self, copies: usize) -> usize {
        let needed = (copies as f64 * SHARD_SLACK / self.shard_capacity.max(1) as f64).ceil();
        (needed as usize).clamp(1, self.shards.max(1))
    }

    /// This plan with shards of at most `capacity` vectors (and as many as `n` needs).
    pub fn with_shard_capacity(mut self, n: usize, capacity: usize) -> Self {
        let capacity = capacity.clamp(2, n.max(2));
        self.shard_capacity = capacity;
        self.shards = ((SHARD_OVERLAP as f64 * n as f64 * SHARD_SLACK) / capacity as f64)
            .ceil()
            .max(2.0) as usize;
        self.reprune = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_with_units_and_shares_and_refuse_garbage() {
        assert_eq!(
            "768MiB".parse::<MemoryBudget>().unwrap(),
            MemoryBudget::Bytes(768 << 20)
        );
        assert_eq!(
            "2g".parse::<MemoryBudget>().unwrap(),
            MemoryBudget::Bytes(2 << 30)
        );
        assert_eq!(
            "1.5GiB".parse::<MemoryBudget>().unwrap(),
            MemoryBudget::Bytes(3 << 29)
        );
        assert_eq!(
            "500MB".parse::<MemoryBudget>().unwrap(),
            MemoryBudget::Bytes(500_000_000)
        );
        assert_eq!(
            "4096".parse::<MemoryBudget>().unwrap(),
            MemoryBudget::Bytes(4096)
        );
        assert_eq!(
            "25%".parse::<MemoryBudget>().unwrap(),
            MemoryBudget::ShareOfRaw(0.25)
        );
        assert_eq!("AUTO".parse::<MemoryBudget>().unwrap(), MemoryBudget::Auto);
        for bad in [
            "0",
            "0MiB",
            "-5MiB",
            "lots",
            "12 parsecs",
            "0%",
            "NaN%",
            "",
            "1e400",
        ] {
            let err = bad.parse::<MemoryBudget>().unwrap_err().to_string();
            assert!(err.contains("memory budget"), "{bad}: {err}");
        }
        assert_eq!(MemoryBudget::ShareOfRaw(0.25).resolve(4000), 1000);
        assert!(MemoryBudget::Auto.resolve(0) > 0);
    }

    #[test]
    fn inactive_clean_page_cache_counts_as_room() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = dir.path().join("v1.stat");
        std::fs::write(
            &v1,
            "cache 10\ninactive_file 7\ntotal_inactive_file 5000\ntotal_active_file 900\n\
             total_dirty 300\ntotal_writeback 200\n",
        )
        .unwrap();
        assert_eq!(reclaimable_cache(v1.to_str().unwrap(), "total_"), 4500);
        let v2 = dir.path().join("v2.stat");
        std::fs::write(
            &v2,
            "anon 1\ninactive_file 800\nfile_dirty 100\nfile_writeback 0\n",
        )
        .unwrap();
        assert_eq!(reclaimable_cache(v2.to_str().unwrap(), ""), 700);
        // More dirty than inactive, or no such file: nothing.
        std::fs::write(&v2, "inactive_file 80\nfile_dirty 100\n").unwrap();
        assert_eq!(reclaimable_cache(v2.to_str().unwrap(), ""), 0);
        assert_eq!(reclaimable_cache("/nonexistent/memory.stat", ""), 0);
    }

    #[test]
    fn a_roomy_budget_builds_in_memory_and_a_tight_one_shards_within_it() {
        let (n, dim) = (1_000_000, 768);
        let raw = (n * dim * 4) as u64;
        let shape = BuildShape {
            n,
            dim,
            max_degree: 64,
            pq_bytes: 192,
            threads: 2,
            inner_product: false,
            quantized_graph: true,
            graph_builder: GraphBuilder::Vamana,
        };
        let roomy = shape.plan(8 * raw).unwrap();
        assert_eq!(roomy.shards, 1);
        let tight = shape.plan(raw / 4).unwrap();
        assert!(tight.shards > 2, "{tight:?}");
        assert!(tight.estimated_peak <= raw / 4, "{tight:?}");
        assert!(tight.shard_capacity * tight.shards >= 2 * n, "{tight:?}");
        let err = shape.plan(20 << 20).unwrap_err().to_string();
        assert!(err.contains("smallest that works is"), "{err}");
        // The smallest budget named works.
        let named = err
            .split("works is ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let bytes = match named.parse::<MemoryBudget>().unwrap() {
            MemoryBudget::Bytes(b) => b,
            other => panic!("{other:?}"),
        };
        shape.plan(bytes).unwrap();
        assert_eq!(bytes, shape.smallest_budget().unwrap());
        assert!(shape.plan(bytes - (1 << 20)).is_err());
    }
}
