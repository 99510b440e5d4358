use std::path::Path;

use diskvec_io::SECTOR;
use diskvec_vector::Metric;

use super::layout::{first_bad_sector, seal_sectors, NodeLayout};
use crate::error::corrupt;
use crate::{IndexError, Result};

pub const NODES_MAGIC: &[u8; 8] = b"DISKVECN";
/// Bumped whenever the bytes of `nodes.dvn` or `meta.dvm` change meaning.
pub const LAYOUT_VERSION: u32 = 2;

/// The first sector of `nodes.dvn`: everything needed to interpret the rest.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub metric: Metric,
    pub dim: u32,
    pub max_degree: u32,
    pub count: u64,
    pub medoid: u32,
    pub build_list: u32,
    pub alpha: f32,
    pub pq_bytes: u32,
    /// Random per build; `meta.dvm` carries the same value, so files of two builds never mix.
    pub build_id: u64,
    /// CRC-32 of the body of `meta.dvm`.
    pub meta_crc: u32,
    /// Stripe size of the placement over several paths.
    pub stripe_bytes: u64,
    pub path_count: u32,
    /// Each path also holds a copy of the previous path's stripes.
    pub mirrored: bool,
}

impl Header {
    pub fn layout(&self) -> NodeLayout {
        NodeLayout::new(self.dim as usize, self.max_degree as usize)
    }

    /// Total size `nodes.dvn` must have.
    pub fn nodes_file_bytes(&self) -> u64 {
        (1 + self.layout().data_sectors(self.count as usize)) * SECTOR as u64
    }

    /// The sealed header sector.
    pub fn encode(&self) -> Vec<u8> {
        let l = self.layout();
        let mut s = vec![0u8; SECTOR];
        let mut w = Writer { buf: &mut s, at: 0 };
        w.bytes(NODES_MAGIC);
        w.u32(LAYOUT_VERSION);
        w.u32(self.metric.code());
        w.u32(self.dim);
        w.u32(self.max_degree);
        w.u64(self.count);
        w.u32(l.node_bytes as u32);
        w.u32(l.nodes_per_sector as u32);
        w.u32(l.sectors_per_node as u32);
        w.u32(self.medoid);
        w.u32(self.build_list);
        w.u32(self.alpha.to_bits());
        w.u32(self.pq_bytes);
        w.u64(self.build_id);
        w.u32(self.meta_crc);
        w.u64(l.data_sectors(self.count as usize));
        w.u64(self.stripe_bytes);
        w.u32(self.path_count);
        w.u32(self.mirrored as u32);
        seal_sectors(&mut s, 0);
        s
    }

    /// Parses and checks a header sector read from `path`.
    pub fn decode(sector: &[u8], path: &Path) -> Result<Self> {
        if sector.len() < SECTOR {
            return Err(corrupt(
                path,
                "file is shorter than its header sector (truncated?)",
            ));
        }
        if &sector[..8] != NODES_MAGIC {
            return Err(corrupt(path, "not a diskvec index file (bad magic)"));
        }
        let mut r = Reader { buf: sector, at: 8 };
        let version = r.u32();
        if version != LAYOUT_VERSION {
            return Err(IndexError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: LAYOUT_VERSION,
            });
        }
        if first_bad_sector(&sector[..SECTOR], 0).is_some() {
            return Err(corrupt(path, "header checksum mismatch"));
        }
        let metric_code = r.u32();
        let metric = Metric::from_code(metric_code)
            .ok_or_else(|| corrupt(path, format!("unknown metric code {metric_code}")))?;
        let h = Header {
            metric,
            dim: r.u32(),
            max_degree: r.u32(),
            count: r.u64(),
            medoid: 0,
            build_list: 0,
            alpha: 0.0,
            pq_bytes: 0,
            build_id: 0,
            meta_crc: 0,
            stripe_bytes: 0,
            path_count: 0,
            mirrored: false,
        };
        let (node_bytes, per_sector, sectors_per) = (r.u32(), r.u32(), r.u32());
        let h = Header {
            medoid: r.u32(),
            build_list: r.u32(),
            alpha: f32::from_bits(r.u32()),
            pq_bytes: r.u32(),
            build_id: r.u64(),
            meta_crc: r.u32(),
            ..h
        };
        let data_sectors = r.u64();
        let h = Header {
            stripe_bytes: r.u64(),
            path_count: r.u32(),
            mirrored: r.u32() != 0,
            ..h
        };
        if (h.mirrored && h.path_count < 2)
            || h.path_count == 0
            || h.stripe_bytes == 0
            || !h.stripe_bytes.is_multiple_of(SECTOR as u64)
        {
            return Err(corrupt(path, "header describes an impossible placement"));
        }
        if h.dim == 0 || h.count == 0 || h.max_degree == 0 || h.medoid as u64 >= h.count {
            return Err(corrupt(path, "header describes an impossible index"));
        }
        let l = h.layout();
        if (node_bytes, per_sector, sectors_per)
            != (
                l.node_bytes as u32,
                l.nodes_per_sector as u32,
                l.sectors_per_node as u32,
            )
            || data_sectors != l.data_sectors(h.count as usize)
        {
            return Err(corrupt(
                path,
                "header geometry does not match its dimension and degree",
            ));
        }
        Ok(h)
    }
}

pub(crate) struct Writer<'a> {
    pub buf: &'a mut [u8],
    pub at: usize,
}

impl Writer<'_> {
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes())
    }
}

pub(crate) struct Reader<'a> {
    pub buf: &'a [u8],
    pub at: usize,
}

impl Reader<'_> {
    pub fn u32(&mut self) -> u32 {
        let v = u32::from_le_bytes(self.buf[self.at..self.at + 4].try_into().unwrap());
        self.at += 4;
        v
    }
    pub fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(self.buf[self.at..self.at + 8].try_into().unwrap());
        self.at += 8;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            metric: Metric::Cosine,
            dim: 384,
            max_degree: 64,
            count: 1000,
            medoid: 17,
            build_list: 100,
            alpha: 1.2,
            pq_bytes: 96,
            build_id: 0xfeed,
            meta_crc: 0xabcd,
            stripe_bytes: 65536,
            path_count: 4,
            mirrored: true,
        }
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let p = Path::new("nodes.dvn");
        let s = sample().encode();
        assert_eq!(Header::decode(&s, p).unwrap(), sample());
        let mut bad = s.clone();
        bad[40] ^= 0xff;
        assert!(Header::decode(&bad, p)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let mut bad = s.clone();
        bad[0] = b'X';
        assert!(Header::decode(&bad, p)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut bad = s.clone();
        bad[8] = 99;
        assert!(matches!(
            Header::decode(&bad, p),
            Err(IndexError::UnsupportedVersion { found: 99, .. })
        ));
        assert!(Header::decode(&s[..100], p).is_err());
    }
}
