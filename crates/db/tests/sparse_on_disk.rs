//! A sparse space whose index is `on_disk`: sealed segments keep only the term dictionary
//! in DRAM and read each query term's posting list from `sparse.<i>.dvi`. Answers are the
//! same as with the lists in DRAM (scores, IDF, deletes, filters, through a reopen), the
//! segment holds less DRAM, and a damaged list is an error naming the file, not a wrong
//! answer.

use std::path::Path;

use diskvec_db::{
    Collection, CollectionConfig, Database, DbError, Filter, NamedVectors, PointId, PointRecord,
    SearchRequest, SparseModifier, SparseSpace, SparseVector, Vector,
};
use serde_json::json;

const POINTS: u64 = 600;

fn config(on_disk: bool) -> CollectionConfig {
    let mut words = SparseSpace::new("w", SparseModifier::Idf);
    words.on_disk = Some(on_disk);
    let mut c = CollectionConfig::with_spaces(Vec::new(), vec![words]);
    c.seal_threshold = 1000;
    c.idle_merge_ms = 0;
    c
}

fn point(i: u64) -> PointRecord {
    let terms: Vec<u32> = [i % 13, 20 + i % 7, 40 + i % 3, 60 + (i * 7) % 50]
        .into_iter()
        .map(|t| t as u32)
        .collect();
    let mut sorted = terms.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let values = sorted
        .iter()
        .map(|&t| 1.0 + (t % 5) as f32 * 0.25)
        .collect();
    PointRecord {
        id: PointId::Num(i),
        vectors: NamedVectors::from([(
            "w".to_string(),
            Vector::Sparse(SparseVector {
                indices: sorted,
                values,
            }),
        )]),
        payload: json!({"odd": i % 2 == 1}).as_object().unwrap().clone(),
    }
}

fn filled(db: &Database, name: &str, on_disk: bool) -> std::sync::Arc<Collection> {
    let c = db.create_collection(name, config(on_disk)).unwrap();
    c.upsert((0..POINTS).map(point).collect()).unwrap();
    c.optimize(true).unwrap();
    c.delete(vec![PointId::Num(3), PointId::Num(40)]).unwrap();
    c
}

fn answers(c: &Collection) -> Vec<Vec<(PointId, f32)>> {
    let odd =
        Filter::from_json(&json!({"must": [{"key": "odd", "match": {"value": true}}]})).unwrap();
    let mut out = Vec::new();
    for q in 0..30u32 {
        for filter in [None, Some(odd.clone())] {
            let mut req = SearchRequest::new(10);
            req.using = "w".into();
            req.filter = filter;
            let query = SparseVector {
                indices: vec![q % 13, 20 + q % 7, 61 + q],
                values: vec![1.0, 0.5, 2.0],
            };
            let hits = c.search_sparse(query, &req).unwrap();
            out.push(hits.into_iter().map(|h| (h.id, h.score)).collect());
        }
    }
    out
}

fn segment_dir(db_dir: &Path, collection: &str) -> std::path::PathBuf {
    let segments = db_dir.join("collections").join(collection).join("segments");
    std::fs::read_dir(&segments)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("sparse.0.dvi").exists())
        .expect("a sealed segment with its posting lists on disk")
}

#[test]
fn posting_lists_on_ssd_answer_as_those_in_dram() {
    let dir = tempfile::tempdir().unwrap();
    let (in_dram, on_ssd, dram_bytes) = {
        let db = Database::open(dir.path()).unwrap();
        let a = filled(&db, "dram", false);
        let b = filled(&db, "ssd", true);
        let bytes =
            |c: &Collection| -> usize { c.info().segments.iter().map(|s| s.dram_bytes).sum() };
        assert!(bytes(&b) < bytes(&a), "{} vs {}", bytes(&b), bytes(&a));
        (answers(&a), answers(&b), bytes(&b))
    };
    assert_eq!(on_ssd, in_dram);
    assert!(on_ssd.iter().any(|hits| hits.len() == 10));
    let seg = segment_dir(dir.path(), "ssd");
    {
        let db = Database::open(dir.path()).unwrap();
        let b = db.collection("ssd").unwrap();
        assert_eq!(answers(&b), in_dram, "after a reopen");
        let now: usize = b.info().segments.iter().map(|s| s.dram_bytes).sum();
        assert_eq!(now, dram_bytes);
    }
    // Damage the last posting list's bytes: the search fails naming the file.
    let file = seg.join("sparse.0.dvi");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let db = Database::open(dir.path()).unwrap();
    let b = db.collection("ssd").unwrap();
    let mut failed = None;
    for q in 0..200u32 {
        let mut req = SearchRequest::new(10);
        req.using = "w".into();
        let query = SparseVector {
            indices: vec![q],
            values: vec![1.0],
        };
        if let Err(e) = b.search_sparse(query, &req) {
            failed = Some(e);
            break;
        }
    }
    match failed {
        Some(DbError::Corrupt { path, message }) => {
            assert!(path.ends_with("sparse.0.dvi"), "{path:?}");
            assert!(message.contains("checksum"), "{message}");
        }
        other => panic!("a damaged list must be reported, got {other:?}"),
    }
}
