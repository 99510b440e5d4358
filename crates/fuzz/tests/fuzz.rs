//! The stable fuzz loop: each target replays its regression inputs, then runs mutations of
//! its seeds for `DISKVEC_FUZZ_SECONDS` (default 8) seconds. A panicking input is written
//! under `target/fuzz-crashes/` and fails the test; copy it into
//! `crates/fuzz/regressions/<target>/` once fixed so it is replayed forever.

use std::path::PathBuf;
use std::time::Duration;

use diskvec_fuzz::{alloc::CountingAlloc, mutate, seeds};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn budget() -> Duration {
    let secs = std::env::var("DISKVEC_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(8.0);
    Duration::from_secs_f64(secs)
}

fn crash_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("fuzz-crashes")
}

fn fuzz(name: &str) {
    // The default hook captures a backtrace (under RUST_BACKTRACE), whose symbolization
    // allocates tens of MiB and would count against a decoder that caught a panic of a
    // dependency; the message and location are enough to find the input's failure.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|info| eprintln!("{info}"))));
    let target = diskvec_fuzz::target(name).expect("a known target");
    let regressions = seeds::regressions(name);
    for (path, bytes) in &regressions {
        if std::panic::catch_unwind(|| target(bytes)).is_err() {
            panic!("{name}: regression input {} panics again", path.display());
        }
    }
    let mut all = seeds::valid(name);
    all.extend(regressions.into_iter().map(|(_, b)| b));
    let rng_seed = std::env::var("DISKVEC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let report = mutate::run(name, target, &all, budget(), rng_seed, &crash_dir());
    println!(
        "fuzz target {name}: {} executions (DISKVEC_FUZZ_SEED={rng_seed})",
        report.executions
    );
    if let Some((file, message)) = report.crash {
        panic!(
            "{name}: input {} panicked: {message}\n(reproduce with DISKVEC_FUZZ_SEED={rng_seed})",
            file.display()
        );
    }
}

#[test]
fn header() {
    fuzz("header");
}

#[test]
fn meta() {
    fuzz("meta");
}

#[test]
fn nav() {
    fuzz("nav");
}

#[test]
fn compact() {
    fuzz("compact");
}

#[test]
fn pq() {
    fuzz("pq");
}

#[test]
fn npy() {
    fuzz("npy");
}

#[test]
fn vecs() {
    fuzz("vecs");
}

#[test]
fn parquet_vectors() {
    fuzz("parquet_vectors");
}

#[test]
fn parquet_neighbors() {
    fuzz("parquet_neighbors");
}

#[test]
fn operation() {
    fuzz("operation");
}

#[test]
fn wal_file() {
    // Resealing leaves a good file as it is, so resealed mutations differ only where mutated.
    let seed = diskvec_fuzz::log_file::wal_file_seed();
    assert_eq!(diskvec_fuzz::log_file::reseal(&seed), seed);
    fuzz("wal_file");
}

#[test]
fn manifest() {
    for seed in diskvec_db::fuzzing::manifest_seeds() {
        assert_eq!(diskvec_fuzz::seal_manifest(&seed), seed);
    }
    fuzz("manifest");
}

#[test]
fn snapshot() {
    fuzz("snapshot");
}

#[test]
fn requests() {
    fuzz("requests");
}

/// Every target has a test above.
#[test]
fn all_targets_are_run() {
    let src = include_str!("fuzz.rs");
    for (name, _) in diskvec_fuzz::TARGETS {
        assert!(src.contains(&format!("fn {name}()")), "no test runs {name}");
    }
}
