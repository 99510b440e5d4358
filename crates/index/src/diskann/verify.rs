//! `diskvec verify`: every sector of an index, every copy, checked against its checksum.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use diskvec_io::{verify_volume, Damage, VerifyReport, SECTOR};

use super::layout::first_bad_sector;
use super::meta::Meta;
use super::{Header, META_FILE};
use crate::{IndexError, Progress, Result};

fn damage(file: &Path, offset: Option<u64>, problem: impl Into<String>) -> Damage {
    Damage {
        file: file.to_path_buf(),
        offset,
        problem: problem.into(),
    }
}

/// Reads the header sector at the front of the first path file.
fn read_header(path: &Path) -> std::result::Result<Header, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    let mut sector = vec![0u8; SECTOR];
    let got = file
        .read_at(&mut sector, 0)
        .map_err(|e| format!("read failed: {e}"))?;
    Header::decode(&sector[..got], path).map_err(|e| match e {
        IndexError::Corrupt { message, .. } => message,
        other => other.to_string(),
    })
}

/// Checks `meta.dvm`, the header, and every sector of every node file and mirror copy of
/// the index in `dir`. Damage is reported, not returned as an error; an error means the
/// check itself could not run (no index there).
pub fn verify(dir: &Path, progress: &dyn Progress) -> Result<VerifyReport> {
    let meta_path = dir.join(META_FILE);
    if !meta_path.exists() {
        return Err(IndexError::File {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no index here (meta.dvm is missing)",
            ),
        });
    }
    let mut report = VerifyReport {
        files: 1,
        ..Default::default()
    };
    let meta = match Meta::read(&meta_path) {
        Ok(m) => m,
        Err(e) => {
            let problem = match e {
                IndexError::Corrupt { message, .. } => message,
                other => other.to_string(),
            };
            report.damage.push(damage(&meta_path, None, problem));
            return Ok(report);
        }
    };
    let paths: Vec<PathBuf> = meta.paths.iter().map(|p| dir.join(p)).collect();
    let header = match read_header(&paths[0]) {
        Ok(h) => h,
        Err(problem) => {
            report.files += 1;
            report.damage.push(damage(&paths[0], Some(0), problem));
            return Ok(report);
        }
    };
    if let Err(e) = meta.check(&header, &meta_path) {
        report.damage.push(damage(&meta_path, None, e.to_string()));
    }
    let total = header.nodes_file_bytes() * if header.mirrored { 2 } else { 1 };
    progress.phase("verify", total);
    let volume = verify_volume(
        &paths,
        header.stripe_bytes,
        header.nodes_file_bytes(),
        header.mirrored,
        |number, sector| first_bad_sector(sector, number).is_none(),
        &|bytes| progress.advance(bytes),
    )?;
    report.files += volume.files;
    report.sectors += volume.sectors;
    report.damage.extend(volume.damage);
    Ok(report)
}
