//! Power loss at every point of a workload: every file the database writes (its log,
//! manifests, and, through `optimize`, sealed segments: points files, deleted bitmaps, the
//! DiskANN indexes' meta.dvm, navigation files and node stripes on two storage paths, one
//! index per dense space, and the spaces file with the sparse vectors) goes through a
//! storage that forgets whatever was not fsynced (file data and directory entries), and
//! after each crash the reopened collection must hold every acknowledged write, every
//! vector in every space.

use std::collections::BTreeMap;
use std::sync::Arc;

use diskvec_db::storage::CrashStorage;
use diskvec_db::{
    CollectionConfig, Database, DenseSpace, Durability, NamedVectors, Payload, PointId,
    PointRecord, SparseSpace, SparseVector, Vector,
};
use diskvec_vector::Metric;
use serde_json::json;

const DIM: usize = 4;

enum Step {
    Create,
    Upsert(Vec<u64>, u32),
    Delete(Vec<u64>),
    SetPayload(Vec<u64>, u32),
    Index(&'static str),
    /// Seal everything into DiskANN segments and merge them (waiting for it).
    Optimize,
}

fn workload() -> Vec<Step> {
    let mut steps = vec![Step::Create];
    for round in 0..6u32 {
        let base = round as u64 * 7;
        steps.push(Step::Upsert((base..base + 10).collect(), round));
        if round == 2 {
            steps.push(Step::Index("tag"));
        }
        if round == 1 || round == 4 {
            steps.push(Step::Optimize);
        }
        steps.push(Step::Delete(vec![base + 1, base + 4, 999]));
        steps.push(Step::SetPayload(vec![base + 2, base + 3], round));
    }
    steps
}

/// A point's vectors: always one in the unnamed space, in a second dense space for even
/// ids, a multivector for ids divisible by four, a sparse one for ids divisible by three.
fn vectors(id: u64, generation: u32) -> NamedVectors {
    let dense = |dim: usize| {
        (0..dim)
            .map(|d| id as f32 * 0.5 + d as f32 + generation as f32 * 100.0)
            .collect()
    };
    let mut v = NamedVectors::from([(String::new(), Vector::Dense(dense(DIM)))]);
    if id.is_multiple_of(2) {
        v.insert("b".into(), Vector::Dense(dense(3)));
    }
    if id.is_multiple_of(4) {
        v.insert("m".into(), Vector::Multi(vec![dense(2), dense(2)]));
    }
    if id.is_multiple_of(3) {
        let s = SparseVector {
            indices: vec![id as u32, 1_000 + generation],
            values: vec![0.5, generation as f32],
        };
        v.insert("s".into(), Vector::Sparse(s));
    }
    v
}

type Model = BTreeMap<u64, (NamedVectors, Payload)>;

fn apply(model: &mut Model, step: &Step) {
    match step {
        Step::Create | Step::Index(_) | Step::Optimize => {}
        Step::Upsert(ids, g) => {
            for &id in ids {
                let p = json!({"tag": format!("t{}", id % 3), "gen": g});
                model.insert(id, (vectors(id, *g), p.as_object().unwrap().clone()));
            }
        }
        Step::Delete(ids) => ids.iter().for_each(|id| {
            model.remove(id);
        }),
        Step::SetPayload(ids, g) => {
            for id in ids {
                if let Some((_, p)) = model.get_mut(id) {
                    p.insert("set".into(), json!(g));
                }
            }
        }
    }
}

/// Runs the workload until the storage fails; returns how many steps were acknowledged.
/// The collection acknowledges writes as `durability` says.
fn run(storage: &CrashStorage, steps: &[Step], durability: Durability) -> usize {
    let root = storage.root().join("db");
    let Ok(db) = Database::open_with_storage(&root, Arc::new(storage.clone())) else {
        return 0;
    };
    let mut acked = 0;
    for step in steps {
        let ok = match step {
            Step::Create => {
                let dense = |name: &str, dim| DenseSpace::new(name, dim, Metric::L2);
                let sparse = SparseSpace::new("s", Default::default());
                let mut c = CollectionConfig::with_spaces(
                    vec![dense("", DIM), dense("b", 3)],
                    vec![sparse],
                );
                c.multi = vec![dense("m", 2)];
                c.seal_threshold = 1_000_000;
                c.durability = durability;
                c.paths = vec![storage.root().join("p0"), storage.root().join("p1")];
                db.create_collection("c", c).is_ok()
            }
            step => {
                let Ok(c) = db.collection("c") else { break };
                match step {
                    Step::Upsert(ids, g) => c
                        .upsert(
                            ids.iter()
                                .map(|&id| {
                                    let payload = json!({"tag": format!("t{}", id % 3), "gen": g});
                                    let payload = payload.as_object().unwrap().clone();
                                    PointRecord {
                                        id: PointId::Num(id),
                                        vectors: vectors(id, *g),
                                        payload,
                                    }
                                })
                                .collect(),
                        )
                        .is_ok(),
                    Step::Delete(ids) => c
                        .delete(ids.iter().map(|&i| PointId::Num(i)).collect())
                        .is_ok(),
                    Step::SetPayload(ids, g) => c
                        .set_payload(
                            &ids.iter().map(|&i| PointId::Num(i)).collect::<Vec<_>>(),
                            json!({"set": g}).as_object().unwrap(),
                        )
                        .is_ok(),
                    Step::Index(field) => c.create_payload_index(field, "keyword").is_ok(),
                    Step::Optimize => c.optimize(true).is_ok(),
                    Step::Create => unreachable!(),
                }
            }
        };
        if !ok {
            break;
        }
        acked += 1;
    }
    acked
}

/// Everything the reopened database holds (empty if the collection is not there).
fn contents(storage: CrashStorage) -> Model {
    let db = Database::open_with_storage(&storage.root().join("db"), Arc::new(storage))
        .expect("a crashed database reopens");
    let Ok(c) = db.collection("c") else {
        return Model::new();
    };
    let (records, next) = c.scroll(None, 10_000, None, true, true).unwrap();
    assert!(next.is_none());
    records
        .into_iter()
        .map(|r| {
            let PointId::Num(id) = r.id else {
                panic!("uuid")
            };
            (id, (r.vectors.unwrap(), r.payload.unwrap()))
        })
        .collect()
}

#[test]
fn every_acknowledged_write_survives_a_crash_at_every_point() {
    // Log files of a few records: the workload rotates them, and its seals remove the ones
    // their manifests cover (this test is its binary's only one, so the variable is its own).
    std::env::set_var("DISKVEC_WAL_FILE_BYTES", "512");
    let steps = workload();
    let models = models(&steps);
    let checked = crash_everywhere(&steps, Durability::Sync, |got, acked| {
        // The acknowledged steps are all there; the one in flight may be, whole.
        got == &models[acked] || (acked < steps.len() && got == &models[acked + 1])
    });
    assert!(checked >= 100, "{checked} crash points");
    // Acknowledged before flushed (a flush that never comes by itself here): a crash may
    // lose the writes since the last flush, but the database always reopens, at a prefix of
    // the writes (a manifest never holds what the log lost: each flushes the log first).
    let interval = Durability::Interval {
        interval_ms: 60_000,
    };
    let checked = crash_everywhere(&steps, interval, |got, acked| {
        models[..=(acked + 1).min(steps.len())]
            .iter()
            .any(|m| m == got)
    });
    assert!(checked >= 100, "{checked} crash points (interval)");
}

/// The state after each prefix of `steps`.
fn models(steps: &[Step]) -> Vec<Model> {
    let mut models = vec![Model::new()];
    for s in steps {
        let mut m = models.last().unwrap().clone();
        apply(&mut m, s);
        models.push(m);
    }
    models
}

/// Crashes the workload after every storage operation (whole and torn), reopens, and asks
/// `holds(reopened contents, steps acknowledged)`; returns the crash points checked.
fn crash_everywhere(
    steps: &[Step],
    durability: Durability,
    holds: impl Fn(&Model, usize) -> bool,
) -> usize {
    let dry_dir = tempfile::tempdir().unwrap();
    let dry = CrashStorage::new(dry_dir.path()).unwrap();
    assert_eq!(run(&dry, steps, durability), steps.len());
    let total = dry.ops();
    assert!(holds(&contents(dry.crash()), steps.len()) || durability != Durability::Sync);
    let mut checked = 0;
    for n in 0..total {
        for torn in [None, Some(n * 31 + 7)] {
            let dir = tempfile::tempdir().unwrap();
            let storage = CrashStorage::new(dir.path()).unwrap();
            storage.set_fail_after(n);
            let acked = run(&storage, steps, durability);
            let crashed = match torn {
                None => storage.crash(),
                Some(seed) => storage.crash_torn(seed),
            };
            let got = contents(crashed);
            assert!(
                holds(&got, acked),
                "{durability:?}: crash after {n} of {total} storage operations ({torn:?}): \
                 {acked} steps acknowledged, reopened with {} points",
                got.len()
            );
            checked += 1;
        }
    }
    checked
}
