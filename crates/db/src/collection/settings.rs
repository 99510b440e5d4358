//! Changing a collection's settings while it serves, and the strict-mode checks that read
//! them (limits and rates: `crate::strict`).

use std::sync::Arc;

use super::{lock, Collection};
use crate::config::CollectionConfig;
use crate::strict::{CollectionSize, Rate, StrictMode};
use crate::{DbError, NamedVectors, Result};

impl Collection {
    /// Changes settings: `change` edits a copy, which must keep the collection's shape
    /// (its spaces, storage paths, log place and durability); the manifest with the new
    /// settings is written atomically before anything reads them. Writes and seals that
    /// start afterwards use them (a new HNSW `m` applies to the next growing segment, a new
    /// seal threshold to the next seal); what was built stays as built.
    pub fn update_settings(
        &self,
        change: impl FnOnce(&mut CollectionConfig) -> Result<()>,
    ) -> Result<()> {
        let inner = &self.inner;
        let mut manifest = lock(&inner.manifest);
        inner.check_home()?;
        let current = inner.config();
        let mut next = (*current).clone();
        change(&mut next)?;
        next.check()?;
        same_shape(&current, &next)?;
        let mut written = manifest.clone();
        written.config = next.clone();
        written.generation += 1;
        written.write(inner.storage.as_ref(), &inner.dir)?;
        *manifest = written;
        let next = Arc::new(next);
        *inner.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&next);
        inner
            .state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .config = next;
        Ok(())
    }

    /// The strict-mode limits this collection checks, when they are on. A cluster's replica
    /// (a name with a shard suffix, `docs@3`) checks only those the data judges
    /// (`StrictMode::data_limits`): the node that routed the request checked the rest.
    pub fn strict_mode(&self) -> Option<StrictMode> {
        let config = self.inner.config();
        let strict = &config.strict_mode;
        if !strict.is_enabled() {
            return None;
        }
        Some(if self.is_shard_replica() {
            strict.data_limits()
        } else {
            strict.clone()
        })
    }

    /// Whether this is a cluster's replica of one shard: its name carries the shard suffix
    /// `@<number>`, which `check_name` keeps for them.
    pub fn is_shard_replica(&self) -> bool {
        self.name().contains('@')
    }

    /// Spends `cost` of strict mode's read or write rate (nothing when strict mode is off
    /// or sets no such rate, or on a replica).
    pub fn charge(&self, rate: Rate, cost: usize) -> Result<()> {
        let Some(strict) = self.strict_mode() else {
            return Ok(());
        };
        lock(&self.inner.rates).charge(&strict, rate, cost)
    }

    /// The live points and their dense vectors' bytes (4 per number), for the size limits.
    pub fn size(&self) -> CollectionSize {
        let points = self.len() as u64;
        let numbers = self.inner.config().dense_numbers() as u64;
        CollectionSize {
            points,
            vector_bytes: points * numbers * 4,
        }
    }

    /// Strict mode's checks of a write that adds `count` points (or replaces their vectors):
    /// batch size (`what` names it in the error: "upsert limit", "update limit"), the
    /// collection's size, and each vector's length.
    pub fn check_insert<'a>(
        &self,
        count: usize,
        vectors: impl IntoIterator<Item = &'a NamedVectors>,
        what: &str,
    ) -> Result<()> {
        let Some(strict) = self.strict_mode() else {
            return Ok(());
        };
        StrictMode::check_limit(Some(count), strict.upsert_max_batchsize, what)?;
        if strict.max_collection_vector_size_bytes.is_some() || strict.max_points_count.is_some() {
            strict.check_size(&self.size())?;
        }
        for v in vectors {
            strict.check_vectors(v.iter().map(|(n, v)| (n.as_str(), v)))?;
        }
        Ok(())
    }

    /// Strict mode's checks of a filter (`write`: of a filtered write).
    pub fn check_filter(&self, filter: Option<&crate::Filter>, write: bool) -> Result<()> {
        let (Some(strict), Some(filter)) = (self.strict_mode(), filter) else {
            return Ok(());
        };
        strict.check_filter(filter, write, &self.index_capabilities())
    }

    /// Strict mode's checks of a formula query: the keys it reads and its conditions.
    pub fn check_formula(&self, formula: &crate::query::formula::Formula) -> Result<()> {
        let Some(strict) = self.strict_mode() else {
            return Ok(());
        };
        let indexes = self.index_capabilities();
        let (keys, conditions) = formula.uses();
        strict.check_formula_keys(&keys, &indexes)?;
        for c in conditions {
            strict.check_filter(c, false, &indexes)?;
        }
        Ok(())
    }

    /// Strict mode's check of a group-by key.
    pub fn check_group_by(&self, key: &str) -> Result<()> {
        let Some(strict) = self.strict_mode() else {
            return Ok(());
        };
        strict.check_group_by(key, &self.index_capabilities())
    }
}

impl Collection {
    /// What each payload index can answer, as strict mode names it: its kind, and for an
    /// integer index "integer" (value matches, unless created with `lookup: false`) and
    /// "integer-range" (ranges, unless `range: false`), for a keyword index created with
    /// `prefix: true` also "keyword-prefix".
    fn index_capabilities(&self) -> Vec<(String, String)> {
        let params = self.payload_index_params();
        let mut out = Vec::new();
        for (field, kind) in self.payload_indexes() {
            let option = |name: &str| {
                params
                    .get(&field)
                    .and_then(|p| p.get(name))
                    .and_then(serde_json::Value::as_bool)
            };
            match kind.as_str() {
                "integer" => {
                    if option("lookup") != Some(false) {
                        out.push((field.clone(), kind.clone()));
                    }
                    if option("range") != Some(false) {
                        out.push((field, "integer-range".to_string()));
                    }
                }
                "keyword" => {
                    if option("prefix") == Some(true) {
                        out.push((field.clone(), "keyword-prefix".to_string()));
                    }
                    out.push((field, kind));
                }
                "text" => {
                    if option("phrase_matching") == Some(true) {
                        out.push((field.clone(), "text-phrase".to_string()));
                    }
                    out.push((field, kind));
                }
                _ => out.push((field, kind)),
            }
        }
        out
    }
}

/// Refuses a change of what the stored data depends on.
fn same_shape(old: &CollectionConfig, new: &CollectionConfig) -> Result<()> {
    let spaces = |c: &CollectionConfig| {
        let dense: Vec<_> = c
            .dense
            .iter()
            .chain(&c.multi)
            .map(|s| (s.name.clone(), s.dim, s.metric))
            .collect();
        let sparse: Vec<_> = c.sparse.iter().map(|s| s.name.clone()).collect();
        (dense, sparse)
    };
    let fixed = |what: &str| {
        Err(DbError::InvalidInput(format!(
            "{what} of a collection is fixed at creation"
        )))
    };
    if spaces(old) != spaces(new) {
        return fixed("the vector spaces (names, sizes, distances)");
    }
    if old.paths != new.paths || old.wal_path != new.wal_path {
        return fixed("where the data lives (paths, wal_path)");
    }
    if old.durability != new.durability {
        return fixed("the durability");
    }
    Ok(())
}
