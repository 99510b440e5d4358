//! Writing a derived file of a build generation (navigation, compact codes) a section at a
//! time: a fixed header whose CRC field (bytes 12..16) is filled in last with the CRC of
//! every other byte of the file, written under a temporary name, fsynced and renamed. The
//! caller syncs the directory before the commit that makes the generation current.

use std::path::{Path, PathBuf};

use crate::error::file_error;
use crate::Result;

/// Offset of the CRC field in every such file's header.
pub(crate) const CRC_AT: usize = 12;

pub(crate) struct SummedWriter {
    tmp: PathBuf,
    path: PathBuf,
    out: diskvec_io::SpillWriter,
    crc: crc32fast::Hasher,
}

impl SummedWriter {
    /// A file under a temporary name holding `header` (its CRC field left for `finish`).
    pub(crate) fn start(path: &Path, header: &[u8]) -> Result<Self> {
        let tmp = path.with_extension("tmp");
        let mut out = diskvec_io::SpillWriter::create(&tmp, 1 << 20)?;
        out.write_all(header)?;
        Ok(Self {
            tmp,
            path: path.to_path_buf(),
            out,
            crc: header_crc(header),
        })
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        Ok(self.out.write_all(bytes)?)
    }

    pub(crate) fn write_words(&mut self, words: &[u32]) -> Result<()> {
        let mut buf = Vec::with_capacity(4 * words.len().min(1 << 16));
        for chunk in words.chunks(1 << 16) {
            buf.clear();
            buf.extend(chunk.iter().flat_map(|w| w.to_le_bytes()));
            self.write(&buf)?;
        }
        Ok(())
    }

    /// Puts the CRC in place, fsyncs and renames the file to its name.
    pub(crate) fn finish(self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let file = self.out.finish(false)?;
        file.write_all_at(&self.crc.finalize().to_le_bytes(), CRC_AT as u64)
            .and_then(|_| file.sync_all())
            .map_err(file_error(&self.tmp))?;
        std::fs::rename(&self.tmp, &self.path).map_err(file_error(&self.path))
    }
}

/// A CRC over a header, its own field left out; the rest of the file follows it.
pub(crate) fn header_crc(header: &[u8]) -> crc32fast::Hasher {
    let mut h = crc32fast::Hasher::new();
    h.update(&header[..CRC_AT]);
    h.update(&header[CRC_AT + 4..]);
    h
}
