//! Records the git commit the server is built from: Qdrant's `GET /` answers with the
//! commit of its build, and clients and Qdrant's REST suite expect the field.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        // Built outside a git checkout (a source package): no commit to name.
        .unwrap_or_else(|| "0".repeat(40));
    println!("cargo:rustc-env=DISKVEC_COMMIT={commit}");
    // A new commit changes HEAD (or the branch it points at).
    for path in ["../../.git/HEAD", "../../.git/refs/heads"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
