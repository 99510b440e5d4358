//! Aliases: another name for a collection, switched all at once, kept across a reopen, and
//! gone with their collection.

use diskvec_db::{AliasAction, CollectionConfig, Database, DbError, Metric, PointId, PointRecord};

#[test]
fn aliases_switch_at_once_survive_a_reopen_and_go_with_their_collection() {
    let dir = tempfile::tempdir().unwrap();
    let create = |alias: &str, collection: &str| AliasAction::Create {
        alias: alias.into(),
        collection: collection.into(),
    };
    {
        let db = Database::open(dir.path()).unwrap();
        for name in ["blue", "green"] {
            let c = db
                .create_collection(name, CollectionConfig::new(2, Metric::L2))
                .unwrap();
            let id = if name == "blue" { 1 } else { 2 };
            c.upsert(vec![PointRecord::new(
                PointId::Num(id),
                vec![1.0, 0.0],
                Default::default(),
            )])
            .unwrap();
        }
        db.update_aliases(&[create("live", "blue")]).unwrap();
        assert_eq!(db.collection("live").unwrap().name(), "blue");
        // The switch: one list, all or nothing.
        let refused = db.update_aliases(&[
            AliasAction::Delete {
                alias: "live".into(),
            },
            create("live", "missing"),
        ]);
        assert!(matches!(refused, Err(DbError::UnknownCollection(_))));
        assert_eq!(
            db.collection("live").unwrap().name(),
            "blue",
            "nothing changed"
        );
        db.update_aliases(&[
            AliasAction::Delete {
                alias: "live".into(),
            },
            create("live", "green"),
        ])
        .unwrap();
        assert_eq!(db.collection("live").unwrap().len(), 1);
        assert!(
            db.collection("live")
                .unwrap()
                .get(&[PointId::Num(2)], false, false)
                .unwrap()
                .len()
                == 1
        );
        // An alias may not take a collection's name, nor a collection an alias's.
        assert!(matches!(
            db.update_aliases(&[create("blue", "green")]),
            Err(DbError::CollectionExists(_))
        ));
        let Err(err) = db.create_collection("live", CollectionConfig::new(2, Metric::L2)) else {
            panic!("a collection took an alias's name");
        };
        assert!(
            err.to_string().contains("Alias with the same name"),
            "{err}"
        );
        db.close().unwrap();
    }
    let db = Database::open(dir.path()).unwrap();
    assert_eq!(
        db.aliases(),
        vec![("live".to_string(), "green".to_string())]
    );
    db.drop_collection("green").unwrap();
    assert!(db.aliases().is_empty());
    assert!(matches!(
        db.collection("live"),
        Err(DbError::UnknownCollection(_))
    ));
    drop(db);
    assert!(Database::open(dir.path()).unwrap().aliases().is_empty());
}
