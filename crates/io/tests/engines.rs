//! Both engines read the right bytes, keep several reads in flight, and report errors
//! (past end of file, bad alignment, no free slot) instead of panicking.

use std::io::Write;
use std::sync::Arc;

mod common;

use common::{engines, kind_of, read_all, write_numbered_volume};
use diskvec_io::{open_engine, open_for_reading, EngineChoice, ReadDone, ReadEngine, SECTOR};

fn file_with_sectors(n: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let mut f = std::fs::File::create(&path).unwrap();
    for s in 0..n {
        let mut sector = vec![0u8; SECTOR];
        sector[..8].copy_from_slice(&(s as u64).to_le_bytes());
        sector[SECTOR - 1] = (s % 251) as u8;
        f.write_all(&sector).unwrap();
    }
    (dir, path)
}

#[test]
fn reads_land_in_their_slots_with_many_in_flight() {
    let (_dir, path) = file_with_sectors(64);
    for choice in engines() {
        let file = Arc::new(open_for_reading(&path, true).unwrap());
        let mut eng = open_engine(file, choice, 16, 2 * SECTOR).unwrap();
        assert_eq!(eng.kind(), kind_of(choice));
        let mut done: Vec<ReadDone> = Vec::new();
        let mut seen = 0;
        let order: Vec<u64> = (0..63).map(|i| (i * 37) % 63).collect();
        let mut next = 0;
        while seen < order.len() {
            while next < order.len() && eng.free_slots() > 0 {
                let s = order[next];
                eng.submit(s * SECTOR as u64, 2 * SECTOR, s).unwrap();
                next += 1;
            }
            done.clear();
            eng.complete(1, &mut done).unwrap();
            for d in &done {
                d.result.as_ref().unwrap();
                let buf = eng.buffer(d.slot);
                let first = u64::from_le_bytes(buf[..8].try_into().unwrap());
                assert_eq!(first, d.tag, "{:?}", eng.kind());
                let second = u64::from_le_bytes(buf[SECTOR..SECTOR + 8].try_into().unwrap());
                assert_eq!(second, d.tag + 1);
                assert_eq!(buf[SECTOR - 1], (d.tag % 251) as u8);
                seen += 1;
            }
            for d in &done {
                eng.release(d.slot);
            }
        }
        let stats = eng.stats();
        assert_eq!(stats.reads, 63);
        assert_eq!(stats.bytes, 63 * 2 * SECTOR as u64);
        assert!(
            stats.max_in_flight > 1,
            "{:?} kept one read in flight",
            eng.kind()
        );
    }
}

#[test]
fn read_past_end_is_an_error_naming_the_file() {
    let (_dir, path) = file_with_sectors(4);
    for choice in engines() {
        let file = Arc::new(open_for_reading(&path, true).unwrap());
        let mut eng = open_engine(file, choice, 4, SECTOR).unwrap();
        assert_eq!(eng.kind(), kind_of(choice));
        eng.submit(10 * SECTOR as u64, SECTOR, 1).unwrap();
        let mut done = Vec::new();
        eng.complete(1, &mut done).unwrap();
        let err = done[0].result.as_ref().unwrap_err().to_string();
        assert!(err.contains("data"), "{err}");
    }
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let (_dir, path) = file_with_sectors(4);
    let file = Arc::new(open_for_reading(&path, true).unwrap());
    assert!(open_engine(file.clone(), EngineChoice::Auto, 0, SECTOR).is_err());
    assert!(open_engine(file.clone(), EngineChoice::Auto, 2, 100).is_err());
    let mut eng = open_engine(file, EngineChoice::Auto, 1, SECTOR).unwrap();
    assert!(
        eng.submit(3, SECTOR, 0).is_err(),
        "unaligned offset accepted"
    );
    assert!(
        eng.submit(0, 2 * SECTOR, 0).is_err(),
        "oversized read accepted"
    );
    eng.submit(0, SECTOR, 0).unwrap();
    assert!(
        eng.submit(0, SECTOR, 0).is_err(),
        "read without a free slot accepted"
    );
}

