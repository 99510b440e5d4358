//! The node records an index holds in DRAM: a prefix of the node file (nodes are numbered
//! breadth-first from the medoid, so the prefix is the neighbourhood every search walks
//! through first), the entry nodes beyond it, and the records the searches' reads found
//! worth keeping (`HotRecords`).
//!
//! The cache can be resized while searches run (`DiskIndex::resize_node_cache`): a search
//! takes the cache as it stands when it starts (an `Arc`), and the prefix is kept in chunks
//! shared between the old and the new cache, so growing it reads only the records it adds
//! and never holds two copies of the ones it keeps.

use std::sync::Arc;

use diskvec_io::{AlignedBuf, Volume, SECTOR};

use super::hot_records::HotRecords;
use super::layout::{NodeLayout, NodeRecord};
use crate::Result;

/// Records per chunk of the prefix: about 16 MiB of 768-d records, small enough that a
/// resize overshoots its target by little, large enough that lookups stay one division.
/// (The crate's own tests use small chunks, so that their small indexes span several.)
const CHUNK_BYTES: usize = if cfg!(test) { 8 << 10 } else { 16 << 20 };

pub(crate) struct NodeCache {
    /// Records of nodes `0..prefix`, `chunk_nodes` a chunk.
    chunks: Vec<Arc<Vec<u8>>>,
    chunk_nodes: usize,
    prefix: u32,
    /// Entry nodes at or beyond the prefix (sorted) and their records.
    entry_ids: Vec<u32>,
    entry_records: Vec<u8>,
    /// Records admitted by the searches' reads.
    hot: HotRecords,
    node_bytes: usize,
    dim: usize,
    element: diskvec_vector::ElementType,
}

impl NodeCache {
    /// The records of nodes `0..prefix` and of `entry_ids` (sorted, beyond the prefix), and
    /// room for `hot` records admitted by reads, reusing the chunks of `keep` that the new
    /// prefix covers and the measured records of `keep` that fit.
    pub fn load(
        volume: &Volume,
        layout: &NodeLayout,
        nodes: usize,
        plan: CachePlan,
        keep: Option<&NodeCache>,
    ) -> Result<Self> {
        let CachePlan {
            prefix,
            entry_ids,
            hot,
        } = plan;
        let chunk_nodes = chunk_nodes(layout);
        let mut chunks: Vec<Arc<Vec<u8>>> = Vec::with_capacity(prefix.div_ceil(chunk_nodes));
        let full = |c: &Arc<Vec<u8>>| c.len() == chunk_nodes * layout.node_bytes;
        if let Some(old) = keep {
            // Whole chunks the new prefix covers; a partial last chunk is read again.
            chunks.extend(
                old.chunks
                    .iter()
                    .take(prefix / chunk_nodes)
                    .take_while(|c| full(c))
                    .cloned(),
            );
        }
        let mut from = chunks.len() * chunk_nodes;
        while from < prefix {
            let to = (from + chunk_nodes).min(prefix);
            chunks.push(Arc::new(load_range(volume, layout, from, to)?));
            from = to;
        }
        let entry_records = load_records(volume, layout, &entry_ids)?;
        let hot = HotRecords::new(nodes, hot, layout.node_bytes, keep.map(|k| &k.hot));
        Ok(Self {
            chunks,
            chunk_nodes,
            prefix: prefix as u32,
            entry_ids,
            entry_records,
            hot,
            node_bytes: layout.node_bytes,
            dim: layout.dim,
            element: layout.element,
        })
    }

    /// The record of node `id` if the cache holds it: borrowed from the prefix or the
    /// entries, or copied into `copy` from the measured records (which another search may
    /// replace meanwhile).
    pub fn record<'a>(&'a self, id: u32, copy: &'a mut Vec<u8>) -> Option<NodeRecord<'a>> {
        let nb = self.node_bytes;
        let bytes = if id < self.prefix {
            let (c, i) = (
                id as usize / self.chunk_nodes,
                id as usize % self.chunk_nodes,
            );
            &self.chunks[c][i * nb..(i + 1) * nb]
        } else if let Ok(i) = self.entry_ids.binary_search(&id) {
            &self.entry_records[i * nb..(i + 1) * nb]
        } else if self.hot.copy(id, copy) {
            copy.as_slice()
        } else {
            return None;
        };
        Some(NodeRecord::new(bytes, self.dim, self.element))
    }

