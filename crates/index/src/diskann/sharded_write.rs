//! The last pass of a build in shards: the navigation file, meta.dvm and the node files,
//! from the scratch files (sharded.rs) and a last read of the input.
//!
//! Where the merged graph fits the budget, nodes are placed as an in-memory build places
//! them (`sector_order`: breadth-first from the medoid, each sector filled with graph
//! neighbours, so one read often brings two nodes a search wants and the node cache is a
//! prefix of the file); codes are then read from the scratch files by position, and the
//! vectors from a copy of the input in the storage type, a batch at a time in parallel.
//! Otherwise nodes keep input order and everything streams, the vectors straight from the
//! input.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use diskvec_io::{SpillReader, SpillWriter};
use diskvec_vector::{ElementType, ProductQuantizer, ScalarQuantizer4};
use rayon::prelude::*;

use super::budget::{BuildPlan, FILE_BUFFER};
use super::build::{write_nodes, BuildParams};
use super::meta_writer::{stage_meta, MetaParts, MetaStage, StagedMeta};
use super::nav::{NavSummary, NavWriter, SteppedAside, WalkCodes};
use super::reorder::sector_order_of;
use super::sharded_codes::{Codes, ScratchCodes, StreamedCodes};
use super::source::InputPass;
use super::summed_file::SummedWriter;
use super::Header;
use crate::error::file_error;
use crate::{Progress, Result};

/// Rows of a scratch file read by position through an order, a batch at a time.
struct RowsByPosition<'a> {
    file: File,
    path: PathBuf,
    row_bytes: usize,
    order: &'a [u32],
    first: usize,
    count: usize,
    batch: Vec<u8>,
    /// The reads of a batch go out from this many threads at once: rows lie scattered over
    /// a file larger than the page cache the build may use, so each is a device read, and
    /// with only the build's threads (2 here) they were read one at a time each (a 1M x 768
    /// build spent 44 s placing nodes at ~90 MB/s on a device that reads 1.3 GB/s).
    readers: rayon::ThreadPool,
}

const BATCH_ROWS: usize = 4096;

/// Reads of one batch in flight at once (measured on this machine's virtio disk: random
/// 4 KiB reads peak at depth 32).
const READ_DEPTH: usize = 32;

impl<'a> RowsByPosition<'a> {
    fn open(path: &Path, row_bytes: usize, order: &'a [u32]) -> Result<Self> {
        let readers = rayon::ThreadPoolBuilder::new()
            .num_threads(READ_DEPTH)
            .thread_name(|i| format!("diskvec-rows-{i}"))
            .build()
            .map_err(|e| file_error(path)(std::io::Error::other(e)))?;
        Ok(Self {
            file: File::open(path).map_err(file_error(path))?,
            path: path.to_path_buf(),
            row_bytes,
            order,
            first: 0,
            count: 0,
            batch: vec![0u8; BATCH_ROWS * row_bytes],
            readers,
        })
    }

    /// The row placed at `pos` (positions asked in increasing order).
    fn get(&mut self, pos: usize) -> Result<&[u8]> {
        if pos < self.first || pos >= self.first + self.count {
            self.first = pos;
            self.count = BATCH_ROWS.min(self.order.len() - pos);
            let (file, order, row_bytes) = (&self.file, &self.order[pos..], self.row_bytes);
            let batch = &mut self.batch[..self.count * row_bytes];
            self.readers
                .install(|| {
                    batch
                        .par_chunks_mut(row_bytes)
                        .with_max_len(1)
                        .zip(order.par_iter())
                        .try_for_each(|(out, &old)| {
                            file.read_exact_at(out, old as u64 * row_bytes as u64)
                        })
                })
                .map_err(file_error(&self.path))?;
        }
        let at = (pos - self.first) * self.row_bytes;
        Ok(&self.batch[at..at + self.row_bytes])
    }
}

