//! Crash-point tests: a workload runs against [`CrashStorage`] once per storage operation,
//! dying at that operation; the crashed state must reopen with every acknowledged append and
//! nothing that was never appended. Deliberately broken durability orders ([`Faults`]) must
//! make the same check fail, which shows the check can see what it is meant to.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::storage::CrashStorage;

/// A crash model over a fresh directory (kept while the storage is used).
fn fresh() -> (tempfile::TempDir, CrashStorage) {
    let dir = tempfile::tempdir().unwrap();
    let s = CrashStorage::new(dir.path()).unwrap();
    (dir, s)
}

/// The log's directory in `storage`'s root.
fn wal_dir(storage: &CrashStorage) -> PathBuf {
    storage.root().join("db/wal")
}
const APPENDS: u64 = 24;

/// The body appended as op `op` by the workloads (sizes 0..=52, so records straddle the tiny
/// segment size at varying points).
fn body(op: u64) -> Vec<u8> {
    let len = (op * 37 % 53) as usize;
    (0..len)
        .map(|k| (op as u8).wrapping_mul(31).wrapping_add(k as u8))
        .collect()
}

fn options(sync: SyncMode) -> WalOptions {
    WalOptions {
        segment_bytes: 120,
        sync,
        max_record_bytes: 1024,
    }
}

#[derive(Clone, Copy)]
enum Workload {
    /// `append` in Always mode: acknowledged = returned.
    Always,
    /// `append_nowait` in Interval mode (an interval that never fires), `flush` every third
    /// op: acknowledged = covered by a flush that returned.
    FlushEveryThird,
}

/// Runs the workload until the storage refuses something; returns the last acknowledged op.
fn run(storage: &CrashStorage, workload: Workload, faults: Faults) -> u64 {
    let sync = match workload {
        Workload::Always => SyncMode::Always,
        Workload::FlushEveryThird => SyncMode::Interval(Duration::from_secs(3600)),
    };
    let opened = Wal::open_with(
        Arc::new(storage.clone()),
        &wal_dir(storage),
        options(sync),
        1,
        &mut |_, _| Err("a fresh log has nothing to replay".into()),
        faults,
    );
    let Ok((wal, _)) = opened else { return 0 };
    let mut acked = 0;
    for op in 1..=APPENDS {
        match workload {
            Workload::Always => match wal.append(&body(op)) {
                Ok(got) => {
                    assert_eq!(got, op);
                    acked = op;
                }
                Err(_) => break,
            },
            Workload::FlushEveryThird => {
                if wal.append_nowait(&body(op)).is_err() {
                    break;
                }
                if op % 3 == 0 {
                    if wal.flush().is_err() {
                        break;
                    }
                    acked = op;
                }
            }
        }
    }
    acked
}

/// Reopens a crashed state: ops contiguous from 1, every body one the workload appended as
/// that op, nothing acknowledged missing; then the log must take an append and keep it.
/// Returns whether the reopen cut a torn tail.
fn check(crashed: &CrashStorage, acked: u64) -> Result<bool, String> {
    let storage: Arc<dyn Storage> = Arc::new(crashed.clone());
    let dir = &wal_dir(crashed);
    let mut got = Vec::new();
    let (wal, rec) = Wal::open(
        Arc::clone(&storage),
        dir,
        options(SyncMode::Always),
        1,
        &mut |op, b| {
            got.push((op, b.to_vec()));
            Ok(())
        },
    )
    .map_err(|e| format!("reopen failed: {e}"))?;
    for (i, (op, b)) in got.iter().enumerate() {
        if *op != i as u64 + 1 {
            return Err(format!("replayed op {op} in position {}", i + 1));
        }
        if *op > APPENDS || *b != body(*op) {
            return Err(format!("op {op} replayed a body that was never appended"));
        }
    }
    let n = got.len() as u64;
    if n < acked {
        return Err(format!(
            "lost acknowledged ops: {acked} acknowledged, {n} recovered"
        ));
    }
    if rec.last_op != n {
        return Err(format!("last_op {} but {n} records", rec.last_op));
    }
    let op = wal
        .append(b"after the crash")
        .map_err(|e| format!("append after reopen: {e}"))?;
    if op != n + 1 {
        return Err(format!("append after reopen got op {op}, not {}", n + 1));
    }
    drop(wal);
    let mut last = None;
    let (_, again) = Wal::open(storage, dir, options(SyncMode::Always), 1, &mut |op, b| {
        last = Some((op, b.to_vec()));
        Ok(())
    })
    .map_err(|e| format!("second reopen failed: {e}"))?;
    if again.last_op != n + 1 || last != Some((n + 1, b"after the crash".to_vec())) {
        return Err(format!(
            "the append after the crash was not kept: {again:?}"
        ));
    }
    Ok(rec.torn_tail.is_some())
}

