//! A cluster's aliases: one etcd key holding every alias, changed by compare-and-swap (a list
//! of actions applies all or nothing, by the database's own rules); any node resolves an
//! alias to its collection before routing.

use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use diskvec_cluster::map::ALIASES_KEY;
use serde_json::json;

use super::collections::etcd_call;
use super::ClusterState;
use crate::collections::{alias_actions, alias_list};
use crate::envelope::{ok, ApiError};

/// Compare-and-swap rounds before giving up on aliases others keep changing.
const CAS_ROUNDS: usize = 8;

/// `POST /collections/aliases` in a cluster.
pub async fn update(c: &Arc<ClusterState>, body: &[u8], started: Instant) -> Response {
    match apply(c, body).await {
        Ok(()) => ok(json!(true), started),
        Err(e) => e.into_response(),
    }
}

async fn apply(c: &Arc<ClusterState>, body: &[u8]) -> Result<(), ApiError> {
    let body = crate::convert::parse_body(body)?;
    let actions = alias_actions(&body)?;
    for _ in 0..CAS_ROUNDS {
        let current = etcd_call(c, |e| e.get(ALIASES_KEY)).await?;
        let aliases = match &current {
            Some(kv) => serde_json::from_slice(&kv.value).map_err(|e| {
                ApiError::bad_request(format!("the cluster's aliases do not parse: {e}"))
            })?,
            None => Default::default(),
        };
        let view = c.node.view();
        let next = diskvec_db::apply_alias_actions(&aliases, &actions, &|n| {
            view.collections.contains_key(n)
        })?;
        let value = serde_json::to_vec(&next).expect("aliases serialize");
        let written = match current {
            Some(kv) => {
                let revision = kv.mod_revision;
                etcd_call(c, move |e| {
                    e.compare_and_swap(ALIASES_KEY, revision, &value)
                })
                .await?
            }
            None => etcd_call(c, move |e| e.create(ALIASES_KEY, &value)).await?,
        };
        if written {
            // Answered once every node resolves by the new aliases, as a creation is.
            super::collections::wait_settled(c).await;
            return Ok(());
        }
    }
    Err(ApiError {
        status: StatusCode::CONFLICT,
        message: "the aliases kept changing under these actions; try again".into(),
        retry_after: Some(1),
    })
}

/// Removes the aliases of a dropped collection (as a single node does).
pub async fn forget_collection(c: &Arc<ClusterState>, name: &str) {
    for _ in 0..CAS_ROUNDS {
        let Ok(Some(kv)) = etcd_call(c, |e| e.get(ALIASES_KEY)).await else {
            return;
        };
        let Ok(mut aliases) =
            serde_json::from_slice::<std::collections::BTreeMap<String, String>>(&kv.value)
        else {
            return;
        };
        let before = aliases.len();
        aliases.retain(|_, target| target != name);
        if aliases.len() == before {
            return;
        }
        let value = serde_json::to_vec(&aliases).expect("aliases serialize");
        let revision = kv.mod_revision;
        if let Ok(true) = etcd_call(c, move |e| {
            e.compare_and_swap(ALIASES_KEY, revision, &value)
        })
        .await
        {
            return;
        }
    }
    log::warn!("cluster: the aliases of dropped collection {name} were left (busy)");
}

/// `GET /aliases`, or `GET /collections/{name}/aliases` when `of` is given.
pub fn list(c: &ClusterState, of: Option<&str>, started: Instant) -> Response {
    let view = c.node.view();
    let aliases = view
        .aliases
        .iter()
        .filter(|(_, target)| of.is_none_or(|n| *target == n))
        .map(|(a, t)| (a.clone(), t.clone()));
    ok(alias_list(aliases), started)
}
