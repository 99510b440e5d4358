//! Aliases over Qdrant's routes.

mod common;

use axum::http::StatusCode;
use common::Api;
use diskvec_server::Keys;
use serde_json::json;

#[tokio::test]
async fn aliases_route_requests_and_refuse_names_in_use() {
    let api = Api::new(Keys::default());
    api.create_dot4("c1").await;
    api.create_dot4("c2").await;
    let points = json!({"points": [{"id": 1, "vector": [1, 0, 0, 0]}]});
    api.ok("PUT", "/collections/c1/points?wait=true", points)
        .await;
    let create =
        json!({"actions": [{"create_alias": {"alias_name": "live", "collection_name": "c1"}}]});
    assert_eq!(
        api.ok("POST", "/collections/aliases", create).await,
        json!(true)
    );
    let all = api.ok("GET", "/aliases", json!({})).await;
    assert_eq!(
        all["aliases"],
        json!([{"alias_name": "live", "collection_name": "c1"}])
    );
    let mine = api.ok("GET", "/collections/live/aliases", json!({})).await;
    assert_eq!(mine["aliases"].as_array().unwrap().len(), 1);
    let count = api
        .ok("POST", "/collections/live/points/count", json!({}))
        .await;
    assert_eq!(count["count"], 1);
    // An alias may not take a collection's name (409), nor a collection an alias's (400).
    let taken =
        json!({"actions": [{"create_alias": {"alias_name": "c2", "collection_name": "c1"}}]});
    api.err("POST", "/collections/aliases", taken, StatusCode::CONFLICT)
        .await;
    let body = json!({"vectors": {"size": 4, "distance": "Dot"}});
    let e = api
        .err("PUT", "/collections/live", body, StatusCode::BAD_REQUEST)
        .await;
    assert!(e.contains("Alias with the same name"), "{e}");
    // Renamed, then deleted: requests by the name find nothing.
    let rename = json!({"actions": [{"rename_alias": {"old_alias_name": "live", "new_alias_name": "prod"}}]});
    api.ok("POST", "/collections/aliases", rename).await;
    let delete = json!({"actions": [{"delete_alias": {"alias_name": "prod"}}]});
    api.ok("POST", "/collections/aliases", delete).await;
    let query = json!({"query": [1, 0, 0, 0]});
    api.err(
        "POST",
        "/collections/prod/points/query",
        query,
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(
        api.ok("GET", "/aliases", json!({})).await["aliases"],
        json!([])
    );
}
