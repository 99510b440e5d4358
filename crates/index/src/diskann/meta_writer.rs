//! `meta.dvm` written as a stream: header, codebook, codes and ids a chunk at a time, the
//! tail, and the file's CRC patched into the header last. A build of n nodes never holds
//! the file whole (at 4M x 768 its codes and ids are ~800 MB; encoded whole beside the
//! codes it was made from, the last phase of a 2 GiB build needed twice that).
//!
//! The bytes are those `Meta::encode` returns (it is this writer over a `Vec`), drawn in
//! docs/format.md.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use diskvec_io::storage::{Storage, StorageFile};

use super::header::Writer;
use super::meta::{encode_paths, CRC_AT, META_HEADER, META_MAGIC};
use super::Header;
use crate::error::file_error;
use crate::Result;

/// What goes into `meta.dvm` besides the per-node codes and ids, all known before they are.
pub(crate) struct MetaParts<'a> {
    pub build_id: u64,
    pub count: usize,
    /// The PQ codebook's bytes (`ProductQuantizer::to_bytes`), empty for none.
    pub codebook: &'a [u8],
    pub code_bytes: usize,
    pub entries: &'a [u32],
    pub paths: &'a [String],
}

/// Streams one `meta.dvm`: `codes` for every node, then `ids` for every node (each in as
/// many calls as the caller likes), then `finish` with the nodes header.
pub(crate) struct MetaWriter<'a, W: Write> {
    out: W,
    parts: MetaParts<'a>,
    placement: Vec<u8>,
    hasher: crc32fast::Hasher,
    bytes: u64,
    codes_written: usize,
    ids_written: usize,
}

impl<'a, W: Write> MetaWriter<'a, W> {
    /// Writes the header (CRC field zero; `version`: the layout version of the nodes header
    /// the file will carry) and the codebook.
    pub(crate) fn start(out: W, parts: MetaParts<'a>, version: u32) -> std::io::Result<Self> {
        let placement = encode_paths(parts.paths);
        let mut header = [0u8; META_HEADER];
        let mut w = Writer {
            buf: &mut header,
            at: 0,
        };
        w.bytes(META_MAGIC);
        w.u32(version);
        w.u32(0);
        w.u64(parts.build_id);
        w.u64(parts.count as u64);
        w.u64(parts.codebook.len() as u64);
        w.u64(parts.entries.len() as u64);
        w.u64(placement.len() as u64);
        let mut hasher = crc32fast::Hasher::new();
        // The CRC covers every byte but its own field.
        hasher.update(&header[..CRC_AT]);
        hasher.update(&header[CRC_AT + 4..]);
        let mut me = Self {
            out,
            parts,
            placement,
            hasher,
            bytes: 0,
            codes_written: 0,
            ids_written: 0,
        };
        me.out.write_all(&header)?;
        me.bytes = META_HEADER as u64;
        let codebook = me.parts.codebook;
        me.put(codebook)?;
        Ok(me)
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// The next nodes' PQ codes, in node order.
    pub(crate) fn codes(&mut self, codes: &[u8]) -> std::io::Result<()> {
        self.codes_written += codes.len();
        self.put(codes)
    }

    /// The next nodes' external ids, in node order (after every code).
    pub(crate) fn ids(&mut self, ids: &[i64]) -> std::io::Result<()> {
        let mut buf = [0u8; 8 * 512];
        for chunk in ids.chunks(512) {
            for (out, id) in buf.chunks_exact_mut(8).zip(chunk) {
                out.copy_from_slice(&id.to_le_bytes());
            }
            self.put(&buf[..8 * chunk.len()])?;
        }
        self.ids_written += ids.len();
        Ok(())
    }

    /// Writes the entries, the placement and `geometry` (its `meta_crc` written as zero);
    /// returns the writer, the file's CRC (not yet in its header) and its length.
    pub(crate) fn finish(mut self, geometry: &Header) -> std::io::Result<(W, u32, u64)> {
        let (count, m) = (self.parts.count, self.parts.code_bytes);
        if self.codes_written != count * m || self.ids_written != count {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "meta.dvm of {count} nodes got {} bytes of codes ({} expected) and {} ids",
                    self.codes_written,
                    count * m,
                    self.ids_written
                ),
            ));
        }
        let entries: Vec<u8> = self
            .parts
            .entries
            .iter()
            .flat_map(|e| e.to_le_bytes())
            .collect();
        self.put(&entries)?;
        let placement = std::mem::take(&mut self.placement);
        self.put(&placement)?;
        let tail = Header {
            meta_crc: 0,
            ..geometry.clone()
        }
        .encode();
        self.put(&tail)?;
        Ok((self.out, self.hasher.finalize(), self.bytes))
    }
}

/// A `meta.dvm` streamed into its temporary name beside the index (`meta.dvm.tmp`), synced
/// and ready for the commit's rename.
#[derive(Debug)]
pub(crate) struct StagedMeta {
    pub crc: u32,
    pub bytes: u64,
}

