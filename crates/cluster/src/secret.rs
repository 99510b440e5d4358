//! The cluster's shared secret, given to every node at start (a file or the environment,
//! never etcd), and what is derived from it. The secret itself is kept by no one after
//! start: each use has its own key, HMAC-SHA256(secret, label), so that what one use shows
//! (the node token travels on every request among nodes) gives nothing for another (signing
//! the log).
//!
//! - the log key signs every message a node appends to a shard's log (`log.rs`);
//! - the node token marks a request as coming from a node of the cluster;
//! - the check is what etcd keeps (`/diskvec-internal/secret-check`) so that a node started
//!   with another secret than the cluster's is refused at start instead of refusing (and
//!   having refused) every log message of the others.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::ClusterError;

/// The environment variable a node's secret may come from (else `--cluster-secret-file`).
pub const SECRET_ENV: &str = "DISKVEC_CLUSTER_SECRET";
/// A shorter secret is refused: 16 bytes of random are out of reach of a guess; an operator
/// should give 32 random bytes in hex (`openssl rand -hex 32`).
pub const MIN_SECRET_BYTES: usize = 16;
/// The version of the log's tag: the label its key is derived with and the prefix of each
/// tag (docs/format.md, "Log message").
pub const LOG_TAG_VERSION: &str = "v1";

type HmacSha256 = Hmac<Sha256>;

