//! `diskvec db info` and `diskvec db drop`: what a database holds, and removing a collection.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use diskvec_db::{Collection, Database};
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Per collection: status, points, segments, payload indexes, log size, what recovery replayed.
    Info(InfoArgs),
    /// Remove a collection and its files.
    Drop(DropArgs),
}

#[derive(clap::Args)]
pub struct InfoArgs {
    #[arg(long)]
    pub db: PathBuf,
    /// Only this collection (default: all).
    #[arg(long)]
    pub collection: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct DropArgs {
    #[arg(long)]
    pub db: PathBuf,
    #[arg(long)]
    pub collection: String,
}

/// Opens a database that must exist: `Database::open` would create an empty one, which
/// would hide a mistyped path behind "no such collection". These commands run a query or
/// two and exit, so the node caches stay empty (search memory 0): filling them would read
/// the sealed segments' nodes for nothing.
pub fn open_existing(dir: &Path) -> anyhow::Result<Database> {
    if !dir.join("collections").is_dir() {
        bail!(
            "{} is not a diskvec database (no collections directory); `diskvec import` creates one",
            dir.display()
        );
    }
    let options = diskvec_db::DbOptions {
        search_memory: diskvec_db::MemoryBudget::Bytes(0),
        ..Default::default()
    };
    Database::open_with_options(dir, options)
        .with_context(|| format!("opening the database {}", dir.display()))
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Info(a) => info(a),
        Command::Drop(a) => drop_collection(a),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn info(args: InfoArgs) -> anyhow::Result<()> {
    let db = open_existing(&args.db)?;
    let names = match &args.collection {
        Some(n) => vec![n.clone()],
        None => db.collection_names(),
    };
    let collections = names
        .iter()
        .map(|n| db.collection(n))
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        let all: Vec<serde_json::Value> = collections
            .iter()
            .map(|c| {
                let mut j = serde_json::to_value(c.info())?;
                j["recovery"] = serde_json::to_value(c.recovery())?;
                Ok(j)
            })
            .collect::<serde_json::Result<_>>()?;
        println!(
            "{}",
            json!({"db": args.db.display().to_string(), "collections": all})
        );
    } else {
        println!(
            "database {}: {} collection{}",
            args.db.display(),
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        );
        for c in &collections {
            print_collection(c);
        }
    }
    drop(collections);
    db.close()?;
    Ok(())
}

fn print_collection(c: &Collection) {
    let info = c.info();
    let config = &info.config;
    println!(
        "\ncollection {:?}: {}, {} points ({} indexed), {}",
        info.name,
        format!("{:?}", info.status).to_lowercase(),
        info.points,
        info.indexed_points,
        config.describe_spaces()
    );
    if let Some(e) = &info.error {
        println!("  error: {e}");
    }
    println!(
        "  {:>6} {:<8} {:>9} {:>9} {:>10} {:>10}",
        "id", "kind", "points", "deleted", "DRAM MiB", "disk MiB"
    );
    for s in &info.segments {
        println!(
            "  {:>6} {:<8} {:>9} {:>9} {:>10.2} {:>10.2}",
            s.id,
            s.kind,
            s.points,
            s.deleted,
            mib(s.dram_bytes as u64),
            mib(s.disk_bytes)
        );
    }
    let m = &info.search_memory;
    println!(
        "  search memory: {} ({} nodes; navigation {:.1} MiB)",
        m.setting,
        m.nodes,
        mib(m.navigation_bytes)
    );
    println!(
        "  PQ codes in DRAM: {:.1} MiB{}",
        mib(m.code_bytes),
        if m.compact_code_segments > 0 {
            format!(" (compact in {} segments)", m.compact_code_segments)
        } else {
            String::new()
        }
    );
    let indexes: Vec<String> = info
        .payload_indexes
        .iter()
        .map(|(f, k)| format!("{f} ({k})"))
        .collect();
    println!(
        "  payload indexes: {}",
        if indexes.is_empty() {
            "none".to_string()
        } else {
            indexes.join(", ")
        }
    );
    println!(
        "  write-ahead log: {} bytes, last op {}; {} seals since opening",
        info.wal_bytes, info.last_op, info.seals_done
    );
    let r = c.recovery();
    println!(
        "  opening: {} sealed segments ({} points); log records replayed after op {}: {}; {:.3} s",
        r.sealed_segments, r.sealed_points, r.checkpoint_op, r.replayed_ops, r.seconds
    );
    if let Some(t) = &r.torn_tail {
        println!("  torn log tail cut: {t}");
    }
    if !r.removed_segments.is_empty() {
        println!(
            "  removed segments of an interrupted seal: {}",
            r.removed_segments.join(", ")
        );
    }
}

fn drop_collection(args: DropArgs) -> anyhow::Result<()> {
    let db = open_existing(&args.db)?;
    let points = db.collection(&args.collection)?.len();
    db.drop_collection(&args.collection)?;
    db.close()?;
    println!(
        "dropped collection {:?} ({points} points) from {}",
        args.collection,
        args.db.display()
    );
    Ok(())
}
