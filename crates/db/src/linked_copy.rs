//! Linked copies: a collection handed to another node whose database directory is on the
//! same file system (storage every node of a cluster mounts: a cluster file system over
//! shared NVMe-oF namespaces, NFS), without copying its sealed segments.
//!
//! ```text
//! <db>/snapshots/.linked/<collection>-<nanos>/   made by link_copy, consumed by adopt_linked
//!   manifest.dvc             copied (its SHA-256 names the copy to the adopting node)
//!   segments/<id>/...        hard links to the sealed segments' files (immutable once
//!                            sealed: every later change is a new file renamed into place)
//!   wal/...                  copied (appended in place)
//! ```
//! The adopting node links the files again into its own collections directory, so both
//! replicas open the same sealed bytes where they lie; the file system frees them when the
//! last replica drops its link (a merge, a drop). Files that cannot be linked (another
//! file system) are copied: slower, never wrong.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::collection::snapshot::{link_tree, LinkedBytes};
use crate::error::file_error;
use crate::manifest::MANIFEST_FILE;
use crate::snapshot::{file_checksum, sync_tree};
use crate::{Collection, Database, DbError, Result};

const LINKED_DIR: &str = ".linked";

/// A linked copy made for another node.
#[derive(Clone, Debug)]
pub struct LinkedCopy {
    /// Where it is (absolute).
    pub dir: PathBuf,
    /// The last operation it holds.
    pub last_op: u64,
    /// SHA-256 of its manifest, hex: the adopting node checks it reads the same copy.
    pub manifest_checksum: String,
    /// Bytes of the sealed segments linked, and copied.
    pub bytes: LinkedBytes,
}

impl Database {
    fn linked_root(&self) -> PathBuf {
        self.snapshots_dir().join(LINKED_DIR)
    }

    /// A consistent copy of `collection` (`Collection::copy_consistent`) for another node
    /// to adopt, its sealed segments linked, not copied; `copied` is called once it is made.
    pub fn link_copy(&self, collection: &str, copied: impl FnOnce()) -> Result<LinkedCopy> {
        let c = self.collection(collection)?;
        let root = self.linked_root();
        fs::create_dir_all(&root).map_err(file_error(&root))?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::path::absolute(root.join(format!("{}-{nanos}", c.name())))
            .map_err(file_error(&root))?;
        let made = c.copy_consistent(&dir);
        copied();
        let made = made.and_then(|(last_op, bytes)| {
            sync_tree(&dir)?;
            let manifest_checksum = file_checksum(&dir.join(MANIFEST_FILE))?;
            Ok(LinkedCopy {
                dir: dir.clone(),
                last_op,
                manifest_checksum,
                bytes,
            })
        });
        if made.is_err() {
            let _ = fs::remove_dir_all(&dir);
        }
        made
    }

    /// Opens the linked copy at `from` (made by another node's `link_copy` on this file
    /// system) as collection `name`, replacing one of that name; the copy is removed after.
    /// Its manifest must have SHA-256 `manifest_checksum`.
    pub fn adopt_linked(
        &self,
        name: &str,
        from: &Path,
        manifest_checksum: &str,
    ) -> Result<(Arc<Collection>, LinkedBytes)> {
        crate::db::check_name(name)?;
        // The path comes from another node: followed to where it really is, then it must be
        // a linked copy made for this collection.
        let from = &fs::canonicalize(from).map_err(file_error(from))?;
        let made_for = from
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with(&format!("{name}-")));
        let in_linked = from
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|p| p == LINKED_DIR);
        if !from.is_absolute() || !made_for || !in_linked {
            return Err(DbError::InvalidInput(format!(
                "{} is not a linked copy of {name}",
                from.display()
            )));
        }
        let got = file_checksum(&from.join(MANIFEST_FILE))?;
        if !got.eq_ignore_ascii_case(manifest_checksum) {
            return Err(DbError::InvalidInput(format!(
                "the linked copy at {} is not the one made (manifest SHA-256 {got}, expected \
                 {manifest_checksum}): the nodes do not share this storage",
                from.display()
            )));
        }
        let mut bytes = LinkedBytes::default();
        let result = self.put_in_place(name, "the linked collection", |unpacked| {
            link_tree(from, unpacked, &mut bytes)
        });
        if result.is_ok() {
            let _ = fs::remove_dir_all(from);
        }
        result.map(|c| (c, bytes))
    }

    /// Removes linked copies made here more than `age` ago that no node adopted.
    pub fn sweep_linked(&self, age: Duration) {
        let Ok(entries) = fs::read_dir(self.linked_root()) else {
            return;
        };
        for e in entries.flatten() {
            if crate::storage::changed_before(&e.path(), age) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}
