//! A database: a directory of named collections.
//!
//! ```text
//! <db>/.lock                              held (flock) by the process that has it open
//! <db>/aliases.dvc                        collection aliases (aliases.rs)
//! <db>/collections/<name>/manifest.dvc    settings, sealed segments, checkpoint
//! <db>/collections/<name>/wal/            the write-ahead log (or under wal_path/<name>)
//! <db>/collections/<name>/segments/<id>/  a sealed segment: DiskANN index, points, deletes
//! <path>/<name>/<id>/                     its nodes on each storage path, when striped
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use diskvec_index::diskann::MemoryBudget;

use crate::aliases::{AliasAction, AliasMap};
use crate::build_memory::BuildMemory;
use crate::collection::Collection;
use crate::config::CollectionConfig;
use crate::error::file_error;
use crate::manifest::MANIFEST_FILE;
use crate::places::{child, remove_tree, StoragePaths};
use crate::search_memory::{PqCodes, SearchMemory, Usage};
use crate::storage::{FsStorage, Storage};
use crate::{DbError, Result};

pub struct Database {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    /// The memory every collection's background builds share.
    builds: Arc<BuildMemory>,
    /// The DRAM every collection's searches share (node caches, navigation data).
    search: Arc<SearchMemory>,
    /// Where collections may keep files besides `dir` (`DbOptions::storage_paths`).
    storage_paths: StoragePaths,
    collections: RwLock<BTreeMap<String, Arc<Collection>>>,
    /// Other names of collections; taken after `collections` when both are.
    aliases: RwLock<AliasMap>,
    /// Held for the database's lifetime so a second process cannot open it.
    _lock: Option<File>,
}

/// Longest collection name, in bytes: the file names derived from a name (a snapshot's
/// `<name>-<time>-<n>.snapshot.checksum`, 41 bytes more; a replica's `@<shard>` suffix, 6)
/// stay within the file systems' 255.
pub const MAX_NAME_BYTES: usize = 200;

/// Collection names: 1 to [`MAX_NAME_BYTES`] of `A-Z a-z 0-9 _ - .`, not starting with a
/// dot, and optionally a shard suffix `@<number>`: a cluster node keeps its replica of shard
/// 3 of `docs` as the local collection `docs@3` (a name no user of a single node would pick).
pub fn check_name(name: &str) -> Result<()> {
    let base = match name.rsplit_once('@') {
        Some((base, shard))
            if !shard.is_empty()
                && shard.len() <= 5
                && shard.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => name,
    };
    let ok = !base.is_empty()
        && base.len() <= MAX_NAME_BYTES
        && !base.starts_with('.')
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(DbError::InvalidInput(format!(
            "collection name {name:?}: use 1 to {MAX_NAME_BYTES} letters, digits, '_', '-' or \
             '.', not starting with '.'"
        )))
    }
}

/// Settings of the database as a process opens it (not kept on disk).
#[derive(Clone, Debug, Default)]
pub struct DbOptions {
    /// Memory the background builds (seals, vacuums, merges) of all collections may use
    /// together: bytes, or `Auto`, half of the memory available when a build starts (within
    /// the memory cgroup's limit, if any). A collection's own `build_memory` is bounded by it.
    pub build_memory: MemoryBudget,
    /// DRAM the sealed segments' searches of all collections may hold beyond their
    /// compressed vectors (navigation data, node records; search_memory.rs): bytes, or
    /// `Auto`, three quarters of the memory available counting what they hold already
    /// (given back to the builds as they reserve it: `AUTO_SEARCH_SHARE`). A collection's
    /// own `search_memory` comes out of it first.
    pub search_memory: MemoryBudget,
    /// Which PQ codes the sealed segments steer by: `Auto` (the default) the full ones
    /// where the memory available holds them with room to spare, else the compact ones (a
    /// quarter of the bytes).
    pub pq_codes: PqCodes,
    /// Where collections' settings may put their files besides the database's directory:
    /// anywhere (the embedded library, the command line) or only among the operator's
    /// storage paths (a server).
    pub storage_paths: StoragePaths,
}

impl DbOptions {
    /// Refuses options no database works with.
    pub fn check(&self) -> Result<()> {
        for (what, budget) in [
            ("build memory", self.build_memory),
            ("search memory", self.search_memory),
        ] {
            if let MemoryBudget::ShareOfRaw(_) = budget {
                return Err(DbError::InvalidInput(format!(
                    "the database's {what} is bytes or auto, not a share ({budget}): a share \
                     of the raw vectors is a collection's setting"
                )));
            }
        }
        Ok(())
    }
}

