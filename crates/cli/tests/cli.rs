//! The `diskvec` binary end to end on the bundled real sample, and its errors.

mod common;

use std::path::{Path, PathBuf};

use common::{fails, ok};

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/wordnet-minilm384-5k")
}

fn last_json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.lines().last().unwrap()).expect("last line is JSON")
}

#[test]
fn build_search_inspect_on_the_bundled_sample() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("idx");
    let (ds, ix) = (sample(), index.clone());
    let (ds, ix) = (ds.to_str().unwrap(), ix.to_str().unwrap());
    let built = last_json(&ok(&[
        "build",
        "--dataset",
        ds,
        "--index",
        ix,
        "--max-degree",
        "32",
        "--threads",
        "2",
        "--json",
    ]));
    assert_eq!(built["count"], 5000);
    assert_eq!(built["pq_bytes"], 96);

    let out = ok(&[
        "search",
        "--index",
        ix,
        "--dataset",
        ds,
        "--k",
        "10",
        "--search-list",
        "20,60",
        "--json",
    ]);
    let j = last_json(&out);
    for field in [
        "recall",
        "qps",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "mean_ios",
        "peak_rss_mb",
    ] {
        assert!(j[field].as_f64().is_some(), "missing {field} in {j}");
    }
    assert_eq!(j["search_list"], 60);
    assert!(j["recall"].as_f64().unwrap() >= 0.98, "{j}");
    assert!(j["p50_ms"].as_f64().unwrap() <= j["p99_ms"].as_f64().unwrap());
    assert!(j["mean_ios"].as_f64().unwrap() > 1.0);

    let pread = last_json(&ok(&[
        "search",
        "--index",
        ix,
        "--dataset",
        ds,
        "--engine",
        "pread",
        "--search-list",
        "60",
        "--json",
    ]));
    assert_eq!(pread["engine"], "pread");
    assert!((pread["recall"].as_f64().unwrap() - j["recall"].as_f64().unwrap()).abs() < 0.02);

    let nav = last_json(&ok(&[
        "search",
        "--index",
        ix,
        "--dataset",
        ds,
        "--search-list",
        "60",
        "--navigation",
        "--json",
    ]));
    assert!(nav["recall"].as_f64().unwrap() >= 0.98, "{nav}");
    assert!(
        nav["mean_ios"].as_f64().unwrap() < j["mean_ios"].as_f64().unwrap(),
        "{nav} vs {j}"
    );
    assert!(nav["dram_index_bytes"].as_u64().unwrap() > j["dram_index_bytes"].as_u64().unwrap());

    let info = ok(&["inspect", "--index", ix]);
    assert!(
        info.contains("5000 x 384 dims")
            && info.contains("stored as float32")
            && info.contains("layout version 3"),
        "{info}"
    );
    let info = last_json(&ok(&["inspect", "--index", ix, "--json"]));
    assert_eq!(info["nodes_per_sector"], 2);
    assert_eq!(info["max_degree"], 32);
    assert_eq!(info["navigation"]["walk_codes"], "4-bit", "{info}");
    assert!(info["navigation"]["dram_bytes"].as_u64().unwrap() > 5000 * 192);
}

/// `--dtype float16` stores the records in half the vector bytes (4 of the 384-d sample's
/// R=32 records a sector instead of 2), in layout version 4, with the recall of float32; uint8 is
/// refused for cosine and for values that are not whole numbers in 0-255.
#[test]
fn float16_records_pack_twice_as_many_to_a_sector_with_the_recall_of_float32() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample();
    let ds = ds.to_str().unwrap();
    let build = |dtype: &str, name: &str| {
        let ix = dir.path().join(name);
        let ix = ix.to_str().unwrap().to_string();
        let built = last_json(&ok(&[
            "build",
            "--dataset",
            ds,
            "--index",
            &ix,
            "--max-degree",
            "32",
            "--dtype",
            dtype,
            "--threads",
            "2",
            "--json",
        ]));
        assert_eq!(built["dtype"], dtype);
        ix
    };
    let search = |ix: &str| {
        last_json(&ok(&[
            "search",
            "--index",
            ix,
            "--dataset",
            ds,
            "--k",
            "10",
            "--search-list",
            "40",
            "--navigation",
            "--json",
        ]))
    };
    let full = build("float32", "f32");
    let half = build("float16", "f16");
    let info = last_json(&ok(&["inspect", "--index", &half, "--json"]));
    assert_eq!(info["dtype"], "float16", "{info}");
    assert_eq!(info["layout_version"], 4, "{info}");
    assert_eq!(info["nodes_per_sector"], 4, "{info}");
    assert_eq!(info["node_bytes"], 384 * 2 + 4 + 32 * 4, "{info}");
    let disk = |ix: &str| {
        last_json(&ok(&["inspect", "--index", ix, "--json"]))["disk_bytes"]
            .as_u64()
            .unwrap()
    };
    assert!(
        disk(&half) < disk(&full),
        "{} vs {}",
        disk(&half),
        disk(&full)
    );
    let (a, b) = (search(&full), search(&half));
    let (ra, rb) = (a["recall"].as_f64().unwrap(), b["recall"].as_f64().unwrap());
    assert!(
        ra >= 0.95 && (ra - rb).abs() <= 0.01,
        "float32 {a} float16 {b}"
    );

    let refused = fails(&[
        "build",
        "--dataset",
        ds,
        "--index",
        &dir.path().join("u8").display().to_string(),
        "--dtype",
        "uint8",
    ]);
    assert!(
        refused.contains("uint8") && refused.contains("cosine"),
        "{refused}"
    );
    let refused = fails(&[
        "build",
        "--dataset",
        ds,
        "--index",
        &dir.path().join("u8").display().to_string(),
        "--dtype",
        "uint8",
        "--metric",
        "l2",
    ]);
    assert!(
        refused.contains("0 to 255") && refused.contains("vector 0"),
        "{refused}"
    );
}

