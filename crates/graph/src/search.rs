//! The one best-first graph search of diskvec. The Vamana build, both HNSW graphs (built
//! and growing) and the disk index's walk in DRAM run `BestFirst::run` over their own
//! neighbour lists ([`Neighbors`]) and distances ([`Scorer`]); the disk index's beam search,
//! which interleaves many queries on one I/O ring, keeps its own loop but shares the
//! candidate list, the visited set and the expand step ([`BestFirst::offer_unseen`]).
//!
//! The search keeps a list of the closest candidates met (bounded by accepted entries:
//! `CandidateList`), expands the closest one not yet expanded (its unseen neighbours are
//! scored and offered to the list), and stops when every listed candidate is expanded. A
//! filter (`accept`) decides what may be returned; rejected points are still walked
//! through.

use crate::candidates::{Candidate, CandidateList};

/// Out-neighbour lists of a graph.
pub trait Neighbors {
    /// Appends node `id`'s out-neighbours to `out`.
    fn neighbors_into(&self, id: u32, out: &mut Vec<u32>);

    /// Hints the CPU to fetch `id`'s list, which the search will likely expand next.
    #[inline]
    fn prefetch_list(&self, _id: u32) {}
}

/// Distances from one query to the graph's nodes.
pub trait Scorer {
    /// The distance from the query to node `id`.
    fn distance(&self, id: u32) -> f32;

    /// The distances to `ids`, in order, into `out` (cleared first). Implementations
    /// prefetch what the later ones read while the earlier ones are computed; the default
    /// asks for one at a time.
    fn distances(&self, ids: &[u32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(ids.iter().map(|&id| self.distance(id)));
    }
}

/// The nodes one search has met: a bit per node (an eighth of a byte, so the set of a
/// 500k-node shard stays in the core's cache), emptied through the list of those set.
#[derive(Clone, Debug, Default)]
pub struct VisitedSet {
    bits: Vec<u64>,
    set: Vec<u32>,
    nodes: usize,
}

impl VisitedSet {
    /// A set for nodes `0..nodes`.
    pub fn new(nodes: usize) -> Self {
        Self {
            bits: vec![0; nodes.div_ceil(64)],
            set: Vec::new(),
            nodes,
        }
    }

    /// Nodes the set has room for.
    pub fn room(&self) -> usize {
        self.nodes
    }

    /// Makes room for nodes `0..nodes` (a growing graph's set follows it).
    pub fn grow(&mut self, nodes: usize) {
        let words = nodes.div_ceil(64);
        if words > self.bits.len() {
            self.bits.resize(words, 0);
        }
        self.nodes = self.nodes.max(nodes);
    }

    /// Marks `id`; true if it was not marked before. An id beyond the room is never marked
    /// (a neighbour id read from storage is checked by this, not trusted).
    #[inline]
    pub fn insert(&mut self, id: u32) -> bool {
        if id as usize >= self.nodes {
            return false;
        }
        let Some(word) = self.bits.get_mut(id as usize / 64) else {
            return false;
        };
        let bit = 1u64 << (id % 64);
        let fresh = *word & bit == 0;
        if fresh {
            *word |= bit;
            self.set.push(id);
        }
        fresh
    }

    /// Empties the set, at the cost of the nodes it held.
    pub fn clear(&mut self) {
        for &id in &self.set {
            self.bits[id as usize / 64] = 0;
        }
        self.set.clear();
    }
}

/// What to return: every node (`None`), or those a filter accepts.
pub type Accept<'a> = Option<&'a dyn Fn(u32) -> bool>;

/// One search's memory, reused across searches (one per thread).
#[derive(Clone, Debug)]
pub struct BestFirst {
    pub visited: VisitedSet,
    pub list: CandidateList,
    fresh: Vec<u32>,
    scores: Vec<f32>,
}

impl BestFirst {
    /// Memory for searches over `nodes` nodes with candidate lists of `capacity`.
    pub fn new(nodes: usize, capacity: usize) -> Self {
        Self {
            visited: VisitedSet::new(nodes),
            list: CandidateList::new(capacity),
            fresh: Vec::new(),
            scores: Vec::new(),
        }
    }

    /// Empties the memory for a new search keeping `capacity` accepted candidates.
    pub fn reset(&mut self, capacity: usize) {
        self.visited.clear();
        self.list.reset(capacity);
    }

    /// Starts the search at `id`, `distance` away.
    #[inline]
    pub fn enter(&mut self, id: u32, distance: f32, accept: Accept) {
        if self.visited.insert(id) {
            self.offer(id, distance, accept);
        }
    }

