//! What running one configuration produces, before any statistics: the same JSON whether
//! a diskvec child process or the Python peer driver wrote it, so the harness computes
//! every number the same way for everyone.

use serde::{Deserialize, Serialize};

/// One timed run of the test queries by `concurrency` clients.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunRaw {
    pub concurrency: usize,
    /// The search-time knob (ef or L) this run used.
    pub knob: usize,
    pub seconds: f64,
    /// Successful queries.
    pub queries: u64,
    #[serde(default)]
    pub errors: u64,
    /// Client-side latency of every successful query, in milliseconds.
    pub latencies_ms: Vec<f64>,
    /// For runs that cover the test set: the ids answered for each test query, in order.
    #[serde(default)]
    pub answers: Vec<Vec<i64>>,
    /// Joules the machine drew during the run (RAPL), where it exposes them.
    #[serde(default)]
    pub joules: Option<f64>,
    /// Bytes read from storage by the serving process during the run.
    #[serde(default)]
    pub device_read_bytes: Option<u64>,
    /// Node reads the index counted (diskvec only).
    #[serde(default)]
    pub index_reads: Option<u64>,
}

impl RunRaw {
    /// Answered queries per second of wall time (VectorDBBench's QPS); 0 for an empty run.
    pub fn qps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.queries as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Everything one configuration's run reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CaseRaw {
    pub label: String,
    /// Reading and inserting the vectors.
    pub insert_seconds: f64,
    /// Building until searchable (VectorDBBench's "optimize").
    pub build_seconds: f64,
    /// Peak RSS of the serving process during the search phases, bytes.
    pub serving_peak_rss_bytes: Option<u64>,
    /// False when the peak could not be reset after loading (it then includes the load).
    #[serde(default)]
    pub serving_peak_is_clean: bool,
    /// Peak RSS during loading, bytes.
    pub load_peak_rss_bytes: Option<u64>,
    /// DRAM the index itself says it holds, bytes.
    pub index_dram_bytes: Option<u64>,
    /// Bytes the index occupies on disk.
    pub disk_bytes: u64,
    /// Concurrent phase, one run per level.
    pub levels: Vec<RunRaw>,
    /// Serial phase: every test query once, one client.
    pub serial: RunRaw,
    /// Further knob values: one pass over the test queries each, at the sweep concurrency.
    #[serde(default)]
    pub sweep: Vec<RunRaw>,
    /// What the runner wants the reader to know (fallbacks, substitutions).
    #[serde(default)]
    pub notes: Vec<String>,
}
