//! Creating a collection, and opening one: read the manifest, open its sealed segments,
//! rebuild the id tracker from them, replay the log past the checkpoint.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::state::{Loc, State};
use super::tracker::Tracker;
use super::{indexer, optimize, worker, Collection, Inner};
use crate::build_memory::BuildMemory;
use crate::config::{CollectionConfig, Durability};
use crate::filter::PayloadIndexKind;
use crate::manifest::Manifest;
use crate::ops::Operation;
use crate::search_memory::{Demand, Grant, SearchMemory};
use crate::segment::Points;
use crate::segment::{read_deleted, Sealed, Segment};
use crate::storage::Storage;
use crate::wal::{SyncMode, Wal, WalOptions};
use crate::{DbError, PointId, Result};

/// What opening a collection found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryReport {
    pub sealed_segments: usize,
    pub sealed_points: usize,
    /// Log records replayed past the manifest's checkpoint.
    pub replayed_ops: u64,
    pub checkpoint_op: u64,
    pub last_op: u64,
    /// A torn record cut from the log's end (a crash mid-write: it was never acknowledged).
    pub torn_tail: Option<String>,
    /// Segment directories left by a seal that crashed before its manifest switch.
    pub removed_segments: Vec<String>,
    pub seconds: f64,
}

impl Collection {
    /// Creates a collection in `dir` (which must not hold one): its manifest is written
    /// durably before this returns.
    pub(crate) fn create(
        name: &str,
        dir: &Path,
        config: CollectionConfig,
        storage: Arc<dyn Storage>,
        builds: Arc<BuildMemory>,
        search: Arc<SearchMemory>,
    ) -> Result<Self> {
        config.check()?;
        crate::storage::create_dir_all_durable(storage.as_ref(), dir)
            .map_err(crate::error::file_error(dir))?;
        Manifest::new(config).write(storage.as_ref(), dir)?;
        // Nothing sealed yet: the first rebalance after its first seal plans it.
        let grant = Grant {
            share: 0.0,
            navigation: true,
            compact_codes: search.compact_codes(),
        };
        Self::open(name, dir, storage, builds, search, grant)
    }

