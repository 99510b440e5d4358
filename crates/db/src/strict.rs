//! Strict mode: limits a collection puts on the requests it serves (Qdrant's
//! `strict_mode_config`), so that one tenant's request cannot take a server's memory or CPU:
//! result sizes, search effort, batch sizes, filters on unindexed fields, collection size,
//! and read and write rates.
//!
//! The limits are settings of the collection (kept in its manifest, changed by
//! `Collection::update_settings`); the checks here take the facts of one request, so every
//! front end (HTTP, Python) asks the same questions. A violated limit is a `BadRequest`
//! (the client may change its request); an exhausted rate is `RateLimited` with the wait.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::filter::Filter;
use crate::{DbError, Result};

/// A sparse space's limit: most entries one vector may have.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
}

/// A multivector space's limit: most rows one point's multivector may have.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultivectorLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_vectors: Option<usize>,
}

/// The limits, each `None` when not set. Field names are Qdrant's, so the same JSON is its
/// REST shape and the manifest's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrictMode {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Largest `limit` of a search, query or scroll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_query_limit: Option<usize>,
    /// Largest `timeout` (seconds) a request may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timeout: Option<usize>,
    /// `false`: a read's filter may only use fields that have a payload index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unindexed_filtering_retrieve: Option<bool>,
    /// `false`: a filtered write's filter may only use fields that have a payload index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unindexed_filtering_update: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_max_hnsw_ef: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_allow_exact: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_max_oversampling: Option<f64>,
    /// Most points one upsert (or vector update) may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upsert_max_batchsize: Option<usize>,
    /// Most searches one batch request may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_max_batchsize: Option<usize>,
    /// Writes that add data stop once the vectors take this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_collection_vector_size_bytes: Option<usize>,
    /// Read cost (query vectors, points retrieved, filter conditions) per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_rate_limit: Option<usize>,
    /// Write cost (points written) per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_rate_limit: Option<usize>,
    /// Refused (`check`): diskvec does not measure payload storage per collection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_collection_payload_size_bytes: Option<usize>,
    /// Writes that add data stop at this many points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_points_count: Option<usize>,
    /// Most conditions one filter may have, nested ones counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_max_conditions: Option<usize>,
    /// Most values one condition may list (`match.any`, `has_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_max_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multivector_config: Option<BTreeMap<String, MultivectorLimit>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse_config: Option<BTreeMap<String, SparseLimit>>,
    /// Most payload indexes the collection may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_payload_index_count: Option<usize>,
    /// Accepted for Qdrant's schema; diskvec's memory is bounded by its build and search
    /// memory budgets instead, so this is recorded, not enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resident_memory_percent: Option<usize>,
}

impl StrictMode {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the limits apply.
    pub fn is_enabled(&self) -> bool {
        self.enabled == Some(true)
    }

    /// Sets every limit `change` sets, keeping the others (Qdrant's PATCH). A limit cannot
    /// be unset by a patch, as in Qdrant: `enabled: false` turns them all off.
    pub fn merge(&mut self, change: StrictMode) {
        macro_rules! take {
            ($($f:ident),*) => { $( if change.$f.is_some() { self.$f = change.$f; } )* };
        }
        take!(
            enabled,
            max_query_limit,
            max_timeout,
            unindexed_filtering_retrieve,
            unindexed_filtering_update,
            search_max_hnsw_ef,
            search_allow_exact,
            search_max_oversampling,
            upsert_max_batchsize,
            search_max_batchsize,
            max_collection_vector_size_bytes,
            read_rate_limit,
            write_rate_limit,
            max_collection_payload_size_bytes,
            max_points_count,
            filter_max_conditions,
            condition_max_size,
            max_payload_index_count,
            max_resident_memory_percent
        );
        if let Some(c) = change.multivector_config {
            self.multivector_config.get_or_insert_default().extend(c);
        }
        if let Some(c) = change.sparse_config {
            self.sparse_config.get_or_insert_default().extend(c);
        }
    }

