//! Settings changed while a collection serves: kept across a reopen, refused when they
//! would change what the stored data means, and strict mode's limits on writes.

use diskvec_db::{
    CollectionConfig, Database, DbError, Metric, PointId, PointRecord, SparseModifier, SparseSpace,
    StrictMode,
};

fn point(id: u64) -> PointRecord {
    PointRecord::new(PointId::Num(id), vec![id as f32, 1.0], Default::default())
}

#[test]
fn changed_settings_survive_a_reopen_and_the_shape_cannot_change() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        let mut config = CollectionConfig::new(2, Metric::L2);
        config
            .sparse
            .push(SparseSpace::new("words", SparseModifier::None));
        let c = db.create_collection("c", config).unwrap();
        c.upsert((1..=3).map(point).collect()).unwrap();
        c.update_settings(|s| {
            s.hnsw_m = 24;
            s.sparse[0].modifier = SparseModifier::Idf;
            s.strict_mode.merge(StrictMode {
                enabled: Some(true),
                max_points_count: Some(4),
                ..Default::default()
            });
            s.metadata.insert("owner".into(), "search".into());
            Ok(())
        })
        .unwrap();
        // What the stored vectors mean is fixed: dimension, distance, the spaces.
        let refused = c.update_settings(|s| {
            s.dense[0].dim = 3;
            Ok(())
        });
        assert!(
            matches!(refused, Err(DbError::InvalidInput(_))),
            "{refused:?}"
        );
        let refused = c.update_settings(|s| {
            s.strict_mode.max_query_limit = Some(0);
            Ok(())
        });
        assert!(refused.is_err());
        // A failed change leaves the settings as they were.
        assert_eq!(c.config().dense[0].dim, 2);
        assert_eq!(c.config().strict_mode.max_query_limit, None);
    }
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    let config = c.config();
    assert_eq!(config.hnsw_m, 24);
    assert_eq!(config.sparse[0].modifier, SparseModifier::Idf);
    assert_eq!(config.strict_mode.max_points_count, Some(4));
    assert_eq!(config.metadata["owner"], "search");
    assert_eq!(c.len(), 3);
}

#[test]
fn strict_mode_stops_writes_that_grow_a_full_collection() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", CollectionConfig::new(2, Metric::L2))
        .unwrap();
    c.upsert((1..=3).map(point).collect()).unwrap();
    c.update_settings(|s| {
        s.strict_mode = StrictMode {
            enabled: Some(true),
            max_points_count: Some(4),
            upsert_max_batchsize: Some(2),
            ..Default::default()
        };
        Ok(())
    })
    .unwrap();
    let batch: Vec<PointRecord> = (4..=6).map(point).collect();
    let vectors = batch.iter().map(|p| &p.vectors);
    let e = c
        .check_insert(batch.len(), vectors, "upsert limit")
        .unwrap_err();
    assert!(e.to_string().contains("upsert limit"), "{e}");
    let one = [point(4)];
    c.check_insert(1, one.iter().map(|p| &p.vectors), "upsert limit")
        .unwrap();
    c.upsert(one.to_vec()).unwrap();
    let e = c
        .check_insert(1, [point(5)].iter().map(|p| &p.vectors), "upsert limit")
        .unwrap_err();
    assert!(e.to_string().contains("Max points count limit of 4"), "{e}");
    // Off again: the same write passes.
    c.update_settings(|s| {
        s.strict_mode.enabled = Some(false);
        Ok(())
    })
    .unwrap();
    c.check_insert(1, [point(5)].iter().map(|p| &p.vectors), "upsert limit")
        .unwrap();
}

#[test]
fn payload_index_options_are_kept_with_their_index_and_go_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = serde_json::json!({"type": "keyword", "is_tenant": true});
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db
            .create_collection("c", CollectionConfig::new(2, Metric::L2))
            .unwrap();
        c.create_payload_index_with("city", "keyword", Some(options.clone()))
            .unwrap();
        c.create_payload_index("n", "integer").unwrap();
        c.create_payload_index_with("gone", "keyword", Some(options.clone()))
            .unwrap();
        c.delete_payload_index("gone").unwrap();
    }
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    let params = c.payload_index_params();
    assert_eq!(params.len(), 1, "{params:?}");
    assert_eq!(params["city"], options);
    assert_eq!(c.info().payload_index_params, params);
}
