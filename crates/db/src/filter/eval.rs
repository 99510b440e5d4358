//! Evaluating a [`Filter`] against one point, with Qdrant's condition-checker semantics.

use serde_json::Value;

use std::sync::Arc;

use super::datetime;
use super::model::{Condition, FieldCheck, Filter, MatchValue, MinShould, ValueList};
use super::path::KeyPath;
use super::text::{TextIndexParams, TextMatch};
use crate::point::{Payload, PointId};

/// What evaluation asks of the segment a point lies in, beyond the point itself.
pub(crate) struct PointContext<'a> {
    /// Whether the point has a vector in the space of this name.
    pub(crate) has_vector: &'a dyn Fn(&str) -> bool,
    /// The text index of a key, where the field has one: it gives `text`, `text_any` and
    /// `phrase` their token meaning.
    pub(crate) text_index: &'a dyn Fn(&KeyPath) -> Option<Arc<TextIndexParams>>,
}

impl Filter {
    /// Whether the point passes the filter, `has_vector` saying whether it has a vector in
    /// the space of a name (no field has a text index). A point without a payload is
    /// checked as one with an empty payload.
    pub fn matches_point(
        &self,
        id: PointId,
        payload: Option<&Payload>,
        has_vector: &dyn Fn(&str) -> bool,
    ) -> bool {
        self.matches_in(
            id,
            payload,
            &PointContext {
                has_vector,
                text_index: &|_| None,
            },
        )
    }

    /// Whether the point passes the filter, in the segment `ctx` describes.
    pub(crate) fn matches_in(
        &self,
        id: PointId,
        payload: Option<&Payload>,
        ctx: &PointContext,
    ) -> bool {
        let empty = Payload::new();
        self.check(id, payload.unwrap_or(&empty), ctx)
    }

    /// `matches_point` for a filter without `has_vector` conditions (any it has fail).
    pub fn matches(&self, id: PointId, payload: Option<&Payload>) -> bool {
        self.matches_point(id, payload, &|_| false)
    }

