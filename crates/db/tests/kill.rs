//! kill -9 at random moments: a child process works through a deterministic sequence of
//! writes (upserts, rewrites, deletes, payload updates, seals) and prints each one it got
//! acknowledged; the parent kills it (or lets it abort itself at a failpoint around a
//! seal's manifest switch), reopens the database and checks that it holds exactly the
//! acknowledged writes, plus at most the one in flight. The next round continues where
//! that left off, so later rounds also kill during recovery and sealing of a larger base.
//!
//! `DISKVEC_KILL_ROUNDS` sets the rounds (default 4); `scripts/kill_test.sh` runs 100. The
//! same child and check, run inside a VM that is killed instead of the process, are the
//! power-loss lab (`scripts/lab/power-loss.sh`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskvec_db::{CollectionConfig, Database, Payload, PointId, PointRecord};
use diskvec_vector::Metric;
use serde_json::json;

const DIM: usize = 8;
const BATCH: u64 = 50;
const CHILD_ENV: &str = "DISKVEC_KILL_CHILD";
/// "DIR;N": check DIR against N acknowledged steps and exit (`check_after_crash`).
const CHECK_ENV: &str = "DISKVEC_KILL_CHECK";
/// Milliseconds: a new collection acknowledges writes before flushing them, flushed this
/// often (durability "interval"): what the power-loss lab must catch.
const ACK_BEFORE_FLUSH_ENV: &str = "DISKVEC_KILL_ACK_BEFORE_FLUSH_MS";

#[derive(Debug)]
enum Step {
    /// New ids, plus (every third step) rewrites of older ones.
    Upsert(Vec<u64>),
    Delete(Vec<u64>),
    SetPayload(Vec<u64>),
    /// Freeze the growing segment so the worker seals it now.
    Seal,
}

/// Step `i` of the endless workload: a function of `i` alone, so a child can start anywhere.
fn step(i: u64) -> Step {
    let older = |n: u64, salt: u64| -> Vec<u64> {
        (0..n)
            .map(|j| (i * 7919 + j * 104_729 + salt) % (i.max(1) * BATCH))
            .collect()
    };
    match i % 10 {
        9 => Step::Delete(older(10, 1)),
        5 => Step::SetPayload(older(5, 2)),
        7 if i % 20 == 17 => Step::Seal,
        _ => {
            let mut ids: Vec<u64> = (i * BATCH..(i + 1) * BATCH).collect();
            if i.is_multiple_of(3) && i > 0 {
                ids.extend(older(10, 3));
            }
            Step::Upsert(ids)
        }
    }
}

fn vector(id: u64, version_step: u64) -> Vec<f32> {
    (0..DIM)
        .map(|d| ((id * 31 + d as u64 * 7 + version_step * 13) % 1000) as f32 / 10.0)
        .collect()
}

fn payload(id: u64, i: u64) -> Payload {
    json!({"id": id, "step": i, "tag": format!("t{}", id % 5)})
        .as_object()
        .unwrap()
        .clone()
}

type Model = BTreeMap<u64, (Vec<f32>, Payload)>;

fn apply(model: &mut Model, i: u64) {
    match step(i) {
        Step::Upsert(ids) => {
            for id in ids {
                model.insert(id, (vector(id, i), payload(id, i)));
            }
        }
        Step::Delete(ids) => ids.iter().for_each(|id| {
            model.remove(id);
        }),
        Step::SetPayload(ids) => {
            for id in ids {
                if let Some((_, p)) = model.get_mut(&id) {
                    p.insert("touched".into(), json!(i));
                }
            }
        }
        Step::Seal => {}
    }
}

