//! HashPrune (PiPNN): each point keeps a bounded reservoir of candidate neighbours, at most
//! one per direction bucket (the signs of a few random projections of the candidate minus
//! the point), the closest of each bucket, and of the buckets the `room` closest. Which
//! candidates are kept does not depend on the order they are offered in (ties go to the
//! lower id), so threads offering edges concurrently build the same lists every run.
//!
//! Why the order does not matter: an entry leaves a full reservoir only for a closer
//! candidate of a new bucket, so an evicted bucket already has `room` others closer than its
//! best; and a bucket's best, when offered, enters unless `room` other buckets hold closer
//! candidates. The reservoir ends holding the best of each of the `room` closest buckets.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Locks guarding writers; point `p` is guarded by lock `p % LOCKS` (as adjacency.rs).
const LOCKS: usize = 4096;

/// Every point's reservoir, offered to by several threads.
pub(crate) struct Reservoirs {
    room: usize,
    bits: usize,
    /// Each point's projections on the hash planes, `bits` a point.
    projections: Vec<f32>,
    /// Point `p`'s slot at `p * (1 + 3 * room)`: its count, then the buckets, the ids and
    /// the distances' bits of its entries, each a run of `room` words (a bucket is looked
    /// for in one contiguous run).
    words: Vec<AtomicU32>,
    locks: Vec<Mutex<()>>,
}

/// A point's slot: its count and three runs of `room` words.
struct Slot<'a> {
    count: &'a AtomicU32,
    buckets: &'a [AtomicU32],
    ids: &'a [AtomicU32],
    distances: &'a [AtomicU32],
}

impl Slot<'_> {
    fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed) as usize
    }

    fn entry(&self, i: usize) -> (f32, u32) {
        (
            f32::from_bits(self.distances[i].load(Ordering::Relaxed)),
            self.ids[i].load(Ordering::Relaxed),
        )
    }

    fn set(&self, i: usize, (distance, id): (f32, u32), bucket: u32) {
        self.buckets[i].store(bucket, Ordering::Relaxed);
        self.ids[i].store(id, Ordering::Relaxed);
        self.distances[i].store(distance.to_bits(), Ordering::Relaxed);
    }
}

/// Whether `a` comes before `b`: closer, or as close with a lower id.
pub(super) fn before(a: (f32, u32), b: (f32, u32)) -> bool {
    crate::by_distance(&a, &b).is_lt()
}

impl Reservoirs {
    /// Reservoirs of `room` entries for the points whose projections (`bits` each, at most
    /// 32) are `projections`.
    pub(crate) fn new(projections: Vec<f32>, bits: usize, room: usize) -> Self {
        assert!((1..=32).contains(&bits) && projections.len().is_multiple_of(bits));
        let n = projections.len() / bits;
        let len = n * (1 + 3 * room);
        let mut words = diskvec_vector::vec_with_huge_pages(len);
        words.resize_with(len, || AtomicU32::new(0));
        Self {
            room,
            bits,
            projections,
            words,
            locks: (0..LOCKS.min(n.max(1))).map(|_| Mutex::new(())).collect(),
        }
    }

    fn projection(&self, p: u32) -> &[f32] {
        let at = p as usize * self.bits;
        &self.projections[at..at + self.bits]
    }

    /// The direction bucket of `q` seen from `p`.
    fn bucket(&self, p: u32, q: u32) -> u32 {
        let (from, to) = (self.projection(p), self.projection(q));
        from.iter()
            .zip(to)
            .enumerate()
            .fold(0, |h, (j, (a, b))| h | (((b > a) as u32) << j))
    }

    fn slot(&self, p: u32) -> Slot<'_> {
        let room = self.room;
        let at = p as usize * (1 + 3 * room);
        let words = &self.words[at..at + 1 + 3 * room];
        Slot {
            count: &words[0],
            buckets: &words[1..1 + room],
            ids: &words[1 + room..1 + 2 * room],
            distances: &words[1 + 2 * room..],
        }
    }

    /// Offers `q`, `distance` away, as a neighbour of `p`.
    pub(crate) fn offer(&self, p: u32, q: u32, distance: f32) {
        if p == q || self.room == 0 {
            return;
        }
        let bucket = self.bucket(p, q);
        let offered = (distance, q);
        let _guard = self.locks[p as usize % self.locks.len()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = self.slot(p);
        let len = slot.len();
        if let Some(i) = slot.buckets[..len]
            .iter()
            .position(|b| b.load(Ordering::Relaxed) == bucket)
        {
            if before(offered, slot.entry(i)) {
                slot.set(i, offered, bucket);
            }
            return;
        }
        if len < self.room {
            slot.set(len, offered, bucket);
            slot.count.store(len as u32 + 1, Ordering::Relaxed);
            return;
        }
        let worst = (1..len).fold(0, |w, i| {
            if before(slot.entry(w), slot.entry(i)) {
                i
            } else {
                w
            }
        });
        if before(offered, slot.entry(worst)) {
            slot.set(worst, offered, bucket);
        }
    }

    /// Point `p`'s kept candidates as (distance, id), closest first, into `out`.
    pub(crate) fn kept(&self, p: u32, out: &mut Vec<(f32, u32)>) {
        let slot = self.slot(p);
        out.clear();
        out.extend((0..slot.len()).map(|i| slot.entry(i)));
        out.sort_by(crate::by_distance);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    /// What the reservoir should hold, computed from all offers at once: per bucket the
    /// closest, then the `room` closest buckets.
    fn expected(r: &Reservoirs, p: u32, offers: &[(u32, f32)]) -> Vec<(f32, u32)> {
        let mut best: std::collections::BTreeMap<u32, (f32, u32)> = Default::default();
        for &(q, d) in offers.iter().filter(|o| o.0 != p) {
            let b = r.bucket(p, q);
            let e = best.entry(b).or_insert((d, q));
            if d.total_cmp(&e.0).then(q.cmp(&e.1)).is_lt() {
                *e = (d, q);
            }
        }
        let mut all: Vec<(f32, u32)> = best.into_values().collect();
        all.sort_by(crate::by_distance);
        all.truncate(r.room);
        all
    }

    #[test]
    fn reservoirs_keep_the_closest_of_the_closest_buckets_whatever_the_order() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let (n, bits, room) = (200u32, 4, 6);
        let projections: Vec<f32> = (0..n as usize * bits).map(|_| rng.random()).collect();
        // Repeated candidates, ties in distance, and p itself among the offers.
        let mut offers: Vec<(u32, f32)> = (0..600)
            .map(|_| {
                let q = rng.random_range(0..n);
                (q, (q % 37) as f32 * 0.5)
            })
            .collect();
        offers.push((0, 0.0));
        let mut lists = Vec::new();
        for round in 0..4 {
            let r = Reservoirs::new(projections.clone(), bits, room);
            offers.shuffle(&mut rng);
            for &(q, d) in &offers {
                r.offer(0, q, d);
            }
            let mut kept = Vec::new();
            r.kept(0, &mut kept);
            assert_eq!(kept, expected(&r, 0, &offers), "round {round}");
            assert!(kept.len() <= room && kept.iter().all(|&(_, q)| q != 0));
            lists.push(kept);
        }
        assert!(lists.windows(2).all(|w| w[0] == w[1]));
    }
}
