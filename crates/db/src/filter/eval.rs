//! Evaluating a [`Filter`] against one point, with Qdrant's condition-checker semantics.

use serde_json::Value;

use super::model::{Condition, FieldCheck, Filter, MatchValue, MinShould, ValueList};
use crate::point::{Payload, PointId};

impl Filter {
    /// Whether the point passes the filter. A point without a payload is checked as one with
    /// an empty payload.
    pub fn matches(&self, id: PointId, payload: Option<&Payload>) -> bool {
        let empty = Payload::new();
        self.check(id, payload.unwrap_or(&empty))
    }

    fn check(&self, id: PointId, payload: &Payload) -> bool {
        let ok = |c: &Condition| c.check(id, payload);
        self.must.iter().all(ok)
            && (self.should.is_empty() || self.should.iter().any(ok))
            && !self.must_not.iter().any(ok)
            && self.min_should.as_ref().is_none_or(
                |MinShould {
                     conditions,
                     min_count,
                 }| {
                    conditions.iter().filter(|c| ok(c)).take(*min_count).count() == *min_count
                },
            )
    }
}

impl Condition {
    fn check(&self, id: PointId, payload: &Payload) -> bool {
        match self {
            // A key that reaches nothing fails every match and range (`except` included).
            Condition::Field { key, check } => {
                key.any_value(payload, &mut |v| match v {
                    // One level only: an array inside the array is a value of its own.
                    Value::Array(items) => items.iter().any(|x| check.check_one(x)),
                    _ => check.check_one(v),
                })
            }
            Condition::IsEmpty(key) => !key.any_value(payload, &mut |v| match v {
                Value::Null => false,
                Value::Array(items) => !items.is_empty(),
                _ => true,
            }),
            Condition::IsNull(key) => key.any_value(payload, &mut |v| v.is_null()),
            Condition::HasId(ids) => ids.contains(&id),
            Condition::Filter(f) => f.check(id, payload),
        }
    }
}

impl FieldCheck {
    /// The check against one value that is not the reached array itself.
    pub(crate) fn check_one(&self, v: &Value) -> bool {
        match self {
            FieldCheck::Value(m) => match (m, v) {
                (MatchValue::Keyword(want), Value::String(s)) => want == s,
                (MatchValue::Integer(want), Value::Number(n)) => n.as_i64() == Some(*want),
                (MatchValue::Bool(want), Value::Bool(b)) => want == b,
                _ => false,
            },
            FieldCheck::Text(t) => v.as_str().is_some_and(|s| s.contains(t.as_str())),
            FieldCheck::Any(list) => list_holds(list, v) == Some(true),
            // Qdrant: null is never "other than" the list; any other value of a type the list
            // cannot hold (a bool, an object, a float against integers) is.
            FieldCheck::Except(list) => match v {
                Value::Null => false,
                _ => list_holds(list, v) != Some(true),
            },
            FieldCheck::Range(r) => v.as_f64().is_some_and(|x| r.contains(x)),
        }
    }
}

