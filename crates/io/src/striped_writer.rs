use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::{IoError, Result, StripeMap};

/// Writes a logical byte stream across the path files of a stripe map, in order. Files
/// are written under temporary names and renamed into place only by `finish`.
pub struct StripedWriter {
    map: StripeMap,
    targets: Vec<PathBuf>,
    temps: Vec<PathBuf>,
    files: Vec<BufWriter<File>>,
    position: u64,
}

impl StripedWriter {
    pub fn create(targets: &[PathBuf], stripe_bytes: u64) -> Result<Self> {
        let map = StripeMap::new(targets.len(), stripe_bytes)?;
        let temps: Vec<PathBuf> = targets.iter().map(|t| t.with_extension("tmp")).collect();
        let files = temps
            .iter()
            .map(|t| {
                File::create(t)
                    .map(|f| BufWriter::with_capacity(1 << 20, f))
                    .map_err(|source| IoError::Os {
                        path: t.display().to_string(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            map,
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
            let (path, _) = self.map.locate(self.position);
            self.files[path]
                .write_all(&bytes[..take])
                .map_err(|source| IoError::Os {
                    path: self.temps[path].display().to_string(),
                    source,
                })?;
            self.position += take as u64;
            bytes = &bytes[take..];
        }
        Ok(())
    }

    /// Flushes and syncs every file, then renames each into place.
    pub fn finish(self) -> Result<()> {
        for ((w, temp), target) in self.files.into_iter().zip(&self.temps).zip(&self.targets) {
            let os = |source| IoError::Os {
                path: temp.display().to_string(),
                source,
            };
            let f = w.into_inner().map_err(|e| os(e.into_error()))?;
            f.sync_all().map_err(os)?;
            std::fs::rename(temp, target).map_err(|source| IoError::Os {
                path: target.display().to_string(),
                source,
            })?;
        }
        Ok(())
    }
}