    fn check(&self, id: PointId, payload: &Payload, ctx: &PointContext) -> bool {
        let ok = |c: &Condition| c.check(id, payload, ctx);
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

/// The slice of `total` a point id falls in: a mix of its bits (SplitMix64's finaliser),
/// so neighbouring ids spread over the slices. A cluster places points on shards by it too,
/// so a `slice` filter and a shard agree.
pub fn slice_of(id: PointId, total: u32) -> u32 {
    let raw = match id {
        PointId::Num(n) => n,
        PointId::Uuid(u) => {
            let bits = u.get();
            (bits as u64) ^ ((bits >> 64) as u64).rotate_left(17)
        }
    };
    let mut z = raw.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % u64::from(total.max(1))) as u32
}

impl Condition {
    fn check(&self, id: PointId, payload: &Payload, ctx: &PointContext) -> bool {
        match self {
            Condition::HasVector(name) => (ctx.has_vector)(name),
            // Token matches where the field has a text index (a phrase only where it was
            // made for phrases); the raw strings otherwise.
            Condition::Field {
                key,
                check: check @ FieldCheck::Text(kind, query),
            } => {
                let index = (ctx.text_index)(key)
                    .filter(|p| *kind != TextMatch::Phrase || p.phrase_matching);
                let one = |v: &Value| match (&index, v.as_str()) {
                    (Some(params), Some(s)) => params.matches(*kind, query, s),
                    _ => check.check_one(v),
                };
                key.any_value(payload, &mut |v| match v {
                    Value::Array(items) => items.iter().any(one),
                    _ => one(v),
                })
            }
            // Counted per value reached; a key reaching nothing holds 0 values.
            Condition::Field {
                key,
                check: FieldCheck::ValuesCount(count),
            } => {
                let mut reached = false;
                key.any_value(payload, &mut |v| {
                    reached = true;
                    count.contains(values_in(v))
                }) || (!reached && count.contains(0))
            }
            // A key that reaches nothing fails every other check (`except` included).
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
            Condition::Slice { total, index } => slice_of(id, *total) == *index,
            Condition::Filter(f) => f.check(id, payload, ctx),
            // Each object element on its own, as the whole payload (ids are refused inside;
            // keys inside are relative, so no text index is looked up by them).
            Condition::Nested(nested) => {
                let inside = PointContext {
                    has_vector: ctx.has_vector,
                    text_index: &|_| None,
                };
                nested.key.any_value(payload, &mut |v| {
                    v.as_object()
                        .is_some_and(|element| nested.filter.check(id, element, &inside))
                })
            }
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
            FieldCheck::Text(TextMatch::Any, t) => v
                .as_str()
                .is_some_and(|s| t.split_whitespace().any(|word| s.contains(word))),
            FieldCheck::Text(_, t) => v.as_str().is_some_and(|s| s.contains(t.as_str())),
            FieldCheck::Prefix(p) => v.as_str().is_some_and(|s| s.starts_with(p.as_str())),
            FieldCheck::Any(list) => list_holds(list, v) == Some(true),
            // Qdrant: null is never "other than" the list; any other value of a type the list
            // cannot hold (a bool, an object, a float against integers) is.
            FieldCheck::Except(list) => match v {
                Value::Null => false,
                _ => list_holds(list, v) != Some(true),
            },
            FieldCheck::Range(r) => v.as_f64().is_some_and(|x| r.contains(x)),
            FieldCheck::DatetimeRange(r) => v
                .as_str()
                .and_then(datetime::parse)
                .is_some_and(|t| r.contains(t)),
            FieldCheck::Geo(g) => g.check_value(v),
            FieldCheck::ValuesCount(count) => count.contains(values_in(v)),
        }
    }
}

/// How many values `v` counts as for `values_count`: an array's elements, none for null.
fn values_in(v: &Value) -> u64 {
    match v {
        Value::Null => 0,
        Value::Array(items) => items.len() as u64,
        _ => 1,
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
        // Into an array of objects only with `[]`.
        no(json!({"must": [{"key": "country.cities.name", "match": {"value": "Munich"}}]}));
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
    fn nested_checks_each_element_alone() {
        let p = json!({
            "cities": [
                {"name": "A", "pop": 9, "tags": ["x"], "sub": [{"k": 1, "v": 2}, {"k": 3, "v": 4}]},
                {"name": "B", "pop": 1, "tags": ["x", "y", "z"], "sub": [{"k": 5, "v": 6}]},
                "not an object",
                null
            ],
            "one": {"pop": 9}
        });
        let nested =
            |key: &str, inner: Value| json!({"must": {"nested": {"key": key, "filter": inner}}});
        let pop = |r: Value| json!({"key": "pop", "range": r});
        let tags = |r: Value| json!({"key": "tags", "values_count": r});
        let yes = |f: Value| assert!(hits(&f, &p), "{f}");
        let no = |f: Value| assert!(!hits(&f, &p), "{f}");
        yes(nested(
            "cities",
            json!({"must": [pop(json!({"gt": 5})), tags(json!({"lt": 2}))]}),
        ));
        no(nested(
            "cities",
            json!({"must": [pop(json!({"gt": 5})), tags(json!({"gt": 2}))]}),
        ));
        yes(nested(
            "cities",
            json!({"must_not": [pop(json!({"gt": 5}))]}),
        ));
        no(nested(
            "cities",
            json!({"must_not": [{"key": "name", "match": {"any": ["A", "B"]}}]}),
        ));
        yes(nested(
            "cities[]",
            json!({"must": {"key": "name", "match": {"value": "B"}}}),
        ));
        // Elements that are not objects are skipped, and a key that is no array reaches none.
        no(nested("one", json!({})));
        no(nested("missing", json!({})));
        yes(nested("cities", json!({})));
        yes(nested(
            "cities",
            nested(
                "sub",
                json!({"must": [{"key": "k", "match": {"value": 3}}, {"key": "v", "match": {"value": 4}}]}),
            ),
        ));
        no(nested(
            "cities",
            nested(
                "sub",
                json!({"must": [{"key": "k", "match": {"value": 1}}, {"key": "v", "match": {"value": 4}}]}),
            ),
        ));
        // Keys inside are relative to the element: the outer key names nothing there.
        no(nested(
            "cities",
            json!({"must": {"key": "cities[].pop", "range": {"gt": 0}}}),
        ));
    }

    #[test]
    fn values_count_geo_and_datetime_checks() {
        let p = json!({
            "tags": ["a", "b"], "one": "x", "none": null, "empty": [], "obj": {"a": 1},
            "loc": [{"lon": 10.0, "lat": 10.0}, {"lon": 50.0, "lat": 50.0}],
            "at": "2020-05-01T10:00:00+02:00", "ats": ["bad", "2021-01-01"], "num": 5
        });
        let count =
            |key: &str, r: Value| hits(&json!({"must": {"key": key, "values_count": r}}), &p);
        assert!(count("tags", json!({"gte": 2, "lte": 2})));
        assert!(!count("tags", json!({"gt": 2})));
        assert!(count("one", json!({"gte": 1, "lte": 1})));
        assert!(count("obj", json!({"gte": 1, "lte": 1})));
        for key in ["none", "empty", "missing"] {
            assert!(count(key, json!({"lt": 1})), "{key}");
            assert!(!count(key, json!({"gt": 0})), "{key}");
        }
        // Under `must_not`, a missing key holds 0 values, which is fewer than 1.
        assert!(!hits(
            &json!({"must_not": {"key": "missing", "values_count": {"lt": 1}}}),
            &p
        ));

        let radius = |lon: f64, lat: f64, m: f64| {
            hits(
                &json!({"must": {"key": "loc", "geo_radius": {"center": {"lon": lon, "lat": lat}, "radius": m}}}),
                &p,
            )
        };
        assert!(radius(50.001, 50.0, 1000.0));
        assert!(radius(10.0, 10.001, 1000.0));
        assert!(!radius(30.0, 30.0, 1000.0));
        assert!(!hits(
            &json!({"must": {"key": "num", "geo_radius": {"center": {"lon": 0, "lat": 0}, "radius": 1e9}}}),
            &p
        ));

        let range = |key: &str, r: Value| hits(&json!({"must": {"key": key, "range": r}}), &p);
        assert!(range(
            "at",
            json!({"gte": "2020-05-01T08:00:00Z", "lte": "2020-05-01T08:00:00Z"})
        ));
        assert!(!range("at", json!({"gt": "2020-05-01T08:00:00Z"})));
        assert!(
            range("ats", json!({"gt": "2020-12-31"})),
            "any parseable element"
        );
        assert!(!range("ats", json!({"lt": "2020-12-31"})));
        assert!(
            !range("num", json!({"gt": "1970-01-01"})),
            "numbers are not datetimes"
        );
        assert!(
            !range("at", json!({"gt": 0})),
            "datetime strings are not numbers"
        );
    }

    // Random shapes from the new conditions' vocabulary: each is refused or evaluates, and
    // nothing panics (a filter comes from the network).
    #[test]
    fn random_filters_never_panic() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        fn atom(rng: &mut StdRng) -> Value {
            let atoms = [
                json!(null),
                json!(true),
                json!(0),
                json!(-1),
                json!(u64::MAX),
                json!(1.5),
                json!(1e308),
                json!(-180.5),
                json!(""),
                json!("a"),
                json!("2015-01-01"),
                json!("2015-01-01T00:00:00+01:00"),
                json!("9999-12-31T23:59:60.9999999999-23:59"),
                json!([]),
                json!({}),
                json!({"lon": 1, "lat": 2}),
                json!({"lon": 500, "lat": 2}),
                json!([{"lon": 0, "lat": 0}, {"lon": 0, "lat": 0}, {"lon": 0, "lat": 1}, {"lon": 0, "lat": 0}]),
            ];
            atoms[rng.random_range(0..atoms.len())].clone()
        }
        fn value(rng: &mut StdRng, depth: usize) -> Value {
            const KEYS: [&str; 32] = [
                "must",
                "should",
                "must_not",
                "key",
                "match",
                "range",
                "has_id",
                "is_null",
                "value",
                "gt",
                "lte",
                "nested",
                "filter",
                "values_count",
                "geo_radius",
                "geo_bounding_box",
                "geo_polygon",
                "center",
                "radius",
                "top_left",
                "bottom_right",
                "exterior",
                "interiors",
                "points",
                "lon",
                "lat",
                "a",
                "a[]",
                "a.b",
                "b[0]",
                "a[",
                "gte",
            ];
            let r = rng.random::<f64>();
            if depth > 5 || r < 0.3 {
                return atom(rng);
            }
            if r < 0.45 {
                return Value::Array(
                    (0..rng.random_range(0..5))
                        .map(|_| value(rng, depth + 1))
                        .collect(),
                );
            }
            let mut m = serde_json::Map::new();
            for _ in 0..rng.random_range(1..4) {
                m.insert(
                    KEYS[rng.random_range(0..KEYS.len())].into(),
                    value(rng, depth + 1),
                );
            }
            Value::Object(m)
        }
        /// A well-formed condition with random arguments.
        fn condition(rng: &mut StdRng, depth: usize) -> Value {
            let key = ["a", "b", "a[].b", "lon", "a[0]", "key"][rng.random_range(0..6)];
            let n = |rng: &mut StdRng| json!(rng.random_range(-3..4));
            let pt = |rng: &mut StdRng| json!({"lon": rng.random_range(-180.0..=180.0), "lat": rng.random_range(-90.0..=90.0)});
            match rng.random_range(0..if depth < 4 { 8 } else { 6 }) {
                0 => {
                    json!({"key": key, "values_count": {"gt": rng.random_range(0..3), "lte": null}})
                }
                1 => {
                    json!({"key": key, "geo_radius": {"center": pt(rng), "radius": rng.random_range(-1.0..1e7)}})
                }
                2 => {
                    json!({"key": key, "geo_bounding_box": {"top_left": pt(rng), "bottom_right": pt(rng)}})
                }
                3 => {
                    let (a, b, c) = (pt(rng), pt(rng), pt(rng));
                    json!({"key": key, "geo_polygon": {"exterior": {"points": [a, b, c, a]}, "interiors": [{"points": [b, c, a, b]}]}})
                }
                4 => {
                    json!({"key": key, "range": {"gte": "2015-01-01", "lt": "2016-01-01T00:00:00Z"}})
                }
                5 => json!({"key": key, "match": {"value": n(rng)}}),
                6 => {
                    json!({"nested": {"key": key, "filter": {"must": [condition(rng, depth + 1)], "must_not": [condition(rng, depth + 1)]}}})
                }
                _ => json!({"should": [condition(rng, depth + 1), condition(rng, depth + 1)]}),
            }
        }
        let mut rng = StdRng::seed_from_u64(0xf117e5);
        let payloads = [
            json!({"a": [{"b": [1, 2], "lon": 1, "lat": 2}, {"b": "2015-01-01"}], "b": [0, 1]}),
            json!({"a": {"lon": 1.5, "lat": 2.5}, "key": null, "lon": [{"lon": 0, "lat": 0}]}),
            json!({"a": [[{"b": 1}], null, {"a": [{"b": {"lon": 0, "lat": 0}}]}]}),
            json!({}),
        ];
        let (mut ok, mut refused, mut matched) = (0, 0, 0);
        for _ in 0..20_000 {
            let f = match rng.random_range(0..6) {
                0 => json!({"must": [{"nested": {"key": "a", "filter": value(&mut rng, 1)}}]}),
                1 => {
                    json!({"must": [{"key": "a", (["geo_radius", "geo_bounding_box", "geo_polygon", "values_count", "range"][rng.random_range(0..5)]): value(&mut rng, 2)}]})
                }
                2 => value(&mut rng, 0),
                _ => {
                    json!({"must": [condition(&mut rng, 0)], "should": [condition(&mut rng, 0), condition(&mut rng, 0)]})
                }
            };
            match Filter::from_json(&f) {
                Ok(f) => {
                    ok += 1;
                    for p in &payloads {
                        matched +=
                            usize::from(f.matches(PointId::Num(1), Some(&payload(p.clone()))));
                    }
                    f.field_uses();
                    f.condition_count();
                }
                Err(_) => refused += 1,
            }
        }
        assert!(
            ok > 8000 && refused > 5000 && matched > 1000,
            "ok {ok}, refused {refused}, matched {matched}"
        );
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

    #[test]
    fn slices_split_ids_into_disjoint_parts_that_cover_them() {
        let ids: Vec<PointId> = (0..1_000u64)
            .map(PointId::Num)
            .chain((0..1_000u128).map(|u| PointId::Uuid((u << 70 | u).into())))
            .collect();
        let mut sizes = [0usize; 4];
        for &id in &ids {
            let parts: Vec<u32> = (0..4)
                .filter(|&i| {
                    let f = json!({"must": [{"slice": {"total": 4, "index": i}}]});
                    Filter::from_json(&f).unwrap().matches(id, None)
                })
                .collect();
            assert_eq!(parts.len(), 1, "{id:?} in {parts:?}");
            sizes[parts[0] as usize] += 1;
        }
        assert!(sizes.iter().all(|&n| n > 400), "{sizes:?}");
        let past = json!({"must": [{"slice": {"total": 4, "index": 4}}]});
        assert!(Filter::from_json(&past).unwrap_err().is_validation());
        let zero = json!({"must": [{"slice": {"total": 0, "index": 0}}]});
        assert!(!Filter::from_json(&zero).unwrap_err().is_validation());
    }
}