    #[inline]
    fn offer(&mut self, id: u32, distance: f32, accept: Accept) {
        match accept {
            None => {
                self.list.insert(id, distance);
            }
            // The filter (a payload match, say) is asked only about what would enter.
            Some(a) if self.list.admits(distance) => {
                self.list.insert_judged(id, distance, a(id));
            }
            Some(_) => {}
        }
    }

    /// The expand step: scores the nodes of `neighbours` not met before and offers them to
    /// the list.
    #[inline]
    pub fn offer_unseen(&mut self, neighbours: &[u32], scorer: &impl Scorer, accept: Accept) {
        self.fresh.clear();
        self.fresh
            .extend(neighbours.iter().filter(|&&n| self.visited.insert(n)));
        self.offer_fresh(scorer, accept);
    }

    fn offer_fresh(&mut self, scorer: &impl Scorer, accept: Accept) {
        let fresh = std::mem::take(&mut self.fresh);
        let mut scores = std::mem::take(&mut self.scores);
        scorer.distances(&fresh, &mut scores);
        for (&id, &d) in fresh.iter().zip(&scores) {
            self.offer(id, d, accept);
        }
        self.fresh = fresh;
        self.scores = scores;
    }

    /// Expands the closest unexpanded candidate until none is left, calling `expanded` with
    /// each as it is expanded. The answer is then `list.accepted()`.
    pub fn run(
        &mut self,
        graph: &impl Neighbors,
        scorer: &impl Scorer,
        accept: Accept,
        mut expanded: impl FnMut(Candidate),
    ) {
        while let Some(pos) = self.list.next_unexpanded() {
            self.list.mark_expanded(pos);
            let c = self.list.items()[pos];
            expanded(c);
            // A rejected point is walked through once and then kept no longer.
            let next = if c.accepted {
                pos + 1
            } else {
                self.list.remove(pos);
                pos
            };
            // The next node to expand is most likely the one after this; its list is
            // fetched while this one's distances are computed.
            if let Some(next) = self.list.items().get(next) {
                graph.prefetch_list(next.id);
            }
            self.fresh.clear();
            graph.neighbors_into(c.id, &mut self.fresh);
            let visited = &mut self.visited;
            self.fresh.retain(|&n| visited.insert(n));
            self.offer_fresh(scorer, accept);
        }
    }

    /// The search's answer: (distance, node) of the accepted candidates, closest first.
    pub fn found(&self) -> impl Iterator<Item = (f32, u32)> + '_ {
        self.list.accepted().map(|c| (c.distance, c.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points on a line, each linked to its two neighbours: a walk from one end finds the
    /// points closest to the query.
    struct Line(usize);

    impl Neighbors for Line {
        fn neighbors_into(&self, id: u32, out: &mut Vec<u32>) {
            if id > 0 {
                out.push(id - 1);
            }
            if (id as usize) + 1 < self.0 {
                out.push(id + 1);
            }
        }
    }

    struct From(f32);

    impl Scorer for From {
        fn distance(&self, id: u32) -> f32 {
            (id as f32 - self.0).abs()
        }
    }

    #[test]
    fn walks_to_the_closest_and_reports_each_expansion() {
        let mut s = BestFirst::new(100, 3);
        s.enter(0, 40.0, None);
        let mut walked = Vec::new();
        s.run(&Line(100), &From(40.0), None, |c| walked.push(c.id));
        let found: Vec<u32> = s.found().map(|f| f.1).collect();
        assert_eq!(found, vec![40, 39, 41]);
        assert_eq!(walked[..3], [0, 1, 2]);
        assert!(walked.contains(&40));
        // Reused, it forgets the last search.
        s.reset(2);
        s.enter(99, 1.0, None);
        s.run(&Line(100), &From(97.2), None, |_| {});
        let found: Vec<u32> = s.found().map(|f| f.1).collect();
        assert_eq!(found, vec![97, 98]);
    }

    #[test]
    fn a_filter_walks_through_rejected_points_to_accepted_ones() {
        let mut s = BestFirst::new(100, 2);
        let tens = |id: u32| id.is_multiple_of(10);
        s.enter(50, 0.0, Some(&tens));
        s.run(&Line(100), &From(53.0), Some(&tens), |_| {});
        let found: Vec<u32> = s.found().map(|f| f.1).collect();
        assert_eq!(found, vec![50, 60]);
    }

    #[test]
    fn visited_ids_beyond_the_room_are_refused_and_the_set_grows() {
        let mut v = VisitedSet::new(10);
        assert_eq!(v.room(), 10);
        assert!(v.insert(9) && !v.insert(9));
        assert!(!v.insert(10) && !v.insert(64));
        v.grow(65);
        assert!(v.insert(10) && v.insert(64));
        v.clear();
        assert!(v.insert(9) && v.insert(64));
    }
}
