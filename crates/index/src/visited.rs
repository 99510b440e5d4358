//! The visited set of a graph search (DiskANN's and HNSW's).

/// The nodes one query has seen, as a stamp per node: a node is in the set when its stamp
/// equals the current one, so emptying the set is one increment, and only every 255th
/// query pays for clearing the array (one byte per node of the index).
pub(crate) struct VisitedSet {
    stamps: Vec<u8>,
    current: u8,
}

impl VisitedSet {
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            stamps: vec![0; nodes],
            current: 1,
        }
    }

    /// Nodes the set has room for.
    pub(crate) fn len(&self) -> usize {
        self.stamps.len()
    }

    /// Empties the set.
    pub(crate) fn clear(&mut self) {
        if self.current == u8::MAX {
            self.stamps.fill(0);
            self.current = 1;
        } else {
            self.current += 1;
        }
    }

    /// Adds `id`; false when it was already there. Ids beyond the index are never added
    /// (the caller checks them against the node count first).
    #[inline]
    pub(crate) fn insert(&mut self, id: u32) -> bool {
        match self.stamps.get_mut(id as usize) {
            Some(s) if *s != self.current => {
                *s = self.current;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cleared_set_forgets_across_stamp_wraparound() {
        let mut v = VisitedSet::new(10);
        for round in 0..600u32 {
            let id = round % 10;
            assert!(v.insert(id), "round {round}: a cleared set holds nothing");
            assert!(!v.insert(id), "round {round}: the second insert finds it");
            assert!(!v.insert(10), "ids beyond the index are refused");
            v.clear();
        }
    }
}
