//! Full-text indexes: `match` `text`, `text_any` and `phrase` take their token meaning on a
//! field with a `text` index (tokenizer, lowercase, stopwords, phrase matching, as Qdrant),
//! the same in sealed and growing segments, with payloads in DRAM or on SSD, and after a
//! reopen; a field without one keeps the substring meaning.

use std::collections::BTreeSet;

use diskvec_db::{Collection, CollectionConfig, Database, Filter, PointId, PointRecord};
use diskvec_vector::Metric;
use serde_json::{json, Value};

const TITLES: [&str; 10] = [
    "The Last Question",
    "The Last Answer",
    "Little Lost Robot",
    "Robot Dreams",
    "Robot AL-76 Goes Astray",
    "The Portable Star",
    "Star Light",
    "Runaround",
    "writing tests twice twice twice matters",
    "A Statue for Father",
];

fn payload(i: usize) -> Value {
    let title = match i {
        // An array: each element is a value of its own.
        10 => json!(["Galley Slave", "the Last Trump"]),
        _ => json!(TITLES[i]),
    };
    json!({"title": title.clone(), "plain": title.clone(), "starts": title})
}

fn filled(db: &Database, name: &str, on_disk_payload: bool) -> std::sync::Arc<Collection> {
    let mut config = CollectionConfig::new(2, Metric::L2);
    config.seal_threshold = 1000;
    config.idle_merge_ms = 0;
    config.on_disk_payload = on_disk_payload;
    let c = db.create_collection(name, config).unwrap();
    let schema = json!({"type": "text", "tokenizer": "word", "stopwords": "english",
                        "phrase_matching": true});
    c.create_payload_index_with("title", "text", Some(schema))
        .unwrap();
    let prefix = json!({"type": "text", "tokenizer": "prefix"});
    c.create_payload_index_with("starts", "text", Some(prefix))
        .unwrap();
    let point = |i: usize| {
        PointRecord::new(
            PointId::Num(i as u64),
            vec![i as f32, 1.0],
            payload(i).as_object().unwrap().clone(),
        )
    };
    // The first six sealed, the rest in the growing segment.
    c.upsert((0..6).map(point).collect()).unwrap();
    c.optimize(true).unwrap();
    c.upsert((6..11).map(point).collect()).unwrap();
    c
}

fn matching(c: &Collection, key: &str, kind: &str, text: &str) -> BTreeSet<u64> {
    let f = Filter::from_json(&json!({"must": [{"key": key, "match": {kind: text}}]})).unwrap();
    let (page, _) = c.scroll(Some(&f), 100, None, false, false).unwrap();
    let ids: BTreeSet<u64> = page
        .iter()
        .map(|r| match r.id {
            PointId::Num(n) => n,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        c.count(Some(&f)).unwrap(),
        ids.len(),
        "{key} {kind} {text:?}"
    );
    let mut req = diskvec_db::SearchRequest::new(20);
    req.filter = Some(f);
    let found: BTreeSet<u64> = c
        .search(&[0.0, 1.0], &req)
        .unwrap()
        .iter()
        .map(|h| match h.id {
            PointId::Num(n) => n,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        found, ids,
        "search and scroll agree on {key} {kind} {text:?}"
    );
    ids
}

fn check(c: &Collection) {
    let set = |ids: &[u64]| ids.iter().copied().collect::<BTreeSet<u64>>();
    // Tokens, lowercased, stopwords dropped.
    assert_eq!(matching(c, "title", "text", "robot"), set(&[2, 3, 4]));
    assert_eq!(matching(c, "title", "text", "ROBOT dreams"), set(&[3]));
    assert_eq!(matching(c, "title", "text", "the last"), set(&[0, 1, 10]));
    assert_eq!(
        matching(c, "title", "text", "the"),
        set(&[]),
        "only a stopword"
    );
    assert_eq!(
        matching(c, "title", "text", "Rob"),
        set(&[]),
        "a whole token"
    );
    assert_eq!(
        matching(c, "title", "text_any", "robot of the star"),
        set(&[2, 3, 4, 5, 6])
    );
    assert_eq!(matching(c, "title", "phrase", "last question"), set(&[0]));
    assert_eq!(matching(c, "title", "phrase", "question last"), set(&[]));
    assert_eq!(
        matching(c, "title", "phrase", "twice twice twice"),
        set(&[8])
    );
    assert_eq!(
        matching(c, "title", "phrase", "twice twice twice twice"),
        set(&[])
    );
    assert_eq!(matching(c, "title", "phrase", ""), set(&[]));
    // The prefix tokenizer: a query word matches the words it begins.
    assert_eq!(matching(c, "starts", "text", "ROBO"), set(&[2, 3, 4]));
    assert_eq!(matching(c, "starts", "text", "st li"), set(&[6]));
    // No text index: substrings, case and all.
    assert_eq!(matching(c, "plain", "text", "Robot"), set(&[2, 3, 4]));
    assert_eq!(matching(c, "plain", "text", "robot"), set(&[]));
    assert_eq!(
        matching(c, "plain", "text_any", "Dreams Light"),
        set(&[3, 6])
    );
    assert_eq!(matching(c, "plain", "phrase", "Rob"), set(&[2, 3, 4]));
}

#[test]
fn text_indexes_give_matches_their_token_meaning() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        for (name, on_ssd) in [("dram", false), ("ssd", true)] {
            let c = filled(&db, name, on_ssd);
            let kinds: Vec<String> = c.info().segments.iter().map(|s| s.kind.into()).collect();
            assert!(kinds.contains(&"sealed".into()) && kinds.contains(&"growing".into()));
            check(&c);
        }
    }
    // The index's options are kept with it.
    let db = Database::open(dir.path()).unwrap();
    for name in ["dram", "ssd"] {
        let c = db.collection(name).unwrap();
        check(&c);
        c.optimize(true).unwrap();
        check(&c);
    }
}

#[test]
fn conditional_writes_match_tokens_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = filled(&db, "c", false);
    // Only points whose title holds the token "robot" (any case) are replaced.
    let only = Filter::from_json(&json!({"must": [{"key": "title", "match": {"text": "robot"}}]}))
        .unwrap();
    let new = |i: u64| {
        PointRecord::new(
            PointId::Num(i),
            vec![9.0, 9.0],
            json!({"title": "replaced"}).as_object().unwrap().clone(),
        )
    };
    c.upsert_if(
        vec![new(2), new(6)],
        diskvec_db::UpsertMode::Upsert,
        Some(&only),
        None,
    )
    .unwrap();
    let got = c
        .get(&[PointId::Num(2), PointId::Num(6)], true, false)
        .unwrap();
    assert_eq!(got[0].payload.as_ref().unwrap()["title"], "replaced");
    assert_eq!(got[1].payload.as_ref().unwrap()["title"], "Star Light");
}

#[test]
fn unsupported_text_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = filled(&db, "c", false);
    for schema in [
        json!({"type": "text", "tokenizer": "multilingual"}),
        json!({"type": "text", "stemmer": {"type": "snowball", "language": "english"}}),
        json!({"type": "text", "stopwords": {"languages": ["klingon"]}}),
    ] {
        let err = c
            .create_payload_index_with("other", "text", Some(schema.clone()))
            .unwrap_err();
        assert!(
            matches!(err, diskvec_db::DbError::InvalidInput(_)),
            "{schema}: {err:?}"
        );
    }
    assert!(!c.payload_indexes().iter().any(|(f, _)| f == "other"));
}
