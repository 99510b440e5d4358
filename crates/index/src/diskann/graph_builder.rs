//! Which algorithm builds the graph: Vamana (insertions, each a search of the graph so
//! far) or PiPNN (partitions into small overlapping leaves, all distances within a leaf
//! at once, per-point reservoirs). One dispatch serves the build in memory and every shard
//! of a build in shards.

use diskvec_graph::{Graph, GraphVectors, PipnnParams, VamanaParams};

/// What a graph covers: every vector of the index, or one shard of a build in shards
/// (whose partition already put each vector in two shards).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    Whole,
    Shard,
}

/// The algorithm a build's graph comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GraphBuilder {
    #[default]
    Vamana,
    Pipnn,
}

impl std::str::FromStr for GraphBuilder {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "vamana" => Ok(Self::Vamana),
            "pipnn" => Ok(Self::Pipnn),
            _ => Err(format!(
                "unknown graph builder {s:?}: expected vamana or pipnn"
            )),
        }
    }
}

impl GraphBuilder {
    pub fn name(self) -> &'static str {
        match self {
            Self::Vamana => "vamana",
            Self::Pipnn => "pipnn",
        }
    }

    /// What a shard's checkpoint key adds for this builder: nothing for Vamana (keys made
    /// before PiPNN stay valid), the name and every knob for PiPNN.
    pub(crate) fn recipe(self) -> String {
        match self {
            Self::Vamana => String::new(),
            Self::Pipnn => format!(
                "/pipnn {:?}",
                pipnn_params(&VamanaParams::default(), Scope::Shard)
            ),
        }
    }

    /// Units of progress the build reports over `n` vectors.
    pub(crate) fn progress_total(self, n: usize, vamana: &VamanaParams) -> u64 {
        match self {
            Self::Vamana if vamana.two_passes => 2 * n as u64,
            _ => n as u64,
        }
    }

    /// The graph over `vectors`; `vamana` carries the degree, list size, alpha and seed
    /// both algorithms take from the build's parameters. `None` when `go_on` said stop.
    pub(crate) fn build<V: GraphVectors>(
        self,
        vectors: &V,
        vamana: VamanaParams,
        scope: Scope,
        go_on: &(dyn Fn(u64) -> bool + Sync),
    ) -> Option<Graph> {
        match self {
            Self::Vamana => diskvec_graph::build(vectors, vamana, go_on),
            Self::Pipnn => diskvec_graph::build_pipnn(vectors, pipnn_params(&vamana, scope), go_on),
        }
    }
}

/// Knobs of the partitioned build, read from the environment so that a benchmark can walk
/// a grid without a new flag for each: `DISKVEC_PIPNN` = `key=value,...` with keys
/// leaf_max, leaders, leaf_fanout, top_fanout, links, leaf_k, reservoir, bits, prune (an alpha,
/// or 0 for none). Unknown keys and bad values are ignored.
pub const PIPNN_KNOBS_VAR: &str = "DISKVEC_PIPNN";

fn pipnn_params(vamana: &VamanaParams, scope: Scope) -> PipnnParams {
    let mut p = PipnnParams {
        max_degree: vamana.max_degree,
        reservoir: vamana.max_degree,
        seed: vamana.seed,
        ..PipnnParams::default()
    };
    // In a shard the partition was the first split, with its overlap (measured at 1M x 768
    // in 6 shards: 3.3x faster graphs, recall@10 at L=100 0.9890 against 0.9910 with a
    // second overlapping split).
    if scope == Scope::Shard {
        p.top_fanout = 1;
    }
    let knobs = std::env::var(PIPNN_KNOBS_VAR).unwrap_or_default();
    for (key, value) in knobs.split(',').filter_map(|kv| kv.split_once('=')) {
        let value = value.trim();
        if key.trim() == "prune" {
            if let Ok(alpha) = value.parse::<f32>() {
                p.final_prune = (alpha > 0.0).then_some(alpha);
            }
            continue;
        }
        let Ok(v) = value.parse::<usize>() else {
            continue;
        };
        match key.trim() {
            "leaf_max" => p.leaf_max = v,
            "leaders" => p.split_leaders = v,
            "leaf_fanout" => p.leaf_fanout = v,
            "top_fanout" => p.top_fanout = v,
            "links" => p.leader_links = v,
            "leaf_k" => p.leaf_k = v,
            "reservoir" => p.reservoir = v,
            "bits" => p.hash_bits = v,
            _ => {}
        }
    }
    p
}
