//! diskvec's cluster layer: what several `diskvec serve` nodes share to act as one database.
//!
//! - [`etcd`]: the control plane's client (etcd's JSON gateway): leases, keys, compare-and-swap.
//! - [`map`]: the cluster as etcd holds it: live nodes and each collection's shard map, and
//!   the placement of new shards.
//! - [`keys`]: which shards a request reaches (by point id, or by its shard keys).
//! - [`node`]: this node's membership (a key under a lease kept alive) and its view of the
//!   cluster, re-read continuously.
//! - [`log`]: the replicated log, one NATS JetStream stream per shard.
//! - [`applied`]: how far each local replica has applied its shard's log, durably.
//! - [`rebalance`]: which replicas to move so that every live node holds its share.
//! - [`secret`]: the cluster's shared secret and the keys derived from it (log tags, the
//!   node token); [`settings`]: how a node reaches etcd and NATS (credentials, TLS).
//!
//! Nothing here knows Qdrant's API; the server routes requests with it
//! (docs/design-scale-out.md).

pub mod applied;
pub mod etcd;
pub mod keys;
pub mod log;
pub mod map;
pub mod node;
pub mod rebalance;
pub mod secret;
pub mod settings;

pub use applied::AppliedMark;
pub use etcd::Etcd;
pub use keys::{KeySelector, RouteError, ShardKey, ShardingMethod};
pub use log::Log;
pub use map::{ClusterView, CollectionMap, Move, NodeInfo, ShardMap};
pub use node::ClusterNode;
pub use secret::ClusterSecret;
pub use settings::{ClusterSettings, EtcdSettings, LogSettings, TlsFiles};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A flag or setting that cannot work (an endpoint that does not parse).
    #[error("{0}")]
    Config(String),
    /// etcd refused a request.
    #[error("etcd: {0}")]
    Etcd(String),
    /// No member of the control plane answered.
    #[error("{0}")]
    Unavailable(String),
    /// The replicated log refused or did not answer.
    #[error("log: {0}")]
    Log(String),
    #[error("{0}")]
    Io(String),
    /// A file of the cluster layer that does not read back as written.
    #[error("corrupt: {0}")]
    Corrupt(String),
}
