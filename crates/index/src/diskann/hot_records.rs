//! Node records the searches' own reads bring into DRAM: the part of the node cache chosen
//! by measured access rather than by the graph's shape.
//!
//! With navigation in DRAM a search reads only the candidates near its k-th distance, which
//! lie wherever its query does, not near the medoid; so which records are worth holding is
//! learnt from the reads. A read record is admitted while there is room; once full, a node
//! must have been read `ADMIT_AFTER_MISSES` times (counts halve as often as the set turns
//! over, so they measure recent reads) and takes the slot of one that no search has used
//! since the clock hand last passed it (CLOCK, a cheap approximation of least recently used).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

/// Reads of a node, while the set is full, before it displaces another record.
const ADMIT_AFTER_MISSES: u8 = 2;

const NO_SLOT: u32 = u32::MAX;

/// One slot: the node whose record it holds (`NO_SLOT` when empty) and the record. A slot's
/// buffer is allocated once, at its first record, and overwritten in place after: records
/// allocated per admission and freed by other threads' evictions scattered over glibc's
/// per-thread arenas, and at 1M x 768 in a 586 MiB cgroup that grew the heap by 110 MB and
/// got the process OOM-killed (one arena: 486 MB peak, as planned).
struct Slot {
    node: u32,
    bytes: Box<[u8]>,
}

pub(crate) struct HotRecords {
    /// Per node, its slot or `NO_SLOT` (empty when the set has no room at all).
    slot_of: Vec<AtomicU32>,
    /// Per node, its reads since the counts last halved (saturating).
    misses: Vec<AtomicU8>,
    slots: Vec<Mutex<Slot>>,
    /// Per slot: used by a search since the clock hand last passed.
    referenced: Vec<AtomicBool>,
    clock: Mutex<Clock>,
    /// Every slot holds a record: a node read too few times is turned away without the
    /// clock's lock.
    full: AtomicBool,
    /// A newer set took this one's records (`new` with `keep`): searches still using this
    /// one admit nothing more (their records would be allocated afresh and dropped soon).
    retired: AtomicBool,
    record_bytes: usize,
}

#[derive(Default)]
struct Clock {
    used: usize,
    hand: usize,
    evictions_since_halving: usize,
}

impl HotRecords {
    /// Room for `capacity` records of `record_bytes` among `nodes` nodes, starting with the
    /// records `keep` holds (as many as fit; they move here, and searches still using
    /// `keep` find them gone and read them).
    pub fn new(nodes: usize, capacity: usize, record_bytes: usize, keep: Option<&Self>) -> Self {
        let capacity = capacity.min(nodes);
        let per_node = if capacity == 0 { 0 } else { nodes };
        let set = Self {
            slot_of: (0..per_node).map(|_| AtomicU32::new(NO_SLOT)).collect(),
            misses: (0..per_node).map(|_| AtomicU8::new(0)).collect(),
            slots: (0..capacity)
                .map(|_| {
                    Mutex::new(Slot {
                        node: NO_SLOT,
                        bytes: Box::default(),
                    })
                })
                .collect(),
            referenced: (0..capacity).map(|_| AtomicBool::new(false)).collect(),
            clock: Mutex::new(Clock::default()),
            full: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            record_bytes,
        };
        if let Some(old) = keep {
            old.retired.store(true, Relaxed);
            let mut clock = set.lock_clock();
            for slot in &old.slots {
                if clock.used == capacity {
                    break;
                }
                let mut slot = lock(slot);
                if slot.node == NO_SLOT {
                    continue;
                }
                let node = std::mem::replace(&mut slot.node, NO_SLOT);
                let bytes = std::mem::take(&mut slot.bytes);
                set.slot_of[node as usize].store(clock.used as u32, Relaxed);
                *lock(&set.slots[clock.used]) = Slot { node, bytes };
                clock.used += 1;
            }
            set.full.store(clock.used == capacity, Relaxed);
        }
        set
    }

    /// DRAM the per-node tables take when the set has room for any record, per node.
    const TABLE_BYTES_PER_NODE: usize =
        std::mem::size_of::<AtomicU32>() + std::mem::size_of::<AtomicU8>();

    /// DRAM a slot takes besides its record: the slot, its mark, the allocator's header.
    const SLOT_BYTES: usize =
        std::mem::size_of::<Mutex<Slot>>() + std::mem::size_of::<AtomicBool>() + 16;

