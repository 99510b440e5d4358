//! Reading every sector of a volume, each copy of it, to find damage that queries have not
//! met yet (a flipped byte in a sector no query visits is otherwise never noticed).

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::volume::expected_path_len;
use crate::{open_for_reading, AlignedBuf, SectorCheck, StripeMap, SECTOR};

/// One thing wrong with a volume's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub file: PathBuf,
    /// Byte offset of the bad sector in `file`; `None` for the file as a whole (missing,
    /// unreadable, wrong size).
    pub offset: Option<u64>,
    pub problem: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{} at offset {o}: {}", self.file.display(), self.problem),
            None => write!(f, "{}: {}", self.file.display(), self.problem),
        }
    }
}

/// What a scan found.
#[derive(Clone, Debug, Default)]
pub struct VerifyReport {
    pub files: usize,
    pub sectors: u64,
    pub damage: Vec<Damage>,
}

/// Which logical byte the bytes at `physical` in `path`'s file hold: its own stripes
/// first, then (with mirroring) its copy of the previous path's.
fn logical_of(map: &StripeMap, logical_len: u64, mirror: bool, path: usize, physical: u64) -> u64 {
    let own = map.path_len(path, logical_len);
    let (holder, at) = if mirror && physical >= own {
        ((path + map.paths - 1) % map.paths, physical - own)
    } else {
        (path, physical)
    };
    let stripe = at / map.stripe_bytes;
    (stripe * map.paths as u64 + holder as u64) * map.stripe_bytes + at % map.stripe_bytes
}

/// Checks every sector of every path file of a volume (and every mirror copy) with
/// `check`; `progress` is told the bytes read as the scan goes.
pub fn verify_volume(
    paths: &[PathBuf],
    stripe_bytes: u64,
    logical_len: u64,
    mirror: bool,
    check: SectorCheck,
    progress: &dyn Fn(u64),
) -> crate::Result<VerifyReport> {
    let map = StripeMap::new(paths.len(), stripe_bytes)?;
    let mut report = VerifyReport::default();
    // O_DIRECT where the file system allows it, so the media is checked, not the page
    // cache that a build just filled.
    let mut buf = AlignedBuf::new(1 << 20);
    for (i, name) in paths.iter().enumerate() {
        report.files += 1;
        let whole = |problem: String| Damage {
            file: name.clone(),
            offset: None,
            problem,
        };
        let want = expected_path_len(&map, logical_len, mirror, i);
        let file = match open_for_reading(name, true) {
            Ok(f) => f,
            Err(e) => {
                report.damage.push(whole(format!("cannot be opened: {e}")));
                continue;
            }
        };
        let len = file.len;
        if len != want {
            report.damage.push(whole(format!(
                "size is {len} bytes, the index expects {want} (the sectors present are checked)"
            )));
        }
        let end = len.min(want) / SECTOR as u64 * SECTOR as u64;
        let mut at = 0u64;
        while at < end {
            let take = buf.len().min((end - at) as usize);
            if let Err(e) = file.file.read_exact_at(&mut buf.as_mut_slice()[..take], at) {
                report.damage.push(Damage {
                    file: name.clone(),
                    offset: Some(at),
                    problem: format!("read failed: {e}"),
                });
                at += take as u64;
                continue;
            }
            for (k, sector) in buf.as_slice()[..take].chunks_exact(SECTOR).enumerate() {
                let physical = at + (k * SECTOR) as u64;
                let logical = logical_of(&map, logical_len, mirror, i, physical);
                report.sectors += 1;
                if !check(logical / SECTOR as u64, sector) {
                    let copy = if mirror && physical >= map.path_len(i, logical_len) {
                        " (mirror copy)"
                    } else {
                        ""
                    };
                    report.damage.push(Damage {
                        file: name.clone(),
                        offset: Some(physical),
                        problem: format!(
                            "checksum mismatch in logical sector {}{copy}",
                            logical / SECTOR as u64
                        ),
                    });
                }
            }
            progress(take as u64);
            at += take as u64;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physical_offsets_map_back_to_their_logical_bytes() {
        for (paths, stripe, mirror) in [(1usize, 4096u64, false), (3, 8192, false), (3, 4096, true)]
        {
            let map = StripeMap::new(paths, stripe).unwrap();
            let len = 23 * 4096u64;
            for logical in (0..len).step_by(4096) {
                let (p, physical) = map.locate(logical);
                assert_eq!(logical_of(&map, len, mirror, p, physical), logical);
                if mirror {
                    let q = (p + 1) % paths;
                    let copy = map.path_len(q, len) + physical;
                    assert_eq!(logical_of(&map, len, mirror, q, copy), logical);
                }
            }
        }
    }
}
