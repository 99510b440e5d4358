use std::path::PathBuf;

use crate::storage::{StagedFile, Storage};
use crate::{IoError, Result, StripeMap};

fn os(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
    move |source| IoError::Os {
        path: path.display().to_string(),
        source,
    }
}

/// Writes a logical byte stream across the path files of a stripe map, in order, through
/// the durable-write path ([`Storage`]). Files are written under temporary names and
/// installed (synced, renamed into place) only by `finish`; the caller syncs their
/// directories in the commit that makes them current.
pub struct StripedWriter<'s> {
    map: StripeMap,
    /// With mirroring, each path's file holds, after its own stripes, a copy of the
    /// previous path's; the total logical length fixes where that copy starts.
    mirror: Option<u64>,
    /// One per path; created files drop their pages as they go (a build's dirty pages count
    /// against its memory cgroup).
    files: Vec<StagedFile<'s>>,
    position: u64,
}

impl<'s> StripedWriter<'s> {
    /// `logical_len` is the total the caller will write; it places the mirror copies.
    pub fn create(
        storage: &'s dyn Storage,
        targets: &[PathBuf],
        stripe_bytes: u64,
        mirror: bool,
        logical_len: u64,
    ) -> Result<Self> {
        let map = StripeMap::new(targets.len(), stripe_bytes)?;
        if mirror && targets.len() < 2 {
            return Err(IoError::Usage("mirroring needs at least two paths".into()));
        }
        let files = targets
            .iter()
            .map(|t| {
                let temp = t.with_extension("tmp");
                StagedFile::create(storage, t, &temp).map_err(os(&temp))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            map,
            mirror: mirror.then_some(logical_len),
            files,
            position: 0,
        })
    }

    pub fn write_all(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let room = (self.map.stripe_bytes - self.position % self.map.stripe_bytes) as usize;
            let take = room.min(bytes.len());
            let (path, physical) = self.map.locate(self.position);
            let own = &mut self.files[path];
            let temp = own.temp().to_path_buf();
            own.file().append(&bytes[..take]).map_err(os(&temp))?;
            if let Some(logical_len) = self.mirror {
                let q = (path + 1) % self.map.paths;
                let at = self.map.path_len(q, logical_len) + physical;
                let copy = &mut self.files[q];
                let temp = copy.temp().to_path_buf();
                copy.file()
                    .write_at(at, &bytes[..take])
                    .map_err(os(&temp))?;
            }
            self.position += take as u64;
            bytes = &bytes[take..];
        }
        Ok(())
    }

    /// Syncs every file, then renames each into place.
    pub fn finish(self) -> Result<()> {
        for file in self.files {
            let target = file.target().to_path_buf();
            file.install().map_err(os(&target))?;
        }
        Ok(())
    }
}