/// Hands every row of the scratch file `path` (`n` rows of `row_bytes`) to `sink`, in node
/// order: through the placement's `order` (a batch read by position at a time) when nodes
/// were placed, else as they lie, `chunk_rows` at a time.
fn stream_rows(
    path: &Path,
    n: usize,
    row_bytes: usize,
    order: Option<&[u32]>,
    chunk_rows: usize,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    match order {
        Some(order) => {
            let mut rows = RowsByPosition::open(path, row_bytes, order)?;
            for pos in 0..n {
                sink(rows.get(pos)?)?;
            }
        }
        None => {
            let mut input = SpillReader::open(path, FILE_BUFFER)?;
            let mut buf = vec![0u8; chunk_rows * row_bytes];
            let mut left = n;
            while left > 0 {
                let rows = left.min(chunk_rows);
                input.read_exact(&mut buf[..rows * row_bytes])?;
                sink(&buf[..rows * row_bytes])?;
                left -= rows;
            }
        }
    }
    Ok(())
}

/// The merged graph in memory, flat: node `i`'s list is `neighbors[offsets[i]..offsets[i+1]]`.
struct Lists {
    offsets: Vec<u32>,
    neighbors: Vec<u32>,
}

impl Lists {
    fn of(&self, node: u32) -> &[u32] {
        let i = node as usize;
        &self.neighbors[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// Where each node goes: `order[position]` is the input row placed there.
struct Placement {
    order: Vec<u32>,
    position: Vec<u32>,
    lists: Lists,
}

/// What the last pass reads: the input once more, the codes, and scratch files.
pub(crate) struct Inputs<'a, 's> {
    /// The input, rewound: the node records' vectors.
    pub vectors: InputPass<'s>,
    /// What the first pass over the input read (`InputPass::fingerprint`).
    pub fingerprint: u64,
    /// Where the vectors are copied in storage type when nodes are placed by position.
    pub placed_vectors: PathBuf,
    pub graph: PathBuf,
    pub ids: Vec<i64>,
    pub targets: &'a [PathBuf],
    pub stored_paths: &'a [String],
    /// Entry nodes, by input row (mapped to positions when nodes are placed).
    pub entries: &'a [u32],
    pub nav_target: &'a Path,
    pub compact_target: Option<&'a Path>,
    /// The index directory, where meta.dvm is staged.
    pub out: &'a Path,
}

/// What writing the outputs produced: meta.dvm's size (staged, committed last), the nodes'
/// header, and whether navigation was left off.
pub(crate) struct Written {
    pub meta_file_bytes: u64,
    pub header: Header,
    pub navigation_off: Option<SteppedAside>,
}

/// What the navigation file says of its codes.
pub(crate) struct NavChoice<'a> {
    pub sq: &'a ScalarQuantizer4,
    pub walk: WalkCodes,
    pub code_recall: f32,
}

/// Reads the scratch graph file whole.
fn read_graph(path: &Path, n: usize, r: usize, edges: u64) -> Result<Lists> {
    let mut graph = GraphReader::open(path, r)?;
    let mut offsets = Vec::with_capacity(n + 1);
    let mut neighbors = Vec::with_capacity(edges as usize);
    let mut list = Vec::with_capacity(r);
    offsets.push(0u32);
    for _ in 0..n {
        graph.next(&mut list)?;
        neighbors.extend_from_slice(&list);
        offsets.push(neighbors.len() as u32);
    }
    Ok(Lists { offsets, neighbors })
}

/// Whether the merged graph, the order and its breadth-first queue fit next to what the
/// build holds anyway (ids, buffers).
/// The placement lives on while meta.dvm is streamed (a batch of codes read by position).
pub(crate) fn placement_fits(
    plan: &BuildPlan,
    n: usize,
    edges: u64,
    row_bytes: usize,
    pq_bytes: usize,
) -> bool {
    let n = n as u64;
    let meta = (BATCH_ROWS * (pq_bytes + 8)) as u64;
    let need = (32 << 20)
        + 16 * n
        + 4 * n
        + 8 * edges
        + 9 * n
        + 2 * (BATCH_ROWS * row_bytes) as u64
        + meta;
    need <= plan.budget
}

/// Writes the navigation file, stages meta.dvm, writes the node files, and returns the header.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_outputs(
    mut inputs: Inputs,
    codes: Codes,
    params: &BuildParams,
    plan: &BuildPlan,
    header_probe: Header,
    (pq, compact): (&ProductQuantizer, Option<&ProductQuantizer>),
    nav_choice: NavChoice,
    edges: u64,
    build_id: u64,
    progress: &dyn Progress,
) -> Result<Written> {
    let n = header_probe.count as usize;
    let dim = header_probe.dim as usize;
    let r = params.max_degree;
    let layout = header_probe.layout();
    let sq = nav_choice.sq;
    let placement = match &codes {
        Codes::Scratch(_) => {
            progress.phase("placing nodes in sectors", 1);
            let lists = read_graph(&inputs.graph, n, r, edges)?;
            let order = sector_order_of(n, header_probe.medoid, layout.nodes_per_sector, |u| {
                lists.of(u)
            });
            let mut position = vec![0u32; n];
            for (pos, &old) in order.iter().enumerate() {
                position[old as usize] = pos as u32;
            }
            progress.advance(1);
            Some(Placement {
                order,
                position,
                lists,
            })
        }
        Codes::Streamed(_) => {
            log::info!("nodes keep input order: the merged graph does not fit the budget");
            None
        }
    };

    progress.phase("navigation codes", n as u64);
    let summary = NavSummary {
        build_id,
        n,
        edges: edges as usize,
        sq,
        walk: nav_choice.walk,
        code_recall: nav_choice.code_recall,
    };
    let navigation_off = summary.step_aside(dim);
    let storage = params.storage.as_ref();
    // meta.dvm is finished last: it holds the node header, medoid included.
    let meta = match codes {
        Codes::Streamed(streamed) => {
            let StreamedCodes {
                meta, compact, nav, ..
            } = *streamed;
            match &navigation_off {
                Some(off) => {
                    // The abandoned codes' writer goes first, flushing into and removing
                    // the temporary file it shares with the header-only file below.
                    drop(nav);
                    summary.write_stepped_aside(storage, inputs.nav_target, off.why)?;
                }
                None => {
                    let mut nav = nav;
                    write_lists(&mut nav, &inputs, &None, plan, r, progress)?;
                    nav.finish_with_header(&summary.header(None))?;
                }
            }
            if let Some(w) = compact {
                w.finish()?;
            }
            MetaToStage::Streamed(meta)
        }
        Codes::Scratch(files) => {
            if let Some(off) = &navigation_off {
                summary.write_stepped_aside(storage, inputs.nav_target, off.why)?;
            } else {
                let mut nav = NavWriter::create(storage, inputs.nav_target, &summary)?;
                let order = placement.as_ref().map(|p| &p.order[..]);
                let sq_record = sq.code_bytes() + 4;
                stream_rows(&files.sq4, n, sq_record, order, plan.chunk_rows, |codes| {
                    nav.write(codes)
                })?;
                write_lists(&mut nav, &inputs, &placement, plan, r, progress)?;
                nav.finish()?;
            }
            if let (Some(compact), Some(target)) = (compact, inputs.compact_target) {
                let order = placement.as_ref().map(|p| &p.order[..]);
                let mut w = super::compact::create(storage, target, build_id, n, compact)?;
                let mc = compact.code_bytes();
                stream_rows(&files.compact, n, mc, order, plan.chunk_rows, |codes| {
                    w.write(codes)
                })?;
                w.finish()?;
            }
            MetaToStage::Placed(files)
        }
    };
    if let Some(off) = &navigation_off {
        log::info!("navigation left off: {off}");
    }

    let medoid = match &placement {
        Some(p) => p.position[header_probe.medoid as usize],
        None => header_probe.medoid,
    };
    let geometry = Header {
        medoid,
        ..header_probe
    };
    let staged = match meta {
        // Codes already in meta.dvm.tmp, in input order: the ids follow.
        MetaToStage::Streamed(mut meta) => {
            meta.ids(&inputs.ids)?;
            meta.finish(&geometry)?
        }
        MetaToStage::Placed(files) => {
            let parts = (&inputs, &files, &placement);
            stage_placed_meta(storage, parts, pq, plan, &geometry, build_id)?
        }
    };
    let header = Header {
        meta_crc: staged.crc,
        ..geometry
    };
    write_node_file(&mut inputs, params, &header, &placement, progress)?;
    Ok(Written {
        meta_file_bytes: staged.bytes,
        header,
        navigation_off,
    })
}

/// What remains of meta.dvm once the other files are written: the ids and tail of the one
/// the codes were streamed into, or all of it from the scratch codes of placed nodes.
enum MetaToStage<'a> {
    Streamed(MetaStage<'a>),
    Placed(ScratchCodes),
}

/// meta.dvm of placed nodes: PQ codes and ids read by position, entries mapped to positions.
fn stage_placed_meta(
    storage: &dyn diskvec_io::storage::Storage,
    (inputs, files, placement): (&Inputs, &ScratchCodes, &Option<Placement>),
    pq: &ProductQuantizer,
    plan: &BuildPlan,
    geometry: &Header,
    build_id: u64,
) -> Result<StagedMeta> {
    let n = geometry.count as usize;
    let order = placement.as_ref().map(|p| &p.order[..]);
    let entries: Vec<u32> = match placement {
        Some(p) => inputs
            .entries
            .iter()
            .map(|&e| p.position[e as usize])
            .collect(),
        None => inputs.entries.to_vec(),
    };
    let codebook = pq.to_bytes();
    let m = pq.code_bytes();
    let parts = MetaParts {
        build_id,
        count: n,
        codebook: &codebook,
        code_bytes: m,
        entries: &entries,
        paths: inputs.stored_paths,
    };
    stage_meta(storage, inputs.out, parts, geometry, |w| {
        stream_rows(&files.pq, n, m, order, plan.chunk_rows, |codes| {
            w.codes(codes)
        })?;
        match order {
            Some(order) => {
                let mut placed = Vec::with_capacity(BATCH_ROWS);
                for chunk in order.chunks(BATCH_ROWS) {
                    placed.clear();
                    placed.extend(chunk.iter().map(|&old| inputs.ids[old as usize]));
                    w.ids(&placed)?;
                }
            }
            None => w.ids(&inputs.ids)?,
        }
        Ok(())
    })
}

/// The node file: vectors from the input's last pass (through a copy in the storage type
/// when nodes are placed by position), lists from the merged graph.
fn write_node_file(
    inputs: &mut Inputs,
    params: &BuildParams,
    header: &Header,
    placement: &Option<Placement>,
    progress: &dyn Progress,
) -> Result<()> {
    let (n, dim) = (header.count as usize, header.dim as usize);
    let element = params.element;
    match placement {
        Some(p) => {
            copy_vectors(&mut inputs.vectors, element, &inputs.placed_vectors)?;
            let row_bytes = dim * element.bytes();
            let mut vectors = RowsByPosition::open(&inputs.placed_vectors, row_bytes, &p.order)?;
            write_nodes(
                inputs.targets,
                params,
                header,
                n,
                progress,
                |pos, vector, neighbours| {
                    element.decode_into(vectors.get(pos)?, vector);
                    neighbours.clear();
                    let old = p.order[pos];
                    neighbours.extend(p.lists.of(old).iter().map(|&q| p.position[q as usize]));
                    Ok(())
                },
            )?;
            let _ = std::fs::remove_file(&inputs.placed_vectors);
        }
        None => {
            let mut graph = GraphReader::open(&inputs.graph, params.max_degree)?;
            let (mut chunk, mut at) = (Vec::new(), 0usize);
            let pass = &mut inputs.vectors;
            write_nodes(
                inputs.targets,
                params,
                header,
                n,
                progress,
                |_, vector, neighbours| {
                    if at * dim == chunk.len() {
                        at = 0;
                        if pass.next(&mut chunk)? == 0 {
                            return Err(crate::IndexError::InvalidArgument(
                                "the input ended early when read again".into(),
                            ));
                        }
                    }
                    vector.clear();
                    vector.extend_from_slice(&chunk[at * dim..(at + 1) * dim]);
                    at += 1;
                    graph.next(neighbours)
                },
            )?;
        }
    }
    inputs.vectors.finish_same_as(inputs.fingerprint)
}

/// The input's rows, as the node records hold them, to `path` in input order.
fn copy_vectors(pass: &mut InputPass, element: ElementType, path: &Path) -> Result<()> {
    let mut out = SpillWriter::create(path, FILE_BUFFER)?;
    let (mut chunk, mut bytes) = (Vec::new(), Vec::new());
    while pass.next(&mut chunk)? > 0 {
        bytes.resize(chunk.len() * element.bytes(), 0);
        element.encode(&chunk, &mut bytes);
        out.write_all(&bytes)?;
    }
    out.finish(false)?;
    Ok(())
}

pub(crate) fn le_f32s(bytes: &[u8], out: &mut Vec<f32>) {
    out.clear();
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
    );
}

