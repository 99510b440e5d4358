//! Snapshots: a collection packed at one operation and restored on another database
//! exactly; damaged or mismatched archives refused; a snapshot taken under writes holds a
//! prefix of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use diskvec_db::{CollectionConfig, Database, DbError, Metric, PointId, PointRecord, SnapshotsOf};
use serde_json::json;

fn point(id: u64) -> PointRecord {
    let payload = json!({"n": id, "tag": format!("t{}", id % 3)});
    PointRecord::new(
        PointId::Num(id),
        vec![id as f32, (id % 7) as f32, 1.0, -(id as f32)],
        payload.as_object().unwrap().clone(),
    )
}

fn small_config() -> CollectionConfig {
    let mut c = CollectionConfig::new(4, Metric::L2);
    c.seal_threshold = 1_000;
    c
}

#[test]
fn a_snapshot_restores_every_point_payload_and_setting_on_another_database() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = Database::open(a.path()).unwrap();
    let mut config = small_config();
    config.hnsw_m = 20;
    let c = src.create_collection("c", config).unwrap();
    c.create_payload_index("tag", "keyword").unwrap();
    // Sealed points, then growing ones, then deletes of both kinds.
    c.upsert((0..1_500).map(point).collect()).unwrap();
    c.optimize(true).unwrap();
    c.upsert((1_500..1_700).map(point).collect()).unwrap();
    c.delete(vec![PointId::Num(3), PointId::Num(1_600)])
        .unwrap();
    let info = src.create_snapshot("c").unwrap();
    let file = src
        .snapshot_file(SnapshotsOf::Collection("c"), &info.name)
        .unwrap();
    assert_eq!(
        info.checksum.as_deref(),
        Some(diskvec_db::file_checksum(&file).unwrap().as_str())
    );
    assert_eq!(
        src.list_snapshots(SnapshotsOf::Collection("c")).unwrap(),
        vec![info.clone()]
    );

    let dst = Database::open(b.path()).unwrap();
    let restored = dst
        .restore_collection("copy", &file, info.checksum.as_deref())
        .unwrap();
    assert_eq!(restored.len(), 1_698);
    assert_eq!(restored.config().hnsw_m, 20);
    assert_eq!(restored.payload_indexes(), c.payload_indexes());
    let ids: Vec<PointId> = (0..1_700).map(PointId::Num).collect();
    let want = c.get(&ids, true, true).unwrap();
    let got = restored.get(&ids, true, true).unwrap();
    assert_eq!(want.len(), got.len());
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(
            (w.id, &w.payload, &w.vectors),
            (g.id, &g.payload, &g.vectors)
        );
    }
    // It opens again as any collection does.
    drop(restored);
    drop(dst);
    let dst = Database::open(b.path()).unwrap();
    assert_eq!(dst.collection("copy").unwrap().len(), 1_698);
    // Deleting it removes the file; a path is never a snapshot name.
    src.delete_snapshot(SnapshotsOf::Collection("c"), &info.name)
        .unwrap();
    assert!(src
        .list_snapshots(SnapshotsOf::Collection("c"))
        .unwrap()
        .is_empty());
    for bad in ["../../etc/passwd", "/etc/passwd", &info.name] {
        assert!(matches!(
            src.snapshot_file(SnapshotsOf::Collection("c"), bad),
            Err(DbError::NotFound(_))
        ));
    }
}