/// What crashing at every point found.
struct Findings {
    failures: Vec<String>,
    /// Reopens that cut a torn tail (so the torn-tail path was exercised).
    torn_tails: usize,
}

/// Crashes the workload at every storage operation (plain crash and torn crashes) and
/// checks each crashed state.
fn crash_at_every_point(workload: Workload, faults: Faults, torn_seeds: u64) -> Findings {
    let (_probe_dir, probe) = fresh();
    let full = run(&probe, workload, faults);
    assert_eq!(full, APPENDS, "the workload must finish without a crash");
    let total = probe.ops();
    assert!(total > 3 * APPENDS, "only {total} storage operations");
    let mut failures = Vec::new();
    let mut torn_tails = 0;
    for point in 0..=total {
        // A crash rewrites the directory, so each way of crashing gets a run of its own.
        for seed in std::iter::once(None).chain((0..torn_seeds).map(Some)) {
            let (_dir, storage) = fresh();
            storage.set_fail_after(point);
            let acked = run(&storage, workload, faults);
            let (how, state) = match seed {
                None => ("plain".to_string(), storage.crash()),
                Some(seed) => (
                    format!("torn seed {seed}"),
                    storage.crash_torn(seed * 1000 + point),
                ),
            };
            match check(&state, acked) {
                Ok(torn) => torn_tails += torn as usize,
                Err(e) => failures.push(format!("crash at op {point}/{total} ({how}): {e}")),
            }
        }
    }
    Findings {
        failures,
        torn_tails,
    }
}

fn files(storage: &CrashStorage) -> usize {
    storage.list(&wal_dir(storage)).unwrap().len()
}

#[test]
fn workload_rotates_files() {
    let (_d, s) = fresh();
    run(&s, Workload::Always, Faults::default());
    assert!(files(&s) >= 5, "{} files", files(&s));
}

#[test]
fn acknowledged_appends_survive_every_crash_point() {
    let found = crash_at_every_point(Workload::Always, Faults::default(), 4);
    assert!(found.failures.is_empty(), "{:#?}", found.failures);
    assert!(found.torn_tails > 20, "{} torn tails", found.torn_tails);
}

#[test]
fn flushed_appends_survive_every_crash_point() {
    let found = crash_at_every_point(Workload::FlushEveryThird, Faults::default(), 4);
    assert!(found.failures.is_empty(), "{:#?}", found.failures);
    assert!(found.torn_tails > 20, "{} torn tails", found.torn_tails);
}

#[test]
fn check_catches_rotation_without_dir_sync() {
    let faults = Faults {
        skip_rotation_dir_sync: true,
        ..Faults::default()
    };
    let failures = crash_at_every_point(Workload::Always, faults, 0).failures;
    assert!(
        failures.iter().any(|f| f.contains("lost acknowledged ops")),
        "{failures:#?}"
    );
}

#[test]
fn check_catches_rotation_without_syncing_the_old_file() {
    let faults = Faults {
        skip_rotation_file_sync: true,
        ..Faults::default()
    };
    // The old file's unsynced records vanish while the new file survives: a hole.
    let failures = crash_at_every_point(Workload::FlushEveryThird, faults, 0).failures;
    assert!(
        failures
            .iter()
            .any(|f| f.contains("but the previous file ends at op")),
        "{failures:#?}"
    );
}

