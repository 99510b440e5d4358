//! Neighbour lists in one flat array, a fixed number of slots per node: the graph under
//! construction (`SharedLists`, written by several threads) and the finished graph
//! (`Graph`).
//!
//! A search reads a node's list once per expansion, hundreds of times per insertion. With
//! a lock and a separate allocation per node, each read cost two cache misses and an atomic
//! write to a line both cores wanted; here it costs one miss, and no write.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Locks guarding writers; node `p` is guarded by lock `p % LOCKS`. Two threads rarely
/// write near each other, and the table (32 KiB) stays in cache.
const LOCKS: usize = 4096;

/// Lists of `n` nodes with room for `room` neighbours each, shared by the threads of a
/// build. Readers take no lock: a list being rewritten may read as a mix of its old and new
/// ids, every one a node of the graph, which a search only follows as one more candidate.
/// Writers hold the node's lock.
pub(crate) struct SharedLists {
    room: usize,
    /// Node `p`'s slot: its length at `p * (room + 1)`, then `room` ids.
    words: Vec<AtomicU32>,
    locks: Vec<Mutex<()>>,
}

impl SharedLists {
    pub(crate) fn new(n: usize, room: usize) -> Self {
        let len = n * (room + 1);
        let mut words = diskvec_vector::vec_with_huge_pages(len);
        words.resize_with(len, || AtomicU32::new(0));
        Self {
            room,
            words,
            locks: (0..LOCKS.min(n.max(1))).map(|_| Mutex::new(())).collect(),
        }
    }

    fn slot(&self, p: u32) -> &[AtomicU32] {
        let at = p as usize * (self.room + 1);
        &self.words[at..at + self.room + 1]
    }

    /// The first word of `p`'s slot, for a prefetch.
    pub(crate) fn slot_start(&self, p: u32) -> &AtomicU32 {
        &self.words[p as usize * (self.room + 1)]
    }

    /// Copies `p`'s list into `out` (cleared first).
    pub(crate) fn read_into(&self, p: u32, out: &mut Vec<u32>) {
        let slot = self.slot(p);
        let len = (slot[0].load(Ordering::Relaxed) as usize).min(self.room);
        out.clear();
        out.extend(slot[1..=len].iter().map(|w| w.load(Ordering::Relaxed)));
    }

    /// Locks `p`'s list for writing.
    pub(crate) fn lock(&self, p: u32) -> ListGuard<'_> {
        let guard = self.locks[p as usize % self.locks.len()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        ListGuard {
            _guard: guard,
            slot: self.slot(p),
        }
    }

    /// The finished graph, entered at `medoid`.
    pub(crate) fn finish(self, medoid: u32) -> Graph {
        let words: Vec<u32> = self.words.into_iter().map(AtomicU32::into_inner).collect();
        Graph {
            room: self.room,
            words,
            medoid,
        }
    }
}

/// A node's list held for writing.
pub(crate) struct ListGuard<'a> {
    _guard: MutexGuard<'a, ()>,
    slot: &'a [AtomicU32],
}

impl ListGuard<'_> {
    pub(crate) fn len(&self) -> usize {
        (self.slot[0].load(Ordering::Relaxed) as usize).min(self.slot.len() - 1)
    }

    pub(crate) fn get(&self, i: usize) -> u32 {
        self.slot[1 + i].load(Ordering::Relaxed)
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        (0..self.len()).any(|i| self.get(i) == id)
    }

    /// Appends `id`; false (and nothing written) when the list is full.
    pub(crate) fn push(&self, id: u32) -> bool {
        let len = self.len();
        if len + 1 >= self.slot.len() {
            return false;
        }
        self.slot[1 + len].store(id, Ordering::Relaxed);
        self.slot[0].store(len as u32 + 1, Ordering::Relaxed);
        true
    }

    /// Replaces the list with `ids` (at most the room; the rest is dropped).
    pub(crate) fn set(&self, ids: &[u32]) {
        let len = ids.len().min(self.slot.len() - 1);
        // The length shrinks first and grows last, so a reader never counts a slot that
        // holds no id of this write or the last.
        let old = self.len();
        self.slot[0].store(len.min(old) as u32, Ordering::Relaxed);
        for (w, &id) in self.slot[1..=len].iter().zip(ids) {
            w.store(id, Ordering::Relaxed);
        }
        self.slot[0].store(len as u32, Ordering::Relaxed);
    }
}

/// A finished directed graph over points 0..n, its lists in one flat array.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    room: usize,
    /// Node `p`'s slot: its length at `p * (room + 1)`, then up to `room` ids.
    words: Vec<u32>,
    /// The entry point: the point closest to the data's centroid.
    pub medoid: u32,
}