impl Database {
    /// Opens the database in `dir`, creating it if needed, and recovers every collection.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with_options(dir, DbOptions::default())
    }

    /// `open`, with options.
    pub fn open_with_options(dir: &Path, options: DbOptions) -> Result<Self> {
        options.check()?;
        crate::storage::create_dir_all_durable(&FsStorage, dir).map_err(file_error(dir))?;
        let lock_path = dir.join(".lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(file_error(&lock_path))?;
        if lock.try_lock().is_err() {
            return Err(DbError::Unavailable(format!(
                "{} is open in another process",
                dir.display()
            )));
        }
        Self::open_with(dir, Arc::new(FsStorage), Some(lock), options)
    }

    /// Opens with another storage (tests: one that forgets unsynced writes) and no lock.
    pub fn open_with_storage(dir: &Path, storage: Arc<dyn Storage>) -> Result<Self> {
        Self::open_with(dir, storage, None, DbOptions::default())
    }

    fn open_with(
        dir: &Path,
        storage: Arc<dyn Storage>,
        lock: Option<File>,
        options: DbOptions,
    ) -> Result<Self> {
        crate::background::start_pools();
        let search = Arc::new(SearchMemory::new(options.search_memory, options.pq_codes));
        let storage_paths = options.storage_paths;
        let builds = Arc::new(BuildMemory::new(
            options.build_memory,
            Some(Arc::clone(&search)),
        ));
        let root = dir.join("collections");
        crate::storage::create_dir_all_durable(storage.as_ref(), &root)
            .map_err(file_error(&root))?;
        put_back_replaced(storage.as_ref(), &root)?;
        // Shelves: `snapshots/`, `snapshots/<collection>/`, `snapshots/<collection>/shard/`.
        crate::snapshot::sweep_unfinished(storage.as_ref(), &dir.join("snapshots"), 2);
        let mut names = Vec::new();
        for name in storage.list(&root).map_err(file_error(&root))? {
            let cdir = root.join(&name);
            if name.starts_with('.') {
                // A collection being dropped when the process died.
                let _ = storage.remove_dir_all(&cdir);
                continue;
            }
            if !storage.exists(&cdir.join(MANIFEST_FILE)) {
                // Created up to its directory but not its manifest: it never existed.
                log::warn!(
                    "removing {}: a collection whose creation did not finish",
                    cdir.display()
                );
                let _ = storage.remove_dir_all(&cdir);
                continue;
            }
            names.push(name);
        }
        // The search memory is planned from the files before any segment opens, so that
        // navigation data it cannot hold is never loaded.
        let demands = names
            .iter()
            .map(|n| crate::collection::search_demand(storage.as_ref(), &root.join(n)))
            .collect::<Result<Vec<_>>>()?;
        let compact_codes = search.choose_codes(&demands);
        let grants = crate::search_memory::plan(
            &demands,
            search.budget_before_open(&demands),
            compact_codes,
        );
        let mut collections = BTreeMap::new();
        for (name, grant) in names.into_iter().zip(grants) {
            let c = Collection::open(
                &name,
                &root.join(&name),
                Arc::clone(&storage),
                Arc::clone(&builds),
                Arc::clone(&search),
                grant,
            )?;
            collections.insert(name, Arc::new(c));
        }
        search.set_ready();
        search.rebalance();
        // An alias of a collection dropped by a process that died before it rewrote the
        // aliases is forgotten (the next change of the aliases writes them without it).
        let mut aliases = crate::aliases::read(dir)?;
        aliases.retain(|_, c| collections.contains_key(c));
        Ok(Self {
            dir: dir.to_path_buf(),
            storage,
            builds,
            search,
            storage_paths,
            collections: RwLock::new(collections),
            aliases: RwLock::new(aliases),
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The database's build memory as set, the bytes its running builds reserved, and the
    /// budget they share (0 before the first build).
    pub fn build_memory(&self) -> (MemoryBudget, u64, u64) {
        let (in_use, total) = self.builds.usage();
        (self.builds.limit(), in_use, total)
    }

    /// The database's search memory as set, and what the last rebalance gave and found
    /// held.
    pub fn search_memory(&self) -> (MemoryBudget, Usage) {
        (self.search.limit(), self.search.usage())
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    /// Makes the collection files in `from` (a hidden directory under `collections/`)
    /// collection `name`, replacing one of that name only once the new one has opened: the
    /// old one's directory is moved aside (`.replaced-<name>`, which an open puts back
    /// should the process die before the new one is in place), the new one renamed into
    /// place and opened; if it does not open, the old one is put back and serves again.
    pub(crate) fn adopt_collection(&self, name: &str, from: &Path) -> Result<Arc<Collection>> {
        let mut all = self.collections.write().unwrap_or_else(|e| e.into_inner());
        let old = all.get(name).cloned();
        if old.is_none() {
            self.check_free(&all, name)?;
        }
        let dir = self.collection_dir(name)?;
        let root = self.dir.join("collections");
        let aside = child(&root, &format!(".replaced-{name}"))?;
        let sync_root = || self.storage.sync_dir(&root).map_err(file_error(&root));
        if let Some(old) = &old {
            old.close()?;
            remove_tree(self.storage.as_ref(), &aside)?;
            if let Err(e) = self.storage.rename(&dir, &aside) {
                all.insert(name.to_string(), self.reopen(name, &dir)?);
                return Err(file_error(&dir)(e));
            }
        }
        let opened = self
            .storage
            .rename(from, &dir)
            .map_err(file_error(&dir))
            .and_then(|()| sync_root())
            .and_then(|()| self.reopen(name, &dir));
        let c = match opened {
            Ok(c) => c,
            Err(e) => {
                if old.is_some() {
                    // The new files go back where they came from (their caller removes
                    // them); the old collection returns to its place.
                    let _ = self.storage.rename(&dir, from);
                    self.storage
                        .rename(&aside, &dir)
                        .map_err(file_error(&dir))?;
                    sync_root()?;
                    all.insert(name.to_string(), self.reopen(name, &dir)?);
                }
                return Err(e);
            }
        };
        let replaced = all.insert(name.to_string(), Arc::clone(&c));
        drop(all);
        if let Some(old) = replaced {
            let config = old.config().clone();
            drop(old);
            if let Err(e) = remove_tree(self.storage.as_ref(), &aside) {
                log::warn!("removing the replaced collection {name:?}: {e}");
            }
            self.remove_outside_files(name, &config);
        }
        self.search.rebalance();
        Ok(c)
    }

    /// Opens the collection files in `dir` (in place) as collection `name`.
    fn reopen(&self, name: &str, dir: &Path) -> Result<Arc<Collection>> {
        let grant = crate::search_memory::Grant {
            share: 0.0,
            navigation: true,
            compact_codes: self.search.compact_codes(),
        };
        Ok(Arc::new(Collection::open(
            name,
            dir,
            Arc::clone(&self.storage),
            Arc::clone(&self.builds),
            Arc::clone(&self.search),
            grant,
        )?))
    }

    /// Removes what a dropped or replaced collection kept outside its directory (its log
    /// under `wal_path`, its nodes on the storage paths), refusing symbolic links.
    fn remove_outside_files(&self, name: &str, config: &CollectionConfig) {
        let outside = config.wal_path.iter().chain(&config.paths);
        for root in outside {
            let removed = child(root, name).and_then(|p| remove_tree(self.storage.as_ref(), &p));
            if let Err(e) = removed {
                log::warn!("collection {name:?}: leaving {}: {e}", root.display());
            }
        }
    }

    /// `name` is neither a collection nor an alias.
    fn check_free(&self, all: &BTreeMap<String, Arc<Collection>>, name: &str) -> Result<()> {
        if all.contains_key(name) {
            return Err(DbError::CollectionExists(name.to_string()));
        }
        if self.alias_map().contains_key(name) {
            return Err(DbError::InvalidInput(format!(
                "Can't create collection with name {name}. Alias with the same name already \
                 exists"
            )));
        }
        Ok(())
    }

    fn collection_dir(&self, name: &str) -> Result<PathBuf> {
        child(&self.dir.join("collections"), name)
    }

    pub fn create_collection(
        &self,
        name: &str,
        config: CollectionConfig,
    ) -> Result<Arc<Collection>> {
        check_name(name)?;
        config.check()?;
        self.storage_paths.check(&config)?;
        let mut all = self.collections.write().unwrap_or_else(|e| e.into_inner());
        self.check_free(&all, name)?;
        let dir = self.collection_dir(name)?;
        let c = Arc::new(Collection::create(
            name,
            &dir,
            config,
            Arc::clone(&self.storage),
            Arc::clone(&self.builds),
            Arc::clone(&self.search),
        )?);
        let root = self.dir.join("collections");
        self.storage.sync_dir(&root).map_err(file_error(&root))?;
        all.insert(name.to_string(), Arc::clone(&c));
        Ok(c)
    }

    /// The collection `name`, or the one the alias `name` names.
    pub fn collection(&self, name: &str) -> Result<Arc<Collection>> {
        let all = self.collections.read().unwrap_or_else(|e| e.into_inner());
        let target = match all.get(name) {
            Some(c) => return Ok(Arc::clone(c)),
            None => self.alias_map().get(name).cloned(),
        };
        target
            .and_then(|t| all.get(&t).cloned())
            .ok_or_else(|| DbError::UnknownCollection(name.to_string()))
    }

    fn alias_map(&self) -> std::sync::RwLockReadGuard<'_, AliasMap> {
        self.aliases.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Every alias, as (alias, collection), by alias.
    pub fn aliases(&self) -> Vec<(String, String)> {
        self.alias_map()
            .iter()
            .map(|(a, c)| (a.clone(), c.clone()))
            .collect()
    }

    /// Applies `actions` in order, all or none, and keeps the result durably (one atomic
    /// replacement of `aliases.dvc`).
    pub fn update_aliases(&self, actions: &[AliasAction]) -> Result<()> {
        let all = self.collections.read().unwrap_or_else(|e| e.into_inner());
        let mut aliases = self.aliases.write().unwrap_or_else(|e| e.into_inner());
        let next = crate::aliases::apply(&aliases, actions, &|n| all.contains_key(n))?;
        crate::aliases::write(self.storage.as_ref(), &self.dir, &next)?;
        *aliases = next;
        Ok(())
    }

    pub fn collection_names(&self) -> Vec<String> {
        self.collections
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Drops a collection and its files: renamed away first (one atomic step), then removed.
    /// A drop that fails (the rename refused) leaves the collection as it was, serving.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        let mut all = self.collections.write().unwrap_or_else(|e| e.into_inner());
        let c = all
            .get(name)
            .cloned()
            .ok_or_else(|| DbError::UnknownCollection(name.to_string()))?;
        let dir = self.collection_dir(name)?;
        let root = self.dir.join("collections");
        let gone = child(&root, &format!(".dropped-{name}"))?;
        c.close()?;
        let config = c.config().clone();
        drop(c);
        let moved = remove_tree(self.storage.as_ref(), &gone).and_then(|_| {
            self.storage.rename(&dir, &gone).map_err(file_error(&dir))?;
            self.storage.sync_dir(&root).map_err(file_error(&root))
        });
        if let Err(e) = moved {
            if self.storage.exists(&dir.join(MANIFEST_FILE)) {
                all.insert(name.to_string(), self.reopen(name, &dir)?);
            } else {
                all.remove(name);
            }
            return Err(e);
        }
        all.remove(name);
        // Its aliases go with it (an open forgets those of a collection it does not find,
        // should this write fail).
        {
            let mut aliases = self.aliases.write().unwrap_or_else(|e| e.into_inner());
            if aliases.values().any(|c| c == name) {
                aliases.retain(|_, c| c != name);
                if let Err(e) = crate::aliases::write(self.storage.as_ref(), &self.dir, &aliases) {
                    log::warn!("collection {name:?} dropped; its aliases stay on disk: {e}");
                }
            }
        }
        if let Err(e) = remove_tree(self.storage.as_ref(), &gone) {
            log::warn!("collection {name:?} dropped; removing its files: {e}");
        }
        self.remove_outside_files(name, &config);
        drop(all);
        self.search.rebalance();
        Ok(())
    }

    /// Closes every collection: background work stops, logged writes are flushed.
    pub fn close(&self) -> Result<()> {
        let all = self.collections.read().unwrap_or_else(|e| e.into_inner());
        for c in all.values() {
            c.close()?;
        }
        Ok(())
    }
}

/// Puts back each collection a restore moved aside (`.replaced-<name>`) when the process died
/// before the new one was in place; removes it when the new one is.
fn put_back_replaced(storage: &dyn Storage, root: &Path) -> Result<()> {
    for hidden in storage.list(root).map_err(file_error(root))? {
        let Some(name) = hidden.strip_prefix(".replaced-") else {
            continue;
        };
        let (aside, dir) = (child(root, &hidden)?, child(root, name)?);
        if storage.exists(&dir.join(MANIFEST_FILE)) {
            remove_tree(storage, &aside)?;
            continue;
        }
        if !storage.exists(&aside.join(MANIFEST_FILE)) {
            continue;
        }
        log::warn!("collection {name:?}: a restore did not finish; the collection it was to replace is back");
        remove_tree(storage, &dir)?;
        storage.rename(&aside, &dir).map_err(file_error(&dir))?;
        storage.sync_dir(root).map_err(file_error(root))?;
    }
    Ok(())
}