#[test]
fn auto_runs_io_uring_wherever_it_is_available() {
    let (_dir, path) = file_with_sectors(2);
    let file = Arc::new(open_for_reading(&path, true).unwrap());
    let auto = open_engine(file, EngineChoice::Auto, 4, SECTOR).unwrap();
    if diskvec_io::uring_available() {
        assert_eq!(auto.kind(), diskvec_io::EngineKind::Uring);
    } else {
        assert!(std::env::var_os("DISKVEC_REQUIRE_URING").is_none());
    }
}

#[test]
fn uring_engine_is_available_or_fallback_is_explicit() {
    let (_dir, path) = file_with_sectors(2);
    let file = Arc::new(open_for_reading(&path, true).unwrap());
    match open_engine(file.clone(), EngineChoice::Uring, 4, SECTOR) {
        Ok(e) => assert_eq!(e.kind(), diskvec_io::EngineKind::Uring),
        Err(e) => {
            // Where io_uring is refused, asking for it by name must fail, and Auto must fall back.
            assert!(!e.to_string().is_empty());
            let auto = open_engine(file, EngineChoice::Auto, 4, SECTOR).unwrap();
            assert_eq!(auto.kind(), diskvec_io::EngineKind::Pread);
        }
    }
}

#[test]
fn reads_work_on_tmpfs_with_or_without_o_direct() {
    let shm = std::path::Path::new("/dev/shm");
    let is_tmpfs = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some("/dev/shm") && l.contains("tmpfs"))
        })
        .unwrap_or(false);
    if !is_tmpfs {
        eprintln!("skipping: /dev/shm is not tmpfs here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, vec![3u8; 2 * SECTOR]).unwrap();
    // Kernels before 6.6 refuse O_DIRECT on tmpfs (we then read buffered); later ones accept it.
    let file = open_for_reading(&path, true).unwrap();
    eprintln!("tmpfs O_DIRECT accepted: {}", file.direct);
    let mut eng = open_engine(Arc::new(file), EngineChoice::Auto, 2, SECTOR).unwrap();
    eng.submit(SECTOR as u64, SECTOR, 9).unwrap();
    let mut done = Vec::new();
    eng.complete(1, &mut done).unwrap();
    assert!(done[0].result.is_ok());
    assert!(eng.buffer(done[0].slot).iter().all(|&b| b == 3));
}

/// A logical file of `sectors` sectors, each stamped with its logical number, striped
/// over `paths` files the way the index writer lays them out.
fn striped_files(
    dir: &std::path::Path,
    paths: usize,
    stripe: u64,
    sectors: u64,
) -> Vec<std::path::PathBuf> {
    let map = diskvec_io::StripeMap::new(paths, stripe).unwrap();
    let names: Vec<_> = (0..paths).map(|p| dir.join(format!("part{p}"))).collect();
    let mut parts: Vec<Vec<u8>> = vec![Vec::new(); paths];
    for s in 0..sectors {
        let (p, phys) = map.locate(s * SECTOR as u64);
        let part = &mut parts[p];
        assert_eq!(part.len() as u64, phys, "stripes are appended in order");
        let mut sector = vec![0u8; SECTOR];
        sector[..8].copy_from_slice(&s.to_le_bytes());
        sector[SECTOR - 8..].copy_from_slice(&(!s).to_le_bytes());
        part.extend_from_slice(&sector);
    }
    for (n, part) in names.iter().zip(parts) {
        std::fs::write(n, part).unwrap();
    }
    names
}

#[test]
fn striped_volume_reassembles_reads_that_cross_stripes_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let sectors = 96u64;
    let paths = striped_files(dir.path(), 3, 2 * SECTOR as u64, sectors);
    for choice in engines() {
        let vol = diskvec_io::Volume::open(
            &paths,
            2 * SECTOR as u64,
            sectors * SECTOR as u64,
            true,
            false,
        )
        .unwrap();
        // Reads of 3 sectors starting at every sector cross at least one stripe boundary.
        let mut eng = vol.engine(choice, 8, 3 * SECTOR, 2).unwrap();
        assert_eq!(eng.kind(), kind_of(choice));
        let mut next = 0u64;
        let mut seen = 0u64;
        let mut done = Vec::new();
        while seen < sectors - 2 {
            while next < sectors - 2 && eng.free_slots() > 0 {
                eng.submit(next * SECTOR as u64, 3 * SECTOR, next).unwrap();
                next += 1;
            }
            done.clear();
            eng.complete(1, &mut done).unwrap();
            for d in &done {
                d.result.as_ref().unwrap();
                let buf = eng.buffer(d.slot);
                for i in 0..3u64 {
                    let s = &buf[i as usize * SECTOR..(i as usize + 1) * SECTOR];
                    assert_eq!(
                        u64::from_le_bytes(s[..8].try_into().unwrap()),
                        d.tag + i,
                        "{choice:?}"
                    );
                    assert_eq!(
                        u64::from_le_bytes(s[SECTOR - 8..].try_into().unwrap()),
                        !(d.tag + i)
                    );
                }
                seen += 1;
            }
            for d in &done {
                eng.release(d.slot);
            }
        }
        let snaps: Vec<_> = vol.stats.iter().map(|s| s.snapshot()).collect();
        assert!(
            snaps.iter().all(|s| s.reads > 0),
            "every path served reads: {snaps:?}"
        );
        // The cap of 2 per path holds, and reads beyond it waited in the queue.
        assert!(snaps.iter().all(|s| s.max_in_flight <= 2), "{snaps:?}");
        assert!(snaps.iter().map(|s| s.waited).sum::<u64>() > 0, "{snaps:?}");
    }
}