    /// Opens the collection in `dir`; its background builds share `builds` with the
    /// database's other collections, its searches `search`, of which the database planned
    /// `grant` for it (from its files, before any was opened).
    pub(crate) fn open(
        name: &str,
        dir: &Path,
        storage: Arc<dyn Storage>,
        builds: Arc<BuildMemory>,
        search: Arc<SearchMemory>,
        grant: Grant,
    ) -> Result<Self> {
        let started = Instant::now();
        let manifest = Manifest::read(storage.as_ref(), dir)?;
        let config = manifest.config.clone();
        let mut report = RecoveryReport {
            checkpoint_op: manifest.checkpoint_op,
            ..Default::default()
        };
        let fields = manifest
            .payload_indexes
            .iter()
            .map(|(f, k)| {
                let params = manifest.payload_index_params.get(f);
                Ok((f.clone(), PayloadIndexKind::from_schema(k, params)?))
            })
            .collect::<Result<Vec<(String, PayloadIndexKind)>>>()?;
        let segments_dir = dir.join("segments");
        report.removed_segments =
            remove_unlisted(storage.as_ref(), &segments_dir, &manifest, &config, name);
        remove_staged_leftovers(storage.as_ref(), dir);
        for entry in &manifest.segments {
            remove_staged_leftovers(
                storage.as_ref(),
                &segments_dir.join(format!("{:016x}", entry.id)),
            );
        }
        let mut segments = BTreeMap::new();
        let mut written = HashMap::new();
        for entry in &manifest.segments {
            let seg_dir = segments_dir.join(format!("{:016x}", entry.id));
            let deleted = match &entry.deleted_file {
                Some(f) => read_deleted(&seg_dir.join(f))?,
                None => roaring::RoaringBitmap::new(),
            };
            let sealed = Sealed::open(
                &storage,
                &seg_dir,
                &config,
                deleted,
                &fields,
                super::node_cache_size(&config, grant),
                crate::segment::SearchDram {
                    navigation: config.navigation && grant.navigation,
                    compact_codes: grant.compact_codes,
                },
            )?;
            if sealed.len() != entry.points as usize {
                return Err(DbError::Corrupt {
                    path: seg_dir,
                    message: format!(
                        "segment holds {} points, the manifest says {}",
                        sealed.len(),
                        entry.points
                    ),
                });
            }
            report.sealed_points += sealed.len();
            written.insert(entry.id, 0);
            segments.insert(entry.id, Segment::Sealed(Arc::new(sealed)));
        }
        report.sealed_segments = segments.len();
        let config = Arc::new(config);
        let mut state = State {
            config: Arc::clone(&config),
            segments,
            active: 0,
            frozen: VecDeque::new(),
            next_segment_id: manifest.next_segment_id,
            tracker: Default::default(),
            fields,
            indexing_paused: false,
        };
        track_sealed(&mut state);
        state.start_active();
        let wal_dir = wal_dir(dir, &config, name);
        let options = WalOptions {
            sync: match config.durability {
                Durability::Sync => SyncMode::Always,
                Durability::Interval { interval_ms } => {
                    SyncMode::Interval(Duration::from_millis(interval_ms))
                }
            },
            segment_bytes: crate::wal_file_bytes(),
            ..WalOptions::default()
        };
        let mut replayed = 0u64;
        let (wal, recovered) = Wal::open(
            Arc::clone(&storage),
            &wal_dir,
            options,
            manifest.checkpoint_op + 1,
            &mut |op, body| {
                let operation = Operation::decode(body).map_err(|e| format!("op {op}: {e}"))?;
                state.apply(op, operation);
                replayed += 1;
                Ok(())
            },
        )?;
        if recovered.last_op < manifest.checkpoint_op {
            return Err(DbError::Corrupt {
                path: wal_dir,
                message: format!(
                    "the log ends at op {}, before the manifest's checkpoint {}: log files are missing",
                    recovered.last_op, manifest.checkpoint_op
                ),
            });
        }
        report.replayed_ops = replayed;
        report.last_op = recovered.last_op;
        report.torn_tail = recovered.torn_tail.as_ref().map(|t| {
            format!(
                "{}: {} bytes cut at offset {}",
                t.file.display(),
                t.bytes_cut,
                t.offset
            )
        });
        report.seconds = started.elapsed().as_secs_f64();
        log::info!(
            "collection {name:?}: {} sealed segments ({} points), replayed {} log records from op {}{}",
            report.sealed_segments,
            report.sealed_points,
            report.replayed_ops,
            manifest.checkpoint_op + 1,
            report
                .torn_tail
                .as_ref()
                .map(|t| format!("; torn tail: {t}"))
                .unwrap_or_default()
        );
        let retired_io = super::storage_io::zero_io(&config, dir);
        let config_seal_bytes = super::write::segment_footprint(&config);
        let inner = Arc::new(Inner {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            config: RwLock::new(config),
            storage,
            wal,
            writer: Mutex::new(()),
            state: RwLock::new(state),
            manifest: Mutex::new(manifest),
            background: Mutex::new(optimize::Background::default()),
            written: Mutex::new(written),
            wake: Condvar::new(),
            index_pending: Mutex::new(true),
            index_wake: Condvar::new(),
            recovered: report,
            home: super::identity(dir),
            retired_io: Mutex::new(retired_io),
            task: Default::default(),
            last_write: Mutex::new(std::time::Instant::now()),
            builds,
            search: Arc::clone(&search),
            search_grant: Mutex::new(grant),
            optimize_waiters: Default::default(),
            search_load: Default::default(),
            codebooks: Default::default(),
            pacer: Mutex::new(super::pacer::Pacer::new()),
            frozen_limit: super::write::frozen_limit(
                config_seal_bytes,
                diskvec_index::diskann::available_memory(),
            ),
            rates: Default::default(),
        });
        search.join(&inner);
        let spawn = |what: &str, work: fn(Arc<Inner>)| {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name(format!("{what}-{name}"))
                .spawn(move || work(inner))
                .map_err(|e| DbError::Unavailable(format!("cannot start the {what} thread: {e}")))
        };
        let workers = vec![
            spawn("seal", worker::run_seals)?,
            spawn("merge", worker::run_merges)?,
            spawn("index", indexer::run)?,
        ];
        Ok(Self {
            inner,
            workers: Mutex::new(workers),
        })
    }
}

