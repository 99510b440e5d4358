#![allow(dead_code)] // each test binary uses its own subset of these helpers
//! Running the `diskvec` binary from the CLI's integration tests.

use std::process::{Command, Output};

pub fn diskvec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_diskvec"))
        .args(args)
        .output()
        .expect("run diskvec")
}

/// Runs `diskvec`, asserts it succeeded, and returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = diskvec(args);
    assert!(
        out.status.success(),
        "diskvec {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `diskvec`, asserts it failed without a panic, and returns its stderr.
pub fn fails(args: &[&str]) -> String {
    let out = diskvec(args);
    assert!(!out.status.success(), "diskvec {args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Writes a small synthetic dataset (`n` x 16, 20 queries, exact top-`k`) to `out`.
pub fn synth(out: &std::path::Path, n: usize, k: usize) {
    ok(&[
        "dataset",
        "synth",
        "--n",
        &n.to_string(),
        "--dim",
        "16",
        "--queries",
        "20",
        "--clusters",
        "8",
        "--intrinsic-dim",
        "4",
        "--k",
        &k.to_string(),
        "--out",
        out.to_str().unwrap(),
    ]);
}
