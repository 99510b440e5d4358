use diskvec_io::SECTOR;
use diskvec_vector::ElementType;

/// Bytes at the end of every sector holding the CRC-32 of the rest.
pub const SECTOR_TRAILER: usize = 4;
/// Bytes of a sector available to node records.
pub const SECTOR_PAYLOAD: usize = SECTOR - SECTOR_TRAILER;

/// Where node records sit in `nodes.dvn`. A record is the full vector (`dim` components of
/// `element`: f32, f16 or u8), the degree (u32) and `max_degree` neighbour ids (u32, unused
/// ones zero). Small records are
/// packed several to a sector; a record larger than a sector's payload spans whole sectors.
/// Sector 0 is the header; node sectors follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLayout {
    pub dim: usize,
    pub max_degree: usize,
    pub element: ElementType,
    pub node_bytes: usize,
    /// Records per sector when a record fits in one sector, else 1.
    pub nodes_per_sector: usize,
    /// Sectors per record when a record does not fit in one sector, else 1.
    pub sectors_per_node: usize,
}

impl NodeLayout {
    pub fn new(dim: usize, max_degree: usize, element: ElementType) -> Self {
        let node_bytes = dim * element.bytes() + 4 + max_degree * 4;
        let (nodes_per_sector, sectors_per_node) = if node_bytes <= SECTOR_PAYLOAD {
            (SECTOR_PAYLOAD / node_bytes, 1)
        } else {
            (1, node_bytes.div_ceil(SECTOR_PAYLOAD))
        };
        Self {
            dim,
            max_degree,
            element,
            node_bytes,
            nodes_per_sector,
            sectors_per_node,
        }
    }

    /// Node sectors needed for `count` records.
    pub fn data_sectors(&self, count: usize) -> u64 {
        (count.div_ceil(self.nodes_per_sector) * self.sectors_per_node) as u64
    }

    /// Byte offset of the first sector holding `id` (the header sector comes first).
    pub fn offset_of(&self, id: u32) -> u64 {
        let first = (id as usize / self.nodes_per_sector) * self.sectors_per_node;
        ((1 + first) * SECTOR) as u64
    }

    /// Bytes one read fetches to get a record.
    pub fn read_bytes(&self) -> usize {
        self.sectors_per_node * SECTOR
    }

    /// The ids that share `id`'s sector (including `id`), below `count`.
    pub fn sector_mates(&self, id: u32, count: usize) -> std::ops::Range<u32> {
        let first = id - id % self.nodes_per_sector as u32;
        first..(first + self.nodes_per_sector as u32).min(count as u32)
    }

    /// The record of `id` within a read that fetched its sector(s). Multi-sector records
    /// are joined into `scratch`, skipping the sector trailers.
    pub fn record<'a>(&self, read: &'a [u8], id: u32, scratch: &'a mut Vec<u8>) -> NodeRecord<'a> {
        let bytes: &'a [u8] = if self.sectors_per_node == 1 {
            let at = (id as usize % self.nodes_per_sector) * self.node_bytes;
            &read[at..at + self.node_bytes]
        } else {
            scratch.clear();
            for s in read.chunks_exact(SECTOR).take(self.sectors_per_node) {
                scratch.extend_from_slice(&s[..SECTOR_PAYLOAD]);
            }
            &scratch[..self.node_bytes]
        };
        NodeRecord::new(bytes, self.dim, self.element)
    }

    /// Bytes of a record's vector.
    fn vector_bytes(&self) -> usize {
        self.dim * self.element.bytes()
    }

    /// Writes the record of one node into `out` (`node_bytes` long). The vector's values
    /// are ones the element type holds (the build rounded them where they entered).
    pub fn encode(&self, vector: &[f32], neighbors: &[u32], out: &mut [u8]) {
        debug_assert!(neighbors.len() <= self.max_degree);
        out.fill(0);
        let at = self.vector_bytes();
        self.element.encode(vector, &mut out[..at]);
        out[at..at + 4].copy_from_slice(&(neighbors.len() as u32).to_le_bytes());
        for (chunk, n) in out[at + 4..].chunks_exact_mut(4).zip(neighbors) {
            chunk.copy_from_slice(&n.to_le_bytes());
        }
    }
}

