//! Searches, upserts and deletes from several threads while segments seal and merge: every
//! answer is checked against exact search over what was acknowledged before it started.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskvec_db::{CollectionConfig, Database, Payload, PointId, PointRecord, SearchRequest};
use diskvec_vector::Metric;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIM: usize = 16;
const WRITERS: u64 = 2;
const BATCHES: u64 = 40;
const BATCH: u64 = 50;

fn vector(id: u64) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(id ^ 0xabcdef);
    (0..DIM).map(|_| rng.random_range(-1.0..1.0)).collect()
}

#[derive(Default)]
struct Acked {
    /// Ids in the order their upserts were acknowledged.
    upserted: Vec<u64>,
    /// Ids whose deletes were acknowledged: they must never come back.
    deleted: HashSet<u64>,
    /// Ids whose deletes were sent: a delete is visible before it is acknowledged.
    deleting: HashSet<u64>,
}

#[test]
fn answers_match_exact_search_over_acknowledged_points_while_segments_seal() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let mut cfg = CollectionConfig::new(DIM, Metric::L2);
    cfg.seal_threshold = 300;
    cfg.max_degree = 24;
    cfg.build_list = 64;
    // Codes as long as the vectors: the graph search is then all but exact, so a miss
    // points at the database, not at approximation.
    cfg.pq_bytes = Some(DIM);
    let c = db.create_collection("c", cfg).unwrap();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let writing = Arc::new(AtomicBool::new(true));
    let started = Instant::now();
    let bound = Duration::from_secs(240);
    let self_asked = Arc::new(AtomicUsize::new(0));
    let (queries, self_found, recall_hits, recall_total) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let (c, acked) = (&c, &acked);
            writers.push(s.spawn(move || {
                for b in 0..BATCHES {
                    let first = (w * BATCHES + b) * BATCH;
                    let ids: Vec<u64> = (first..first + BATCH).collect();
                    c.upsert(
                        ids.iter()
                            .map(|&id| {
                                PointRecord::new(PointId::Num(id), vector(id), Payload::new())
                            })
                            .collect(),
                    )
                    .unwrap();
                    acked.lock().unwrap().upserted.extend(ids);
                    // Paced to the seals (queued segments would be sealed together): many
                    // seals, then merges, switch in while the readers search.
                    while c.info().segments.iter().any(|s| s.kind == "frozen")
                        && started.elapsed() < bound
                    {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }));
        }
        // Deletes every 7th acknowledged point now and then.
        let deleter = {
            let (c, acked, writing) = (&c, &acked, &writing);
            s.spawn(move || {
                let mut done = 0;
                while writing.load(Ordering::SeqCst) && started.elapsed() < bound {
                    let batch: Vec<u64> = {
                        let a = acked.lock().unwrap();
                        a.upserted[done..].iter().copied().step_by(7).collect()
                    };
                    done = acked.lock().unwrap().upserted.len().max(done);
                    if !batch.is_empty() {
                        acked.lock().unwrap().deleting.extend(batch.iter().copied());
                        c.delete(batch.iter().map(|&i| PointId::Num(i)).collect())
                            .unwrap();
                        acked.lock().unwrap().deleted.extend(batch);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let mut readers = Vec::new();
        for r in 0..2u64 {
            let (c, acked, writing) = (&c, &acked, &writing);
            let (queries, self_found, recall_hits, recall_total) =
                (&queries, &self_found, &recall_hits, &recall_total);
            let self_asked = &self_asked;
            readers.push(s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(r);
                let mut n = 0;
                // Keep querying after the writers stop until a merge has switched in too
                // (on a busy machine the merge comes late: 5,000 queries each were done
                // before it, once, beside a 4M build).
                while (writing.load(Ordering::SeqCst) || n < 50 || c.info().rebuilds_done == 0)
                    && n < 50_000
                    && started.elapsed() < bound
                {
                    let (before, deleted_before) = {
                        let a = acked.lock().unwrap();
                        (a.upserted.clone(), a.deleted.clone())
                    };
                    let live: Vec<u64> = before
                        .iter()
                        .copied()
                        .filter(|i| !deleted_before.contains(i))
                        .collect();
                    if live.is_empty() {
                        std::thread::yield_now();
                        continue;
                    }
                    let target = live[rng.random_range(0..live.len())];
                    let query = vector(target);
                    let mut req = SearchRequest::new(10);
                    req.search_list = Some(200);
                    let hits = c.search(&query, &req).unwrap();
                    let max_id = WRITERS * BATCHES * BATCH;
                    for h in &hits {
                        let PointId::Num(id) = h.id else { panic!() };
                        assert!(id < max_id, "unknown id {id}");
                        assert!(
                            !deleted_before.contains(&id),
                            "point {id} deleted before the query came back"
                        );
                        let d = Metric::L2.distance(&query, &vector(id));
                        assert!(
                            (d - h.distance).abs() <= 1e-3 * d.max(1.0),
                            "distance of {id}"
                        );
                    }
                    assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
                    // Points certainly visible to this query: acknowledged before it
                    // started and not deleted before it ended. Writes during the query may
                    // add closer points; none of these may be missing unless ten closer
                    // ones came back instead.
                    let deleted_after = acked.lock().unwrap().deleting.clone();
                    let certain: Vec<u64> = before
                        .iter()
                        .copied()
                        .filter(|i| !deleted_after.contains(i))
                        .collect();
                    if !deleted_after.contains(&target) {
                        self_found.fetch_add(
                            usize::from(hits.first().map(|h| h.id) == Some(PointId::Num(target))),
                            Ordering::Relaxed,
                        );
                        self_asked.fetch_add(1, Ordering::Relaxed);
                    }
                    let mut exact: Vec<(f32, u64)> = certain
                        .iter()
                        .map(|&i| (Metric::L2.distance(&query, &vector(i)), i))
                        .collect();
                    exact.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let got: HashSet<PointId> = hits.iter().map(|h| h.id).collect();
                    let tenth = if hits.len() == 10 {
                        hits[9].distance
                    } else {
                        f32::INFINITY
                    };
                    recall_total.fetch_add(10.min(exact.len()), Ordering::Relaxed);
                    recall_hits.fetch_add(
                        exact
                            .iter()
                            .take(10)
                            .filter(|(d, i)| got.contains(&PointId::Num(*i)) || *d > tenth)
                            .count(),
                        Ordering::Relaxed,
                    );
                    queries.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            }));
        }
        for w in writers {
            w.join().unwrap();
        }
        writing.store(false, Ordering::SeqCst);
        deleter.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
    });
    let q = queries.load(Ordering::Relaxed);
    let found = self_found.load(Ordering::Relaxed);
    let asked = self_asked.load(Ordering::Relaxed);
    let recall =
        recall_hits.load(Ordering::Relaxed) as f64 / recall_total.load(Ordering::Relaxed) as f64;
    println!(
        "{q} queries while writing: own vector first {found} of {asked}, recall@10 vs acknowledged {recall:.4}, \
         {} seals, {} rebuilds",
        c.info().seals_done,
        c.info().rebuilds_done
    );
    assert!(q >= 100, "{q} queries");
    // PQ codes as long as the vectors make the graph search all but exact: what is left
    // is the database's to answer for.
    assert!(
        found as f64 >= 0.998 * asked as f64,
        "{found} of {asked} found their own point first"
    );
    assert!(recall >= 0.995, "recall {recall}");
    assert!(c.info().seals_done >= 5, "segments sealed while searching");
    assert!(
        c.info().rebuilds_done >= 1,
        "a merge switched in while searching"
    );
    let a = acked.lock().unwrap();
    assert_eq!(c.len(), a.upserted.len() - a.deleted.len());
}
