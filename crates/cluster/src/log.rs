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

use crate::secret::ClusterSecret;
use crate::settings::LogSettings;
use crate::ClusterError;

/// The headers of a log message (docs/format.md, "Log message"): its id (JetStream drops a
/// second message with the same id within the stream's duplicate window), when the node
/// stamped it, and its tag.
pub const ID_HEADER: &str = "Nats-Msg-Id";
pub const TIME_HEADER: &str = "Diskvec-Time";
pub const TAG_HEADER: &str = "Diskvec-Tag";
/// A message stored more than this away from the time it was stamped with is refused: a
/// message copied back into its stream later (a replay) is, once JetStream's duplicate
/// window (twice this) no longer drops it for its id. The nodes' and the NATS servers'
/// clocks must agree within this.
pub const FRESH_WITHIN: Duration = Duration::from_secs(60);
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// A message of a shard's log as a replica receives it.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// Appended by a node of this cluster: its bytes.
    Signed(Bytes),
    /// Not to be applied: no tag, a tag that is not this cluster's, or a replay; why.
    Refused(String),
}

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
    /// Signs what this node appends and checks what it reads.
    secret: Arc<ClusterSecret>,
    /// The ids of this process's messages: a random prefix and a count.
    id_prefix: Arc<str>,
    next_id: Arc<AtomicU64>,
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
    /// `nats://host:port[,host:port...]` (`tls://` for TLS): each stream is kept on
    /// min(3, servers given) servers, so losing one of three loses no acknowledged write.
    /// Messages are signed and checked with `secret`.
    pub async fn connect(
        settings: &LogSettings,
        secret: ClusterSecret,
    ) -> Result<Self, ClusterError> {
        settings.check()?;
        let spec = settings.servers.as_str();
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
        // A first try that gives up: refused credentials or TLS fail the node's start with
        // what to look at. Servers out of reach do not: the connection is tried again in the
        // background (a node may start before its log servers).
        let client = match client_options(settings, &connected)
            .await?
            .connect(servers.clone())
            .await
        {
            Ok(client) => client,
            Err(e) => {
                use async_nats::ConnectErrorKind::{Authentication, AuthorizationViolation, Tls};
                // A certificate refused in the handshake comes as an I/O error.
                let text = e.to_string().to_lowercase();
                if matches!(e.kind(), Authentication | AuthorizationViolation | Tls)
                    || ["certificate", "tls", "handshake"]
                        .iter()
                        .any(|w| text.contains(w))
                {
                    return Err(refused_or(settings, e));
                }
                log::warn!("log: connecting to NATS: {e}; trying again in the background");
                client_options(settings, &connected)
                    .await?
                    .retry_on_initial_connect()
                    .connect(servers)
                    .await
                    .map_err(|e| refused_or(settings, e))?
            }
        };
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
            secret: Arc::new(secret),
            id_prefix: random_prefix()?.into(),
            next_id: Arc::new(AtomicU64::new(1)),
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
                duplicate_window: DUPLICATE_WINDOW,
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

    /// The headers that make `message` one of this cluster's in stream `name`: a fresh id,
    /// the time now, and the tag over both, the stream's name and the bytes.
    fn signed_headers(&self, name: &str, message: &[u8]) -> async_nats::HeaderMap {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{n}", self.id_prefix);
        let time = now_ms();
        let tag = self.secret.sign_log(name, &id, time, message);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        headers.insert(TIME_HEADER, time.to_string());
        headers.insert(TAG_HEADER, tag);
        headers
    }

    /// Appends `message` to stream `name`, signed; its sequence once a quorum of the
    /// stream's servers stored it.
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
            .publish_with_headers(
                name.to_string(),
                self.signed_headers(name, &message),
                message,
            )
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

    /// The stream's messages from sequence `from` on, in order, as (sequence, entry): the
    /// bytes of a message this cluster's nodes appended, or why one is refused; waiting for
    /// new ones at the end. JetStream's ordered consumer notices a gap or a
    /// lost consumer and resumes from the last sequence delivered; a sequence that is not
    /// the one after the last delivered is still checked by the caller.
    pub async fn follow(
        &self,
        name: &str,
        from: u64,
    ) -> Result<impl futures_util::Stream<Item = Result<(u64, Entry), ClusterError>>, ClusterError>
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
            let info = m
                .info()
                .map_err(|e| log_error(format_args!("a message of log {name}"), e))?;
            let stored_ms = info.published.unix_timestamp_nanos() / 1_000_000;
            let entry = match this.check(&name, &m.message, stored_ms) {
                Ok(()) => Entry::Signed(m.message.payload.clone()),
                Err(why) => Entry::Refused(why),
            };
            Ok((info.stream_sequence, entry))
        }))
    }

    /// Whether `message`, stored in stream `name` at `stored_ms`, was appended there by a
    /// node of this cluster within [`FRESH_WITHIN`] of its stamp. The same answer on every
    /// replica: it depends on the message as stored and the cluster's secret only.
    fn check(
        &self,
        name: &str,
        message: &async_nats::Message,
        stored_ms: i128,
    ) -> Result<(), String> {
        let header = |h: &str| {
            message
                .headers
                .as_ref()
                // Parsed, not taken as a `&str`: a name NATS knows (Nats-Msg-Id) is kept as
                // its standard form, which a `&str` name never equals.
                .and_then(|m| m.get(h.parse::<async_nats::header::HeaderName>().ok()?))
                .map(|v| v.as_str().to_string())
        };
        let (Some(id), Some(time), Some(tag)) =
            (header(ID_HEADER), header(TIME_HEADER), header(TAG_HEADER))
        else {
            return Err(
                "no tag (not appended by a node of this cluster, or by a version before tags)"
                    .into(),
            );
        };
        let time: u64 = time
            .parse()
            .map_err(|_| format!("a {TIME_HEADER} that is not a number: {time:?}"))?;
        if !self
            .secret
            .verify_log(name, &id, time, &message.payload, &tag)
        {
            return Err(
                "a tag that is not this cluster's (another secret, or a changed message)".into(),
            );
        }
        let apart = (stored_ms - time as i128).unsigned_abs();
        if apart > FRESH_WITHIN.as_millis() {
            return Err(format!(
                "stored {} s away from its stamp (a replay of an older message, or clocks apart by more than {} s)",
                apart / 1000,
                FRESH_WITHIN.as_secs()
            ));
        }
        Ok(())
    }
}