pub(crate) fn wal_dir(dir: &Path, config: &CollectionConfig, name: &str) -> PathBuf {
    match &config.wal_path {
        Some(p) => p.join(name),
        None => dir.join("wal"),
    }
}

/// Points of the sealed segments into the tracker. A point live in two segments (its new
/// version's delete of the old one was not in a persisted bitmap yet) keeps the newer;
/// the replay re-deletes the older anyway.
///
/// Each segment's live offsets are put in id order (4 bytes a point) and the segments
/// merged, so the tracker is built in one pass, with no map of every point beside it.
fn track_sealed(state: &mut State) {
    let runs: Vec<(u64, &Sealed, Vec<u32>)> = state
        .segments
        .iter()
        .filter_map(|(&segment, s)| {
            let Segment::Sealed(s) = s else { return None };
            let deleted = s.deleted.read().unwrap_or_else(|e| e.into_inner());
            let mut order: Vec<u32> = (0..s.len() as u32)
                .filter(|&o| !deleted.contains(o))
                .collect();
            drop(deleted);
            order.sort_unstable_by_key(|&o| s.id(o));
            Some((segment, s.as_ref(), order))
        })
        .collect();
    let mut heads: BinaryHeap<Reverse<(PointId, usize, usize)>> = runs
        .iter()
        .enumerate()
        .filter(|(_, run)| !run.2.is_empty())
        .map(|(r, run)| Reverse((run.1.id(run.2[0]), r, 0)))
        .collect();
    let mut stale = Vec::new();
    let mut pending: Option<(PointId, Loc)> = None;
    let merged = std::iter::from_fn(|| loop {
        let Some(Reverse((id, r, pos))) = heads.pop() else {
            return pending.take();
        };
        let (segment, s, order) = &runs[r];
        if let Some(&next) = order.get(pos + 1) {
            heads.push(Reverse((s.id(next), r, pos + 1)));
        }
        let offset = order[pos];
        let loc = Loc {
            segment: *segment,
            offset,
            version: s.versions[offset as usize],
        };
        match pending {
            Some((held, old)) if held == id => {
                if old.version >= loc.version {
                    stale.push(loc);
                } else {
                    stale.push(old);
                    pending = Some((id, loc));
                }
            }
            _ => {
                if let Some(done) = pending.replace((id, loc)) {
                    return Some(done);
                }
            }
        }
    });
    let expected = runs.iter().map(|run| run.2.len()).sum();
    let tracker = Tracker::from_sorted(merged, expected, 0);
    drop(runs);
    state.tracker = tracker;
    for loc in stale {
        if let Some(Segment::Sealed(s)) = state.segments.get(&loc.segment) {
            s.delete(loc.offset);
        }
    }
}

/// Removes the temporary files of atomic replacements a crash interrupted
/// (`.<name>.<pid>.<n>.tmp`, never renamed over anything later) from `dir`.
fn remove_staged_leftovers(storage: &dyn Storage, dir: &Path) {
    let Ok(names) = storage.list(dir) else {
        return;
    };
    for name in names {
        if name.starts_with('.') && name.ends_with(".tmp") {
            let path = dir.join(&name);
            match storage.remove_file(&path) {
                Ok(()) => log::info!("removed {}, left by an interrupted write", path.display()),
                Err(e) => log::warn!("could not remove {}: {e}", path.display()),
            }
        }
    }
}

