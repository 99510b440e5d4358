//! `verify` names every damaged sector: one flipped byte in each 4 KiB sector of a small
//! index in turn (every path file, every mirror copy) is found at its file and offset.

mod common;

use std::path::{Path, PathBuf};

use common::clustered;
use diskvec_index::diskann::{build, verify, BuildParams, DiskIndex, OpenOptions};
use diskvec_index::NoProgress;
use diskvec_io::SECTOR;
use diskvec_vector::Metric;

fn build_small(out: &Path, paths: &[PathBuf], mirror: bool) -> Vec<PathBuf> {
    let (n, dim) = (400, 16);
    let data = clustered(n, dim, 3);
    let ids: Vec<i64> = (0..n as i64).collect();
    let params = BuildParams {
        metric: Metric::L2,
        max_degree: 16,
        build_list: 32,
        pq_bytes: Some(4),
        paths: paths.to_vec(),
        stripe_bytes: 4096,
        mirror,
        entry_points: 8,
        ..Default::default()
    };
    build(&data, dim, &ids, &params, out, &NoProgress).unwrap();
    let idx = DiskIndex::open(out, &OpenOptions::default()).unwrap();
    idx.placement().0
}

fn every_sector_is_named(out: &Path, files: &[PathBuf]) {
    let clean = verify(out, &NoProgress).unwrap();
    assert!(clean.damage.is_empty(), "{:?}", clean.damage);
    let mut flipped = 0;
    for file in files {
        let original = std::fs::read(file).unwrap();
        assert!(original.len() >= SECTOR);
        for (s, at) in (0..original.len()).step_by(SECTOR).enumerate() {
            // A different byte of each sector, the CRC trailer included.
            let offset = at + (s * 997) % SECTOR;
            let mut bad = original.clone();
            bad[offset] ^= 0x01;
            std::fs::write(file, &bad).unwrap();
            let report = verify(out, &NoProgress).unwrap();
            assert_eq!(
                report.damage.len(),
                1,
                "byte {offset} of {}: {:?}",
                file.display(),
                report.damage
            );
            let d = &report.damage[0];
            assert_eq!(&d.file, file);
            assert_eq!(d.offset, Some(at as u64), "{d}");
            flipped += 1;
        }
        std::fs::write(file, &original).unwrap();
    }
    assert!(flipped >= 4);
    assert!(verify(out, &NoProgress).unwrap().damage.is_empty());
}

#[test]
fn verify_names_every_flipped_sector_of_a_single_file_index() {
    let dir = tempfile::tempdir().unwrap();
    let files = build_small(dir.path(), &[], false);
    every_sector_is_named(dir.path(), &files);
}

#[test]
fn verify_names_every_flipped_sector_of_a_mirrored_striped_index() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("ns{i}"))).collect();
    paths.iter().for_each(|p| std::fs::create_dir(p).unwrap());
    let out = dir.path().join("idx");
    let files = build_small(&out, &paths, true);
    every_sector_is_named(&out, &files);

    // A missing or short path file is named as a whole.
    let saved = std::fs::read(&files[2]).unwrap();
    std::fs::write(&files[2], &saved[..SECTOR]).unwrap();
    let report = verify(&out, &NoProgress).unwrap();
    assert!(report
        .damage
        .iter()
        .any(|d| d.file == files[2] && d.offset.is_none() && d.problem.contains("size")));
    std::fs::remove_file(&files[2]).unwrap();
    let report = verify(&out, &NoProgress).unwrap();
    assert!(report
        .damage
        .iter()
        .any(|d| d.file == files[2] && d.offset.is_none()));
}
