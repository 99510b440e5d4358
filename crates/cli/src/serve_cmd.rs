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
    /// Storage paths (devices, NVMe-oF namespaces) collections may be striped over, and
    /// their logs kept on: a client's `paths` and `wal_path` settings pick among these,
    /// never name others. Comma-separated
    #[arg(long, value_delimiter = ',')]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    guard: crate::serve_guard::GuardArgs,
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
    /// Join a cluster whose control plane is this etcd: etcd://HOST:PORT[,HOST:PORT...]
    /// (https://HOST:PORT,... for TLS). Needs --log, --node-id and the cluster's secret
    /// (--cluster-secret-file or DISKVEC_CLUSTER_SECRET)
    #[arg(long, requires_all = ["log", "node_id"])]
    cluster: Option<String>,
    /// The cluster's replicated log, NATS JetStream servers: nats://HOST:PORT[,HOST:PORT...]
    /// (tls://HOST:PORT,... for TLS)
    #[arg(long, requires = "cluster")]
    log: Option<String>,
    /// This node's name in the cluster, the same across restarts (its replicas are found by it)
    #[arg(long, requires = "cluster")]
    node_id: Option<String>,
    /// The URL other nodes reach this one at (default: http:// and the address listened on)
    #[arg(long, requires = "cluster")]
    advertise: Option<String>,
    /// Messages each shard's log keeps below where every live replica has applied it (older
    /// ones are trimmed; a replica further behind is rebuilt from a snapshot of another)
    #[arg(long, default_value_t = 100_000, requires = "cluster")]
    log_retain: u64,
    /// The database directory is on storage every node mounts at the same path (a cluster
    /// file system over shared NVMe-oF namespaces, NFS): a new replica between two such
    /// nodes links the other's sealed segments where they lie instead of copying them
    #[arg(long, requires = "cluster")]
    shared_storage: bool,
    /// Boxed: the command enum stays small (a dozen paths and names).
    #[command(flatten)]
    access: Box<crate::cluster_access::Access>,
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
    let keys = args.guard.keys()?;
    let limits = args.guard.limits()?;
    let host: std::net::IpAddr = args
        .host
        .parse()
        .with_context(|| format!("--host {:?}: not an IP address", args.host))?;
    args.guard.check_exposure(host, &keys)?;
    let storage_paths = diskvec_db::StoragePaths::only(&args.paths)
        .context("opening the storage paths (--paths)")?;
    eprintln!("diskvec serve: opening {}", args.db.display());
    let db = Arc::new(
        Database::open_with_options(
            &args.db,
            DbOptions {
                build_memory: args.build_memory,
                search_memory: args.search_memory,
                pq_codes: args.pq_codes,
                storage_paths,
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
    runtime.block_on(async move {
        let addr = SocketAddr::new(host, args.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let bound = listener.local_addr()?;
        let cluster = match &args.cluster {
            None => None,
            Some(spec) => Some(join_cluster(&args, spec, bound, &db, &keys).await?),
        };
        eprintln!(
            "diskvec serve: listening on http://{bound} ({}), ready in {:.2} s",
            if keys.api_key.is_some() {
                "API key required"
            } else {
                "no API key"
            },
            started.elapsed().as_secs_f64()
        );
        diskvec_server::serve(db, keys, limits, cluster, listener, shutdown_signal()).await?;
        eprintln!("diskvec serve: stopped; every acknowledged write is durable");
        Ok(())
    })
}

/// Registers this node in the cluster (its key under a lease in etcd) and connects to the
/// log; the node's replicas are opened once it serves.
async fn join_cluster(
    args: &Args,
    spec: &str,
    bound: SocketAddr,
    db: &Arc<Database>,
    keys: &Keys,
) -> anyhow::Result<Arc<diskvec_server::ClusterState>> {
    let node_id = args.node_id.clone().context("--cluster needs --node-id")?;
    let log_spec = args.log.clone().context("--cluster needs --log")?;
    if node_id.is_empty() || node_id.contains('/') {
        anyhow::bail!("--node-id {node_id:?}: give a non-empty name without '/'");
    }
    let url = args
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{bound}"))
        .trim_end_matches('/')
        .to_string();
    let settings = args.access.settings(spec, &log_spec)?;
    let log = diskvec_cluster::Log::connect(&settings.log, settings.secret.clone())
        .await
        .with_context(|| format!("connecting to the log at {log_spec}"))?;
    let me = diskvec_cluster::NodeInfo { id: node_id, url };
    let (etcd, secret) = (settings.etcd, settings.secret.clone());
    let node = tokio::task::spawn_blocking(move || {
        let etcd = diskvec_cluster::Etcd::connect(&etcd)?;
        diskvec_cluster::node::check_secret(&etcd, &secret)?;
        diskvec_cluster::ClusterNode::join(etcd, me)
    })
    .await?
    .with_context(|| format!("joining the cluster at {spec}"))?;
    eprintln!(
        "diskvec serve: node {} joined the cluster ({} live nodes)",
        node.me.id,
        node.view().nodes.len()
    );
    Ok(diskvec_server::ClusterState::new(
        node,
        Arc::clone(db),
        log,
        db.dir().join("cluster"),
        diskvec_server::NodeSettings {
            api_key: keys.api_key.clone(),
            log_retain: args.log_retain,
            shared_storage: args.shared_storage,
            secret: settings.secret,
        },
    ))
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
