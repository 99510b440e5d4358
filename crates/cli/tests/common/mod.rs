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