    /// The limits a request can be judged by alone (sizes, search effort, batch sizes,
    /// filter sizes, vector lengths, rates). In a cluster the node that receives a request
    /// checks these once, before it is logged or fanned out over the shards, so the reads
    /// it makes of each shard on the request's behalf are not judged again.
    pub fn request_limits(&self) -> StrictMode {
        StrictMode {
            unindexed_filtering_retrieve: None,
            unindexed_filtering_update: None,
            max_collection_vector_size_bytes: None,
            max_points_count: None,
            max_payload_index_count: None,
            ..self.clone()
        }
    }

    /// The limits only the data can judge (which payload fields are indexed, how large the
    /// collection is, how many indexes it has; a replica knows the size of its own shard,
    /// so size limits hold per shard): what a cluster's replica checks of the requests routed to it, since
    /// every replica that applies the log to the same point judges a write the same way.
    pub fn data_limits(&self) -> StrictMode {
        StrictMode {
            enabled: self.enabled,
            unindexed_filtering_retrieve: self.unindexed_filtering_retrieve,
            unindexed_filtering_update: self.unindexed_filtering_update,
            max_collection_vector_size_bytes: self.max_collection_vector_size_bytes,
            max_points_count: self.max_points_count,
            max_payload_index_count: self.max_payload_index_count,
            ..StrictMode::default()
        }
    }

    /// Refuses limits that make no sense (Qdrant's schema minimums).
    pub fn check(&self) -> Result<()> {
        for (name, value) in [
            ("max_query_limit", self.max_query_limit),
            ("max_timeout", self.max_timeout),
            ("read_rate_limit", self.read_rate_limit),
            ("write_rate_limit", self.write_rate_limit),
            ("max_points_count", self.max_points_count),
        ] {
            if value == Some(0) {
                return Err(DbError::InvalidInput(format!(
                    "strict_mode_config.{name}: value 0 invalid, must be 1 or larger"
                )));
            }
        }
        if self.max_collection_payload_size_bytes.is_some() {
            return Err(DbError::InvalidInput(
                "strict_mode_config.max_collection_payload_size_bytes is not supported: diskvec \
                 does not measure a collection's payload storage (limit max_points_count or \
                 max_collection_vector_size_bytes instead)"
                    .into(),
            ));
        }
        if self
            .search_max_oversampling
            .is_some_and(|o| !o.is_finite() || o < 0.0)
        {
            return Err(DbError::InvalidInput(
                "strict_mode_config.search_max_oversampling must be a non-negative number".into(),
            ));
        }
        Ok(())
    }

    /// `value` within `limit` (either absent: no check).
    pub fn check_limit(value: Option<usize>, limit: Option<usize>, name: &str) -> Result<()> {
        match (value, limit) {
            (Some(v), Some(l)) if v > l => Err(violation(
                format!("Limit exceeded {v} > {l} for \"{name}\""),
                format!("Reduce the \"{name}\" parameter to or below {l}."),
            )),
            _ => Ok(()),
        }
    }

    /// The parameters of one search: its `limit`, `hnsw_ef`, `exact` and oversampling.
    pub fn check_search(
        &self,
        limit: Option<usize>,
        hnsw_ef: Option<usize>,
        exact: bool,
        oversampling: Option<f64>,
    ) -> Result<()> {
        Self::check_limit(limit, self.max_query_limit, "limit")?;
        Self::check_limit(hnsw_ef, self.search_max_hnsw_ef, "hnsw_ef")?;
        if exact && self.search_allow_exact == Some(false) {
            return Err(violation("Exact search disabled!", "Set exact=false."));
        }
        if let (Some(o), Some(max)) = (oversampling, self.search_max_oversampling) {
            if o > max {
                return Err(violation(
                    format!("Limit exceeded {o} > {max} for \"oversampling\""),
                    format!("Reduce the \"oversampling\" parameter to or below {max}."),
                ));
            }
        }
        Ok(())
    }

    /// The payload keys a formula query reads (with the index kinds that answer each):
    /// where unindexed filtering is off, each needs such an index, as a filter's keys do.
    pub fn check_formula_keys(
        &self,
        keys: &[(String, &[&str])],
        indexes: &[(String, String)],
    ) -> Result<()> {
        if self.unindexed_filtering_retrieve != Some(false) {
            return Ok(());
        }
        for (key, kinds) in keys {
            let indexed = indexes
                .iter()
                .any(|(field, kind)| field == key && kinds.contains(&kind.as_str()));
            if !indexed {
                return Err(violation(
                    format!(
                        "Index required but not found for \"{key}\" of one of the following \
                         types: [{}]",
                        kinds.join(", ")
                    ),
                    "Create an index for this key or use a different formula expression.",
                ));
            }
        }
        Ok(())
    }