#[test]
fn groundtruth_reproduces_the_bundled_neighbors() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    for f in ["train.parquet", "test.parquet"] {
        std::fs::copy(sample().join(f), ds.join(f)).unwrap();
    }
    ok(&[
        "groundtruth",
        "--dataset",
        ds.to_str().unwrap(),
        "--k",
        "100",
    ]);
    let mine = diskvec_dataset::read_neighbors(&ds.join("neighbors.parquet")).unwrap();
    let bundled = diskvec_dataset::read_neighbors(&sample().join("neighbors.parquet")).unwrap();
    assert_eq!(mine.query_ids, bundled.query_ids);
    let same: usize = mine
        .lists
        .iter()
        .zip(&bundled.lists)
        .map(|(a, b)| a.iter().zip(b).filter(|(x, y)| x == y).count())
        .sum();
    assert!(
        same as f64 / 10_000.0 > 0.999,
        "{same} of 10000 positions agree"
    );
}

#[test]
fn bad_input_exits_non_zero_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // A keyless server on an address other machines reach: refused before it listens.
    let db = dir.path().join("served");
    let db = db.to_str().unwrap();
    let err = fails(&["serve", "--db", db, "--host", "0.0.0.0", "--port", "0"]);
    assert!(err.contains("without an API key"), "{err}");
    let key_file = dir.path().join("empty.key");
    std::fs::write(&key_file, "\n").unwrap();
    let err = fails(&[
        "serve",
        "--db",
        db,
        "--port",
        "0",
        "--api-key-file",
        key_file.to_str().unwrap(),
    ]);
    assert!(err.contains("empty"), "{err}");
    let err = fails(&["build", "--dataset", "/nonexistent/ds", "--index", d]);
    assert!(err.contains("/nonexistent/ds"), "{err}");
    let err = fails(&[
        "search",
        "--index",
        "/nonexistent/idx",
        "--dataset",
        sample().to_str().unwrap(),
    ]);
    assert!(err.contains("/nonexistent/idx"), "{err}");
    let err = fails(&[
        "build",
        "--dataset",
        sample().to_str().unwrap(),
        "--index",
        d,
        "--metric",
        "hamming",
    ]);
    assert!(err.contains("metric"), "{err}");

    let err = fails(&[
        "iobench",
        "--paths",
        d,
        "--mix",
        "readwrite",
        "--seconds",
        "0.1",
    ]);
    assert!(err.contains("unknown mix"), "{err}");
    let err = fails(&["iobench", "--paths", "/nonexistent/dev", "--seconds", "0.1"]);
    assert!(err.contains("/nonexistent/dev"), "{err}");

    // Queries of another dimension than the index.
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let m = diskvec_dataset::Matrix {
        data: (0..40).map(|x| x as f32).collect(),
        dim: 4,
        ids: (0..10).collect(),
    };
    diskvec_dataset::write_vectors(&small.join("train.parquet"), &m).unwrap();
    diskvec_dataset::write_vectors(&small.join("test.parquet"), &m).unwrap();
    let idx = dir.path().join("idx4");
    ok(&[
        "build",
        "--dataset",
        small.to_str().unwrap(),
        "--index",
        idx.to_str().unwrap(),
        "--metric",
        "l2",
    ]);
    ok(&[
        "groundtruth",
        "--dataset",
        small.to_str().unwrap(),
        "--k",
        "5",
        "--metric",
        "l2",
    ]);
    let err = fails(&[
        "search",
        "--index",
        idx.to_str().unwrap(),
        "--dataset",
        sample().to_str().unwrap(),
    ]);
    assert!(err.contains("dimension"), "{err}");
    let err = fails(&[
        "search",
        "--index",
        idx.to_str().unwrap(),
        "--dataset",
        small.to_str().unwrap(),
        "--k",
        "0",
    ]);
    assert!(err.contains("k must be"), "{err}");

    // Ground truth that does not belong to the queries.
    let m3 = diskvec_dataset::Matrix {
        data: (0..12).map(|x| x as f32).collect(),
        dim: 4,
        ids: (0..3).collect(),
    };
    diskvec_dataset::write_vectors(&small.join("test.parquet"), &m3).unwrap();
    let err = fails(&[
        "search",
        "--index",
        idx.to_str().unwrap(),
        "--dataset",
        small.to_str().unwrap(),
    ]);
    assert!(err.contains("does not belong"), "{err}");
}

