//! The DRAM the sealed segments' searches hold beyond their compressed vectors, shared by
//! every collection of the database and rebalanced as segments are sealed, merged and
//! dropped.
//!
//! Node reads bypass the page cache (O_DIRECT), so memory the machine has spare helps a
//! search only where diskvec holds node records itself. The budget pays for a collection's
//! navigation data first (loaded by its setting; the build left it off where it does not
//! pay), then for node records: the same share of every sealed segment's nodes, each
//! segment's prefix (numbered breadth-first from the medoid, so the nodes every search
//! passes first). At every node held a search reads nothing.
//!
//! A collection's own `search_memory` is its own; the rest of the database's budget is
//! split over the collections without one, as the same share of each one's nodes. The
//! database's budget is bytes, or automatic: `AUTO_SEARCH_SHARE` of the memory available
//! counting what the caches hold already (memory the caches hold is not available to the
//! builds, whose automatic budget is half of what is, so the two never count the same
//! bytes). `on_disk: false` holds every node whatever the budget, taken off the top.

use std::sync::{Arc, Mutex, Weak};

use diskvec_index::diskann::{available_memory, MemoryBudget};
use serde::Serialize;

use crate::collection::Inner;
use crate::segment::{Points, Sealed};

/// The share of available memory (counting the caches' own) an automatic search budget
/// takes: half, the other half left to builds, writes and the page cache.
pub const AUTO_SEARCH_SHARE: f64 = 0.5;

pub(crate) struct SearchMemory {
    limit: MemoryBudget,
    members: Mutex<Vec<Weak<Inner>>>,
    /// The last rebalance's outcome; held during one, so two never interleave.
    last: Mutex<Usage>,
}

/// The database's search memory as last rebalanced.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Usage {
    /// What all collections may hold together (resolved from the setting).
    pub budget: u64,
    /// What their node caches and navigation data hold.
    pub held: u64,
}

/// One collection's sealed segments and its settings, as a rebalance sees them.
struct Member {
    inner: Arc<Inner>,
    segments: Vec<Arc<Sealed>>,
    own: Option<MemoryBudget>,
    all_in_dram: bool,
    dim: usize,
}

impl Member {
    fn navigation_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.navigation_bytes() as u64)
            .sum()
    }
    /// Bytes of every node record of every sealed segment.
    fn all_nodes_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.len() as u64 * s.node_record_bytes() as u64)
            .sum()
    }
    fn cache_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.node_cache_bytes() as u64)
            .sum()
    }
    fn raw_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.len() as u64 * self.dim as u64 * 4)
            .sum()
    }
}

impl SearchMemory {
    pub fn new(limit: MemoryBudget) -> Self {
        Self {
            limit,
            members: Mutex::new(Vec::new()),
            last: Mutex::new(Usage::default()),
        }
    }

    pub fn limit(&self) -> MemoryBudget {
        self.limit
    }

    pub fn usage(&self) -> Usage {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `inner`'s sealed segments in from the next rebalance on.
    pub fn join(&self, inner: &Arc<Inner>) {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        members.retain(|m| m.strong_count() > 0);
        members.push(Arc::downgrade(inner));
    }

    /// Shares the budget out again over every open collection's sealed segments and
    /// resizes their node caches (shrinking ones first, so the total never peaks above
    /// both plans). A cache that cannot be read in (an I/O error) is logged and left.
    pub fn rebalance(&self) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let members: Vec<Member> = {
            let list = self.members.lock().unwrap_or_else(|e| e.into_inner());
            list.iter()
                .filter_map(Weak::upgrade)
                .filter(|inner| !inner.is_closing())
                .map(|inner| Member {
                    segments: inner.sealed_segments(),
                    own: inner.config().search_memory,
                    all_in_dram: !inner.config().on_disk,
                    dim: inner.config().dim,
                    inner,
                })
                .collect()
        };
        let held: u64 = members
            .iter()
            .map(|m| m.cache_bytes() + m.navigation_bytes())
            .sum();
        let budget = match self.limit {
            MemoryBudget::Bytes(b) => b,
            _ => ((available_memory() + held) as f64 * AUTO_SEARCH_SHARE) as u64,
        };
        let shares = plan(&members, budget);
        let mut resized: Vec<(&Arc<Sealed>, usize)> = Vec::new();
        for (m, &share) in members.iter().zip(&shares) {
            m.inner.set_cache_share(share);
            if m.all_in_dram {
                continue;
            }
            for s in &m.segments {
                resized.push((s, (s.len() as f64 * share) as usize));
            }
        }
        // Shrink first.
        resized.sort_by_key(|(s, records)| *records >= s.cached_nodes());
        for (s, records) in resized {
            if let Err(e) = s.resize_node_cache(records) {
                log::warn!("node cache of {}: {e}", s.dir().display());
            }
        }
        *last = Usage {
            budget,
            held: members
                .iter()
                .map(|m| m.cache_bytes() + m.navigation_bytes())
                .sum(),
        };
    }
}

/// The share of its nodes each member may hold within `budget`.
fn plan(members: &[Member], budget: u64) -> Vec<f64> {
    let mut left = budget as f64;
    let mut shares = vec![0.0; members.len()];
    let (mut shared_nodes, mut shared) = (0.0, Vec::new());
    for (i, m) in members.iter().enumerate() {
        let (nav, nodes) = (m.navigation_bytes() as f64, m.all_nodes_bytes() as f64);
        if m.all_in_dram {
            shares[i] = 1.0;
            left -= nav + nodes;
        } else if let Some(own) = m.own {
            let given = own.resolve(m.raw_bytes()) as f64;
            shares[i] = share_of(given - nav, nodes);
            left -= given.min(nav + nodes);
        } else {
            left -= nav;
            shared_nodes += nodes;
            shared.push(i);
        }
    }
    let share = share_of(left, shared_nodes);
    for i in shared {
        shares[i] = share;
    }
    shares
}

fn share_of(bytes: f64, of: f64) -> f64 {
    if of <= 0.0 {
        return 1.0;
    }
    (bytes / of).clamp(0.0, 1.0)
}
