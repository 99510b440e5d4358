use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Once;

use crate::{AlignedBuf, IoError, Result, SECTOR};

/// A file opened for reading, with O_DIRECT where the file system allows it.
pub struct DataFile {
    pub file: File,
    pub path: PathBuf,
    /// True when reads bypass the page cache.
    pub direct: bool,
    pub len: u64,
}

static BUFFERED_NOTICE: Once = Once::new();

/// Opens `path` for reading. With `want_direct`, tries O_DIRECT and proves it with one
/// read; where the file system refuses (tmpfs, some overlay mounts) the file is opened
/// buffered instead and the log says so once per process.
pub fn open_for_reading(path: &Path, want_direct: bool) -> Result<DataFile> {
    open_with_probe(path, want_direct, direct_read_works)
}

fn open_with_probe(
    path: &Path,
    want_direct: bool,
    probe: fn(&File, u64) -> bool,
) -> Result<DataFile> {
    let os = |source| IoError::Os {
        path: path.display().to_string(),
        source,
    };
    let len = std::fs::metadata(path).map_err(os)?.len();
    if want_direct {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) if probe(&file, len) => {
                return Ok(DataFile {
                    file,
                    path: path.to_path_buf(),
                    direct: true,
                    len,
                })
            }
            Ok(_) | Err(_) => {
                let shown = path.display().to_string();
                BUFFERED_NOTICE.call_once(|| {
                    log::warn!(
                        "O_DIRECT is not supported for {shown}; reading through the page cache instead"
                    )
                });
            }
        }
    }
    let file = File::open(path).map_err(os)?;
    Ok(DataFile {
        file,
        path: path.to_path_buf(),
        direct: false,
        len,
    })
}

fn direct_read_works(file: &File, len: u64) -> bool {
    if len < SECTOR as u64 {
        return false;
    }
    let mut probe = AlignedBuf::new(SECTOR);
    file.read_at(probe.as_mut_slice(), 0).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn opens_and_reports_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(&vec![7u8; SECTOR * 2]).unwrap();
        drop(f);
        let d = open_for_reading(&p, true).unwrap();
        assert_eq!(d.len, (SECTOR * 2) as u64);
        let d = open_for_reading(&p, false).unwrap();
        assert!(!d.direct);
    }

    #[test]
    fn refused_o_direct_falls_back_to_buffered_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![9u8; SECTOR]).unwrap();
        let d = open_with_probe(&p, true, |_, _| false).unwrap();
        assert!(!d.direct);
        let mut buf = vec![0u8; 16];
        d.file.read_at(&mut buf, 100).unwrap();
        assert_eq!(buf, vec![9u8; 16]);
        // A file shorter than a sector cannot be proven for O_DIRECT and is read buffered.
        std::fs::write(&p, b"short").unwrap();
        assert!(!open_for_reading(&p, true).unwrap().direct);
    }

    #[test]
    fn missing_file_error_names_path() {
        let err = open_for_reading(Path::new("/nonexistent/diskvec-x"), true)
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/diskvec-x"));
    }
}
