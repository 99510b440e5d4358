//! A sealed segment: a DiskANN index of a frozen growing segment (node i's external id is
//! its offset), with the points' ids, versions and payloads in DRAM and a deleted bitmap.
//! Only the bitmap changes after sealing; an update of a sealed point writes a new version
//! into the growing segment and deletes this one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use diskvec_index::diskann::{build, Accept, BuildParams, DiskIndex, OpenOptions, SearchParams};
use diskvec_index::limits;
use diskvec_vector::Metric;
use roaring::RoaringBitmap;

use super::files::{read_points, write_points, POINTS_FILE};
use super::{closest, Points, SealInput, SegmentHit};
use crate::config::CollectionConfig;
use crate::filter::{Candidates, Filter, PayloadIndex, PayloadIndexKind};
use crate::{Payload, PointId, Result};

/// A filter whose index candidates number at most this is answered exactly: the matches'
/// vectors are read from SSD (a few hundred reads cost what one graph search does).
pub(crate) const EXACT_LIMIT: u64 = 2_000;

pub(crate) struct Sealed {
    pub dir: PathBuf,
    metric: Metric,
    index: DiskIndex,
    pub ids: Vec<PointId>,
    pub versions: Vec<u64>,
    pub payloads: Vec<Payload>,
    pub deleted: RwLock<RoaringBitmap>,
    /// Bumped at every delete; the manifest writer compares it to what it last wrote.
    pub deleted_changes: AtomicU64,
    pub payload_index: RwLock<PayloadIndex>,
}

/// Builds the DiskANN index and the points file of a frozen segment into `dir`.
pub(crate) fn seal(
    frozen: &SealInput,
    dir: &Path,
    config: &CollectionConfig,
    paths: &[PathBuf],
    progress: &dyn diskvec_index::Progress,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(crate::error::file_error(dir))?;
    let n = frozen.len();
    let offsets: Vec<i64> = (0..n as i64).collect();
    let params = BuildParams {
        metric: config.metric,
        max_degree: config.max_degree,
        build_list: config.build_list,
        pq_bytes: config.pq_bytes.map(|p| p.min(config.dim)),
        paths: paths.to_vec(),
        ..Default::default()
    };
    build(
        &frozen.vectors,
        config.dim,
        &offsets,
        &params,
        dir,
        progress,
    )?;
    write_points(
        &dir.join(POINTS_FILE),
        &frozen.ids,
        &frozen.versions,
        &frozen.payloads,
    )
}

impl Points for Sealed {
    fn len(&self) -> usize {
        self.ids.len()
    }

    fn is_live(&self, offset: u32) -> bool {
        !self
            .deleted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(offset)
    }

    fn point(&self, offset: u32) -> (PointId, &Payload) {
        (self.ids[offset as usize], &self.payloads[offset as usize])
    }

    fn candidates(&self, filter: &Filter) -> Option<Candidates> {
        self.payload_index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .candidates(filter, self.len() as u32)
    }
}

impl Sealed {
    pub fn open(
        dir: &Path,
        metric: Metric,
        deleted: RoaringBitmap,
        fields: &[(String, PayloadIndexKind)],
    ) -> Result<Self> {
        let index = DiskIndex::open(dir, &OpenOptions::default())?;
        let (ids, versions, payloads) = read_points(&dir.join(POINTS_FILE))?;
        if ids.len() != index.len() {
            return Err(crate::DbError::Corrupt {
                path: dir.to_path_buf(),
                message: format!(
                    "{POINTS_FILE} lists {} points, the index {}",
                    ids.len(),
                    index.len()
                ),
            });
        }
        let mut payload_index = PayloadIndex::new();
        for (field, kind) in fields {
            payload_index.add_field(field, *kind);
        }
        for (offset, p) in payloads.iter().enumerate() {
            if !deleted.contains(offset as u32) {
                payload_index.insert(offset as u32, p);
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            metric,
            index,
            ids,
            versions,
            payloads,
            deleted: RwLock::new(deleted),
            deleted_changes: AtomicU64::new(0),
            payload_index: RwLock::new(payload_index),
        })
    }

