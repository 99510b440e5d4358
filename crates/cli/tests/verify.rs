//! `diskvec verify` from the terminal: exit 0 on an intact index; on damage, each bad
//! sector printed with its file and offset, and exit 1.

mod common;

use common::{diskvec, ok, synth};

#[test]
fn verify_prints_each_bad_sector_and_exits_non_zero() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let index = root.path().join("idx");
    synth(&data, 500, 5);
    ok(&[
        "build",
        "--dataset",
        data.to_str().unwrap(),
        "--index",
        index.to_str().unwrap(),
        "--max-degree",
        "16",
    ]);
    let out = ok(&["verify", "--index", index.to_str().unwrap()]);
    assert!(out.contains("all intact"), "{out}");

    let nodes = std::fs::read_dir(&index)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "dvn"))
        .unwrap();
    let mut bytes = std::fs::read(&nodes).unwrap();
    bytes[3 * 4096 + 5] ^= 0xff;
    bytes[5 * 4096 + 4000] ^= 0x01;
    std::fs::write(&nodes, bytes).unwrap();
    let run = diskvec(&["verify", "--index", index.to_str().unwrap(), "--json"]);
    assert_eq!(run.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&run.stdout);
    for offset in [3 * 4096, 5 * 4096] {
        let line = format!("bad: {} at offset {offset}:", nodes.display());
        assert!(stdout.contains(&line), "{stdout}");
    }
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(json["damage"].as_array().unwrap().len(), 2);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("2 problems") && !stderr.contains("panicked"),
        "{stderr}"
    );

    let missing = diskvec(&[
        "verify",
        "--index",
        root.path().join("none").to_str().unwrap(),
    ]);
    assert_eq!(missing.status.code(), Some(1));
}
