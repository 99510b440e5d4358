//! `diskvec cluster ...`: operating a cluster through any of its nodes' API.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Move replicas so that every live node holds an even share of each collection's
    /// replicas (each move: the new replica built from the shard's log, then the old dropped)
    Rebalance(RebalanceArgs),
}

#[derive(clap::Args)]
pub struct RebalanceArgs {
    /// Any node of the cluster
    #[arg(long, default_value = "http://127.0.0.1:6333")]
    url: String,
    /// Only this collection (default: every collection)
    #[arg(long)]
    collection: Option<String>,
    /// Give up waiting for the moves after this many seconds (they go on in the cluster)
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Print the moves without making them
    #[arg(long)]
    dry_run: bool,
    /// API key, if the nodes ask for one; also from DISKVEC_API_KEY
    #[arg(long, env = "DISKVEC_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

pub fn run(c: Command) -> anyhow::Result<()> {
    match c {
        Command::Rebalance(a) => rebalance(a),
    }
}

struct Api {
    url: String,
    key: Option<String>,
    agent: ureq::Agent,
}

impl Api {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let mut req = self
            .agent
            .request(method, &format!("{}{path}", self.url.trim_end_matches('/')));
        if let Some(k) = &self.key {
            req = req.set("api-key", k);
        }
        let answer = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        let response = match answer {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                bail!(
                    "{method} {path}: {code} {}",
                    r.into_string().unwrap_or_default()
                )
            }
            Err(e) => return Err(e).with_context(|| format!("{method} {path}")),
        };
        let v: Value = response
            .into_json()
            .with_context(|| format!("{method} {path}: an answer that is not JSON"))?;
        Ok(v.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Which peers hold each shard of `name`, and the shard transfers under way.
    fn layout(&self, name: &str) -> anyhow::Result<(Vec<Vec<u64>>, usize)> {
        let info = self.call("GET", &format!("/collections/{name}/cluster"), None)?;
        let count = info["shard_count"].as_u64().context("no shard_count")? as usize;
        let mut shards = vec![Vec::new(); count];
        let me = info["peer_id"].as_u64().context("no peer_id")?;
        for s in info["local_shards"].as_array().into_iter().flatten() {
            shards[s["shard_id"].as_u64().unwrap_or(0) as usize].push(me);
        }
        for s in info["remote_shards"].as_array().into_iter().flatten() {
            let peer = s["peer_id"]
                .as_u64()
                .context("a remote shard without peer_id")?;
            shards[s["shard_id"].as_u64().unwrap_or(0) as usize].push(peer);
        }
        let transfers = info["shard_transfers"].as_array().map_or(0, Vec::len);
        Ok((shards, transfers))
    }
}

fn rebalance(a: RebalanceArgs) -> anyhow::Result<()> {
    let api = Api {
        url: a.url.clone(),
        key: a.api_key.clone().filter(|k| !k.is_empty()),
        agent: ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build(),
    };
    let cluster = api.call("GET", "/cluster", None)?;
    if cluster["status"] != json!("enabled") {
        bail!(
            "{} is not a node of a cluster (GET /cluster: {cluster})",
            a.url
        );
    }
    let peers: BTreeMap<u64, String> = cluster["peers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(id, p)| Some((id.parse().ok()?, p["uri"].as_str()?.to_string())))
        .collect();
    let live: Vec<u64> = peers.keys().copied().collect();
    let names: Vec<String> = match &a.collection {
        Some(n) => vec![n.clone()],
        None => api.call("GET", "/collections", None)?["collections"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect(),
    };
    println!("{} live nodes; {} collections", live.len(), names.len());
    let mut started = Vec::new();
    for name in &names {
        let (shards, transfers) = api.layout(name)?;
        if transfers > 0 {
            println!("{name}: {transfers} transfers under way already; left as it is");
            continue;
        }
        let moves = diskvec_cluster::rebalance::plan(&shards, &live);
        if moves.is_empty() {
            println!("{name}: balanced");
            continue;
        }
        for (shard, from, to) in moves {
            println!(
                "{name}: shard {shard} from {} to {}",
                peers.get(&from).map_or("?", String::as_str),
                peers.get(&to).map_or("?", String::as_str)
            );
            if !a.dry_run {
                api.call(
                    "POST",
                    &format!("/collections/{name}/cluster"),
                    Some(json!({"move_shard": {"shard_id": shard, "from_peer_id": from, "to_peer_id": to}})),
                )?;
            }
        }
        started.push(name.clone());
    }
    if a.dry_run || started.is_empty() {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    for name in &started {
        loop {
            let (_, transfers) = api.layout(name)?;
            if transfers == 0 {
                println!("{name}: moves done");
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{name}: {transfers} moves still under way after {} s (they go on)",
                    a.timeout
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    Ok(())
}