    pub fn deleted_count(&self) -> usize {
        self.deleted.read().unwrap_or_else(|e| e.into_inner()).len() as usize
    }

    pub fn delete(&self, offset: u32) {
        let fresh = self
            .deleted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(offset);
        if fresh {
            self.payload_index
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(offset, &self.payloads[offset as usize]);
            self.deleted_changes.fetch_add(1, Ordering::Release);
        }
    }

    pub fn add_index_field(&self, field: &str, kind: PayloadIndexKind) {
        let mut index = self
            .payload_index
            .write()
            .unwrap_or_else(|e| e.into_inner());
        index.add_field(field, kind);
        let deleted = self.deleted.read().unwrap_or_else(|e| e.into_inner());
        for (offset, p) in self.payloads.iter().enumerate() {
            if !deleted.contains(offset as u32) {
                index.insert(offset as u32, p);
            }
        }
    }

    /// The k closest live points matching `filter`. A selective filter the payload index
    /// narrows is answered exactly from the matches' vectors; otherwise the graph is
    /// searched with the predicate, the search list growing until k are found (or the
    /// whole segment was in reach), and if the graph still cannot find k, exactly.
    pub fn search(
        self: &Arc<Self>,
        query: &[f32],
        k: usize,
        search_list: usize,
        filter: Option<&Arc<Filter>>,
    ) -> Result<Vec<SegmentHit>> {
        if let Some(offsets) = self.few_candidates(filter.map(|f| f.as_ref())) {
            return self.exact(query, &offsets, k);
        }
        let me = Arc::clone(self);
        let predicate = filter.cloned();
        let accept: Accept = Arc::new(move |id| me.matches(id as u32, predicate.as_deref()));
        let cap = limits::SEARCH_LIST.max.min(self.len().max(k));
        let mut list = search_list.max(k).min(limits::SEARCH_LIST.max);
        loop {
            let params = SearchParams {
                k,
                search_list: list,
                queries_per_thread: 1,
                ..Default::default()
            };
            let found = self
                .index
                .search_where(query, &params, Some(accept.clone()))?;
            if found.ids.len() >= k || list >= cap {
                if found.ids.len() < k && filter.is_some() && list < self.len() {
                    // The graph could not reach k matches within the largest list.
                    let offsets = self.matching(filter.map(|f| f.as_ref()));
                    return self.exact(query, &offsets, k);
                }
                return Ok(found
                    .ids
                    .iter()
                    .zip(&found.distances)
                    .map(|(&id, &distance)| SegmentHit {
                        offset: id as u32,
                        distance,
                    })
                    .collect());
            }
            list = (list * 4).min(cap);
        }
    }

    /// Exact k closest among `offsets`, reading their vectors.
    fn exact(&self, query: &[f32], offsets: &[u32], k: usize) -> Result<Vec<SegmentHit>> {
        let mut q = query.to_vec();
        self.metric.prepare(&mut q);
        let ids: Vec<i64> = offsets.iter().map(|&o| o as i64).collect();
        let mut hits = Vec::with_capacity(offsets.len());
        self.index.fetch_vectors(&ids, |pos, v| {
            hits.push(SegmentHit {
                offset: offsets[pos],
                distance: self.metric.distance(&q, v),
            })
        })?;
        Ok(closest(hits, k))
    }

    /// Stored (metric-prepared) vectors of `offsets`, in that order.
    pub fn vectors(&self, offsets: &[u32]) -> Result<Vec<Vec<f32>>> {
        let ids: Vec<i64> = offsets.iter().map(|&o| o as i64).collect();
        let mut out = vec![Vec::new(); offsets.len()];
        self.index
            .fetch_vectors(&ids, |pos, v| out[pos] = v.to_vec())?;
        Ok(out)
    }

    pub fn dram_bytes(&self) -> usize {
        self.index.dram_bytes()
            + self.ids.len() * 24
            + self
                .payloads
                .iter()
                .map(|p| 64 + p.len() * 48)
                .sum::<usize>()
            + self
                .payload_index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .dram_bytes()
    }

    pub fn disk_bytes(&self) -> u64 {
        self.index.disk_bytes()
    }
}
