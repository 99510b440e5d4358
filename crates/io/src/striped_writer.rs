use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{IoError, Result, SpillWriter, StripeMap};

fn os(path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
    move |source| IoError::Os {
        path: path.display().to_string(),
        source,
    }
}

/// Writes a logical byte stream across the path files of a stripe map, in order. Files
/// are written under temporary names and renamed into place only by `finish`.
pub struct StripedWriter {
    map: StripeMap,
    /// With mirroring, each path's file holds, after its own stripes, a copy of the
    /// previous path's; the total logical length fixes where that copy starts.
    mirror: Option<(Vec<File>, u64)>,
    targets: Vec<PathBuf>,
    temps: Vec<PathBuf>,
    /// One per path; they drop their pages as they go (a build's dirty pages count against
    /// its memory cgroup).
    files: Vec<SpillWriter>,
    position: u64,
}

impl StripedWriter {
    /// `logical_len` is the total the caller will write; it places the mirror copies.
    pub fn create(
        targets: &[PathBuf],
        stripe_bytes: u64,
        mirror: bool,
        logical_len: u64,
    ) -> Result<Self> {
        let map = StripeMap::new(targets.len(), stripe_bytes)?;
        if mirror && targets.len() < 2 {
            return Err(IoError::Usage("mirroring needs at least two paths".into()));
        }
        let temps: Vec<PathBuf> = targets.iter().map(|t| t.with_extension("tmp")).collect();
        let files = temps
            .iter()
            .map(|t| SpillWriter::create(t, 1 << 20))
            .collect::<Result<Vec<_>>>()?;
        let mirror = if mirror {
            let handles = temps
                .iter()
                .map(|t| {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(t)
                        .map_err(os(t))
                })
                .collect::<Result<Vec<_>>>()?;
            Some((handles, logical_len))
        } else {
            None
        };
        Ok(Self {
            map,
            mirror,
            targets: targets.to_vec(),
            temps,
            files,
            position: 0,
        })
    }

    pub fn write_all(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let room = (self.map.stripe_bytes - self.position % self.map.stripe_bytes) as usize;
            let take = room.min(bytes.len());
            let (path, physical) = self.map.locate(self.position);
            self.files[path].write_all(&bytes[..take])?;
            if let Some((handles, logical_len)) = &self.mirror {
                let q = (path + 1) % self.map.paths;
                let at = self.map.path_len(q, *logical_len) + physical;
                handles[q]
                    .write_all_at(&bytes[..take], at)
                    .map_err(os(&self.temps[q]))?;
            }
            self.position += take as u64;
            bytes = &bytes[take..];
        }
        Ok(())
    }

    /// Flushes and syncs every file, then renames each into place.
    pub fn finish(self) -> Result<()> {
        for ((w, temp), target) in self.files.into_iter().zip(&self.temps).zip(&self.targets) {
            w.finish(true)?;
            std::fs::rename(temp, target).map_err(os(target))?;
        }
        Ok(())
    }
}
