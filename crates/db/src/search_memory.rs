//! The DRAM the sealed segments' searches hold beyond their compressed vectors, shared by
//! every collection of the database and rebalanced as segments are sealed, merged and
//! dropped.
//!
//! Node reads bypass the page cache (O_DIRECT), so memory the machine has spare helps a
//! search only where diskvec holds node records itself. The budget pays for a collection's
//! navigation data first (where its setting asks for it and the build wrote it: the build
//! leaves it off where it would not pay; where the budget cannot hold it, it is not loaded
//! and the segments walk by their PQ codes), then for node records: small sealed segments
//! held whole (up to half of a collection's node cache, `segment_shares`), the same share of
//! every other one's nodes, each segment's prefix (numbered breadth-first from the medoid, so
//! the nodes every search passes first). At every node held a search reads nothing.
//!
//! A collection's own `search_memory` is its own; the rest of the database's budget is
//! split over the collections without one, as the same share of each one's nodes. The
//! database's budget is bytes, or automatic: `AUTO_SEARCH_SHARE` of the memory available
//! counting what the caches hold already. The builds' automatic budget counts what those
//! caches hold as available too, and a build's reservation shrinks them first (to leave it
//! and a headroom), so the two never plan the same bytes; while searches run they keep a
//! floor (`FLOOR_SHARE`) the builds do not count on. `on_disk: false` holds every node
//! whatever the budget, taken off the top.

use std::sync::{Arc, Mutex, Weak};

use diskvec_index::diskann::{available_memory, MemoryBudget};
use serde::Serialize;

use crate::collection::Inner;
use crate::segment::Sealed;

/// The share of the memory the database could use (what is available and what the caches
/// hold) an automatic search budget takes. The caches give back what the builds reserve
/// beyond the rest (`note_build_reserved`), so a large share does not starve the builds; it
/// is not all, leaving room for writes, payloads and the page cache. Measured at 1M x 768
/// in a cgroup of the raw vectors' size: half held 27% of the nodes (0.8x qdrant-edge's QPS
/// at k=10), 2,100 of 2,930 MiB held half (1.03x).
pub const AUTO_SEARCH_SHARE: f64 = 0.75;

/// The share of the memory the database could use that an automatic budget keeps while
/// searches run, whatever the builds reserve (builds plan in more shards instead): the small
/// segments held whole and the loaded ones' first hops. Without it, at 10M x 768 in a 4 GiB
/// cgroup, a merge of 1.76M old points and the write buffer of 5,000 points a second took the
/// budget to nothing: no node held, new segments included, 41 reads a graph search.
const FLOOR_SHARE: f64 = 0.25;

/// A search within this long keeps the floor (`FLOOR_SHARE`); a bulk load nobody searches
/// gives its merges all there is.
pub(crate) const SEARCHED_LATELY: std::time::Duration = std::time::Duration::from_secs(60);

/// What the caches leave free of the memory the database could use beside what the builds
/// reserved: room for writes, payloads, the page cache and the process's own heap, a tenth
/// and at least `HEADROOM_MIN` (measured: at three quarters with no floor, a search process
/// in a 586 MiB cgroup holding a 1M x 768 segment was OOM-killed while it opened).
const HEADROOM_SHARE: f64 = 0.1;
const HEADROOM_MIN: f64 = 128.0 * 1048576.0;

/// Sealed segments steer their walks by their full PQ codes while what opening every
/// collection takes (`Demand::fixed`, full codes counted) leaves this much of the memory
/// available; below it, by their compact codes (a quarter of the bytes: at 1M x 768, 48 MB
/// instead of 192, what lets a 1M x 768 collection open in a 146 MiB cgroup).
const FULL_CODES_HEADROOM: u64 = 128 << 20;

/// Share of the memory the database could use that the sealed segments' full PQ codes may
/// take before segments opened later take their compact ones (`compact_when_codes_crowd`).
const FULL_CODES_SHARE: f64 = 0.25;

