//! `diskvec dataset synth`, `diskvec bench` and `diskvec report` end to end on a small
//! synthetic set, and the harness refusing ground truth that is not the queries'.

mod common;

use std::path::Path;

use common::{fails, ok};

fn synth(dir: &Path, seed: u64) {
    ok(&[
        "dataset",
        "synth",
        "--n",
        "3000",
        "--dim",
        "32",
        "--queries",
        "50",
        "--clusters",
        "20",
        "--intrinsic-dim",
        "8",
        "--k",
        "20",
        "--seed",
        &seed.to_string(),
        "--out",
        dir.to_str().unwrap(),
    ]);
}

#[test]
fn bench_runs_our_kinds_reports_and_skips_missing_peers() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("synth");
    synth(&data, 42);
    let out = tmp.path().join("results");
    let stdout = ok(&[
        "bench",
        "--dataset",
        data.to_str().unwrap(),
        "--config",
        "hnsw:m=12,ef_construction=80,sweep=10/40",
        "--config",
        "diskann:r=24,l_build=40,pq_bytes=8",
        "--config",
        "diskann:paths=2,r=24,l_build=40,pq_bytes=8",
        "--config",
        // A peer whose Python is missing is skipped, not fatal.
        "hnswlib:python=/nonexistent/python",
        "--k",
        "10",
        "--concurrency",
        "1,3",
        "--duration",
        "0.3",
        "--sweep-duration",
        "0.1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(stdout.contains("synthetic"), "{stdout}");
    let json = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a results file");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        let label = r["label"].as_str().unwrap();
        assert!(r["recall"].as_f64().unwrap() > 0.9, "{label}: {r}");
        assert!(r["ndcg"].as_f64().unwrap() > 0.9, "{label}");
        assert_eq!(r["conc_num_list"], serde_json::json!([1, 3]), "{label}");
        assert!(r["qps"].as_f64().unwrap() > 0.0, "{label}");
        assert!(r["serving_peak_rss_bytes"].as_u64().unwrap() > 0, "{label}");
        assert!(r["load_duration"].as_f64().unwrap() > 0.0, "{label}");
        let p50 = r["serial_latency_p50"].as_f64().unwrap();
        assert!(p50 <= r["serial_latency_p99"].as_f64().unwrap(), "{label}");
    }
    assert_eq!(results[0]["sweep"].as_array().unwrap().len(), 2);
    assert!(results[0]["disk_bytes"].as_u64().unwrap() == 0);
    assert!(results[1]["disk_bytes"].as_u64().unwrap() > 0);
    assert!(results[1]["reads_per_query"].as_f64().unwrap() > 1.0);
    // The missing peer is named with the reason, not fatal.
    let skipped = run["skipped"].as_array().unwrap();
    assert_eq!(skipped[0][0], "hnswlib");
    assert!(
        skipped[0][1].as_str().unwrap().contains("python"),
        "{skipped:?}"
    );
    // The briefs' tables over the run.
    let report = ok(&["report", json.to_str().unwrap()]);
    assert!(
        report.contains("change") || report.contains("x)"),
        "{report}"
    );
    assert!(report.contains("QPS per dollar"), "{report}");
}

#[test]
fn bench_refuses_ground_truth_of_other_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    synth(&a, 42);
    synth(&b, 9);
    // Same shape, same ids, but the truth of other queries over other vectors.
    std::fs::copy(b.join("neighbors.parquet"), a.join("neighbors.parquet")).unwrap();
    let err = fails(&[
        "bench",
        "--dataset",
        a.to_str().unwrap(),
        "--config",
        "hnsw",
        "--k",
        "10",
        "--out",
        tmp.path().join("r").to_str().unwrap(),
    ]);
    assert!(err.contains("does not match the queries"), "{err}");
    // Unknown kinds and options are named before anything runs.
    let err = fails(&[
        "bench",
        "--dataset",
        a.to_str().unwrap(),
        "--config",
        "hnsw:paths=3",
    ]);
    assert!(err.contains("does not take"), "{err}");
}
