//! `on_disk_payload`: sealed segments leave their payloads in `points.dvp` and read one when
//! a filter, an `order_by` or an answer needs it. Every answer is the one a collection with
//! its payloads in DRAM gives (filters on indexed and unindexed keys, scroll, count, get,
//! order_by, deletes by filter, through a reopen), the segments hold less DRAM, the setting
//! changed on a live collection applies at the next open, and a damaged payload is an error
//! naming the file, not a wrong answer.

mod common;

use std::path::{Path, PathBuf};

use common::clustered_points;
use diskvec_db::query::{Query, QueryRequest};
use diskvec_db::{Collection, CollectionConfig, Database, DbError, Filter, PointId, SearchRequest};
use diskvec_vector::Metric;
use serde_json::json;

const DIM: usize = 8;
const POINTS: u64 = 700;

fn config(on_disk_payload: bool) -> CollectionConfig {
    let mut c = CollectionConfig::new(DIM, Metric::L2);
    c.seal_threshold = 1000;
    c.idle_merge_ms = 0;
    c.max_degree = 16;
    c.build_list = 32;
    c.on_disk_payload = on_disk_payload;
    c
}

fn filled(db: &Database, name: &str, on_disk_payload: bool) -> std::sync::Arc<Collection> {
    let c = db.create_collection(name, config(on_disk_payload)).unwrap();
    c.create_payload_index("tag", "keyword").unwrap();
    let mut points = clustered_points(0..POINTS, DIM, 8);
    for p in &mut points {
        let PointId::Num(i) = p.id else {
            unreachable!()
        };
        // Every seventh point has no payload at all.
        if i % 7 != 0 {
            p.payload = json!({
                "n": i,
                "tag": format!("t{}", i % 5),
                "words": "a sentence long enough to be worth leaving on disk",
                "nested": {"odd": i % 2 == 1},
            })
            .as_object()
            .unwrap()
            .clone();
        }
    }
    c.upsert(points).unwrap();
    c.optimize(true).unwrap();
    c.delete(vec![PointId::Num(3), PointId::Num(41)]).unwrap();
    c
}

fn filter(f: serde_json::Value) -> Filter {
    Filter::from_json(&f).unwrap()
}

/// Everything a reader asks of payloads, as comparable text.
fn answers(c: &Collection) -> Vec<String> {
    let filters = [
        None,
        Some(filter(
            json!({"must": [{"key": "tag", "match": {"value": "t2"}}]}),
        )),
        Some(filter(
            json!({"must": [{"key": "n", "range": {"gte": 100, "lt": 400}}]}),
        )),
        Some(filter(
            json!({"must": [{"key": "nested.odd", "match": {"value": true}}]}),
        )),
        Some(filter(json!({"must": [{"is_empty": {"key": "tag"}}]}))),
    ];
    let mut out = Vec::new();
    for f in &filters {
        for q in (0..POINTS).step_by(70) {
            // Exact: two builds of the same points need not make the same graph.
            let mut req = SearchRequest::new(10);
            req.filter = f.clone();
            req.with_payload = true;
            req.exact = true;
            let query = common::clustered_vector(q, DIM, 8);
            let hits = c.search(&query, &req).unwrap();
            out.push(format!(
                "{:?}",
                hits.iter()
                    .map(|h| (h.id, h.payload.clone()))
                    .collect::<Vec<_>>()
            ));
        }
        // Counted by segment (through the indexes), listed by the id tracker: the same.
        let count = c.count(f.as_ref()).unwrap();
        let (all, _) = c.scroll(f.as_ref(), 10_000, None, false, false).unwrap();
        assert_eq!(count, all.len());
        out.push(format!("count {count}"));
        let (page, next) = c.scroll(f.as_ref(), 50, None, true, false).unwrap();
        out.push(format!(
            "{:?} {next:?}",
            page.iter().map(|r| (r.id, &r.payload)).collect::<Vec<_>>()
        ));
        let ordered = QueryRequest {
            filter: f.clone(),
            ..QueryRequest::new(
                Some(Query::OrderBy {
                    key: "n".into(),
                    descending: true,
                    start_from: None,
                }),
                20,
            )
        };
        let hits = c.query(&ordered, true, false).unwrap();
        out.push(format!(
            "{:?}",
            hits.iter()
                .map(|h| (h.id, h.payload.clone()))
                .collect::<Vec<_>>()
        ));
    }
    let ids: Vec<PointId> = (0..POINTS).step_by(3).map(PointId::Num).collect();
    let records = c.get(&ids, true, false).unwrap();
    out.push(format!(
        "{:?}",
        records
            .iter()
            .map(|r| (r.id, &r.payload))
            .collect::<Vec<_>>()
    ));
    out
}

/// Fails naming the first answer that differs (the lists are long).
fn same(got: &[String], want: &[String], when: &str) {
    assert_eq!(got.len(), want.len(), "{when}");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{when}: answer {i} differs:\n{}\nvs\n{}", got[i], want[i]);
    }
}

fn sealed_bytes(c: &Collection) -> usize {
    let info = c.info();
    info.segments
        .iter()
        .filter(|s| s.kind == "sealed")
        .map(|s| s.dram_bytes)
        .sum()
}