/// What a node derives from the cluster's secret; its `Debug` shows none of it.
#[derive(Clone)]
pub struct ClusterSecret {
    log_key: [u8; 32],
    node_token: String,
    check: String,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

fn derive(secret: &[u8], label: &str) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(label.as_bytes());
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl ClusterSecret {
    /// The secret's bytes, less a line end (a file written with `echo` has one); refused when
    /// shorter than [`MIN_SECRET_BYTES`].
    pub fn new(secret: &[u8]) -> Result<Self, ClusterError> {
        let secret = secret.strip_suffix(b"\n").unwrap_or(secret);
        let secret = secret.strip_suffix(b"\r").unwrap_or(secret);
        if secret.len() < MIN_SECRET_BYTES {
            return Err(ClusterError::Config(format!(
                "the cluster secret has {} bytes; give at least {MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)",
                secret.len()
            )));
        }
        Ok(Self {
            log_key: derive(secret, "diskvec log v1"),
            node_token: hex(&derive(secret, "diskvec node v1")),
            check: hex(&derive(secret, "diskvec secret check v1")),
        })
    }

    /// The secret from `file` when given, else from `env` (the value of [`SECRET_ENV`]);
    /// an error naming both ways when neither is given, and when both are (which one the
    /// node runs with must not be a guess).
    pub fn from_file_or_env(file: Option<&Path>, env: Option<&[u8]>) -> Result<Self, ClusterError> {
        let env = env.filter(|v| !v.is_empty());
        match (file, env) {
            (Some(_), Some(_)) => Err(ClusterError::Config(format!(
                "the cluster secret is given twice (--cluster-secret-file and {SECRET_ENV}): give one"
            ))),
            (Some(path), None) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    ClusterError::Config(format!("reading the cluster secret {}: {e}", path.display()))
                })?;
                Self::new(&bytes).map_err(|e| ClusterError::Config(format!("{}: {e}", path.display())))
            }
            (None, Some(bytes)) => {
                Self::new(bytes).map_err(|e| ClusterError::Config(format!("{SECRET_ENV}: {e}")))
            }
            (None, None) => Err(ClusterError::Config(format!(
                "cluster mode needs the cluster's secret, the same on every node: --cluster-secret-file PATH or the environment variable {SECRET_ENV} (at least {MIN_SECRET_BYTES} bytes; e.g. `openssl rand -hex 32`)"
            ))),
        }
    }

    /// What a node puts in the header of its requests to the others.
    pub fn node_token(&self) -> &str {
        &self.node_token
    }

    /// Whether `presented` is this cluster's node token; in constant time, so that the
    /// time of a refusal tells nothing of how much of a guess was right.
    pub fn is_node_token(&self, presented: &[u8]) -> bool {
        self.node_token.as_bytes().ct_eq(presented).into()
    }

    /// What etcd keeps to tell whether a node has the cluster's secret: a one-way function
    /// of it, of no use in signing or in passing for a node.
    pub fn check(&self) -> &str {
        &self.check
    }

    fn log_mac(&self, stream: &str, id: &str, time_ms: u64, payload: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.log_key).expect("a 32-byte key");
        // NUL never occurs in a stream name, an id or a number: the fields cannot run into
        // each other.
        for field in [LOG_TAG_VERSION.as_bytes(), stream.as_bytes(), id.as_bytes()] {
            mac.update(field);
            mac.update(b"\0");
        }
        mac.update(time_ms.to_string().as_bytes());
        mac.update(b"\0");
        mac.update(payload);
        mac
    }

    /// The tag of a log message: `v1.` and the hex of its HMAC-SHA256 over the stream it is
    /// appended to, its id, the time it was stamped with and its bytes.
    pub fn sign_log(&self, stream: &str, id: &str, time_ms: u64, payload: &[u8]) -> String {
        let mac = self.log_mac(stream, id, time_ms, payload);
        format!("{LOG_TAG_VERSION}.{}", hex(&mac.finalize().into_bytes()))
    }

    /// Whether `tag` is the tag of this message under this cluster's secret (in constant time).
    pub fn verify_log(
        &self,
        stream: &str,
        id: &str,
        time_ms: u64,
        payload: &[u8],
        tag: &str,
    ) -> bool {
        let Some(mac) = tag
            .strip_prefix(LOG_TAG_VERSION)
            .and_then(|t| t.strip_prefix('.'))
            .and_then(unhex)
        else {
            return false;
        };
        self.log_mac(stream, id, time_ms, payload)
            .verify_slice(&mac)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_short_or_missing_secret_is_refused_with_both_ways_named() {
        assert!(ClusterSecret::new(b"0123456789abcde\n").is_err());
        assert!(ClusterSecret::new(b"0123456789abcdef\n").is_ok());
        let missing = ClusterSecret::from_file_or_env(None, None).unwrap_err();
        let text = missing.to_string();
        assert!(
            text.contains("--cluster-secret-file") && text.contains(SECRET_ENV),
            "{text}"
        );
        let twice = ClusterSecret::from_file_or_env(Some(Path::new("/x")), Some(SECRET));
        assert!(twice.is_err());
        let short = ClusterSecret::from_file_or_env(None, Some(b"short")).unwrap_err();
        assert!(short.to_string().contains(SECRET_ENV), "{short}");
    }

    #[test]
    fn a_file_with_a_line_end_gives_the_same_secret_as_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, [SECRET, b"\n"].concat()).unwrap();
        let a = ClusterSecret::from_file_or_env(Some(&path), None).unwrap();
        let b = ClusterSecret::from_file_or_env(None, Some(SECRET)).unwrap();
        assert_eq!(a.node_token(), b.node_token());
        assert!(b.is_node_token(a.node_token().as_bytes()));
        assert!(!b.is_node_token(b"0123"));
        assert!(!format!("{a:?}").contains(a.node_token()));
    }

    #[test]
    fn derived_values_differ_from_each_other_and_from_the_secret() {
        let s = ClusterSecret::new(SECRET).unwrap();
        let secret_hex = hex(SECRET);
        assert_ne!(s.node_token(), s.check());
        for derived in [s.node_token(), s.check()] {
            assert!(!derived.contains(std::str::from_utf8(SECRET).unwrap()));
            assert_ne!(derived, secret_hex);
        }
    }

    #[test]
    fn a_log_tag_verifies_only_for_the_same_stream_id_time_bytes_and_secret() {
        let s = ClusterSecret::new(SECRET).unwrap();
        let tag = s.sign_log("dv_c_1_0", "a-1", 1000, b"{}");
        assert!(tag.starts_with("v1."));
        assert!(s.verify_log("dv_c_1_0", "a-1", 1000, b"{}", &tag));
        assert!(!s.verify_log("dv_c_1_1", "a-1", 1000, b"{}", &tag));
        assert!(!s.verify_log("dv_c_1_0", "a-2", 1000, b"{}", &tag));
        assert!(!s.verify_log("dv_c_1_0", "a-1", 1001, b"{}", &tag));
        assert!(!s.verify_log("dv_c_1_0", "a-1", 1000, b"{ }", &tag));
        assert!(!s.verify_log("dv_c_1_0", "a-1", 1000, b"{}", "v1.zz"));
        assert!(!s.verify_log("dv_c_1_0", "a-1", 1000, b"{}", &tag[3..]));
        let other = ClusterSecret::new(b"another secret of 32 bytes......").unwrap();
        assert!(!other.verify_log("dv_c_1_0", "a-1", 1000, b"{}", &tag));
    }
}
