//! Collection aliases: other names a collection answers to (Qdrant's aliases), kept in the
//! database's `aliases.dvc` and changed only as a whole list of actions at once, so that a
//! blue-green switch (delete the alias from the old collection, create it on the new one)
//! never shows a moment without it.
//!
//! ```text
//! 0        8        12       16
//! +--------+--------+--------+-----------------------------------------+
//! | magic  | crc32c | version| body: JSON object, alias -> collection |
//! |DVALIASE| of 12..| u32 LE |                                         |
//! +--------+--------+--------+-----------------------------------------+
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::file_error;
use crate::storage::{write_atomic, Storage};
use crate::{DbError, Result};

pub const ALIASES_FILE: &str = "aliases.dvc";
const MAGIC: &[u8; 8] = b"DVALIASE";
const VERSION: u32 = 1;

/// One change of the alias list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AliasAction {
    Create { alias: String, collection: String },
    Delete { alias: String },
    Rename { from: String, to: String },
}

/// Aliases by name, each to a collection.
pub(crate) type AliasMap = BTreeMap<String, String>;

pub(crate) fn encode(aliases: &AliasMap) -> Vec<u8> {
    let body = serde_json::to_vec(aliases).expect("a map of strings serializes");
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32c::crc32c(&out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<AliasMap> {
    let corrupt = |message: String| DbError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(corrupt(
            "not an aliases file (bad magic or too short)".into(),
        ));
    }
    let stored = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if crc32c::crc32c(&bytes[12..]) != stored {
        return Err(corrupt("checksum mismatch".into()));
    }
    let version = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
    if version != VERSION {
        return Err(corrupt(format!(
            "version {version} is not supported (this build reads {VERSION})"
        )));
    }
    serde_json::from_slice(&bytes[16..]).map_err(|e| corrupt(format!("body: {e}")))
}

/// The aliases of the database in `dir` (none when it has no file).
pub(crate) fn read(dir: &Path) -> Result<AliasMap> {
    let path = dir.join(ALIASES_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => decode(&bytes, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AliasMap::new()),
        Err(e) => Err(file_error(&path)(e)),
    }
}

/// Replaces the aliases file atomically and durably.
pub(crate) fn write(storage: &dyn Storage, dir: &Path, aliases: &AliasMap) -> Result<()> {
    let path = dir.join(ALIASES_FILE);
    write_atomic(storage, &path, &encode(aliases)).map_err(file_error(&path))
}

/// `aliases` after `actions`, in order, all or nothing; `is_collection` says which names are
/// collections. (A cluster keeps its aliases in etcd and changes them by this too.)
pub fn apply(
    aliases: &AliasMap,
    actions: &[AliasAction],
    is_collection: &dyn Fn(&str) -> bool,
) -> Result<AliasMap> {
    let mut next = aliases.clone();
    for action in actions {
        match action {
            AliasAction::Create { alias, collection } => {
                crate::db::check_name(alias)?;
                if is_collection(alias) {
                    return Err(DbError::CollectionExists(alias.clone()));
                }
                if !is_collection(collection) {
                    return Err(DbError::UnknownCollection(collection.clone()));
                }
                // Creating an alias that exists moves it (Qdrant's behaviour).
                next.insert(alias.clone(), collection.clone());
            }
            AliasAction::Delete { alias } => {
                if next.remove(alias).is_none() {
                    return Err(DbError::InvalidInput(format!(
                        "Alias {alias} does not exist"
                    )));
                }
            }
            AliasAction::Rename { from, to } => {
                crate::db::check_name(to)?;
                if is_collection(to) {
                    return Err(DbError::CollectionExists(to.clone()));
                }
                let collection = next
                    .remove(from)
                    .ok_or_else(|| DbError::InvalidInput(format!("Alias {from} does not exist")))?;
                next.insert(to.clone(), collection);
            }
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_apply_all_or_nothing_and_the_file_catches_damage() {
        let is_collection = |n: &str| n == "a" || n == "b";
        let create = |alias: &str, collection: &str| AliasAction::Create {
            alias: alias.into(),
            collection: collection.into(),
        };
        let one = apply(&AliasMap::new(), &[create("x", "a")], &is_collection).unwrap();
        assert_eq!(one["x"], "a");
        // A blue-green switch in one list.
        let switched = apply(
            &one,
            &[
                AliasAction::Delete { alias: "x".into() },
                create("x", "b"),
                AliasAction::Rename {
                    from: "x".into(),
                    to: "y".into(),
                },
            ],
            &is_collection,
        )
        .unwrap();
        assert_eq!(switched, AliasMap::from([("y".into(), "b".into())]));
        // A failing action leaves the list as it was (the caller keeps `one`).
        assert!(matches!(
            apply(&one, &[create("z", "a"), create("b", "a")], &is_collection),
            Err(DbError::CollectionExists(_))
        ));
        assert!(matches!(
            apply(&one, &[create("z", "nope")], &is_collection),
            Err(DbError::UnknownCollection(_))
        ));
        let bytes = encode(&switched);
        assert_eq!(decode(&bytes, Path::new("a")).unwrap(), switched);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert!(decode(&bad, Path::new("a")).is_err(), "byte {i}");
        }
    }
}