/// 8 random bytes in hex: what sets this process's message ids apart from any other's.
fn random_prefix() -> Result<String, ClusterError> {
    let mut random = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .map_err(|e| ClusterError::Io(format!("reading /dev/urandom: {e}")))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// The connection's options: as `settings` ask, and a log line on every change of the
/// connection, naming the server `connected` is to.
async fn client_options(
    settings: &LogSettings,
    connected: &Arc<std::sync::OnceLock<async_nats::Client>>,
) -> Result<async_nats::ConnectOptions, ClusterError> {
    let watched = Arc::clone(connected);
    Ok(options(settings)
        .await?
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
        .ping_interval(Duration::from_secs(2)))
}

/// The connection's options as `settings` ask: one way to authenticate, and TLS (required
/// with `tls://` servers or any TLS file).
async fn options(settings: &LogSettings) -> Result<async_nats::ConnectOptions, ClusterError> {
    let mut options = match &settings.credentials {
        Some(path) => async_nats::ConnectOptions::with_credentials_file(path.clone())
            .await
            .map_err(|e| {
                ClusterError::Config(format!("--log-credentials {}: {e}", path.display()))
            })?,
        None => async_nats::ConnectOptions::new(),
    };
    if let (Some(user), Some(password)) = (&settings.user, &settings.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &settings.token {
        options = options.token(token.clone());
    }
    let tls = &settings.tls;
    if tls.any() || settings.servers.contains("tls://") {
        options = options.require_tls(true);
    }
    if let Some(ca) = &tls.ca {
        options = options.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = tls.client_pair("log")? {
        options = options.add_client_certificate(cert.to_path_buf(), key.to_path_buf());
    }
    Ok(options)
}

/// A failed connection's error, saying which settings to look at when the servers refused
/// the credentials (async-nats retries no refused credentials on a first connection).
fn refused_or(settings: &LogSettings, e: impl std::fmt::Display) -> ClusterError {
    let text = e.to_string();
    let lower = text.to_lowercase();
    if ["certificate", "tls", "handshake"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return ClusterError::Log(format!(
            "TLS to the NATS servers failed (tls:// servers, --log-ca, --log-cert/--log-key): {text}"
        ));
    }
    if lower.contains("authorization")
        || lower.contains("authentication")
        || lower.contains("signing")
    {
        let given = if settings.credentials.is_some() {
            "--log-credentials"
        } else if settings.user.is_some() {
            "--log-user and its password (DISKVEC_NATS_PASSWORD or --log-password-file)"
        } else if settings.token.is_some() {
            "the token (DISKVEC_NATS_TOKEN or --log-token-file)"
        } else {
            "no credentials: give --log-credentials, --log-user or a token"
        };
        return ClusterError::Log(format!(
            "the NATS servers refused the connection's credentials ({given}): {text}"
        ));
    }
    log_error("connecting to NATS", text)
}
