//! What a sealed segment is built from: the points in their new order, and where each
//! one's vector is read. Vectors are never gathered into one buffer: a frozen segment's are
//! shared where they lie in DRAM, a sealed segment's are read from its nodes on SSD a chunk
//! at a time while the build streams them (so a merge of segments larger than RAM holds no
//! more of them than its memory budget).

use std::sync::Arc;

use diskvec_index::diskann::VectorSource;
use diskvec_vector::TypedRows;

use super::files::PayloadJson;
use super::Sealed;
use crate::vectors::SparseVector;
use crate::{Payload, PointId};

/// Rows of vectors one chunk of a seal's input holds at most (and at most 4 MiB).
const CHUNK_ROWS: usize = 4096;
const CHUNK_BYTES: usize = 4 << 20;

/// Where a run of the input's vectors lies.
pub(crate) enum VectorPart {
    /// Rows of a frozen growing segment's metric-prepared vectors: `offsets`, or all rows.
    Frozen {
        vectors: Arc<TypedRows>,
        offsets: Option<Vec<u32>>,
    },
    /// Nodes of a sealed segment's index of dense space `space`, read from SSD.
    Sealed {
        segment: Arc<Sealed>,
        space: usize,
        offsets: Vec<u32>,
    },
}

impl VectorPart {
    /// The rows of a part (of a frozen segment's rows of `dim` numbers).
    fn rows(&self, dim: usize) -> usize {
        match self {
            Self::Frozen {
                vectors,
                offsets: None,
            } => vectors.len() / dim.max(1),
            Self::Frozen {
                offsets: Some(o), ..
            } => o.len(),
            Self::Sealed { offsets, .. } => offsets.len(),
        }
    }
}

/// One dense space of a segment to build: the points that have a vector in it.
#[derive(Default)]
pub(crate) struct SpaceInput {
    pub dim: usize,
    /// Their vectors, in offset order.
    pub parts: Vec<VectorPart>,
    /// Their offsets in the new segment, ascending: the ids of the space's index.
    pub offsets: Vec<u32>,
}

/// The points of a segment to build, by their new offsets.
pub(crate) struct SealInput {
    /// One per dense space of the collection.
    pub dense: Vec<SpaceInput>,
    /// One per sparse space: each point's vector, by new offset.
    pub sparse: Vec<Vec<Option<SparseVector>>>,
    /// One per multivector space: each point's rows, by new offset.
    pub multi: Vec<Vec<Option<Vec<f32>>>>,
    pub ids: Vec<PointId>,
    pub versions: Vec<u64>,
    pub payloads: SealPayloads,
}

/// The payloads of a segment to build: a frozen segment's, shared where they are, or a
/// rebuild's, gathered as JSON text (`PayloadJson`).
pub(crate) enum SealPayloads {
    Shared(Arc<Vec<Payload>>),
    Json(PayloadJson),
}

impl SealPayloads {
    /// As the points file stores them.
    pub fn json(&self) -> std::borrow::Cow<'_, PayloadJson> {
        match self {
            Self::Shared(payloads) => std::borrow::Cow::Owned(PayloadJson::from_payloads(payloads)),
            Self::Json(json) => std::borrow::Cow::Borrowed(json),
        }
    }
}

impl SealInput {
    pub fn new(config: &crate::config::CollectionConfig) -> Self {
        Self {
            dense: config
                .dense
                .iter()
                .map(|s| SpaceInput {
                    dim: s.dim,
                    ..Default::default()
                })
                .collect(),
            sparse: vec![Vec::new(); config.sparse.len()],
            multi: vec![Vec::new(); config.multi.len()],
            ids: Vec::new(),
            versions: Vec::new(),
            payloads: SealPayloads::Json(PayloadJson::default()),
        }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Appends a point's id, version, payload, sparse vectors and multivectors; its dense
    /// vectors come from the spaces' parts, which the caller keeps in step.
    pub fn push_point(
        &mut self,
        id: PointId,
        version: u64,
        payload: &Payload,
        sparse: impl Fn(usize) -> Option<SparseVector>,
        multi: impl Fn(usize) -> Option<Vec<f32>>,
    ) {
        self.ids.push(id);
        self.versions.push(version);
        match &mut self.payloads {
            SealPayloads::Json(json) => json.push(payload),
            SealPayloads::Shared(shared) => Arc::make_mut(shared).push(payload.clone()),
        }
        for (i, column) in self.sparse.iter_mut().enumerate() {
            column.push(sparse(i));
        }
        for (i, column) in self.multi.iter_mut().enumerate() {
            column.push(multi(i));
        }
    }

    /// Dense space `space`'s vectors, streamed for a build; the ids are the points' new
    /// offsets.
    pub fn source(&self, space: usize) -> SealSource<'_> {
        SealSource {
            space: &self.dense[space],
            part: 0,
            row_in_part: 0,
            delivered: 0,
            seeds: Vec::new(),
        }
    }

