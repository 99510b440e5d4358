//! The database commands end to end: `import` (with payloads, payload indexes, sealing),
//! `query` (with and without filters), `db info`, appending, the errors a user meets, and
//! the demo on the bundled sample.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray};
use common::{diskvec, ok, synth};
use diskvec_dataset::{write_vectors, Matrix};
use parquet::arrow::ArrowWriter;
use serde_json::Value;

const COLORS: [&str; 3] = ["red", "green", "blue"];

/// Writes a payload file for ids `0..n`: a string, an int32, a bool, a float and a string
/// column that is null on every fifth row.
fn write_payloads(path: &Path, n: i64) {
    let ids: Vec<i64> = (0..n).collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int64Array::from(ids.clone()))),
        (
            "color",
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| COLORS[(i % 3) as usize]),
            )),
        ),
        (
            "n",
            Arc::new(Int32Array::from_iter_values(
                ids.iter().map(|i| (i % 10) as i32),
            )),
        ),
        (
            "odd",
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|i| Some(i % 2 == 1)),
            )),
        ),
        (
            "weight",
            Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|&i| i as f64 / 4.0),
            )),
        ),
        (
            "note",
            Arc::new(StringArray::from_iter(
                ids.iter()
                    .map(|i| (i % 5 != 0).then(|| format!("point {i}"))),
            )),
        ),
    ];
    let batch = arrow_array::RecordBatch::try_from_iter(columns).unwrap();
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Runs `diskvec`, asserts exit code 1 with an `error:` line and no panic; returns stderr.
fn refused(args: &[&str]) -> String {
    let out = diskvec(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "diskvec {args:?}: {err}");
    assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn last_json(stdout: &str) -> Value {
    serde_json::from_str(stdout.lines().last().expect("a line of output")).unwrap()
}

/// A synthetic dataset of `n` x 16 with `train_payloads.parquet` beside its train.parquet.
struct Fixture {
    tmp: tempfile::TempDir,
    data: PathBuf,
    db: PathBuf,
}

impl Fixture {
    fn new(n: usize) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("synth");
        synth(&data, n, 10);
        write_payloads(&data.join("train_payloads.parquet"), n as i64);
        let db = tmp.path().join("db");
        Fixture { tmp, data, db }
    }

    fn d(&self) -> &str {
        self.data.to_str().unwrap()
    }

    fn db(&self) -> &str {
        self.db.to_str().unwrap()
    }

    fn query(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["query", "--db", self.db(), "--collection", "c", "--json"];
        args.extend_from_slice(extra);
        last_json(&ok(&args))["hits"].as_array().unwrap().clone()
    }

    /// `import` of the fixture's dataset into collection "c", with `extra` options; its
    /// JSON report.
    fn import(&self, extra: &[&str]) -> Value {
        let mut args = self.import_args(extra);
        args.push("--json");
        last_json(&ok(&args))
    }

    /// The arguments of `import` of the fixture's dataset into collection "c", then `extra`.
    fn import_args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "import",
            "--db",
            self.db(),
            "--collection",
            "c",
            "--dataset",
            self.d(),
        ];
        args.extend_from_slice(extra);
        args
    }

    fn info(&self) -> Value {
        last_json(&ok(&["db", "info", "--db", self.db(), "--json"]))["collections"][0].clone()
    }
}

