//! Reading chosen nodes' full vectors by external id: what a caller needs when it already
//! knows which points it wants (an exact search over a selective filter's matches, a
//! rebuild that drops deleted points, a point lookup).

use std::sync::OnceLock;

use diskvec_io::ReadDone;

use diskvec_vector::Sq4Query;

use super::layout::NodeRecord;
use super::nav::Navigation;
use super::DiskIndex;
use crate::{IndexError, Result};

/// Reads one fetch keeps in flight.
const FETCH_DEPTH: usize = 32;

impl DiskIndex {
    /// The node holding external id `id`, if any.
    pub fn node_of(&self, id: i64) -> Option<u32> {
        if self.ids_are_nodes {
            return u32::try_from(id)
                .ok()
                .filter(|&n| (n as usize) < self.len());
        }
        let by_id = self.node_by_id.get_or_init(|| {
            let mut pairs: Vec<(i64, u32)> = self
                .meta
                .ids
                .iter()
                .enumerate()
                .map(|(node, &id)| (id, node as u32))
                .collect();
            pairs.sort_unstable();
            pairs
        });
        by_id
            .binary_search_by_key(&id, |&(i, _)| i)
            .ok()
            .map(|at| by_id[at].1)
    }

    /// Approximate distances (from DRAM: the 4-bit codes when the index navigates by them,
    /// else PQ) of a raw query to the nodes holding `ids`, in that order: no read. Ranks
    /// many candidates cheaply so that only the best need their full vectors read. An id
    /// the index does not hold is an error.
    pub fn approximate_distances(&self, query: &[f32], ids: &[i64]) -> Result<Vec<f32>> {
        let mut q = query.to_vec();
        self.header.metric.prepare(&mut q);
        self.approximate_distances_prepared(&q, ids)
    }

    /// [`Self::approximate_distances`] of a query already prepared for the index's metric
    /// (`Metric::prepare`), as a database searching many segments prepares it once.
    pub fn approximate_distances_prepared(&self, q: &[f32], ids: &[i64]) -> Result<Vec<f32>> {
        self.check_queries(q, q.len())?;
        let nodes = ids.iter().map(|&id| {
            self.node_of(id)
                .ok_or_else(|| IndexError::InvalidArgument(format!("id {id} is not in this index")))
        });
        match (self.sq4_walk(), &self.meta.pq) {
            (Some(nav), _) => {
                let mut sq = Sq4Query::default();
                nav.sq.query_into(q, self.header.metric, &mut sq);
                nodes
                    .map(|node| {
                        let (code, norm) = Navigation::split(nav.record(node?));
                        Ok(sq.distance(code, norm))
                    })
                    .collect()
            }
            (None, Some(pq)) => {
                let table = pq.table(q);
                let m = pq.code_bytes();
                nodes
                    .map(|node| {
                        let node = node? as usize;
                        Ok(table.distance(&self.meta.codes[node * m..(node + 1) * m]))
                    })
                    .collect()
            }
            // `open` drops the codebook only when the 4-bit codes steer the walk.
            (None, None) => Err(IndexError::InvalidArgument(
                "this index holds neither 4-bit codes nor a PQ codebook".into(),
            )),
        }
    }

    /// Calls `visit(position, vector)` with the stored (metric-prepared: unit length for
    /// cosine) vector of each of `ids`, in completion order, from the DRAM cache or from
    /// SSD with `FETCH_DEPTH` reads in flight. An id the index does not hold is an error
    /// before anything is read.
    pub fn fetch_vectors(&self, ids: &[i64], mut visit: impl FnMut(usize, &[f32])) -> Result<()> {
        self.fetch_nodes(ids, &mut |pos, record, vector| {
            record.vector_into(vector);
            visit(pos, vector)
        })
    }

    /// As `fetch_vectors`, with each node's out-neighbours by external id too: what a
    /// merge passes on of a segment's graph (`VectorSource::seed_lists`), read with the
    /// vector at no cost.
    pub fn fetch_vectors_and_neighbours(
        &self,
        ids: &[i64],
        mut visit: impl FnMut(usize, &[f32], &mut dyn Iterator<Item = i64>),
    ) -> Result<()> {
        let count = self.len();
        self.fetch_nodes(ids, &mut |pos, record, vector| {
            record.vector_into(vector);
            visit(
                pos,
                vector,
                &mut record
                    .neighbors()
                    .filter(|&node| (node as usize) < count)
                    .map(|node| self.external_id(node)),
            )
        })
    }

    /// Calls `visit(position, record, scratch vector)` for the node of each of `ids`.
    fn fetch_nodes(
        &self,
        ids: &[i64],
        visit: &mut dyn FnMut(usize, &NodeRecord, &mut Vec<f32>),
    ) -> Result<()> {
        let nodes: Vec<u32> = ids
            .iter()
            .map(|&id| {
                self.node_of(id).ok_or_else(|| {
                    IndexError::InvalidArgument(format!("id {id} is not in this index"))
                })
            })
            .collect::<Result<_>>()?;
        let mut vector = Vec::with_capacity(self.dim());
        let mut to_read = Vec::new();
        let cache = self.node_cache();
        let mut copy = Vec::new();
        for (pos, &node) in nodes.iter().enumerate() {
            match cache.record(node, &mut copy) {
                Some(record) => visit(pos, &record, &mut vector),
                None => to_read.push(pos),
            }
        }
        if to_read.is_empty() {
            return Ok(());
        }
        let mut engine = self.take_engine(FETCH_DEPTH)?;
        let outcome = self.read_nodes(engine.as_mut(), &nodes, &to_read, visit);
        if outcome.is_err() {
            super::search::drain(engine.as_mut());
        }
        self.return_engine(engine);
        outcome
    }

    fn read_nodes(
        &self,
        engine: &mut dyn diskvec_io::ReadEngine,
        nodes: &[u32],
        to_read: &[usize],
        visit: &mut dyn FnMut(usize, &NodeRecord, &mut Vec<f32>),
    ) -> Result<()> {
        let depth = engine.depth().min(FETCH_DEPTH);
        let mut next = 0;
        let mut in_flight = 0;
        let mut done: Vec<ReadDone> = Vec::new();
        let mut vector = Vec::with_capacity(self.dim());
        let mut scratch = Vec::new();
        let mut first_error = None;
        while next < to_read.len() || in_flight > 0 {
            while first_error.is_none() && next < to_read.len() && in_flight < depth {
                let pos = to_read[next];
                let node = nodes[pos];
                engine.submit(
                    self.layout.offset_of(node),
                    self.layout.read_bytes(),
                    pos as u64,
                )?;
                next += 1;
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            done.clear();
            engine.complete(1, &mut done)?;
            for d in done.drain(..) {
                in_flight -= 1;
                let pos = d.tag as usize;
                match d.result {
                    Ok(()) if first_error.is_none() => {
                        let data = &engine.buffer(d.slot)[..self.layout.read_bytes()];
                        let record = self.layout.record(data, nodes[pos], &mut scratch);
                        visit(pos, &record, &mut vector);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
                engine.release(d.slot);
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// The lazily built id-to-node map of an index (sorted pairs: 12 bytes a node, built on
/// the first lookup, so indexes searched only by vector never pay for it).
pub(crate) type NodeById = OnceLock<Vec<(i64, u32)>>;
