use std::path::Path;

use diskvec_io::SECTOR;
use diskvec_vector::{ElementType, Metric};

use super::layout::{first_bad_sector, seal_sectors, NodeLayout};
use crate::error::corrupt;
use crate::{IndexError, Result};

pub const NODES_MAGIC: &[u8; 8] = b"DISKVECN";
/// Bumped whenever the bytes of `nodes.dvn` or `meta.dvm` change meaning: the newest this
/// build reads and writes.
pub const LAYOUT_VERSION: u32 = 4;
/// The oldest version this build still reads. Version 4 added the element type (offset 96);
/// an index of f32 vectors is still written as version 3, which older builds read.
pub const OLDEST_LAYOUT_VERSION: u32 = 3;

/// The version an index whose records hold `element` is written as.
pub fn layout_version_for(element: ElementType) -> u32 {
    match element {
        ElementType::Float32 => 3,
        _ => 4,
    }
}

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
    /// How the records store their vectors.
    pub element: ElementType,
}

impl Header {
    pub fn layout(&self) -> NodeLayout {
        NodeLayout::new(self.dim as usize, self.max_degree as usize, self.element)
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
        w.u32(layout_version_for(self.element));
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
        // Offset 96; zero (float32) in version 3, where the field was unused.
        w.u32(self.element.code());
        seal_sectors(&mut s, 0);
        s
    }

    /// Parses and checks a header sector read from `path`. Magic first, then the
    /// checksum, and only then any field: a damaged sector must never be reported as
    /// anything but damaged.
    pub fn decode(sector: &[u8], path: &Path) -> Result<Self> {
        if sector.len() < SECTOR {
            return Err(corrupt(
                path,
                format!(
                    "file is {} bytes, shorter than its {SECTOR}-byte header sector (truncated?)",
                    sector.len()
                ),
            ));
        }
        let sector = &sector[..SECTOR];
        if &sector[..8] != NODES_MAGIC {
            return Err(corrupt(path, "not a diskvec index file (bad magic)"));
        }
        let mut r = Reader { buf: sector, at: 8 };
        let version = r.u32();
        if first_bad_sector(sector, 0).is_some() {
            return Err(corrupt(path, checksum_message("header", version)));
        }
        check_version(version, path)?;
        let metric_code = r.u32();
        let metric = Metric::from_code(metric_code).ok_or_else(|| {
            corrupt(
                path,
                format!("unknown metric code {metric_code} at offset 12"),
            )
        })?;
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
            element: ElementType::Float32,
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
            ..h
        };
        let mirrored = r.u32();
        let element_code = r.u32();
        let element = ElementType::from_code(element_code)
            .filter(|&e| layout_version_for(e) == version)
            .ok_or_else(|| {
                corrupt(
                    path,
                    format!(
                        "unknown vector element type {element_code} (offset 96) for layout \
                         version {version}"
                    ),
                )
            })?;
        let h = Header {
            mirrored: mirrored == 1,
            element,
            ..h
        };
        if mirrored > 1
            || (h.mirrored && h.path_count < 2)
            || h.path_count == 0
            || h.stripe_bytes == 0
            || !h.stripe_bytes.is_multiple_of(SECTOR as u64)
        {
            return Err(corrupt(path, "header describes an impossible placement"));
        }
        // Node numbers are u32, so more than 2^32 nodes cannot be addressed; the bound also
        // keeps the geometry arithmetic below (and in every user of the header) in range.
        if h.dim == 0
            || h.count == 0
            || h.count > 1 << 32
            || h.max_degree == 0
            || h.pq_bytes == 0
            || h.medoid as u64 >= h.count
            || h.pq_bytes > h.dim
        {
            return Err(corrupt(path, "header describes an impossible index"));
        }
        let l = h.layout();
        if (node_bytes, per_sector, sectors_per)
            != (
                l.node_bytes as u32,
                l.nodes_per_sector as u32,
                l.sectors_per_node as u32,
            )
            || l.node_bytes > u32::MAX as usize
            || data_sectors != l.data_sectors(h.count as usize)
            || data_sectors
                .checked_add(1)
                .and_then(|s| s.checked_mul(SECTOR as u64))
                .is_none()
        {
            return Err(corrupt(
                path,
                "header geometry does not match its dimension and degree",
            ));
        }
        Ok(h)
    }
}

