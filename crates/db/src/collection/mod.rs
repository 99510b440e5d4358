//! A collection: points with one vector size and metric, their log, segments and indexes.
//!
//! Writes are ordered by one writer lock: each is logged (its op number is the version of
//! every point it writes), applied to memory under the state lock, and then waits for the
//! log to be durable outside both locks, so concurrent writers share one flush. Searches
//! take a snapshot of the segment list and never wait for sealing.

mod facet;
mod indexer;
mod indexes;
mod info;
mod merge_policy;
mod open;
mod optimize;
mod pacer;
mod query;
mod read;
mod rebuild;
mod search_load;
mod segment_share;
mod settings;
pub(crate) mod snapshot;
mod spaces;
mod state;
mod storage_io;
mod superseded;
mod switch;
mod task;
mod tracker;
mod worker;
mod write;

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;

pub use facet::FacetValue;
pub use info::{CollectionInfo, SearchMemoryInfo, SegmentInfo, Status};
pub use open::RecoveryReport;
pub(crate) use open::{navigation_file_bytes, search_demand};
pub use read::{Hit, Record, SearchRequest};
pub use spaces::NewSpace;
pub use storage_io::PathIo;
pub use task::TaskInfo;
pub use write::{UpsertMode, MAX_BATCH, MAX_PAYLOAD_DEPTH};

use crate::config::CollectionConfig;
use crate::manifest::Manifest;
use crate::storage::Storage;
use crate::wal::Wal;
use state::State;

/// Shared by the handle and the background worker.
pub(crate) struct Inner {
    name: String,
    dir: PathBuf,
    /// Replaced whole by `update_settings` (under the manifest lock); readers take a
    /// snapshot, so one operation sees one version of the settings.
    config: RwLock<Arc<CollectionConfig>>,
    storage: Arc<dyn Storage>,
    wal: Wal,
    writer: Mutex<()>,
    state: RwLock<State>,
    /// The manifest as last written; held while writing the next.
    manifest: Mutex<Manifest>,
    background: Mutex<optimize::Background>,
    /// Per sealed segment, its delete count as of the bitmap the manifest lists.
    written: Mutex<std::collections::HashMap<u64, u64>>,
    wake: Condvar,
    /// Set by writes, cleared by the indexer; with `index_wake`.
    index_pending: Mutex<bool>,
    index_wake: Condvar,
    recovered: RecoveryReport,
    /// Device and inode of `dir` when opened (`None` when it is not on the real file
    /// system, as under a test storage); see `check_home`.
    home: Option<(u64, u64)>,
    /// Read counts of sealed segments merged or vacuumed away since open.
    retired_io: Mutex<Vec<storage_io::PathIo>>,
    /// The seal, and the vacuum or merge beside it, being built, for `info()`.
    task: task::TaskProgress,
    /// When the last write was applied (the idle merge waits for quiet).
    last_write: Mutex<std::time::Instant>,
    /// The database's build memory, shared with its other collections.
    builds: Arc<crate::build_memory::BuildMemory>,
    /// Frozen segments that may wait for sealing before writers are held back
    /// (`write::frozen_limit`, from the memory available at open).
    frozen_limit: usize,
    /// Paces upserts while frozen segments queue (`pacer.rs`).
    pacer: Mutex<pacer::Pacer>,
    /// Callers waiting in `optimize(wait=true)`: builds started meanwhile run at the
    /// default priority.
    optimize_waiters: std::sync::atomic::AtomicUsize,
    /// The database's search memory, shared with its other collections.
    search: Arc<crate::search_memory::SearchMemory>,
    /// What the search memory gives this collection, as its last plan (at open, or the
    /// last rebalance) set it: a segment opened between two rebalances (a seal's, a
    /// merge's) opens with it.
    search_grant: Mutex<crate::search_memory::Grant>,
    /// The PQ codebook seals encode with (the last merge's, or the first seal's since
    /// open): the PQ phase, most of it training, was a third of a small build.
    codebooks: Mutex<Vec<Option<Arc<diskvec_index::diskann::Codebook>>>>,
    /// Strict mode's read and write rates.
    rates: Mutex<crate::strict::Rates>,
    /// What the searches spent lately in growing segments: whether rows not linked yet cost
    /// them more than linking or sealing them would (`search_load.rs`).
    search_load: search_load::SearchLoad,
}

