//! `diskvec query`: one search of a collection, with a query vector taken from a dataset's
//! test queries or from a stored point, or one universal query given as Qdrant's
//! `points/query` body (prefetches, fusion, named and sparse spaces, formulas...).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use diskvec_dataset::{read_vectors, DatasetDir};
use diskvec_db::{Filter, Hit, PointId, SearchRequest};
use serde_json::json;

use crate::db_cmd::open_existing;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("query").required(true).args(["vector_from", "id", "body", "test_queries"])))]
pub struct Args {
    #[arg(long)]
    pub db: PathBuf,
    #[arg(long)]
    pub collection: String,
    /// Query with row ROW (default 0) of a dataset directory's test queries or of a vector file.
    #[arg(long, value_name = "DS[:ROW]")]
    pub vector_from: Option<String>,
    /// Query with the vector of the stored point ID.
    #[arg(long)]
    pub id: Option<u64>,
    /// A Qdrant `points/query` body (JSON), e.g. a hybrid query:
    /// '{"prefetch": [{"query": [..], "using": "text"}, {"query": {"indices": [..], "values":
    /// [..]}, "using": "words"}], "query": {"fusion": "rrf"}, "limit": 10}'. Its limit, filter
    /// and params apply (not --k, --filter, --search-list).
    #[arg(long, value_name = "JSON")]
    pub body: Option<String>,
    /// Run every test query of dataset directory DS and report recall against its ground
    /// truth, QPS, latency and SSD reads a query, at each --search-list given.
    #[arg(long, value_name = "DS")]
    pub test_queries: Option<PathBuf>,
    /// Threads sending --test-queries.
    #[arg(long, default_value_t = 1, requires = "test_queries")]
    pub threads: usize,
    /// Only the first N --test-queries (0: all).
    #[arg(long, default_value_t = 0, requires = "test_queries")]
    pub limit: usize,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Qdrant filter JSON, e.g. '{"must":[{"key":"pos","match":{"value":"noun"}}]}'.
    #[arg(long)]
    pub filter: Option<String>,
    /// L of the sealed segments' graph search (default: the collection's); with
    /// --test-queries, a comma-separated list of them.
    #[arg(long, value_delimiter = ',')]
    pub search_list: Vec<usize>,
    /// Print each hit's payload.
    #[arg(long)]
    pub with_payload: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A filter from its JSON text; a syntax error names its line and column.
pub fn parse_filter(text: &str) -> anyhow::Result<Filter> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| anyhow!("the filter is not valid JSON: {e}"))?;
    Filter::from_json(&value).map_err(|e| anyhow!("bad filter: {e}"))
}

/// `DS` or `DS:ROW`. A path that exists as given wins, so a path holding ':' still works.
fn split_row(spec: &str) -> (PathBuf, usize) {
    if Path::new(spec).exists() {
        return (PathBuf::from(spec), 0);
    }
    if let Some((path, row)) = spec.rsplit_once(':') {
        if let Ok(row) = row.parse::<usize>() {
            return (PathBuf::from(path), row);
        }
    }
    (PathBuf::from(spec), 0)
}

/// Row `row` of a dataset directory's test queries, or of a vector file; and where it came from.
pub fn vector_from(spec: &str) -> anyhow::Result<(Vec<f32>, String)> {
    let (path, row) = split_row(spec);
    let (file, m) = if path.is_dir() {
        let d = DatasetDir::open(&path)?;
        (d.test_path()?, d.test()?)
    } else {
        (path.clone(), read_vectors(&path)?)
    };
    if row >= m.len() {
        bail!(
            "{} has {} vectors; row {row} is past the end",
            file.display(),
            m.len()
        );
    }
    Ok((
        m.row(row).to_vec(),
        format!("row {row} of {}", file.display()),
    ))
}

fn hit_json(rank: usize, h: &Hit) -> serde_json::Value {
    let mut j = json!({"rank": rank, "id": h.id, "score": h.score});
    if let Some(p) = &h.payload {
        j["payload"] = serde_json::Value::Object(p.clone());
    }
    j
}

/// The query vector of a plain search, and where it came from.
fn query_vector(args: &Args, col: &diskvec_db::Collection) -> anyhow::Result<(Vec<f32>, String)> {
    Ok(match (&args.vector_from, args.id) {
        (Some(spec), _) => vector_from(spec)?,
        (None, Some(id)) => {
            let found = col.get(&[PointId::Num(id)], false, true)?;
            let vector = found
                .into_iter()
                .next()
                .and_then(|r| r.vector().map(<[f32]>::to_vec))
                .ok_or_else(|| {
                    anyhow!("collection {:?} has no point with id {id}", args.collection)
                })?;
            (vector, format!("the vector of point {id}"))
        }
        (None, None) => bail!("give --vector-from DS[:ROW], --id ID or --body JSON"),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let filter = args.filter.as_deref().map(parse_filter).transpose()?;
    let db = open_existing(&args.db)?;
    let col = db.collection(&args.collection)?;
    if let Some(dataset) = &args.test_queries {
        crate::query_recall::run(
            &col,
            dataset,
            args.k,
            &args.search_list,
            args.threads,
            args.limit,
            args.json,
        )?;
        drop(col);
        return Ok(db.close()?);
    }
    if args.search_list.len() > 1 {
        bail!("several --search-list values are for --test-queries; a single query takes one");
    }
    let started = Instant::now();
    let (hits, source) = match &args.body {
        Some(text) => {
            let body: serde_json::Value =
                serde_json::from_str(text).map_err(|e| anyhow!("--body is not valid JSON: {e}"))?;
            let request = diskvec_db::query::json::request(&body, &db)?;
            let hits = col
                .query(&request, args.with_payload, false)
                .with_context(|| format!("querying collection {:?}", args.collection))?;
            (hits, "the query body".to_string())
        }
        None => {
            let (query, source) = query_vector(&args, &col)?;
            let request = SearchRequest {
                filter,
                search_list: args.search_list.first().copied(),
                with_payload: args.with_payload,
                ..SearchRequest::new(args.k)
            };
            let hits = col
                .search(&query, &request)
                .with_context(|| format!("searching collection {:?}", args.collection))?;
            (hits, source)
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let hits: Vec<_> = hits
            .iter()
            .enumerate()
            .map(|(i, h)| hit_json(i + 1, h))
            .collect();
        println!(
            "{}",
            json!({"collection": args.collection, "query": source, "k": args.k,
                   "seconds": seconds, "hits": hits})
        );
    } else {
        println!(
            "collection {:?}, query: {source}; {} hits in {:.2} ms",
            args.collection,
            hits.len(),
            seconds * 1000.0
        );
        println!("{:>4}  {:>10}  {:>7}", "rank", "id", "score");
        for (i, h) in hits.iter().enumerate() {
            let payload = h
                .payload
                .as_ref()
                .map(|p| format!("  {}", serde_json::Value::Object(p.clone())))
                .unwrap_or_default();
            println!(
                "{:>4}  {:>10}  {:>7.4}{payload}",
                i + 1,
                h.id.to_string(),
                h.score
            );
        }
    }
    drop(col);
    db.close()?;
    Ok(())
}
