//! The replicated log: one NATS JetStream stream per shard. JetStream's own Raft orders and
//! stores each message on a quorum of its servers before it acknowledges the publish; the
//! message's stream sequence is the write's op number, and every replica applies the stream
//! in that order (docs/design-scale-out.md, design A).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::ClusterError;

/// A connection to the NATS servers holding the logs.
#[derive(Clone)]
pub struct Log {
    /// Appends: their acknowledgement may wait for a stream's leader to be elected.
    js: jetstream::Context,
    /// Questions about a stream (its bounds, a consumer), answered at once by a
    /// stream that has a leader: asked again soon rather than waited on while it has none
    /// (a follower stalled by an election must not wait out a long timeout).
    js_info: jetstream::Context,
    client: async_nats::Client,
    /// Servers each stream is stored on (JetStream's replicas of the log, not diskvec's).
    replicas: usize,
    /// When the connection was last probed after a timeout (ms since the Unix epoch).
    last_probe: Arc<AtomicU64>,
}

/// After a request times out, the server this node is connected to is asked whether it
/// reaches JetStream (its account's information, which needs the meta group's leader) at
/// most this often, and given this long to answer: one that cannot is cut off from the
/// other servers, and the connection is dropped for another server's. A request timing out
/// on a server that answers is a stream electing a leader: reconnecting would only cancel
/// every request in flight on every stream.
const PROBE_AT_MOST_EVERY: Duration = Duration::from_secs(3);
const PROBE_PATIENCE: Duration = Duration::from_secs(2);
/// How long a question about a stream waits for its answer.
const INFO_PATIENCE: Duration = Duration::from_secs(2);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("replicas", &self.replicas)
            .finish()
    }
}

fn log_error(what: impl std::fmt::Display, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Log(format!("{what}: {e}"))
}

