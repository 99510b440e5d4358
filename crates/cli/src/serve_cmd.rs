//! `diskvec serve`: the Qdrant-compatible HTTP server over a database directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use diskvec_db::{Database, DbOptions, MemoryBudget};
use diskvec_server::Keys;

#[derive(clap::Args)]
pub struct Args {
    /// Database directory (created if missing; recovered if a previous run was killed)
    #[arg(long)]
    db: PathBuf,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (Qdrant's REST port by default; 0 picks a free one)
    #[arg(long, default_value_t = 6333)]
    port: u16,
    /// Key every request must present (`api-key` header); also from DISKVEC_API_KEY
    #[arg(long, env = "DISKVEC_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A second key that may only read; also from DISKVEC_READ_ONLY_API_KEY
    #[arg(long, env = "DISKVEC_READ_ONLY_API_KEY", hide_env_values = true)]
    read_only_api_key: Option<String>,
    /// Memory the background builds (seals, merges) of all collections may use together:
    /// bytes (4GiB) or auto (half of the memory available when a build starts)
    #[arg(long, default_value = "auto", value_parser = db_budget)]
    build_memory: MemoryBudget,
    /// DRAM the searches of all collections may hold beyond their compressed vectors
    /// (navigation data, then node records): bytes (4GiB), 0, or auto (three quarters of the memory
    /// available, counting what they hold)
    #[arg(long, default_value = "auto", value_parser = db_search_budget)]
    search_memory: MemoryBudget,
    /// PQ codes the sealed segments steer by: auto (the full ones where memory holds them
    /// with room to spare, else the compact ones, a quarter of the bytes), full or compact
    #[arg(long, default_value = "auto", value_parser = pq_codes)]
    pq_codes: diskvec_db::PqCodes,
}

fn pq_codes(text: &str) -> Result<diskvec_db::PqCodes, String> {
    text.parse().map_err(|e: diskvec_db::DbError| e.to_string())
}

fn db_budget(text: &str) -> Result<MemoryBudget, String> {
    let budget: MemoryBudget = text.parse().map_err(|e| format!("{e}"))?;
    DbOptions {
        build_memory: budget,
        ..Default::default()
    }
    .check()
    .map_err(|e| e.to_string())?;
    Ok(budget)
}

pub fn db_search_budget(text: &str) -> Result<MemoryBudget, String> {
    let budget = diskvec_db::parse_search_memory(text).map_err(|e| e.to_string())?;
    DbOptions {
        search_memory: budget,
        ..Default::default()
    }
    .check()
    .map_err(|e| e.to_string())?;
    Ok(budget)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!("diskvec serve: opening {}", args.db.display());
    let db = Arc::new(
        Database::open_with_options(
            &args.db,
            DbOptions {
                build_memory: args.build_memory,
                search_memory: args.search_memory,
                pq_codes: args.pq_codes,
            },
        )
        .with_context(|| format!("opening {}", args.db.display()))?,
    );
    for name in db.collection_names() {
        let col = db.collection(&name)?;
        let r = col.recovery();
        let info = col.info();
        eprintln!(
            "diskvec serve: collection {name:?}: {} points in {} segments; replayed {} log records{}",
            info.points,
            info.segments.len(),
            r.replayed_ops,
            r.torn_tail
                .as_ref()
                .map(|t| format!(", cut a torn tail ({t})"))
                .unwrap_or_default()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("diskvec-http")
        .build()
        .context("starting the HTTP runtime")?;
    let keys = Keys {
        api_key: args.api_key.filter(|k| !k.is_empty()),
        read_only_key: args.read_only_api_key.filter(|k| !k.is_empty()),
    };
    if keys.read_only_key.is_some() && keys.api_key.is_none() {
        anyhow::bail!(
            "--read-only-api-key needs --api-key too (without one every request may write)"
        );
    }
    runtime.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", args.host, args.port)
            .parse()
            .with_context(|| format!("not an address: {}:{}", args.host, args.port))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let bound = listener.local_addr()?;
        eprintln!(
            "diskvec serve: listening on http://{bound} ({}), ready in {:.2} s",
            if keys.api_key.is_some() {
                "API key required"
            } else {
                "no API key"
            },
            started.elapsed().as_secs_f64()
        );
        diskvec_server::serve(db, keys, listener, shutdown_signal()).await?;
        eprintln!("diskvec serve: stopped; every acknowledged write is durable");
        Ok(())
    })
}

/// SIGTERM or Ctrl-C: stop accepting, finish what is in flight, close the database.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("diskvec serve: shutting down");
}
