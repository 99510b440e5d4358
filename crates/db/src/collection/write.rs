//! The write path: check, log, apply, wait for durability.

use std::time::{Duration, Instant};

use diskvec_vector::check_vectors;

use super::{lock, Collection, Inner};
use crate::config::space_suffix;
use crate::filter::Filter;
use crate::ops::{Operation, PointRecord, SpaceTypes, StoredPoint};
use crate::vectors::{NamedVectors, PointVectors, Vector};
use crate::wal::RecordBuf;
use crate::{DbError, Payload, PointId, Result};

/// Points one write may carry (VectorDBBench writes 100 at a time; a bulk import a few
/// thousand).
pub const MAX_BATCH: usize = 100_000;

/// Deepest nesting of objects and arrays in a payload (serde_json reads at most 128).
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// Levels of objects and arrays in a JSON value, iteratively (no recursion on user data).
fn json_depth(v: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => {
                deepest = deepest.max(d);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            serde_json::Value::Object(o) => {
                deepest = deepest.max(d);
                stack.extend(o.values().map(|x| (x, d + 1)));
            }
            _ => deepest = deepest.max(d - 1),
        }
    }
    deepest
}

/// Bytes (vectors, links, payloads: `segment_footprint`) that frozen segments may hold
/// while they wait for sealing before writers are held back (at least two segments' worth).
/// One segment's worth stalled every write for the whole first seal whenever writes outpaced
/// it (16 s for 100 points on two cores); the worker now seals queued segments together, so
/// a longer queue costs memory, not builds.
const FROZEN_BYTES: usize = 1 << 30;
/// ... and no more than this share of the memory available when the collection opened (in
/// a memory cgroup, of its room), so a small machine or container is not filled by writes
/// waiting for their seals ...
const FROZEN_SHARE: f64 = 0.25;
/// ... and at most this many segments, however small.
const MAX_FROZEN: usize = 16;

/// Frozen segments of `segment_bytes` each that may wait for sealing before writers are
/// held back, with `available` bytes of memory (see `FROZEN_BYTES`).
pub(crate) fn frozen_limit(segment_bytes: usize, available: u64) -> usize {
    let room = FROZEN_BYTES.min((available as f64 * FROZEN_SHARE) as usize);
    (room / segment_bytes.max(1)).clamp(2, MAX_FROZEN)
}

/// What a full growing segment holds in DRAM against its vectors' bytes: its HNSW links, ids,
/// versions and payloads come on top (measured: 80-92 MB for 20,000 x 768 float32 vectors,
/// 61 MB, with small payloads).
const SEGMENT_OVERHEAD: f64 = 1.5;

/// How long after the last write a collection counts as being written to (`write_room`).
const WRITES_QUIET: Duration = Duration::from_secs(30);

/// DRAM one full growing segment of this collection is expected to hold.
pub(crate) fn segment_footprint(config: &crate::config::CollectionConfig) -> usize {
    (config.seal_threshold as f64 * config.dense_numbers() as f64 * 4.0 * SEGMENT_OVERHEAD) as usize
}

impl Inner {
    /// Whether a write came within `quiet`. Three questions ask it, each with its own span:
    /// whether writers may still need buffer room (`WRITES_QUIET`, 30 s: memory given to a
    /// merge is not taken back before its end), whether merges are tiered
    /// (`merge_policy::WRITES_PAUSED`, 2 s: a wrong guess costs one merge) and whether the
    /// idle merge into one segment is due (the collection's `idle_merge_ms`, a setting).
    pub(crate) fn written_within(&self, quiet: Duration) -> bool {
        lock(&self.last_write).elapsed() < quiet
    }

    /// Whether a write came within `WRITES_QUIET`: writers may still be coming.
    pub(crate) fn written_lately(&self) -> bool {
        self.written_within(WRITES_QUIET)
    }

