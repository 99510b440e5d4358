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
    collections: RwLock<BTreeMap<String, Arc<Collection>>>,
    /// Other names of collections; taken after `collections` when both are.
    aliases: RwLock<AliasMap>,
    /// Held for the database's lifetime so a second process cannot open it.
    _lock: Option<File>,
}

/// Collection names: 1 to 255 of `A-Z a-z 0-9 _ - .`, not starting with a dot, and
/// optionally a shard suffix `@<number>`: a cluster node keeps its replica of shard 3 of
/// `docs` as the local collection `docs@3` (a name no user of a single node would pick).
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
        && name.len() <= 255
        && !base.starts_with('.')
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(DbError::InvalidInput(format!(
            "collection name {name:?}: use 1 to 255 letters, digits, '_', '-' or '.', not starting with '.'"
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
        let search = Arc::new(SearchMemory::new(options.search_memory, options.pq_codes));
        let builds = Arc::new(BuildMemory::new(
            options.build_memory,
            Some(Arc::clone(&search)),
        ));
        let root = dir.join("collections");
        crate::storage::create_dir_all_durable(storage.as_ref(), &root)
            .map_err(file_error(&root))?;
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

    /// Makes the collection files in `from` (a directory under `collections/`) collection
    /// `name`: renamed into place in one step, then opened.
    pub(crate) fn adopt_collection(&self, name: &str, from: &Path) -> Result<Arc<Collection>> {
        let mut all = self.collections.write().unwrap_or_else(|e| e.into_inner());
        self.check_free(&all, name)?;
        let dir = self.collection_dir(name);
        let root = self.dir.join("collections");
        self.storage.rename(from, &dir).map_err(file_error(&dir))?;
        self.storage.sync_dir(&root).map_err(file_error(&root))?;
        let grant = crate::search_memory::Grant {
            share: 0.0,
            navigation: true,
            compact_codes: self.search.compact_codes(),
        };
        let c = Arc::new(Collection::open(
            name,
            &dir,
            Arc::clone(&self.storage),
            Arc::clone(&self.builds),
            Arc::clone(&self.search),
            grant,
        )?);
        all.insert(name.to_string(), Arc::clone(&c));
        drop(all);
        self.search.rebalance();
        Ok(c)
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

    fn collection_dir(&self, name: &str) -> PathBuf {
        self.dir.join("collections").join(name)
    }

    pub fn create_collection(
        &self,
        name: &str,
        config: CollectionConfig,
    ) -> Result<Arc<Collection>> {
        check_name(name)?;
        config.check()?;
        let mut all = self.collections.write().unwrap_or_else(|e| e.into_inner());
        self.check_free(&all, name)?;
        let dir = self.collection_dir(name);
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
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        let mut all = self.collections.write().unwrap_or_else(|e| e.into_inner());
        let c = all
            .remove(name)
            .ok_or_else(|| DbError::UnknownCollection(name.to_string()))?;
        // Its aliases go with it.
        {
            let mut aliases = self.aliases.write().unwrap_or_else(|e| e.into_inner());
            if aliases.values().any(|c| c == name) {
                let mut next = aliases.clone();
                next.retain(|_, c| c != name);
                if let Err(e) = crate::aliases::write(self.storage.as_ref(), &self.dir, &next) {
                    all.insert(name.to_string(), c);
                    return Err(e);
                }
                *aliases = next;
            }
        }
        c.close()?;
        let config = c.config().clone();
        drop(c);
        let dir = self.collection_dir(name);
        let root = self.dir.join("collections");
        let gone = root.join(format!(".dropped-{name}"));
        self.storage.rename(&dir, &gone).map_err(file_error(&dir))?;
        self.storage.sync_dir(&root).map_err(file_error(&root))?;
        let _ = self.storage.remove_dir_all(&gone);
        if let Some(w) = &config.wal_path {
            let _ = self.storage.remove_dir_all(&w.join(name));
        }
        for p in &config.paths {
            let on_path = p.join(name);
            if on_path.exists() {
                let _ = self.storage.remove_dir_all(&on_path);
            }
        }
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