#[test]
fn volume_refuses_a_path_file_of_the_wrong_size_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = striped_files(dir.path(), 2, SECTOR as u64, 10);
    let err = diskvec_io::Volume::open(&paths, SECTOR as u64, 12 * SECTOR as u64, true, false)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("part0") && err.contains("expects"), "{err}");
    std::fs::remove_file(&paths[1]).unwrap();
    let err = diskvec_io::Volume::open(&paths, SECTOR as u64, 10 * SECTOR as u64, true, false)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("part1"), "{err}");
}

#[test]
fn an_emulated_path_is_never_faster_than_its_caps() {
    let dir = tempfile::tempdir().unwrap();
    let sectors = 200u64;
    let paths = striped_files(dir.path(), 1, SECTOR as u64, sectors);
    let mut vol =
        diskvec_io::Volume::open(&paths, SECTOR as u64, sectors * SECTOR as u64, true, false)
            .unwrap();
    let spec: diskvec_io::PathEmulation = "latency_us=300,iops=4000".parse().unwrap();
    vol.set_emulation(&[spec]).unwrap();
    assert!(
        vol.set_emulation(&[spec, spec]).is_err(),
        "two specs for one path accepted"
    );
    let mut eng = vol.engine(EngineChoice::Auto, 16, SECTOR, 8).unwrap();
    let start = std::time::Instant::now();
    let got = read_all(&mut eng, sectors);
    assert!(
        got.iter().enumerate().all(|(s, r)| r == &Ok(s as u64)),
        "{got:?}"
    );
    // 200 reads at 4,000 IOPS take at least 50 ms, and each at least the added 300 us.
    let elapsed = start.elapsed().as_secs_f64();
    assert!(
        elapsed >= 0.049,
        "200 reads in {elapsed} s beat the 4,000 IOPS cap"
    );
    let snap = vol.stats[0].snapshot();
    assert!(snap.p50_us >= 300.0, "{snap:?}");
    assert!(snap.max_in_flight <= 8, "{snap:?}");
}

