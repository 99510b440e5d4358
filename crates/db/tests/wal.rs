//! The write-ahead log on the real file system: replay, torn tails, corruption, group commit,
//! truncation. (Crash-point tests against the simulated storage are unit tests in
//! `src/wal/tests.rs`, next to the fault switches they flip.)

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use diskvec_db::storage::{FsStorage, Storage};
use diskvec_db::wal::{Recovered, SyncMode, Wal, WalError, WalOptions};
use rand::{Rng, SeedableRng};

fn fs() -> Arc<dyn Storage> {
    Arc::new(FsStorage)
}

/// A temporary directory on the target's disk (not a tmpfs), so fdatasync costs what it does
/// in production: the group-commit test depends on syncs taking time.
fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn small(segment_bytes: u64) -> WalOptions {
    WalOptions {
        segment_bytes,
        // Only at flush and close: these tests are about content, not latency.
        sync: SyncMode::Interval(Duration::from_secs(3600)),
        max_record_bytes: 1 << 20,
    }
}

/// Records as (op, body).
type Records = Vec<(u64, Vec<u8>)>;

/// Opens and collects what is replayed.
fn open(dir: &Path, options: WalOptions, from: u64) -> Result<(Wal, Recovered, Records), WalError> {
    let mut got = Vec::new();
    let (wal, rec) = Wal::open(fs(), dir, options, from, &mut |op, body| {
        got.push((op, body.to_vec()));
        Ok(())
    })?;
    Ok((wal, rec, got))
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn random_bodies(n: usize, max_len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let len = rng.random_range(0..=max_len);
            (0..len).map(|_| rng.random()).collect()
        })
        .collect()
}

/// Writes `bodies` as ops 1.. and closes the log.
fn write_log(dir: &Path, options: WalOptions, bodies: &[Vec<u8>]) {
    let (wal, rec, _) = open(dir, options, 1).unwrap();
    assert_eq!(rec.last_op, 0);
    for (i, b) in bodies.iter().enumerate() {
        assert_eq!(wal.append(b).unwrap(), i as u64 + 1);
    }
    wal.close().unwrap();
}

#[test]
fn round_trip_across_files_from_the_start_and_from_the_middle() {
    let tmp = tempdir();
    let dir = tmp.path().join("wal");
    let bodies = random_bodies(400, 700, 1);
    write_log(&dir, small(8 << 10), &bodies);
    let files = log_files(&dir).len();
    assert!(files >= 5, "{files} files");

    let (wal, rec, got) = open(&dir, small(8 << 10), 1).unwrap();
    assert_eq!(rec.last_op, 400);
    assert_eq!(rec.replayed, 400);
    assert_eq!(rec.files, files);
    assert_eq!(rec.torn_tail, None);
    let want: Records = (1..).zip(bodies.iter().cloned()).collect();
    assert_eq!(got, want);
    let stats = wal.stats();
    assert_eq!(
        (stats.first_op, stats.last_op, stats.files),
        (1, 400, files)
    );
    let on_disk: u64 = log_files(&dir)
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(stats.bytes, on_disk);
    drop(wal);

    for from in [2, 199, 200, 400, 401] {
        let (wal, rec, got) = open(&dir, small(8 << 10), from).unwrap();
        assert_eq!(rec.replayed, 401 - from, "from {from}");
        assert_eq!(got[..], want[from as usize - 1..], "from {from}");
        assert_eq!(wal.last_op(), 400);
    }

    let (wal, _, _) = open(&dir, small(8 << 10), 401).unwrap();
    assert_eq!(wal.append(b"next").unwrap(), 401);
    wal.close().unwrap();
    let (_, _, got) = open(&dir, small(8 << 10), 401).unwrap();
    assert_eq!(got, vec![(401, b"next".to_vec())]);

    let err = open(&dir, small(8 << 10), 403).unwrap_err().to_string();
    assert!(err.contains("log ends at op 401"), "{err}");
}

#[test]
fn empty_directory_opens_at_op_zero_or_at_from() {
    let tmp = tempdir();
    let (wal, rec, got) = open(&tmp.path().join("a/b/wal"), small(1 << 20), 1).unwrap();
    assert_eq!(
        (rec.last_op, rec.replayed, rec.files, got.len()),
        (0, 0, 0, 0)
    );
    assert_eq!(wal.append(b"first").unwrap(), 1);
    drop(wal);

    // The caller's state already holds ops below 10: numbering must not go back to 1.
    let dir = tmp.path().join("fresh");
    let (wal, rec, _) = open(&dir, small(1 << 20), 10).unwrap();
    assert_eq!(rec.last_op, 9);
    assert_eq!(wal.append(b"x").unwrap(), 10);
    drop(wal);
    let err = open(&dir, small(1 << 20), 1).unwrap_err().to_string();
    assert!(
        err.contains("truncated while the caller still needs them"),
        "{err}"
    );
}

