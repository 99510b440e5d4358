//! The id tracker: each live point's id to the place of its current version, in id order
//! (scrolls page by id).
//!
//! A `BTreeMap<PointId, Loc>` took about 90 bytes a point (a 24-byte key, a 24-byte value,
//! half-full nodes after in-order inserts): 90 MB of a 1M-point collection, more than its
//! ids, versions and payloads together. Here most points sit in sorted arrays of 24 bytes
//! a point (numeric ids; 32 for UUIDs), with the segment as an index into a small table;
//! changes since go to a `BTreeMap` of their own (a `None` marks a settled point removed),
//! folded into the arrays once it holds an eighth as many points, so it stays small and
//! the arrays are rebuilt a bounded number of times per point.

use std::collections::{BTreeMap, HashMap};

use super::state::Loc;
use crate::point::Uuid128;
use crate::PointId;

/// Changes kept beside the arrays before they are folded in, at the least (the tests fold
/// often).
const FOLD_AT_LEAST: usize = if cfg!(test) { 16 } else { 4096 };

/// A settled point's place: its segment as an index into `Tracker::segments`.
#[derive(Clone, Copy, Debug)]
struct Packed {
    segment: u32,
    offset: u32,
    version: u64,
}

#[derive(Default)]
pub(crate) struct Tracker {
    nums: Vec<(u64, Packed)>,
    uuids: Vec<(Uuid128, Packed)>,
    /// Segment ids of the settled points' `Packed::segment`.
    segments: Vec<u64>,
    /// Changes since the last fold: `Some` the current place, `None` removed.
    changes: BTreeMap<PointId, Option<Loc>>,
    len: usize,
}

impl Tracker {
    /// A tracker of `points`, sorted by id with no id twice, about `nums` numeric ids and
    /// `uuids` UUIDs of them (room is made for those first, so the arrays do not grow by
    /// doubling).
    pub fn from_sorted(
        points: impl IntoIterator<Item = (PointId, Loc)>,
        nums: usize,
        uuids: usize,
    ) -> Self {
        let mut t = Self::default();
        t.nums.reserve_exact(nums);
        t.uuids.reserve_exact(uuids);
        let mut slots = HashMap::new();
        for (id, loc) in points {
            let packed = t.pack(&mut slots, loc);
            match id {
                PointId::Num(n) => t.nums.push((n, packed)),
                PointId::Uuid(u) => t.uuids.push((u, packed)),
            }
        }
        debug_assert!(t.nums.windows(2).all(|w| w[0].0 < w[1].0));
        debug_assert!(t.uuids.windows(2).all(|w| w[0].0 < w[1].0));
        t.nums.shrink_to_fit();
        t.uuids.shrink_to_fit();
        t.len = t.nums.len() + t.uuids.len();
        t
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, id: &PointId) -> Option<Loc> {
        if let Some(change) = self.changes.get(id) {
            return *change;
        }
        self.settled(id)
    }

    pub fn insert(&mut self, id: PointId, loc: Loc) {
        if self.get(&id).is_none() {
            self.len += 1;
        }
        self.changes.insert(id, Some(loc));
        self.fold_if_due();
    }

    pub fn remove(&mut self, id: &PointId) {
        if self.get(id).is_none() {
            return;
        }
        self.len -= 1;
        if self.settled(id).is_some() {
            self.changes.insert(*id, None);
            self.fold_if_due();
        } else {
            self.changes.remove(id);
        }
    }

