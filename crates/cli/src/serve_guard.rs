//! `diskvec serve`'s options about who may reach the server and what it spends on them:
//! the API keys (from a file or the environment: a key on the command line shows in `ps`),
//! the refusal of a keyless server on a public address, browser origins, and request limits.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use diskvec_server::{Keys, Limits};

#[derive(clap::Args)]
pub struct GuardArgs {
    /// Key every request must present (`api-key` header). Prefer --api-key-file or
    /// DISKVEC_API_KEY: a key given here shows in the process list
    #[arg(long, env = "DISKVEC_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// File holding the API key (its first line)
    #[arg(long, conflicts_with = "api_key")]
    api_key_file: Option<PathBuf>,
    /// A second key that may only read; also from DISKVEC_READ_ONLY_API_KEY
    #[arg(long, env = "DISKVEC_READ_ONLY_API_KEY", hide_env_values = true)]
    read_only_api_key: Option<String>,
    /// File holding the read-only key (its first line)
    #[arg(long, conflicts_with = "read_only_api_key")]
    read_only_api_key_file: Option<PathBuf>,
    /// Listen on an address other machines reach without an API key (every client could
    /// read, write and delete everything)
    #[arg(long)]
    allow_public_without_key: bool,
    /// A web origin (`https://app.example.com`) whose pages may call the API from a
    /// browser; repeat for more. Other origins' writes are refused
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Largest request body, MiB
    #[arg(long, default_value_t = 32)]
    max_request_mib: usize,
    /// Memory all request bodies in flight may take, MiB (a request waits for its share)
    #[arg(long, default_value_t = 256)]
    body_memory_mib: usize,
    /// Requests handled at once (503 beyond)
    #[arg(long, default_value_t = 512)]
    max_requests: usize,
    /// Connections open at once (more wait to be accepted)
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Largest snapshot uploaded or fetched from a URL, MiB
    #[arg(long, default_value_t = 65_536)]
    max_upload_mib: u64,
    /// Seconds a client has to send a request's headers; a connection with no request for
    /// as long is closed
    #[arg(long, default_value_t = 30)]
    header_timeout_secs: u64,
    /// Seconds a client has to send a request's body
    #[arg(long, default_value_t = 60)]
    body_timeout_secs: u64,
}

/// A key from `--<flag>` or the environment, or from the first line of `--<flag>-file`.
fn key_from(value: &Option<String>, file: &Option<PathBuf>) -> anyhow::Result<Option<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the key file {}", path.display()))?;
        let key = text.lines().next().unwrap_or_default().trim().to_string();
        anyhow::ensure!(!key.is_empty(), "the key file {} is empty", path.display());
        return Ok(Some(key));
    }
    Ok(value.clone().filter(|k| !k.is_empty()))
}

/// Whether `value` came from the command line rather than from `variable`.
fn on_command_line(value: &Option<String>, variable: &str) -> bool {
    value.is_some() && std::env::var(variable).ok() != *value
}

impl GuardArgs {
    pub fn keys(&self) -> anyhow::Result<Keys> {
        let keys = Keys {
            api_key: key_from(&self.api_key, &self.api_key_file)?,
            read_only_key: key_from(&self.read_only_api_key, &self.read_only_api_key_file)?,
        };
        if keys.read_only_key.is_some() && keys.api_key.is_none() {
            anyhow::bail!(
                "--read-only-api-key needs --api-key too (without one every request may write)"
            );
        }
        if on_command_line(&self.api_key, "DISKVEC_API_KEY")
            || on_command_line(&self.read_only_api_key, "DISKVEC_READ_ONLY_API_KEY")
        {
            log::warn!(
                "an API key given on the command line shows in the process list: give it with \
                 --api-key-file or DISKVEC_API_KEY instead"
            );
        }
        Ok(keys)
    }

    /// Refuses to serve a public address without a key, unless told to.
    pub fn check_exposure(&self, host: IpAddr, keys: &Keys) -> anyhow::Result<()> {
        if keys.api_key.is_some() || host.is_loopback() {
            return Ok(());
        }
        if !self.allow_public_without_key {
            anyhow::bail!(
                "refusing to listen on {host} without an API key: anyone who reaches it could \
                 read, change and delete every collection. Give a key (--api-key-file FILE or \
                 DISKVEC_API_KEY), listen on 127.0.0.1, or pass --allow-public-without-key"
            );
        }
        log::warn!("listening on {host} without an API key (--allow-public-without-key)");
        Ok(())
    }

    pub fn limits(&self) -> anyhow::Result<Limits> {
        anyhow::ensure!(
            self.max_request_mib > 0,
            "--max-request-mib must be at least 1"
        );
        anyhow::ensure!(
            self.body_memory_mib >= self.max_request_mib,
            "--body-memory-mib ({}) must hold one request of --max-request-mib ({})",
            self.body_memory_mib,
            self.max_request_mib
        );
        Ok(Limits {
            max_body_bytes: self.max_request_mib << 20,
            body_bytes_in_flight: self.body_memory_mib << 20,
            max_requests: self.max_requests.max(1),
            body_read: Duration::from_secs(self.body_timeout_secs.max(1)),
            header_read: Duration::from_secs(self.header_timeout_secs.max(1)),
            max_connections: self.max_connections.max(1),
            max_upload_bytes: self.max_upload_mib << 20,
            cors_origins: self.cors_origins.clone(),
        })
    }
}