impl Graph {
    /// A graph of the given lists, each slot as long as the longest list.
    pub fn from_lists(lists: &[Vec<u32>], medoid: u32) -> Self {
        let room = lists.iter().map(Vec::len).max().unwrap_or(0);
        let mut words = Vec::with_capacity(lists.len() * (room + 1));
        for list in lists {
            words.push(list.len() as u32);
            words.extend_from_slice(list);
            words.resize(words.len() + room - list.len(), 0);
        }
        Self {
            room,
            words,
            medoid,
        }
    }

    /// A graph of `n` lists of at most `room` ids, list `p` written by `fill(p, list)` (the
    /// list comes cleared; ids past the room are dropped), in parallel.
    pub(crate) fn from_fn(
        n: usize,
        room: usize,
        medoid: u32,
        fill: impl Fn(u32, &mut Vec<u32>) + Sync,
    ) -> Self {
        use rayon::prelude::*;
        let mut words = diskvec_vector::vec_with_huge_pages(n * (room + 1));
        words.resize(n * (room + 1), 0u32);
        words
            .par_chunks_mut((room + 1) * 1024)
            .enumerate()
            .for_each_init(Vec::new, |list, (chunk, slots)| {
                for (i, slot) in slots.chunks_exact_mut(room + 1).enumerate() {
                    list.clear();
                    fill((chunk * 1024 + i) as u32, list);
                    let len = list.len().min(room);
                    slot[0] = len as u32;
                    slot[1..=len].copy_from_slice(&list[..len]);
                }
            });
        Self {
            room,
            words,
            medoid,
        }
    }

    /// Adds the edge `from -> to`, giving up `from`'s last edge when its list is full.
    pub(crate) fn add_edge(&mut self, from: u32, to: u32) {
        let at = from as usize * (self.room + 1);
        let len = (self.words[at] as usize).min(self.room);
        if self.room == 0 {
            return;
        }
        let len = if len == self.room { len - 1 } else { len };
        self.words[at + 1 + len] = to;
        self.words[at] = len as u32 + 1;
    }

    /// The most ids a list holds.
    pub(crate) fn room(&self) -> usize {
        self.room
    }

    pub fn len(&self) -> usize {
        self.words.len() / (self.room + 1)
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Node `p`'s out-neighbours.
    pub fn neighbors(&self, p: u32) -> &[u32] {
        let at = p as usize * (self.room + 1);
        let len = self.words[at] as usize;
        &self.words[at + 1..at + 1 + len]
    }

    /// Every node's list, in node order.
    pub fn lists(&self) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
        (0..self.len() as u32).map(|p| self.neighbors(p))
    }
}

impl crate::Neighbors for Graph {
    #[inline]
    fn neighbors_into(&self, id: u32, out: &mut Vec<u32>) {
        out.extend_from_slice(self.neighbors(id));
    }
}

/// The lists being built, as a search walks them (a list being rewritten meanwhile may be
/// read half old, half new: every id in it is a node either way).
impl crate::Neighbors for SharedLists {
    #[inline]
    fn neighbors_into(&self, id: u32, out: &mut Vec<u32>) {
        let slot = self.slot(id);
        let len = (slot[0].load(Ordering::Relaxed) as usize).min(self.room);
        out.extend(slot[1..=len].iter().map(|w| w.load(Ordering::Relaxed)));
    }

    #[inline]
    fn prefetch_list(&self, id: u32) {
        diskvec_vector::prefetch(std::slice::from_ref(self.slot_start(id)), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_written_under_their_lock_read_back_and_finish_as_written() {
        let lists = SharedLists::new(5, 3);
        {
            let l = lists.lock(2);
            assert!(l.push(4) && l.push(1) && l.push(0));
            assert!(!l.push(3), "a full list takes no more");
            assert!(l.contains(1) && !l.contains(3));
        }
        lists.lock(4).set(&[2, 3, 1, 0]);
        lists.lock(2).set(&[3]);
        let mut out = vec![9];
        lists.read_into(2, &mut out);
        assert_eq!(out, vec![3]);
        lists.read_into(0, &mut out);
        assert!(out.is_empty());
        let g = lists.finish(2);
        assert_eq!(g.len(), 5);
        assert_eq!(g.neighbors(4), &[2, 3, 1], "cut to the room");
        assert_eq!(g.neighbors(2), &[3]);
        assert_eq!(g.medoid, 2);
        let lists: Vec<Vec<u32>> = g.lists().map(|l| l.to_vec()).collect();
        assert_eq!(
            Graph::from_lists(&lists, 2).lists().collect::<Vec<_>>(),
            g.lists().collect::<Vec<_>>()
        );
    }
}
