//! Where a database may keep files: its own directory, and the storage paths its operator
//! configured when opening it. A collection's settings may pick among those paths, never
//! name new ones, and every path the database derives from a name stays inside its root.

use std::path::{Component, Path, PathBuf};

use crate::{CollectionConfig, DbError, Result};

/// The storage paths a database may keep collections' files on besides its own directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoragePaths {
    /// Any directory a collection's settings name: the embedded library and the command
    /// line, whose caller is the operator.
    #[default]
    Any,
    /// Only these (a server: its clients pick among the paths it was started with).
    Only(Vec<PathBuf>),
}

impl StoragePaths {
    /// The operator's list, each made absolute and resolved (created if missing), so a
    /// request's path is compared with what the directory really is.
    pub fn only(paths: &[PathBuf]) -> Result<Self> {
        let mut resolved = Vec::with_capacity(paths.len());
        for p in paths {
            std::fs::create_dir_all(p).map_err(crate::error::file_error(p))?;
            resolved.push(p.canonicalize().map_err(crate::error::file_error(p))?);
        }
        Ok(Self::Only(resolved))
    }

    /// Refuses a collection whose storage paths or log directory are not among the
    /// configured ones.
    pub(crate) fn check(&self, config: &CollectionConfig) -> Result<()> {
        let Self::Only(allowed) = self else {
            return Ok(());
        };
        let asked = config
            .paths
            .iter()
            .map(|p| ("paths", p))
            .chain(config.wal_path.iter().map(|p| ("wal_path", p)));
        for (setting, path) in asked {
            // A path that does not resolve (missing, a dangling link) is no configured one.
            let resolved = path.canonicalize().ok();
            if !resolved.is_some_and(|r| allowed.contains(&r)) {
                return Err(DbError::InvalidInput(format!(
                    "{setting}: {} is not one of the storage paths this database was opened \
                     with (diskvec serve --paths): a client may choose among those, not name \
                     others",
                    path.display()
                )));
            }
        }
        Ok(())
    }
}

/// `root/name`, where `name` must be one plain file name (no separator, no `.` or `..`):
/// a path derived from a name never leaves its root.
pub(crate) fn child(root: &Path, name: &str) -> Result<PathBuf> {
    let mut parts = Path::new(name).components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(n)), None) if n == name => Ok(root.join(name)),
        _ => Err(DbError::InvalidInput(format!(
            "{name:?} is not a plain file name"
        ))),
    }
}

/// Removes the directory `path` and what it holds, if it is a directory: a symbolic link
/// (planted where a directory of ours should be) is refused, never followed or removed.
/// Returns whether there was a directory to remove.
pub(crate) fn remove_tree(storage: &dyn crate::storage::Storage, path: &Path) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(crate::error::file_error(path)(e)),
    };
    if !meta.is_dir() {
        return Err(DbError::InvalidInput(format!(
            "{} is not a directory of the database's (a {}): not removed",
            path.display(),
            if meta.file_type().is_symlink() {
                "symbolic link"
            } else {
                "file"
            }
        )));
    }
    storage
        .remove_dir_all(path)
        .map_err(crate::error::file_error(path))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_path_stays_under_its_root() {
        let root = Path::new("/db/collections");
        assert_eq!(child(root, "docs").unwrap(), root.join("docs"));
        for bad in ["", ".", "..", "a/b", "/etc", "a/../b"] {
            assert!(child(root, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_configured_paths_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&b).unwrap();
        let only = StoragePaths::only(std::slice::from_ref(&a)).unwrap();
        let mut config = CollectionConfig::new(4, crate::Metric::L2);
        config.paths = vec![a.clone()];
        only.check(&config).unwrap();
        // The same directory through a link resolves to the configured one.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        config.paths = vec![link];
        only.check(&config).unwrap();
        for other in [b.clone(), PathBuf::from("/"), dir.path().join("missing")] {
            config.paths = vec![other.clone()];
            assert!(only.check(&config).is_err(), "{}", other.display());
            config.paths.clear();
            config.wal_path = Some(other.clone());
            assert!(only.check(&config).is_err(), "{}", other.display());
            config.wal_path = None;
        }
        config.paths = vec![b];
        StoragePaths::Any.check(&config).unwrap();
    }

    #[test]
    fn a_link_is_not_removed_nor_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("kept"), b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fs = crate::storage::FsStorage;
        assert!(remove_tree(&fs, &link).is_err());
        assert!(target.join("kept").exists() && link.exists());
        assert!(!remove_tree(&fs, &dir.path().join("missing")).unwrap());
        assert!(remove_tree(&fs, &target).unwrap());
        assert!(!target.exists());
    }
}
