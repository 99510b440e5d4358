//! What one query needs besides its vector, kept between queries: a search of a cached
//! index spends about as long as the allocator would take to clear and hand out these
//! buffers afresh (the PQ table alone is 96 KiB at 384 dimensions).

use std::sync::Mutex;

use diskvec_graph::BestFirst;
use diskvec_vector::{PqTable, Sq4Query};

pub(crate) struct QueryBuffers {
    /// The walk's candidate list and visited set.
    pub(crate) walk: BestFirst,
    pub(crate) table: PqTable,
    /// (exact distance, node) of every expanded node: the re-rank pool.
    pub(crate) exact: Vec<(f32, u32)>,
    /// The query prepared for 4-bit code estimates (searches with navigation).
    pub(crate) sq: Sq4Query,
    /// Navigation only: candidates whose estimate cannot decide, to read and re-rank.
    pub(crate) band: Vec<BandEntry>,
    /// Navigation only: (estimate, node) of candidates surely in the answer, unread.
    pub(crate) sure: Vec<(f32, u32)>,
    /// Navigation only: (estimate, node) of the expanded nodes; after the walk, the
    /// accepted ones by 4-bit estimate, closest first.
    pub(crate) scored: Vec<(f32, u32)>,
}

/// A candidate of the re-rank band and whether its exact distance is known yet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BandEntry {
    pub(crate) id: u32,
    pub(crate) done: bool,
}

/// Buffers of finished queries, for the next ones. Bounded, so a burst of concurrent
/// queries does not leave its peak behind.
pub(crate) struct BufferPool {
    nodes: usize,
    free: Mutex<Vec<QueryBuffers>>,
}

/// Most buffer sets a pool keeps: beyond the queries that run at once on a few threads.
const KEPT: usize = 64;

impl BufferPool {
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            nodes,
            free: Mutex::new(Vec::new()),
        }
    }

    /// Empty buffers for a query with candidate list `search_list`.
    pub(crate) fn take(&self, search_list: usize) -> QueryBuffers {
        let reused = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match reused {
            Some(mut b) => {
                b.walk.reset(search_list);
                b.exact.clear();
                b.band.clear();
                b.sure.clear();
                b.scored.clear();
                b
            }
            None => QueryBuffers {
                walk: BestFirst::new(self.nodes, search_list),
                table: PqTable::default(),
                exact: Vec::with_capacity(search_list * 2),
                sq: Sq4Query::default(),
                band: Vec::new(),
                sure: Vec::new(),
                scored: Vec::new(),
            },
        }
    }

    pub(crate) fn give_back(&self, buffers: QueryBuffers) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < KEPT {
            free.push(buffers);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_buffers_come_back_empty() {
        let pool = BufferPool::new(5);
        let mut b = pool.take(3);
        b.walk.enter(2, 1.0, None);
        b.exact.push((1.0, 2));
        pool.give_back(b);
        let mut b = pool.take(4);
        assert!(b.walk.visited.insert(2));
        assert!(b.walk.list.is_empty() && b.exact.is_empty());
    }
}
