use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use diskvec_io::{
    open_for_reading, AlignedBuf, EngineChoice, EngineKind, PathEmulation, PathSnapshot, Volume,
    SECTOR,
};

use super::compact::compact_path;
use super::hot_records::HotRecords;
use super::layout::{first_bad_sector, NodeLayout};
use super::meta::Meta;
use super::nav::{nav_path, NavFile, Navigation, SteppedAside};
use super::node_cache::{CachePlan, NodeCache};
use super::{Header, META_FILE};
use crate::error::file_error;
use crate::{IndexError, Result};

/// How to open an index for search.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub engine: EngineChoice,
    /// Read with O_DIRECT (bypassing the page cache) where the file system allows it.
    pub direct: bool,
    /// Node records kept in DRAM, all told: for a graph search the entry nodes first (every
    /// query starts at the closest of them); short of every record, the rest is left to the
    /// records the searches read again (less the tables that track them); every record is
    /// the whole file. `None`: 1% of the nodes as the file's prefix (breadth-first from the
    /// medoid by construction), plus the entry nodes for a graph search.
    pub cache_nodes: Option<usize>,
    /// Most reads one search thread keeps in flight on one path; more wait in a queue.
    pub queue_depth: usize,
    /// Slower paths to emulate on top of the real ones: none, one for all, or one per path.
    pub emulate: Vec<PathEmulation>,
    /// How long a node read may take before it is given up on (`None`: no limit): a
    /// mirrored index then reads the copy, an unmirrored search fails naming the path.
    pub read_deadline: Option<std::time::Duration>,
    /// Load the navigation file (every neighbour list and a 4-bit code per node) when the
    /// index has one, and walk the graph in DRAM, reading the SSD only to re-rank. An index
    /// whose file is missing (built before it existed) or damaged opens without it and
    /// searches the graph (`navigates_in_dram`, `navigation_problem` tell).
    pub navigation: bool,
    /// Steer the walk by the compact code set (a quarter of the PQ code bytes, `compact.rs`)
    /// instead of the full codes, for a process whose memory cannot hold those. An index
    /// without the file (built before it existed) or with a damaged one opens with its full
    /// codes (`compact_codes`, `compact_problem` tell).
    pub compact_codes: bool,
    /// What open removes an interrupted build's leftovers through (the durable-write path).
    pub storage: std::sync::Arc<dyn diskvec_io::storage::Storage>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            engine: EngineChoice::Auto,
            direct: true,
            cache_nodes: None,
            queue_depth: 64,
            emulate: Vec::new(),
            read_deadline: Some(diskvec_io::DEFAULT_READ_DEADLINE),
            navigation: false,
            compact_codes: false,
            storage: std::sync::Arc::new(diskvec_io::storage::FsStorage),
        }
    }
}

/// An opened DISKANN index: header, DRAM-resident meta, node cache, the volume holding the
/// nodes (one or several paths), and a pool of read engines (one per searching thread).
pub struct DiskIndex {
    pub(crate) header: Header,
    pub(crate) layout: NodeLayout,
    pub(crate) meta: Meta,
    pub(crate) volume: Volume,
    /// The node records in DRAM, swapped whole by `resize_node_cache`; a search keeps the
    /// one it started with.
    cache: RwLock<Arc<NodeCache>>,
    /// One resize at a time (each reads the records it adds from the SSD).
    resizing: Mutex<()>,
    pub(crate) engine_choice: EngineChoice,
    pub(crate) queue_depth: usize,
    pub(crate) engines: Mutex<Vec<Box<dyn diskvec_io::ReadEngine>>>,
    pub(crate) node_by_id: super::fetch::NodeById,
    /// Every node's external id is its number (a database's sealed segment): `meta.ids`
    /// is dropped at open, 8 bytes a node.
    pub(crate) ids_are_nodes: bool,
    /// Queries running on the index now (a lone one widens its beam: `LONE_BEAM_FACTOR`).
    pub(crate) queries_running: Arc<std::sync::atomic::AtomicUsize>,
    pub(crate) buffers: super::query_buffers::BufferPool,
    /// Loaded when opened with `OpenOptions::navigation`.
    pub(crate) nav: Option<Navigation>,
    /// Why navigation was asked for and is not used (no file, or a damaged one).
    pub(crate) nav_problem: Option<String>,
    /// The build left navigation off, and why.
    pub(crate) nav_off: Option<SteppedAside>,
    /// The walk is steered by the compact code set (`OpenOptions::compact_codes`).
    pub(crate) compact_codes: bool,
    /// Bytes of one node's PQ code in `meta.codes` (full or compact set).
    pub(crate) code_bytes: usize,
    /// Why the compact codes were asked for and are not used.
    pub(crate) compact_problem: Option<String>,
}