/// Where a build stages the `meta.dvm` it commits.
pub(crate) fn staged_path(out: &Path) -> PathBuf {
    out.join(format!("{}.tmp", super::META_FILE))
}

/// `std::io::Write` over a storage file's appends, owning the file (a `meta.dvm.tmp` being
/// staged lives across a build's phases).
pub(crate) struct Appender(Box<dyn StorageFile>);

impl Write for Appender {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `meta.dvm.tmp` in an index directory, streamed: codes, then ids, then `finish` patches
/// the CRC in and syncs. A build in shards starts it once the codebook is trained and
/// writes the codes as it encodes them, so they never take scratch space.
pub(crate) struct MetaStage<'a> {
    path: PathBuf,
    writer: MetaWriter<'a, BufWriter<Appender>>,
}

impl<'a> MetaStage<'a> {
    pub(crate) fn create(
        storage: &dyn Storage,
        out: &Path,
        parts: MetaParts<'a>,
        element: diskvec_vector::ElementType,
    ) -> Result<Self> {
        let path = staged_path(out);
        let file = storage.create(&path).map_err(file_error(&path))?;
        let buffered = BufWriter::with_capacity(1 << 20, Appender(file));
        let version = super::header::layout_version_for(element);
        let writer = MetaWriter::start(buffered, parts, version).map_err(file_error(&path))?;
        Ok(Self { path, writer })
    }

    pub(crate) fn codes(&mut self, codes: &[u8]) -> Result<()> {
        self.writer.codes(codes).map_err(file_error(&self.path))
    }

    pub(crate) fn ids(&mut self, ids: &[i64]) -> Result<()> {
        self.writer.ids(ids).map_err(file_error(&self.path))
    }

    /// The tail (`geometry`), the CRC patched in, the file synced.
    pub(crate) fn finish(self, geometry: &Header) -> Result<StagedMeta> {
        let path = self.path;
        let (buffered, crc, bytes) = self.writer.finish(geometry).map_err(file_error(&path))?;
        let Appender(mut file) = buffered
            .into_inner()
            .map_err(|e| file_error(&path)(e.into_error()))?;
        file.write_at(CRC_AT as u64, &crc.to_le_bytes())
            .and_then(|()| file.sync_data())
            .map_err(file_error(&path))?;
        Ok(StagedMeta { crc, bytes })
    }
}

/// Streams `meta.dvm.tmp` in `out` through `storage`: `fill` writes the codes and ids, then
/// the tail follows, the CRC is patched in and the file synced.
pub(crate) fn stage_meta<'a>(
    storage: &dyn Storage,
    out: &Path,
    parts: MetaParts<'a>,
    geometry: &Header,
    fill: impl FnOnce(&mut MetaStage<'a>) -> Result<()>,
) -> Result<StagedMeta> {
    let mut stage = MetaStage::create(storage, out, parts, geometry.element)?;
    fill(&mut stage)?;
    stage.finish(geometry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diskann::meta::tests::sample;
    use crate::diskann::meta::Meta;

    /// A meta file streamed a node at a time is byte for byte the one encoded whole, and a
    /// writer fed fewer codes or ids than its count refuses to finish.
    #[test]
    fn streamed_meta_is_the_encoded_one_and_short_input_is_refused() {
        let m = sample();
        let (whole, crc) = m.encode(m.geometry.build_id);
        let dir = tempfile::tempdir().unwrap();
        let codebook = m.pq.as_ref().unwrap().to_bytes();
        let code_bytes = m.pq.as_ref().unwrap().code_bytes();
        let parts = || MetaParts {
            build_id: m.geometry.build_id,
            count: m.ids.len(),
            codebook: &codebook,
            code_bytes,
            entries: &m.entries,
            paths: &m.paths,
        };
        let staged = stage_meta(
            &diskvec_io::storage::FsStorage,
            dir.path(),
            parts(),
            &m.geometry,
            |w| {
                for code in m.codes.chunks(code_bytes) {
                    w.codes(code).unwrap();
                }
                for id in &m.ids {
                    w.ids(std::slice::from_ref(id)).unwrap();
                }
                Ok(())
            },
        )
        .unwrap();
        let streamed = std::fs::read(staged_path(dir.path())).unwrap();
        assert_eq!(streamed, whole);
        assert_eq!((staged.crc, staged.bytes), (crc, whole.len() as u64));
        Meta::decode(&streamed, Path::new("meta.dvm")).unwrap();

        let short = stage_meta(
            &diskvec_io::storage::FsStorage,
            dir.path(),
            parts(),
            &m.geometry,
            |w| {
                w.codes(&m.codes).unwrap();
                w.ids(&m.ids[1..]).unwrap();
                Ok(())
            },
        );
        let msg = short.unwrap_err().to_string();
        assert!(msg.contains("meta.dvm.tmp"), "{msg}");
        assert!(msg.contains("ids"), "{msg}");
    }
}
