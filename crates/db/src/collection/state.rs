//! What a collection holds in memory: segments by id, the id tracker, and the payload
//! index fields; changed only under the collection's state lock.

use std::collections::{BTreeMap, VecDeque};

use super::tracker::Tracker;
use std::sync::{Arc, RwLock};

use crate::config::CollectionConfig;
use crate::segment::Points;

use crate::filter::PayloadIndexKind;
use crate::ops::{Operation, StoredPoint};
use crate::segment::{Growing, Segment};
use crate::{Payload, Result};

/// Where the current version of a point lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub segment: u64,
    pub offset: u32,
    pub version: u64,
}

pub(crate) struct State {
    pub config: Arc<CollectionConfig>,
    /// In id order: sealed segments, then frozen ones, then the active growing one.
    pub segments: BTreeMap<u64, Segment>,
    pub active: u64,
    /// Frozen growing segments waiting to be sealed, oldest first.
    pub frozen: VecDeque<u64>,
    pub next_segment_id: u64,
    /// Point id to its current version's place; ordered, so scrolls page by id.
    pub tracker: Tracker,
    pub fields: Vec<(String, PayloadIndexKind)>,
    /// Bulk-load mode (Qdrant's `indexing_threshold: 0`): the active segment grows past the
    /// seal threshold and is not linked into its graph; searches scan what is unlinked.
    pub indexing_paused: bool,
}

impl State {
    pub fn growing(&self, id: u64) -> Option<&Arc<RwLock<Growing>>> {
        match self.segments.get(&id) {
            Some(Segment::Growing(g)) => Some(g),
            _ => None,
        }
    }

    fn active(&self) -> &Arc<RwLock<Growing>> {
        self.growing(self.active)
            .expect("the active segment is a growing one")
    }

    /// Starts a fresh active growing segment.
    pub fn start_active(&mut self) {
        let id = self.next_segment_id;
        self.next_segment_id += 1;
        let g = Growing::new(&self.config, &self.fields);
        self.segments
            .insert(id, Segment::Growing(Arc::new(RwLock::new(g))));
        self.active = id;
    }

    /// Freezes the active segment (if it holds anything) at `op`, the last operation applied
    /// to it, and starts a new one. Returns whether it froze one.
    pub fn freeze(&mut self, op: u64) -> bool {
        let active = self.active().clone();
        let mut g = active.write().unwrap_or_else(|e| e.into_inner());
        if g.len() == 0 {
            return false;
        }
        g.frozen_at = Some(op);
        g.settle();
        drop(g);
        self.frozen.push_back(self.active);
        self.start_active();
        true
    }

    /// Marks the point at `loc` deleted in its segment.
    fn delete_at(&mut self, loc: Loc) {
        match self.segments.get(&loc.segment) {
            Some(Segment::Growing(g)) => g
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .delete(loc.offset),
            Some(Segment::Sealed(s)) => s.delete(loc.offset),
            None => debug_assert!(false, "the tracker points at a missing segment"),
        }
    }

    /// Applies operation `op`. Points whose tracked version is already `op` or later are
    /// left alone, which makes replaying the log over a newer state harmless. Returns true
    /// when the active segment passed the seal threshold and was frozen.
    pub fn apply(&mut self, op: u64, operation: Operation) -> bool {
        match operation {
            Operation::Upsert(points) => {
                // One hold of the active segment's lock for the whole operation: taken per
                // point, each point waited for the indexer's current insertion, and a busy
                // machine made a 100-point write take seconds under the state lock.
                let active = Arc::clone(self.active());
                let mut g = active.write().unwrap_or_else(|e| e.into_inner());
                for p in points {
                    self.upsert(op, p, &mut g);
                }
                let full = g.len() >= self.config.seal_threshold;
                drop(g);
                // Only after the whole operation: a segment must not hold half of one, or
                // the checkpoint at its seal would skip the other half on replay.
                full && !self.indexing_paused && self.freeze(op)
            }
            Operation::Delete(ids) => {
                for id in ids {
                    if let Some(loc) = self.tracker.get(&id) {
                        if loc.version < op {
                            self.delete_at(loc);
                            self.tracker.remove(&id);
                        }
                    }
                }
                false
            }
        }
    }

    /// Writes `p` into the active segment, whose write guard is `active`.
    fn upsert(&mut self, op: u64, p: StoredPoint, active: &mut Growing) {
        if let Some(old) = self.tracker.get(&p.id) {
            // Equal versions: the id appears twice in one operation; the later copy wins,
            // as if the points were written one after the other.
            if old.version > op {
                return;
            }
            if old.segment == self.active {
                active.delete(old.offset);
            } else {
                self.delete_at(old);
            }
        }
        let id = p.id;
        let offset = active.push(p, op);
        self.tracker.insert(
            id,
            Loc {
                segment: self.active,
                offset,
                version: op,
            },
        );
    }

    /// The current payload of a tracked point.
    /// Whether the point at `loc` passes `filter` (read in place: the payload is not copied).
    pub fn point_matches(&self, loc: Loc, filter: &crate::Filter) -> Result<bool> {
        use crate::segment::Points;
        match &self.segments[&loc.segment] {
            Segment::Growing(g) => Ok(g
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .matches(loc.offset, Some(filter))),
            Segment::Sealed(s) => s.checked_payloads(|| s.matches(loc.offset, Some(filter))),
        }
    }

    pub fn payload(&self, loc: Loc) -> Result<Payload> {
        match &self.segments[&loc.segment] {
            Segment::Growing(g) => Ok(g.read().unwrap_or_else(|e| e.into_inner()).payloads
                [loc.offset as usize]
                .clone()),
            Segment::Sealed(s) => Ok(s.payload(loc.offset)?.into_owned()),
        }
    }
}