/// Which PQ codes the sealed segments steer their searches by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PqCodes {
    /// The full codes while opening leaves `FULL_CODES_HEADROOM` of the memory available,
    /// else the compact ones.
    #[default]
    Auto,
    Full,
    /// The compact codes wherever a segment has them (built since they existed).
    Compact,
}

impl std::str::FromStr for PqCodes {
    type Err = crate::DbError;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "full" => Ok(Self::Full),
            "compact" => Ok(Self::Compact),
            _ => Err(crate::DbError::InvalidInput(format!(
                "PQ codes {s:?}: use auto, full or compact"
            ))),
        }
    }
}

pub(crate) struct SearchMemory {
    limit: MemoryBudget,
    codes: PqCodes,
    /// Bytes the running builds reserved (`BuildMemory`): an automatic budget gives them back.
    builds_reserved: std::sync::atomic::AtomicU64,
    /// Set once the database has opened every collection: a rebalance before that (a seal
    /// of the first collection while the next opens) would share the budget over some.
    ready: std::sync::atomic::AtomicBool,
    members: Mutex<Vec<Weak<Inner>>>,
    /// Segments open with their compact codes from now on (`choose_codes`).
    compact_codes: std::sync::atomic::AtomicBool,
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
    /// What of it the builds may have: the node caches of the collections that share the
    /// budget (navigation data, own settings and `on_disk: false` stay), beyond the floor
    /// kept while searches run.
    pub yields: u64,
    /// The floor the budget keeps whatever the builds reserve (0 when nothing was searched
    /// lately or the budget is in bytes).
    pub floor: u64,
}

/// What one collection asks of the search memory.
#[derive(Clone, Debug, Default)]
pub(crate) struct Demand {
    /// Navigation data its open segments hold: charged whatever the plan (a rebalance does
    /// not unload it).
    pub navigation_held: u64,
    /// The navigation files' bytes of its segments that do not hold theirs, where its
    /// setting asks for navigation (0 otherwise): what the plan decides on.
    pub navigation: u64,
    /// Bytes of every node record of its sealed segments.
    pub nodes: u64,
    /// Bytes of its sealed points' raw vectors (what a share setting is a share of).
    pub raw: u64,
    pub own: Option<MemoryBudget>,
    /// `on_disk: false`: every node held, whatever the budget.
    pub all_in_dram: bool,
    /// What opening its segments takes besides (PQ codes and ids in meta.dvm, payloads):
    /// before they open, the memory available does not show it yet.
    pub fixed: u64,
    /// What of `fixed` opening its segments with their compact codes spares.
    pub compact_saving: u64,
}

/// What the search memory gives one collection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Grant {
    /// The share of its nodes each sealed segment holds.
    pub share: f64,
    /// Whether its segments load their navigation data: the budget pays for it first, and
    /// a collection whose navigation does not fit searches without it (with the PQ codes).
    pub navigation: bool,
    /// Whether its segments open with their compact codes (`SearchMemory::choose_codes`).
    pub compact_codes: bool,
}

/// One collection's sealed segments and its settings, as a rebalance sees them.
struct Member {
    inner: Arc<Inner>,
    segments: Vec<Arc<Sealed>>,
    demand: Demand,
}

impl Member {
    fn new(inner: Arc<Inner>) -> Self {
        let segments = inner.sealed_segments();
        let config = inner.config();
        let demand = Demand {
            navigation_held: segments.iter().map(|s| s.navigation_bytes() as u64).sum(),
            navigation: if config.navigation {
                segments
                    .iter()
                    .filter(|s| s.navigation_bytes() == 0)
                    .map(|s| s.navigation_file_bytes())
                    .sum()
            } else {
                0
            },
            nodes: segments.iter().map(|s| s.all_node_bytes()).sum(),
            raw: segments.iter().map(|s| s.raw_vector_bytes()).sum(),
            own: config.search_memory,
            all_in_dram: !config.on_disk,
            fixed: 0,
            compact_saving: 0,
        };
        Self {
            inner,
            segments,
            demand,
        }
    }

