/// The bounded, sorted candidate list of a best-first graph search: closest first, each
/// entry marked once it has been expanded and whether the search accepts it (a filtered
/// search walks through points it does not return).
///
/// The bound is `capacity` accepted entries: an entry farther than the `capacity`-th
/// accepted one can change nothing (it would neither be returned nor lead anywhere the
/// accepted ones do not), so it is dropped; rejected entries closer than that stay to be
/// walked through. With every entry accepted (`insert`) this is a plain list of the
/// `capacity` closest.
#[derive(Clone, Debug)]
pub struct CandidateList {
    items: Vec<Candidate>,
    capacity: usize,
    /// Accepted entries in `items`.
    accepted: usize,
    /// Every entry before this position is expanded, so the search for the next one to
    /// expand starts here instead of at the head (a search asks L times or more).
    expanded_prefix: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub distance: f32,
    pub id: u32,
    pub expanded: bool,
    pub accepted: bool,
}

impl CandidateList {
    pub fn new(capacity: usize) -> Self {
        Self {
            items: Vec::with_capacity(capacity + 1),
            capacity: capacity.max(1),
            accepted: 0,
            expanded_prefix: 0,
        }
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.accepted = 0;
        self.expanded_prefix = 0;
    }

    /// Empties the list and sets a new capacity, keeping the allocation.
    pub fn reset(&mut self, capacity: usize) {
        self.clear();
        self.capacity = capacity.max(1);
        self.items.reserve(self.capacity + 1);
    }

    pub fn capacity(&self) -> usize {
        self.capacity
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

    /// The accepted entries, closest first: the search's answer.
    pub fn accepted(&self) -> impl Iterator<Item = &Candidate> {
        self.items.iter().filter(|c| c.accepted)
    }

    /// Inserts an accepted entry unless the list is full and `distance` is no better than
    /// its worst entry. Ties keep the earlier entry first. The caller ensures ids are not
    /// inserted twice, and inserts every entry of one search this way or every one by
    /// `insert_judged`.
    #[inline]
    pub fn insert(&mut self, id: u32, distance: f32) -> bool {
        if self.items.len() == self.capacity && distance >= self.items[self.capacity - 1].distance {
            return false;
        }
        self.place(id, distance, true);
        self.items.truncate(self.capacity);
        self.accepted = self.items.len();
        true
    }

    /// Whether an entry at `distance` would enter the list: a filter need not be asked about
    /// one that would not.
    #[inline]
    pub fn admits(&self, distance: f32) -> bool {
        self.accepted < self.capacity
            || self
                .items
                .last()
                .is_some_and(|worst| distance < worst.distance)
    }

    /// Removes the entry at `pos` (a rejected one once expanded: it is neither returned nor
    /// walked again, and a list short of accepted entries would otherwise keep every such
    /// entry of the search).
    pub fn remove(&mut self, pos: usize) {
        if self.items.remove(pos).accepted {
            self.accepted -= 1;
        }
        if pos < self.expanded_prefix {
            self.expanded_prefix -= 1;
        }
    }

    /// Inserts an entry the search accepts or not, keeping `capacity` accepted entries and
    /// every rejected one closer than the last of them.
    pub fn insert_judged(&mut self, id: u32, distance: f32, accepted: bool) -> bool {
        if self.accepted >= self.capacity
            && self
                .items
                .last()
                .is_some_and(|worst| distance >= worst.distance)
        {
            return false;
        }
        self.place(id, distance, accepted);
        if accepted {
            self.accepted += 1;
        }
        // The list ends at its capacity-th accepted entry once it has that many.
        while self.accepted > self.capacity
            || (self.accepted == self.capacity && self.items.last().is_some_and(|c| !c.accepted))
        {
            if self.items.pop().is_some_and(|c| c.accepted) {
                self.accepted -= 1;
            }
        }
        true
    }

    /// Puts a new entry in distance order.
    #[inline]
    fn place(&mut self, id: u32, distance: f32, accepted: bool) {
        let at = self.items.partition_point(|c| c.distance <= distance);
        self.expanded_prefix = self.expanded_prefix.min(at);
        self.items.insert(
            at,
            Candidate {
                distance,
                id,
                expanded: false,
                accepted,
            },
        );
    }

    /// Position of the closest entry not yet expanded.
    #[inline]
    pub fn next_unexpanded(&self) -> Option<usize> {
        let from = self.expanded_prefix.min(self.items.len());
        self.items[from..]
            .iter()
            .position(|c| !c.expanded)
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
        assert_eq!(l.next_unexpanded(), Some(2));
        l.insert(4, 0.5);
        assert_eq!(l.next_unexpanded(), Some(0), "the new head comes first");
        l.mark_expanded(0);
        assert_eq!(l.next_unexpanded(), Some(3));
        l.mark_expanded(3);
        assert_eq!(l.next_unexpanded(), None);
        l.reset(2);
        l.insert(9, 9.0);
        assert_eq!(l.next_unexpanded(), Some(0));
    }

    #[test]
    fn next_unexpanded_skips_expanded() {
        let mut l = CandidateList::new(4);
        l.insert(1, 1.0);
        l.insert(2, 2.0);
        l.insert(3, 3.0);
        l.mark_expanded(0);
        assert_eq!(l.next_unexpanded(), Some(1));
        l.mark_id_expanded(2);
        l.mark_id_expanded(3);
        assert_eq!(l.next_unexpanded(), None);
    }

    /// A filtered list keeps its capacity in accepted entries and the rejected ones closer
    /// than the last of them, and drops what lies beyond.
    #[test]
    fn judged_entries_bound_the_list_by_accepted_ones() {
        let mut l = CandidateList::new(2);
        // Rejected entries do not fill it.
        for (id, d) in [(1, 1.0), (2, 2.0), (3, 3.0)] {
            assert!(l.insert_judged(id, d, false));
        }
        assert!(l.insert_judged(4, 4.0, true));
        assert_eq!(l.accepted().count(), 1);
        assert!(l.insert_judged(5, 2.5, true));
        let ids: Vec<u32> = l.items().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![1, 2, 5, 3, 4]);
        // A third accepted entry pushes out the farthest accepted and what lies past the
        // new last one.
        assert!(l.insert_judged(6, 0.5, true));
        let ids: Vec<u32> = l.items().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![6, 1, 2, 5]);
        assert!(
            !l.insert_judged(7, 2.5, false),
            "no closer than the last accepted"
        );
        assert!(l.insert_judged(8, 2.4, false));
        let answer: Vec<u32> = l.accepted().map(|c| c.id).collect();
        assert_eq!(answer, vec![6, 5]);
        // Full: only what is closer than the last accepted entry is admitted.
        assert!(l.admits(2.4) && !l.admits(2.5));
        // An expanded rejected entry removed keeps the expanded prefix in step.
        l.mark_expanded(0);
        l.mark_expanded(1);
        l.remove(1);
        let ids: Vec<u32> = l.items().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![6, 2, 8, 5]);
        assert_eq!(l.next_unexpanded(), Some(1));
        assert_eq!(l.accepted().count(), 2);
    }
}