/// A node record as read from disk.
pub struct NodeRecord<'a> {
    bytes: &'a [u8],
    dim: usize,
    element: ElementType,
}

impl<'a> NodeRecord<'a> {
    pub fn new(bytes: &'a [u8], dim: usize, element: ElementType) -> Self {
        Self {
            bytes,
            dim,
            element,
        }
    }

    /// Where the degree field starts.
    fn vector_bytes(&self) -> usize {
        self.dim * self.element.bytes()
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The full vector as f32: borrowed from the record where it holds f32 whose bytes are
    /// aligned (a little-endian machine reads them as they are stored), else decoded
    /// (widened) into `out`.
    pub fn vector<'b>(&self, out: &'b mut Vec<f32>) -> &'b [f32]
    where
        'a: 'b,
    {
        let bytes = &self.bytes[..self.vector_bytes()];
        if cfg!(target_endian = "little") && self.element == ElementType::Float32 {
            if let Ok(floats) = bytemuck::try_cast_slice::<u8, f32>(bytes) {
                return floats;
            }
        }
        self.vector_into(out);
        out
    }

    /// The full vector, decoded (widened to f32) into `out`.
    pub fn vector_into(&self, out: &mut Vec<f32>) {
        self.element
            .decode_into(&self.bytes[..self.vector_bytes()], out);
    }

    pub fn degree(&self) -> usize {
        let at = self.vector_bytes();
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap()) as usize
    }

    /// Neighbour ids; a degree beyond the record's room is clamped (the sector CRC has
    /// already vouched for the bytes, so this only guards against a bad writer).
    pub fn neighbors(&self) -> impl Iterator<Item = u32> + 'a {
        let at = self.vector_bytes() + 4;
        let room = (self.bytes.len() - at) / 4;
        let bytes = &self.bytes[at..at + 4 * self.degree().min(room)];
        // Read in place where aligned (a little-endian machine stores them as it reads
        // them); decoded four bytes at a time otherwise.
        let aligned = match cfg!(target_endian = "little") {
            true => bytemuck::try_cast_slice::<u8, u32>(bytes).ok(),
            false => None,
        };
        let (aligned, unaligned) = match aligned {
            Some(ids) => (ids, &[][..]),
            None => (&[][..], bytes),
        };
        aligned.iter().copied().chain(
            unaligned
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap())),
        )
    }
}