    /// A filter of a read (`write == false`) or of a filtered write: its size, and, where
    /// unindexed filtering is off, that every field it reads has a payload index of a kind
    /// that answers it (`indexes`: field and kind of each index).
    pub fn check_filter(
        &self,
        filter: &Filter,
        write: bool,
        indexes: &[(String, String)],
    ) -> Result<()> {
        let allow = if write {
            self.unindexed_filtering_update
        } else {
            self.unindexed_filtering_retrieve
        };
        if allow == Some(false) {
            for used in filter.field_uses() {
                let indexed = indexes
                    .iter()
                    .any(|(field, kind)| *field == used.key && used.kinds.contains(&&**kind));
                if !indexed {
                    return Err(violation(
                        format!(
                            "Index required but not found for \"{}\" of one of the following \
                             types: [{}]",
                            used.key,
                            used.kinds.join(", ")
                        ),
                        "Create an index for this key or use a different filter.",
                    ));
                }
            }
        }
        if let Some(max) = self.filter_max_conditions {
            let n = filter.condition_count();
            if n > max {
                return Err(violation(
                    format!("Filter condition limit reached ({n} > {max})"),
                    "Reduce the amount of conditions of your filter.",
                ));
            }
        }
        if let Some(max) = self.condition_max_size {
            let n = filter.largest_condition();
            if n > max {
                return Err(violation(
                    format!("Condition size limit reached ({n} > {max})"),
                    "Reduce the size of your condition.",
                ));
            }
        }
        Ok(())
    }

    /// A group-by key where unindexed filtering is off: it needs an index that matches
    /// values (keyword, integer, uuid, bool).
    pub fn check_group_by(&self, key: &str, indexes: &[(String, String)]) -> Result<()> {
        if self.unindexed_filtering_retrieve != Some(false) {
            return Ok(());
        }
        match indexes.iter().find(|(field, _)| field == key) {
            None => Err(violation(
                format!("Index required but not found for \"{key}\""),
                "Create an index supporting `match` for this key.",
            )),
            Some((_, kind)) if !["keyword", "integer", "uuid", "bool"].contains(&&**kind) => {
                Err(violation(
                    format!(
                        "Index of type \"{}\" found for \"{key}\"",
                        capitalised(kind)
                    ),
                    "Create an index supporting `match` for this key.",
                ))
            }
            Some(_) => Ok(()),
        }
    }

    /// The vectors of a write, per space name: sparse lengths and multivector row counts.
    pub fn check_vectors<'a>(
        &self,
        vectors: impl IntoIterator<Item = (&'a str, &'a crate::Vector)>,
    ) -> Result<()> {
        for (name, vector) in vectors {
            match vector {
                crate::Vector::Sparse(s) => {
                    let limit = self
                        .sparse_config
                        .as_ref()
                        .and_then(|c| c.get(name))
                        .and_then(|l| l.max_length);
                    if let Some(max) = limit.filter(|&max| s.len() > max) {
                        return Err(violation(
                            format!("Sparse vector '{name}' has a limit of {max} indices, but {} were provided!", s.len()),
                            "Reduce the number of indices.",
                        ));
                    }
                }
                crate::Vector::Multi(rows) => {
                    let limit = self
                        .multivector_config
                        .as_ref()
                        .and_then(|c| c.get(name))
                        .and_then(|l| l.max_vectors);
                    if let Some(max) = limit.filter(|&max| rows.len() > max) {
                        return Err(violation(
                            format!("Multivector '{name}' has a limit of {max} vectors, but {} were provided!", rows.len()),
                            "Reduce the number of vectors.",
                        ));
                    }
                }
                crate::Vector::Dense(_) => {}
            }
        }
        Ok(())
    }

    /// A write that adds data, against the collection's size now.
    pub fn check_size(&self, size: &CollectionSize) -> Result<()> {
        if let Some(max) = self.max_collection_vector_size_bytes {
            if size.vector_bytes >= max as u64 {
                return Err(DbError::BadRequest(format!(
                    "Max vector storage size limit of {}MB reached!",
                    max as f64 / (1024.0 * 1024.0)
                )));
            }
        }
        if let Some(max) = self.max_points_count {
            if size.points >= max as u64 {
                return Err(DbError::BadRequest(format!(
                    "Max points count limit of {max} reached!"
                )));
            }
        }
        Ok(())
    }
}