/// Reads the scratch graph file a vector's list at a time.
pub(crate) struct GraphReader {
    input: SpillReader,
    bytes: Vec<u8>,
}

impl GraphReader {
    pub(crate) fn open(path: &Path, r: usize) -> Result<Self> {
        Ok(Self {
            input: SpillReader::open(path, FILE_BUFFER)?,
            bytes: vec![0u8; 4 * (r + 1)],
        })
    }

    pub(crate) fn next(&mut self, out: &mut Vec<u32>) -> Result<()> {
        self.input.read_exact(&mut self.bytes)?;
        let room = self.bytes.len() / 4 - 1;
        let degree =
            (u32::from_le_bytes(self.bytes[..4].try_into().expect("4 bytes")) as usize).min(room);
        out.clear();
        out.extend(
            self.bytes[4..4 + 4 * degree]
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
        );
        Ok(())
    }
}

/// The navigation file's offsets and lists (after its 4-bit records), mapped to positions
/// when the nodes were placed, in input order otherwise.
fn write_lists(
    nav: &mut SummedWriter,
    inputs: &Inputs,
    placement: &Option<Placement>,
    plan: &BuildPlan,
    r: usize,
    progress: &dyn Progress,
) -> Result<()> {
    let n = inputs.ids.len();
    match placement {
        Some(p) => {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0u32);
            for &old in &p.order {
                let last = *offsets.last().expect("starts with 0");
                offsets.push(last + p.lists.of(old).len() as u32);
            }
            nav.write_words(&offsets)?;
            drop(offsets);
            let mut mapped = Vec::with_capacity(r);
            for &old in &p.order {
                mapped.clear();
                mapped.extend(p.lists.of(old).iter().map(|&q| p.position[q as usize]));
                nav.write_words(&mapped)?;
                progress.advance(1);
            }
        }
        None => {
            let mut list = Vec::new();
            let mut offsets = Vec::with_capacity(plan.chunk_rows + 1);
            let mut graph = GraphReader::open(&inputs.graph, r)?;
            let mut at = 0u32;
            offsets.push(at);
            for _ in 0..n {
                graph.next(&mut list)?;
                at += list.len() as u32;
                offsets.push(at);
                if offsets.len() >= plan.chunk_rows {
                    nav.write_words(&offsets)?;
                    offsets.clear();
                }
            }
            nav.write_words(&offsets)?;
            let mut graph = GraphReader::open(&inputs.graph, r)?;
            for _ in 0..n {
                graph.next(&mut list)?;
                nav.write_words(&list)?;
                progress.advance(1);
            }
        }
    }
    Ok(())
}