#[test]
fn mismatched_and_damaged_snapshots_are_refused_and_change_nothing() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = Database::open(a.path()).unwrap();
    let c = src.create_collection("c", small_config()).unwrap();
    c.upsert((0..50).map(point).collect()).unwrap();
    let info = src.create_snapshot("c").unwrap();
    let file = src
        .snapshot_file(SnapshotsOf::Collection("c"), &info.name)
        .unwrap();
    let dst = Database::open(b.path()).unwrap();
    let other = dst.create_collection("c", small_config()).unwrap();
    other.upsert(vec![point(7)]).unwrap();
    drop(other);
    let wrong = "3".repeat(64);
    let Err(e) = dst.restore_collection("c", &file, Some(&wrong)) else {
        panic!("a wrong checksum was accepted");
    };
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    // A damaged archive: its bytes cut short.
    let bytes = std::fs::read(&file).unwrap();
    let cut = b.path().join("cut.snapshot");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(dst.restore_collection("c", &cut, None).is_err());
    let junk = b.path().join("junk.snapshot");
    std::fs::write(&junk, b"not a tar file at all").unwrap();
    assert!(dst.restore_collection("c", &junk, None).is_err());
    // Each is a damaged archive; a full snapshot is not a collection's.
    for bad in [&cut, &junk] {
        assert!(matches!(
            dst.restore_collection("c", bad, None),
            Err(DbError::Corrupt { .. })
        ));
    }
    let full = src.create_full_snapshot().unwrap();
    let full = src
        .snapshot_file(SnapshotsOf::Database, &full.name)
        .unwrap();
    let Err(e) = dst.restore_collection("c", &full, None) else {
        panic!("a full snapshot passed for a collection's");
    };
    assert!(e.to_string().contains("a full snapshot"), "{e}");
    // The collection there is untouched.
    assert_eq!(dst.collection("c").unwrap().len(), 1);
    // The right one replaces it.
    dst.restore_collection("c", &file, info.checksum.as_deref())
        .unwrap();
    assert_eq!(dst.collection("c").unwrap().len(), 50);
}

#[test]
fn shard_snapshots_are_kept_apart_from_the_collection_s_own() {
    let a = tempfile::tempdir().unwrap();
    let db = Database::open(a.path()).unwrap();
    let c = db.create_collection("c", small_config()).unwrap();
    c.upsert((0..20).map(point).collect()).unwrap();
    let own = db.create_snapshot("c").unwrap();
    let shard = db.create_shard_snapshot("c").unwrap();
    let shelf = SnapshotsOf::Shard("c");
    assert_eq!(db.list_snapshots(shelf).unwrap(), vec![shard.clone()]);
    assert_eq!(
        db.list_snapshots(SnapshotsOf::Collection("c")).unwrap(),
        vec![own.clone()]
    );
    // Each shelf serves and deletes its own names only.
    assert!(db.snapshot_file(shelf, &own.name).is_err() || own.name == shard.name);
    let file = db.snapshot_file(shelf, &shard.name).unwrap();
    assert_eq!(
        db.restore_collection("copy", &file, None).unwrap().len(),
        20
    );
    db.delete_snapshot(shelf, &shard.name).unwrap();
    assert!(db.list_snapshots(shelf).unwrap().is_empty());
    assert_eq!(
        db.list_snapshots(SnapshotsOf::Collection("c")).unwrap(),
        vec![own]
    );
    assert!(matches!(
        db.list_snapshots(SnapshotsOf::Shard("missing")),
        Err(DbError::UnknownCollection(_))
    ));
}

#[test]
fn a_snapshot_under_writes_holds_a_prefix_of_them() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = Database::open(a.path()).unwrap();
    let c = src.create_collection("c", small_config()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (c, stop) = (Arc::clone(&c), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut id = 0;
            while !stop.load(Ordering::Relaxed) && id < 20_000 {
                c.upsert(vec![point(id)]).unwrap();
                id += 1;
            }
            id
        })
    };
    while c.len() < 200 {
        std::thread::yield_now();
    }
    let info = src.create_snapshot("c").unwrap();
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    let file = src
        .snapshot_file(SnapshotsOf::Collection("c"), &info.name)
        .unwrap();
    let dst = Database::open(b.path()).unwrap();
    let r = dst.restore_collection("r", &file, None).unwrap();
    let held = r.len() as u64;
    assert!(held >= 200 && held <= written, "{held} of {written}");
    // Exactly the first `held` writes, each as written.
    let ids: Vec<PointId> = (0..written).map(PointId::Num).collect();
    let got = r.get(&ids, true, true).unwrap();
    assert_eq!(got.len() as u64, held);
    for (i, rec) in got.iter().enumerate() {
        let want = point(i as u64);
        assert_eq!(rec.id, want.id);
        assert_eq!(rec.payload.as_ref(), Some(&want.payload));
    }
}
