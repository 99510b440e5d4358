//! Scratch files written and read sequentially without filling the page cache.
//!
//! A memory cgroup counts the page cache a process dirties or reads like its own memory, so
//! a build that streams gigabytes through files would be charged for all of them until the
//! kernel got round to writing them back. These files write back and drop what they have
//! written (or read) every `SETTLE_BYTES`, so a file costs its buffer, not its size.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::{IoError, Result};

/// Bytes between two write-backs (and drops) of what a spill file has passed.
const SETTLE_BYTES: u64 = 8 << 20;

fn os(path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
    move |source| IoError::Os {
        path: path.display().to_string(),
        source,
    }
}

/// Writes back `file`'s bytes `from..to` and waits for them, then tells the kernel they
/// will not be read again. Both calls are advice and accounting only: failures leave the
/// data correct (it is synced again at the end), so they are ignored.
fn settle(file: &File, from: u64, to: u64, written: bool) {
    if to <= from {
        return;
    }
    let fd = file.as_raw_fd();
    // SAFETY: plain system calls on a descriptor `file` keeps open for their duration; they
    // take no pointers.
    unsafe {
        if written {
            libc::sync_file_range(
                fd,
                from as libc::off64_t,
                (to - from) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            );
        }
        libc::posix_fadvise(
            fd,
            from as libc::off_t,
            (to - from) as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// Starts the write-back of `file`'s bytes `from..to` without waiting for it.
fn start_write_back(file: &File, from: u64, to: u64) {
    if to <= from {
        return;
    }
    // SAFETY: a plain system call on a descriptor `file` keeps open; no pointers. Advice
    // only, as in `settle`.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            from as libc::off64_t,
            (to - from) as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// A file written front to back whose written pages leave the page cache as it goes. The
/// device writes one stretch while the caller fills the next: each stretch's write-back is
/// started when it is full and waited for (then dropped) only when the next one is, so at
/// most two stretches are in the page cache and the writer seldom waits.
pub struct SpillWriter {
    path: PathBuf,
    out: BufWriter<File>,
    written: u64,
    /// Bytes before this have left the page cache.
    settled: u64,
    /// Bytes before this are being written back.
    started: u64,
    /// The end of the furthest positional write (`write_at`), which may lie past `written`.
    end: u64,
}

impl SpillWriter {
    pub fn create(path: &Path, buffer_bytes: usize) -> Result<Self> {
        let file = File::create(path).map_err(os(path))?;
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(buffer_bytes.max(4096), file),
            written: 0,
            settled: 0,
            started: 0,
            end: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(os(&self.path))?;
        self.written += bytes.len() as u64;
        if self.written - self.started >= SETTLE_BYTES {
            self.out.flush().map_err(os(&self.path))?;
            start_write_back(self.out.get_ref(), self.started, self.written);
            settle(self.out.get_ref(), self.settled, self.started, true);
            self.settled = self.started;
            self.started = self.written;
        }
        Ok(())
    }

    /// Writes `bytes` at `offset` without moving the front-to-back position (a checksum
    /// patched into a header, a mirror copy placed past the file's own stripes). What the
    /// buffer holds goes first when the patch overlaps it, so that it is not overwritten
    /// later (a mirror copy past the front-to-back position never does).
    pub fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let buffered_from = self.written - self.out.buffer().len() as u64;
        if offset < self.written && offset + bytes.len() as u64 > buffered_from {
            self.out.flush().map_err(os(&self.path))?;
        }
        self.out
            .get_ref()
            .write_all_at(bytes, offset)
            .map_err(os(&self.path))?;
        self.end = self.end.max(offset + bytes.len() as u64);
        Ok(())
    }

    /// Makes everything written so far durable (fdatasync), then lets it leave the page
    /// cache, positional writes included.
    pub fn sync(&mut self) -> Result<()> {
        self.out.flush().map_err(os(&self.path))?;
        self.out.get_ref().sync_data().map_err(os(&self.path))?;
        // Clean now, so dropping the whole range is cheap and catches the positional writes.
        settle(self.out.get_ref(), 0, self.written.max(self.end), false);
        self.settled = self.written;
        self.started = self.written;
        Ok(())
    }

    /// Flushes the buffer and writes everything back; with `durable`, also fsyncs (a file
    /// that outlives a crash). The pages leave the cache either way.
    pub fn finish(mut self, durable: bool) -> Result<File> {
        self.out.flush().map_err(os(&self.path))?;
        let file = self.out.into_inner().map_err(|e| IoError::Os {
            path: self.path.display().to_string(),
            source: e.into_error(),
        })?;
        if durable {
            file.sync_all().map_err(os(&self.path))?;
        }
        settle(&file, self.settled, self.written, true);
        Ok(file)
    }
}

/// A file read front to back whose read pages leave the page cache as it goes.
pub struct SpillReader {
    path: PathBuf,
    input: BufReader<File>,
    read: u64,
    settled: u64,
    len: u64,
}

impl SpillReader {
    pub fn open(path: &Path, buffer_bytes: usize) -> Result<Self> {
        let file = File::open(path).map_err(os(path))?;
        let len = file.metadata().map_err(os(path))?.len();
        // SAFETY: advice on a descriptor `file` keeps open; no pointers are passed.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
        }
        Ok(Self {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(buffer_bytes.max(4096), file),
            read: 0,
            settled: 0,
            len,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> u64 {
        self.len - self.read
    }

    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let offset = self.read;
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => IoError::UnexpectedEof {
                path: self.path.display().to_string(),
                offset,
            },
            _ => os(&self.path)(e),
        })?;
        self.read += buf.len() as u64;
        if self.read - self.settled >= SETTLE_BYTES {
            // The buffer may still hold bytes past `read`; only what was consumed goes.
            settle(self.input.get_ref(), self.settled, self.read, false);
            self.settled = self.read;
        }
        Ok(())
    }
}

impl Drop for SpillReader {
    fn drop(&mut self) {
        settle(self.input.get_ref(), self.settled, self.len, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_a_short_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill");
        let mut w = SpillWriter::create(&path, 1 << 16).unwrap();
        let block: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
        for _ in 0..20 {
            w.write_all(&block).unwrap();
        }
        assert_eq!(w.written(), 20 * block.len() as u64);
        w.finish(true).unwrap();
        let mut r = SpillReader::open(&path, 1 << 16).unwrap();
        assert_eq!(r.len(), 20 * block.len() as u64);
        let mut got = vec![0u8; block.len()];
        for _ in 0..20 {
            r.read_exact(&mut got).unwrap();
            assert_eq!(got, block);
        }
        let err = r.read_exact(&mut got[..1]).unwrap_err().to_string();
        assert!(err.contains("spill") && err.contains("past end"), "{err}");
    }
}