fn payloads_on_ssd(c: &Collection) -> Vec<bool> {
    let info = c.info();
    let sealed = info.segments.iter().filter(|s| s.kind == "sealed");
    sealed.map(|s| s.payloads_on_ssd).collect()
}

fn points_file(db_dir: &Path, collection: &str) -> PathBuf {
    let segments = db_dir.join("collections").join(collection).join("segments");
    std::fs::read_dir(&segments)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("points.dvp"))
        .find(|p| p.exists())
        .expect("a sealed segment")
}

#[test]
fn payloads_on_ssd_answer_as_those_in_dram() {
    let dir = tempfile::tempdir().unwrap();
    let in_dram = {
        let db = Database::open(dir.path()).unwrap();
        let a = filled(&db, "dram", false);
        let b = filled(&db, "ssd", true);
        assert_eq!(payloads_on_ssd(&a), [false]);
        assert_eq!(payloads_on_ssd(&b), [true]);
        assert!(
            sealed_bytes(&b) < sealed_bytes(&a),
            "{} vs {}",
            sealed_bytes(&b),
            sealed_bytes(&a)
        );
        let in_dram = answers(&a);
        same(&answers(&b), &in_dram, "first");
        // The index's own count of the points it holds agrees with the filter's, and reads
        // no payload; an unindexed field has none to give.
        let has_tag = filter(json!({"must_not": [{"is_empty": {"key": "tag"}}]}));
        for c in [&a, &b] {
            assert_eq!(
                c.indexed_points("tag"),
                Some(c.count(Some(&has_tag)).unwrap())
            );
            assert_eq!(c.indexed_points("n"), None);
        }
        // Deletes by an unindexed filter read the payloads they test.
        let gone = filter(json!({"must": [{"key": "n", "range": {"gte": 600}}]}));
        assert_eq!(
            a.delete_where(&gone).unwrap().1,
            b.delete_where(&gone).unwrap().1
        );
        let in_dram = answers(&a);
        same(&answers(&b), &in_dram, "after the deletes");
        assert!(in_dram.iter().any(|a| a.contains("t2")));
        in_dram
    };
    let db = Database::open(dir.path()).unwrap();
    let b = db.collection("ssd").unwrap();
    assert_eq!(payloads_on_ssd(&b), [true]);
    same(&answers(&b), &in_dram, "after a reopen");
}

#[test]
fn the_setting_applies_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let db = Database::open(dir.path()).unwrap();
        let c = filled(&db, "c", false);
        c.update_settings(|c| {
            c.on_disk_payload = true;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            payloads_on_ssd(&c),
            [false],
            "what was opened stays as opened"
        );
        answers(&c)
    };
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db.collection("c").unwrap();
        assert!(c.info().config.on_disk_payload);
        assert_eq!(payloads_on_ssd(&c), [true]);
        same(&answers(&c), &before, "on SSD");
        c.update_settings(|c| {
            c.on_disk_payload = false;
            Ok(())
        })
        .unwrap();
    }
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(payloads_on_ssd(&c), [false]);
    same(&answers(&c), &before, "back in DRAM");
}

#[test]
fn a_damaged_payload_on_ssd_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = filled(&db, "ssd", true);
    // Flip a byte inside the last payload's JSON while the segment is open: the open
    // checked the whole file, so only the read of that payload can notice.
    let file = points_file(dir.path(), "ssd");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    let is_damage = |e: DbError| match e {
        DbError::Corrupt { path, message } => {
            assert!(path.ends_with("points.dvp"), "{path:?}");
            assert!(message.contains("checksum"), "{message}");
        }
        other => panic!("a damaged payload must be reported, got {other:?}"),
    };
    // A filter the keyword index answers reads no payload.
    let indexed = filter(json!({"must": [{"key": "tag", "match": {"value": "t1"}}]}));
    assert!(c.count(Some(&indexed)).unwrap() > 100);
    let last = PointId::Num(POINTS - 1);
    is_damage(c.get(&[last], true, false).unwrap_err());
    // Only requests that meet the damage fail: this one reads no payload.
    assert!(c.count(Some(&indexed)).unwrap() > 100);
    // An index that cannot be built from every payload is not made anywhere.
    is_damage(c.create_payload_index("n", "integer").unwrap_err());
    assert_eq!(
        c.payload_indexes(),
        [("tag".to_string(), "keyword".to_string())]
    );
    // Ids alone read no payload.
    assert_eq!(c.get(&[last], false, false).unwrap().len(), 1);
    // A filter no index answers reads every payload: the damage fails it, whether it is
    // checked inside the graph search or point by point.
    let unindexed = filter(json!({"must": [{"key": "n", "range": {"gte": 0}}]}));
    is_damage(c.count(Some(&unindexed)).unwrap_err());
    let mut req = SearchRequest::new(10);
    req.filter = Some(unindexed);
    req.exact = true;
    is_damage(
        c.search(&common::clustered_vector(1, DIM, 8), &req)
            .unwrap_err(),
    );
}
