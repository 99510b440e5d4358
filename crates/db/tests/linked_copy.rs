//! Linked copies: a collection handed to another database on the same file system opens
//! the same sealed segment files (hard links, no bytes copied), holds exactly the points of
//! the original, and lives on its own after (writes, merges and drops on either side leave
//! the other whole); a copy that is not the one made is refused.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use diskvec_db::{CollectionConfig, Database, Metric, PointId, PointRecord};
use serde_json::json;

fn point(id: u64) -> PointRecord {
    let payload = json!({"n": id});
    PointRecord::new(
        PointId::Num(id),
        vec![id as f32, (id % 7) as f32, 1.0, -(id as f32)],
        payload.as_object().unwrap().clone(),
    )
}

/// (inode, path) of every file under `dir`.
fn inodes(dir: &Path) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            out.extend(inodes(&e.path()));
        } else {
            out.push((meta.ino(), e.file_name().to_string_lossy().into_owned()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_linked_copy_shares_the_sealed_files_and_lives_on_its_own() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let src = Database::open(&a).unwrap();
    let mut config = CollectionConfig::new(4, Metric::L2);
    config.seal_threshold = 1_000;
    let c = src.create_collection("r@0", config).unwrap();
    c.upsert((0..1_500).map(point).collect()).unwrap();
    c.optimize(true).unwrap();
    c.upsert((1_500..1_600).map(point).collect()).unwrap();
    c.delete(vec![PointId::Num(7), PointId::Num(1_550)])
        .unwrap();

    let mut released = false;
    let copy = src.link_copy("r@0", || released = true).unwrap();
    assert!(released);
    assert!(
        copy.bytes.linked > 0 && copy.bytes.copied == 0,
        "{:?}",
        copy.bytes
    );
    let dst = Database::open(&b).unwrap();
    // A copy other than the one made, or a path that is no linked copy of it, is refused.
    assert!(dst.adopt_linked("r@0", &copy.dir, &"0".repeat(64)).is_err());
    assert!(dst
        .adopt_linked("r@0", &a.join("collections"), &copy.manifest_checksum)
        .is_err());
    let (got, bytes) = dst
        .adopt_linked("r@0", &copy.dir, &copy.manifest_checksum)
        .unwrap();
    assert_eq!(bytes.copied, 0, "{bytes:?}");
    assert!(
        !copy.dir.exists(),
        "the linked copy is removed once adopted"
    );
    assert_eq!(got.len(), 1_598);
    let ids: Vec<PointId> = (0..1_600).map(PointId::Num).collect();
    assert_eq!(
        got.get(&ids, true, true).unwrap(),
        c.get(&ids, true, true).unwrap()
    );

    // The sealed segment files are the same files (inodes) on both sides.
    let (mine, theirs) = (
        inodes(&a.join("collections/r@0/segments")),
        inodes(&b.join("collections/r@0/segments")),
    );
    let shared = mine.iter().filter(|f| theirs.contains(f)).count();
    assert!(
        shared > 0 && shared == theirs.len(),
        "{mine:?} vs {theirs:?}"
    );

    // Each side changes on its own: deletes, a merge, then the original dropped.
    got.delete(vec![PointId::Num(1)]).unwrap();
    got.upsert((2_000..2_500).map(point).collect()).unwrap();
    got.optimize(true).unwrap();
    assert_eq!(c.len(), 1_598);
    assert_eq!(c.get(&[PointId::Num(1)], true, false).unwrap().len(), 1);
    src.drop_collection("r@0").unwrap();
    drop(src);
    assert_eq!(got.len(), 2_097);
    let some: Vec<PointId> = [0, 2, 1_499, 1_599, 2_499].map(PointId::Num).to_vec();
    assert_eq!(got.get(&some, true, true).unwrap().len(), 5);
    drop(got);
    drop(dst);
    let reopened = Database::open(&b).unwrap();
    assert_eq!(reopened.collection("r@0").unwrap().len(), 2_097);
}
