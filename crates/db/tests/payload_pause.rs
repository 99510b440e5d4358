//! The lost update of a payload change, made deterministic: the update is held between
//! reading a point and logging its new contents (`DISKVEC_DELAY=payload:read=MILLIS`) while
//! an upsert of the same point is sent. The upsert must wait for the update (both take the
//! writer lock), so the point ends with the upsert's vector; were the lock let go between the
//! read and the write, the update would write back the vector the upsert replaced. Every
//! payload operation (set, overwrite, delete keys, clear) goes through that one update.

mod common;

use std::time::{Duration, Instant};

use common::small_config;
use diskvec_db::{Database, Payload, PointId, PointRecord};

fn point(x: f32, tag: &str) -> PointRecord {
    let mut payload = Payload::new();
    payload.insert("tag".into(), tag.into());
    PointRecord::new(PointId::Num(1), vec![x, 1.0, 2.0, 3.0], payload)
}

/// A payload operation on point 1, run on a thread of its own.
type Update = Box<dyn FnOnce() -> diskvec_db::Result<u64> + Send>;

#[test]
fn an_upsert_sent_while_a_payload_update_is_held_is_not_overwritten() {
    // This binary's only test: the variable is process-wide.
    std::env::set_var("DISKVEC_DELAY", "payload:read=400");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = db.create_collection("c", small_config(100_000)).unwrap();
    let ids = [PointId::Num(1)];
    let mut mark = Payload::new();
    mark.insert("marked".into(), true.into());
    let operations: [(&str, Update); 4] = [
        ("set", {
            let (c, m) = (col.clone(), mark.clone());
            Box::new(move || c.set_payload(&ids, &m))
        }),
        ("overwrite", {
            let (c, m) = (col.clone(), mark.clone());
            Box::new(move || c.overwrite_payload(&ids, &m))
        }),
        ("delete keys", {
            let c = col.clone();
            Box::new(move || c.delete_payload_keys(&ids, &["tag".to_string()]))
        }),
        ("clear", {
            let c = col.clone();
            Box::new(move || c.clear_payload(&ids))
        }),
    ];
    for (round, (name, update)) in operations.into_iter().enumerate() {
        let old = round as f32 * 10.0;
        col.upsert(vec![point(old, "old")]).unwrap();
        let started = Instant::now();
        let held = std::thread::spawn(update);
        // Well inside the 400 ms the update is held for.
        std::thread::sleep(Duration::from_millis(100));
        col.upsert(vec![point(old + 1.0, "new")]).unwrap();
        let update_op = held.join().unwrap().unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "{name}: the update was not held"
        );
        let (records, _) = col.scroll(None, 10, None, true, true).unwrap();
        let got = &records[0];
        assert_eq!(
            got.vector().unwrap()[0],
            old + 1.0,
            "{name}: the update wrote back the vector the upsert replaced"
        );
        // The upsert came after the update, whole: its payload, not the update's.
        assert_eq!(got.payload.as_ref().unwrap()["tag"], "new", "{name}");
        assert!(got.version > update_op, "{name}");
    }
}
