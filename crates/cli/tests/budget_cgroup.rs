//! `diskvec build --memory-budget` inside a memory cgroup smaller than the data: the kernel's
//! accounting (resident memory and the page cache the build dirties), not ours, must let it
//! finish, and the index must answer. Skipped, saying so, where cgroup v1's memory
//! controller is not writable.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fails, ok};

const CGROUPS: &str = "/sys/fs/cgroup/memory";

/// A fresh memory cgroup (v1) capped at `limit` bytes, removed on drop.
struct Cgroup(PathBuf);

impl Cgroup {
    fn create(limit: u64) -> Option<Self> {
        let dir = Path::new(CGROUPS).join(format!("diskvec-test-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let group = Self(dir);
        std::fs::write(group.0.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
        Some(group)
    }
    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_build_completes_in_a_memory_cgroup_smaller_than_its_data() {
    let (n, dim) = (200_000usize, 128usize);
    let raw = (n * dim * 4) as u64;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    ok(&[
        "dataset",
        "synth",
        "--n",
        &n.to_string(),
        "--dim",
        &dim.to_string(),
        "--queries",
        "50",
        "--k",
        "10",
        "--out",
        data.to_str().unwrap(),
    ]);
    let index = root.path().join("index");
    let build = |budget: &str| {
        vec![
            "build".to_string(),
            "--dataset".into(),
            data.display().to_string(),
            "--index".into(),
            index.display().to_string(),
            "--max-degree".into(),
            "24".into(),
            "--build-list".into(),
            "48".into(),
            "--memory-budget".into(),
            budget.into(),
        ]
    };
    // A budget below what the smallest shards need is refused before anything is read,
    // naming the smallest that works.
    let args = build("4MiB");
    let err = fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let smallest = err
        .split("smallest that works is ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("{err}"))
        .trim_end_matches("MiB")
        .parse::<u64>()
        .unwrap();
    assert!(!index.join("meta.dvm").exists());
    let budget = (smallest + 4) << 20;
    // Room for the process's own code and stack besides the budget, and still less than
    // the raw vectors.
    let limit = budget + (12 << 20);
    assert!(
        limit < raw,
        "the cgroup ({limit}) must be smaller than the data ({raw})"
    );
    let Some(group) = Cgroup::create(limit) else {
        eprintln!("skipped: {CGROUPS} is not writable here, so the budget cannot be checked by the kernel");
        return;
    };
    let args = build(&format!("{}MiB", budget >> 20));
    let procs = group.0.join("cgroup.procs");
    // The shell moves itself into the cgroup, then becomes diskvec there.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {} && exec \"$0\" \"$@\"",
            procs.display()
        ))
        .arg(env!("CARGO_BIN_EXE_diskvec"))
        .args(&args)
        .output()
        .unwrap();
    let peak: u64 = group
        .read("memory.max_usage_in_bytes")
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(
        out.status.success(),
        "the build failed in a {limit}-byte cgroup (peak {peak}): {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        group.read("memory.oom_control")
    );
    eprintln!(
        "built {} MiB of vectors within {} MiB (cgroup limit {} MiB, peak {} MiB)",
        raw >> 20,
        budget >> 20,
        limit >> 20,
        peak >> 20
    );
    assert!(peak > 0 && peak <= limit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("shards"), "{stdout}");
    let json = ok(&[
        "search",
        "--index",
        index.to_str().unwrap(),
        "--dataset",
        data.to_str().unwrap(),
        "--k",
        "10",
        "--search-list",
        "60",
        "--json",
    ]);
    let result: serde_json::Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    let recall = result["recall"].as_f64().unwrap();
    assert!(recall > 0.9, "recall@10 {recall}");
}