/// Removes segment directories (and their node directories on the storage paths) that the
/// manifest does not list: a seal that crashed before its switch. Returns their names.
fn remove_unlisted(
    storage: &dyn Storage,
    segments_dir: &Path,
    manifest: &Manifest,
    config: &CollectionConfig,
    name: &str,
) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(segments_dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let file_name = e.file_name().to_string_lossy().to_string();
        let listed = u64::from_str_radix(&file_name, 16)
            .map(|id| manifest.segments.iter().any(|s| s.id == id))
            .unwrap_or(false);
        if listed {
            continue;
        }
        let _ = storage.remove_dir_all(&e.path());
        for p in &config.paths {
            let on_path = p.join(name).join(&file_name);
            if on_path.exists() {
                let _ = storage.remove_dir_all(&on_path);
            }
        }
        log::warn!("collection {name:?}: removed segment {file_name}, left by an interrupted seal");
        removed.push(file_name);
    }
    removed
}

/// What the collection in `dir` asks of the search memory, from its files alone (before any
/// segment is opened, so that navigation data the budget cannot hold is never loaded).
pub(crate) fn search_demand(storage: &dyn Storage, dir: &Path) -> Result<Demand> {
    let manifest = Manifest::read(storage, dir)?;
    let config = &manifest.config;
    let points: u64 = manifest.segments.iter().map(|s| s.points as u64).sum();
    // Every point counted in every dense space: an upper bound when some lack a vector.
    let record: usize = config
        .dense
        .iter()
        .map(|s| {
            diskvec_index::diskann::NodeLayout::new(s.dim, config.max_degree, s.datatype).node_bytes
        })
        .sum();
    let segment_dirs: Vec<PathBuf> = manifest
        .segments
        .iter()
        .map(|s| dir.join("segments").join(format!("{:016x}", s.id)))
        .collect();
    let navigation = if config.navigation {
        segment_dirs.iter().map(|d| navigation_file_bytes(d)).sum()
    } else {
        0
    };
    // meta.dvm (PQ codes, ids) as it is, the points file at three times its bytes once
    // parsed (ids, versions and payload maps: at 1M points of empty payloads about 100 MB
    // against a 35 MB file; at twice, a search process in a 586 MiB cgroup was OOM-killed
    // opening a 1M x 768 segment).
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let index_dirs: Vec<PathBuf> = segment_dirs.iter().flat_map(|d| index_dirs(d)).collect();
    let compact_saving = index_dirs
        .iter()
        .map(|d| diskvec_index::diskann::compact_saving(d))
        .sum();
    let fixed = index_dirs
        .iter()
        .map(|d| size(d.join(diskvec_index::diskann::META_FILE)))
        .sum::<u64>()
        + segment_dirs
            .iter()
            .map(|d| {
                3 * size(d.join(crate::segment::POINTS_FILE))
                    + size(d.join(crate::segment::SPACES_FILE))
            })
            .sum::<u64>();
    Ok(Demand {
        navigation_held: 0,
        navigation,
        nodes: points * record as u64,
        raw: points * config.dense_numbers() as u64 * 4,
        own: config.search_memory,
        all_in_dram: !config.on_disk,
        fixed,
        compact_saving,
    })
}

/// The directories of a sealed segment's dense indexes: its own (space 0) and each
/// `dense.<i>/` in it.
fn index_dirs(segment_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![segment_dir.to_path_buf()];
    dirs.extend(
        std::fs::read_dir(segment_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("dense."))
            .map(|e| e.path()),
    );
    dirs
}

/// Bytes of the navigation files of a sealed segment's indexes (about what loading them
/// takes in DRAM).
pub(crate) fn navigation_file_bytes(segment_dir: &Path) -> u64 {
    index_dirs(segment_dir)
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("nav.") && name.ends_with(".dvr")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}