#[test]
fn a_mirrored_volume_survives_a_path_failing_mid_stream_and_counts_failovers() {
    let dir = tempfile::tempdir().unwrap();
    let sectors = 120u64;
    let targets: Vec<_> = (0..3).map(|p| dir.path().join(format!("m{p}"))).collect();
    let logical = sectors * SECTOR as u64;
    for mirror in [true, false] {
        write_numbered_volume(&targets, 2 * SECTOR as u64, mirror, sectors);
        for choice in engines() {
            let vol = diskvec_io::Volume::open(&targets, 2 * SECTOR as u64, logical, true, mirror)
                .unwrap();
            let mut eng = vol.engine(choice, 8, SECTOR, 4).unwrap();
            assert_eq!(eng.kind(), kind_of(choice));
            vol.inject_fault(1, 5);
            let got = read_all(&mut eng, sectors);
            let failovers = vol.stats[1].snapshot().failovers;
            if mirror {
                for (s, r) in got.iter().enumerate() {
                    assert_eq!(r, &Ok(s as u64), "{choice:?}: sector {s}");
                }
                assert!(failovers >= 1, "no failover counted");
                assert_eq!(vol.failed_paths(), vec![1]);
            } else {
                let errors: Vec<_> = got.iter().filter_map(|r| r.as_ref().err()).collect();
                assert!(
                    !errors.is_empty(),
                    "an unmirrored failed path went unnoticed"
                );
                assert!(errors.iter().all(|e| e.contains("m1")), "{errors:?}");
                assert_eq!(failovers, 0);
            }
        }
    }
    assert!(diskvec_io::StripedWriter::create(
        &diskvec_io::storage::FsStorage,
        &targets[..1],
        SECTOR as u64,
        true,
        logical
    )
    .is_err());
}

#[test]
fn iobench_measures_reads_and_really_writes_in_a_mix() {
    use diskvec_io::iobench::{prepare_targets, run, BenchSpec};
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<_> = dirs.iter().map(|d| d.path().to_path_buf()).collect();
    let targets = prepare_targets(&paths, 8 << 20, true).unwrap();
    assert!(targets
        .iter()
        .all(|t| std::fs::metadata(t).unwrap().len() == 8 << 20));
    let before: Vec<Vec<u8>> = targets.iter().map(|t| std::fs::read(t).unwrap()).collect();
    let spec = |read_percent| BenchSpec {
        block_bytes: 4096,
        read_percent,
        queue_depth: 4,
        jobs: 2,
        duration: std::time::Duration::from_millis(200),
    };
    let reads = run(&targets, &spec(100)).unwrap();
    assert!(
        reads.iops > 0.0 && reads.p99_us >= reads.p50_us,
        "{reads:?}"
    );
    assert!(
        reads.per_path.iter().all(|p| p.reads > 0),
        "both paths used: {reads:?}"
    );
    let after_reads: Vec<Vec<u8>> = targets.iter().map(|t| std::fs::read(t).unwrap()).collect();
    assert_eq!(before, after_reads, "a read-only run changed the files");
    let mixed = run(&targets, &spec(75)).unwrap();
    assert!(mixed.iops > 0.0);
    let after_mix: Vec<Vec<u8>> = targets.iter().map(|t| std::fs::read(t).unwrap()).collect();
    assert_ne!(before, after_mix, "a 75/25 mix wrote nothing");
    assert!(run(
        &targets,
        &BenchSpec {
            block_bytes: 1000,
            ..spec(100)
        }
    )
    .is_err());
    assert!(run(
        &targets,
        &BenchSpec {
            queue_depth: 0,
            ..spec(100)
        }
    )
    .is_err());
}

#[test]
fn short_reads_are_continued_at_the_right_offset_on_both_engines() {
    // Three sectors on disk; a two-sector read at sector 2 gets one sector back (a short
    // read), continues at sector 3 for the rest, and finds the end of the file there.
    let (_dir, path) = file_with_sectors(3);
    for choice in engines() {
        let file = Arc::new(open_for_reading(&path, true).unwrap());
        let mut eng = open_engine(file, choice, 2, 2 * SECTOR).unwrap();
        assert_eq!(eng.kind(), kind_of(choice));
        eng.submit(2 * SECTOR as u64, 2 * SECTOR, 0).unwrap();
        let mut done = Vec::new();
        eng.complete(1, &mut done).unwrap();
        match &done[0].result {
            Err(diskvec_io::IoError::UnexpectedEof { offset, .. }) => {
                assert_eq!(*offset, 3 * SECTOR as u64, "{choice:?}")
            }
            other => panic!("{choice:?}: expected end of file after a short read, got {other:?}"),
        }
        // The sector that did arrive is in the slot.
        let first = u64::from_le_bytes(eng.buffer(done[0].slot)[..8].try_into().unwrap());
        assert_eq!(first, 2);
        eng.release(done[0].slot);
        assert_eq!(eng.in_flight(), 0);
    }
}

