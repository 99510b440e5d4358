//! `diskvec report --charts` draws its PNGs with nothing but the binary: no Python, no
//! matplotlib, no system fonts reachable.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A committed results file, merged by `report` from real runs.
fn results(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/results/bench")
        .join(name)
}

/// Width and height from a PNG's header, after checking the signature.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 1000, "{path:?}: {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{path:?}");
    assert_eq!(&bytes[12..16], b"IHDR", "{path:?}");
    let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn report_draws_charts_without_python() {
    let tmp = tempfile::tempdir().unwrap();
    let charts = tmp.path().join("charts");
    let out = Command::new(env!("CARGO_BIN_EXE_diskvec"))
        .env_clear()
        .env("PATH", "/nonexistent")
        .env("HOME", tmp.path())
        .args(["report", "--out"])
        .arg(tmp.path().join("report.md"))
        .arg("--charts")
        .arg(&charts)
        .arg(results("wordnet-minilm384-50k.json"))
        .arg(results("synth-1m-768.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("chart"), "{stderr}");
    for name in ["wordnet-minilm384-50k", "synth-1m-768"] {
        let png = charts.join(format!("{name}.png"));
        assert!(
            stdout.contains(&format!("chart: {}", png.display())),
            "{stdout}"
        );
        assert_eq!(png_size(&png), (1760, 528), "{png:?}");
        assert!(charts.join(format!("{name}.json")).exists());
    }
    let pngs = std::fs::read_dir(&charts)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "png"))
        .count();
    assert_eq!(pngs, 2);
}