    /// The records a set among `nodes` nodes has room for in `bytes`, its tables counted.
    pub fn capacity_within(bytes: usize, nodes: usize, record_bytes: usize) -> usize {
        bytes.saturating_sub(nodes * Self::TABLE_BYTES_PER_NODE) / (record_bytes + Self::SLOT_BYTES)
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Records held now.
    pub fn len(&self) -> usize {
        self.lock_clock().used
    }

    /// What the set takes in DRAM: its tables, its slots, and the records it holds (once
    /// full, what `capacity_within` planned).
    pub fn bytes(&self) -> usize {
        if self.slots.is_empty() {
            return 0;
        }
        self.slot_of.len() * Self::TABLE_BYTES_PER_NODE
            + self.slots.len() * Self::SLOT_BYTES
            + self.len() * self.record_bytes
    }

    pub fn contains(&self, node: u32) -> bool {
        self.slot_of
            .get(node as usize)
            .is_some_and(|s| s.load(Relaxed) != NO_SLOT)
    }

    /// Copies node `node`'s record into `out` if held (and marks it used).
    pub fn copy(&self, node: u32, out: &mut Vec<u8>) -> bool {
        let Some(slot) = self.slot_of.get(node as usize).map(|s| s.load(Relaxed)) else {
            return false;
        };
        if slot == NO_SLOT {
            return false;
        }
        let slot = slot as usize;
        {
            let held = lock(&self.slots[slot]);
            // The slot may have gone to another node since it was looked up.
            if held.node != node {
                return false;
            }
            out.clear();
            out.extend_from_slice(&held.bytes);
        }
        if !self.referenced[slot].load(Relaxed) {
            self.referenced[slot].store(true, Relaxed);
        }
        true
    }

    /// Node `node` was just read, its record is `bytes`: admits it if there is room, or if
    /// it is read often enough to displace a record no search has used lately.
    pub fn offer(&self, node: u32, bytes: &[u8]) {
        let Some(slot_of) = self.slot_of.get(node as usize) else {
            return;
        };
        if slot_of.load(Relaxed) != NO_SLOT || self.retired.load(Relaxed) {
            return;
        }
        let seen = self.misses[node as usize]
            .fetch_update(Relaxed, Relaxed, |m| Some(m.saturating_add(1)))
            .unwrap_or(u8::MAX)
            .saturating_add(1);
        if seen < ADMIT_AFTER_MISSES && self.full.load(Relaxed) {
            return;
        }
        let mut clock = self.lock_clock();
        if slot_of.load(Relaxed) != NO_SLOT {
            return; // another search admitted it meanwhile
        }
        let slot = if clock.used < self.slots.len() {
            clock.used += 1;
            self.full.store(clock.used == self.slots.len(), Relaxed);
            clock.used - 1
        } else {
            if seen < ADMIT_AFTER_MISSES {
                return;
            }
            let victim = self.advance_hand(&mut clock);
            clock.evictions_since_halving += 1;
            if clock.evictions_since_halving >= self.slots.len() {
                clock.evictions_since_halving = 0;
                for m in &self.misses {
                    m.store(m.load(Relaxed) / 2, Relaxed);
                }
            }
            victim
        };
        let evicted = {
            let mut held = lock(&self.slots[slot]);
            if held.bytes.len() == bytes.len() {
                held.bytes.copy_from_slice(bytes);
            } else {
                held.bytes = bytes.into();
            }
            std::mem::replace(&mut held.node, node)
        };
        if evicted != NO_SLOT {
            // Only if it still points here (a resize may have placed it elsewhere).
            let _ = self.slot_of[evicted as usize].compare_exchange(
                slot as u32,
                NO_SLOT,
                Relaxed,
                Relaxed,
            );
        }
        // A second chance before the hand comes round: it was just wanted.
        self.referenced[slot].store(true, Relaxed);
        self.misses[node as usize].store(0, Relaxed);
        slot_of.store(slot as u32, Relaxed);
    }

    /// The next slot no search used since the hand last passed it (clearing the marks it
    /// passes); within two turns at most.
    fn advance_hand(&self, clock: &mut Clock) -> usize {
        loop {
            let at = clock.hand;
            clock.hand = (clock.hand + 1) % self.slots.len();
            if !self.referenced[at].swap(false, Relaxed) {
                return at;
            }
        }
    }

    fn lock_clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(node: u32) -> Vec<u8> {
        vec![node as u8; 8]
    }

    fn get(set: &HotRecords, node: u32) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        set.copy(node, &mut out).then_some(out)
    }

    #[test]
    fn reads_fill_the_room_then_only_nodes_read_again_displace_unused_ones() {
        let set = HotRecords::new(100, 3, 8, None);
        for node in [5, 6, 7] {
            set.offer(node, &record(node));
        }
        assert_eq!(set.len(), 3);
        assert_eq!(get(&set, 6).unwrap(), record(6));
        // Full: a node read once waits.
        set.offer(9, &record(9));
        assert!(get(&set, 9).is_none());
        // Read again, it takes a slot; the hand clears the fresh marks of 5, 6 and 7 on its
        // first turn and takes 5's slot on the second (6 was used since, but its mark was
        // cleared by the same turn; every slot had its second chance).
        set.offer(9, &record(9));
        assert_eq!(get(&set, 9).unwrap(), record(9));
        assert_eq!(set.len(), 3);
        assert!(
            get(&set, 5).is_none(),
            "the first slot the hand found unused"
        );
        // Now 6 and 9 are used; 7 is not, so the next admission takes 7's slot.
        get(&set, 6);
        get(&set, 9);
        set.offer(11, &record(11));
        set.offer(11, &record(11));
        assert!(get(&set, 7).is_none());
        assert!(get(&set, 6).is_some() && get(&set, 9).is_some() && get(&set, 11).is_some());
    }

    #[test]
    fn a_new_set_keeps_what_fits_of_the_old_one_and_nothing_without_room() {
        let old = HotRecords::new(50, 4, 8, None);
        for node in [1, 2, 3, 4] {
            old.offer(node, &record(node));
        }
        let smaller = HotRecords::new(50, 2, 8, Some(&old));
        assert_eq!(smaller.len(), 2);
        assert!(get(&smaller, 1).is_some() && get(&smaller, 2).is_some());
        assert!(get(&smaller, 3).is_none());
        let larger = HotRecords::new(50, 10, 8, Some(&smaller));
        assert_eq!(larger.len(), 2);
        larger.offer(30, &record(30));
        assert_eq!(larger.len(), 3);
        let none = HotRecords::new(50, 0, 8, Some(&larger));
        // A set whose records moved on admits nothing more.
        larger.offer(31, &record(31));
        assert!(get(&larger, 31).is_none());
        old.offer(40, &record(40));
        assert!(get(&old, 40).is_none());
        none.offer(30, &record(30));
        assert_eq!((none.len(), none.bytes()), (0, 0));
        assert!(get(&none, 30).is_none());
    }
}