/// Every read of `reads` random sectors ends exactly once, within a time bound; returns
/// how many failed. Successful reads must hold their sector.
fn read_random_bounded(eng: &mut dyn ReadEngine, sectors: u64, reads: u64) -> u64 {
    let start = std::time::Instant::now();
    let mut seen = vec![false; reads as usize];
    let (mut next, mut ended, mut failed) = (0u64, 0u64, 0u64);
    let mut done = Vec::new();
    while ended < reads {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{ended} of {reads} reads ended in 60 s: hung"
        );
        while next < reads && eng.free_slots() > 0 {
            let sector = (next * 7919) % sectors;
            eng.submit(sector * SECTOR as u64, SECTOR, next).unwrap();
            next += 1;
        }
        done.clear();
        eng.complete(1, &mut done).unwrap();
        for d in &done {
            assert!(!seen[d.tag as usize], "read {} reported twice", d.tag);
            seen[d.tag as usize] = true;
            ended += 1;
            match &d.result {
                Ok(()) => {
                    let got = u64::from_le_bytes(eng.buffer(d.slot)[..8].try_into().unwrap());
                    assert_eq!(got, (d.tag * 7919) % sectors);
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        e.contains("injected") || e.contains("no readable copy"),
                        "{e}"
                    );
                    failed += 1;
                }
            }
        }
        for d in &done {
            eng.release(d.slot);
        }
    }
    failed
}

#[test]
fn thousands_of_faults_on_a_volume_end_every_read_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let sectors = 96u64;
    let targets: Vec<_> = (0..3).map(|p| dir.path().join(format!("f{p}"))).collect();
    let logical = sectors * SECTOR as u64;
    for mirror in [false, true] {
        write_numbered_volume(&targets, SECTOR as u64, mirror, sectors);
        for choice in engines() {
            let mut vol =
                diskvec_io::Volume::open(&targets, SECTOR as u64, logical, true, mirror).unwrap();
            // The check the index uses, in miniature: a sector holds its own number.
            vol.set_sector_check(|n, s| u64::from_le_bytes(s[..8].try_into().unwrap()) == n);
            let mut eng = vol.engine(choice, 32, 2 * SECTOR, 4).unwrap();
            assert_eq!(eng.kind(), kind_of(choice));
            vol.inject_intermittent_fault(0, 3);
            if !mirror {
                vol.inject_intermittent_fault(2, 5);
            }
            let failed = read_random_bounded(&mut eng, sectors, 6000);
            let injected = vol.injected_faults();
            if !mirror {
                assert!(injected >= 1000, "{injected} faults");
            }
            // Without a mirror each fault fails its read and nothing else. With one, the
            // first fault fails the path over to its copies, and no read fails.
            if mirror {
                assert_eq!(failed, 0);
                assert!(injected >= 1);
                assert_eq!(vol.failed_paths(), vec![0]);
            } else {
                assert!(failed >= 1, "no fault reached a caller");
                assert!(
                    failed <= injected,
                    "{failed} failed reads from {injected} faults"
                );
            }
            // Faults stop: the same engine reads everything again.
            vol.inject_intermittent_fault(0, 0);
            vol.inject_intermittent_fault(2, 0);
            if !mirror {
                assert_eq!(read_random_bounded(&mut eng, sectors, 500), 0);
            }
        }
    }
}

#[test]
fn a_slot_in_flight_is_neither_shown_nor_released() {
    let (_dir, path) = file_with_sectors(4);
    for choice in engines() {
        let file = Arc::new(open_for_reading(&path, true).unwrap());
        let mut eng = open_engine(file, choice, 1, SECTOR).unwrap();
        let slot = eng.submit(0, SECTOR, 0).unwrap();
        // Releasing a slot whose read is still landing would let the next read reuse a
        // buffer the device writes: it is ignored, so no slot is freed.
        if !cfg!(debug_assertions) {
            eng.release(slot);
            assert_eq!(eng.free_slots(), 0, "{choice:?}");
        }
        let looked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eng.buffer(slot).len()));
        assert!(looked.is_err(), "{choice:?}: an in-flight buffer was shown");
        let mut done = Vec::new();
        eng.complete(1, &mut done).unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(eng.buffer(slot)[..8], 0u64.to_le_bytes());
        eng.release(slot);
        assert_eq!(eng.free_slots(), 1);
    }
}
