//! A payload update racing an upsert of the same point: the update rewrites the point's full
//! contents (vector included), so it must read them in the same turn of the writer lock as
//! it logs them, or an upsert landing between the two is overwritten with the stale vector.

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::small_config;
use diskvec_db::{Database, Payload, PointId, PointRecord};

fn point(round: u64) -> PointRecord {
    let mut payload = Payload::new();
    payload.insert("round".into(), round.into());
    PointRecord::new(PointId::Num(1), vec![round as f32, 1.0, 2.0, 3.0], payload)
}

#[test]
fn a_payload_update_never_brings_back_the_vector_an_upsert_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = db.create_collection("c", small_config(100_000)).unwrap();
    col.upsert(vec![point(0)]).unwrap();
    let (rounds, limit) = (400, Duration::from_secs(60));
    let start = Instant::now();
    let mut lost = Vec::new();
    for round in 1..=rounds {
        if start.elapsed() > limit {
            break;
        }
        let barrier = Arc::new(Barrier::new(2));
        let (b, c) = (Arc::clone(&barrier), Arc::clone(&col));
        let updater = std::thread::spawn(move || {
            let mut mark = Payload::new();
            mark.insert("marked".into(), round.into());
            b.wait();
            c.set_payload(&[PointId::Num(1)], &mark).unwrap();
        });
        barrier.wait();
        col.upsert(vec![point(round)]).unwrap();
        updater.join().unwrap();
        let now = &col.get(&[PointId::Num(1)], true, true).unwrap()[0];
        let payload = now.payload.as_ref().unwrap();
        // Whichever came last, the upsert's vector stays: the update either ran before it
        // (and was replaced whole) or after it (and kept its vector).
        if now.vector().unwrap()[0] != round as f32 || payload["round"] != round {
            lost.push(round);
        }
    }
    assert!(lost.is_empty(), "rounds whose upsert was undone: {lost:?}");
    db.close().unwrap();
}