/// What a file that failed its checksum says: its version field is not to be trusted, but
/// when it differs from ours it hints at the cause (a file of another version that was
/// also damaged, or a stray write over the field), so it is shown, as a reading only.
pub(crate) fn checksum_message(what: &str, version: u32) -> String {
    if (OLDEST_LAYOUT_VERSION..=LAYOUT_VERSION).contains(&version) {
        format!("{what} checksum mismatch (the file is damaged)")
    } else {
        format!("{what} checksum mismatch (the file is damaged); the version field reads {version}")
    }
}

/// Refuses a version this build does not read, once the checksum vouched for the field.
pub(crate) fn check_version(version: u32, path: &Path) -> Result<()> {
    if version < OLDEST_LAYOUT_VERSION {
        // Not corrupt, only old; the error enum has no variant of its own for this yet.
        return Err(corrupt(
            path,
            format!(
                "layout version {version} is older than the oldest this build reads ({OLDEST_LAYOUT_VERSION}): rebuild the index"
            ),
        ));
    }
    if version > LAYOUT_VERSION {
        return Err(IndexError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: LAYOUT_VERSION,
        });
    }
    Ok(())
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
            element: ElementType::Float32,
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
        seal_sectors(&mut bad, 0);
        assert!(matches!(
            Header::decode(&bad, p),
            Err(IndexError::UnsupportedVersion { found: 99, .. })
        ));
        assert!(Header::decode(&s[..100], p).is_err());
    }

    /// An index of f32 records stays version 3 (older builds read it); narrower elements
    /// are version 4 with the type at offset 96, and a type unknown to its version is refused.
    #[test]
    fn element_type_sets_the_version() {
        let p = Path::new("nodes.dvn");
        let f32_sector = sample().encode();
        assert_eq!(f32_sector[8..12], 3u32.to_le_bytes());
        assert_eq!(f32_sector[96..100], [0; 4]);
        for e in [ElementType::Float16, ElementType::Uint8] {
            let h = Header {
                element: e,
                ..sample()
            };
            let s = h.encode();
            assert_eq!(s[8..12], 4u32.to_le_bytes());
            assert_eq!(Header::decode(&s, p).unwrap(), h);
            let mut unknown = s.clone();
            unknown[96..100].copy_from_slice(&7u32.to_le_bytes());
            seal_sectors(&mut unknown, 0);
            let msg = Header::decode(&unknown, p).unwrap_err().to_string();
            assert!(msg.contains("element type 7"), "{msg}");
        }
        // A version-3 header naming float16 was never written: refused, not guessed.
        let mut odd = f32_sector.clone();
        odd[96..100].copy_from_slice(&1u32.to_le_bytes());
        seal_sectors(&mut odd, 0);
        assert!(Header::decode(&odd, p).is_err());
    }

    /// A damaged version field is damage, never an unsupported version.
    #[test]
    fn checksum_is_checked_before_the_version() {
        let p = Path::new("nodes.dvn");
        let mut bad = sample().encode();
        bad[10] ^= 0xff;
        let msg = Header::decode(&bad, p).unwrap_err().to_string();
        assert!(msg.contains("checksum mismatch"), "{msg}");
        assert!(msg.contains("the version field reads 16711683"), "{msg}");
        assert!(!msg.contains("not supported"), "{msg}");
    }

    #[test]
    fn older_versions_ask_for_a_rebuild() {
        let p = Path::new("nodes.dvn");
        let mut old = sample().encode();
        old[8..12].copy_from_slice(&2u32.to_le_bytes());
        seal_sectors(&mut old, 0);
        let msg = Header::decode(&old, p).unwrap_err().to_string();
        assert!(msg.contains("layout version 2"), "{msg}");
        assert!(msg.contains("rebuild the index"), "{msg}");
    }
}