    /// Whether every space's parts hold one vector per point listed for it, and every
    /// sparse space one entry per point (a mismatch is a bug of the caller).
    pub fn rows_match(&self) -> bool {
        self.dense.iter().all(|s| {
            s.parts.iter().map(|p| p.rows(s.dim)).sum::<usize>() == s.offsets.len()
                && s.offsets.last().is_none_or(|&o| (o as usize) < self.len())
        }) && self.sparse.iter().all(|c| c.len() == self.len())
            && self.multi.iter().all(|c| c.len() == self.len())
    }
}

/// A `SealInput`'s vectors as a build reads them, with the graph lists of points that come
/// from sealed segments (as new offsets; neighbours that are not carried over are left
/// out), so that a merge builds only the edges between its sources.
pub(crate) struct SealSource<'a> {
    space: &'a SpaceInput,
    part: usize,
    row_in_part: usize,
    delivered: usize,
    /// One list per row of the last chunk (empty for rows of frozen segments).
    seeds: Vec<Vec<u32>>,
}

impl VectorSource for SealSource<'_> {
    fn dim(&self) -> usize {
        self.space.dim
    }

    fn rows(&self) -> usize {
        self.space.offsets.len()
    }

    fn seed_lists(&mut self, lists: &mut Vec<Vec<u32>>) {
        std::mem::swap(lists, &mut self.seeds);
        self.seeds.clear();
    }

    fn rewind(&mut self) -> Result<(), String> {
        self.part = 0;
        self.row_in_part = 0;
        self.delivered = 0;
        self.seeds.clear();
        Ok(())
    }

    fn next_chunk(&mut self, data: &mut Vec<f32>, ids: &mut Vec<i64>) -> Result<usize, String> {
        data.clear();
        ids.clear();
        self.seeds.clear();
        let dim = self.space.dim;
        let limit = CHUNK_ROWS.min((CHUNK_BYTES / (4 * dim.max(1))).max(1));
        while ids.len() < limit {
            let Some(part) = self.space.parts.get(self.part) else {
                break;
            };
            let rows = part.rows(dim);
            if self.row_in_part >= rows {
                self.part += 1;
                self.row_in_part = 0;
                continue;
            }
            let take = (limit - ids.len()).min(rows - self.row_in_part);
            let span = self.row_in_part..self.row_in_part + take;
            match part {
                VectorPart::Frozen {
                    vectors,
                    offsets: None,
                } => {
                    vectors.extend_f32(span.start * dim, span.end * dim, data);
                    self.seeds.resize(self.seeds.len() + take, Vec::new());
                }
                VectorPart::Frozen {
                    vectors,
                    offsets: Some(offsets),
                } => {
                    for &o in &offsets[span] {
                        let at = o as usize * dim;
                        vectors.extend_f32(at, at + dim, data);
                    }
                    self.seeds.resize(self.seeds.len() + take, Vec::new());
                }
                VectorPart::Sealed {
                    segment,
                    space,
                    offsets,
                } => {
                    let read = segment
                        .vectors_and_neighbours(*space, &offsets[span])
                        .map_err(|e| {
                            format!("reading vectors of segment {}: {e}", segment.dir.display())
                        })?;
                    // The part's rows are its live offsets in increasing order, numbered
                    // from `first` among the space's rows.
                    let first = (self.delivered - self.row_in_part) as u32;
                    for (v, neighbours) in read {
                        data.extend_from_slice(&v);
                        self.seeds.push(
                            neighbours
                                .iter()
                                .filter_map(|o| offsets.binary_search(o).ok())
                                .map(|row| first + row as u32)
                                .collect(),
                        );
                    }
                }
            }
            ids.extend(
                self.space.offsets[self.delivered..self.delivered + take]
                    .iter()
                    .map(|&o| i64::from(o)),
            );
            self.delivered += take;
            self.row_in_part += take;
        }
        Ok(ids.len())
    }
}