/// Whether the list holds `v`; `None` when `v` is not of the list's type (a string against
/// integers, a float against integers, ...).
fn list_holds(list: &ValueList, v: &Value) -> Option<bool> {
    match (list, v) {
        (ValueList::Keywords(set), Value::String(s)) => Some(set.contains(s.as_str())),
        (ValueList::Integers(set), Value::Number(n)) => n.as_i64().map(|i| set.contains(&i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn filter(v: Value) -> Filter {
        Filter::from_json(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn payload(v: Value) -> Payload {
        v.as_object().unwrap().clone()
    }

    fn hits(f: &Value, p: &Value) -> bool {
        filter(f.clone()).matches(PointId::Num(1), Some(&payload(p.clone())))
    }

    /// The ids of Qdrant's documentation points (city/color) that pass `f`.
    fn doc_ids(f: Value) -> Vec<u64> {
        let f = filter(f);
        let points = [
            (1, "London", "green"),
            (2, "London", "red"),
            (3, "London", "blue"),
            (4, "Berlin", "red"),
            (5, "Moscow", "green"),
            (6, "Moscow", "blue"),
        ];
        points
            .iter()
            .filter(|(id, city, color)| {
                let p = payload(json!({"city": city, "color": color}));
                f.matches(PointId::Num(*id), Some(&p))
            })
            .map(|p| p.0)
            .collect()
    }

    #[test]
    fn qdrant_documentation_clauses() {
        let london = json!({"key": "city", "match": {"value": "London"}});
        let red = json!({"key": "color", "match": {"value": "red"}});
        assert_eq!(doc_ids(json!({"must": [london, red]})), [2]);
        assert_eq!(doc_ids(json!({"should": [london, red]})), [1, 2, 3, 4]);
        assert_eq!(doc_ids(json!({"must_not": [london, red]})), [5, 6]);
        assert_eq!(
            doc_ids(json!({"must": [london], "must_not": [red]})),
            [1, 3]
        );
        assert_eq!(
            doc_ids(json!({"must_not": [{"must": [london, red]}]})),
            [1, 3, 4, 5, 6]
        );
        // One condition instead of a list.
        assert_eq!(doc_ids(json!({"must": london, "must_not": red})), [1, 3]);
        assert_eq!(doc_ids(json!({})), [1, 2, 3, 4, 5, 6]);
        assert_eq!(doc_ids(Value::Null), [1, 2, 3, 4, 5, 6]);
        assert_eq!(
            doc_ids(json!({"must": null, "should": null})),
            [1, 2, 3, 4, 5, 6]
        );
        // An empty `should` is no constraint here (Qdrant would match nothing).
        assert_eq!(doc_ids(json!({"should": []})), [1, 2, 3, 4, 5, 6]);
        assert_eq!(doc_ids(json!({"must": {"has_id": [2, 5, 99]}})), [2, 5]);
        assert_eq!(
            doc_ids(
                json!({"should": {"has_id": [1]}, "must": {"key": "color", "match": {"any": ["green", "blue"]}}})
            ),
            [1]
        );
        assert_eq!(
            doc_ids(json!({"must": {"key": "color", "match": {"except": ["green", "blue"]}}})),
            [2, 4]
        );
    }

    #[test]
    fn min_should_counts_matching_conditions() {
        let conds = json!([
            {"key": "city", "match": {"value": "London"}},
            {"key": "color", "match": {"value": "red"}},
            {"has_id": [4, 6]}
        ]);
        let with = |n: u64| doc_ids(json!({"min_should": {"conditions": conds, "min_count": n}}));
        assert_eq!(with(0), [1, 2, 3, 4, 5, 6]);
        assert_eq!(with(1), [1, 2, 3, 4, 6]);
        assert_eq!(with(2), [2, 4]);
        assert_eq!(with(3), Vec::<u64>::new());
        assert_eq!(with(4), Vec::<u64>::new());
        assert_eq!(
            doc_ids(json!({"min_should": {"conditions": [], "min_count": 1}})),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn match_types_do_not_mix() {
        let p = json!({"s": "3", "i": 3, "f": 3.0, "b": true, "big": 18446744073709551615u64});
        assert!(hits(
            &json!({"must": {"key": "i", "match": {"value": 3}}}),
            &p
        ));
        // Integer match is on integer values only; 3.0 is a float.
        assert!(!hits(
            &json!({"must": {"key": "f", "match": {"value": 3}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "s", "match": {"value": 3}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "i", "match": {"value": "3"}}}),
            &p
        ));
        assert!(hits(
            &json!({"must": {"key": "s", "match": {"value": "3"}}}),
            &p
        ));
        assert!(hits(
            &json!({"must": {"key": "b", "match": {"value": true}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "b", "match": {"value": false}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "i", "match": {"value": true}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "b", "match": {"value": 1}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "big", "match": {"any": [-1]}}}),
            &p
        ));
        // Range compares every number as f64, floats and integers alike.
        for key in ["i", "f"] {
            assert!(hits(
                &json!({"must": {"key": key, "range": {"gte": 3, "lt": 3.5}}}),
                &p
            ));
            assert!(!hits(
                &json!({"must": {"key": key, "range": {"gt": 3}}}),
                &p
            ));
        }
        assert!(!hits(
            &json!({"must": {"key": "s", "range": {"gte": 0}}}),
            &p
        ));
        assert!(!hits(
            &json!({"must": {"key": "b", "range": {"gte": 0}}}),
            &p
        ));
        assert!(hits(
            &json!({"must": {"key": "big", "range": {"gt": 1e19}}}),
            &p
        ));
        assert!(hits(&json!({"must": {"key": "i", "range": {}}}), &p));
        assert!(!hits(&json!({"must": {"key": "missing", "range": {}}}), &p));
    }

    #[test]
    fn except_follows_qdrant() {
        let except = |list: Value| json!({"must": {"key": "x", "match": {"except": list}}});
        let ab = except(json!(["a", "b"]));
        assert!(hits(&ab, &json!({"x": "c"})));
        assert!(!hits(&ab, &json!({"x": "a"})));
        // Any element outside the list is enough.
        assert!(hits(&ab, &json!({"x": ["a", "c"]})));
        assert!(!hits(&ab, &json!({"x": ["a", "b"]})));
        // Missing, null, empty array: nothing to be "other than" the list.
        assert!(!hits(&ab, &json!({})));
        assert!(!hits(&ab, &json!({"x": null})));
        assert!(!hits(&ab, &json!({"x": []})));
        assert!(!hits(&ab, &json!({"x": [null]})));
        // Values the list cannot hold are outside it.
        assert!(hits(&ab, &json!({"x": true})));
        assert!(hits(&ab, &json!({"x": 1})));
        assert!(hits(&ab, &json!({"x": {"a": 1}})));
        assert!(hits(&ab, &json!({"x": [["a"]]})));
        let ints = except(json!([1, 2]));
        assert!(hits(&ints, &json!({"x": 3})));
        assert!(!hits(&ints, &json!({"x": 2})));
        assert!(hits(&ints, &json!({"x": 2.5})));
        assert!(hits(&ints, &json!({"x": "1"})));
        // An empty list excludes nothing.
        assert!(hits(&except(json!([])), &json!({"x": 5})));
        assert!(!hits(&except(json!([])), &json!({"x": null})));
        // And `any: []` admits nothing.
        let none = json!({"must": {"key": "x", "match": {"any": []}}});
        assert!(!hits(&none, &json!({"x": "a"})));
    }

    #[test]
    fn arrays_and_nested_keys() {
        let p = json!({
            "country": {
                "name": "Germany",
                "cities": [
                    {"name": "Berlin", "population": 3.7, "sightseeing": ["Brandenburg Gate", "Reichstag"]},
                    {"name": "Munich", "population": 1.5, "sightseeing": ["Marienplatz", "Olympiapark"]}
                ]
            },
            "tags": ["x", "y"],
            "nums": [1, 5, 9],
            "deep": [["z"]]
        });
        let yes = |f: Value| assert!(hits(&f, &p), "{f}");
        let no = |f: Value| assert!(!hits(&f, &p), "{f}");
        yes(json!({"should": [{"key": "country.name", "match": {"value": "Germany"}}]}));
        no(json!({"should": [{"key": "country.name", "match": {"value": "Japan"}}]}));
        yes(json!({"should": [{"key": "country.cities[].population", "range": {"gte": 3.0}}]}));
        no(json!({"should": [{"key": "country.cities[].population", "range": {"gte": 9.0}}]}));
        yes(
            json!({"must": [{"key": "country.cities[].sightseeing", "match": {"value": "Reichstag"}}]}),
        );
        yes(json!({"must": [{"key": "country.cities.name", "match": {"value": "Munich"}}]}));
        yes(json!({"must": [{"key": "country.cities[1].name", "match": {"value": "Munich"}}]}));
        no(json!({"must": [{"key": "country.cities[0].name", "match": {"value": "Munich"}}]}));
        yes(json!({"must": [{"key": "tags", "match": {"value": "y"}}]}));
        yes(json!({"must": [{"key": "tags[]", "match": {"any": ["q", "x"]}}]}));
        yes(json!({"must": [{"key": "nums", "range": {"gt": 8}}]}));
        no(json!({"must": [{"key": "nums", "range": {"gt": 9}}]}));
        // The match looks one array level deep, not two.
        no(json!({"must": [{"key": "deep", "match": {"value": "z"}}]}));
        yes(json!({"must": [{"key": "deep[]", "match": {"value": "z"}}]}));
    }

    #[test]
    fn is_empty_and_is_null() {
        let p = json!({
            "price": 499.9, "parts": [], "packaging": null, "not_null": [null],
            "obj": {}, "items": [{"v": null}, {"v": 1}]
        });
        let empty = |key: &str| hits(&json!({"must": {"is_empty": {"key": key}}}), &p);
        let null = |key: &str| hits(&json!({"must": {"is_null": {"key": key}}}), &p);
        assert!(!empty("price"));
        assert!(empty("something_new"));
        assert!(empty("parts"));
        assert!(empty("packaging"));
        assert!(!empty("not_null"));
        assert!(!empty("obj"));
        assert!(!empty("items[].v"));
        assert!(!null("price"));
        assert!(!null("parts"));
        assert!(!null("something_else"));
        assert!(null("packaging"));
        assert!(!null("not_null"));
        assert!(null("items[].v"));
        // The field form says the same, and `false` negates it.
        for key in ["price", "parts", "packaging", "something_new"] {
            let field =
                |name: &str, flag: bool| hits(&json!({"must": [{"key": key, name: flag}]}), &p);
            assert_eq!(field("is_empty", true), empty(key), "{key}");
            assert_eq!(field("is_empty", false), !empty(key), "{key}");
            assert_eq!(field("is_null", true), null(key), "{key}");
            assert_eq!(field("is_null", false), !null(key), "{key}");
        }
        assert!(Filter::from_json(&json!({"must": [{"key": "a", "is_empty": 1}]})).is_err());
        // Without a payload at all, every field is empty and none is null.
        let f = filter(
            json!({"must": {"is_empty": {"key": "a"}}, "must_not": {"is_null": {"key": "a"}}}),
        );
        assert!(f.matches(PointId::Num(0), None));
    }

    #[test]
    fn text_matches_a_substring_of_strings() {
        let p = json!({"title": "Moby Dick", "tags": ["whale", "sea"], "n": 5});
        let text =
            |key: &str, t: &str| hits(&json!({"must": {"key": key, "match": {"text": t}}}), &p);
        assert!(text("title", "by Di"));
        assert!(
            !text("title", "moby"),
            "case-sensitive, as Qdrant without a text index"
        );
        assert!(text("tags", "hal"));
        assert!(!text("n", "5"), "numbers are not text");
        assert!(!text("missing", ""));
    }

    #[test]
    fn has_id_mixes_numbers_and_uuids() {
        let uuid = "550e8400-e29b-41d4-a716-446655440000";
        let f = filter(json!({"must": {"has_id": [7, uuid]}}));
        assert!(f.matches(PointId::Num(7), None));
        assert!(f.matches(PointId::parse_uuid(uuid).unwrap(), None));
        assert!(!f.matches(PointId::Num(8), None));
        assert!(!filter(json!({"must": {"has_id": []}})).matches(PointId::Num(7), None));
    }

    #[test]
    fn filter_is_shareable() {
        fn check<T: Clone + std::fmt::Debug + Send + Sync>() {}
        check::<Filter>();
        assert!(filter(json!({})).is_empty());
        assert!(filter(json!({"must": [], "should": null})).is_empty());
        assert!(!filter(json!({"must": {"has_id": []}})).is_empty());
    }
}
