//! The memory the database's background builds (seals, vacuums, merges) may use together.
//!
//! One ledger per database: a build reserves what its plan needs before it starts and gives
//! it back when it ends, so builds of several collections running at once share the
//! database's budget instead of each taking its own. A build that finds too little left
//! plans in more shards with what there is; one that cannot work even in that waits for a
//! running build to end.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use diskvec_index::diskann::{
    available_memory, mib, BuildPlan, BuildShape, MemoryBudget, AUTO_SHARE,
};

use crate::{DbError, Result};

/// How often a waiting build checks whether its collection is closing.
const WAIT_STEP: Duration = Duration::from_millis(200);
/// How long a build waits for an automatic budget too small for it to grow.
const AUTO_PATIENCE: Duration = Duration::from_secs(30);

pub(crate) struct BuildMemory {
    /// The database's budget: bytes, or `Auto` (a share of what is available).
    limit: MemoryBudget,
    /// The search memory, whose automatic caches give the builds what they reserve (an
    /// automatic build budget counts what they hold as available).
    search: Option<std::sync::Arc<crate::search_memory::SearchMemory>>,
    ledger: Mutex<Ledger>,
    freed: Condvar,
}

#[derive(Default)]
struct Ledger {
    /// The budget in bytes, resolved when the first of the running builds started (an
    /// `Auto` budget follows the machine between builds, not during one).
    total: u64,
    in_use: u64,
    running: usize,
}

/// Memory reserved by one build; given back when dropped (on error paths too).
pub(crate) struct BuildGrant<'a> {
    ledger: &'a BuildMemory,
    bytes: u64,
    pub plan: BuildPlan,
}

impl Drop for BuildGrant<'_> {
    fn drop(&mut self) {
        let mut l = self.ledger.lock();
        l.in_use -= self.bytes;
        l.running -= 1;
        if let Some(search) = &self.ledger.search {
            search.note_build_reserved(l.in_use);
        }
        drop(l);
        self.ledger.freed.notify_all();
    }
}

/// An automatic budget stretches past its share of the memory available up to this share
/// of it, rather than refuse a build whose smallest plan fits there: a merge refused leaves
/// the collection in many segments for good, and the page cache the share keeps free is
/// only what the build then runs without (measured: a 1 GiB cgroup holding a 1M x 768
/// collection had 156 MiB available; its share, 78, refused the final merge's 84).
const AUTO_STRETCH: f64 = 0.8;

/// The budget an automatic one stretches to for a build whose smallest plan is `smallest`
/// bytes, with `available` bytes available; `None` when even that does not fit.
fn stretched(smallest: u64, available: u64) -> Option<u64> {
    (smallest as f64 <= available as f64 * AUTO_STRETCH).then_some(smallest)
}

impl BuildMemory {
    pub fn new(
        limit: MemoryBudget,
        search: Option<std::sync::Arc<crate::search_memory::SearchMemory>>,
    ) -> Self {
        Self {
            limit,
            search,
            ledger: Mutex::new(Ledger::default()),
            freed: Condvar::new(),
        }
    }

