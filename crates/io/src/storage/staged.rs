//! A file written under a temporary name and installed over its target once durable: the
//! one atomic-replace path every writer of diskvec uses.

use std::io;
use std::path::{Path, PathBuf};

use super::{parent_dir, temp_name, Storage, StorageFile};

/// New content for `target`, written under a temporary name. [`StagedFile::install`] makes
/// it durable and renames it over the target; dropped before that, the temporary file goes.
pub struct StagedFile<'s> {
    storage: &'s dyn Storage,
    temp: PathBuf,
    target: PathBuf,
    file: Option<Box<dyn StorageFile>>,
}

impl<'s> StagedFile<'s> {
    /// Starts `target`'s new content in `temp`, created empty (or emptied).
    pub fn create(storage: &'s dyn Storage, target: &Path, temp: &Path) -> io::Result<Self> {
        let file = storage.create(temp)?;
        Ok(Self {
            storage,
            temp: temp.to_path_buf(),
            target: target.to_path_buf(),
            file: Some(file),
        })
    }

    pub fn temp(&self) -> &Path {
        &self.temp
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The file being written.
    pub fn file(&mut self) -> &mut dyn StorageFile {
        self.file
            .as_deref_mut()
            .expect("a staged file is open until it is installed")
    }

    /// Makes the content durable, then renames it over the target: a crash before the
    /// rename leaves the target as it was, and the renamed name never points at data that
    /// is not on the device. The new name itself is durable once the caller syncs the
    /// target's directory (once for all the files one commit installs).
    pub fn install(mut self) -> io::Result<()> {
        let mut file = self.file.take().expect("installed once");
        file.sync_data()?;
        drop(file);
        self.storage.rename(&self.temp, &self.target)?;
        // Installed: nothing left for `drop` to remove.
        self.temp = PathBuf::new();
        Ok(())
    }
}

impl Drop for StagedFile<'_> {
    fn drop(&mut self) {
        if self.temp.as_os_str().is_empty() {
            return;
        }
        self.file = None;
        // A leftover wastes space only; the owner's cleanup at open finds it again.
        let _ = self.storage.remove_file(&self.temp);
    }
}

/// Replaces the content of `path` with what `fill` writes, so that after a crash at any
/// point the path holds the complete old or the complete new content: a temporary file
/// ([`temp_name`]), `fill`, fsync, rename, fsync of the directory.
pub fn write_atomic_with(
    storage: &dyn Storage,
    path: &Path,
    fill: impl FnOnce(&mut dyn StorageFile) -> io::Result<()>,
) -> io::Result<()> {
    let temp = temp_name(path)?;
    let mut staged = StagedFile::create(storage, path, &temp)?;
    fill(staged.file())?;
    staged.install()?;
    storage.sync_dir(&parent_dir(path))
}

/// `std::io::Write` over a [`StorageFile`]'s appends, for encoders that write to a `Write`
/// (wrap it in a `BufWriter` when they write small pieces).
pub struct StorageWriter<'a>(pub &'a mut dyn StorageFile);

impl io::Write for StorageWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.append(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
