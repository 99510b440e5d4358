//! What a router checks of a write before it is logged. A write in the log is acknowledged
//! (with `wait=false`, at once) and every replica applies it, so one a replica would refuse
//! must be refused here, as one node refuses it. The checks are those the router can make
//! from the collection's creation: the unnamed dense space's dimension (no later change of
//! the collection alters it; named spaces can be made again with another size, and are
//! checked by the replicas).

use diskvec_cluster::CollectionMap;
use serde_json::Value;

use super::split::batch_operation;
use crate::envelope::ApiError;

/// The dimension of the collection's unnamed dense space (not of multivectors), if it has one.
fn unnamed_dimension(map: &CollectionMap) -> Option<usize> {
    let vectors = map.config.get("vectors")?;
    if vectors
        .get("multivector_config")
        .is_some_and(|m| !m.is_null())
    {
        return None;
    }
    vectors.get("size")?.as_u64().map(|n| n as usize)
}

/// A vector for the unnamed space: a list of numbers (not of rows, not a named map).
fn check_one(dim: usize, vector: &Value) -> Result<(), ApiError> {
    let Some(list) = vector.as_array() else {
        return Ok(());
    };
    if list.first().is_some_and(|v| !v.is_number()) {
        return Ok(());
    }
    if list.len() != dim {
        return Err(ApiError::bad_request(diskvec_db::dimension_error(
            dim,
            list.len(),
            "",
        )));
    }
    Ok(())
}

/// The vectors of one write (`PUT /points`: `points` or `batch`; `PUT /points/vectors`).
fn check_op(dim: usize, method: &str, tail: &str, body: &Value) -> Result<(), ApiError> {
    if method != "PUT" || (tail != "/points" && tail != "/points/vectors") {
        return Ok(());
    }
    for p in body["points"].as_array().into_iter().flatten() {
        check_one(dim, &p["vector"])?;
    }
    if let Some(rows) = body["batch"]["vectors"].as_array() {
        for v in rows {
            check_one(dim, v)?;
        }
    }
    Ok(())
}

/// Refuses a write whose vectors do not fit the collection, as one node would.
pub fn check(map: &CollectionMap, method: &str, tail: &str, body: &Value) -> Result<(), ApiError> {
    let Some(dim) = unnamed_dimension(map) else {
        return Ok(());
    };
    if tail == "/points/batch" {
        for op in body["operations"].as_array().into_iter().flatten() {
            let Some((name, inner)) = op.as_object().and_then(|o| o.iter().next()) else {
                continue;
            };
            if let Some((m, p)) = batch_operation(name) {
                check_op(dim, m, p, inner)?;
            }
        }
        return Ok(());
    }
    check_op(dim, method, tail, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(vectors: Value) -> CollectionMap {
        CollectionMap {
            uid: 1,
            config: json!({ "vectors": vectors }),
            shard_number: 1,
            replication_factor: 1,
            write_consistency_factor: 1,
            shards: vec![],
            sharding_method: Default::default(),
            changes: vec![],
            strict_mode: None,
        }
    }

    #[test]
    fn the_unnamed_spaces_dimension_is_checked_in_every_form_of_write() {
        let m = map(json!({"size": 3, "distance": "Cosine"}));
        let ok3 = json!({"points": [{"id": 1, "vector": [1, 2, 3]}]});
        assert!(check(&m, "PUT", "/points", &ok3).is_ok());
        for bad in [
            json!({"points": [{"id": 1, "vector": []}]}),
            json!({"batch": {"ids": [1, 2], "vectors": [[1, 2, 3], [1, 2]]}}),
        ] {
            let e = check(&m, "PUT", "/points", &bad).unwrap_err();
            assert!(e.message.contains("dimension"), "{}", e.message);
        }
        let e = check(
            &m,
            "PUT",
            "/points/vectors",
            &json!({"points": [{"id": 1, "vector": [1]}]}),
        );
        assert!(e.is_err());
        let batch = json!({"operations": [{"upsert": {"points": [{"id": 1, "vector": [1, 2]}]}}]});
        assert!(check(&m, "POST", "/points/batch", &batch).is_err());
        // Named vectors, multivectors and other writes are the replicas' to check.
        let named = json!({"points": [{"id": 1, "vector": {"a": [1]}}]});
        assert!(check(&m, "PUT", "/points", &named).is_ok());
        let rows = json!({"points": [{"id": 1, "vector": [[1], [2]]}]});
        assert!(check(&m, "PUT", "/points", &rows).is_ok());
        assert!(check(&m, "POST", "/points/delete", &json!({"points": [1]})).is_ok());
        let spaces = map(json!({"a": {"size": 3, "distance": "Dot"}}));
        assert!(check(
            &spaces,
            "PUT",
            "/points",
            &json!({"points": [{"id": 1, "vector": [1]}]})
        )
        .is_ok());
    }
}