    /// Live points from `from` on (all without it), in id order.
    pub fn range(&self, from: Option<PointId>) -> impl Iterator<Item = (PointId, Loc)> + '_ {
        let (nums_at, uuids_at) = match from {
            None | Some(PointId::Num(0)) => (0, 0),
            Some(PointId::Num(n)) => (self.nums.partition_point(|e| e.0 < n), 0),
            Some(PointId::Uuid(u)) => (self.nums.len(), self.uuids.partition_point(|e| e.0 < u)),
        };
        let settled = self.nums[nums_at..]
            .iter()
            .map(|&(n, p)| (PointId::Num(n), p))
            .chain(
                self.uuids[uuids_at..]
                    .iter()
                    .map(|&(u, p)| (PointId::Uuid(u), p)),
            )
            .map(|(id, p)| (id, self.unpack(p)))
            .peekable();
        let changes = match from {
            Some(f) => self.changes.range(f..),
            None => self.changes.range(..),
        }
        .peekable();
        Merged { settled, changes }
    }

    fn settled(&self, id: &PointId) -> Option<Loc> {
        let packed = match id {
            PointId::Num(n) => self
                .nums
                .binary_search_by_key(n, |e| e.0)
                .ok()
                .map(|i| self.nums[i].1),
            PointId::Uuid(u) => self
                .uuids
                .binary_search_by_key(u, |e| e.0)
                .ok()
                .map(|i| self.uuids[i].1),
        };
        packed.map(|p| self.unpack(p))
    }

    fn unpack(&self, p: Packed) -> Loc {
        Loc {
            segment: self.segments[p.segment as usize],
            offset: p.offset,
            version: p.version,
        }
    }

    fn pack(&mut self, slots: &mut HashMap<u64, u32>, loc: Loc) -> Packed {
        let segment = *slots.entry(loc.segment).or_insert_with(|| {
            self.segments.push(loc.segment);
            (self.segments.len() - 1) as u32
        });
        Packed {
            segment,
            offset: loc.offset,
            version: loc.version,
        }
    }

    /// Folds the changes into new arrays once they hold an eighth as many points: the new
    /// arrays are sized first and filled from the merged order, so the fold holds the old
    /// and the new arrays (48 bytes a numeric point) and nothing else.
    fn fold_if_due(&mut self) {
        if self.changes.len() < FOLD_AT_LEAST.max((self.nums.len() + self.uuids.len()) / 8) {
            return;
        }
        let (mut nums, mut uuids) = (0, 0);
        for (id, _) in self.range(None) {
            match id {
                PointId::Num(_) => nums += 1,
                PointId::Uuid(_) => uuids += 1,
            }
        }
        let folded = Self::from_sorted(self.range(None), nums, uuids);
        debug_assert_eq!(folded.len, self.len);
        *self = folded;
    }
}

/// The settled points and the changes, merged in id order (a change wins over the settled
/// place of its id; a removal hides it).
struct Merged<S: Iterator<Item = (PointId, Loc)>, C: Iterator> {
    settled: std::iter::Peekable<S>,
    changes: std::iter::Peekable<C>,
}

impl<'a, S, C> Iterator for Merged<S, C>
where
    S: Iterator<Item = (PointId, Loc)>,
    C: Iterator<Item = (&'a PointId, &'a Option<Loc>)>,
{
    type Item = (PointId, Loc);

    fn next(&mut self) -> Option<(PointId, Loc)> {
        loop {
            let order = match (self.settled.peek(), self.changes.peek()) {
                (None, None) => return None,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((s, _)), Some((c, _))) => s.cmp(c),
            };
            if order == std::cmp::Ordering::Equal {
                self.settled.next(); // the change decides
            }
            let take_change = order != std::cmp::Ordering::Less;
            if !take_change {
                return self.settled.next();
            }
            let (&id, &change) = self.changes.next()?;
            if let Some(loc) = change {
                return Some((id, loc));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn loc(segment: u64, offset: u32, version: u64) -> Loc {
        Loc {
            segment,
            offset,
            version,
        }
    }

    fn id(rng: &mut impl Rng) -> PointId {
        if rng.random_bool(0.8) {
            PointId::Num(rng.random_range(0..400))
        } else {
            PointId::Uuid(u128::from(rng.random_range(0u32..100)).into())
        }
    }

    #[test]
    fn it_answers_as_an_ordered_map_through_folds() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let mut want: BTreeMap<PointId, Loc> = BTreeMap::new();
        for i in 0..300u64 {
            want.insert(id(&mut rng), loc(i % 3, i as u32, i));
        }
        let mut t = Tracker::from_sorted(want.iter().map(|(&k, &v)| (k, v)), want.len(), 0);
        for step in 0..20_000u64 {
            let key = id(&mut rng);
            if rng.random_bool(0.6) {
                let l = loc(10 + step % 7, step as u32, 1000 + step);
                t.insert(key, l);
                want.insert(key, l);
            } else {
                t.remove(&key);
                want.remove(&key);
            }
            assert_eq!(t.len(), want.len(), "step {step}");
            assert_eq!(t.get(&key), want.get(&key).copied(), "step {step}");
            if step % 997 == 0 {
                let from = id(&mut rng);
                let got: Vec<_> = t.range(Some(from)).collect();
                let expected: Vec<_> = want.range(from..).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(got, expected, "step {step}");
                assert!(t.range(None).eq(want.iter().map(|(&k, &v)| (k, v))));
            }
        }
        // Small enough to have folded many times.
        assert!(t.changes.len() < FOLD_AT_LEAST);
    }
}
