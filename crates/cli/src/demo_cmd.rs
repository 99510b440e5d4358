//! `diskvec demo`: the bundled WordNet sample loaded into a database in a temporary
//! directory, then searched, filtered, deleted from, closed and reopened.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use diskvec_dataset::{Matrix, Neighbors};
use diskvec_db::{Collection, Database, Filter, Hit, PointId, SearchRequest};
use serde_json::json;

use crate::import_cmd::{self, NewCollection};
use diskvec_bench::metrics::{recall_at, Latency};
use diskvec_bench::truth::{check_truth_ids, load_queries};

/// Where the repository keeps the sample, relative to its root.
const SAMPLE: &str = "data/wordnet-minilm384-5k";

const COLLECTION: &str = "wordnet";

/// The test query the demo shows answers to, the category it filters on, and how many of
/// the query's top hits it deletes; chosen so the filter visibly changes the answer.
const SHOWN_QUERY: usize = 12;
const FILTER_LEXNAME: &str = "noun.animal";
const DELETED: usize = 3;

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory (default: data/wordnet-minilm384-5k of the repository, looked for
    /// under the current directory, then next to the executable and its parent directories).
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Keep the database in DIR (default: a temporary directory, removed at the end).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Threads sending the test queries.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// The bundled sample: under the current directory (a checkout's root, as `cargo run`
/// starts from there), else under the executable's directory or one of its parents (as
/// `target/release/diskvec` sits two levels below the root). The binary carries no path
/// fixed at compile time, so it works wherever it and the checkout are.
fn find_sample() -> anyhow::Result<PathBuf> {
    let mut tried = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        tried.push(cwd.join(SAMPLE));
    }
    if let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) {
        tried.extend(exe.ancestors().skip(1).map(|d| d.join(SAMPLE)));
    }
    if let Some(found) = tried.iter().find(|p| p.is_dir()) {
        return Ok(found.clone());
    }
    let places: Vec<String> = tried.iter().map(|p| format!("  {}", p.display())).collect();
    anyhow::bail!(
        "the demo's sample dataset ({SAMPLE}) is not in any of the places looked:\n{}\n\
         run the demo from the repository's root, or pass --dataset <directory>",
        places.join("\n")
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn num(id: PointId) -> i64 {
    match id {
        PointId::Num(n) => n as i64,
        PointId::Uuid(_) => -1,
    }
}

fn ids(hits: &[Hit]) -> Vec<i64> {
    hits.iter().map(|h| num(h.id)).collect()
}

/// A test query's row, the ids found and the milliseconds it took.
type Answer = (usize, Vec<i64>, f64);

/// Runs every test query with search list `l`, `threads` at a time, and prints a row of
/// recall@10, QPS and latency.
fn search_row(
    col: &Collection,
    test: &Matrix,
    gt: &Neighbors,
    l: usize,
    threads: usize,
) -> anyhow::Result<()> {
    let request = SearchRequest {
        search_list: Some(l),
        ..SearchRequest::new(10)
    };
    let started = Instant::now();
    let per_thread: Vec<anyhow::Result<Vec<Answer>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let request = &request;
                s.spawn(move || {
                    (t..test.len())
                        .step_by(threads)
                        .map(|q| {
                            let began = Instant::now();
                            let hits = col.search(test.row(q), request)?;
                            Ok((q, ids(&hits), began.elapsed().as_secs_f64() * 1000.0))
                        })
                        .collect()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a search thread panicked"))
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut recall = 0.0;
    let mut latencies = Vec::with_capacity(test.len());
    for answers in per_thread {
        for (q, got, ms) in answers? {
            recall += recall_at(&got, &gt.lists[q], 10);
            latencies.push(ms);
        }
    }
    let n = test.len() as f64;
    let lat = Latency::of(&latencies);
    println!(
        "  {:>5} {:>10.4} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
        l,
        recall / n,
        n / seconds,
        lat.avg,
        lat.p50,
        lat.p95,
        lat.p99
    );
    Ok(())
}

/// Prints hits as score, id, lexname and sentence (from the payload, else `train.txt`).
fn print_hits(hits: &[Hit], train_text: &[String]) {
    for h in hits {
        let payload = h.payload.as_ref();
        let field = |k: &str| payload.and_then(|p| p.get(k)).and_then(|v| v.as_str());
        let text = field("text")
            .map(str::to_string)
            .or_else(|| train_text.get(num(h.id) as usize).cloned())
            .unwrap_or_default();
        println!(
            "    {:.3}  {:>5}  {:<18}  {text}",
            h.score,
            h.id.to_string(),
            field("lexname").unwrap_or("-")
        );
    }
}

/// The query the demo shows answers to, with the sentences to print beside ids.
struct Shown<'a> {
    vector: &'a [f32],
    question: String,
    train_text: Vec<String>,
}

/// The top-5 request of the shown query, with payloads.
fn top5() -> SearchRequest {
    SearchRequest {
        with_payload: true,
        ..SearchRequest::new(5)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    diskvec_index::limits::THREADS.check(args.threads)?;
    let dataset = match args.dataset {
        Some(d) => d,
        None => find_sample()?,
    };
    let tmp;
    let db_dir = match &args.db {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("diskvec-demo-")
                .tempdir()
                .context("making a temporary directory for the demo's database")?;
            tmp.path().to_path_buf()
        }
    };
    println!(
        "diskvec demo: a database on {} (WordNet glosses, all-MiniLM-L6-v2 embeddings)",
        dataset.display()
    );
    println!(
        "database in {}{}",
        db_dir.display(),
        if args.db.is_some() {
            " (kept)"
        } else {
            " (temporary, removed at the end)"
        }
    );
    let source = import_cmd::load_source(&dataset, None).context("loading the demo dataset")?;
    let (test, gt) = load_queries(&dataset, 10)?;
    check_truth_ids(&gt, 10, &source.vectors.ids, "the train vectors")
        .with_context(|| format!("checking the ground truth in {}", dataset.display()))?;

    let db = Database::open(&db_dir)?;
    if db.collection_names().iter().any(|n| n == COLLECTION) {
        bail!(
            "{} already holds a collection {COLLECTION:?}: pass another --db, or remove it with \
             `diskvec db drop --db {} --collection {COLLECTION}`",
            db_dir.display(),
            db_dir.display()
        );
    }
    let (col, indexed) = import(&db, source)?;
    search_table(&col, &test, &gt, args.threads)?;

    let row = SHOWN_QUERY.min(test.len() - 1);
    let shown = Shown {
        vector: test.row(row),
        question: lines(&dataset.join("test.txt"))
            .get(test.ids[row] as usize)
            .map_or_else(|| format!("test query {row}"), |t| format!("{t:?}")),
        train_text: lines(&dataset.join("train.txt")),
    };
    let hits = col.search(shown.vector, &top5())?;
    println!(
        "\n3. query {}: top 5 (score, id, lexname, sentence)",
        shown.question
    );
    print_hits(&hits, &shown.train_text);
    if indexed.contains(&"lexname") {
        filtered(&col, &shown)?;
    }
    let gone: Vec<PointId> = hits.iter().take(DELETED).map(|h| h.id).collect();
    delete(&col, &shown, &gone)?;
    reopen(db, col, &db_dir, &shown, &gone)
}

/// Section 1: creates the collection, indexes `lexname` and `pos` when the payloads have
/// them, writes every point through the log and seals. Returns the indexed fields.
fn import(
    db: &Database,
    source: import_cmd::Source,
) -> anyhow::Result<(Arc<Collection>, Vec<&'static str>)> {
    let import_cmd::Source { vectors, payloads } = source;
    let mut payloads = payloads.map(|(_, p)| p).unwrap_or_default();
    let fields: Vec<String> = payloads
        .values()
        .next()
        .map(|f| f.keys().cloned().collect())
        .unwrap_or_default();
    let (col, _) =
        import_cmd::open_or_create(db, COLLECTION, vectors.dim, &NewCollection::default())?;
    let indexed: Vec<&'static str> = ["lexname", "pos"]
        .into_iter()
        .filter(|f| fields.iter().any(|k| k == f))
        .collect();
    for f in &indexed {
        col.create_payload_index(f, "keyword")?;
    }
    println!(
        "\n1. import: {} points of {} dims, payload fields: {}",
        vectors.len(),
        vectors.dim,
        if fields.is_empty() {
            "none".to_string()
        } else {
            fields.join(", ")
        }
    );
    let (with_payload, write_seconds) =
        import_cmd::write_matrix(&col, &vectors, &mut payloads, 100)?;
    println!(
        "   {:.1} s ({:.0} points/s), 100 points a write, each logged and durable before the next",
        write_seconds,
        vectors.len() as f64 / write_seconds.max(1e-9)
    );
    if with_payload < vectors.len() {
        println!("   {with_payload} of them with a payload");
    }
    if !indexed.is_empty() {
        println!("   keyword indexes on {}", indexed.join(", "));
    }
    let started = Instant::now();
    crate::progress::optimize(&col, false).context("sealing into DiskANN")?;
    let optimize_seconds = started.elapsed().as_secs_f64();
    let info = col.info();
    let (dram, disk) = info
        .segments
        .iter()
        .filter(|s| s.kind == "sealed")
        .fold((0, 0), |(d, s), x| {
            (d + x.dram_bytes as u64, s + x.disk_bytes)
        });
    println!(
        "   optimize: sealed into DiskANN in {optimize_seconds:.1} s; load duration {:.1} s",
        write_seconds + optimize_seconds
    );
    println!(
        "   {} points indexed; {:.1} MiB in DRAM (PQ codes, payloads), {:.1} MiB on disk",
        info.indexed_points,
        mib(dram),
        mib(disk)
    );
    Ok((col, indexed))
}

/// Section 2: recall, QPS and latency of the test queries at a few search lists.
fn search_table(
    col: &Collection,
    test: &Matrix,
    gt: &Neighbors,
    threads: usize,
) -> anyhow::Result<()> {
    println!(
        "\n2. search: {} test queries, k=10, {threads} threads",
        test.len()
    );
    println!(
        "  {:>5} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "L", "recall@10", "QPS", "mean ms", "p50 ms", "p95 ms", "p99 ms"
    );
    for l in [10, 20, 50, 100] {
        search_row(col, test, gt, l, threads)?;
    }
    Ok(())
}

/// Section 4: the shown query restricted to one lexname; fails if a hit does not match.
fn filtered(col: &Collection, shown: &Shown) -> anyhow::Result<()> {
    let filter_json = json!({"must": [{"key": "lexname", "match": {"value": FILTER_LEXNAME}}]});
    let filter = Filter::from_json(&filter_json)?;
    let hits = col.search(
        shown.vector,
        &SearchRequest {
            filter: Some(filter.clone()),
            ..top5()
        },
    )?;
    println!(
        "\n4. the same query, filtered to lexname = {FILTER_LEXNAME} ({} of {} points match)",
        col.count(Some(&filter))?,
        col.len()
    );
    println!("   filter: {filter_json}");
    print_hits(&hits, &shown.train_text);
    let stray = hits.iter().find(|h| {
        h.payload.as_ref().and_then(|p| p.get("lexname")) != Some(&json!(FILTER_LEXNAME))
    });
    ensure!(
        stray.is_none(),
        "the filtered search returned point {}, which does not match the filter",
        stray.map(|h| h.id.to_string()).unwrap_or_default()
    );
    Ok(())
}

/// Section 5: deletes `gone` and shows they are neither found by id nor by search.
fn delete(col: &Collection, shown: &Shown, gone: &[PointId]) -> anyhow::Result<()> {
    let before = col.len();
    col.delete(gone.to_vec())?;
    let after = col.search(shown.vector, &top5())?;
    let still: Vec<String> = col
        .get(gone, false, false)?
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    ensure!(still.is_empty(), "deleted points {still:?} are still there");
    ensure!(
        !after.iter().any(|h| gone.contains(&h.id)),
        "a deleted point is still returned by search"
    );
    let listed: Vec<String> = gone.iter().map(|id| id.to_string()).collect();
    println!(
        "\n5. delete the query's top {} hits ({}): {before} -> {} points; the query's top 5 now:",
        gone.len(),
        listed.join(", "),
        col.len()
    );
    print_hits(&after, &shown.train_text);
    Ok(())
}

/// Section 6: closes the database, opens it again, and checks that it holds what it held:
/// the count, the deletes, and the shown query's top 10.
fn reopen(
    db: Database,
    col: Arc<Collection>,
    dir: &Path,
    shown: &Shown,
    gone: &[PointId],
) -> anyhow::Result<()> {
    let count = col.len();
    let top10 = ids(&col.search(shown.vector, &SearchRequest::new(10))?);
    drop(col);
    db.close()?;
    drop(db);
    let started = Instant::now();
    let db = Database::open(dir)?;
    let col = db.collection(COLLECTION)?;
    let seconds = started.elapsed().as_secs_f64();
    let r = col.recovery();
    println!(
        "\n6. close and reopen ({seconds:.2} s): {} sealed segment{} of {} points opened, \
         {} logged write{} replayed",
        r.sealed_segments,
        plural(r.sealed_segments as u64),
        r.sealed_points,
        r.replayed_ops,
        plural(r.replayed_ops)
    );
    let count_again = col.len();
    let same_top = ids(&col.search(shown.vector, &SearchRequest::new(10))?) == top10;
    let still_gone = col.get(gone, false, false)?.is_empty();
    let passed = count_again == count && same_top && still_gone;
    println!(
        "   reopen check: {count_again} points ({count} before), deleted points {}, \
         the query's top 10 {}: {}",
        if still_gone { "still gone" } else { "BACK" },
        if same_top { "the same" } else { "DIFFERENT" },
        if passed { "passed" } else { "FAILED" }
    );
    ensure!(passed, "the reopened database differs from the one closed");
    drop(col);
    db.close()?;
    Ok(())
}
