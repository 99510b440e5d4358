//! One dense space of a growing segment: a row per offset, linked into an HNSW graph by the
//! collection's indexer. A point without a vector in this space holds a row of zeros that
//! the graph links like any other (it only routes) and a search never returns. Rows are kept
//! in the space's datatype (a float16 space's take half the bytes of float32 ones), as its
//! sealed records are.

use std::sync::{Arc, RwLock};

use diskvec_index::hnsw::GrowingHnsw;
use diskvec_vector::{Metric, TypedRows};
use roaring::RoaringBitmap;

use super::{closest, SegmentHit};
use crate::config::{CollectionConfig, DenseSpace};

/// Segments up to this size are scanned: exact, and as fast as a graph walk.
pub(crate) const SCAN_BELOW: usize = 1_000;

/// Most bytes of vectors a growing segment reserves up front, all spaces together.
const RESERVE_AT_MOST: usize = 256 << 20;

pub(crate) struct DenseRows {
    dim: usize,
    metric: Metric,
    /// Metric-prepared vectors, row-major, in the space's datatype: the first rows;
    /// `pending` holds the rest. Shared with the indexer while it plans, and with a seal's
    /// input once frozen (no copy: a frozen segment takes no more points).
    vectors: Arc<TypedRows>,
    /// Rows written while the indexer held `vectors`; moved into it by the first write
    /// that finds it unshared, and at the freeze.
    pending: TypedRows,
    /// Links of the first `graph.len()` rows; only the indexer extends it.
    graph: Arc<RwLock<GrowingHnsw>>,
    /// Offsets whose point has no vector in this space (their rows are zeros).
    absent: RoaringBitmap,
}

impl DenseRows {
    /// Reserves a full segment's rows (`seal_threshold`), up to this space's share of
    /// `RESERVE_AT_MOST`. Reserved address space costs no memory until written; grown by
    /// doubling instead, a segment of 20,010 rows held room for 32,768 (98 MiB at 768-d
    /// for 59 of rows), and each doubling copied all it had.
    pub fn new(space: &DenseSpace, config: &CollectionConfig) -> Self {
        let element = space.datatype;
        let share = RESERVE_AT_MOST / element.bytes() * space.dim / config.dense_numbers().max(1);
        let reserve = (config.seal_threshold.saturating_add(1))
            .saturating_mul(space.dim)
            .min(share);
        Self {
            dim: space.dim,
            metric: space.metric,
            vectors: Arc::new(TypedRows::with_capacity(element, reserve)),
            pending: TypedRows::with_capacity(element, 0),
            graph: Arc::new(RwLock::new(GrowingHnsw::new(
                space.dim,
                space.metric,
                space.hnsw.m.unwrap_or(config.hnsw_m),
                space
                    .hnsw
                    .ef_construct
                    .unwrap_or(config.hnsw_ef_construction),
            ))),
            absent: RoaringBitmap::new(),
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn rows(&self) -> usize {
        (self.vectors.len() + self.pending.len()) / self.dim
    }

    pub fn has(&self, offset: u32) -> bool {
        !self.absent.contains(offset)
    }

    /// Offsets with a vector in this space, among the first `len`.
    pub fn present(&self, len: u32) -> impl Iterator<Item = u32> + '_ {
        (0..len).filter(|&o| self.has(o))
    }

    /// The rows holding `offset`, and its row's number in them.
    fn rows_of(&self, offset: u32) -> (&TypedRows, u32) {
        let settled = (self.vectors.len() / self.dim.max(1)) as u32;
        match offset.checked_sub(settled) {
            None => (&self.vectors, offset),
            Some(p) => (&self.pending, p),
        }
    }

    /// Distance from a prepared query to the row at `offset`.
    fn distance(&self, query: &[f32], offset: u32) -> f32 {
        let (rows, row) = self.rows_of(offset);
        rows.distance(self.metric, query, row)
    }

    /// The vector at `offset`, widened to f32 (`None` when the point has none here).
    pub fn vector(&self, offset: u32) -> Option<Vec<f32>> {
        self.has(offset).then(|| {
            let (rows, row) = self.rows_of(offset);
            rows.row_f32(self.dim, row)
        })
    }

    /// Appends the next offset's row: `vector` (prepared, rounded to the space's datatype),
    /// or zeros.
    pub fn push(&mut self, vector: Option<&[f32]>) {
        let offset = self.rows() as u32;
        if vector.is_none() {
            self.absent.insert(offset);
        }
        self.settle_unshared();
        let rows = match Arc::get_mut(&mut self.vectors) {
            Some(settled) if self.pending.is_empty() => settled,
            _ => &mut self.pending,
        };
        match vector {
            Some(v) => rows.push_row(v),
            None => rows.push_zeros(self.dim),
        }
    }

    /// The rows, shared (a frozen segment takes no more, so they no longer change; the
    /// freeze settled them all into one array).
    pub fn shared_vectors(&self) -> Arc<TypedRows> {
        debug_assert!(self.pending.is_empty(), "vectors shared before settling");
        Arc::clone(&self.vectors)
    }

    /// Moves the pending rows into `vectors`, copying them if the indexer still holds them
    /// (the freeze calls it once; a frozen segment's rows must be in one array).
    pub fn settle(&mut self) {
        if !self.pending.is_empty() {
            Arc::make_mut(&mut self.vectors).append(&mut self.pending);
        }
    }

    /// Moves the pending rows into `vectors` unless the indexer holds it (never copies);
    /// returns whether it moved any.
    pub fn settle_unshared(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let Some(settled) = Arc::get_mut(&mut self.vectors) else {
            return false;
        };
        settled.append(&mut self.pending);
        true
    }

    /// The k closest of the offsets `accept` takes to a prepared query, among `len` rows:
    /// exact over `few` when given (a selective filter's matches), for small segments and
    /// when asked for,
    /// otherwise a graph search with list size `search_list` plus a scan of the rows not
    /// linked yet.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        search_list: usize,
        few: Option<Vec<u32>>,
        exact: bool,
        accept: &dyn Fn(u32) -> bool,
    ) -> Vec<SegmentHit> {
        let distance = |offset: u32| SegmentHit {
            offset,
            distance: self.distance(query, offset),
        };
        if let Some(offsets) = few {
            let hits = offsets
                .into_iter()
                .filter(|&o| self.has(o))
                .map(distance)
                .collect();
            return closest(hits, k);
        }
        let accepted = |o: u32| self.has(o) && accept(o);
        let len = self.rows() as u32;
        if exact || (len as usize) <= SCAN_BELOW {
            let hits = (0..len).filter(|&o| accepted(o)).map(distance).collect();
            return closest(hits, k);
        }
        let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
        let linked = graph.len() as u32;
        let mut hits: Vec<SegmentHit> = graph
            .search(&self.vectors, query, k, search_list.max(k), &accepted)
            .into_iter()
            .map(|(distance, offset)| SegmentHit { offset, distance })
            .collect();
        drop(graph);
        // Rows the indexer has not linked yet are scanned.
        hits.extend((linked..len).filter(|&o| accepted(o)).map(distance));
        closest(hits, k)
    }

