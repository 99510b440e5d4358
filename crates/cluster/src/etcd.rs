//! etcd through its JSON gateway (`POST /v3/...`, etcd 3.4 and later): leases, puts,
//! ranges, compare-and-swap transactions and deletes. Keys and values travel base64-encoded
//! and 64-bit numbers as strings, as the gateway's proto3 JSON mapping has them.
//!
//! Calls are blocking (a cluster node makes them from its own threads or tokio's blocking
//! pool) and go to one member at a time; a member that does not answer is passed over for
//! the next, so a cluster with a quorum keeps serving with members down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

use crate::settings::{EtcdSettings, TlsFiles};
use crate::ClusterError;

/// One key as etcd holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// The revision of the key's last change: the compare-and-swap token.
    pub mod_revision: i64,
    /// 0 when the key is not bound to a lease.
    pub lease: i64,
}

pub struct Etcd {
    endpoints: Vec<String>,
    /// The member that answered last; tried first.
    current: AtomicUsize,
    agent: ureq::Agent,
    /// A user of etcd's auth and its password (`--etcd-user`), when etcd has auth enabled.
    user: Option<(String, String)>,
    /// The token etcd gave for the user, sent on every call (`Authorization`); taken again
    /// when etcd no longer takes it (a simple token lapses after 5 idle minutes and is known
    /// only to the member that gave it).
    token: Mutex<Option<String>>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

const UNAUTHENTICATED: &str = "unauthenticated (a lapsed token, or another member's)";

/// etcd's words for a token it does not take (lapsed, from another member, or missing),
/// after which the call is made again with a new one.
const TOKEN_REFUSED: [&str; 4] = [
    UNAUTHENTICATED,
    "invalid auth token",
    "user name is empty",
    "revision of auth store is old",
];

/// A rustls client configuration that trusts `files.ca` and presents `files.cert` and `files.key` when given.
pub fn tls_config(files: &TlsFiles, flag: &str) -> Result<Arc<rustls::ClientConfig>, ClusterError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |path: &std::path::Path, e: &dyn std::fmt::Display| {
        ClusterError::Config(format!("{}: {e}", path.display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            let certs = CertificateDer::pem_file_iter(ca).map_err(|e| bad(ca, &e))?;
            for cert in certs {
                roots
                    .add(cert.map_err(|e| bad(ca, &e))?)
                    .map_err(|e| bad(ca, &e))?;
            }
            if roots.is_empty() {
                return Err(bad(ca, &"no certificate in the file"));
            }
        }
        // Only a client certificate given: the servers' CA is the operator's too (the
        // public web's roots are for servers named in public DNS).
        None => {
            return Err(ClusterError::Config(format!(
                "--{flag}-cert needs --{flag}-ca (the CA that signed the servers' certificates)"
            )))
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClusterError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    let config = match files.client_pair(flag)? {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| bad(cert, &e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(cert, &e))?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, &e))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| bad(cert, &e))?
        }
    };
    Ok(Arc::new(config))
}