    pub fn limit(&self) -> MemoryBudget {
        self.limit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resolve(&self) -> u64 {
        match self.limit {
            MemoryBudget::Bytes(b) => b,
            // A database-wide share of the raw vectors has nothing to be a share of; the
            // settings refuse it, and this keeps the ledger whole if one slips through.
            MemoryBudget::Auto | MemoryBudget::ShareOfRaw(_) => {
                (self.available() as f64 * AUTO_SHARE) as u64
            }
        }
    }

    /// The memory available to builds: the machine's, and what automatic caches hold (they
    /// give it back when a build reserves it). A merge leaves the write buffers' room
    /// (`leave`), a seal does not: it frees them.
    fn available(&self) -> u64 {
        available_memory() + self.search.as_ref().map_or(0, |s| s.yields())
    }

    /// Reserves memory for a build of `shape` within `collection_budget` (the collection's
    /// `build_memory`, `None`: the database's) and what the database's budget leaves beside
    /// the builds running. Refuses at once a build that could not run even alone; waits
    /// while others hold too much, until `closing` says to give up. `leave`: bytes to keep
    /// free for a build that may start beside this one (up to half the budget), unless
    /// keeping them would leave this build less than its smallest plan.
    pub fn reserve(
        &self,
        shape: &BuildShape,
        collection_budget: Option<MemoryBudget>,
        leave: u64,
        closing: &dyn Fn() -> bool,
    ) -> Result<BuildGrant<'_>> {
        let raw = shape.raw_bytes();
        let smallest = shape.smallest_budget()?;
        let mut ledger = self.lock();
        let started = std::time::Instant::now();
        loop {
            if ledger.running == 0 {
                ledger.total = self.resolve();
                if self.limit == MemoryBudget::Auto && ledger.total < smallest {
                    ledger.total = stretched(smallest, self.available()).unwrap_or(ledger.total);
                }
            }
            let cap = collection_budget.map_or(ledger.total, |b| b.resolve(raw).min(ledger.total));
            if cap < smallest {
                // The collection's own budget never grows; the database's may free up.
                let collection_binds = collection_budget.filter(|b| b.resolve(raw) < ledger.total);
                // An automatic budget follows the memory available, which a burst of writes
                // or page cache being reclaimed moves within seconds: it gets a while to
                // come up before the build is refused.
                let auto_may_grow = self.limit == MemoryBudget::Auto
                    && collection_binds.is_none()
                    && started.elapsed() < AUTO_PATIENCE
                    && !closing();
                if (ledger.running == 0 || collection_binds.is_some()) && !auto_may_grow {
                    let whose = match collection_binds {
                        Some(b) => format!("the collection's build_memory ({b})"),
                        None => format!("the database's build memory ({})", self.limit),
                    };
                    return Err(DbError::InvalidInput(format!(
                        "{whose} allows {} for a build of {} points of {} dimensions, which \
                         needs at least {}",
                        mib(cap),
                        shape.n,
                        shape.dim,
                        mib(smallest)
                    )));
                }
            }
            let free = ledger.total.saturating_sub(ledger.in_use);
            let kept = leave.min(ledger.total / 2);
            let budget = cap
                .min(free.saturating_sub(kept))
                .max(smallest.min(cap.min(free)));
            if budget >= smallest {
                let plan = shape.plan(budget)?;
                let bytes = plan.estimated_peak.min(budget);
                ledger.in_use += bytes;
                ledger.running += 1;
                let shrink = self
                    .search
                    .as_ref()
                    .is_some_and(|s| s.note_build_reserved(ledger.in_use));
                drop(ledger);
                // The caches make room before the build starts to fill it.
                if shrink {
                    if let Some(search) = &self.search {
                        search.rebalance();
                    }
                }
                return Ok(BuildGrant {
                    ledger: self,
                    bytes,
                    plan,
                });
            }
            if closing() {
                return Err(DbError::Unavailable(
                    "closing while the build waited for memory".into(),
                ));
            }
            ledger = self
                .freed
                .wait_timeout(ledger, WAIT_STEP)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Bytes reserved by running builds, and the budget they share (0 before any build).
    pub fn usage(&self) -> (u64, u64) {
        let l = self.lock();
        (l.in_use, l.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn shape(n: usize) -> BuildShape {
        BuildShape {
            n,
            dim: 128,
            max_degree: 32,
            pq_bytes: 32,
            threads: 2,
            inner_product: false,
            quantized_graph: true,
            graph_builder: Default::default(),
        }
    }

    #[test]
    fn builds_share_the_budget_and_a_second_one_shards_or_waits() {
        let big = shape(400_000);
        let smallest = big.smallest_budget().unwrap();
        let in_memory = big.plan(u64::MAX / 4).unwrap().in_memory_bytes;
        let total = in_memory + smallest / 2;
        let ledger = Arc::new(BuildMemory::new(MemoryBudget::Bytes(total), None));
        let first = ledger.reserve(&big, None, 0, &|| false).unwrap();
        assert_eq!(first.plan.shards, 1, "the first build fits in memory");
        assert_eq!(ledger.usage(), (in_memory, total));
        // What is left is below the smallest budget: the second waits for the first.
        let waiter = {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let g = ledger.reserve(&big, None, 0, &|| false).unwrap();
                (g.plan.shards, g.plan.estimated_peak)
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(!waiter.is_finished(), "the second build must wait");
        drop(first);
        let (shards, peak) = waiter.join().unwrap();
        assert_eq!(shards, 1);
        assert!(peak <= total);
        assert_eq!(ledger.usage().0, 0, "every grant was given back");

        // With room for the smallest plan beside the first, the second runs in shards.
        let ledger = BuildMemory::new(MemoryBudget::Bytes(in_memory + 2 * smallest), None);
        let _first = ledger.reserve(&big, None, 0, &|| false).unwrap();
        let second = ledger.reserve(&big, None, 0, &|| false).unwrap();
        assert!(second.plan.shards > 1, "{:?}", second.plan);
        let (used, total) = ledger.usage();
        assert!(used <= total, "{used} > {total}");
    }

    #[test]
    fn an_automatic_budget_stretches_to_a_smallest_plan_that_fits_what_is_available() {
        let mib = |m: u64| m << 20;
        // The 1M x 768 merge in a 1 GiB cgroup: 156 MiB available, half of it 78.
        assert_eq!(stretched(mib(84), mib(156)), Some(mib(84)));
        assert_eq!(stretched(mib(125), mib(156)), None);
        assert_eq!(stretched(mib(84), mib(100)), None);
    }

    #[test]
    fn a_budget_too_small_for_one_build_is_refused_not_waited_on() {
        let big = shape(400_000);
        let smallest = big.smallest_budget().unwrap();
        let ledger = BuildMemory::new(MemoryBudget::Bytes(smallest / 2), None);
        let err = ledger
            .reserve(&big, None, 0, &|| false)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("database's build memory"), "{err}");
        let ledger = BuildMemory::new(MemoryBudget::Bytes(8 * smallest), None);
        let err = ledger
            .reserve(&big, Some(MemoryBudget::Bytes(smallest / 2)), 0, &|| false)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("collection's build_memory"), "{err}");
        // A collection budget above the database's is capped by it.
        let g = ledger
            .reserve(&big, Some(MemoryBudget::Bytes(64 * smallest)), 0, &|| false)
            .unwrap();
        assert!(g.plan.budget <= 8 * smallest);
    }

    #[test]
    fn a_waiting_build_gives_up_when_its_collection_closes() {
        let big = shape(400_000);
        let smallest = big.smallest_budget().unwrap();
        let ledger = BuildMemory::new(MemoryBudget::Bytes(smallest + smallest / 2), None);
        let _first = ledger.reserve(&big, None, 0, &|| false).unwrap();
        let err = ledger.reserve(&big, None, 0, &|| true).err().unwrap();
        assert!(matches!(err, DbError::Unavailable(_)), "{err}");
    }

    #[test]
    fn a_build_that_leaves_room_keeps_it_free_unless_it_could_not_run() {
        let big = shape(400_000);
        let smallest = big.smallest_budget().unwrap();
        let in_memory = big.plan(u64::MAX / 4).unwrap().in_memory_bytes;
        let total = 2 * in_memory;
        let ledger = BuildMemory::new(MemoryBudget::Bytes(total), None);
        let leave = in_memory / 2;
        let merge = ledger.reserve(&big, None, leave, &|| false).unwrap();
        assert!(merge.plan.budget <= total - leave, "{:?}", merge.plan);
        assert!(ledger.usage().0 <= total - leave);
        drop(merge);
        // Room is kept only while the build still gets its smallest plan.
        let ledger = BuildMemory::new(MemoryBudget::Bytes(smallest + smallest / 4), None);
        let merge = ledger.reserve(&big, None, smallest, &|| false).unwrap();
        assert!(merge.plan.budget >= smallest, "{:?}", merge.plan);
    }
}
