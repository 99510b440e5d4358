/// The bounded, sorted candidate list of a best-first graph search: at most `capacity`
/// entries, closest first, each marked once it has been expanded.
#[derive(Clone, Debug)]
pub struct CandidateList {
    items: Vec<Candidate>,
    capacity: usize,
    /// Every entry before this position is expanded, so the search for the next one to
    /// expand starts here instead of at the head (a search asks L times or more).
    expanded_prefix: usize,
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
            expanded_prefix: 0,
        }
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.expanded_prefix = 0;
    }

    /// Empties the list and sets a new capacity, keeping the allocation.
    pub fn reset(&mut self, capacity: usize) {
        self.clear();
        self.capacity = capacity.max(1);
        self.items.reserve(self.capacity + 1);
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
        self.expanded_prefix = self.expanded_prefix.min(at);
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
        let from = self.expanded_prefix.min(self.items.len());
        self.items[from..]
            .iter()
            .position(|c| !c.expanded && !skip(c.id))
            .map(|p| p + from)
    }

    pub fn mark_expanded(&mut self, pos: usize) {
        self.items[pos].expanded = true;
        while self
            .items
            .get(self.expanded_prefix)
            .is_some_and(|c| c.expanded)
        {
            self.expanded_prefix += 1;
        }
    }

    /// Marks `id` expanded if it is still in the list.
    pub fn mark_id_expanded(&mut self, id: u32) {
        if let Some(pos) = self.items.iter().position(|c| c.id == id) {
            self.mark_expanded(pos);
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
    fn an_insert_before_the_expanded_prefix_is_found_next() {
        let mut l = CandidateList::new(8);
        for (id, d) in [(1, 1.0), (2, 2.0), (3, 3.0)] {
            l.insert(id, d);
        }
        l.mark_expanded(0);
        l.mark_expanded(1);
        assert_eq!(l.next_unexpanded(|_| false), Some(2));
        l.insert(4, 0.5);
        assert_eq!(
            l.next_unexpanded(|_| false),
            Some(0),
            "the new head comes first"
        );
        l.mark_expanded(0);
        assert_eq!(l.next_unexpanded(|_| false), Some(3));
        l.mark_expanded(3);
        assert_eq!(l.next_unexpanded(|_| false), None);
        l.reset(2);
        l.insert(9, 9.0);
        assert_eq!(l.next_unexpanded(|_| false), Some(0));
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
