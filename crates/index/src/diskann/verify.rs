//! `diskvec verify`: every sector of an index, every copy, checked against its checksum.

use std::path::{Path, PathBuf};

use diskvec_io::{verify_volume, Damage, VerifyReport};

use super::compact::compact_path;
use super::index::read_header;
use super::layout::first_bad_sector;
use super::meta::Meta;
use super::nav::{nav_path, Navigation};
use super::META_FILE;
use crate::{IndexError, Progress, Result};

fn damage(file: &Path, offset: Option<u64>, problem: impl Into<String>) -> Damage {
    Damage {
        file: file.to_path_buf(),
        offset,
        problem: problem.into(),
    }
}

/// Checks `meta.dvm`, the header, every sector of every node file and mirror copy, and the
/// navigation file of the index in `dir`. Damage is reported, not returned as an error; an error means the
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
    // The codes are checksummed, not kept: verifying needs no more memory than a search.
    let meta = match Meta::read_without_codes(&meta_path) {
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
    // A damaged or missing first path is reported by the scan below (header sector
    // included); the geometry to scan with comes from meta.dvm's copy of the header.
    let header = meta.header();
    if let Ok(on_disk) = read_header(&paths[0], false) {
        if let Err(e) = meta.check(&on_disk, &meta_path) {
            report.damage.push(damage(&meta_path, None, e.to_string()));
        }
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
    // The navigation and compact code files, when the index has them (indexes built before
    // them have none).
    let (count, dim) = (header.count as usize, header.dim as usize);
    let nav = nav_path(dir, meta.build_id);
    if nav.exists() {
        report.files += 1;
        if let Err(e) = Navigation::read(&nav, meta.build_id, count, dim) {
            report.damage.push(damage(&nav, None, problem_of(e)));
        }
    }
    let compact = compact_path(dir, meta.build_id);
    if compact.exists() {
        report.files += 1;
        if let Err(e) = super::compact::read(&compact, meta.build_id, count, dim) {
            report.damage.push(damage(&compact, None, problem_of(e)));
        }
    }
    Ok(report)
}

fn problem_of(e: IndexError) -> String {
    match e {
        IndexError::Corrupt { message, .. } => message,
        other => other.to_string(),
    }
}