    /// Bytes the write buffer may still take before writers are held back: room for
    /// `frozen_limit` frozen segments and the growing one, each at the larger of the expected
    /// footprint and the largest held now, less what they hold now. The automatic search budget
    /// and merges leave it free (seals do not: they drain it): planned from the memory
    /// available when a seal switched in, they would otherwise count as spare the memory the
    /// next writes take (measured: a 10M x 768 import in a 4 GiB cgroup was OOM-killed at 1.2M
    /// points, 1.5 GB of frozen segments beside 0.8 GB of node caches and a 1 GB seal).
    ///
    /// After `WRITES_QUIET` without a write only the active segment's room counts: a merge
    /// started by `optimize` or the idle merge after a load gets the memory no writer uses.
    ///
    /// Lock order: the collection's state, then each growing segment's lock (as writers).
    pub(crate) fn write_room(&self) -> u64 {
        let writing = self.written_lately();
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let held: Vec<usize> = state
            .segments
            .values()
            .filter_map(|s| match s {
                crate::segment::Segment::Growing(g) => {
                    Some(g.read().unwrap_or_else(|e| e.into_inner()).dram_bytes())
                }
                crate::segment::Segment::Sealed(_) => None,
            })
            .collect();
        let each = held
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(segment_footprint(&state.config));
        let segments = if writing { self.frozen_limit + 1 } else { 1 };
        let may_hold = segments * each;
        may_hold.saturating_sub(held.iter().sum()) as u64
    }
}

impl Inner {
    /// Whether writers are paced or held back behind the frozen segments queued for their
    /// seals: those seals are waited for (`background::BuildPriority::OverdueSeal`).
    pub(crate) fn writers_held_back(&self) -> bool {
        self.holds_back(self.frozen_count())
    }

    /// `writers_held_back` with `queued` frozen segments.
    fn holds_back(&self, queued: usize) -> bool {
        queued >= super::pacer::pacing_from(self.frozen_limit)
    }

    /// Logs and applies one operation; returns once it is durable (per the collection's
    /// durability setting).
    /// An upsert adds vectors to the growing segment, so it waits for room (until
    /// `deadline`, if any: then it is refused unwritten); a delete adds none and never waits.
    fn write(&self, operation: Operation, deadline: Option<Instant>) -> Result<u64> {
        let record = self.encode(&operation)?;
        if let Operation::Upsert(points) = &operation {
            self.pace(points.len(), deadline);
            self.wait_for_room(deadline)?;
        }
        let guard = lock(&self.writer);
        self.log_and_apply(guard, operation, record)
    }

    /// The log record of `operation`, refused (nothing written) if a payload's JSON is over
    /// the collection's limit: it is measured as it is written into the record.
    fn encode(&self, operation: &Operation) -> Result<RecordBuf> {
        let config = self.config();
        let (max, types) = (config.max_payload_bytes, SpaceTypes::of(&config));
        RecordBuf::encode(|out| operation.encode_into(out, max, &types)).map_err(|e| {
            DbError::InvalidInput(format!(
                "point {}: payload is {} bytes; at most {max}",
                e.id, e.bytes
            ))
        })
    }

    /// Logs `operation` (encoded as `record`) and applies it (its points move into the
    /// growing segment) while `guard` holds the writer lock, then releases it and returns
    /// once the write is durable. A caller that read the state to make `operation` holds the
    /// same guard from that read on, so no other write lands in between.
    fn log_and_apply(
        &self,
        guard: std::sync::MutexGuard<'_, ()>,
        operation: Operation,
        record: RecordBuf,
    ) -> Result<u64> {
        self.check_writable()?;
        let op = self.wal.append_record(record)?;
        let froze = self
            .state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(op, operation);
        *lock(&self.last_write) = std::time::Instant::now();
        drop(guard);
        if froze {
            self.wake_background();
        }
        self.wake_indexer();
        // In interval mode the log's flusher makes the write durable within the interval.
        if self.config().durability == crate::config::Durability::Sync {
            self.wal.wait_durable(op)?;
        }
        Ok(op)
    }

