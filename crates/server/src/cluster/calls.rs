//! Requests to replicas: this node's own through its API in-process, other nodes' over HTTP;
//! and the choice of a live replica per shard, the next one on failure.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Method, StatusCode};
use diskvec_cluster::map::replica_name;
use diskvec_cluster::CollectionMap;
use serde_json::Value;
use tower::ServiceExt;

use super::split::LogMessage;
use super::{ClusterState, APPLY_HEADER, INTERNAL_HEADER, ROUTED_HEADER};
use crate::envelope::ApiError;

/// A replica's answer: HTTP status and the envelope's `result` (or the whole body when it
/// has none).
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    pub fn result(&self) -> &Value {
        self.body.get("result").unwrap_or(&Value::Null)
    }

    /// The error a failed answer carries, in the envelope's words.
    pub fn error(&self) -> ApiError {
        let message = self
            .body
            .get("status")
            .and_then(|s| s.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| self.body.to_string());
        ApiError {
            status: self.status,
            message,
            retry_after: None,
        }
    }
}

/// What a router asks of the replica it reads: to be of the collection incarnation `uid`
/// (and caught up), and to have applied its log up to `at_least` (a read that must not be
/// stale: the log's end when the read began).
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub uid: u64,
    pub at_least: u64,
}

impl Route {
    pub fn of(uid: u64) -> Self {
        Self { uid, at_least: 0 }
    }

    /// `uid` or `uid:at_least`, the value of the routed header.
    pub fn header(&self) -> String {
        if self.at_least == 0 {
            self.uid.to_string()
        } else {
            format!("{}:{}", self.uid, self.at_least)
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        let (uid, at_least) = value.split_once(':').unwrap_or((value, "0"));
        Some(Self {
            uid: uid.parse().ok()?,
            at_least: at_least.parse().ok()?,
        })
    }
}

/// A read asked of a shard's replica: `tail` after `/collections/<name>@<shard>`; `fresh`
/// when it must not be older than the log's end as the read begins (`consistency`).
pub struct ShardRead {
    pub method: Method,
    pub tail: String,
    pub body: Bytes,
    pub fresh: bool,
}

/// On whose behalf a node calls its own API.
#[derive(Clone, Copy, Debug)]
pub enum Via {
    /// A router reading a replica.
    Router(Route),
    /// The node keeping its replica: creating it, applying its log.
    Apply,
}

/// How long a read waits on one replica when another could answer instead.
const TRY_NEXT_AFTER: Duration = Duration::from_secs(3);
/// How long a read waits on the last replica it can ask.
const LAST_TRY_PATIENCE: Duration = Duration::from_secs(60);

impl ClusterState {
    /// `method path_and_query` with `body` on node `node` (this node in-process), as a router
    /// reading a replica of the collection incarnation `uid`; given up after `patience` when
    /// it is another node (a hung node must not hold the request).
    pub(super) async fn call(
        &self,
        node: &str,
        method: &Method,
        path_and_query: &str,
        body: Bytes,
        patience: Duration,
        route: Route,
    ) -> Result<Answer, ApiError> {
        if node == self.node.me.id {
            return self
                .call_local(method, path_and_query, body, Via::Router(route))
                .await;
        }
        let url = self.url_of(node)?;
        let agent = self.http.clone();
        let (key, token) = (self.api_key.clone(), self.secret.node_token().to_string());
        let method = method.clone();
        let target = format!("{url}{path_and_query}");
        let node = node.to_string();
        tokio::task::spawn_blocking(move || {
            let mut req = agent
                .request(method.as_str(), &target)
                .timeout(patience)
                .set(ROUTED_HEADER, &route.header())
                .set(INTERNAL_HEADER, &token)
                .set("content-type", "application/json");
            if let Some(k) = &key {
                req = req.set("api-key", k);
            }
            let outcome = if body.is_empty() {
                req.call()
            } else {
                req.send_bytes(&body)
            };
            let (status, response) = match outcome {
                Ok(r) => (r.status(), r),
                Err(ureq::Error::Status(code, r)) => (code, r),
                Err(e) => {
                    return Err(ApiError::unavailable(format!(
                        "node {node} did not answer: {e}"
                    )))
                }
            };
            let text = response.into_string().map_err(|e| {
                ApiError::unavailable(format!("node {node}: reading its answer: {e}"))
            })?;
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            Ok(Answer {
                status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                body,
            })
        })
        .await
        .map_err(|e| ApiError::unavailable(format!("a call to node failed: {e}")))?
    }