#[test]
fn check_catches_missing_fdatasync() {
    let faults = Faults {
        skip_data_sync: true,
        ..Faults::default()
    };
    let failures = crash_at_every_point(Workload::Always, faults, 0).failures;
    assert!(
        failures.iter().any(|f| f.contains("lost acknowledged ops")),
        "{failures:#?}"
    );
}

#[test]
fn failed_fdatasync_poisons_the_log() {
    let (_d, s) = fresh();
    let (wal, _) = Wal::open(
        Arc::new(s.clone()),
        &wal_dir(&s),
        WalOptions::default(),
        1,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    assert_eq!(wal.append(b"one").unwrap(), 1);
    // The write is allowed, its fdatasync is not.
    s.set_fail_after(s.ops() + 1);
    let err = wal.append(b"two").unwrap_err();
    assert!(
        matches!(
            err,
            WalError::Io {
                action: "fdatasync",
                ..
            }
        ),
        "{err}"
    );
    s.clear_fail_after();
    for e in [
        wal.append(b"three").unwrap_err(),
        wal.append_nowait(b"three").unwrap_err(),
        wal.wait_durable(2).unwrap_err(),
        wal.flush().unwrap_err(),
    ] {
        assert!(matches!(e, WalError::Poisoned(_)), "{e}");
    }
    assert_eq!(wal.durable_op(), 1);
    assert!(wal.close().is_err(), "op 2 was never made durable");
    // Reopening reads back what is there: op 2 was written, never acknowledged.
    let mut n = 0;
    let (_, rec) = Wal::open(
        Arc::new(s.clone()),
        &wal_dir(&s),
        WalOptions::default(),
        1,
        &mut |_, _| {
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!((rec.last_op, n), (2, 2));
}

#[test]
fn failed_write_poisons_the_log() {
    let (_d, s) = fresh();
    let (wal, _) = Wal::open(
        Arc::new(s.clone()),
        &wal_dir(&s),
        WalOptions::default(),
        1,
        &mut |_, _| Ok(()),
    )
    .unwrap();
    s.set_fail_after(s.ops());
    assert!(matches!(
        wal.append_nowait(b"x").unwrap_err(),
        WalError::Io {
            action: "write",
            ..
        }
    ));
    s.clear_fail_after();
    assert!(matches!(
        wal.append(b"y").unwrap_err(),
        WalError::Poisoned(_)
    ));
    assert_eq!(wal.last_op(), 0);
}

#[test]
fn interval_mode_syncs_in_the_background_and_at_close() {
    let (_d, s) = fresh();
    let dir = &wal_dir(&s);
    let opts = WalOptions {
        sync: SyncMode::Interval(Duration::from_millis(5)),
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(Arc::new(s.clone()), dir, opts, 1, &mut |_, _| Ok(())).unwrap();
    let op = wal.append(b"soon durable").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while wal.durable_op() < op {
        assert!(std::time::Instant::now() < deadline, "never synced");
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = dir.join(record::file_name(1));
    assert!(s.durable_len(&first).unwrap() > 16);

    let slow = WalOptions {
        sync: SyncMode::Interval(Duration::from_secs(3600)),
        ..WalOptions::default()
    };
    drop(wal);
    let (wal, _) = Wal::open(Arc::new(s.clone()), dir, slow, 1, &mut |_, _| Ok(())).unwrap();
    let durable_bytes = || -> u64 {
        s.list(dir)
            .unwrap()
            .iter()
            .map(|f| s.durable_len(&dir.join(f)).unwrap())
            .sum()
    };
    let synced = durable_bytes();
    wal.append(b"written, not durable").unwrap();
    assert_eq!(
        durable_bytes(),
        synced,
        "an interval that has not passed syncs nothing"
    );
    wal.close().unwrap();
    let crashed = s.crash();
    let mut n = 0;
    Wal::open(Arc::new(crashed.clone()), dir, slow, 1, &mut |_, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 2, "close makes everything durable");
}
