/// The bounded, sorted candidate list of a best-first graph search: at most `capacity`
/// entries, closest first, each marked once it has been expanded.
#[derive(Clone, Debug)]
pub struct CandidateList {
    items: Vec<Candidate>,
    capacity: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub distance: f32,
    pub id: u32,
    pub expanded: bool,
}

impl CandidateList {
    pub fn new(capacity: usize) -> Self {
        Self {
            items: Vec::with_capacity(capacity + 1),
            capacity: capacity.max(1),
        }
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn items(&self) -> &[Candidate] {
        &self.items
    }

    /// Inserts unless the list is full and `distance` is no better than its worst entry.
    /// Ties keep the earlier entry first. The caller ensures ids are not inserted twice.
    pub fn insert(&mut self, id: u32, distance: f32) -> bool {
        if self.items.len() == self.capacity && distance >= self.items[self.capacity - 1].distance {
            return false;
        }
        let at = self.items.partition_point(|c| c.distance <= distance);
        self.items.insert(
            at,
            Candidate {
                distance,
                id,
                expanded: false,
            },
        );
        self.items.truncate(self.capacity);
        true
    }

    /// Position of the closest entry not yet expanded and not excluded by `skip`.
    pub fn next_unexpanded(&self, mut skip: impl FnMut(u32) -> bool) -> Option<usize> {
        self.items.iter().position(|c| !c.expanded && !skip(c.id))
    }

    pub fn mark_expanded(&mut self, pos: usize) {
        self.items[pos].expanded = true;
    }

    /// Marks `id` expanded if it is still in the list.
    pub fn mark_id_expanded(&mut self, id: u32) {
        if let Some(c) = self.items.iter_mut().find(|c| c.id == id) {
            c.expanded = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_closest_in_order() {
        let mut l = CandidateList::new(3);
        for (id, d) in [(1, 5.0), (2, 1.0), (3, 3.0), (4, 4.0), (5, 0.5), (6, 9.0)] {
            l.insert(id, d);
        }
        let ids: Vec<u32> = l.items().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![5, 2, 3]);
        assert!(
            !l.insert(7, 3.0),
            "a tie with the worst entry must not displace it"
        );
    }

    #[test]
    fn next_unexpanded_skips_expanded_and_excluded() {
        let mut l = CandidateList::new(4);
        l.insert(1, 1.0);
        l.insert(2, 2.0);
        l.insert(3, 3.0);
        l.mark_expanded(0);
        assert_eq!(l.next_unexpanded(|_| false), Some(1));
        assert_eq!(l.next_unexpanded(|id| id == 2), Some(2));
        l.mark_id_expanded(2);
        l.mark_id_expanded(3);
        assert_eq!(l.next_unexpanded(|_| false), None);
    }
}