#[test]
fn import_query_filter_info_and_append() {
    let f = Fixture::new(2000);
    let report = f.import(&[
        "--index-fields",
        "color:keyword,n:integer",
        "--batch",
        "150",
        "--optimize",
    ]);
    assert_eq!(report["created"], true, "{report}");
    assert_eq!(report["points"], 2000, "{report}");
    assert_eq!(report["with_payload"], 2000, "{report}");
    assert_eq!(report["indexed_points"], 2000, "{report}");
    assert!(report["load_seconds"].as_f64().unwrap() > 0.0, "{report}");

    // Unfiltered: k hits, best first, with the payloads as written (a null is absent).
    let vector_from = format!("{}:3", f.d());
    let hits = f.query(&["--vector-from", &vector_from, "--with-payload"]);
    assert_eq!(hits.len(), 10);
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    for h in &hits {
        let id = h["id"].as_i64().unwrap();
        let p = &h["payload"];
        assert_eq!(p["color"], COLORS[(id % 3) as usize], "{h}");
        assert_eq!(p["n"], id % 10, "{h}");
        assert_eq!(p["odd"], id % 2 == 1, "{h}");
        assert_eq!(p["weight"], id as f64 / 4.0, "{h}");
        assert_eq!(p.get("note").is_some(), id % 5 != 0, "{h}");
    }

    // Filtered: every hit passes, and the filter changes the answer.
    let filter =
        r#"{"must":[{"key":"color","match":{"value":"red"}},{"key":"n","range":{"gte":3}}]}"#;
    let filtered = f.query(&[
        "--vector-from",
        &vector_from,
        "--with-payload",
        "--filter",
        filter,
        "--k",
        "20",
    ]);
    assert_eq!(filtered.len(), 20);
    for h in &filtered {
        assert_eq!(h["payload"]["color"], "red", "{h}");
        assert!(h["payload"]["n"].as_i64().unwrap() >= 3, "{h}");
    }
    assert!(
        hits.iter()
            .any(|h| h["payload"]["color"] != "red" || h["payload"]["n"].as_i64() < Some(3)),
        "the unfiltered top 10 all pass the filter, so it shows nothing"
    );

    // A stored point's vector finds that point first.
    let by_id = f.query(&["--id", "7", "--k", "3"]);
    assert_eq!(by_id[0]["id"], 7);
    assert!((by_id[0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-4);
    let text = ok(&[
        "query",
        "--db",
        f.db(),
        "--collection",
        "c",
        "--id",
        "7",
        "--k",
        "2",
    ]);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().take(2).eq(["1", "7"])),
        "{text}"
    );

    // A universal query body: the same point first, by id, and fused with itself by RRF.
    let body = r#"{"prefetch": [{"query": 7, "limit": 5}, {"query": 7, "limit": 3}],
                   "query": {"fusion": "rrf"}, "limit": 2}"#;
    let fused = f.query(&["--body", body]);
    assert_eq!(fused.len(), 2, "{fused:?}");
    assert!(
        fused[0]["score"].as_f64() > fused[1]["score"].as_f64(),
        "{fused:?}"
    );
    let err = refused(&[
        "query",
        "--db",
        f.db(),
        "--collection",
        "c",
        "--body",
        "{\"query\": {\"teleport\": 1}}",
    ]);
    assert!(err.contains("teleport"), "{err}");

    let info = f.info();
    assert_eq!(info["points"], 2000, "{info}");
    assert_eq!(info["indexed_points"], 2000, "{info}");
    let sealed: Vec<&Value> = info["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "sealed")
        .collect();
    assert_eq!(sealed.len(), 1, "{info}");
    assert_eq!(sealed[0]["points"], 2000, "{info}");
    assert!(sealed[0]["disk_bytes"].as_u64().unwrap() > 0, "{info}");
    let indexes = info["payload_indexes"].to_string();
    assert!(indexes.contains(r#"["color","keyword"]"#), "{indexes}");
    assert!(indexes.contains(r#"["n","integer"]"#), "{indexes}");
    assert!(info["recovery"]["sealed_points"] == 2000, "{info}");
    assert_eq!(info["config"]["navigation"], true, "{info}");

    // A second import with new ids appends to the growing segment; no payload file here.
    let more = f.tmp.path().join("more.parquet");
    let ids: Vec<i64> = (5000..5300).collect();
    let data: Vec<f32> = ids
        .iter()
        .flat_map(|&i| (0..16).map(move |d| ((i * 7 + d) % 13) as f32 - 6.0))
        .collect();
    write_vectors(&more, &Matrix { data, dim: 16, ids }).unwrap();
    let second = last_json(&ok(&[
        "import",
        "--db",
        f.db(),
        "--collection",
        "c",
        "--dataset",
        more.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(second["created"], false, "{second}");
    assert_eq!(second["with_payload"], 0, "{second}");
    assert_eq!(second["total_points"], 2300, "{second}");
    let info = f.info();
    assert_eq!(info["points"], 2300, "{info}");
    assert_eq!(info["indexed_points"], 2000, "{info}");
    let text = ok(&["db", "info", "--db", f.db()]);
    assert!(text.contains("2300 points (2000 indexed)"), "{text}");
    assert!(text.contains("color (keyword), n (integer)"), "{text}");
}

#[test]
fn no_navigation_is_kept_in_the_new_collection() {
    let f = Fixture::new(300);
    let report = f.import(&["--no-navigation", "--optimize"]);
    assert_eq!(report["indexed_points"], 300, "{report}");
    let info = f.info();
    assert_eq!(info["config"]["navigation"], false, "{info}");
    let by_id = f.query(&["--id", "7", "--k", "3"]);
    assert_eq!(by_id[0]["id"], 7);
}

#[test]
fn a_deferred_import_is_built_once_by_optimize() {
    let f = Fixture::new(300);
    let report = f.import(&["--defer-indexing", "--seal-threshold", "100", "--optimize"]);
    assert_eq!(report["indexed_points"], 300, "{report}");
    // Nothing was sealed while importing: one build of every point, not seals of 100 and
    // a merge of them.
    let build = &report["last_build"];
    assert_eq!(build["kind"], "seal", "{report}");
    assert_eq!(build["points"], 300, "{report}");
}

#[test]
fn mistakes_end_in_a_message_and_exit_1() {
    let f = Fixture::new(300);
    ok(&[
        "import",
        "--db",
        f.db(),
        "--collection",
        "c",
        "--dataset",
        f.d(),
    ]);
    let base = ["--db", f.db(), "--collection", "c"];
    let query = |extra: &[&str]| {
        let mut args = vec!["query"];
        args.extend_from_slice(&base);
        args.extend_from_slice(extra);
        refused(&args)
    };

    let wrong_dim = f.tmp.path().join("dim8.parquet");
    write_vectors(
        &wrong_dim,
        &Matrix {
            data: vec![0.5; 8 * 4],
            dim: 8,
            ids: vec![0, 1, 2, 3],
        },
    )
    .unwrap();
    let err = refused(&[
        "import",
        "--db",
        f.db(),
        "--collection",
        "c",
        "--dataset",
        wrong_dim.to_str().unwrap(),
    ]);
    assert!(
        err.contains("dimension 16") && err.contains("dimension 8"),
        "{err}"
    );

    let err = query(&["--id", "1", "--filter", r#"{"must": [{"key": "color""#]);
    assert!(
        err.contains("not valid JSON") && err.contains("line 1 column"),
        "{err}"
    );
    let err = query(&[
        "--id",
        "1",
        "--filter",
        r#"{"must": [{"key": "color", "equals": 1}]}"#,
    ]);
    assert!(err.contains("bad filter"), "{err}");
    let err = query(&["--id", "123456"]);
    assert!(err.contains("no point with id 123456"), "{err}");
    let beyond = format!("{}:20", f.d());
    let err = query(&["--vector-from", &beyond]);
    assert!(err.contains("row 20 is past the end"), "{err}");

    let err = refused(&["query", "--db", f.db(), "--collection", "nope", "--id", "1"]);
    assert!(err.contains(r#"collection "nope" does not exist"#), "{err}");
    let err = refused(&["db", "info", "--db", f.db(), "--collection", "nope"]);
    assert!(err.contains("does not exist"), "{err}");
    let missing = f.tmp.path().join("no-db");
    let err = refused(&["db", "info", "--db", missing.to_str().unwrap()]);
    assert!(err.contains("not a diskvec database"), "{err}");
    assert!(
        !missing.exists(),
        "looking at a database must not create one"
    );

    // Another process holding the database.
    let lock = File::options()
        .write(true)
        .open(f.db.join(".lock"))
        .unwrap();
    lock.lock().unwrap();
    let err = query(&["--id", "1"]);
    assert!(err.contains("open in another process"), "{err}");
    drop(lock);

    let out = ok(&["db", "drop", "--db", f.db(), "--collection", "c"]);
    assert!(
        out.contains("dropped collection \"c\" (300 points)"),
        "{out}"
    );
    let err = query(&["--id", "1"]);
    assert!(err.contains("does not exist"), "{err}");
}

/// The checkout's root, where `data/wordnet-minilm384-5k` lives.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[test]
fn the_demo_loads_the_sample_into_a_database_that_survives_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("demo-db");
    let db = db.to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_diskvec"))
        .args(["demo", "--db", db])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "payload fields: chars, lexname, pos, synset, text",
        "recall@10",
        "filtered to lexname = noun.animal",
        "5000 -> 4997 points",
        "reopen check: 4997 points (4997 before), deleted points still gone, the query's top 10 the same: passed",
    ] {
        assert!(stdout.contains(part), "{part:?} in\n{stdout}");
    }
    // Recall at L=100 is exact on 5,000 points; the table's last row says so.
    let row = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("100"))
        .unwrap();
    let recall: f64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(recall >= 0.99, "{row}");

    // The kept database answers the CLI's commands.
    let info = last_json(&ok(&["db", "info", "--db", db, "--json"]));
    let c = &info["collections"][0];
    assert_eq!(c["points"], 4997, "{c}");
    assert!(
        c["segments"].to_string().contains(r#""kind":"sealed""#),
        "{c}"
    );
    let sample = format!(
        "{}:12",
        repo_root().join("data/wordnet-minilm384-5k").display()
    );
    let hits = last_json(&ok(&[
        "query",
        "--db",
        db,
        "--collection",
        "wordnet",
        "--vector-from",
        &sample,
        "--filter",
        r#"{"must":[{"key":"pos","match":{"value":"verb"}}]}"#,
        "--with-payload",
        "--json",
    ]))["hits"]
        .clone();
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 10);
    assert!(
        hits.iter().all(|h| h["payload"]["pos"] == "verb"),
        "{hits:?}"
    );

    let err = refused(&["demo", "--db", db]);
    assert!(err.contains("already holds a collection"), "{err}");
}

#[test]
fn import_keeps_the_build_memory_it_was_given_and_refuses_bad_ones() {
    let f = Fixture::new(3000);
    let report = f.import(&[
        "--seal-threshold",
        "1000",
        "--build-memory",
        "200MiB",
        "--optimize",
    ]);
    assert_eq!(report["points"], 3000, "{report}");
    assert_eq!(report["indexed_points"], 3000, "{report}");
    let info = f.info();
    assert_eq!(
        info["config"]["build_memory"],
        (200u64 << 20).to_string(),
        "{info}"
    );
    let last = &report["last_build"];
    assert!(
        last["memory_budget"].as_u64().unwrap() <= 200 << 20
            && last["estimated_peak"].as_u64().unwrap() > 0,
        "{info}"
    );
    let db = f.db();
    let d = f.d();
    let base = [
        "import",
        "--db",
        db,
        "--collection",
        "other",
        "--dataset",
        d,
    ];
    for (budget, says) in [
        ("auto", "leave it out"),
        ("lots", "memory budget"),
        ("1MiB", "at least"),
    ] {
        let mut args = base.to_vec();
        args.extend(["--build-memory", budget]);
        let out = diskvec(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{budget} was taken");
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{budget}: {err}"
        );
    }
    assert!(!ok(&["db", "info", "--db", db]).contains("other"));
}

/// `--max-rate` paces the writer (2,000 points at 8,000 a second take at least a quarter of a
/// second, however fast the writes are) and the report carries each write's latency; a rate
/// that is not a positive number is refused.
#[test]
fn a_paced_import_reports_its_write_latencies() {
    let f = Fixture::new(2000);
    let report = f.import(&["--max-rate", "8000", "--batch", "100"]);
    assert_eq!(report["points"], 2000, "{report}");
    assert!(report["seconds"].as_f64().unwrap() >= 0.2375, "{report}");
    let ms = &report["write_ms"];
    let (p50, p99, max) = (
        ms["p50"].as_f64().unwrap(),
        ms["p99"].as_f64().unwrap(),
        ms["max"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{report}");
    for bad in ["--max-rate=0", "--max-rate=-5", "--max-rate=inf"] {
        let err = refused(&f.import_args(&[bad]));
        assert!(err.contains("rate"), "{err}");
    }
}