    /// What its node caches and navigation data hold now.
    fn held(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| (s.node_cache_bytes() + s.navigation_bytes()) as u64)
            .sum()
    }
}

impl SearchMemory {
    pub fn new(limit: MemoryBudget, codes: PqCodes) -> Self {
        Self {
            limit,
            codes,
            builds_reserved: Default::default(),
            ready: Default::default(),
            members: Mutex::new(Vec::new()),
            compact_codes: Default::default(),
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
        if !self.ready.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let members: Vec<Member> = {
            let list = self.members.lock().unwrap_or_else(|e| e.into_inner());
            list.iter()
                .filter_map(Weak::upgrade)
                .filter(|inner| !inner.is_closing())
                .map(Member::new)
                .collect()
        };
        self.compact_when_codes_crowd(&members);
        let held: u64 = members.iter().map(Member::held).sum();
        let searching = members.iter().any(|m| m.inner.searched_lately());
        let (budget, floor) = self.budget(held, searching);
        let demands: Vec<Demand> = members.iter().map(|m| m.demand.clone()).collect();
        let grants = plan(&demands, budget, self.compact_codes());
        let mut resized: Vec<(&Arc<Sealed>, f64)> = Vec::new();
        for (m, grant) in members.iter().zip(&grants) {
            m.inner.set_search_grant(*grant);
            if m.demand.all_in_dram {
                continue;
            }
            let bytes: Vec<u64> = m.segments.iter().map(|s| s.all_node_bytes()).collect();
            for (s, share) in m.segments.iter().zip(segment_shares(&bytes, grant.share)) {
                resized.push((s, share));
            }
        }
        // Shrink first.
        resized.sort_by_key(|(s, share)| s.cache_grows_to(*share));
        for (s, share) in resized {
            if let Err(e) = s.resize_node_cache(share) {
                log::warn!("node cache of {}: {e}", s.dir().display());
            }
        }
        let shared_caches: u64 = members
            .iter()
            .filter(|m| m.demand.own.is_none() && !m.demand.all_in_dram)
            .flat_map(|m| &m.segments)
            .map(|s| s.node_cache_bytes() as u64)
            .sum();
        *last = Usage {
            budget,
            held: members.iter().map(Member::held).sum(),
            yields: shared_caches.saturating_sub(floor),
            floor,
        };
    }

    /// The choice of `choose_codes` made again as the collections grow: once the full codes
    /// the sealed segments hold pass `FULL_CODES_SHARE` of the memory the database could use
    /// (what is available and what those codes take), segments opened from then on (every
    /// seal and merge) take their compact codes. At 10M x 768 the full codes are 1.9 GB; in
    /// a 4 GiB cgroup they left a load's builds too little to finish its merges.
    fn compact_when_codes_crowd(&self, members: &[Member]) {
        if self.codes != PqCodes::Auto || self.compact_codes() {
            return;
        }
        let full: u64 = members
            .iter()
            .flat_map(|m| &m.segments)
            .filter(|s| !s.uses_compact_codes())
            .map(|s| s.code_bytes_held() as u64)
            .sum();
        let available = available_memory();
        if codes_crowd(full, available) {
            log::info!(
                "sealed segments opened from now on steer by their compact PQ codes: the full \
                 ones take {} MiB of the {} MiB the database could use",
                full >> 20,
                (available + full) >> 20
            );
            self.compact_codes
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether segments open with their compact codes now.
    pub fn compact_codes(&self) -> bool {
        self.compact_codes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Decides, before the collections of `demands` open, whether their segments (and the
    /// ones sealed later) open with their compact codes: when what opening them takes with
    /// the full codes would leave less than `FULL_CODES_HEADROOM` of the memory available
    /// (or as the database's `pq_codes` option says). Once chosen, compact codes stay for
    /// the life of the process.
    pub fn choose_codes(&self, demands: &[Demand]) -> bool {
        let fixed: u64 = demands.iter().map(|d| d.fixed).sum();
        let saving: u64 = demands.iter().map(|d| d.compact_saving).sum();
        let available = available_memory();
        let compact = match self.codes {
            PqCodes::Full => false,
            PqCodes::Compact => true,
            PqCodes::Auto => self.compact_codes() || wants_compact(fixed, saving, available),
        };
        if compact && self.codes == PqCodes::Auto {
            log::info!(
                "sealed segments steer by their compact PQ codes ({} MiB less than the full \
                 ones): {} MiB available, opening takes {} MiB with the full codes",
                saving >> 20,
                available >> 20,
                fixed >> 20
            );
        }
        self.compact_codes
            .store(compact, std::sync::atomic::Ordering::Relaxed);
        compact
    }

    /// Every collection is open: rebalances count from now on.
    pub fn set_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Bytes the open collections' write buffers may still take (`Inner::write_room`):
    /// automatic budgets leave them free.
    ///
    /// Lock order: the member list, then each collection's state (as `rebalance`).
    pub fn write_room(&self) -> u64 {
        let members: Vec<Arc<Inner>> = {
            let list = self.members.lock().unwrap_or_else(|e| e.into_inner());
            list.iter().filter_map(Weak::upgrade).collect()
        };
        members.iter().map(|m| m.write_room()).sum()
    }

    /// The budget in bytes, with `held` bytes held by the caches and navigation data now, and
    /// the floor it keeps whatever the builds reserve (while `searching`).
    fn budget(&self, held: u64, searching: bool) -> (u64, u64) {
        match self.limit {
            MemoryBudget::Bytes(b) => (b, 0),
            _ => {
                let usable = (available_memory() + held).saturating_sub(self.write_room());
                let reserved = self
                    .builds_reserved
                    .load(std::sync::atomic::Ordering::Relaxed);
                auto_budget_kept(usable, reserved, searching)
            }
        }
    }

    /// What an automatic budget's caches hold that a build may have (0 for a budget in
    /// bytes, which the caches keep).
    pub fn yields(&self) -> u64 {
        match self.limit {
            MemoryBudget::Bytes(_) => 0,
            _ => self.usage().yields,
        }
    }

    /// Notes that the running builds reserve `bytes` together (the caller holds the build
    /// ledger, so the notes keep its order); true when an automatic budget should rebalance
    /// for it (shrinking the caches to leave it to them; `rebalance` after the ledger is
    /// released). A build's end only notes it: the rebalance after its switch grows the
    /// caches once the new segment is open, not before.
    pub fn note_build_reserved(&self, bytes: u64) -> bool {
        let before = self
            .builds_reserved
            .swap(bytes, std::sync::atomic::Ordering::Relaxed);
        before < bytes && self.limit == MemoryBudget::Auto
    }

    /// The budget before the collections of `demands` open: an automatic one counts out
    /// what opening them takes besides the search memory (measured: in a 293 MiB cgroup a
    /// 1M x 768 collection's 192 MB of PQ codes came on top of a budget planned without
    /// them).
    pub fn budget_before_open(&self, demands: &[Demand]) -> u64 {
        match self.limit {
            MemoryBudget::Bytes(b) => b,
            _ => {
                let compact = self.compact_codes();
                let fixed: u64 = demands
                    .iter()
                    .map(|d| {
                        d.fixed
                            .saturating_sub(if compact { d.compact_saving } else { 0 })
                    })
                    .sum();
                auto_budget(available_memory().saturating_sub(fixed), 0)
            }
        }
    }
}

/// What each collection gets of `budget`: its own setting first (navigation, then nodes),
/// `on_disk: false` all its nodes, and the rest split over the others: their navigation
/// first if all of it fits, then the same share of each one's nodes.
pub(crate) fn plan(demands: &[Demand], budget: u64, compact_codes: bool) -> Vec<Grant> {
    let mut left = budget as f64;
    let mut grants = vec![
        Grant {
            share: 0.0,
            navigation: false,
            compact_codes,
        };
        demands.len()
    ];
    let mut shared = Vec::new();
    for (i, d) in demands.iter().enumerate() {
        let (held, nav, nodes) = (
            d.navigation_held as f64,
            d.navigation as f64,
            d.nodes as f64,
        );
        if d.all_in_dram {
            grants[i] = Grant {
                share: 1.0,
                navigation: true,
                compact_codes,
            };
            left -= held + nav + nodes;
        } else if let Some(own) = d.own {
            let given = own.resolve(d.raw) as f64 - held;
            let navigation = given >= nav;
            let nav_cost = if navigation { nav } else { 0.0 };
            grants[i] = Grant {
                share: share_of(given - nav_cost, nodes),
                navigation,
                compact_codes,
            };
            left -= held + given.max(0.0).min(nav_cost + nodes);
        } else {
            left -= held;
            shared.push(i);
        }
    }
    let shared_nav: f64 = shared.iter().map(|&i| demands[i].navigation as f64).sum();
    let navigation = left >= shared_nav;
    if navigation {
        left -= shared_nav;
    }
    let shared_nodes: f64 = shared.iter().map(|&i| demands[i].nodes as f64).sum();
    let share = share_of(left, shared_nodes);
    for i in shared {
        grants[i] = Grant {
            share,
            navigation,
            compact_codes,
        };
    }
    grants
}

/// Whether segments taking `fixed` bytes to open with their full codes, `saving` less with
/// their compact ones, should open with the compact ones in `available` bytes.
/// Whether `full` bytes of full codes held, with `available` bytes available beside them,
/// take more than `FULL_CODES_SHARE` of the two.
fn codes_crowd(full: u64, available: u64) -> bool {
    full as f64 > (available + full) as f64 * FULL_CODES_SHARE
}

fn wants_compact(fixed: u64, saving: u64, available: u64) -> bool {
    saving > 0 && fixed + FULL_CODES_HEADROOM > available
}

/// An automatic budget out of `usable` bytes (available, and held by the caches now) with
/// `reserved` bytes reserved by builds: its share, less what the builds and the headroom
/// need beyond the rest.
fn auto_budget(usable: u64, reserved: u64) -> u64 {
    let usable = usable as f64;
    let headroom = (usable * HEADROOM_SHARE).max(HEADROOM_MIN);
    let beside_builds = usable - reserved as f64 - headroom;
    (usable * AUTO_SEARCH_SHARE).min(beside_builds).max(0.0) as u64
}

/// The share of its node records each of a collection's sealed segments holds, `bytes` of
/// node records each, when the collection's grant pays for `share` of all of them: the
/// smallest segments held whole, smallest first, while together they take at most
/// `WHOLE_SEGMENTS_SHARE` of what the grant pays for; the rest the same share of theirs.
///
/// Every query walks every segment's graph, and a walk reads about as many nodes in a
/// segment of 20,000 points as in one of 1.4M: held whole, the small one reads nothing
/// for a seventieth of the bytes. Measured at 10M x 768 while 500 points a second came (the
/// new segments of 20,000 at the same 7.4% as the loaded ones): 1.6 node reads a graph
/// search with no new segment, 20 with 13. The loaded segments' prefixes keep at least
/// half of what the equal plan gave them.
fn segment_shares(bytes: &[u64], share: f64) -> Vec<f64> {
    let total: u64 = bytes.iter().sum();
    if share <= 0.0 || share >= 1.0 || total == 0 {
        return vec![share.clamp(0.0, 1.0); bytes.len()];
    }
    let allowance = total as f64 * share;
    let mut order: Vec<usize> = (0..bytes.len()).collect();
    order.sort_by_key(|&i| bytes[i]);
    let mut shares = vec![0.0; bytes.len()];
    let mut whole = 0u64;
    for &i in &order {
        if (whole + bytes[i]) as f64 > allowance * WHOLE_SEGMENTS_SHARE {
            break;
        }
        whole += bytes[i];
        shares[i] = 1.0;
    }
    let rest = share_of(allowance - whole as f64, (total - whole) as f64);
    for s in shares.iter_mut().filter(|s| **s < 1.0) {
        *s = rest;
    }
    shares
}

/// At most this share of a collection's node cache holds small segments whole
/// (`segment_shares`); the rest is every other segment's prefix.
const WHOLE_SEGMENTS_SHARE: f64 = 0.5;

/// `auto_budget`, kept at `FLOOR_SHARE` of `usable` at least while `searching`; and that
/// floor (0 when not searching).
fn auto_budget_kept(usable: u64, reserved: u64, searching: bool) -> (u64, u64) {
    let floor = if searching {
        (usable as f64 * FLOOR_SHARE) as u64
    } else {
        0
    };
    (auto_budget(usable, reserved).max(floor), floor)
}

fn share_of(bytes: f64, of: f64) -> f64 {
    if of <= 0.0 {
        return 1.0;
    }
    (bytes / of).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(navigation: u64, nodes: u64) -> Demand {
        Demand {
            navigation,
            nodes,
            raw: nodes / 2,
            ..Default::default()
        }
    }

    #[test]
    fn navigation_is_paid_first_then_the_same_share_of_every_shared_collections_nodes() {
        let d = [demand(100, 1000), demand(50, 3000)];
        let g = plan(&d, 150 + 2000, false);
        assert!(
            g.iter()
                .all(|g| g.navigation && (g.share - 0.5).abs() < 1e-9),
            "{g:?}"
        );
        // Navigation does not fit: none of it, and the nodes get all there is.
        let g = plan(&d, 100, false);
        assert!(
            g.iter()
                .all(|g| !g.navigation && (g.share - 0.025).abs() < 1e-9),
            "{g:?}"
        );
        // More than everything: every node.
        assert!(plan(&d, u64::MAX / 4, false).iter().all(|g| g.share == 1.0));
    }

    #[test]
    fn small_segments_are_held_whole_within_half_the_collections_node_cache() {
        // Eight loaded segments of 1.4M nodes and three new ones of 20,000 at 7.4%.
        let mut bytes = vec![1_400_000u64; 8];
        bytes.extend([20_000, 20_000, 40_000]);
        let shares = segment_shares(&bytes, 0.074);
        assert_eq!(&shares[8..], &[1.0, 1.0, 1.0]);
        let held: f64 = bytes.iter().zip(&shares).map(|(&b, s)| b as f64 * s).sum();
        let total: u64 = bytes.iter().sum();
        assert!((held - total as f64 * 0.074).abs() < 1.0, "{held}");
        assert!(
            shares[..8].iter().all(|&s| s < 0.074 && s > 0.037),
            "{shares:?}"
        );
        // Past half the cache, the next smallest keeps the shared prefix.
        let many = [vec![1_000_000u64; 2], vec![20_000; 10]].concat();
        let shares = segment_shares(&many, 0.1);
        let whole = shares.iter().filter(|&&s| s == 1.0).count();
        assert_eq!(whole, 5, "{shares:?}"); // 5 x 20,000 <= 104,000 < 6 x 20,000
        assert!(
            shares
                .iter()
                .all(|&s| s == 1.0 || (s - 120.0 / 2100.0).abs() < 1e-9),
            "{shares:?}"
        );
        // Segments of one size, no cache, every node: the same share for all.
        assert_eq!(segment_shares(&[500, 500], 0.3), vec![0.3, 0.3]);
        assert_eq!(segment_shares(&[500, 20], 0.0), vec![0.0, 0.0]);
        assert_eq!(segment_shares(&[500, 20], 1.0), vec![1.0, 1.0]);
    }

    #[test]
    fn navigation_already_held_is_charged_whatever_the_plan() {
        let mut d = demand(0, 1000);
        d.navigation_held = 300;
        // 400: 300 held, 100 left for the nodes.
        assert!((plan(&[d.clone()], 400, false)[0].share - 0.1).abs() < 1e-9);
        d.own = Some(MemoryBudget::Bytes(350));
        assert!((plan(&[d], 10_000, false)[0].share - 0.05).abs() < 1e-9);
    }

    #[test]
    fn full_codes_give_way_once_they_take_a_quarter_of_what_the_database_could_use() {
        const GIB: u64 = 1 << 30;
        // A 4 GiB cgroup: 4.1M x 768 points' 192-byte codes (0.79 GB) beside 2.5 GB available
        // stay; 6M points' (1.15 GB) beside 2 GB do not.
        assert!(!codes_crowd(4_100_000 * 192, 5 * GIB / 2));
        assert!(codes_crowd(6_000_000 * 192, 2 * GIB));
        // On this 24 GiB machine 10M x 768 keeps its full codes.
        assert!(!codes_crowd(10_000_000 * 192, 20 * GIB));
    }

    #[test]
    fn compact_codes_where_the_full_ones_would_leave_less_than_the_headroom() {
        let mib = 1u64 << 20;
        // 1M x 768 in a 146 MiB cgroup: 240 MiB to open with full codes, 137 less compact.
        assert!(wants_compact(240 * mib, 137 * mib, 115 * mib));
        assert!(!wants_compact(240 * mib, 137 * mib, 2048 * mib));
        // Nothing to spare (no compact files): full codes whatever the memory.
        assert!(!wants_compact(240 * mib, 0, 115 * mib));
        let d = [demand(0, 1000)];
        assert!(plan(&d, 500, true)[0].compact_codes);
        assert!(!plan(&d, 500, false)[0].compact_codes);
    }

    #[test]
    fn an_automatic_budget_gives_the_builds_what_they_reserve_beyond_the_rest() {
        let gib = 1u64 << 30;
        assert_eq!(auto_budget(10 * gib, 0), (7.5 * gib as f64) as u64);
        // A build within what the share leaves (minus the headroom) takes nothing from it.
        assert_eq!(auto_budget(10 * gib, gib), (7.5 * gib as f64) as u64);
        // A larger one does: 10 - 4 - 1 GiB of headroom.
        assert_eq!(auto_budget(10 * gib, 4 * gib), 5 * gib);
        assert_eq!(auto_budget(10 * gib, 20 * gib), 0);
        // A small one keeps at least 128 MiB free.
        assert_eq!(auto_budget(256 << 20, 0), 128 << 20);
        // While searches run, builds take it down to a quarter, no further.
        assert_eq!(
            auto_budget_kept(10 * gib, 20 * gib, true),
            (10 * gib / 4, 10 * gib / 4)
        );
        assert_eq!(auto_budget_kept(10 * gib, 20 * gib, false), (0, 0));
        assert_eq!(
            auto_budget_kept(10 * gib, 0, true).0,
            (7.5 * gib as f64) as u64
        );
    }

    #[test]
    fn own_settings_and_all_in_dram_come_off_the_top() {
        let mut own = demand(100, 1000);
        own.own = Some(MemoryBudget::ShareOfRaw(0.6)); // 300 bytes: navigation and 200
        let mut all = demand(0, 500);
        all.all_in_dram = true;
        let shared = demand(0, 1000);
        let g = plan(&[own, all, shared], 1300, false);
        assert_eq!(
            g[0],
            Grant {
                share: 0.2,
                navigation: true,
                compact_codes: false,
            }
        );
        assert_eq!(
            g[1],
            Grant {
                share: 1.0,
                navigation: true,
                compact_codes: false,
            }
        );
        // 1300 - 300 - 500 = 500 for the shared one's 1000.
        assert!((g[2].share - 0.5).abs() < 1e-9, "{g:?}");
        let mut small = demand(100, 1000);
        small.own = Some(MemoryBudget::Bytes(50));
        assert_eq!(
            plan(&[small], 0, false)[0],
            Grant {
                share: 0.05,
                navigation: false,
                compact_codes: false,
            }
        );
    }
}