/// What the size limits are checked against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectionSize {
    pub points: u64,
    /// The points' vectors at 4 bytes a number (dense, sparse entries at 8, multivector rows).
    pub vector_bytes: u64,
}

/// `geo` as Qdrant names the kind in its messages: `Geo`.
fn capitalised(kind: &str) -> String {
    let mut c = kind.chars();
    c.next()
        .map(|first| first.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn violation(what: impl std::fmt::Display, help: impl std::fmt::Display) -> DbError {
    DbError::BadRequest(format!("{what}. Help: {help}"))
}

/// Which of a collection's two rates a request spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    Read,
    Write,
}

impl Rate {
    fn name(self) -> &'static str {
        match self {
            Rate::Read => "Read",
            Rate::Write => "Write",
        }
    }
}

/// A collection's read and write token buckets, made when strict mode first charges one
/// and made anew when its rate changes.
#[derive(Debug, Default)]
pub struct Rates {
    read: Option<RateLimiter>,
    write: Option<RateLimiter>,
}

impl Rates {
    /// Spends `cost` of `strict`'s read or write rate (nothing when strict mode is off or
    /// sets no such rate).
    pub fn charge(&mut self, strict: &StrictMode, rate: Rate, cost: usize) -> Result<()> {
        let limit = match rate {
            Rate::Read => strict.read_rate_limit,
            Rate::Write => strict.write_rate_limit,
        };
        let Some(per_minute) = limit.filter(|_| strict.is_enabled()) else {
            return Ok(());
        };
        let bucket = match rate {
            Rate::Read => &mut self.read,
            Rate::Write => &mut self.write,
        };
        match bucket {
            Some(b) if b.per_minute() == per_minute => b.take(cost, rate),
            _ => bucket.insert(RateLimiter::new(per_minute)).take(cost, rate),
        }
    }
}

/// A token bucket of `per_minute` tokens, full at start, refilled continuously.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: usize,
    tokens: f64,
    checked: Instant,
}

impl RateLimiter {
    pub fn new(per_minute: usize) -> Self {
        Self {
            per_minute,
            tokens: per_minute as f64,
            checked: Instant::now(),
        }
    }

    pub fn per_minute(&self) -> usize {
        self.per_minute
    }

