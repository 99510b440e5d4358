//! A path whose device stops answering (an NVMe-oF path gone while the kernel holds its
//! I/O) ends in an answer, not a hang: a mirrored volume serves the path from its copy
//! after the read deadline and uses it again once it answers; an unmirrored read fails
//! with the path named.

mod common;

use std::time::{Duration, Instant};

use common::{engines, read_all, write_numbered_volume};
use diskvec_io::{Volume, SECTOR};

const DEADLINE: Duration = Duration::from_millis(150);

/// Runs `f` on a thread and fails the test if it has not returned within a minute: a
/// hang is the bug these tests are about, and must not hang the test run with it.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the reads did not return within a minute")
}

fn open(targets: &[std::path::PathBuf], sectors: u64, mirror: bool) -> Volume {
    let mut vol = Volume::open(
        targets,
        2 * SECTOR as u64,
        sectors * SECTOR as u64,
        true,
        mirror,
    )
    .unwrap();
    vol.set_read_deadline(Some(DEADLINE));
    vol
}

#[test]
fn a_stalled_mirrored_path_is_served_from_its_copy_until_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let sectors = 96u64;
    let targets: Vec<_> = (0..3).map(|p| dir.path().join(format!("m{p}"))).collect();
    write_numbered_volume(&targets, 2 * SECTOR as u64, true, sectors);
    for choice in engines() {
        let vol = std::sync::Arc::new(open(&targets, sectors, true));
        let v = vol.clone();
        let (first, second, timeouts_after_first, stalled) = within_a_minute(move || {
            let mut eng = v.engine(choice, 8, SECTOR, 4).unwrap();
            v.inject_stall(1, true);
            let first = read_all(&mut eng, sectors);
            let timeouts = v.stats[1].snapshot().timeouts;
            // Stalled: path 1's stripes now go to their copy without waiting again.
            let second = read_all(&mut eng, sectors);
            let stalled = v.stalled_paths();
            (first, second, timeouts, stalled)
        });
        for got in [&first, &second] {
            for (s, r) in got.iter().enumerate() {
                assert_eq!(r, &Ok(s as u64), "{choice:?}: sector {s}");
            }
        }
        assert!(
            timeouts_after_first >= 1,
            "{choice:?}: no read was given up on"
        );
        assert_eq!(
            vol.stats[1].snapshot().timeouts,
            timeouts_after_first,
            "{choice:?}: the stalled path was waited on again"
        );
        assert_eq!(stalled, vec![1], "{choice:?}");
        assert!(vol.failed_paths().is_empty(), "a stall is not a failure");

        // The device answers again: its late reads land (and are dropped), the path is used.
        let v = vol.clone();
        let (third, stalled, reads_before, reads_after) = within_a_minute(move || {
            let mut eng = v.engine(choice, 8, SECTOR, 4).unwrap();
            v.inject_stall(1, false);
            let reads_before = v.stats[1].snapshot().reads;
            let third = read_all(&mut eng, sectors);
            (
                third,
                v.stalled_paths(),
                reads_before,
                v.stats[1].snapshot().reads,
            )
        });
        assert!(third.iter().enumerate().all(|(s, r)| r == &Ok(s as u64)));
        assert!(stalled.is_empty(), "{choice:?}: still stalled: {stalled:?}");
        assert!(
            reads_after > reads_before,
            "{choice:?}: path 1 not used again"
        );
    }
}

#[test]
fn an_unmirrored_stalled_path_fails_its_reads_with_its_name_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let sectors = 48u64;
    let targets: Vec<_> = (0..2).map(|p| dir.path().join(format!("u{p}"))).collect();
    write_numbered_volume(&targets, 2 * SECTOR as u64, false, sectors);
    for choice in engines() {
        let vol = std::sync::Arc::new(open(&targets, sectors, false));
        let v = vol.clone();
        let (got, took) = within_a_minute(move || {
            let mut eng = v.engine(choice, 8, SECTOR, 4).unwrap();
            v.inject_stall(1, true);
            let start = Instant::now();
            let got = read_all(&mut eng, sectors);
            v.inject_stall(1, false);
            (got, start.elapsed())
        });
        // Stripes of two sectors alternate between the paths: sectors 2-3, 6-7, ... are on
        // path 1.
        for (s, r) in got.iter().enumerate() {
            if (s / 2) % 2 == 1 {
                let e = r.as_ref().expect_err("a read of the stalled path answered");
                assert!(e.contains("u1") && e.contains("no answer"), "{e}");
            } else {
                assert_eq!(r, &Ok(s as u64), "{choice:?}: sector {s}");
            }
        }
        assert!(
            took >= DEADLINE,
            "{choice:?}: failed before the deadline ({took:?})"
        );
        assert!(vol.stats[1].snapshot().timeouts >= 1);
    }
}