impl Etcd {
    /// `etcd://host:port[,host:port...]` (plain HTTP), or `http://` and `https://` URLs,
    /// comma-separated.
    pub fn parse_endpoints(spec: &str) -> Result<Vec<String>, ClusterError> {
        let rest = spec.strip_prefix("etcd://").unwrap_or(spec);
        let mut out = Vec::new();
        for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let part = part.strip_prefix("etcd://").unwrap_or(part);
            let url = if part.starts_with("http://") || part.starts_with("https://") {
                part.trim_end_matches('/').to_string()
            } else if part.contains("://") {
                return Err(ClusterError::Config(format!(
                    "etcd endpoint {part:?}: give etcd://, http:// or https://"
                )));
            } else {
                format!("http://{}", part.trim_end_matches('/'))
            };
            let host_port = url.split_once("://").map_or("", |(_, rest)| rest);
            if !host_port.contains(':') {
                return Err(ClusterError::Config(format!(
                    "etcd endpoint {part:?}: give host:port"
                )));
            }
            out.push(url);
        }
        if out.is_empty() {
            return Err(ClusterError::Config(format!(
                "no etcd endpoint in {spec:?} (expected etcd://host:port[,host:port...])"
            )));
        }
        Ok(out)
    }

    /// A client of plain-HTTP members without auth.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self::with_agent(endpoints, Self::agent_builder().build(), None)
    }

    fn agent_builder() -> ureq::AgentBuilder {
        ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(1))
            .timeout(Duration::from_secs(3))
    }

    fn with_agent(
        endpoints: Vec<String>,
        agent: ureq::Agent,
        user: Option<(String, String)>,
    ) -> Self {
        Self {
            endpoints,
            current: AtomicUsize::new(0),
            agent,
            user,
            token: Mutex::new(None),
        }
    }

    /// A client as `settings` say: TLS to `https://` members (trusting `--etcd-ca`), and
    /// etcd's auth as `--etcd-user`, whose password is checked here (a wrong one fails the
    /// node's start, not its first write).
    pub fn connect(settings: &EtcdSettings) -> Result<Self, ClusterError> {
        settings.check()?;
        let endpoints = Self::parse_endpoints(&settings.endpoints)?;
        let mut builder = Self::agent_builder();
        if settings.tls.any() {
            if let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://")) {
                return Err(ClusterError::Config(format!(
                    "--etcd-ca/--etcd-cert are given, but etcd endpoint {plain} is plain HTTP: give https:// endpoints"
                )));
            }
            builder = builder.tls_config(tls_config(&settings.tls, "etcd")?);
        }
        let user = settings.user.clone().zip(settings.password.clone());
        let etcd = Self::with_agent(endpoints, builder.build(), user);
        if etcd.user.is_some() {
            etcd.authenticate()?;
        }
        Ok(etcd)
    }

    /// Takes a new token for the user (`POST /v3/auth/authenticate`).
    fn authenticate(&self) -> Result<Option<String>, ClusterError> {
        let Some((user, password)) = &self.user else {
            return Ok(None);
        };
        let answer = self
            .post(
                "/v3/auth/authenticate",
                &json!({ "name": user, "password": password }),
                None,
            )
            .map_err(|e| match e {
                ClusterError::Etcd(text) => ClusterError::Etcd(format!(
                    "etcd refused user {user:?} (--etcd-user and its password): {text}"
                )),
                other => other,
            })?;
        let token = answer
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ClusterError::Etcd(format!("etcd gave no token for user {user:?}: {answer}"))
            })?
            .to_string();
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
        Ok(Some(token))
    }

    fn current_token(&self) -> Result<Option<String>, ClusterError> {
        if self.user.is_none() {
            return Ok(None);
        }
        let held = self.token.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match held {
            Some(t) => Ok(Some(t)),
            None => self.authenticate(),
        }
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Posts `body` to `path` with the user's token, taking a new one once when etcd no
    /// longer takes it.
    fn call(&self, path: &str, body: &Value) -> Result<Value, ClusterError> {
        let token = self.current_token()?;
        match self.post(path, body, token.as_deref()) {
            Err(ClusterError::Etcd(text))
                if self.user.is_some() && TOKEN_REFUSED.iter().any(|t| text.contains(t)) =>
            {
                let token = self.authenticate()?;
                self.post(path, body, token.as_deref())
            }
            other => other,
        }
    }

    /// Posts `body` to `path` on the first member that answers. An answer with an error
    /// from etcd itself (a refused request) is returned as such, not retried elsewhere.
    fn post(&self, path: &str, body: &Value, token: Option<&str>) -> Result<Value, ClusterError> {
        let n = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last_error = String::new();
        for k in 0..n {
            let at = (first + k) % n;
            let url = format!("{}{}", self.endpoints[at], path);
            let mut request = self.agent.post(&url);
            if let Some(token) = token {
                request = request.set("Authorization", token);
            }
            match request.send_json(body.clone()) {
                Ok(response) => {
                    self.current.store(at, Ordering::Relaxed);
                    return response.into_json::<Value>().map_err(|e| {
                        ClusterError::Etcd(format!("{url}: an answer that is not JSON: {e}"))
                    });
                }
                Err(ureq::Error::Status(code, response)) => {
                    let text = response.into_string().unwrap_or_default();
                    // A member without quorum or leader answers 503 with a message: another
                    // member may have both.
                    if code >= 500 {
                        last_error = format!("{url}: {code} {text}");
                        continue;
                    }
                    // This member answers: a new token is taken from it, and used with it.
                    self.current.store(at, Ordering::Relaxed);
                    if code == 401 {
                        // The gateway's answer to a lapsed token, with no body.
                        return Err(ClusterError::Etcd(format!(
                            "{url}: 401 {UNAUTHENTICATED} {text}"
                        )));
                    }
                    return Err(ClusterError::Etcd(format!("{url}: {code} {text}")));
                }
                Err(e) => last_error = format!("{url}: {e}"),
            }
        }
        Err(ClusterError::Unavailable(format!(
            "no etcd member answered (last: {last_error})"
        )))
    }

    /// A lease of `ttl` seconds; keys put under it vanish when it is not kept alive.
    pub fn grant_lease(&self, ttl_secs: u64) -> Result<i64, ClusterError> {
        let r = self.call("/v3/lease/grant", &json!({ "TTL": ttl_secs.to_string() }))?;
        if let Some(e) = r
            .get("error")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
        {
            return Err(ClusterError::Etcd(format!("lease grant refused: {e}")));
        }
        int_of(&r, "ID").ok_or_else(|| ClusterError::Etcd(format!("lease grant answered {r}")))
    }

    /// Renews a lease: its remaining TTL in seconds, or `None` when it has expired (its keys
    /// are gone; the holder must take a new lease and put them again).
    pub fn keep_alive(&self, lease: i64) -> Result<Option<i64>, ClusterError> {
        let r = self.call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))?;
        let result = r.get("result").unwrap_or(&r);
        Ok(int_of(result, "TTL").filter(|&ttl| ttl > 0))
    }

    pub fn revoke(&self, lease: i64) -> Result<(), ClusterError> {
        self.call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))?;
        Ok(())
    }

    /// Puts `key`, bound to `lease` when given; the store's revision after the put.
    pub fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<i64, ClusterError> {
        let r = self.call("/v3/kv/put", &put_request(key, value, lease))?;
        Ok(header_revision(&r))
    }

    pub fn get(&self, key: &str) -> Result<Option<KeyValue>, ClusterError> {
        let r = self.call("/v3/kv/range", &json!({ "key": B64.encode(key) }))?;
        Ok(kvs_of(&r)?.into_iter().next())
    }

    /// Every key starting with `prefix`, in key order, and the store's revision they were
    /// read at.
    pub fn range_prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, i64), ClusterError> {
        let r = self.call(
            "/v3/kv/range",
            &json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) }),
        )?;
        Ok((kvs_of(&r)?, header_revision(&r)))
    }

    /// Puts `key` only if it does not exist; whether it did.
    pub fn create(&self, key: &str, value: &[u8]) -> Result<bool, ClusterError> {
        self.create_under(key, value, None)
    }

    /// Puts `key` under `lease` only if it does not exist; whether it did.
    pub fn create_with_lease(
        &self,
        key: &str,
        value: &[u8],
        lease: i64,
    ) -> Result<bool, ClusterError> {
        self.create_under(key, value, Some(lease))
    }

    fn create_under(
        &self,
        key: &str,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<bool, ClusterError> {
        // `version` 0 is proto3's default and so may be left out; it is written out anyway.
        let compare = json!({
            "key": B64.encode(key), "target": "VERSION", "result": "EQUAL", "version": "0"
        });
        if self.txn(compare, put_request(key, value, lease))? {
            return Ok(true);
        }
        self.holds(key, value, lease)
    }

    /// Whether `key` holds `value` under `lease`: a transaction that failed its compare may
    /// be the retry (on another member) of one that had committed before its answer was lost.
    fn holds(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<bool, ClusterError> {
        Ok(self
            .get(key)?
            .is_some_and(|kv| kv.value == value && kv.lease == lease.unwrap_or(0)))
    }

    /// Replaces `key` only if it has not changed since `mod_revision`; whether it did.
    pub fn compare_and_swap(
        &self,
        key: &str,
        mod_revision: i64,
        value: &[u8],
    ) -> Result<bool, ClusterError> {
        let compare = unchanged_since(key, mod_revision);
        if self.txn(compare, put_request(key, value, None))? {
            return Ok(true);
        }
        self.holds(key, value, None)
    }

    /// Deletes `key` only if it has not changed since `mod_revision`; whether it did.
    pub fn delete_if(&self, key: &str, mod_revision: i64) -> Result<bool, ClusterError> {
        let compare = unchanged_since(key, mod_revision);
        let r = self.call(
            "/v3/kv/txn",
            &json!({
                "compare": [compare],
                "success": [{ "request_delete_range": { "key": B64.encode(key) } }],
            }),
        )?;
        // Failed its compare: gone already is what was asked (a retried delete that had
        // committed), changed since is not.
        Ok(
            r.get("succeeded").and_then(Value::as_bool).unwrap_or(false)
                || self.get(key)?.is_none(),
        )
    }

    fn txn(&self, compare: Value, put: Value) -> Result<bool, ClusterError> {
        let r = self.call(
            "/v3/kv/txn",
            &json!({ "compare": [compare], "success": [{ "request_put": put }] }),
        )?;
        Ok(r.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Whether the members answer `/health` as healthy: (endpoint, healthy) for each.
    pub fn health(&self) -> Vec<(String, bool)> {
        self.endpoints
            .iter()
            .map(|e| {
                let healthy = self
                    .agent
                    .get(&format!("{e}/health"))
                    .call()
                    .ok()
                    .and_then(|r| r.into_json::<Value>().ok())
                    .and_then(|v| v.get("health").and_then(Value::as_str).map(|h| h == "true"))
                    .unwrap_or(false);
                (e.clone(), healthy)
            })
            .collect()
    }
}

/// A transaction's condition: `key` last changed at `mod_revision`.
fn unchanged_since(key: &str, mod_revision: i64) -> Value {
    json!({
        "key": B64.encode(key), "target": "MOD", "result": "EQUAL",
        "mod_revision": mod_revision.to_string()
    })
}

fn put_request(key: &str, value: &[u8], lease: Option<i64>) -> Value {
    let mut put = json!({ "key": B64.encode(key), "value": B64.encode(value) });
    if let Some(lease) = lease {
        put["lease"] = json!(lease.to_string());
    }
    put
}

/// The first key after every key starting with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the key space.
    vec![0]
}

/// A proto3 JSON int64: a string, or a number from some gateways; absent means 0.
fn int_of(v: &Value, field: &str) -> Option<i64> {
    match v.get(field)? {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn header_revision(r: &Value) -> i64 {
    r.get("header")
        .and_then(|h| int_of(h, "revision"))
        .unwrap_or(0)
}

fn kvs_of(r: &Value) -> Result<Vec<KeyValue>, ClusterError> {
    let Some(list) = r.get("kvs").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|kv| {
            let decode = |field: &str| -> Result<Vec<u8>, ClusterError> {
                match kv.get(field).and_then(Value::as_str) {
                    None => Ok(Vec::new()),
                    Some(s) => B64.decode(s).map_err(|e| {
                        ClusterError::Etcd(format!("etcd sent a {field} that is not base64: {e}"))
                    }),
                }
            };
            let key = String::from_utf8(decode("key")?)
                .map_err(|_| ClusterError::Etcd("etcd sent a key that is not UTF-8".into()))?;
            Ok(KeyValue {
                key,
                value: decode("value")?,
                mod_revision: int_of(kv, "mod_revision").unwrap_or(0),
                lease: int_of(kv, "lease").unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_from_the_cluster_flag() {
        assert_eq!(
            Etcd::parse_endpoints("etcd://127.0.0.1:2379,10.0.0.2:2379").unwrap(),
            vec!["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(
            Etcd::parse_endpoints("http://h:1/").unwrap(),
            vec!["http://h:1"]
        );
        assert!(Etcd::parse_endpoints("etcd://").is_err());
        assert!(Etcd::parse_endpoints("etcd://hostonly").is_err());
        assert_eq!(
            Etcd::parse_endpoints("https://h:1,https://g:2").unwrap(),
            vec!["https://h:1", "https://g:2"]
        );
        assert!(Etcd::parse_endpoints("https://h").is_err());
        assert!(Etcd::parse_endpoints("grpc://h:1").is_err());
    }

    #[test]
    fn a_prefix_range_ends_after_every_key_with_the_prefix() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), vec![b'a', 0x80]);
    }
}
