//! Where a build in shards puts each vector's codes (PQ, compact, 4-bit) as it encodes
//! them. When nodes keep input order (the merged graph does not fit the budget, as at 10M
//! in 2 GiB), straight into the index files being built: `meta.dvm.tmp`, the compact file
//! and the navigation file, whose headers are completed at the end; the codes never take
//! scratch space. When nodes are placed by position (decided before the first code, from
//! the most edges the graph can have), their order is known only after the merge, so the
//! codes go to scratch files read back by position.

use std::path::{Path, PathBuf};

use diskvec_io::storage::Storage;
use diskvec_io::SpillWriter;
use diskvec_vector::{ProductQuantizer, ScalarQuantizer4};

use super::budget::FILE_BUFFER;
use super::meta_writer::{MetaParts, MetaStage};
use super::nav::{NavSummary, NavWriter, WalkCodes};
use super::summed_file::SummedWriter;
use crate::Result;

/// The index files that receive the codes in input order, open from the first code to the
/// last pass.
pub(crate) struct StreamedCodes<'a> {
    pub meta: MetaStage<'a>,
    pub compact: Option<SummedWriter<'a>>,
    pub nav: SummedWriter<'a>,
    /// Offset of the first 4-bit record in the navigation file.
    pub nav_codes_at: u64,
}

/// The scratch files holding the codes in input order.
pub(crate) struct ScratchCodes {
    pub pq: PathBuf,
    pub compact: PathBuf,
    pub sq4: PathBuf,
}

/// Where the codes went, once every vector is encoded.
pub(crate) enum Codes<'a> {
    Streamed(Box<StreamedCodes<'a>>),
    Scratch(ScratchCodes),
}

/// Where the codes go while vectors are encoded.
pub(crate) enum CodeWriter<'a> {
    Streamed(StreamedCodes<'a>),
    Scratch {
        files: ScratchCodes,
        pq: SpillWriter,
        compact: Option<SpillWriter>,
        sq4: SpillWriter,
    },
}

/// What the index files need to start before any code: where they go and what their
/// headers say that is known after training.
pub(crate) struct IndexTargets<'a> {
    pub storage: &'a dyn Storage,
    pub out: &'a Path,
    pub meta: MetaParts<'a>,
    pub element: diskvec_vector::ElementType,
    pub compact: Option<(&'a Path, &'a ProductQuantizer)>,
    pub nav: &'a Path,
    pub build_id: u64,
    pub sq: &'a ScalarQuantizer4,
}

impl<'a> CodeWriter<'a> {
    /// Codes straight into the index files.
    pub fn streamed(t: IndexTargets<'a>) -> Result<Self> {
        let count = t.meta.count;
        let meta = MetaStage::create(t.storage, t.out, t.meta, t.element)?;
        let compact = match t.compact {
            Some((path, pq)) => Some(super::compact::create(
                t.storage, path, t.build_id, count, pq,
            )?),
            None => None,
        };
        // The header is written again at the end, with the edges and the walk check's
        // findings (`finish_navigation`).
        let placeholder = NavSummary {
            build_id: t.build_id,
            n: count,
            edges: 0,
            sq: t.sq,
            walk: WalkCodes::Sq4,
            code_recall: 0.0,
        };
        let nav = NavWriter::create(t.storage, t.nav, &placeholder)?;
        let nav_codes_at = nav.position();
        Ok(Self::Streamed(StreamedCodes {
            meta,
            compact,
            nav,
            nav_codes_at,
        }))
    }

    /// Codes to scratch files.
    pub fn scratch(files: ScratchCodes, with_compact: bool) -> Result<Self> {
        Ok(Self::Scratch {
            pq: SpillWriter::create(&files.pq, FILE_BUFFER)?,
            compact: match with_compact {
                true => Some(SpillWriter::create(&files.compact, FILE_BUFFER)?),
                false => None,
            },
            sq4: SpillWriter::create(&files.sq4, FILE_BUFFER)?,
            files,
        })
    }

    /// The next vector's codes: PQ, compact (empty without a compact codebook), and its
    /// 4-bit record (code and norm).
    pub fn write(&mut self, pq: &[u8], compact: &[u8], sq4: &[u8]) -> Result<()> {
        match self {
            Self::Streamed(s) => {
                s.meta.codes(pq)?;
                if let Some(c) = s.compact.as_mut() {
                    c.write(compact)?;
                }
                s.nav.write(sq4)
            }
            Self::Scratch {
                pq: p,
                compact: c,
                sq4: q,
                ..
            } => {
                p.write_all(pq)?;
                if let Some(c) = c.as_mut() {
                    c.write_all(compact)?;
                }
                Ok(q.write_all(sq4)?)
            }
        }
    }

    /// Every vector encoded.
    pub fn close(self) -> Result<Codes<'a>> {
        match self {
            Self::Streamed(s) => Ok(Codes::Streamed(Box::new(s))),
            Self::Scratch {
                files,
                pq,
                compact,
                sq4,
            } => {
                pq.finish(false)?;
                if let Some(c) = compact {
                    c.finish(false)?;
                }
                sq4.finish(false)?;
                Ok(Codes::Scratch(files))
            }
        }
    }
}

impl Codes<'_> {
    /// The file and offset where every vector's 4-bit record lies, in input order, for a
    /// reader (the merge's re-prune).
    pub fn sq4_records(&mut self) -> Result<(PathBuf, u64)> {
        match self {
            Self::Streamed(s) => {
                s.nav.settle()?;
                Ok((s.nav.temp().to_path_buf(), s.nav_codes_at))
            }
            Self::Scratch(files) => Ok((files.sq4.clone(), 0)),
        }
    }
}
