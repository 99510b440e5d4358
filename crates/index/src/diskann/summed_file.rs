//! Writing a derived file of a build generation (navigation, compact codes) a section at a
//! time: a fixed header whose CRC field (bytes 12..16) is filled in last with the CRC of
//! every other byte of the file, staged under a temporary name through the durable-write
//! path, synced and renamed. The caller syncs the directory in the commit that makes the
//! generation current.

use std::path::Path;

use diskvec_io::storage::{StagedFile, Storage};

use crate::error::file_error;
use crate::Result;

/// Offset of the CRC field in every such file's header.
pub(crate) const CRC_AT: usize = 12;

/// Bytes gathered before they are handed to the storage (the sections come a node's code
/// at a time).
const BUFFER_BYTES: usize = 1 << 20;

pub(crate) struct SummedWriter<'s> {
    out: StagedFile<'s>,
    buffer: Vec<u8>,
    header: Vec<u8>,
    /// The CRC of every byte after the header.
    body_crc: crc32fast::Hasher,
    /// Bytes after the header.
    body_bytes: u64,
}

impl<'s> SummedWriter<'s> {
    /// A file under a temporary name holding `header` (its CRC field left for `finish`).
    pub(crate) fn start(storage: &'s dyn Storage, path: &Path, header: &[u8]) -> Result<Self> {
        let tmp = path.with_extension("tmp");
        let out = StagedFile::create(storage, path, &tmp).map_err(file_error(&tmp))?;
        let mut buffer = Vec::with_capacity(BUFFER_BYTES);
        buffer.extend_from_slice(header);
        Ok(Self {
            out,
            buffer,
            header: header.to_vec(),
            body_crc: crc32fast::Hasher::new(),
            body_bytes: 0,
        })
    }

    /// Where the next byte written lands in the file.
    pub(crate) fn position(&self) -> u64 {
        (self.header.len() as u64) + self.body_bytes
    }

    /// Hands what is buffered to the storage, so that a reader of the temporary file (its
    /// path: `temp`) sees every byte written so far.
    pub(crate) fn settle(&mut self) -> Result<()> {
        self.flush()?;
        let temp = self.out.temp().to_path_buf();
        self.out.file().sync_data().map_err(file_error(&temp))
    }

    pub(crate) fn temp(&self) -> &Path {
        self.out.temp()
    }

    fn flush(&mut self) -> Result<()> {
        let temp = self.out.temp().to_path_buf();
        self.out
            .file()
            .append(&self.buffer)
            .map_err(file_error(&temp))?;
        self.buffer.clear();
        Ok(())
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.body_crc.update(bytes);
        self.body_bytes += bytes.len() as u64;
        if self.buffer.len() + bytes.len() > BUFFER_BYTES {
            self.flush()?;
        }
        if bytes.len() >= BUFFER_BYTES {
            let temp = self.out.temp().to_path_buf();
            return self.out.file().append(bytes).map_err(file_error(&temp));
        }
        self.buffer.extend_from_slice(bytes);
        Ok(())
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

    /// Puts the CRC in place, syncs the file and renames it to its name.
    pub(crate) fn finish(self) -> Result<()> {
        let header = self.header.clone();
        self.finish_with_header(&header)
    }

    /// As `finish`, with `header` (as long as the one the file started with, its CRC field
    /// zero) written over the first: for headers that count what the sections held.
    pub(crate) fn finish_with_header(mut self, header: &[u8]) -> Result<()> {
        assert_eq!(header.len(), self.header.len(), "a header of another size");
        self.flush()?;
        let temp = self.out.temp().to_path_buf();
        let mut crc = header_crc(header);
        crc.combine(&self.body_crc);
        let mut patched = header.to_vec();
        patched[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.finalize().to_le_bytes());
        self.out
            .file()
            .write_at(0, &patched)
            .map_err(file_error(&temp))?;
        let target = self.out.target().to_path_buf();
        self.out.install().map_err(file_error(&target))
    }
}

/// A CRC over a header, its own field left out; the rest of the file follows it.
pub(crate) fn header_crc(header: &[u8]) -> crc32fast::Hasher {
    let mut h = crc32fast::Hasher::new();
    h.update(&header[..CRC_AT]);
    h.update(&header[CRC_AT + 4..]);
    h
}
