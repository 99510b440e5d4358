//! `diskvec serve --cluster ...`: how the node reaches etcd and NATS, and the cluster's
//! secret. Secrets come from files or the environment only: a command line shows in `ps`.

use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use anyhow::Context;
use diskvec_cluster::settings::secret_text;
use diskvec_cluster::{ClusterSecret, ClusterSettings, EtcdSettings, LogSettings, TlsFiles};

const ETCD_PASSWORD_ENV: &str = "DISKVEC_ETCD_PASSWORD";
const NATS_PASSWORD_ENV: &str = "DISKVEC_NATS_PASSWORD";
const NATS_TOKEN_ENV: &str = "DISKVEC_NATS_TOKEN";

#[derive(clap::Args)]
pub struct Access {
    /// A file holding the cluster's secret, the same on every node (at least 16 bytes; e.g.
    /// `openssl rand -hex 32`); or the environment variable DISKVEC_CLUSTER_SECRET. Signs
    /// the log's messages and marks requests among nodes
    #[arg(long, requires = "cluster")]
    cluster_secret_file: Option<PathBuf>,
    /// A user of etcd's auth; its password from DISKVEC_ETCD_PASSWORD or --etcd-password-file
    #[arg(long, requires = "cluster")]
    etcd_user: Option<String>,
    /// A file holding the --etcd-user's password
    #[arg(long, requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
    /// The CA of the etcd members' certificates (with https:// endpoints in --cluster)
    #[arg(long, requires = "cluster")]
    etcd_ca: Option<PathBuf>,
    /// This node's client certificate for etcd (PEM; with --etcd-key and --etcd-ca)
    #[arg(long, requires_all = ["etcd_key", "etcd_ca"])]
    etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert (PEM)
    #[arg(long, requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// A NATS credentials file (.creds: a user's JWT and NKey seed)
    #[arg(long, requires = "cluster")]
    log_credentials: Option<PathBuf>,
    /// A NATS user; its password from DISKVEC_NATS_PASSWORD or --log-password-file
    #[arg(long, requires = "cluster")]
    log_user: Option<String>,
    /// A file holding the --log-user's password
    #[arg(long, requires = "log_user")]
    log_password_file: Option<PathBuf>,
    /// A file holding a NATS token (or the environment variable DISKVEC_NATS_TOKEN)
    #[arg(long, requires = "cluster")]
    log_token_file: Option<PathBuf>,
    /// The CA of the NATS servers' certificates (TLS is then required; or give tls:// servers)
    #[arg(long, requires = "cluster")]
    log_ca: Option<PathBuf>,
    /// This node's client certificate for NATS (PEM; with --log-key)
    #[arg(long, requires = "log_key")]
    log_cert: Option<PathBuf>,
    /// The key of --log-cert (PEM)
    #[arg(long, requires = "log_cert")]
    log_key: Option<PathBuf>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Access {
    /// The settings to join the cluster with: `etcd` and `log` as --cluster and --log give
    /// them, with these flags and the environment.
    pub fn settings(&self, etcd: &str, log: &str) -> anyhow::Result<ClusterSettings> {
        let secret_env =
            std::env::var_os(diskvec_cluster::secret::SECRET_ENV).map(OsStringExt::into_vec);
        let secret = ClusterSecret::from_file_or_env(
            self.cluster_secret_file.as_deref(),
            secret_env.as_deref(),
        )?;
        let etcd_password = secret_text(
            "etcd password",
            self.etcd_password_file.as_deref(),
            ETCD_PASSWORD_ENV,
            env(ETCD_PASSWORD_ENV),
        )?;
        let nats_password = secret_text(
            "NATS password",
            self.log_password_file.as_deref(),
            NATS_PASSWORD_ENV,
            env(NATS_PASSWORD_ENV),
        )?;
        let token = secret_text(
            "NATS token",
            self.log_token_file.as_deref(),
            NATS_TOKEN_ENV,
            env(NATS_TOKEN_ENV),
        )?;
        let settings = ClusterSettings {
            etcd: EtcdSettings {
                endpoints: etcd.to_string(),
                user: self.etcd_user.clone(),
                password: etcd_password,
                tls: TlsFiles {
                    ca: self.etcd_ca.clone(),
                    cert: self.etcd_cert.clone(),
                    key: self.etcd_key.clone(),
                },
            },
            log: LogSettings {
                servers: log.to_string(),
                credentials: self.log_credentials.clone(),
                user: self.log_user.clone(),
                password: nats_password,
                token,
                tls: TlsFiles {
                    ca: self.log_ca.clone(),
                    cert: self.log_cert.clone(),
                    key: self.log_key.clone(),
                },
            },
            secret,
        };
        settings.etcd.check().context("etcd")?;
        settings.log.check().context("the log")?;
        Ok(settings)
    }
}