impl Inner {
    pub(crate) fn config(&self) -> Arc<CollectionConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes `dir` and its parents, durably (through the collection's storage).
    pub(crate) fn make_dir(&self, dir: &std::path::Path) -> crate::Result<()> {
        crate::storage::create_dir_all_durable(self.storage.as_ref(), dir)
            .map_err(crate::error::file_error(dir))
    }

    /// Removes `dir` and what it holds, if it is there, and makes the removal durable (a
    /// crash must not bring back a build's checkpoint, which no open removes); a leftover
    /// only wastes space.
    pub(crate) fn remove_dir(&self, dir: &std::path::Path) {
        let _ = crate::storage::remove_dir_all_durable(self.storage.as_ref(), dir);
    }

    /// True once the collection is closing (its background work stopping).
    pub(crate) fn is_closing(&self) -> bool {
        lock(&self.background).stop
    }

    /// The sealed segments open now.
    pub(crate) fn sealed_segments(&self) -> Vec<Arc<crate::segment::Sealed>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .segments
            .values()
            .filter_map(|s| match s {
                crate::segment::Segment::Sealed(s) => Some(Arc::clone(s)),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn set_search_grant(&self, grant: crate::search_memory::Grant) {
        *lock(&self.search_grant) = grant;
    }

    /// Whether this collection was searched within `search_memory::SEARCHED_LATELY`: the
    /// search memory then keeps its floor whatever the builds reserve.
    pub(crate) fn searched_lately(&self) -> bool {
        self.search_load
            .searched_within(crate::search_memory::SEARCHED_LATELY)
    }

    pub(crate) fn search_grant(&self) -> crate::search_memory::Grant {
        *lock(&self.search_grant)
    }

    /// How a sealed segment of this collection opens its node cache now.
    pub(crate) fn node_cache(&self) -> crate::segment::NodeCacheSize {
        node_cache_size(&self.config(), self.search_grant())
    }

    /// What a sealed segment of this collection loads now beside its node cache: its
    /// navigation data where the setting asks for it and the search memory holds it, and
    /// its compact codes where the process's memory cannot hold the full ones.
    pub(crate) fn search_dram(&self) -> crate::segment::SearchDram {
        let grant = self.search_grant();
        crate::segment::SearchDram {
            navigation: self.config().navigation && grant.navigation,
            compact_codes: grant.compact_codes,
        }
    }
}

/// How a sealed segment opens its node cache under `grant`.
pub(crate) fn node_cache_size(
    config: &CollectionConfig,
    grant: crate::search_memory::Grant,
) -> crate::segment::NodeCacheSize {
    if config.on_disk {
        crate::segment::NodeCacheSize::Share(grant.share)
    } else {
        crate::segment::NodeCacheSize::All
    }
}

/// Device and inode of a directory.
pub(crate) fn identity(dir: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

impl Inner {
    /// Builds `input` as a sealed segment in `dir` (nodes on `paths`) within the memory it
    /// reserves first (waiting while other builds hold the database's build memory); the
    /// plan goes to `info()` under `lane`. A build stops with `IndexError::Cancelled` once
    /// what it `gives_way` to is due (superseded.rs).
    /// A seal encodes with the collection's codebook when there is one; a merge or vacuum
    /// trains its own on a sample of all its points, which the seals then take up.
    pub(crate) fn build_segment(
        &self,
        input: &crate::segment::SealInput,
        dir: &std::path::Path,
        paths: &[PathBuf],
        lane: task::Lane,
        kind: &str,
        gives_way: superseded::GivesWay,
    ) -> crate::Result<()> {
        crate::delay_point("build");
        let progress = superseded::BuildProgress::new(self, lane, gives_way);
        if lane == task::Lane::Merge {
            crate::delay_point_unless("merge", || {
                diskvec_index::Progress::cancelled(&progress) || lock(&self.background).stop
            });
        }
        if diskvec_index::Progress::cancelled(&progress) {
            return Err(diskvec_index::IndexError::Cancelled.into());
        }
        // The spaces are built one after the other: memory for the largest of them (none
        // when no point has a dense vector: nothing but the spaces file is built).
        let config = self.config();
        let largest = config
            .dense
            .iter()
            .zip(&input.dense)
            .filter(|(space, i)| !i.offsets.is_empty() && !space.removed)
            .max_by_key(|(space, input)| input.offsets.len() * space.dim);
        let grant = match largest {
            None => None,
            Some((space, space_input)) => {
                let shape = config
                    .build_params(space, &[], space_input.offsets.len())
                    .shape(space_input.offsets.len(), space.dim)?;
                // A merge leaves room for a seal beside it (writers may be waiting for that
                // one) and for the writes that may still come. A seal leaves none: it is what
                // frees the write buffer (measured: with the write room taken off every
                // build's automatic budget, a 10M import's seal of 40,000 points was refused
                // "0 MiB" at 8.7M points, and its writers with it). Once writes have stopped
                // a merge leaves no seal's room (measured at 10M: a 2M merge given 109 MB ran
                // in 219 shards for 14.5 min, one given 286-414 MB in 20-30 for 7); writes
                // that resume meanwhile wait for it or build their seal in what is left.
                let leave = match lane {
                    task::Lane::Seal => 0,
                    task::Lane::Merge if self.written_lately() => {
                        self.seal_memory() + self.search.write_room()
                    }
                    task::Lane::Merge => self.search.write_room(),
                };
                let grant = self
                    .builds
                    .reserve(&shape, config.build_memory, leave, &|| {
                        lock(&self.background).stop
                    })?;
                self.task.set_plan(lane, &grant.plan);
                Some(grant)
            }
        };
        let waited_for = self
            .optimize_waiters
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0;
        let seal = kind == "seal";
        let priority = match lane {
            _ if waited_for => crate::background::BuildPriority::WaitedFor,
            // A seal never runs below a merge: while merges are overdue, so are seals.
            task::Lane::Seal
                if seal
                    && (self.writers_held_back()
                        || self.merges_behind()
                        || self.frozen_rows_scanned()) =>
            {
                crate::background::BuildPriority::OverdueSeal
            }
            task::Lane::Seal => crate::background::BuildPriority::Seal,
            task::Lane::Merge if self.merges_behind() => {
                crate::background::BuildPriority::OverdueMerge
            }
            task::Lane::Merge => crate::background::BuildPriority::Merge,
        };
        let given = if seal {
            lock(&self.codebooks).clone()
        } else {
            Vec::new()
        };
        let built = crate::segment::seal(
            &self.storage,
            input,
            dir,
            &config,
            paths,
            crate::segment::SealBuild {
                budget: grant.as_ref().map_or(0, |g| g.plan.budget),
                priority,
                codebooks: given,
                checkpoint: self.checkpoint_dir(lane, kind),
            },
            &progress,
        );
        if let Ok(reports) = &built {
            if let Some(report) = reports.iter().flatten().next() {
                self.task.set_built(lane, report);
            }
            // The next seals encode with the codebooks this build made (or kept): a new one
            // when the rows no longer fitted the old.
            let mut codebooks = lock(&self.codebooks);
            codebooks.resize(reports.len(), None);
            for (kept, report) in codebooks.iter_mut().zip(reports) {
                if let Some(used) = report.as_ref().and_then(|r| r.codebook.as_ref()) {
                    *kept = Some(Arc::clone(used));
                }
            }
        }
        let built = built.map(|_| ());
        match &built {
            // Committed: no shard of it is wanted again (a build in shards removes its own;
            // this also takes those of an interrupted one that this build ran in memory).
            Ok(()) => self.remove_dir(&self.checkpoint_dir(lane, kind)),
            // The caches shrank for this build and no switch will grow them back.
            Err(_) => self.search.rebalance(),
        }
        if is_cancelled(&built) {
            // Nothing of a cancelled build is listed anywhere: its directories go, and its
            // finished shards, which the build that supersedes it would not take up.
            self.remove_dir(&self.checkpoint_dir(lane, kind));
            self.remove_dir(dir);
            for p in paths {
                self.remove_dir(p);
            }
        }
        built
    }

    /// Where builds of `kind` in `lane` keep their finished shard graphs until they commit,
    /// so that one interrupted (the process killed, the build failed) and started again on
    /// the same points resumes after them. Outside `segments/`, whose unlisted directories
    /// an open removes.
    fn checkpoint_dir(&self, lane: task::Lane, kind: &str) -> PathBuf {
        let lane = match lane {
            task::Lane::Seal => "seal",
            task::Lane::Merge => "merge",
        };
        self.dir
            .join(diskvec_index::diskann::CHECKPOINT_DIR)
            .join(format!("{lane}-{kind}"))
    }

    /// What a seal of `seal_threshold` points needs to build in memory (0 when it cannot be
    /// planned): what a merge leaves free of the build memory for the seals beside it.
    fn seal_memory(&self) -> u64 {
        let config = self.config();
        let Some(widest) = config.dense.iter().max_by_key(|s| s.dim) else {
            return 0;
        };
        config
            .build_params(widest, &[], config.seal_threshold)
            .shape(config.seal_threshold, widest.dim)
            .ok()
            .and_then(|shape| shape.plan(u64::MAX / 4).ok())
            .map_or(0, |plan| plan.in_memory_bytes)
    }

    /// Refuses to go on when the collection's directory is no longer the one it opened:
    /// removed, or removed and created again by someone else (e.g. a `rm -rf` and a new
    /// database at the same path while this process still ran). Paths would then lead a
    /// manifest write or a segment removal of ours into the other database.
    pub(crate) fn check_home(&self) -> crate::Result<()> {
        match self.home {
            Some(home) if identity(&self.dir) != Some(home) => {
                Err(crate::DbError::Unavailable(format!(
                    "{} was removed or replaced while collection {:?} was open; \
                     this process no longer writes there",
                    self.dir.display(),
                    self.name
                )))
            }
            _ => Ok(()),
        }
    }
}

/// A collection handle; `Database::collection` hands out shared ones. Dropping the last
/// stops its background worker (a seal in progress finishes first).
pub struct Collection {
    inner: Arc<Inner>,
    /// The background worker (seal, vacuum, merge) and the indexer.
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Collection {
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The settings now (a snapshot: `update_settings` replaces them whole).
    pub fn config(&self) -> Arc<CollectionConfig> {
        self.inner.config()
    }

    /// What opening found and replayed.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.inner.recovered
    }

    /// Stops the background worker, waits for it, and makes every logged write durable.
    pub fn close(&self) -> crate::Result<()> {
        self.inner.stop_background();
        let workers: Vec<_> = lock(&self.workers).drain(..).collect();
        for w in workers {
            let _ = w.join();
        }
        self.inner.wal.flush()?;
        Ok(())
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Whether a background build stopped because it was cancelled (superseded), not failed.
pub(crate) fn is_cancelled<T>(outcome: &crate::Result<T>) -> bool {
    matches!(
        outcome,
        Err(crate::DbError::Index(diskvec_index::IndexError::Cancelled))
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
