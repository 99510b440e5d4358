//! How a node reaches its cluster: etcd and NATS endpoints with their credentials and TLS
//! files, and the cluster's secret, in one value (`diskvec serve` fills it from its flags and
//! environment). Passwords and tokens come from the environment or a file, never from a
//! command line, where `ps` would show them.

use std::path::{Path, PathBuf};

use crate::secret::ClusterSecret;
use crate::ClusterError;

/// Files for TLS to a server: the CA that signed its certificate (else the public web's
/// roots), and this node's certificate and key when the server asks clients for one.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    pub fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// The client certificate and key, both or neither.
    pub fn client_pair(&self, flag: &str) -> Result<Option<(&Path, &Path)>, ClusterError> {
        match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (None, None) => Ok(None),
            _ => Err(ClusterError::Config(format!(
                "--{flag}-cert and --{flag}-key go together"
            ))),
        }
    }
}

/// etcd: `etcd://host:port[,...]` or `http(s)://` URLs; a user of etcd's own auth.
#[derive(Clone, Default)]
pub struct EtcdSettings {
    pub endpoints: String,
    pub user: Option<String>,
    pub password: Option<String>,
    pub tls: TlsFiles,
}

/// The log: `nats://` or `tls://host:port[,...]`; at most one way to authenticate: a
/// `.creds` file (JWT and NKey), a user and password, or a token.
#[derive(Clone, Default)]
pub struct LogSettings {
    pub servers: String,
    pub credentials: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    pub tls: TlsFiles,
}

/// Everything a node needs to join its cluster besides its own name and URL.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub etcd: EtcdSettings,
    pub log: LogSettings,
    pub secret: ClusterSecret,
}

impl std::fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| ".."))
            .field("tls", &self.tls)
            .finish()
    }
}

impl std::fmt::Debug for LogSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSettings")
            .field("servers", &self.servers)
            .field("credentials", &self.credentials)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| ".."))
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("tls", &self.tls)
            .finish()
    }
}

/// A password (or token) from `file` when given, else from the environment's `env` value; one
/// line end is dropped from a file's. Given both ways is an error; neither is `None`.
pub fn secret_text(
    what: &str,
    file: Option<&Path>,
    env_name: &str,
    env: Option<String>,
) -> Result<Option<String>, ClusterError> {
    let env = env.filter(|v| !v.is_empty());
    match (file, env) {
        (Some(path), Some(_)) => Err(ClusterError::Config(format!(
            "the {what} is given twice ({} and {env_name}): give one",
            path.display()
        ))),
        (Some(path), None) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ClusterError::Config(format!("reading the {what} {}: {e}", path.display()))
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            Ok(Some(text.strip_suffix('\r').unwrap_or(text).to_string()))
        }
        (None, env) => Ok(env),
    }
}

impl LogSettings {
    /// Refuses two ways to authenticate at once, and a password without a user.
    pub fn check(&self) -> Result<(), ClusterError> {
        let ways = [
            self.credentials.is_some(),
            self.user.is_some(),
            self.token.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err(ClusterError::Config(
                "the log takes one way to authenticate: --log-credentials, --log-user (with DISKVEC_NATS_PASSWORD) or a token (DISKVEC_NATS_TOKEN)".into(),
            ));
        }
        if self.password.is_some() && self.user.is_none() {
            return Err(ClusterError::Config(
                "a NATS password is given without --log-user".into(),
            ));
        }
        if self.user.is_some() && self.password.is_none() {
            return Err(ClusterError::Config(
                "--log-user needs its password: DISKVEC_NATS_PASSWORD or --log-password-file"
                    .into(),
            ));
        }
        self.tls.client_pair("log").map(|_| ())
    }
}

impl EtcdSettings {
    /// Refuses a password without a user and a user without a password.
    pub fn check(&self) -> Result<(), ClusterError> {
        match (&self.user, &self.password) {
            (Some(_), None) => Err(ClusterError::Config(
                "--etcd-user needs its password: DISKVEC_ETCD_PASSWORD or --etcd-password-file"
                    .into(),
            )),
            (None, Some(_)) => Err(ClusterError::Config(
                "an etcd password is given without --etcd-user".into(),
            )),
            _ => self.tls.client_pair("etcd").map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_comes_from_a_file_or_the_environment_but_not_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, "pw\n").unwrap();
        let from_file = secret_text("etcd password", Some(&path), "E", None).unwrap();
        assert_eq!(from_file.as_deref(), Some("pw"));
        let from_env = secret_text("etcd password", None, "E", Some("x".into())).unwrap();
        assert_eq!(from_env.as_deref(), Some("x"));
        assert_eq!(
            secret_text("p", None, "E", Some(String::new())).unwrap(),
            None
        );
        assert!(secret_text("p", Some(&path), "E", Some("x".into())).is_err());
    }

    #[test]
    fn credentials_must_be_whole_and_one_way() {
        let mut log = LogSettings {
            user: Some("u".into()),
            ..Default::default()
        };
        assert!(log.check().is_err(), "a user without a password");
        log.password = Some("p".into());
        assert!(log.check().is_ok());
        log.token = Some("t".into());
        assert!(log.check().is_err(), "two ways");
        let etcd = EtcdSettings {
            password: Some("p".into()),
            ..Default::default()
        };
        assert!(etcd.check().is_err());
        let tls = TlsFiles {
            cert: Some("c".into()),
            ..Default::default()
        };
        assert!(tls.client_pair("etcd").is_err());
        let shown = format!(
            "{:?}",
            LogSettings {
                password: Some("hunter2".into()),
                ..Default::default()
            }
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