    /// Where live node `node`'s API answers.
    fn url_of(&self, node: &str) -> Result<String, ApiError> {
        self.node
            .view()
            .nodes
            .get(node)
            .map(|n| n.url.clone())
            .ok_or_else(|| ApiError::unavailable(format!("node {node} is not live")))
    }

    /// Fetches `method path` (POST where the answer is given once) from node `node` into the
    /// file `into` (made durable), within `patience`. A refusal keeps its status (404: the
    /// file is not there).
    pub(super) async fn download(
        &self,
        node: &str,
        method: &Method,
        path: &str,
        into: &std::path::Path,
        patience: Duration,
    ) -> Result<(), ApiError> {
        let url = self.url_of(node)?;
        let (agent, key, into) = (self.http.clone(), self.api_key.clone(), into.to_path_buf());
        let target = format!("{url}{path}");
        let (method, token) = (method.clone(), self.secret.node_token().to_string());
        tokio::task::spawn_blocking(move || {
            let mut req = agent
                .request(method.as_str(), &target)
                .timeout(patience)
                .set(INTERNAL_HEADER, &token);
            if let Some(k) = &key {
                req = req.set("api-key", k);
            }
            let response = req.call().map_err(|e| match e {
                ureq::Error::Status(code, r) => {
                    let text = r.into_string().unwrap_or_default();
                    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                    Answer {
                        status: StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
                        body,
                    }
                    .error()
                }
                other => ApiError::unavailable(format!("{target}: {other}")),
            })?;
            let failed =
                |e: std::io::Error| ApiError::unavailable(format!("{}: {e}", into.display()));
            if let Some(dir) = into.parent() {
                std::fs::create_dir_all(dir).map_err(failed)?;
            }
            let mut file = std::fs::File::create(&into).map_err(failed)?;
            std::io::copy(&mut response.into_reader(), &mut file)
                .and_then(|_| file.sync_all())
                .map_err(failed)
        })
        .await
        .map_err(|e| ApiError::unavailable(format!("a download failed: {e}")))?
    }