impl DiskIndex {
    pub fn open(dir: &Path, options: &OpenOptions) -> Result<Self> {
        if !dir.is_dir() {
            return Err(IndexError::File {
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no index directory there",
                ),
            });
        }
        crate::limits::check_open_options(options)?;
        super::commit::reclaim_if_idle(options.storage.as_ref(), dir);
        let meta_path = dir.join(META_FILE);
        // Which codes steer the walk is known once the navigation file is read: none of
        // meta.dvm's when its 4-bit codes steer, the compact set's when asked for. Until
        // then its codes are only checksummed.
        let codes_later = options.navigation || options.compact_codes;
        let mut meta = if codes_later {
            Meta::read_without_codes(&meta_path)?
        } else {
            Meta::read(&meta_path)?
        };
        let paths: Vec<PathBuf> = meta.paths.iter().map(|p| dir.join(p)).collect();
        // The header is the first sector of the logical file, on the first path; meta.dvm
        // holds a copy, which a mirrored index opens with when that path is lost (the
        // volume then serves the path from its mirror).
        let header = match read_header(&paths[0], options.direct) {
            Ok(header) => {
                meta.check(&header, &meta_path)?;
                header
            }
            Err(e) if meta.geometry.mirrored => {
                log::warn!(
                    "{e}; opening with the copy of the header in {}",
                    meta_path.display()
                );
                meta.header()
            }
            Err(e) => return Err(e),
        };
        let mut volume = Volume::open(
            &paths,
            header.stripe_bytes,
            header.nodes_file_bytes(),
            options.direct,
            header.mirrored,
        )?;
        volume.set_emulation(&options.emulate)?;
        volume.set_read_deadline(options.read_deadline);
        volume.set_sector_check(|number, sector| first_bad_sector(sector, number).is_none());
        let layout = header.layout();
        let count = header.count as usize;
        // The navigation file is derived data: without it (an index built before it
        // existed) or with a damaged one, the index still answers by the graph search, so
        // its problem is logged and kept for `navigation_problem`, not made an error.
        let nav_file = nav_path(dir, meta.build_id);
        let (mut nav, mut nav_problem, mut nav_off) = (None, None, None);
        if !options.navigation {
            // Not asked for: the file is not read.
        } else if !nav_file.exists() {
            nav_problem = Some("it has no navigation file (built before that file existed)".into());
        } else {
            match Navigation::read(&nav_file, meta.build_id, count, layout.dim) {
                Ok(NavFile::Present(n)) => nav = Some(n),
                Ok(NavFile::SteppedAside(off)) => nav_off = Some(off),
                Err(e) => nav_problem = Some(e.to_string()),
            }
        }
        if let Some(problem) = &nav_problem {
            log::warn!("{}: searching without navigation: {problem}", dir.display());
        }
        let plan = plan_node_cache(
            count,
            &meta.entries,
            options.cache_nodes,
            nav.is_some(),
            layout.node_bytes,
        );
        let cache = NodeCache::load(&volume, &layout, count, plan, None)?;
        // A walk steered by the 4-bit codes never reads a PQ code or the codebook
        // (approximate distances come from the 4-bit codes too: see `sq4_walk`), so they
        // are never loaded: 192 MiB of codes at 1M x 768, the difference between fitting a
        // 20% budget and not, and 0.75 MiB of codebook at 768 dimensions.
        let (compact_codes, compact_problem) = if nav.as_ref().is_some_and(Navigation::walks_by_sq4)
        {
            meta.pq = None;
            (false, None)
        } else if codes_later {
            load_codes(dir, &mut meta, options.compact_codes)?
        } else {
            (false, None)
        };
        let code_bytes = meta.pq.as_ref().map_or(0, |pq| pq.code_bytes());
        let ids_are_nodes = meta
            .ids
            .iter()
            .enumerate()
            .all(|(node, &id)| id == node as i64);
        if ids_are_nodes {
            meta.ids = Vec::new();
        }
        Ok(Self {
            header,
            layout,
            meta,
            volume,
            cache: RwLock::new(Arc::new(cache)),
            resizing: Mutex::new(()),
            engine_choice: options.engine,
            queue_depth: options.queue_depth,
            engines: Mutex::new(Vec::new()),
            node_by_id: Default::default(),
            ids_are_nodes,
            queries_running: Default::default(),
            buffers: super::query_buffers::BufferPool::new(count),
            nav,
            nav_problem,
            nav_off,
            compact_codes,
            code_bytes,
            compact_problem,
        })
    }

    /// Whether the walk is steered by the compact code set.
    pub fn uses_compact_codes(&self) -> bool {
        self.compact_codes
    }

    /// Why the compact codes were asked for and are not used (no file, or a damaged one).
    pub fn compact_problem(&self) -> Option<&str> {
        self.compact_problem.as_deref()
    }

    /// Bytes of PQ codes held in DRAM (full or compact; none for a walk by 4-bit codes).
    pub fn code_bytes_held(&self) -> usize {
        self.meta.codes.len()
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn layout(&self) -> NodeLayout {
        self.layout
    }

    pub fn len(&self) -> usize {
        self.header.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.header.count == 0
    }

    pub fn dim(&self) -> usize {
        self.header.dim as usize
    }

    /// The distance the index ranks by.
    pub fn metric(&self) -> diskvec_vector::Metric {
        self.header.metric
    }

    /// Node records held in DRAM: the cached prefix, the entry nodes beyond it and the
    /// records the searches' reads brought in.
    pub fn cached_nodes(&self) -> usize {
        self.node_cache().nodes()
    }

    /// Node records the cache has room for (`cached_nodes` tells how many it holds).
    pub fn node_cache_room(&self) -> usize {
        self.node_cache().plan().records()
    }

    /// Bytes the node records held in DRAM take.
    pub fn node_cache_bytes(&self) -> usize {
        self.node_cache().bytes()
    }

    /// Bytes one cached node record takes (full vector and neighbour list).
    pub fn node_record_bytes(&self) -> usize {
        self.layout.node_bytes
    }

    /// The node cache as it stands: what a search starting now uses throughout.
    pub(crate) fn node_cache(&self) -> Arc<NodeCache> {
        Arc::clone(&self.cache.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Holds up to `records` node records in DRAM from now on (as `OpenOptions::cache_nodes`
    /// plans them: entry nodes first for a graph search, then the file's prefix and room
    /// for what the searches read), reading from the SSD only the prefix records it adds;
    /// searches running keep the cache they started with. Returns the records it has room
    /// for (`cached_nodes` tells how many it holds).
    pub fn resize_node_cache(&self, records: usize) -> Result<usize> {
        let _one = self.resizing.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.node_cache();
        let plan = plan_node_cache(
            self.len(),
            &self.meta.entries,
            Some(records),
            self.nav.is_some(),
            self.layout.node_bytes,
        );
        let room = plan.records();
        if plan == current.plan() {
            return Ok(room);
        }
        let resized =
            NodeCache::load(&self.volume, &self.layout, self.len(), plan, Some(&current))?;
        drop(current);
        *self.cache.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(resized);
        Ok(room)
    }

    /// True when node reads bypass the page cache.
    pub fn direct_io(&self) -> bool {
        self.volume.direct()
    }

    /// The files holding the nodes, one per path, and the stripe size.
    pub fn placement(&self) -> (Vec<PathBuf>, u64) {
        (self.volume.names.clone(), self.volume.map.stripe_bytes)
    }

    /// Each path's counters since the last `reset_path_stats`.
    pub fn path_stats(&self) -> Vec<PathSnapshot> {
        self.volume.stats.iter().map(|s| s.snapshot()).collect()
    }

    /// Fault injection: the `path`-th path fails every read after `reads` more.
    pub fn inject_path_fault(&self, path: usize, reads: u64) {
        self.volume.inject_fault(path, reads);
    }

    /// Paths that failed since the index was opened (reads then go to their mirrors).
    pub fn failed_paths(&self) -> Vec<usize> {
        self.volume.failed_paths()
    }

    /// Paths that failed, with their file and the reason (at open or during search).
    pub fn lost_paths(&self) -> Vec<(usize, PathBuf, String)> {
        self.volume.lost_paths()
    }

    /// Fault injection: every `n`-th read sent to the `path`-th path fails (0 stops it).
    pub fn inject_intermittent_fault(&self, path: usize, n: u64) {
        self.volume.inject_intermittent_fault(path, n);
    }

    /// Reads failed by injection so far.
    pub fn injected_faults(&self) -> u64 {
        self.volume.injected_faults()
    }

    pub fn mirrored(&self) -> bool {
        self.header.mirrored
    }

    /// Zeroes the per-path counters (call between measurements, with no search running).
    pub fn reset_path_stats(&self) {
        for s in &self.volume.stats {
            s.reset();
        }
    }

    /// The engine searches use here (io_uring unless it is unavailable or pread was asked for).
    pub fn engine_kind(&self) -> Result<EngineKind> {
        let engine = self.take_engine(1)?;
        let kind = engine.kind();
        self.return_engine(engine);
        Ok(kind)
    }

    /// Bytes this index holds in DRAM: PQ codebook and codes, ids, node cache, entry nodes,
    /// and the navigation data when loaded.
    pub fn dram_bytes(&self) -> usize {
        self.meta.dram_bytes()
            + self.node_cache().bytes()
            + self.nav.as_ref().map_or(0, Navigation::dram_bytes)
    }

    /// The navigation data, when opened with navigation and the index has it.
    pub fn navigation(&self) -> Option<&Navigation> {
        self.nav.as_ref()
    }

    /// The navigation data when its 4-bit codes steer the walk: then the PQ codes are not
    /// in DRAM (`open` drops them) and every approximate distance comes from these codes.
    pub(super) fn sq4_walk(&self) -> Option<&Navigation> {
        self.nav.as_ref().filter(|n| n.walks_by_sq4())
    }

    /// Why an index opened with navigation searches without it: its navigation file is
    /// missing or damaged (`None` when navigation is used or was not asked for).
    pub fn navigation_problem(&self) -> Option<&str> {
        self.nav_problem.as_deref()
    }

    /// The build's record that it left navigation off (it would not pay on this data), when
    /// opened with navigation.
    pub fn navigation_stepped_aside(&self) -> Option<&SteppedAside> {
        self.nav_off.as_ref()
    }

    /// Whether searches walk the graph in DRAM (opened with navigation).
    pub fn navigates_in_dram(&self) -> bool {
        self.nav.is_some()
    }

    pub fn disk_bytes(&self) -> u64 {
        self.header.nodes_file_bytes()
    }

    pub(crate) fn take_engine(&self, depth: usize) -> Result<Box<dyn diskvec_io::ReadEngine>> {
        let mut pool = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = pool.iter().position(|e| e.depth() >= depth) {
            return Ok(pool.swap_remove(i));
        }
        drop(pool);
        let engine = self.volume.engine(
            self.engine_choice,
            depth,
            self.layout.read_bytes(),
            self.queue_depth,
        )?;
        Ok(Box::new(engine))
    }

    pub(crate) fn return_engine(&self, engine: Box<dyn diskvec_io::ReadEngine>) {
        if engine.in_flight() > 0 {
            // Reads it could not drain keep their slots; a fresh engine serves instead.
            return;
        }
        self.engines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(engine);
    }

    /// The external ids of the indexed vectors, in node order.
    pub fn ids(&self) -> std::borrow::Cow<'_, [i64]> {
        if self.ids_are_nodes {
            (0..self.len() as i64).collect::<Vec<_>>().into()
        } else {
            self.meta.ids.as_slice().into()
        }
    }

    /// The external id of node `node`.
    pub(crate) fn external_id(&self, node: u32) -> i64 {
        if self.ids_are_nodes {
            i64::from(node)
        } else {
            self.meta.ids[node as usize]
        }
    }
}

/// Reads and checks the header sector at the front of the first path's file.
pub(crate) fn read_header(nodes_path: &Path, direct: bool) -> Result<Header> {
    let file = open_for_reading(nodes_path, direct)?;
    let mut first = AlignedBuf::new(SECTOR);
    let got = file
        .file
        .read_at(first.as_mut_slice(), 0)
        .map_err(file_error(nodes_path))?;
    Header::decode(&first.as_slice()[..got], nodes_path)
}

/// What a node cache of `budget` records holds (see `OpenOptions::cache_nodes`): for a
/// graph search the entry nodes first; then, short of every record, room for the records
/// the searches' reads find worth keeping (less the tables that track them), or the file's
/// prefix where tracking would cost more than half of that room.
///
/// Measured on 1M x 768 with 3% of the records held and no navigation (docs/benchmarks.md,
/// session 19), the whole room measured beat half of it as prefix (the breadth-first
/// neighbourhood of the medoid) by 1.1-3.5x in QPS, and the prefix alone by 1.1-5.3x.
fn plan_node_cache(
    count: usize,
    entries: &[u32],
    budget: Option<usize>,
    walks_in_dram: bool,
    record_bytes: usize,
) -> CachePlan {
    let entries_wanted = if walks_in_dram { 0 } else { entries.len() };
    let (prefix, entry_room, hot) = match budget {
        None => ((count / 100).min(count), entries_wanted, 0),
        Some(b) => {
            let b = b.min(count);
            let room = entries_wanted.min(b);
            let measured_room = if b == count { 0 } else { b - room };
            let hot =
                HotRecords::capacity_within(measured_room * record_bytes, count, record_bytes);
            // Where the tracking costs more than half of what it makes room for, the room
            // goes to the prefix.
            let hot = if 2 * hot > measured_room { hot } else { 0 };
            let fixed = b - if hot > 0 { measured_room } else { 0 };
            // Entries inside the prefix are held once, so the prefix grows by as many
            // records as they would have taken beyond it (growing it only removes entries
            // from beyond, so this settles, at the latest with the whole file cached).
            let mut prefix = fixed - room;
            loop {
                let beyond = entries
                    .iter()
                    .filter(|&&e| e as usize >= prefix)
                    .count()
                    .min(room);
                if prefix + beyond == fixed {
                    break (prefix, room, hot);
                }
                prefix = fixed - beyond;
            }
        }
    };
    let entry_ids = entries
        .iter()
        .copied()
        .filter(|&e| e as usize >= prefix)
        .take(entry_room)
        .collect();
    CachePlan {
        prefix,
        entry_ids,
        hot,
    }
}

/// Loads into `meta` (read without its codes) the codes that steer the walk: with
/// `compact` the compact set, else, or when it has none (an index built before the file
/// existed, or a damaged file), meta.dvm's own, read again. Returns whether the compact set
/// is in use and why it is not where it was asked for.
fn load_codes(dir: &Path, meta: &mut Meta, compact: bool) -> Result<(bool, Option<String>)> {
    let mut problem = None;
    if compact {
        let file = compact_path(dir, meta.build_id);
        let dim = meta.geometry.dim as usize;
        let why = if !file.exists() {
            "it has no compact code file (built before that file existed)".to_string()
        } else {
            match super::compact::read(&file, meta.build_id, meta.ids.len(), dim) {
                Ok(codes) => {
                    meta.pq = Some(codes.pq);
                    meta.codes = codes.codes;
                    return Ok((true, None));
                }
                Err(e) => e.to_string(),
            }
        };
        log::warn!("{}: opening with the full PQ codes: {why}", dir.display());
        problem = Some(why);
    }
    let path = dir.join(META_FILE);
    let again = Meta::read(&path)?;
    if (again.build_id, again.crc) != (meta.build_id, meta.crc) {
        return Err(IndexError::File {
            path,
            source: std::io::Error::other("replaced by another build while the index opened"),
        });
    }
    meta.codes = again.codes;
    Ok((false, problem))
}

#[cfg(test)]
mod tests {
    use super::plan_node_cache;

    #[test]
    fn the_node_cache_budget_covers_entry_nodes_first_and_only_for_a_graph_search() {
        let entries = [3, 40, 500, 900];
        let plan = |count, entries: &[u32], budget, nav, record| {
            let p = plan_node_cache(count, entries, budget, nav, record);
            (p.prefix, p.entry_ids, p.hot)
        };
        // Default: 1% as prefix, plus the entries beyond it (a graph search only).
        assert_eq!(
            plan(1000, &entries, None, false, 100),
            (10, vec![40, 500, 900], 0)
        );
        assert_eq!(plan(1000, &entries, None, true, 100), (10, vec![], 0));
        // Records far larger than the tracking: entries first, then the rest measured (each
        // slot costs a little more than its record, and the tables 5 bytes a node).
        assert_eq!(
            plan(1000, &entries, Some(50), false, 5000),
            (0, vec![3, 40, 500, 900], 44)
        );
        // With the walk in DRAM, no entries, all of it measured.
        assert_eq!(plan(1000, &entries, Some(50), true, 5000), (0, vec![], 48));
        // Where the tracking would cost more than half of what it makes room for, prefix.
        assert_eq!(plan(1000, &entries, Some(50), true, 10), (50, vec![], 0));
        assert_eq!(
            plan(1000, &entries, Some(2), false, 5000),
            (0, vec![3, 40], 0)
        );
        assert_eq!(plan(1000, &entries, Some(0), false, 5000), (0, vec![], 0));
        // Capped at the node count: the whole file, once, and nothing measured.
        assert_eq!(
            plan(20, &[3, 12, 18], Some(5000), false, 5000),
            (20, vec![], 0)
        );
        assert_eq!(
            plan(20, &[3, 12, 18], Some(20), true, 5000),
            (20, vec![], 0)
        );
        for nav in [false, true] {
            for b in 0..=1000 {
                let (prefix, ids, hot) = plan(1000, &entries, Some(b), nav, 1000);
                let used = prefix + ids.len() + hot;
                assert!(used <= b && (hot == 0) == (used == b), "budget {b}");
                assert!(
                    hot == 0 || (prefix == 0 && 2 * hot > b - ids.len()),
                    "budget {b}"
                );
                assert!(ids.iter().all(|&e| e as usize >= prefix));
            }
        }
    }
}
