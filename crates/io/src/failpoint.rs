//! Crash points for the tests of every layer that writes durably: the process aborts (as
//! kill -9 would stop it) when `DISKVEC_FAILPOINT` names the step it reaches, so a test can
//! crash at the exact moment that matters (around a build's commit, a seal's manifest
//! switch) and check that nothing acknowledged is lost.

/// Aborts the process when `DISKVEC_FAILPOINT` is `step`; otherwise does nothing.
pub fn failpoint(step: &str) {
    if std::env::var("DISKVEC_FAILPOINT").is_ok_and(|v| v == step) {
        eprintln!("failpoint {step}: aborting");
        std::process::abort();
    }
}