/// CRC-32 of a sector's payload, seeded with the sector's number in the logical file, so
/// a sector read from the wrong place fails its check even though its bytes are intact.
fn sector_crc(number: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&number.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Fills in the CRC trailer of every sector in `sectors`, the first being sector `first`.
pub fn seal_sectors(sectors: &mut [u8], first: u64) {
    for (i, s) in sectors.chunks_exact_mut(SECTOR).enumerate() {
        let crc = sector_crc(first + i as u64, &s[..SECTOR_PAYLOAD]);
        s[SECTOR_PAYLOAD..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Index of the first sector in `sectors` (the first being sector `first`) whose CRC
/// trailer does not match, if any.
pub fn first_bad_sector(sectors: &[u8], first: u64) -> Option<usize> {
    sectors.chunks_exact(SECTOR).enumerate().position(|(i, s)| {
        sector_crc(first + i as u64, &s[..SECTOR_PAYLOAD]).to_le_bytes() != s[SECTOR_PAYLOAD..]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_for_common_dimensions() {
        let l = NodeLayout::new(384, 64, ElementType::Float32);
        assert_eq!(
            (l.node_bytes, l.nodes_per_sector, l.sectors_per_node),
            (1796, 2, 1)
        );
        assert_eq!(l.offset_of(0), 4096);
        assert_eq!(l.offset_of(1), 4096);
        assert_eq!(l.offset_of(2), 8192);
        assert_eq!(l.data_sectors(5), 3);
        assert_eq!(l.sector_mates(3, 4), 2..4);
        assert_eq!(l.sector_mates(4, 5), 4..5);
        let l = NodeLayout::new(768, 64, ElementType::Float32);
        assert_eq!((l.nodes_per_sector, l.sectors_per_node), (1, 1));
        let l = NodeLayout::new(1536, 64, ElementType::Float32);
        assert_eq!((l.nodes_per_sector, l.sectors_per_node), (1, 2));
        assert_eq!(l.offset_of(3), (1 + 6) * 4096);
        assert_eq!(l.read_bytes(), 8192);
    }

    /// The narrower types pack more records a sector: a 768-d float16 record is two to a
    /// sector up to R = 126, a uint8 one three (four at R <= 62).
    #[test]
    fn narrower_elements_pack_more_records_a_sector() {
        let geometry = |dim, r, e| {
            let l = NodeLayout::new(dim, r, e);
            (l.node_bytes, l.nodes_per_sector, l.sectors_per_node)
        };
        assert_eq!(geometry(768, 64, ElementType::Float16), (1796, 2, 1));
        assert_eq!(geometry(768, 126, ElementType::Float16), (2044, 2, 1));
        assert_eq!(geometry(768, 127, ElementType::Float16).1, 1);
        assert_eq!(geometry(768, 64, ElementType::Uint8), (1028, 3, 1));
        assert_eq!(geometry(768, 62, ElementType::Uint8), (1020, 4, 1));
        assert_eq!(geometry(384, 64, ElementType::Float16), (1028, 3, 1));
        assert_eq!(geometry(384, 64, ElementType::Uint8), (644, 6, 1));
        assert_eq!(geometry(4096, 64, ElementType::Float16), (8452, 1, 3));
    }

    #[test]
    fn records_round_trip_in_single_and_multi_sector_layouts() {
        for (dim, element) in [3usize, 1536, 2049, 4100]
            .into_iter()
            .flat_map(|d| ElementType::ALL.map(|e| (d, e)))
        {
            let l = NodeLayout::new(dim, 4, element);
            let v: Vec<f32> = (0..dim).map(|i| (i % 200) as f32).collect();
            let mut rec = vec![0u8; l.node_bytes];
            l.encode(&v, &[9, 8], &mut rec);
            let mut sectors = vec![0u8; l.read_bytes() * 2];
            // Place the record of node id 1 where the layout says it goes within a read.
            let id = 1u32;
            if l.sectors_per_node == 1 {
                let at = (id as usize % l.nodes_per_sector) * l.node_bytes;
                sectors[at..at + l.node_bytes].copy_from_slice(&rec);
            } else {
                for (i, piece) in rec.chunks(SECTOR_PAYLOAD).enumerate() {
                    sectors[i * SECTOR..i * SECTOR + piece.len()].copy_from_slice(piece);
                }
            }
            seal_sectors(&mut sectors, 7);
            assert_eq!(first_bad_sector(&sectors, 7), None);
            // Intact bytes read as if from another place are caught.
            assert_eq!(first_bad_sector(&sectors, 8), Some(0));
            let mut scratch = Vec::new();
            let r = l.record(&sectors, id, &mut scratch);
            let mut got = Vec::new();
            r.vector_into(&mut got);
            assert_eq!(got, v, "{dim} {element}");
            let mut scratch_vector = Vec::new();
            assert_eq!(r.vector(&mut scratch_vector), &v[..]);
            assert_eq!(r.neighbors().collect::<Vec<_>>(), vec![9, 8]);
            sectors[SECTOR + 5] ^= 1;
            assert_eq!(first_bad_sector(&sectors, 7), Some(1));
        }
    }
}
