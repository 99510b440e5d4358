//! Conditional writes: `update_mode` (insert only, update only) and `update_filter`, decided
//! by what is stored when the write takes its turn.

use diskvec_db::{
    CollectionConfig, Database, Filter, Metric, NamedVectors, PointId, PointRecord, UpsertMode,
    Vector,
};
use serde_json::json;

fn point(id: u64, x: f32, version: i64) -> PointRecord {
    let payload = json!({"version": version});
    PointRecord::new(
        PointId::Num(id),
        vec![x, 1.0],
        payload.as_object().unwrap().clone(),
    )
}

fn version(c: &diskvec_db::Collection, id: u64) -> Option<i64> {
    let r = c.get(&[PointId::Num(id)], true, false).unwrap();
    r.first()
        .and_then(|r| r.payload.as_ref()?.get("version")?.as_i64())
}

#[test]
fn modes_and_filters_choose_which_points_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", CollectionConfig::new(2, Metric::L2))
        .unwrap();
    c.upsert(vec![point(1, 0.0, 1)]).unwrap();
    // Insert only: the existing point stays, the new one comes.
    let both = vec![point(1, 9.0, 2), point(2, 9.0, 2)];
    c.upsert_if(both.clone(), UpsertMode::InsertOnly, None, None)
        .unwrap();
    assert_eq!((version(&c, 1), version(&c, 2)), (Some(1), Some(2)));
    // Update only: the existing one changes, a new one is not created.
    let more = vec![point(1, 9.0, 3), point(3, 9.0, 3)];
    c.upsert_if(more, UpsertMode::UpdateOnly, None, None)
        .unwrap();
    assert_eq!((version(&c, 1), version(&c, 3)), (Some(3), None));
    // A filter on the stored payload: only points at an older version are replaced; a new
    // point is inserted whatever the filter says.
    let older =
        Filter::from_json(&json!({"must": [{"key": "version", "range": {"lt": 3}}]})).unwrap();
    let batch = vec![point(1, 5.0, 4), point(2, 5.0, 4), point(4, 5.0, 4)];
    c.upsert_if(batch, UpsertMode::Upsert, Some(&older), None)
        .unwrap();
    assert_eq!(version(&c, 1), Some(3), "version 3 is not older than 3");
    assert_eq!(version(&c, 2), Some(4));
    assert_eq!(version(&c, 4), Some(4));
    // Vector updates under a filter.
    let mut v = NamedVectors::new();
    v.insert(String::new(), Vector::Dense(vec![7.0, 7.0]));
    let none_match =
        Filter::from_json(&json!({"must": [{"key": "version", "range": {"gt": 10}}]})).unwrap();
    c.update_vectors_where(vec![(PointId::Num(1), v.clone())], &none_match)
        .unwrap();
    let r = c.get(&[PointId::Num(1)], false, true).unwrap();
    assert_eq!(
        r[0].vector().unwrap()[0],
        9.0,
        "as the update-only upsert left it"
    );
    // Everything survives a reopen as logged.
    drop(c);
    drop(db);
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(c.len(), 3);
    assert_eq!(version(&c, 1), Some(3));
}

/// `set_payload` with a key: merged into the object there, objects made on the way,
/// `[n]` and `[]` stepping into array elements.
#[test]
fn payload_is_set_at_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", CollectionConfig::new(2, Metric::L2))
        .unwrap();
    let payload = json!({"k": {"a": 1, "list": [{"x": 1}, {"y": 2}]}, "plain": 5});
    c.upsert(vec![PointRecord::new(
        PointId::Num(1),
        vec![0.0, 1.0],
        payload.as_object().unwrap().clone(),
    )])
    .unwrap();
    let set = |key: &str, v: serde_json::Value| {
        c.set_payload_at(&[PointId::Num(1)], key, v.as_object().unwrap())
            .unwrap();
    };
    set("k", json!({"b": 2}));
    set("k.list[0]", json!({"z": 3}));
    set("k.list[].w", json!({"q": 4}));
    set("new.deep", json!({"n": 1}));
    set("plain", json!({"now": "object"}));
    let got = c.get(&[PointId::Num(1)], true, false).unwrap()[0]
        .payload
        .clone()
        .unwrap();
    assert_eq!(
        serde_json::Value::Object(got),
        json!({
            "k": {"a": 1, "b": 2, "list": [
                {"x": 1, "z": 3, "w": {"q": 4}},
                {"y": 2, "w": {"q": 4}}
            ]},
            "new": {"deep": {"n": 1}},
            "plain": {"now": "object"}
        })
    );
    assert!(c
        .set_payload_at(&[PointId::Num(1)], "bad[", json!({}).as_object().unwrap())
        .is_err());
}
