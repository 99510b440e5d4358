use std::collections::BinaryHeap;

/// Keeps the `k` smallest (distance, id) pairs seen. Equal distances are ordered by id,
/// so results are deterministic.
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Entry>,
}

#[derive(PartialEq)]
struct Entry(f32, u64);

impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    pub fn push(&mut self, distance: f32, id: u64) {
        if self.heap.len() < self.k {
            self.heap.push(Entry(distance, id));
        } else if let Some(worst) = self.heap.peek() {
            if Entry(distance, id) < *worst {
                self.heap.pop();
                self.heap.push(Entry(distance, id));
            }
        }
    }

    /// The kept pairs, closest first.
    pub fn into_sorted(self) -> Vec<(u64, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|e| (e.1, e.0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_smallest_with_id_tiebreak() {
        let mut t = TopK::new(3);
        for (d, id) in [(5.0, 1), (1.0, 9), (1.0, 2), (3.0, 4), (0.5, 7), (1.0, 3)] {
            t.push(d, id);
        }
        assert_eq!(t.into_sorted(), vec![(7, 0.5), (2, 1.0), (3, 1.0)]);
        let mut t = TopK::new(0);
        t.push(1.0, 1);
        assert!(t.into_sorted().is_empty());
    }
}