    /// Whether node `id`'s record is held (without marking it used).
    pub fn contains(&self, id: u32) -> bool {
        id < self.prefix || self.entry_ids.binary_search(&id).is_ok() || self.hot.contains(id)
    }

    /// Node `id` was just read and its record is `bytes`: the measured set may keep it.
    pub fn offer(&self, id: u32, bytes: &[u8]) {
        if id >= self.prefix && self.entry_ids.binary_search(&id).is_err() {
            self.hot.offer(id, bytes);
        }
    }

    /// Records held: the prefix, the entry nodes beyond it, and the measured ones.
    pub fn nodes(&self) -> usize {
        self.prefix as usize + self.entry_ids.len() + self.hot.len()
    }

    /// The plan it was loaded with.
    pub fn plan(&self) -> CachePlan {
        CachePlan {
            prefix: self.prefix as usize,
            entry_ids: self.entry_ids.clone(),
            hot: self.hot.capacity(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum::<usize>()
            + self.entry_records.len()
            + self.hot.bytes()
    }
}

/// What a node cache holds: the file's first `prefix` records, the entry nodes beyond them
/// (sorted), and room for `hot` records admitted by reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CachePlan {
    pub prefix: usize,
    pub entry_ids: Vec<u32>,
    pub hot: usize,
}

impl CachePlan {
    /// The records it has room for.
    pub fn records(&self) -> usize {
        self.prefix + self.entry_ids.len() + self.hot
    }
}

fn chunk_nodes(layout: &NodeLayout) -> usize {
    // A whole number of sector groups, so a chunk is read without splitting one.
    let per_group = layout.nodes_per_sector.max(1);
    (CHUNK_BYTES / layout.node_bytes.max(1) / per_group).max(1) * per_group
}

/// Reads the records of the given nodes (sorted ids); the volume checks their sectors.
fn load_records(volume: &Volume, layout: &NodeLayout, ids: &[u32]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(ids.len() * layout.node_bytes);
    let mut buf = AlignedBuf::new(layout.read_bytes());
    let mut scratch = Vec::new();
    for &id in ids {
        volume.read_exact_at(buf.as_mut_slice(), layout.offset_of(id))?;
        out.extend_from_slice(layout.record(buf.as_slice(), id, &mut scratch).bytes());
    }
    Ok(out)
}

/// Reads the records of nodes `from..to` (`from` at a sector group's start) into one
/// buffer; the volume checks every sector on the way.
fn load_range(volume: &Volume, layout: &NodeLayout, from: usize, to: usize) -> Result<Vec<u8>> {
    let per_group = layout.nodes_per_sector;
    debug_assert_eq!(from % per_group, 0);
    let mut cache = Vec::with_capacity((to - from) * layout.node_bytes);
    let (first, last) = (from / per_group, to.div_ceil(per_group));
    let group_bytes = layout.read_bytes();
    let per_read = ((1 << 20) / group_bytes).max(1);
    let mut buf = AlignedBuf::new(per_read * group_bytes);
    let mut scratch = Vec::new();
    let mut g = first;
    while g < last {
        let take = per_read.min(last - g);
        let bytes = take * group_bytes;
        volume.read_exact_at(
            &mut buf.as_mut_slice()[..bytes],
            (SECTOR + g * group_bytes) as u64,
        )?;
        let chunk = &buf.as_slice()[..bytes];
        for (i, group) in chunk.chunks_exact(group_bytes).enumerate() {
            for slot in 0..per_group {
                let id = (g + i) * per_group + slot;
                if id >= to {
                    break;
                }
                cache.extend_from_slice(layout.record(group, id as u32, &mut scratch).bytes());
            }
        }
        g += take;
    }
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use crate::diskann::{build, BuildParams, DiskIndex, OpenOptions, SearchParams};
    use crate::NoProgress;
    use diskvec_vector::Metric;
    use rand::{Rng, SeedableRng};

    /// An index of `n` random `dim`-d vectors (ids 0..n) in a new directory, and the vectors.
    fn random_index(n: usize, dim: usize, seed: u64) -> (tempfile::TempDir, Vec<f32>) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let data: Vec<f32> = (0..n * dim)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let ids: Vec<i64> = (0..n as i64).collect();
        let dir = tempfile::tempdir().unwrap();
        let params = BuildParams {
            metric: Metric::L2,
            max_degree: 16,
            build_list: 40,
            pq_bytes: Some(8),
            ..Default::default()
        };
        build(&data, dim, &ids, &params, dir.path(), &NoProgress).unwrap();
        (dir, data)
    }