    /// A request to this node's own API, as a router's read or as the node's own work on
    /// its replica.
    pub(super) async fn call_local(
        &self,
        method: &Method,
        path_and_query: &str,
        body: Bytes,
        via: Via,
    ) -> Result<Answer, ApiError> {
        let router = self
            .router
            .get()
            .cloned()
            .ok_or_else(|| ApiError::unavailable("the node is starting"))?;
        let mut req = axum::http::Request::builder()
            .method(method.clone())
            .uri(path_and_query)
            .header(INTERNAL_HEADER, self.secret.node_token())
            .header("content-type", "application/json");
        req = match via {
            Via::Router(route) => req.header(ROUTED_HEADER, route.header()),
            Via::Apply => req.header(APPLY_HEADER, "1"),
        };
        if let Some(k) = &self.api_key {
            req = req.header("api-key", k);
        }
        let req = req
            .body(Body::from(body))
            .map_err(|e| ApiError::bad_request(format!("building a local request: {e}")))?;
        let response = router
            .oneshot(req)
            .await
            .map_err(|e| ApiError::unavailable(format!("local request: {e}")))?;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|e| ApiError::unavailable(format!("local answer: {e}")))?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer { status, body })
    }

    /// The live replicas of `shard` in the order the shard's placement lists them (every node
    /// names the same first one).
    pub(super) fn placed_live(&self, map: &CollectionMap, shard: u32) -> Vec<String> {
        let view = self.node.view();
        map.shards[shard as usize]
            .replicas
            .iter()
            .filter(|r| view.is_alive(r))
            .cloned()
            .collect()
    }

    /// The live replicas of `shard`, in the order to ask them: this node's first, then the
    /// others starting from a turn that moves with every request (spreading the reads).
    pub(super) fn live_replicas(&self, map: &CollectionMap, shard: u32) -> Vec<String> {
        let mut live = self.placed_live(map, shard);
        if let Some(me) = live.iter().position(|r| *r == self.node.me.id) {
            let mine = live.remove(me);
            live.insert(0, mine);
        } else if !live.is_empty() {
            let turn = self.turn.fetch_add(1, Ordering::Relaxed) % live.len();
            live.rotate_left(turn);
        }
        live
    }

    /// A read on one replica of `shard`: `tail` after `/collections/<name>@<shard>`, trying
    /// the next live replica when one is unreachable, overloaded or catching up (5xx).
    pub(super) async fn read_shard(
        &self,
        name: &str,
        map: &CollectionMap,
        shard: u32,
        read: &ShardRead,
    ) -> Result<Answer, ApiError> {
        let ShardRead {
            method,
            tail,
            body,
            fresh,
        } = read;
        let path_name = replica_name(name, shard);
        let mut route = Route::of(map.uid);
        if *fresh {
            // Not stale: the replica must have applied everything the log held when the read
            // began (every write acknowledged before it). Where the log ends is learnt by
            // appending a barrier to it: acknowledged only once a quorum of the log's servers
            // stored it, after every message acknowledged before. (Asking a server for the
            // log's end can be answered by one cut off from the others, which does not know
            // of the writes the others took meanwhile.)
            route.at_least = self
                .log
                .publish(
                    &map.stream_name(name, shard),
                    Bytes::from(LogMessage::barrier().to_bytes()),
                )
                .await
                .map_err(|e| ApiError::unavailable(e.to_string()))?;
        }
        let path = format!("/collections/{path_name}{tail}");
        let mut last = None;
        let nodes = self.live_replicas(map, shard);
        for (k, node) in nodes.iter().enumerate() {
            // Another replica to try: a replica slower than this is taken for hung (its lease
            // lapses within the TTL and the map stops naming it); the last one gets all the time.
            let patience = if k + 1 < nodes.len() {
                TRY_NEXT_AFTER
            } else {
                LAST_TRY_PATIENCE
            };
            let answer = self
                .call(node, method, &path, body.clone(), patience, route)
                .await;
            match answer {
                // A replica not (yet) there answers 404 for the collection: another may hold it.
                Ok(a)
                    if a.status == StatusCode::NOT_FOUND
                        && a.error().message.contains(&path_name) =>
                {
                    last = Some(a.error())
                }
                Ok(a) if !a.status.is_server_error() => return Ok(a),
                Ok(a) => last = Some(a.error()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            ApiError::unavailable(format!(
                "no live replica of shard {shard} of collection {name}"
            ))
        }))
    }

    /// Each of `shards`' answer to `body` at `tail` (a step of request `r`: its method at
    /// its own tail, else a POST), concurrently, read by `read_out`; in the shards' order.
    pub(super) async fn each_shard<T>(
        self: &Arc<Self>,
        map: &CollectionMap,
        r: &super::Routed,
        shards: &[u32],
        tail: &str,
        body: &Value,
        read_out: impl Fn(&Value) -> T,
    ) -> Result<Vec<T>, ApiError> {
        let read = r.shard_read_at(tail, Bytes::from(body.to_string()));
        let answers = self.read_all_shards(&r.name, map, shards, read).await?;
        Ok(answers.iter().map(|a| read_out(a.result())).collect())
    }

    /// The same read on each of `shards`, concurrently; answers in their order.
    pub(super) async fn read_all_shards(
        self: &Arc<Self>,
        name: &str,
        map: &CollectionMap,
        shards: &[u32],
        read: ShardRead,
    ) -> Result<Vec<Answer>, ApiError> {
        let read = Arc::new(read);
        let mut tasks = Vec::with_capacity(shards.len());
        for &shard in shards {
            let (c, name, map, read) = (
                Arc::clone(self),
                name.to_string(),
                map.clone(),
                Arc::clone(&read),
            );
            tasks.push(tokio::spawn(async move {
                c.read_shard(&name, &map, shard, &read).await
            }));
        }
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let answer = t
                .await
                .map_err(|e| ApiError::unavailable(format!("a shard's read failed: {e}")))??;
            if !answer.status.is_success() {
                return Err(answer.error());
            }
            out.push(answer);
        }
        Ok(out)
    }
}