    /// Takes `cost` tokens, or says how long until there are enough.
    pub fn take(&mut self, cost: usize, rate: Rate) -> Result<()> {
        let kind = rate.name();
        if cost > self.per_minute {
            return Err(DbError::RateLimited {
                message: format!(
                    "{kind} rate limit exceeded, request larger than rate limiter capacity, \
                     please try to split your request"
                ),
                retry_after: None,
            });
        }
        let now = Instant::now();
        let per_second = self.per_minute as f64 / 60.0;
        self.tokens = (self.tokens + per_second * now.duration_since(self.checked).as_secs_f64())
            .min(self.per_minute as f64);
        self.checked = now;
        if self.tokens >= cost as f64 {
            self.tokens -= cost as f64;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((cost as f64 - self.tokens) / per_second);
        let seconds = wait.as_secs_f64().ceil() as u64;
        Err(DbError::RateLimited {
            message: format!(
                "{kind} rate limit exceeded: Operation requires {cost} tokens but only {:.1} were \
                 available. Retry after {seconds}s",
                self.tokens
            ),
            retry_after: Some(Duration::from_secs(seconds)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_starts_full_refuses_when_empty_and_says_how_long_to_wait() {
        let mut r = RateLimiter::new(60);
        for _ in 0..60 {
            r.take(1, Rate::Read).unwrap();
        }
        match r.take(2, Rate::Read) {
            Err(DbError::RateLimited {
                message,
                retry_after: Some(wait),
            }) => {
                assert!(message.starts_with("Read rate limit exceeded: Operation requires 2"));
                assert!((1..=3).contains(&wait.as_secs()), "{wait:?}");
            }
            other => panic!("{other:?}"),
        }
        let err = r.take(61, Rate::Write).unwrap_err();
        assert!(err
            .to_string()
            .contains("larger than rate limiter capacity"));
    }

    #[test]
    fn request_and_data_limits_split_every_limit_between_router_and_replica() {
        let all = StrictMode {
            enabled: Some(true),
            max_query_limit: Some(5),
            unindexed_filtering_retrieve: Some(false),
            unindexed_filtering_update: Some(false),
            upsert_max_batchsize: Some(10),
            read_rate_limit: Some(60),
            write_rate_limit: Some(60),
            max_points_count: Some(100),
            max_collection_vector_size_bytes: Some(1 << 20),
            max_payload_index_count: Some(2),
            filter_max_conditions: Some(3),
            ..Default::default()
        };
        let (request, data) = (all.request_limits(), all.data_limits());
        assert!(request.is_enabled() && data.is_enabled());
        // Each limit is checked on exactly one side.
        let as_json = |s: &StrictMode| serde_json::to_value(s).unwrap();
        let (r, d) = (as_json(&request), as_json(&data));
        for (key, value) in as_json(&all).as_object().unwrap() {
            if key == "enabled" {
                continue;
            }
            assert!(r.get(key).is_some() != d.get(key).is_some(), "{key}");
            assert_eq!(r.get(key).or(d.get(key)), Some(value), "{key}");
        }
        // A replica spends no rate and refuses no request by its shape ...
        let mut rates = Rates::default();
        for _ in 0..100 {
            rates.charge(&data, Rate::Read, 1).unwrap();
        }
        assert!(data.check_search(Some(1000), None, true, None).is_ok());
        // ... but judges what only its data can.
        let f =
            Filter::from_json(&serde_json::json!({"must": [{"key": "a", "match": {"value": 1}}]}))
                .unwrap();
        assert!(data.check_filter(&f, false, &[]).is_err());
        assert!(request.check_filter(&f, false, &[]).is_ok());
        let size = CollectionSize {
            points: 100,
            vector_bytes: 0,
        };
        assert!(data.check_size(&size).is_err());
        assert!(request.check_size(&size).is_ok());
    }

    #[test]
    fn merging_keeps_what_a_patch_does_not_name() {
        let mut s = StrictMode {
            enabled: Some(true),
            max_query_limit: Some(10),
            ..Default::default()
        };
        s.merge(StrictMode {
            search_max_hnsw_ef: Some(4),
            ..Default::default()
        });
        assert_eq!(s.max_query_limit, Some(10));
        assert_eq!(s.search_max_hnsw_ef, Some(4));
        assert!(s.check_search(Some(10), Some(4), false, None).is_ok());
        let err = s.check_search(Some(11), None, false, None).unwrap_err();
        assert!(err.to_string().contains("\"limit\""), "{err}");
        let err = s.check_search(None, Some(5), false, None).unwrap_err();
        assert!(err.to_string().contains("hnsw_ef"), "{err}");
    }

    #[test]
    fn unindexed_fields_are_refused_only_where_the_setting_says_so() {
        let f = Filter::from_json(&serde_json::json!(
            {"must": [{"key": "city", "match": {"value": "Berlin"}}]}
        ))
        .unwrap();
        let mut s = StrictMode {
            enabled: Some(true),
            unindexed_filtering_retrieve: Some(false),
            ..Default::default()
        };
        let err = s.check_filter(&f, false, &[]).unwrap_err();
        assert!(err.to_string().contains("\"city\""), "{err}");
        // An index of a kind that cannot answer a keyword match does not count.
        let wrong = [("city".to_string(), "integer".to_string())];
        assert!(s.check_filter(&f, false, &wrong).is_err());
        let right = [("city".to_string(), "keyword".to_string())];
        s.check_filter(&f, false, &right).unwrap();
        // Writes have their own setting.
        s.check_filter(&f, true, &[]).unwrap();
        s.unindexed_filtering_retrieve = None;
        s.filter_max_conditions = Some(0);
        assert!(s.check_filter(&f, false, &[]).is_err());
    }
}