    #[test]
    fn a_cache_resized_under_running_searches_changes_their_reads_not_their_quality() {
        let (n, dim) = (3000, 24);
        let (dir, data) = random_index(n, dim, 5);
        let options = OpenOptions {
            cache_nodes: Some(0),
            ..Default::default()
        };
        let index = DiskIndex::open(dir.path(), &options).unwrap();
        assert_eq!(index.cached_nodes(), 0);
        let search = SearchParams {
            k: 10,
            search_list: 40,
            ..Default::default()
        };
        let queries: Vec<&[f32]> = (0..20).map(|q| &data[q * 37 * dim..][..dim]).collect();
        let answer = |q: &[f32]| index.search(q, &search).unwrap();
        let baseline: Vec<Vec<i64>> = queries.iter().map(|q| answer(q).ids).collect();
        // A cached node is expanded at once, a read one when its read completes: the walk's
        // order, and now and then its last result, depend on what is held. Nearly all stay.
        let same = |got: &[Vec<i64>]| {
            let kept: usize = got
                .iter()
                .zip(&baseline)
                .map(|(g, b)| g.iter().filter(|id| b.contains(id)).count())
                .sum();
            kept as f64 / (10 * baseline.len()) as f64
        };
        let reads_uncached: u32 = queries.iter().map(|q| answer(q).reads).sum();
        assert!(reads_uncached > 0);

        let record = index.node_record_bytes();
        std::thread::scope(|s| {
            let searcher = s.spawn(|| {
                for round in 0..30 {
                    let got: Vec<Vec<i64>> = queries.iter().map(|q| answer(q).ids).collect();
                    assert!(same(&got) >= 0.95, "round {round}: {}", same(&got));
                }
            });
            for records in [n / 3, n, 100, n / 2, 0, 2 * n / 3, n] {
                let room = index.resize_node_cache(records).unwrap();
                assert!(
                    room <= records && 2 * room >= records,
                    "{room} of {records}"
                );
                assert!(index.node_cache_bytes() <= records * record);
            }
            searcher.join().unwrap();
        });
        // Every node held: the same answers, no read.
        assert_eq!(index.cached_nodes(), n);
        let all: Vec<_> = queries.iter().map(|q| answer(q)).collect();
        assert!(all.iter().all(|r| r.reads == 0));
        let got: Vec<Vec<i64>> = all.into_iter().map(|r| r.ids).collect();
        assert!(same(&got) >= 0.95, "{}", same(&got));
        // Half of them: fewer reads than none.
        index.resize_node_cache(n / 2).unwrap();
        let reads_half: u32 = queries.iter().map(|q| answer(q).reads).sum();
        assert!(
            reads_half < reads_uncached,
            "{reads_half} vs {reads_uncached}"
        );
    }

    #[test]
    fn records_the_searches_read_again_stay_in_dram() {
        let (n, dim) = (4000, 96);
        let (dir, data) = random_index(n, dim, 9);
        let options = OpenOptions {
            cache_nodes: Some(n / 2),
            ..Default::default()
        };
        let index = DiskIndex::open(dir.path(), &options).unwrap();
        let search = SearchParams {
            k: 10,
            search_list: 40,
            ..Default::default()
        };
        // A few queries asked again and again (the working set, a few hundred records, fits
        // the measured half of the cache; the prefix alone would leave most of it on SSD).
        let queries: Vec<&[f32]> = (0..12)
            .map(|q| &data[(q * 331 + 7) * dim..][..dim])
            .collect();
        let pass = || -> u32 {
            queries
                .iter()
                .map(|q| index.search(q, &search).unwrap().reads)
                .sum()
        };
        let first = pass();
        let held_after_first = index.cached_nodes();
        let third = {
            pass();
            pass()
        };
        assert!(first > 50, "{first}");
        assert!(
            third * 10 <= first,
            "reads per pass: first {first}, third {third}"
        );
        assert!(index.cached_nodes() >= held_after_first);
        assert!(index.node_cache_bytes() <= n / 2 * index.node_record_bytes());
    }
}