fn open(dir: &Path) -> (Database, Arc<diskvec_db::Collection>) {
    let db = Database::open(dir).expect("the database reopens");
    let c = match db.collection("kill") {
        Ok(c) => c,
        Err(_) => {
            let mut cfg = CollectionConfig::new(DIM, Metric::L2);
            cfg.seal_threshold = 600;
            cfg.max_degree = 16;
            cfg.build_list = 32;
            // The power-loss lab's check of itself: writes acknowledged before their flush
            // survive a killed process (the page cache stays) but not a killed machine.
            if let Some(ms) = std::env::var(ACK_BEFORE_FLUSH_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
            {
                cfg.durability = diskvec_db::Durability::Interval { interval_ms: ms };
            }
            db.create_collection("kill", cfg).unwrap()
        }
    };
    (db, c)
}

/// The child: work from step `from` on, printing "ack i" for each acknowledged step.
fn child(dir: &Path, from: u64) -> ! {
    let (_db, c) = open(dir);
    let mut out = std::io::stdout().lock();
    // `optimize` merges every segment (the rebuild path), and while its merges run the
    // threshold seal is rarely the worker's next job: a round aimed at a plain seal's
    // failpoint leaves them out, so the growing segment surely fills and seals.
    let aims_at_seal = std::env::var("DISKVEC_FAILPOINT").is_ok_and(|f| f.starts_with("seal:"));
    for i in from.. {
        let result = match step(i) {
            Step::Upsert(ids) => c
                .upsert(
                    ids.iter()
                        .map(|&id| {
                            PointRecord::new(PointId::Num(id), vector(id, i), payload(id, i))
                        })
                        .collect(),
                )
                .map(|_| ()),
            Step::Delete(ids) => c
                .delete(ids.into_iter().map(PointId::Num).collect())
                .map(|_| ()),
            Step::SetPayload(ids) => {
                // Only ids that exist: an update of a missing point is refused whole.
                let live: Vec<PointId> = c
                    .get(
                        &ids.into_iter().map(PointId::Num).collect::<Vec<_>>(),
                        false,
                        false,
                    )
                    .unwrap()
                    .into_iter()
                    .map(|r| r.id)
                    .collect();
                c.set_payload(&live, json!({"touched": i}).as_object().unwrap())
                    .map(|_| ())
            }
            Step::Seal if aims_at_seal => Ok(()),
            Step::Seal => c.optimize(false),
        };
        result.unwrap_or_else(|e| panic!("step {i}: {e}"));
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
    }
    unreachable!()
}

fn contents(dir: &Path) -> Model {
    let (db, c) = open(dir);
    let mut model = Model::new();
    let mut offset = None;
    loop {
        let (records, next) = c.scroll(None, 5_000, offset, true, true).unwrap();
        for r in records {
            let PointId::Num(id) = r.id else {
                panic!("uuid")
            };
            model.insert(id, (r.vector().unwrap().to_vec(), r.payload.unwrap()));
        }
        match next {
            Some(n) => offset = Some(n),
            None => break,
        }
    }
    drop(c);
    db.close().unwrap();
    model
}

struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

const FAILPOINTS: [&str; 5] = [
    "seal:built",
    "seal:switched",
    "manifest:bitmaps-written",
    "rebuild:built",
    "rebuild:switched",
];

/// Whether the reopened `got` holds the `acked_until` acknowledged steps `model` holds,
/// plus at most the one in flight whole (then applied to `model`): the step to continue
/// from, or what was lost.
fn reconcile(model: &mut Model, acked_until: u64, got: &Model) -> Result<u64, String> {
    if got == model {
        return Ok(acked_until);
    }
    let mut with_next = model.clone();
    apply(&mut with_next, acked_until);
    if *got == with_next {
        *model = with_next;
        return Ok(acked_until + 1);
    }
    let missing = model.keys().filter(|k| !got.contains_key(k)).count();
    let differing = model
        .iter()
        .filter(|(k, v)| got.get(k).is_some_and(|g| g != *v))
        .count();
    Err(format!(
        "after {acked_until} acknowledged steps the database holds {} points; {missing} \
         acknowledged points missing, {differing} differ",
        got.len()
    ))
}

/// Where the workload stands after a crash the caller saw (a VM killed: the power-loss lab,
/// scripts/lab/power-loss.sh): `acked_until` steps acknowledged. Checks the database against
/// them, prints "power check: next N, P points" (N: the step to continue from, one more when
/// the step in flight landed) and exits; panics naming what was lost.
fn check_after_crash(dir: &Path, acked_until: u64) -> ! {
    let mut model = Model::new();
    for i in 0..acked_until {
        apply(&mut model, i);
    }
    let got = contents(dir);
    let next = match reconcile(&mut model, acked_until, &got) {
        Ok(next) => next,
        Err(lost) => panic!("{lost}"),
    };
    println!("power check: next {next}, {} points", got.len());
    std::process::exit(0)
}

#[test]
fn kill_nine_loses_nothing_acknowledged() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (dir, from) = spec.split_once(';').unwrap();
        child(Path::new(dir), from.parse().unwrap());
    }
    if let Ok(spec) = std::env::var(CHECK_ENV) {
        let (dir, acked_until) = spec.split_once(';').unwrap();
        check_after_crash(Path::new(dir), acked_until.parse().unwrap());
    }
    let rounds: usize = std::env::var("DISKVEC_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("DISKVEC_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = SplitMix(seed);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // The state after `next_step` steps.
    let mut model = Model::new();
    let mut next_step = 0u64;
    let (mut checked_points, mut in_flight_applied, mut failpoint_rounds) = (0usize, 0, 0);
    let mut failpoints_hit = 0;
    for round in 0..rounds {
        assert!(
            started.elapsed() < Duration::from_secs(20 * 60),
            "the kill loop ran past its time bound"
        );
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "kill_nine_loses_nothing_acknowledged",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD_ENV, format!("{};{next_step}", dir.path().display()))
        .env_remove("DISKVEC_FAILPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let failpoint = (round % 4 == 3).then(|| FAILPOINTS[(round / 4) % FAILPOINTS.len()]);
        if let Some(f) = failpoint {
            cmd.env("DISKVEC_FAILPOINT", f);
            failpoint_rounds += 1;
        }
        let mut child = cmd.spawn().unwrap();
        let acked = Arc::new(AtomicUsize::new(usize::MAX));
        let reader = {
            let acked = Arc::clone(&acked);
            let stdout = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(i) = line.strip_prefix("ack ") {
                        acked.store(i.parse().unwrap(), Ordering::SeqCst);
                    }
                }
            })
        };
        // A failpoint round runs until the child aborts itself (bounded anyway).
        let wait = match failpoint {
            Some(_) => Duration::from_secs(60),
            None => Duration::from_millis(100 + rng.next() % 2500),
        };
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        reader.join().unwrap();
        assert!(!status.success(), "the child cannot finish on its own");
        if failpoint.is_some() {
            use std::os::unix::process::ExitStatusExt;
            // SIGABRT: it reached the failpoint (SIGKILL: the bound ran out first).
            if status.signal() == Some(libc_sigabrt()) {
                failpoints_hit += 1;
            }
        }
        let last = acked.load(Ordering::SeqCst);
        // Steps acknowledged this round: next_step..=last (none if usize::MAX).
        let acked_until = if last == usize::MAX {
            next_step
        } else {
            last as u64 + 1
        };
        for i in next_step..acked_until {
            apply(&mut model, i);
        }
        let got = contents(dir.path());
        checked_points += model.len();
        next_step = match reconcile(&mut model, acked_until, &got) {
            Ok(next) => next,
            Err(lost) => panic!("round {round} ({failpoint:?}): {lost}"),
        };
        in_flight_applied += usize::from(next_step > acked_until);
    }
    println!(
        "kill test: {rounds} rounds ({failpoint_rounds} with a failpoint set, {failpoints_hit} reached), {next_step} steps acknowledged, \
         {checked_points} acknowledged points checked, lost 0, in-flight step applied {in_flight_applied} times, \
         {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert!(next_step > 0, "no step was ever acknowledged");
    assert!(
        failpoint_rounds == 0 || failpoints_hit > 0,
        "no failpoint was ever reached"
    );
}

/// SIGABRT's number on Linux (what `std::process::abort` raises).
fn libc_sigabrt() -> i32 {
    6
}