impl Log {
    /// `nats://host:port[,host:port...]`: each stream is kept on min(3, servers given)
    /// servers, so losing one of three loses no acknowledged write.
    pub async fn connect(spec: &str) -> Result<Self, ClusterError> {
        let rest = spec.strip_prefix("nats://").unwrap_or(spec);
        let servers: Vec<async_nats::ServerAddr> = rest
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                let url = if s.contains("://") {
                    s.to_string()
                } else {
                    format!("nats://{s}")
                };
                url.parse::<async_nats::ServerAddr>()
                    .map_err(|e| ClusterError::Config(format!("NATS server {s:?}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        if servers.is_empty() {
            return Err(ClusterError::Config(format!(
                "no NATS server in {spec:?} (expected nats://host:port[,host:port...])"
            )));
        }
        let replicas = servers.len().min(3);
        // Which server the connection is to, logged on every change (for reading a node's
        // log against the servers').
        let connected: Arc<std::sync::OnceLock<async_nats::Client>> = Arc::default();
        let watched = Arc::clone(&connected);
        let client = async_nats::ConnectOptions::new()
            .event_callback(move |event| {
                let watched = Arc::clone(&watched);
                async move {
                    let server = watched.get().map(|c| {
                        let info = c.server_info();
                        format!(" ({} at {}:{})", info.server_name, info.host, info.port)
                    });
                    log::info!("log: NATS connection {event}{}", server.unwrap_or_default());
                }
            })
            .connection_timeout(Duration::from_secs(3))
            // An idle connection to a server cut off is noticed within a few seconds (a busy
            // one by its requests timing out: `failed`).
            .ping_interval(Duration::from_secs(2))
            .retry_on_initial_connect()
            .connect(servers)
            .await
            .map_err(|e| log_error("connecting to NATS", e))?;
        let _ = connected.set(client.clone());
        let mut js = jetstream::new(client.clone());
        js.set_timeout(Duration::from_secs(5));
        let mut js_info = jetstream::new(client.clone());
        js_info.set_timeout(INFO_PATIENCE);
        Ok(Self {
            js,
            js_info,
            client,
            replicas,
            last_probe: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The error of a request to the log. A timeout has the connection's server probed
    /// (at most every few seconds): a server cut off from the others by the network keeps
    /// the connection open, and the client (which pings only when idle) would otherwise send
    /// it every request until the network heals.
    fn failed(&self, what: impl std::fmt::Display, e: impl std::fmt::Display) -> ClusterError {
        let text = e.to_string();
        let timed_out = ["timed out", "deadline", "ack in time"]
            .iter()
            .any(|t| text.contains(t));
        if timed_out {
            self.probe_server();
        }
        log_error(what, text)
    }

    /// Asks the connection's server whether it reaches JetStream; reconnects to another
    /// server when it does not answer in time.
    fn probe_server(&self) {
        let now = now_ms();
        let last = self.last_probe.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= PROBE_AT_MOST_EVERY.as_millis() as u64;
        if !due
            || self
                .last_probe
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let (js, client) = (self.js.clone(), self.client.clone());
        tokio::spawn(async move {
            let answer = tokio::time::timeout(PROBE_PATIENCE, js.query_account()).await;
            let why = match answer {
                Ok(Ok(_)) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer in {} s", PROBE_PATIENCE.as_secs()),
            };
            log::warn!(
                "log: the NATS server does not reach JetStream ({why}); connecting to another"
            );
            if let Err(e) = client.force_reconnect().await {
                log::warn!("log: reconnecting: {e}");
            }
        });
    }

    /// Creates the stream `name` (subject `name`) if it is not there.
    pub async fn ensure_stream(&self, name: &str) -> Result<(), ClusterError> {
        self.js
            .get_or_create_stream(stream::Config {
                name: name.to_string(),
                subjects: vec![name.to_string()],
                num_replicas: self.replicas,
                storage: stream::StorageType::File,
                retention: stream::RetentionPolicy::Limits,
                ..Default::default()
            })
            .await
            .map_err(|e| log_error(format_args!("creating log {name}"), e))?;
        Ok(())
    }

    /// Deletes the stream `name`; absent already is fine.
    pub async fn delete_stream(&self, name: &str) -> Result<(), ClusterError> {
        match self.js.delete_stream(name).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("not found") => Ok(()),
            Err(e) => Err(log_error(format_args!("deleting log {name}"), e)),
        }
    }

    /// Appends `message` to stream `name`; its sequence once a quorum of the stream's
    /// servers stored it.
    pub async fn publish(&self, name: &str, message: Bytes) -> Result<u64, ClusterError> {
        let appending = |e: String| {
            // async-nats's words for "no server answered for the subject": while JetStream
            // elects a new leader for the stream (a server went away), or if it is gone.
            let e = if e.contains("no stream found") || e.contains("no responders") {
                format!("the stream has no leader now (a log server went away?); retry: {e}")
            } else {
                e
            };
            self.failed(format_args!("appending to log {name}"), e)
        };
        let ack = self
            .js
            .publish(name.to_string(), message)
            .await
            .map_err(|e| appending(e.to_string()))?
            .await
            .map_err(|e| appending(e.to_string()))?;
        Ok(ack.sequence)
    }

    /// The stream's last sequence (0 when empty).
    pub async fn last_sequence(&self, name: &str) -> Result<u64, ClusterError> {
        Ok(self.bounds(name).await?.1)
    }

    /// The stream's first and last sequences held: (0, 0) before the first message; after a
    /// trim of everything, the first is the last + 1.
    pub async fn bounds(&self, name: &str) -> Result<(u64, u64), ClusterError> {
        let mut s = self
            .js_info
            .get_stream(name)
            .await
            .map_err(|e| self.failed(format_args!("reading log {name}"), e))?;
        let info = s
            .info()
            .await
            .map_err(|e| self.failed(format_args!("reading log {name}"), e))?;
        Ok((info.state.first_sequence, info.state.last_sequence))
    }

    /// Removes the stream's messages below sequence `below` (every replica has applied
    /// them); the sequences of the others do not change.
    pub async fn trim_below(&self, name: &str, below: u64) -> Result<(), ClusterError> {
        let s = self
            .js
            .get_stream(name)
            .await
            .map_err(|e| self.failed(format_args!("opening log {name}"), e))?;
        s.purge()
            .sequence(below)
            .await
            .map_err(|e| self.failed(format_args!("trimming log {name}"), e))?;
        Ok(())
    }

    /// The stream's messages from sequence `from` on, in order, as (sequence, message),
    /// waiting for new ones at the end. JetStream's ordered consumer notices a gap or a
    /// lost consumer and resumes from the last sequence delivered; a sequence that is not
    /// the one after the last delivered is still checked by the caller.
    pub async fn follow(
        &self,
        name: &str,
        from: u64,
    ) -> Result<impl futures_util::Stream<Item = Result<(u64, Bytes), ClusterError>>, ClusterError>
    {
        let s = self
            .js_info
            .get_stream(name)
            .await
            .map_err(|e| self.failed(format_args!("opening log {name}"), e))?;
        let consumer = s
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: name.to_string(),
                deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: from.max(1),
                },
                ..Default::default()
            })
            .await
            .map_err(|e| self.failed(format_args!("following log {name}"), e))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| self.failed(format_args!("following log {name}"), e))?;
        let name = name.to_string();
        let this = self.clone();
        Ok(messages.map(move |m| {
            let m = m.map_err(|e| this.failed(format_args!("following log {name}"), e))?;
            let seq = m
                .info()
                .map_err(|e| log_error(format_args!("a message of log {name}"), e))?
                .stream_sequence;
            Ok((seq, m.message.payload.clone()))
        }))
    }
}