    /// Waits this upsert's turn while frozen segments queue (`pacer.rs`), never past
    /// `deadline`.
    fn pace(&self, points: usize, deadline: Option<Instant>) {
        let queued = self.frozen_count();
        if self.holds_back(queued) {
            crate::background::hurry_seals();
        }
        let now = Instant::now();
        let mut wait = lock(&self.pacer).delay(now, points, queued, self.frozen_limit);
        if let Some(deadline) = deadline {
            wait = wait.min(deadline.saturating_duration_since(now));
        }
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// Holds writers back while frozen segments hold `FROZEN_BYTES` of vectors (and at least
    /// two wait), so memory stays bounded when writes outpace the builds; fails if sealing
    /// is failing, and once `deadline` passes (`DbError::Busy`: nothing was written, the
    /// caller may retry).
    fn wait_for_room(&self, deadline: Option<Instant>) -> Result<()> {
        let max_frozen = self.frozen_limit;
        loop {
            let frozen = self.frozen_count();
            if frozen < max_frozen {
                return Ok(());
            }
            // A writer held back is not a pause in writes: the idle merge (everything in
            // one build, while this writer would wait for all of it) must not start.
            *lock(&self.last_write) = Instant::now();
            let bg = lock(&self.background);
            if let Some(e) = bg.error.as_ref().filter(|_| bg.sealing_failed) {
                return Err(DbError::Unavailable(format!(
                    "collection {:?} has {frozen} segments waiting to be sealed and {e}",
                    self.name
                )));
            }
            if bg.stop {
                return Err(DbError::Unavailable(format!(
                    "collection {:?} is closing",
                    self.name
                )));
            }
            let mut step = Duration::from_millis(100);
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(DbError::Busy(format!(
                        "collection {:?} holds writes back while {frozen} segments wait to be \
                         sealed (indexing is behind ingest); nothing was written, retry later",
                        self.name
                    )));
                }
                step = step.min(left);
            }
            let _ = self
                .wake
                .wait_timeout(bg, step)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Refuses a payload nested deeper than `MAX_PAYLOAD_DEPTH` (the log's JSON reader
    /// would refuse it on replay). Its size is checked as it is encoded (`encode`).
    fn check_payload(&self, id: PointId, payload: &Payload) -> Result<()> {
        let depth = payload.values().map(json_depth).max().unwrap_or(0) + 1;
        if depth > MAX_PAYLOAD_DEPTH {
            return Err(DbError::InvalidInput(format!(
                "point {id}: payload nests {depth} levels deep; at most {MAX_PAYLOAD_DEPTH}"
            )));
        }
        Ok(())
    }

    /// Checks points and prepares their vectors for their spaces' metrics; nothing is
    /// written when any point is refused.
    fn check_points(&self, points: Vec<PointRecord>) -> Result<Vec<StoredPoint>> {
        if points.len() > MAX_BATCH {
            return Err(DbError::InvalidInput(format!(
                "{} points in one write; at most {MAX_BATCH}",
                points.len()
            )));
        }
        points
            .into_iter()
            .map(|p| {
                self.check_payload(p.id, &p.payload)?;
                Ok(StoredPoint {
                    id: p.id,
                    vectors: self.checked_vectors(p.id, p.vectors)?,
                    payload: p.payload,
                })
            })
            .collect()
    }

    /// A point's vectors by space index, checked (each in a space of the collection, of its
    /// dimension, finite; sparse ones sorted, without repeated indices) and prepared.
    fn checked_vectors(&self, id: PointId, named: NamedVectors) -> Result<PointVectors> {
        let mut out = PointVectors::default();
        let refuse = |m: String| DbError::InvalidInput(format!("point {id}: {m}"));
        let config = self.config();
        for (name, vector) in named {
            // One vector given for a multivector space is a multivector of one row.
            let vector = match vector {
                Vector::Dense(v)
                    if config.dense_space(&name).is_none()
                        && config.multi_space(&name).is_some() =>
                {
                    Vector::Multi(vec![v])
                }
                other => other,
            };
            match vector {
                Vector::Dense(mut v) => {
                    let space = self
                        .config()
                        .dense_space(&name)
                        .ok_or_else(|| refuse(self.unknown_space(&name, "dense")))?;
                    let s = &self.config().dense[space];
                    if v.len() != s.dim {
                        return Err(DbError::InvalidInput(crate::config::dimension_error(
                            s.dim,
                            v.len(),
                            &format!(
                                " (point {id}, collection {:?}{})",
                                self.name,
                                space_suffix(&name)
                            ),
                        )));
                    }
                    check_vectors(&v, s.dim).map_err(|e| refuse(e.to_string()))?;
                    s.metric.prepare(&mut v);
                    s.round_to_datatype(&mut v).map_err(refuse)?;
                    out.set_dense(space, v);
                }
                Vector::Sparse(v) => {
                    let space = self
                        .config()
                        .sparse_space(&name)
                        .ok_or_else(|| refuse(self.unknown_space(&name, "sparse")))?;
                    out.set_sparse(space, v.checked().map_err(refuse)?);
                }
                Vector::Multi(rows) => {
                    let space = self
                        .config()
                        .multi_space(&name)
                        .ok_or_else(|| refuse(self.unknown_space(&name, "multi")))?;
                    let s = &self.config().multi[space];
                    out.set_multi(space, self.checked_rows(&name, s, rows).map_err(refuse)?);
                }
            }
        }
        Ok(out)
    }

    /// A multivector's rows, each of the space's dimension and finite (at least one),
    /// prepared for its metric and laid back to back.
    fn checked_rows(
        &self,
        name: &str,
        space: &crate::config::DenseSpace,
        rows: Vec<Vec<f32>>,
    ) -> std::result::Result<Vec<f32>, String> {
        if rows.is_empty() {
            return Err(format!(
                "a multivector needs at least one vector{}",
                space_suffix(name)
            ));
        }
        let mut out = Vec::with_capacity(rows.len() * space.dim);
        for mut row in rows {
            if row.len() != space.dim {
                return Err(crate::config::dimension_error(
                    space.dim,
                    row.len(),
                    &format!(" (collection {:?}{})", self.name, space_suffix(name)),
                ));
            }
            check_vectors(&row, space.dim).map_err(|e| e.to_string())?;
            space.metric.prepare(&mut row);
            space.round_to_datatype(&mut row)?;
            out.extend_from_slice(&row);
        }
        Ok(out)
    }

    /// Why a vector for space `name` of `kind` ("dense", "sparse" or "multi") is refused.
    fn unknown_space(&self, name: &str, kind: &str) -> String {
        let c = &self.config();
        let other = [
            ("dense", c.dense_space(name)),
            ("sparse", c.sparse_space(name)),
            ("multi", c.multi_space(name)),
        ]
        .into_iter()
        .find(|(k, at)| *k != kind && at.is_some())
        .map(|(k, _)| if k == "multi" { "multivector" } else { k });
        let kind = if kind == "multi" { "multivector" } else { kind };
        match other {
            Some(other) => format!(
                "vector space {name:?} of collection {:?} is {other}, the vector {kind}",
                self.name
            ),
            None if name.is_empty() => format!(
                "collection {:?} has no unnamed vector space; name one of its spaces",
                self.name
            ),
            None => format!(
                "collection {:?} has no vector space named {name:?}",
                self.name
            ),
        }
    }

    /// Stored vectors (already checked and prepared) by space index again.
    fn stored(&self, named: NamedVectors) -> PointVectors {
        let mut out = PointVectors::default();
        for (name, vector) in named {
            match vector {
                Vector::Dense(v) => {
                    if let Some(space) = self.config().dense_space(&name) {
                        out.set_dense(space, v);
                    }
                }
                Vector::Sparse(v) => {
                    if let Some(space) = self.config().sparse_space(&name) {
                        out.set_sparse(space, v);
                    }
                }
                Vector::Multi(rows) => {
                    if let Some(space) = self.config().multi_space(&name) {
                        out.set_multi(space, rows.concat());
                    }
                }
            }
        }
        out
    }

    pub(crate) fn upsert(
        &self,
        points: Vec<PointRecord>,
        deadline: Option<Instant>,
    ) -> Result<u64> {
        let points = self.check_points(points)?;
        if points.is_empty() {
            return Ok(self.wal.last_op());
        }
        self.write(Operation::Upsert(points), deadline)
    }

    /// An upsert that writes only some of `points`, chosen under the writer lock by what is
    /// stored now: `mode` by whether a point exists, `update_filter` (for points that exist)
    /// by its stored payload. The chosen points are logged as an ordinary upsert.
    pub(crate) fn upsert_if(
        &self,
        points: Vec<PointRecord>,
        mode: UpsertMode,
        update_filter: Option<&Filter>,
        deadline: Option<Instant>,
    ) -> Result<u64> {
        if mode == UpsertMode::Upsert && update_filter.is_none() {
            return self.upsert(points, deadline);
        }
        let points = self.check_points(points)?;
        if points.is_empty() {
            return Ok(self.wal.last_op());
        }
        self.pace(points.len(), deadline);
        self.wait_for_room(deadline)?;
        let guard = lock(&self.writer);
        let ids: Vec<PointId> = points.iter().map(|p| p.id).collect();
        let filtered = update_filter.is_some();
        let stored = self.records(&ids, filtered, filtered)?;
        let texts = self.text_fields();
        let chosen: Vec<StoredPoint> = points
            .into_iter()
            .filter(|p| match stored.iter().find(|r| r.id == p.id) {
                None => mode != UpsertMode::UpdateOnly,
                Some(r) => {
                    mode != UpsertMode::InsertOnly
                        && update_filter.is_none_or(|f| stored_matches(f, r, &texts))
                }
            })
            .collect();
        if chosen.is_empty() {
            return Ok(self.wal.last_op());
        }
        let operation = Operation::Upsert(chosen);
        let record = self.encode(&operation)?;
        self.log_and_apply(guard, operation, record)
    }

    pub(crate) fn delete(&self, ids: Vec<PointId>) -> Result<u64> {
        if ids.len() > MAX_BATCH {
            return Err(DbError::InvalidInput(format!(
                "{} ids in one delete; at most {MAX_BATCH}",
                ids.len()
            )));
        }
        if ids.is_empty() {
            return Ok(self.wal.last_op());
        }
        self.write(Operation::Delete(ids), None)
    }

    /// Deletes every point matching `filter`. The matches are resolved under the writer
    /// lock and logged as ids, so replay deletes exactly these.
    pub(crate) fn delete_where(&self, filter: &Filter) -> Result<(u64, usize)> {
        let guard = lock(&self.writer);
        let ids = self.matching_ids(Some(filter), None, usize::MAX)?;
        drop(guard);
        // A write between the two locks is ordered after the match; deleting an id that a
        // later write re-created is what a user sending both would expect of either order.
        let n = ids.len();
        let mut last = self.wal.last_op();
        for chunk in ids.chunks(MAX_BATCH) {
            last = self.delete(chunk.to_vec())?;
        }
        Ok((last, n))
    }

    /// Rewrites the payloads of `ids` with `change` (see `update_points`).
    pub(crate) fn update_payloads(
        &self,
        ids: &[PointId],
        change: &dyn Fn(&mut Payload),
    ) -> Result<u64> {
        self.update_points(ids, &|p| {
            change(&mut p.payload);
            self.check_payload(p.id, &p.payload)
        })
    }

    /// Rewrites the points `ids` (each once, however often it is listed) with `change` and
    /// logs their new full contents, so replay needs no earlier state. Unknown ids are an
    /// error and nothing is written; so is a change that fails. The points are read and the
    /// update logged in one turn of the writer lock: an upsert between the two would
    /// otherwise be overwritten with what it replaced.
    pub(crate) fn update_points(
        &self,
        ids: &[PointId],
        change: &dyn Fn(&mut StoredPoint) -> Result<()>,
    ) -> Result<u64> {
        self.update_points_if(ids, None, change)
    }

    /// `update_points`, leaving the points whose stored payload does not match `only` as
    /// they are.
    pub(crate) fn update_points_if(
        &self,
        ids: &[PointId],
        only: Option<&Filter>,
        change: &dyn Fn(&mut StoredPoint) -> Result<()>,
    ) -> Result<u64> {
        if ids.len() > MAX_BATCH {
            return Err(DbError::InvalidInput(format!(
                "{} ids in one update; at most {MAX_BATCH}",
                ids.len()
            )));
        }
        let mut unique = ids.to_vec();
        unique.sort_unstable();
        unique.dedup();
        // It rewrites whole points: it waits its turn as an upsert of as many would.
        self.pace(unique.len(), None);
        self.wait_for_room(None)?;
        let guard = lock(&self.writer);
        let records = self.records(&unique, true, true)?;
        // Tests hold the update here, between its read and its write, while an upsert of
        // the same point is sent.
        crate::delay_point("payload:read");
        if let Some(missing) = unique
            .iter()
            .find(|id| !records.iter().any(|r| r.id == **id))
        {
            return Err(DbError::PointNotFound(*missing));
        }
        let mut points = Vec::with_capacity(records.len());
        let texts = self.text_fields();
        for r in records {
            if only.is_some_and(|f| !stored_matches(f, &r, &texts)) {
                continue;
            }
            // The vectors are stored ones, already prepared: preparing twice would move
            // them by rounding.
            let mut p = StoredPoint {
                id: r.id,
                vectors: self.stored(r.vectors.unwrap_or_default()),
                payload: r.payload.unwrap_or_default(),
            };
            change(&mut p)?;
            points.push(p);
        }
        if points.is_empty() {
            return Ok(self.wal.last_op());
        }
        let operation = Operation::Upsert(points);
        let record = self.encode(&operation)?;
        self.log_and_apply(guard, operation, record)
    }

    /// Sets the vectors given of existing points (in the spaces named; their other vectors
    /// and payloads are kept). A point listed several times takes its changes in order.
    pub(crate) fn update_vectors(
        &self,
        points: Vec<(PointId, NamedVectors)>,
        only: Option<&Filter>,
    ) -> Result<u64> {
        let mut checked = Vec::with_capacity(points.len());
        for (id, named) in points {
            if named.is_empty() {
                return Err(DbError::InvalidInput(format!(
                    "point {id}: no vector to update"
                )));
            }
            checked.push((id, self.checked_vectors(id, named)?));
        }
        let ids: Vec<PointId> = checked.iter().map(|(id, _)| *id).collect();
        self.update_points_if(&ids, only, &|p| {
            for (_, given) in checked.iter().filter(|(id, _)| *id == p.id) {
                for (space, v) in given.dense.iter().enumerate() {
                    if let Some(v) = v {
                        p.vectors.set_dense(space, v.clone());
                    }
                }
                for (space, v) in given.sparse.iter().enumerate() {
                    if let Some(v) = v {
                        p.vectors.set_sparse(space, v.clone());
                    }
                }
            }
            Ok(())
        })
    }

    /// Removes the vectors of `ids` in the spaces `names` (a point without one there is
    /// left as it is).
    pub(crate) fn delete_vectors(&self, ids: &[PointId], names: &[String]) -> Result<u64> {
        let mut dense = Vec::new();
        let mut sparse = Vec::new();
        for name in names {
            match (
                self.config().dense_space(name),
                self.config().sparse_space(name),
            ) {
                (Some(i), _) => dense.push(i),
                (_, Some(i)) => sparse.push(i),
                _ => {
                    return Err(DbError::InvalidInput(format!(
                        "Not existing vector name error: {name}"
                    )))
                }
            }
        }
        self.update_points(ids, &|p| {
            for &i in &dense {
                if let Some(v) = p.vectors.dense.get_mut(i) {
                    *v = None;
                }
            }
            for &i in &sparse {
                if let Some(v) = p.vectors.sparse.get_mut(i) {
                    *v = None;
                }
            }
            Ok(())
        })
    }
}

impl Collection {
    /// Inserts or replaces points. Returns the operation number (the points' version) once
    /// the write is searchable and durable.
    pub fn upsert(&self, points: Vec<PointRecord>) -> Result<u64> {
        self.inner.upsert(points, None)
    }

    /// `upsert`, refused with `DbError::Busy` (and nothing written) if the collection still
    /// holds writes back at `deadline` (its frozen segments wait for their seals): a server
    /// answers within the request's timeout instead of hanging.
    pub fn upsert_within(&self, points: Vec<PointRecord>, deadline: Instant) -> Result<u64> {
        self.inner.upsert(points, Some(deadline))
    }

    /// `upsert` of the points `mode` and `update_filter` choose, by what is stored when
    /// the write takes its turn: `InsertOnly` skips points that exist, `UpdateOnly` points
    /// that do not, and `update_filter` skips existing points whose stored payload does not
    /// match it (Qdrant's `update_mode` and `update_filter`). Returns the op number.
    pub fn upsert_if(
        &self,
        points: Vec<PointRecord>,
        mode: UpsertMode,
        update_filter: Option<&Filter>,
        deadline: Option<Instant>,
    ) -> Result<u64> {
        self.inner.upsert_if(points, mode, update_filter, deadline)
    }

    /// Deletes points by id (unknown ids are ignored).
    pub fn delete(&self, ids: Vec<PointId>) -> Result<u64> {
        self.inner.delete(ids)
    }

    /// Deletes every point matching `filter`; returns the op and how many matched.
    pub fn delete_where(&self, filter: &Filter) -> Result<(u64, usize)> {
        self.inner.delete_where(filter)
    }

    /// Merges `payload` into the payloads of `ids` (keys present are replaced).
    pub fn set_payload(&self, ids: &[PointId], payload: &Payload) -> Result<u64> {
        self.inner.update_payloads(ids, &|p| {
            for (k, v) in payload {
                p.insert(k.clone(), v.clone());
            }
        })
    }

    /// Merges `payload` into the object at `key` in the payloads of `ids` (Qdrant's
    /// `set_payload` with `key`: `a.b`, `a[0].b`, `a[].b`; objects missing on the way are
    /// made).
    pub fn set_payload_at(&self, ids: &[PointId], key: &str, payload: &Payload) -> Result<u64> {
        let path =
            crate::filter::KeyPath::parse(key).map_err(|e| DbError::InvalidInput(e.to_string()))?;
        self.inner.update_payloads(ids, &|p| path.set(p, payload))
    }

    /// Replaces the payloads of `ids` with `payload`.
    pub fn overwrite_payload(&self, ids: &[PointId], payload: &Payload) -> Result<u64> {
        self.inner.update_payloads(ids, &|p| *p = payload.clone())
    }

    /// Removes `keys` from the payloads of `ids`.
    pub fn delete_payload_keys(&self, ids: &[PointId], keys: &[String]) -> Result<u64> {
        self.inner.update_payloads(ids, &|p| {
            for k in keys {
                p.remove(k);
            }
        })
    }

    /// Empties the payloads of `ids`.
    pub fn clear_payload(&self, ids: &[PointId]) -> Result<u64> {
        self.inner.update_payloads(ids, &|p| p.clear())
    }

    /// Sets the vectors given of existing points, in the spaces named (their other vectors
    /// and their payloads are kept); a point listed twice takes both changes, in order. An
    /// unknown id is refused (`DbError::PointNotFound`) and nothing is written.
    pub fn update_vectors(&self, points: Vec<(PointId, NamedVectors)>) -> Result<u64> {
        self.inner.update_vectors(points, None)
    }

    /// `update_vectors` of the listed points whose stored payload matches `only` (Qdrant's
    /// `update_filter`); the others are left as they are.
    pub fn update_vectors_where(
        &self,
        points: Vec<(PointId, NamedVectors)>,
        only: &Filter,
    ) -> Result<u64> {
        self.inner.update_vectors(points, Some(only))
    }

    /// Removes the vectors of `ids` in the spaces `names`; an unknown space is refused.
    pub fn delete_vectors(&self, ids: &[PointId], names: &[String]) -> Result<u64> {
        self.inner.delete_vectors(ids, names)
    }
}

/// The collection's text indexes by field, as a filter's evaluation looks them up.
type TextFields = Vec<(String, std::sync::Arc<crate::filter::TextIndexParams>)>;

impl Inner {
    fn text_fields(&self) -> TextFields {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .fields
            .iter()
            .filter_map(|(field, kind)| match kind {
                crate::filter::PayloadIndexKind::Text(p) => Some((field.clone(), p.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Whether a stored point (read with its payload and vectors) passes `filter`, with the
/// collection's text indexes (`texts`) giving token matches their meaning.
fn stored_matches(filter: &Filter, r: &super::Record, texts: &TextFields) -> bool {
    let ctx = crate::filter::PointContext {
        has_vector: &|name| r.vectors.as_ref().is_some_and(|v| v.contains_key(name)),
        text_index: &|key| {
            texts
                .iter()
                .find(|(field, _)| field == key.as_str())
                .map(|(_, p)| p.clone())
        },
    };
    filter.matches_in(r.id, r.payload.as_ref(), &ctx)
}

/// Which points of an upsert are written (`Collection::upsert_if`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpsertMode {
    /// Every point: new ones inserted, existing ones replaced.
    #[default]
    Upsert,
    /// New points only; existing ones are left as they are.
    InsertOnly,
    /// Existing points only; new ones are not created.
    UpdateOnly,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frozen_queue_is_bounded_by_a_share_of_available_memory() {
        let segment = 20_000 * 768 * 4;
        // Plenty of memory: 1 GiB of frozen vectors, 16 segments of 61 MB.
        assert_eq!(frozen_limit(segment, 20 << 30), 16);
        // A 512 MiB container: a quarter of it, at least two segments.
        assert_eq!(frozen_limit(segment, 512 << 20), 2);
        assert_eq!(frozen_limit(segment / 4, 512 << 20), 8);
        // Small segments: the count bound.
        assert_eq!(frozen_limit(1 << 10, 20 << 30), MAX_FROZEN);
    }
}