#[test]
fn an_index_striped_over_four_paths_uses_them_all_within_the_queue_cap() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("idx");
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("ns{i}"))).collect();
    for p in &paths {
        std::fs::create_dir(p).unwrap();
    }
    let list = paths
        .iter()
        .map(|p| p.to_str().unwrap())
        .collect::<Vec<_>>()
        .join(",");
    let (ds, ix) = (sample(), index.clone());
    let (ds, ix) = (ds.to_str().unwrap(), ix.to_str().unwrap());
    ok(&[
        "build",
        "--dataset",
        ds,
        "--index",
        ix,
        "--max-degree",
        "32",
        "--paths",
        &list,
        "--stripe-kib",
        "8",
    ]);
    for p in &paths {
        assert_eq!(
            std::fs::read_dir(p).unwrap().count(),
            1,
            "one stripe file in {}",
            p.display()
        );
    }
    let info = ok(&["inspect", "--index", ix]);
    assert!(info.contains("4 paths, 8 KiB stripes"), "{info}");

    let j = last_json(&ok(&[
        "search",
        "--index",
        ix,
        "--dataset",
        ds,
        "--search-list",
        "60",
        "--threads",
        "1",
        "--queue-depth",
        "1",
        "--json",
    ]));
    assert!(j["recall"].as_f64().unwrap() >= 0.98, "{j}");
    let per_path = j["paths"].as_array().unwrap();
    assert_eq!(per_path.len(), 4);
    let mut waited = 0;
    for p in per_path {
        assert!(p["reads"].as_u64().unwrap() > 0, "{p}");
        assert!(
            p["max_in_flight"].as_u64().unwrap() <= 1,
            "cap of 1 exceeded: {p}"
        );
        assert!(p["p99_us"].as_f64().unwrap() >= p["p50_us"].as_f64().unwrap());
        waited += p["waited_at_cap"].as_u64().unwrap();
    }
    assert!(waited > 0, "with a cap of 1, some reads must wait: {j}");
    let reads: u64 = per_path.iter().map(|p| p["reads"].as_u64().unwrap()).sum();
    assert!(
        (reads as f64 / 100.0 - j["mean_ios"].as_f64().unwrap()).abs() < 0.5,
        "path reads add up to reads per query"
    );

    // A path that has gone away is named in the error.
    let gone = std::fs::read_dir(&paths[2])
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&gone).unwrap();
    let err = fails(&["search", "--index", ix, "--dataset", ds]);
    assert!(err.contains(gone.to_str().unwrap()), "{err}");
}

#[test]
fn build_and_inspect_say_why_navigation_was_left_off_on_low_dimensional_data() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    common::synth(&ds, 2000, 10);
    let ix = dir.path().join("ix");
    let (ds, ix) = (ds.to_str().unwrap(), ix.to_str().unwrap());
    let built = last_json(&ok(&["build", "--dataset", ds, "--index", ix, "--json"]));
    let why = built["navigation_off"]
        .as_str()
        .expect("left off")
        .to_string();
    assert!(
        why.contains("raw vectors") || why.contains("4-bit codes"),
        "{built}"
    );
    let text = ok(&["inspect", "--index", ix]);
    assert!(
        text.contains(&format!("left off by the build: {why}")),
        "{text}"
    );
    let info = last_json(&ok(&["inspect", "--index", ix, "--json"]));
    assert!(info["navigation"].is_null(), "{info}");
    assert_eq!(info["navigation_off"]["why"], why.as_str(), "{info}");
    // Searching with --navigation still works, by the graph, with a note.
    let out = common::diskvec(&[
        "search",
        "--index",
        ix,
        "--dataset",
        ds,
        "--navigation",
        "--json",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("left navigation off"));
}

#[test]
fn json_runs_report_progress_as_json_lines_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    common::synth(&ds, 3000, 10);
    let ix = dir.path().join("ix");
    let (ds, ix) = (ds.to_str().unwrap(), ix.to_str().unwrap());
    let out = common::diskvec(&["build", "--dataset", ds, "--index", ix, "--json"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let phases: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["progress"]["phase"].as_str())
        .collect();
    assert!(phases.contains(&"PQ training"), "{stderr}");
    assert!(phases.iter().any(|p| p.starts_with("graph")), "{stderr}");
    for l in &lines {
        let p = &l["progress"];
        assert!(
            p["done"].as_u64().unwrap() <= p["total"].as_u64().unwrap().max(1),
            "{l}"
        );
        assert!(p["seconds"].as_f64().unwrap() >= 0.0, "{l}");
    }
    // stdout keeps the result alone, as its last line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(last_json(&stdout)["count"], 3000);
}
