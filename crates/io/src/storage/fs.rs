//! [`Storage`] on the real file system.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{Storage, StorageFile};
use crate::{IoError, SpillWriter};

/// The real file system: `std::fs`, `File::sync_data` (fdatasync) for file data, and an
/// fsync of the opened directory for [`Storage::sync_dir`].
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

struct FsFile {
    file: File,
    len: u64,
}

impl StorageFile for FsFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn forget_cached(&self) {
        crate::forget_cached(&self.file);
    }
}

/// A created file: a [`SpillWriter`], so a stripe of gigabytes does not sit in the page cache.
struct FsCreated(SpillWriter);

/// The io crate's error as a plain `io::Error`, keeping its kind and the path it names.
fn plain(e: IoError) -> io::Error {
    match e {
        IoError::Os { ref source, .. } => {
            let kind = source.kind();
            io::Error::new(kind, e.to_string())
        }
        other => io::Error::other(other.to_string()),
    }
}

impl StorageFile for FsCreated {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.write_all(data).map_err(plain)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, data).map_err(plain)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync().map_err(plain)
    }

    fn len(&self) -> u64 {
        self.0.written()
    }
}

impl Storage for FsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            // A name that is not UTF-8 was not written by us and cannot be one of our files.
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        // Not O_APPEND: on Linux that would send `write_at` to the end as well.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        let len = file.seek(io::SeekFrom::End(0))?;
        Ok(Box::new(FsFile { file, len }))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(FsCreated(
            SpillWriter::create(path, 1 << 20).map_err(plain)?,
        )))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        // sync_all, not sync_data: the new size is the whole point of the call.
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A created file's positional writes land where they are aimed, even inside what its
    /// buffer still holds, and its appends continue at their own position.
    #[test]
    fn created_file_patches_and_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = FsStorage.create(&path).unwrap();
        f.append(b"0000abcd").unwrap();
        f.write_at(0, b"12").unwrap();
        f.write_at(10, b"zz").unwrap();
        f.append(b"x").unwrap();
        assert_eq!(f.len(), 9);
        f.sync_data().unwrap();
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), b"1200abcdx\0zz");
        let mut a = FsStorage.open_append(&path).unwrap();
        assert_eq!(a.len(), 12);
        a.append(b"!").unwrap();
        a.write_at(1, b"3").unwrap();
        drop(a);
        assert_eq!(std::fs::read(&path).unwrap(), b"1300abcdx\0zz!");
    }
}