    /// Rows not linked into the graph yet.
    pub fn unlinked(&self) -> usize {
        self.rows() - self.graph.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// What the indexer needs to link the next row, taken under the segment's lock and used
    /// after it is released: the graph and the settled rows. `None` when every settled row
    /// is linked (rows still pending are settled by the next write).
    pub fn linker(&self) -> Option<Linker> {
        let linked = self.graph.read().unwrap_or_else(|e| e.into_inner()).len();
        (linked * self.dim < self.vectors.len()).then(|| Linker {
            graph: Arc::clone(&self.graph),
            vectors: Arc::clone(&self.vectors),
        })
    }

    pub fn dram_bytes(&self) -> usize {
        self.vectors.bytes()
            + self.pending.capacity_bytes()
            + self
                .graph
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .dram_bytes()
            + self.absent.serialized_size()
    }
}

/// The indexer's handle on a growing segment's space: its graph and the rows the graph may
/// link.
pub(crate) struct Linker {
    graph: Arc<RwLock<GrowingHnsw>>,
    vectors: Arc<TypedRows>,
}

impl Linker {
    /// Links the next unlinked row. The insertion is planned under the graph's read lock
    /// (searches go on) and applied under its write lock, which is held only to copy link
    /// lists. Only the indexer links, so nothing changes the graph between the two.
    pub fn link_next(&self) {
        let plan = {
            let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
            graph.plan(&self.vectors)
        };
        self.graph
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply_planned(&self.vectors, plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> DenseRows {
        let config = CollectionConfig::new(4, Metric::L2);
        DenseRows::new(&config.dense[0], &config)
    }

    /// Rows written while the indexer plans wait in `pending` and read as any other; the
    /// next write (or the indexer) settles them once the indexer lets go, and the graph
    /// only ever links settled rows.
    #[test]
    fn rows_written_while_the_indexer_plans_are_kept_beside_and_settled_after() {
        let mut g = rows();
        let row = |i: u32| [i as f32, 1.0, 2.0, 3.0];
        for i in 0..10 {
            g.push(Some(&row(i)));
        }
        let linker = g.linker().expect("ten rows to link");
        for i in 10..15 {
            g.push(Some(&row(i)));
        }
        assert_eq!(g.pending.len(), 5 * 4, "the indexer held the rows");
        linker.link_next();
        for i in 0..15u32 {
            assert_eq!(g.vector(i).unwrap()[0], i as f32);
        }
        drop(linker);
        while let Some(linker) = g.linker() {
            linker.link_next();
        }
        assert_eq!(
            g.unlinked(),
            5,
            "pending rows are not linked before they settle"
        );
        assert!(g.settle_unshared());
        assert!(g.pending.is_empty());
        while let Some(linker) = g.linker() {
            linker.link_next();
        }
        assert_eq!(g.unlinked(), 0);
        // The freeze settles even rows the indexer still holds (by copying them).
        assert!(g.linker().is_none());
        let held = Arc::clone(&g.vectors);
        g.push(Some(&row(15)));
        g.settle();
        assert_eq!(g.shared_vectors().len(), 16 * 4);
        assert_eq!(held.len(), 15 * 4);
    }

    /// A float16 space keeps its rows in two bytes a number, and its graph and scans find
    /// what an exact search over the rounded values finds.
    #[test]
    fn a_float16_space_keeps_half_the_bytes_and_finds_the_same() {
        let mut config = CollectionConfig::new(16, Metric::L2);
        config.dense[0].datatype = diskvec_vector::ElementType::Float16;
        let mut g = DenseRows::new(&config.dense[0], &config);
        let n = SCAN_BELOW as u32 + 500;
        let row = |i: u32| -> Vec<f32> {
            let mut v: Vec<f32> = (0..16)
                .map(|j| ((i * 31 + j * 7) % 97) as f32 / 9.7)
                .collect();
            diskvec_vector::ElementType::Float16
                .round_in_place(&mut v)
                .unwrap();
            v
        };
        for i in 0..n {
            g.push(Some(&row(i)));
        }
        assert_eq!(g.vectors.bytes(), n as usize * 16 * 2);
        while let Some(linker) = {
            g.settle_unshared();
            g.linker()
        } {
            linker.link_next();
        }
        // The graph walk and the exact scan both compare the float16 rows.
        for i in (0..n).step_by(97) {
            assert_eq!(g.vector(i).unwrap(), row(i));
            let q = row(i);
            let hits = g.search(&q, 1, 64, None, false, &|_| true);
            assert_eq!(hits[0].distance, 0.0, "row {i}: {hits:?}");
            let exact = g.search(&q, 1, 64, None, true, &|_| true);
            assert_eq!(exact[0].distance, 0.0);
        }
    }

    /// A point without a vector here holds a row of zeros that no search returns, on the
    /// scan and on the graph alike.
    #[test]
    fn absent_rows_are_never_found() {
        let mut g = rows();
        for i in 0..(SCAN_BELOW as u32 + 200) {
            let v = [i as f32, 0.0, 0.0, 0.0];
            g.push((i % 3 != 0).then_some(&v[..]));
        }
        while let Some(linker) = {
            g.settle_unshared();
            g.linker()
        } {
            linker.link_next();
        }
        let hits = g.search(&[0.0; 4], 20, 64, None, false, &|_| true);
        assert_eq!(hits.len(), 20);
        assert!(hits.iter().all(|h| h.offset % 3 != 0), "{hits:?}");
        assert_eq!(hits[0].offset, 1);
        let few = g.search(&[0.0; 4], 5, 64, Some(vec![0, 3, 4]), false, &|_| true);
        assert_eq!(few.iter().map(|h| h.offset).collect::<Vec<_>>(), vec![4]);
        assert!(g.vector(3).is_none() && g.vector(4).is_some());
        // Exact: every accepted row compared, the same as sorting them all by distance.
        let q = [0.3, -0.2, 0.1, 0.05];
        let exact = g.search(&q, 30, 1, None, true, &|o| o % 2 == 0);
        let mut all: Vec<SegmentHit> = (0..g.rows() as u32)
            .filter(|&o| o % 3 != 0 && o % 2 == 0)
            .map(|offset| SegmentHit {
                offset,
                distance: g.metric.distance(&q, &g.vector(offset).unwrap()),
            })
            .collect();
        all = closest(all, 30);
        let offsets = |h: &[SegmentHit]| h.iter().map(|h| h.offset).collect::<Vec<_>>();
        assert_eq!(offsets(&exact), offsets(&all));
    }
}