#[test]
fn apply_error_aborts_open() {
    let tmp = tempdir();
    write_log(tmp.path(), small(1 << 20), &random_bodies(5, 10, 2));
    let err = Wal::open(fs(), tmp.path(), small(1 << 20), 1, &mut |op, _| {
        if op == 3 {
            Err("no room".into())
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(matches!(err, WalError::Apply { op: 3, .. }), "{err}");
}

#[test]
fn torn_tail_at_every_cut_of_the_last_record() {
    let tmp = tempdir();
    let orig = tmp.path().join("orig");
    let bodies = random_bodies(9, 60, 3);
    write_log(&orig, small(200), &bodies);
    let files = log_files(&orig);
    assert!(files.len() >= 2, "the last file should not be the only one");
    let last = files.last().unwrap();
    let full = fs::read(last).unwrap();
    let last_len = 16 + bodies[8].len();
    let record_start = full.len() - last_len;

    for cut in record_start + 1..full.len() {
        let dir = tmp.path().join(format!("cut{cut}"));
        fs::create_dir(&dir).unwrap();
        for f in &files {
            fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
        }
        let victim = dir.join(last.file_name().unwrap());
        fs::OpenOptions::new()
            .write(true)
            .open(&victim)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();

        let (wal, rec, got) = open(&dir, small(200), 1).unwrap();
        assert_eq!(got.len(), 8, "cut at {cut}");
        assert_eq!(got[7], (8, bodies[7].clone()));
        assert_eq!(rec.last_op, 8);
        let torn = rec.torn_tail.expect("a torn tail");
        assert_eq!(torn.file, victim);
        assert_eq!(torn.offset, record_start as u64);
        assert_eq!(torn.bytes_cut, (cut - record_start) as u64);
        assert_eq!(fs::metadata(&victim).unwrap().len(), record_start as u64);

        assert_eq!(wal.append(b"replacement").unwrap(), 9);
        wal.close().unwrap();
        let (_, rec, got) = open(&dir, small(200), 1).unwrap();
        assert_eq!(rec.torn_tail, None);
        assert_eq!(got.len(), 9);
        assert_eq!(got[8], (9, b"replacement".to_vec()));
    }

    // Cut exactly at a record boundary: nothing torn, the last record is simply not there.
    let dir = tmp.path().join("boundary");
    fs::create_dir(&dir).unwrap();
    for f in &files {
        fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let victim = dir.join(last.file_name().unwrap());
    let f = fs::OpenOptions::new().write(true).open(&victim).unwrap();
    f.set_len(record_start as u64).unwrap();
    let (_, rec, _) = open(&dir, small(200), 1).unwrap();
    assert_eq!((rec.last_op, rec.torn_tail), (8, None));
}

#[test]
fn zeros_after_the_last_record_are_a_torn_tail() {
    // What a crash leaves when a file's size reached the disk before its data.
    let tmp = tempdir();
    write_log(tmp.path(), small(1 << 20), &random_bodies(4, 30, 4));
    let last = log_files(tmp.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(len + 4096)
        .unwrap();
    let (wal, rec, got) = open(tmp.path(), small(1 << 20), 1).unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(rec.torn_tail.unwrap().bytes_cut, 4096);
    assert_eq!(wal.append(b"5").unwrap(), 5);
}

/// Byte offsets of the records in a log file.
fn record_offsets(data: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    let mut pos = 16;
    while pos < data.len() {
        v.push(pos);
        pos += 16 + u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
    }
    v
}

/// A copy of `files` in a new directory, with `edit` applied to the file named `target`.
fn copy_with(
    tmp: &Path,
    name: &str,
    files: &[PathBuf],
    target: &Path,
    edit: impl Fn(&mut Vec<u8>),
) -> (PathBuf, PathBuf) {
    let dir = tmp.join(name);
    fs::create_dir(&dir).unwrap();
    for f in files {
        let mut data = fs::read(f).unwrap();
        if f == target {
            edit(&mut data);
        }
        fs::write(dir.join(f.file_name().unwrap()), data).unwrap();
    }
    (dir.clone(), dir.join(target.file_name().unwrap()))
}

fn expect_corrupt(dir: &Path, file: &Path, offset: usize, what: &str) {
    let err = match open(dir, small(400), 1) {
        Ok(_) => panic!("{}: opened despite damage at byte {offset}", dir.display()),
        Err(e) => e,
    };
    let msg = err.to_string();
    match &err {
        WalError::Corrupt {
            file: f, offset: o, ..
        } => {
            assert_eq!((f.as_path(), *o), (file, offset as u64), "{msg}");
        }
        other => panic!("not a corruption error: {other}"),
    }
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("at byte {offset}")), "{msg}");
    assert!(msg.contains(what), "{msg}");
}

#[test]
fn corruption_in_the_middle_is_refused_naming_file_and_offset() {
    let tmp = tempdir();
    let orig = tmp.path().join("orig");
    write_log(&orig, small(400), &random_bodies(30, 40, 5));
    let files = log_files(&orig);
    assert!(files.len() >= 3);
    let first = fs::read(&files[0]).unwrap();

    // Any byte of any record of a non-last file: header fields and body alike.
    for (i, &at) in record_offsets(&first).iter().enumerate() {
        let len = 16 + u32::from_le_bytes(first[at..at + 4].try_into().unwrap()) as usize;
        let mut bytes = vec![i % 16, 4, 9, 16 + i % (len - 15)];
        bytes.sort();
        bytes.dedup();
        for byte in bytes {
            let flip = (at + byte).min(at + len - 1);
            let (dir, file) = copy_with(
                tmp.path(),
                &format!("f{i}-{byte}"),
                &files,
                &files[0],
                |d| d[flip] ^= 0x40,
            );
            expect_corrupt(&dir, &file, at, "");
        }
    }

    // An early record of the last file, with good records after it: not a torn tail.
    let last = files.last().unwrap();
    let data = fs::read(last).unwrap();
    let offs = record_offsets(&data);
    assert!(offs.len() >= 3);
    let (dir, file) = copy_with(tmp.path(), "last", &files, last, |d| d[offs[1] + 20] ^= 1);
    expect_corrupt(&dir, &file, offs[1], "crc mismatch");
    expect_corrupt(&dir, &file, offs[1], "yet a valid record");

    // A record missing from the middle: the ops say so.
    let (dir, file) = copy_with(tmp.path(), "gap", &files, &files[0], |d| {
        let o = record_offsets(d);
        d.drain(o[1]..o[2]);
    });
    expect_corrupt(&dir, &file, record_offsets(&first)[1], "op 3 follows op 1");

    // A length no record can have.
    let (dir, file) = copy_with(tmp.path(), "len", &files, &files[1], |d| {
        d[16..20].copy_from_slice(&4_000_000_000u32.to_le_bytes())
    });
    expect_corrupt(&dir, &file, 16, "length 4000000000 beyond max record size");

    // A damaged header of a file that is not the last.
    let (dir, file) = copy_with(tmp.path(), "hdr", &files, &files[0], |d| d[9] ^= 1);
    expect_corrupt(&dir, &file, 0, "header crc mismatch");

    // A whole file missing from the middle.
    let dir = tmp.path().join("hole");
    fs::create_dir(&dir).unwrap();
    for f in files.iter().filter(|f| *f != &files[1]) {
        fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let file = dir.join(files[2].file_name().unwrap());
    expect_corrupt(&dir, &file, 0, "but the previous file ends at op");
}

#[test]
fn interrupted_file_creation_is_removed() {
    let tmp = tempdir();
    write_log(tmp.path(), small(1 << 20), &random_bodies(3, 30, 6));
    // A crash after creating the next file but before its header was durable.
    let torn = tmp.path().join("wal-00000000000000000004.log");
    fs::write(&torn, b"DVWAL\0").unwrap();
    let (wal, rec, got) = open(tmp.path(), small(1 << 20), 1).unwrap();
    assert_eq!((rec.last_op, rec.files, got.len()), (3, 1, 3));
    assert!(!torn.exists());
    assert_eq!(wal.append(b"4").unwrap(), 4);
    drop(wal);
    // A longer damaged header could hold records: not something to delete silently.
    let bad = tmp.path().join("wal-00000000000000000005.log");
    fs::write(&bad, [0xAAu8; 40]).unwrap();
    let err = open(tmp.path(), small(1 << 20), 1).unwrap_err().to_string();
    assert!(
        err.contains("wal-00000000000000000005.log: at byte 0: bad magic"),
        "{err}"
    );
}

#[test]
fn oversized_records_are_refused_with_nothing_written() {
    let tmp = tempdir();
    let opts = WalOptions {
        max_record_bytes: 100,
        ..small(1 << 20)
    };
    let (wal, _, _) = open(tmp.path(), opts, 1).unwrap();
    let before = wal.stats().bytes;
    let err = wal.append(&[7u8; 101]).unwrap_err();
    assert!(
        matches!(err, WalError::RecordTooLarge { len: 101, max: 100 }),
        "{err}"
    );
    assert_eq!((wal.last_op(), wal.stats().bytes), (0, before));
    assert_eq!(wal.append(&[7u8; 100]).unwrap(), 1);
    drop(wal);
    // Replay holds records to the same limit.
    let tighter = WalOptions {
        max_record_bytes: 99,
        ..opts
    };
    let err = open(tmp.path(), tighter, 1).unwrap_err().to_string();
    assert!(
        err.contains("length 100 beyond max record size 99"),
        "{err}"
    );
    assert_eq!(
        open(tmp.path(), opts, 1).unwrap().2.len(),
        1,
        "nothing was cut"
    );
}

#[test]
fn group_commit_shares_fdatasyncs_between_threads() {
    const THREADS: u64 = 8;
    const EACH: u64 = 200;
    let tmp = tempdir();
    let opts = WalOptions {
        sync: SyncMode::Always,
        ..WalOptions::default()
    };
    let (wal, _, _) = open(tmp.path(), opts, 1).unwrap();
    let wal = Arc::new(wal);
    let syncs_at_open = wal.stats().syncs;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                (0..EACH)
                    .map(|i| {
                        let body = format!("{t}:{i}").into_bytes();
                        let op = wal.append(&body).unwrap();
                        // Returned means durable: never ahead of what the log says.
                        assert!(wal.durable_op() >= op);
                        (op, body)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut written: Records = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    written.sort();
    let ops: Vec<u64> = written.iter().map(|w| w.0).collect();
    assert_eq!(ops, (1..=THREADS * EACH).collect::<Vec<_>>());

    let stats = wal.stats();
    let syncs = stats.syncs - syncs_at_open;
    assert_eq!(stats.appends, THREADS * EACH);
    assert!(
        syncs < THREADS * EACH,
        "{syncs} fdatasyncs for {} appends: no sharing",
        THREADS * EACH
    );
    eprintln!(
        "group commit: {} appends, {syncs} fdatasyncs",
        THREADS * EACH
    );
    drop(wal);
    let (_, _, got) = open(tmp.path(), opts, 1).unwrap();
    assert_eq!(got, written);
}

#[test]
fn append_nowait_then_wait_durable() {
    let tmp = tempdir();
    let opts = WalOptions {
        sync: SyncMode::Always,
        ..WalOptions::default()
    };
    let (wal, _, _) = open(tmp.path(), opts, 1).unwrap();
    let a = wal.append_nowait(b"a").unwrap();
    let b = wal.append_nowait(b"b").unwrap();
    assert_eq!((a, b, wal.durable_op()), (1, 2, 0));
    wal.wait_durable(b).unwrap();
    assert_eq!(wal.durable_op(), 2);
    let err = wal.wait_durable(3).unwrap_err().to_string();
    assert!(err.contains("never appended"), "{err}");
    wal.flush().unwrap();
}

#[test]
fn truncate_below_removes_only_whole_files_below() {
    let tmp = tempdir();
    let bodies = random_bodies(60, 50, 7);
    write_log(tmp.path(), small(300), &bodies);
    let (wal, _, _) = open(tmp.path(), small(300), 1).unwrap();
    let before = log_files(tmp.path());
    let firsts: Vec<u64> = before
        .iter()
        .map(|p| {
            p.file_stem().unwrap().to_str().unwrap()[4..]
                .parse()
                .unwrap()
        })
        .collect();
    assert!(firsts.len() >= 4);

    // An op inside the third file: the first two go, the third (holding it) stays.
    let op = firsts[2] + 1;
    wal.truncate_below(op).unwrap();
    assert_eq!(log_files(tmp.path()), before[2..]);
    assert_eq!(wal.stats().first_op, firsts[2]);
    assert_eq!(wal.stats().files, before.len() - 2);
    // The first op of a file: every file before it goes.
    wal.truncate_below(firsts[3]).unwrap();
    assert_eq!(log_files(tmp.path()), before[3..]);
    drop(wal);

    let from = firsts[3] + 2;
    let (_, rec, got) = open(tmp.path(), small(300), from).unwrap();
    assert_eq!(rec.last_op, 60);
    assert_eq!(got.first().unwrap().0, from);
    assert_eq!(got.len() as u64, 61 - from);
    let err = open(tmp.path(), small(300), 1).unwrap_err().to_string();
    assert!(
        err.contains(&format!("log starts at op {}", firsts[3])),
        "{err}"
    );

    // Never the file being written, even when every op is below.
    let (wal, _, _) = open(tmp.path(), small(300), firsts[3]).unwrap();
    wal.truncate_below(u64::MAX).unwrap();
    let left = log_files(tmp.path());
    assert_eq!(left.len(), 1);
    assert_eq!(wal.stats().files, 1);
    assert_eq!(wal.append(b"more").unwrap(), 61);
    drop(wal);
    let last_first: u64 = left[0].file_stem().unwrap().to_str().unwrap()[4..]
        .parse()
        .unwrap();
    let (_, rec, _) = open(tmp.path(), small(300), last_first).unwrap();
    assert_eq!(rec.last_op, 61);
}
