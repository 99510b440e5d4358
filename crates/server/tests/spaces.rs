//! Named, optional and sparse vectors over Qdrant's REST shapes: what Qdrant's own suite
//! taught us (its fixtures create an unnamed dense space beside a sparse one, or several
//! named spaces, and upsert points that have only some of them).

mod common;

use axum::http::StatusCode;
use common::Api;
use diskvec_server::Keys;
use serde_json::{json, Value};

fn ids(result: &Value) -> Vec<u64> {
    let list = result.get("points").unwrap_or(result);
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn an_unnamed_dense_space_beside_a_sparse_one() {
    let api = Api::new(Keys::default());
    let body = json!({
        "vectors": {"size": 4, "distance": "Dot"},
        "sparse_vectors": {"sparse-text": {}},
    });
    api.ok("PUT", "/collections/c", body).await;
    let info = api.ok("GET", "/collections/c", json!({})).await;
    let params = &info["config"]["params"];
    assert_eq!(params["vectors"]["size"], 4, "{params}");
    assert_eq!(params["sparse_vectors"], json!({"sparse-text": {}}));
    let points = json!({"points": [
        {"id": 1, "vector": [0.05, 0.61, 0.76, 0.74], "payload": {"city": "Berlin"}},
        {"id": 2, "vector": [0.19, 0.81, 0.75, 0.11]},
        {"id": 9, "vector": {"sparse-text": {"indices": [66, 12], "values": [0.5, 0.5]}}},
        {"id": 10, "vector": {"sparse-text": {"indices": [3, 1, 2], "values": [0.3, 0.1, 0.2]}}},
    ]});
    api.ok("PUT", "/collections/c/points?wait=true", points)
        .await;
    // A point with only the unnamed dense vector reads back as a list; one with a sparse
    // vector as an object of named vectors, sorted by index.
    let got = api
        .ok(
            "POST",
            "/collections/c/points",
            json!({"ids": [1, 10], "with_vector": true}),
        )
        .await;
    assert!(got[0]["vector"].is_array(), "{got}");
    assert_eq!(
        got[1]["vector"],
        json!({"sparse-text": {"indices": [1, 2, 3], "values": [0.1, 0.2, 0.3]}}),
        "{got}"
    );
    // Dense search finds only points with a dense vector.
    let hits = api
        .ok(
            "POST",
            "/collections/c/points/search",
            json!({"vector": [0.2, 0.1, 0.9, 0.7], "limit": 10}),
        )
        .await;
    assert_eq!(ids(&hits), vec![1, 2]);
    // Sparse search by name, in both request forms: dot products over shared terms.
    let by_name = json!({
        "vector": {"name": "sparse-text", "vector": {"indices": [1, 12], "values": [1.0, 2.0]}},
        "limit": 10,
    });
    let hits = api
        .ok("POST", "/collections/c/points/search", by_name)
        .await;
    assert_eq!(ids(&hits), vec![9, 10]);
    assert!(
        (hits[0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-6,
        "{hits}"
    );
    assert!(
        (hits[1]["score"].as_f64().unwrap() - 0.1).abs() < 1e-6,
        "{hits}"
    );
    let query = json!({
        "query": {"indices": [2], "values": [1.0]}, "using": "sparse-text", "with_vector": true,
    });
    let found = api.ok("POST", "/collections/c/points/query", query).await;
    assert_eq!(ids(&found), vec![10]);
    assert!(found["points"][0]["vector"]["sparse-text"].is_object());
    // Mistakes name the space.
    let e = api
        .err(
            "PUT",
            "/collections/c/points",
            json!({"points": [{"id": 3, "vector": {"dense": [1.0]}}]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("no vector space named \"dense\""), "{e}");
    let e = api
        .err(
            "POST",
            "/collections/c/points/query",
            json!({"query": [1.0, 2.0, 3.0, 4.0], "using": "sparse-text"}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("is sparse"), "{e}");
    // Malformed sparse vectors fail validation in Qdrant's words and status.
    for (sparse, want) in [
        (
            json!({"indices": [1, 1], "values": [1, 2]}),
            "points[0].vector.?.indices: Validation error: must be unique",
        ),
        (
            json!({"indices": [1, 2], "values": [1]}),
            "points[0].vector.?.values: Validation error: must be the same length as indices",
        ),
    ] {
        let e = api
            .err(
                "PUT",
                "/collections/c/points",
                json!({"points": [{"id": 3, "vector": {"sparse-text": sparse}}]}),
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;
        assert!(e.starts_with("Validation error in JSON body: ["), "{e}");
        assert!(e.contains(want), "{e}");
    }
    // Space names: unique across kinds, sparse ones not empty.
    let twice = json!({
        "vectors": {"image": {"size": 2, "distance": "Dot"}},
        "sparse_vectors": {"image": {}},
    });
    let e = api
        .err("PUT", "/collections/d", twice, StatusCode::BAD_REQUEST)
        .await;
    assert!(e.contains("duplicate found with 'image'"), "{e}");
    let e = api
        .err(
            "PUT",
            "/collections/d",
            json!({"sparse_vectors": {"": {}}}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("Sparse vector name cannot be empty"), "{e}");
}

#[tokio::test]
async fn named_dense_spaces_with_optional_vectors() {
    let api = Api::new(Keys::default());
    let body = json!({
        "vectors": {
            "image": {"size": 4, "distance": "Dot", "hnsw_config": {"m": 20}},
            "text": {"size": 8, "distance": "Cosine"},
        },
        "sparse_vectors": {"sparse-image": {}, "sparse-text": {"modifier": "idf"}},
    });
    api.ok("PUT", "/collections/m", body).await;
    let info = api.ok("GET", "/collections/m", json!({})).await;
    let params = &info["config"]["params"];
    assert_eq!(params["vectors"]["text"]["size"], 8, "{params}");
    assert_eq!(params["vectors"]["image"]["distance"], "Dot", "{params}");
    // A space's own HNSW settings are kept and shown as given; others show none.
    assert_eq!(params["vectors"]["image"]["hnsw_config"], json!({"m": 20}));
    assert!(params["vectors"]["text"].get("hnsw_config").is_none());
    assert_eq!(params["sparse_vectors"]["sparse-text"]["modifier"], "idf");
    let points = json!({"points": [
        {"id": 1, "vector": {"image": [0.05, 0.61, 0.76, 0.74], "text": [1, 0, 0, 0, 0, 0, 0, 0]}},
        {"id": 2, "vector": {"image": [0.19, 0.81, 0.75, 0.11]}},
        {"id": 3, "vector": {"text": [0, 3, 4, 0, 0, 0, 0, 0]}},
        {"id": 4, "vector": {}},
    ]});
    api.ok("PUT", "/collections/m/points?wait=true", points)
        .await;
    // The batch form, with vectors by name.
    let batch = json!({"batch": {
        "ids": [5, 6],
        "vectors": {"image": [[1, 1, 1, 1], [0, 0, 0, 1]]},
    }});
    api.ok("PUT", "/collections/m/points?wait=true", batch)
        .await;
    let count = api
        .ok("POST", "/collections/m/points/count", json!({}))
        .await;
    assert_eq!(count["count"], 6);
    let search = |name: &str, vector: Value| json!({"vector": {"name": name, "vector": vector}, "limit": 10, "with_vector": [name]});
    let hits = api
        .ok(
            "POST",
            "/collections/m/points/search",
            search("text", json!([0, 1, 0, 0, 0, 0, 0, 0])),
        )
        .await;
    assert_eq!(ids(&hits), vec![3, 1]);
    // Cosine: stored at unit length, scored as the cosine.
    assert!(
        (hits[0]["score"].as_f64().unwrap() - 0.6).abs() < 1e-5,
        "{hits}"
    );
    assert_eq!(
        hits[0]["vector"]["text"][1].as_f64().unwrap(),
        0.6,
        "{hits}"
    );
    assert!(
        hits[0]["vector"].get("image").is_none(),
        "only the vectors asked for"
    );
    let hits = api
        .ok(
            "POST",
            "/collections/m/points/query",
            json!({"query": [1, 1, 1, 1], "using": "image", "limit": 10}),
        )
        .await;
    assert_eq!(ids(&hits), vec![5, 1, 2, 6]);
    let e = api
        .err(
            "POST",
            "/collections/m/points/search",
            json!({"vector": [1, 1, 1, 1], "limit": 3}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("\"\" is not a vector space"), "{e}");
    let e = api
        .err(
            "PUT",
            "/collections/m/points",
            json!({"points": [{"id": 7, "vector": {"image": [1, 2, 3]}}]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(e.contains("vector space \"image\""), "{e}");
}

#[tokio::test]
async fn vectors_of_a_point_are_set_and_removed_one_space_at_a_time() {
    let api = Api::new(Keys::default());
    let body = json!({
        "vectors": {"image": {"size": 2, "distance": "Dot"}, "text": {"size": 3, "distance": "Dot"}},
        "sparse_vectors": {"words": {}},
    });
    api.ok("PUT", "/collections/v", body).await;
    let points = json!({"points": [
        {"id": 1, "vector": {"image": [1, 2], "text": [1, 2, 3]}, "payload": {"city": "Berlin"}},
        {"id": 2, "vector": {}},
    ]});
    api.ok("PUT", "/collections/v/points?wait=true", points)
        .await;
    let uri = |id: u64| format!("/collections/v/points/{id}");
    // Set: the spaces named change, the others and the payload stay; a point listed twice
    // takes both changes in order.
    let update = json!({"points": [
        {"id": 2, "vector": {"text": [0.5, 0.5, 0.5]}},
        {"id": 2, "vector": {"words": {"indices": [7], "values": [1.5]}}},
        {"id": 1, "vector": {"image": [9, 9]}},
        {"id": 1, "vector": {"image": [3, 4]}},
    ]});
    api.ok("PUT", "/collections/v/points/vectors?wait=true", update)
        .await;
    let one = api.ok("GET", &uri(1), json!({})).await;
    assert_eq!(one["vector"]["image"], json!([3.0, 4.0]), "{one}");
    assert_eq!(one["vector"]["text"], json!([1.0, 2.0, 3.0]), "{one}");
    assert_eq!(one["payload"]["city"], "Berlin");
    let two = api.ok("GET", &uri(2), json!({})).await;
    assert_eq!(two["vector"]["text"], json!([0.5, 0.5, 0.5]), "{two}");
    assert_eq!(two["vector"]["words"]["indices"], json!([7]), "{two}");
    // Remove: by ids or by filter; removing again is no error.
    for _ in 0..2 {
        let delete = json!({"points": [1, 2], "vector": ["text"]});
        api.ok(
            "POST",
            "/collections/v/points/vectors/delete?wait=true",
            delete,
        )
        .await;
    }
    assert!(api.ok("GET", &uri(1), json!({})).await["vector"]
        .get("text")
        .is_none());
    let delete = json!({"filter": {}, "vector": ["words", "image"]});
    api.ok(
        "POST",
        "/collections/v/points/vectors/delete?wait=true",
        delete,
    )
    .await;
    assert_eq!(api.ok("GET", &uri(1), json!({})).await["vector"], json!({}));
    assert_eq!(api.ok("GET", &uri(2), json!({})).await["vector"], json!({}));
    let search = json!({"query": [1, 1], "using": "image"});
    let found = api.ok("POST", "/collections/v/points/query", search).await;
    assert_eq!(
        found["points"],
        json!([]),
        "no point has an image vector now"
    );
    // Mistakes, in Qdrant's statuses and words.
    let unknown = json!({"points": [{"id": 42, "vector": {"image": [1, 1]}}]});
    let e = api
        .err(
            "PUT",
            "/collections/v/points/vectors",
            unknown,
            StatusCode::NOT_FOUND,
        )
        .await;
    assert_eq!(e, "Not found: No point with id 42 found");
    let empty = json!({"points": [{"id": 1, "vector": {}}]});
    let e = api
        .err(
            "PUT",
            "/collections/v/points/vectors",
            empty,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    assert!(
        e.starts_with("Validation error in JSON body: [points[0].vector"),
        "{e}"
    );
    let e = api
        .err(
            "POST",
            "/collections/v/points/vectors/delete",
            json!({"points": [1], "vector": ["a"]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert_eq!(e, "Wrong input: Not existing vector name error: a");
    let e = api
        .err(
            "DELETE",
            "/collections/v/points/vectors",
            json!({}),
            StatusCode::METHOD_NOT_ALLOWED,
        )
        .await;
    assert!(e.contains("DELETE"), "{e}");
}

#[tokio::test]
async fn multivectors_in_qdrants_shapes() {
    let api = Api::new(Keys::default());
    let body = json!({"vectors": {
        "dense": {"size": 2, "distance": "Dot"},
        "multi": {"size": 2, "distance": "Dot", "multivector_config": {"comparator": "max_sim"}},
    }});
    api.ok("PUT", "/collections/mv", body).await;
    let info = api.ok("GET", "/collections/mv", json!({})).await;
    let vectors = &info["config"]["params"]["vectors"];
    assert_eq!(
        vectors["multi"]["multivector_config"]["comparator"], "max_sim",
        "{vectors}"
    );
    assert!(vectors["dense"].get("multivector_config").is_none());
    let points = json!({"points": [
        {"id": 1, "vector": {"multi": [[1, 0], [0, 1]], "dense": [1, 1]}},
        {"id": 2, "vector": {"multi": [[2, 2]]}},
        {"id": 3, "vector": {"dense": [0, 1]}},
    ]});
    api.ok("PUT", "/collections/mv/points?wait=true", points)
        .await;
    // MaxSim of [[1, 0], [0, 1]]: point 1 scores 1 + 1, point 2 scores 2 + 2.
    let query = json!({"query": [[1, 0], [0, 1]], "using": "multi", "with_vector": true});
    let found = api.ok("POST", "/collections/mv/points/query", query).await;
    let points = found["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{found}");
    assert_eq!(
        (points[0]["id"].as_u64(), points[0]["score"].as_f64()),
        (Some(2), Some(4.0))
    );
    assert_eq!(
        (points[1]["id"].as_u64(), points[1]["score"].as_f64()),
        (Some(1), Some(2.0))
    );
    assert_eq!(
        points[1]["vector"]["multi"],
        json!([[1.0, 0.0], [0.0, 1.0]])
    );
    let e = api
        .err(
            "PUT",
            "/collections/mv/points",
            json!({"points": [{"id": 4, "vector": {"multi": [[1, 2, 3]]}}]}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(
        e.contains("Vector dimension error: expected dim: 2, got 3"),
        "{e}"
    );
}

/// Multivectors as Qdrant scores them: Euclidean MaxSim reports the root of the summed
/// squared distances; an average-vector recommendation takes the examples' rows together.
#[tokio::test]
async fn multivector_scores_and_recommendations_follow_qdrant() {
    let api = Api::new(Keys::default());
    let body = json!({"vectors": {"m": {"size": 3, "distance": "Euclid",
        "multivector_config": {"comparator": "max_sim"}}}});
    api.ok("PUT", "/collections/e", body).await;
    let points = json!({"points": [
        {"id": 1, "vector": {"m": [[1.0, 2.0, 3.0], [3.0, 3.0, 3.0], [4.0, 5.0, 6.0]]}},
        {"id": 2, "vector": {"m": [[3.0, 3.0, 3.0], [4.0, 2.0, 1.0]]}},
        {"id": 3, "vector": {"m": [9.0, 9.0, 9.0]}}
    ]});
    api.ok("PUT", "/collections/e/points?wait=true", points)
        .await;
    let q = json!({"query": [[1.0, 2.0, 3.0], [3.0, 3.0, 3.0], [4.0, 5.0, 6.0]],
        "using": "m", "limit": 2});
    let hits = api.ok("POST", "/collections/e/points/query", q).await;
    let points = hits["points"].as_array().unwrap();
    assert_eq!(points[0]["id"], 1);
    assert_eq!(points[0]["score"], 0.0);
    assert_eq!(points[1]["id"], 2);
    let score = points[1]["score"].as_f64().unwrap();
    assert!((score - 19f64.sqrt()).abs() < 1e-5, "{score}");
    // One vector given for a multivector space is one row.
    let got = api.ok("GET", "/collections/e/points/3", json!({})).await;
    assert_eq!(got["vector"]["m"], json!([[9.0, 9.0, 9.0]]));
    // Average of examples [[9,9,9]] (positive) and a negative: rows together, the negative
    // negated; point 3 is its own best match.
    let rec = json!({"query": {"recommend": {"positive": [[9.0, 9.0, 9.0]]}},
        "using": "m", "limit": 1});
    let hits = api.ok("POST", "/collections/e/points/query", rec).await;
    assert_eq!(hits["points"][0]["id"], 3);
    let none = json!({"query": {"recommend": {"positive": []}}, "using": "m"});
    api.err(
        "POST",
        "/collections/e/points/query",
        none,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
}

/// `PUT`/`DELETE /collections/{c}/vectors/{name}`: a space added to a collection with
/// points, one deleted and made again with another size; sizes outside Qdrant's bounds are
/// its 422, unknown names a 404.
#[tokio::test]
async fn vector_spaces_are_added_and_deleted_on_a_live_collection() {
    let api = Api::new(Keys::default());
    let body = json!({"vectors": {
        "a": {"size": 4, "distance": "Cosine"},
        "b": {"size": 2, "distance": "Dot"},
    }});
    api.ok("PUT", "/collections/c", body).await;
    let points: Vec<Value> = (0..20)
        .map(|i| json!({"id": i, "vector": {"a": [1.0, 0.0, 0.0, i as f32], "b": [1.0, i as f32]}}))
        .collect();
    api.put_points("c", json!(points)).await;

    for size in [0, 65_537] {
        let body = json!({"dense": {"size": size, "distance": "Cosine"}});
        let (status, v) = api.call("PUT", "/collections/c/vectors/z", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(
            v["status"]["error"].as_str().unwrap().contains("size"),
            "{v}"
        );
    }
    let (status, v) = api
        .call("DELETE", "/collections/c/vectors/nope?wait=true", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");

    api.ok("DELETE", "/collections/c/vectors/a?wait=true", json!({}))
        .await;
    let body = json!({"dense": {"size": 3, "distance": "Dot"}});
    api.ok("PUT", "/collections/c/vectors/a?wait=true", body)
        .await;
    let body = json!({"sparse": {"modifier": "idf"}});
    api.ok("PUT", "/collections/c/vectors/w?wait=true", body)
        .await;
    let info = api.ok("GET", "/collections/c", json!({})).await;
    let params = &info["config"]["params"];
    assert_eq!(params["vectors"]["a"]["size"], 3, "{params}");
    assert_eq!(params["sparse_vectors"]["w"]["modifier"], "idf", "{params}");

    let scroll = json!({"limit": 20, "with_vector": true});
    let listed = api
        .ok("POST", "/collections/c/points/scroll", scroll.clone())
        .await;
    for p in listed["points"].as_array().unwrap() {
        assert_eq!(p["vector"].as_object().unwrap().len(), 1, "only b: {p}");
        assert_eq!(p["vector"]["b"].as_array().unwrap().len(), 2, "{p}");
    }
    let update = json!({"points": [{"id": 5, "vector": {"a": [0.0, 1.0, 2.0], "w": {"indices": [4], "values": [1.0]}}}]});
    api.ok("PUT", "/collections/c/points/vectors?wait=true", update)
        .await;
    let listed = api.ok("POST", "/collections/c/points/scroll", scroll).await;
    let five = &listed["points"].as_array().unwrap()[5];
    assert_eq!(five["vector"]["a"], json!([0.0, 1.0, 2.0]), "{five}");
    let search = json!({"query": [1.0, 1.0, 1.0], "using": "a", "limit": 5});
    let found = api.ok("POST", "/collections/c/points/query", search).await;
    assert_eq!(ids(&found), vec![5]);
}

/// `quantization_config` (a space's, the collection's) is kept and shown as given, changed
/// by `PATCH`, refused when it names no code size; `inline_storage` without
/// quantization or on a multivector space gets Qdrant's warning.
#[tokio::test]
async fn quantization_settings_are_shown_as_given_and_changed_by_patch() {
    let api = Api::new(Keys::default());
    let body = json!({
        "vectors": {
            "a": {"size": 8, "distance": "Dot",
                  "quantization_config": {"scalar": {"type": "int8", "quantile": 0.9}}},
            "b": {"size": 8, "distance": "Dot", "hnsw_config": {"inline_storage": true}},
            "m": {"size": 2, "distance": "Dot", "hnsw_config": {"inline_storage": true},
                  "multivector_config": {"comparator": "max_sim"}},
        },
        "quantization": {"product": {"compression": "x16", "always_ram": true}},
    });
    api.ok("PUT", "/collections/c", body).await;
    let info = api.ok("GET", "/collections/c", json!({})).await;
    let config = &info["config"];
    let vectors = &config["params"]["vectors"];
    assert_eq!(
        vectors["a"]["quantization_config"],
        json!({"scalar": {"type": "int8", "quantile": 0.9}})
    );
    assert!(
        vectors["b"].get("quantization_config").is_none(),
        "{vectors}"
    );
    assert_eq!(
        config["quantization_config"],
        json!({"product": {"compression": "x16", "always_ram": true}})
    );
    // b has the collection's quantization: only the multivector space is warned of.
    let warnings = info["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]["message"].as_str().unwrap().contains("'m'"));

    let patch = json!({
        "vectors": {"a": {"quantization_config": {"product": {"compression": "x32"}}}},
        "quantization_config": "Disabled",
    });
    api.ok("PATCH", "/collections/c", patch).await;
    let info = api.ok("GET", "/collections/c", json!({})).await;
    let config = &info["config"];
    assert_eq!(
        config["params"]["vectors"]["a"]["quantization_config"],
        json!({"product": {"compression": "x32"}})
    );
    assert_eq!(config["quantization_config"], Value::Null);
    assert_eq!(
        info["warnings"].as_array().unwrap().len(),
        2,
        "b lost its quantization"
    );

    for bad in [
        json!({"binary": {"encoding": "three_bits"}}),
        json!({"turbo": {"bits": "bits3"}}),
        json!({"product": {"compression": "x3"}}),
        json!({"scalar": {"type": "int4"}}),
    ] {
        let patch = json!({"quantization_config": bad});
        let (status, v) = api.call("PATCH", "/collections/c", patch).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    }
}

/// `on_disk_payload` is taken at creation and by `PATCH` (under `params`), shown back, and
/// refused when it is not a boolean.
#[tokio::test]
async fn on_disk_payload_is_set_at_creation_and_by_patch() {
    let api = Api::new(Keys::default());
    let body = json!({"vectors": {"size": 4, "distance": "Dot"}, "on_disk_payload": true});
    api.ok("PUT", "/collections/c", body).await;
    let shown = |info: &Value| info["config"]["params"]["on_disk_payload"].clone();
    let info = api.ok("GET", "/collections/c", json!({})).await;
    assert_eq!(shown(&info), json!(true));
    let patch = json!({"params": {"on_disk_payload": false}});
    api.ok("PATCH", "/collections/c", patch).await;
    let info = api.ok("GET", "/collections/c", json!({})).await;
    assert_eq!(shown(&info), json!(false));
    let bad = json!({"params": {"on_disk_payload": "yes"}});
    let (status, v) = api.call("PATCH", "/collections/c", bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    let info = api.ok("GET", "/collections/c", json!({})).await;
    assert_eq!(
        shown(&info),
        json!(false),
        "a refused patch changes nothing"
    );
    let bad = json!({"vectors": {"size": 4, "distance": "Dot"}, "on_disk_payload": 1});
    let (status, v) = api.call("PUT", "/collections/d", bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
}

/// `datatype` on a space: float16 and uint8 are kept and shown, their vectors come back as
/// the type holds them (uint8 cast as Qdrant casts: truncated into 0-255, where the embedded
/// API refuses), float16 overflow is a 400 naming point and dimension, `turbo4` is kept as
/// float32 and said so, and an unknown type is a 400 naming the supported ones.
#[tokio::test]
async fn datatypes_are_kept_shown_and_their_values_rounded() {
    let api = Api::new(Keys::default());
    let body = json!({"vectors": {
        "half": {"size": 4, "distance": "Euclid", "datatype": "float16"},
        "bytes": {"size": 4, "distance": "Dot", "datatype": "uint8"},
        "t4": {"size": 4, "distance": "Dot", "datatype": "turbo4"},
    }});
    api.ok("PUT", "/collections/d", body).await;
    let info = api.ok("GET", "/collections/d", json!({})).await;
    let vectors = &info["config"]["params"]["vectors"];
    assert_eq!(vectors["half"]["datatype"], "float16", "{vectors}");
    assert_eq!(vectors["bytes"]["datatype"], "uint8", "{vectors}");
    assert!(vectors["t4"].get("datatype").is_none(), "{vectors}");
    let point = json!({"points": [{"id": 1, "vector": {
        "half": [0.1, 1000.3, -2.5, 7.0],
        "bytes": [256.19, 1.81, -3.0, 2.75],
        "t4": [0.1, 0.2, 0.3, 0.4],
    }}]});
    api.ok("PUT", "/collections/d/points?wait=true", point)
        .await;
    let got = api.ok("GET", "/collections/d/points/1", json!({})).await;
    let half: Vec<f32> = [0.1f32, 1000.3, -2.5, 7.0]
        .iter()
        .map(|&x| f32::from(half::f16::from_f32(x)))
        .collect();
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    assert_eq!(floats(&got["vector"]["half"]), half, "{got}");
    assert_eq!(
        floats(&got["vector"]["bytes"]),
        [255.0, 1.0, 0.0, 2.0],
        "{got}"
    );
    assert_eq!(floats(&got["vector"]["t4"]), [0.1, 0.2, 0.3, 0.4], "{got}");
    let too_big = json!({"points": [{"id": 2, "vector": {"half": [7e4, 0, 0, 0]}}]});
    let msg = api
        .err(
            "PUT",
            "/collections/d/points?wait=true",
            too_big,
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(msg.contains("point 2") && msg.contains("65504"), "{msg}");
    let unknown = json!({"vectors": {"size": 4, "distance": "Dot", "datatype": "int4"}});
    let msg = api
        .err("PUT", "/collections/e", unknown, StatusCode::BAD_REQUEST)
        .await;
    assert!(msg.contains("float32, float16 or uint8"), "{msg}");
}
