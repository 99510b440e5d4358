//! Reading Qdrant's REST filter JSON into a [`Filter`], refusing what is not implemented.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::model::{Condition, FieldCheck, Filter, MatchValue, MinShould, Range, ValueList};
use super::path::KeyPath;
use super::{FilterError, MAX_FILTER_CONDITIONS, MAX_FILTER_DEPTH};
use crate::point::PointId;

const FILTER_KEYS: [&str; 4] = ["must", "should", "must_not", "min_should"];

impl Filter {
    /// Reads a filter in Qdrant's REST shape. `null` (the whole filter or any clause) means
    /// absent. Anything not implemented (geo, `values_count`, `nested`, datetime ranges,
    /// full-text matches) or malformed is refused with a message naming where it is.
    pub fn from_json(v: &Value) -> Result<Filter, FilterError> {
        if v.is_null() {
            return Ok(Filter::default());
        }
        Parser { conditions: 0 }.filter(v, 1, "filter")
    }
}

fn err<T>(at: &str, msg: impl std::fmt::Display) -> Result<T, FilterError> {
    Err(FilterError(format!("{at}: {msg}")))
}

struct Parser {
    conditions: usize,
}

impl Parser {
    fn filter(&mut self, v: &Value, depth: usize, at: &str) -> Result<Filter, FilterError> {
        let Some(obj) = v.as_object() else {
            return err(
                at,
                format!("a filter must be a JSON object, got {}", kind(v)),
            );
        };
        if let Some(k) = obj.keys().find(|k| !FILTER_KEYS.contains(&k.as_str())) {
            return err(at, format!("unknown filter key {k:?}"));
        }
        let mut f = Filter::default();
        let clause = |name: &str| obj.get(name).filter(|v| !v.is_null());
        if let Some(v) = clause("must") {
            f.must = self.conditions(v, depth, &format!("{at}.must"))?;
        }
        if let Some(v) = clause("should") {
            f.should = self.conditions(v, depth, &format!("{at}.should"))?;
        }
        if let Some(v) = clause("must_not") {
            f.must_not = self.conditions(v, depth, &format!("{at}.must_not"))?;
        }
        if let Some(v) = clause("min_should") {
            f.min_should = Some(self.min_should(v, depth, &format!("{at}.min_should"))?);
        }
        Ok(f)
    }

    /// A clause: one condition object or a list of them.
    fn conditions(
        &mut self,
        v: &Value,
        depth: usize,
        at: &str,
    ) -> Result<Vec<Condition>, FilterError> {
        match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, c)| self.condition(c, depth, &format!("{at}[{i}]")))
                .collect(),
            Value::Object(_) => Ok(vec![self.condition(v, depth, at)?]),
            other => err(
                at,
                format!(
                    "expected a condition object or a list of them, got {}",
                    kind(other)
                ),
            ),
        }
    }

    fn min_should(&mut self, v: &Value, depth: usize, at: &str) -> Result<MinShould, FilterError> {
        let Some(obj) = v.as_object() else {
            return err(
                at,
                "expected {\"conditions\": [...], \"min_count\": n}".to_string(),
            );
        };
        if let Some(k) = obj
            .keys()
            .find(|k| !["conditions", "min_count"].contains(&k.as_str()))
        {
            return err(at, format!("unknown key {k:?}"));
        }
        let conditions = match obj.get("conditions").filter(|v| !v.is_null()) {
            Some(c) => self.conditions(c, depth, &format!("{at}.conditions"))?,
            None => return err(at, "\"conditions\" is missing"),
        };
        let min_count = match obj.get("min_count") {
            Some(Value::Number(n)) => match n.as_u64() {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                None => return err(at, format!("min_count {n} is not a non-negative integer")),
            },
            Some(other) if !other.is_null() => {
                return err(
                    at,
                    format!("min_count must be an integer, got {}", kind(other)),
                );
            }
            _ => return err(at, "\"min_count\" is missing"),
        };
        Ok(MinShould {
            conditions,
            min_count,
        })
    }

    fn condition(&mut self, v: &Value, depth: usize, at: &str) -> Result<Condition, FilterError> {
        self.conditions += 1;
        if self.conditions > MAX_FILTER_CONDITIONS {
            return err(
                at,
                format!("a filter may hold at most {MAX_FILTER_CONDITIONS} conditions"),
            );
        }
        let Some(obj) = v.as_object() else {
            return err(
                at,
                format!("a condition must be a JSON object, got {}", kind(v)),
            );
        };
        if obj.contains_key("key") {
            return self.field(obj, at);
        }
        if obj.contains_key("match") || obj.contains_key("range") {
            return err(at, "field condition has no \"key\"");
        }
        for (name, is_null) in [("is_empty", false), ("is_null", true)] {
            if let Some(inner) = obj.get(name) {
                only_keys(obj, &[name], at)?;
                let key = payload_field(inner, &format!("{at}.{name}"))?;
                return Ok(if is_null {
                    Condition::IsNull(key)
                } else {
                    Condition::IsEmpty(key)
                });
            }
        }
        if let Some(ids) = obj.get("has_id") {
            only_keys(obj, &["has_id"], at)?;
            return has_id(ids, &format!("{at}.has_id"));
        }
        for name in ["nested", "has_vector"] {
            if obj.contains_key(name) {
                return err(at, format!("{name:?} conditions are not supported"));
            }
        }
        if obj.keys().all(|k| FILTER_KEYS.contains(&k.as_str())) {
            if depth >= MAX_FILTER_DEPTH {
                return err(
                    at,
                    format!("filters may nest at most {MAX_FILTER_DEPTH} levels deep"),
                );
            }
            return Ok(Condition::Filter(Box::new(self.filter(
                v,
                depth + 1,
                at,
            )?)));
        }
        let k = obj
            .keys()
            .find(|k| !FILTER_KEYS.contains(&k.as_str()))
            .expect("some key is not a filter key");
        err(at, format!("unknown condition key {k:?}"))
    }

    fn field(&mut self, obj: &Map<String, Value>, at: &str) -> Result<Condition, FilterError> {
        for (k, _) in obj.iter() {
            match k.as_str() {
                "key" | "match" | "range" => {}
                "geo_bounding_box" | "geo_radius" | "geo_polygon" => {
                    return err(at, format!("geo conditions ({k:?}) are not supported"));
                }
                "values_count" => return err(at, "\"values_count\" is not supported"),
                "is_empty" | "is_null" => {}
                _ => return err(at, format!("unknown field condition key {k:?}")),
            }
        }
        let key = match &obj["key"] {
            Value::String(s) => KeyPath::parse(s).map_err(|e| FilterError(format!("{at}: {e}")))?,
            other => return err(at, format!("\"key\" must be a string, got {}", kind(other))),
        };
        let present = |name: &str| obj.get(name).filter(|v| !v.is_null());
        // `{"key": k, "is_empty": true}`: the same as `{"is_empty": {"key": k}}`; false
        // negates it. Likewise `is_null`.
        for name in ["is_empty", "is_null"] {
            let Some(flag) = present(name) else { continue };
            only_keys(obj, &["key", name], at)?;
            let Some(wanted) = flag.as_bool() else {
                return err(at, format!("{name:?} must be true or false"));
            };
            let condition = if name == "is_null" {
                Condition::IsNull(key)
            } else {
                Condition::IsEmpty(key)
            };
            return Ok(if wanted {
                condition
            } else {
                Condition::Filter(Box::new(Filter {
                    must_not: vec![condition],
                    ..Filter::default()
                }))
            });
        }
        let check = match (present("match"), present("range")) {
            (Some(_), Some(_)) => {
                return err(
                    at,
                    format!(
                        "condition on {key:?} has both \"match\" and \"range\"; \
                         put them in separate conditions",
                        key = key.as_str()
                    ),
                );
            }
            (Some(m), None) => match_check(m, &format!("{at}.match"))?,
            (None, Some(r)) => FieldCheck::Range(range(r, &format!("{at}.range"))?),
            (None, None) => {
                return err(
                    at,
                    format!(
                        "condition on {:?} has neither \"match\" nor \"range\"",
                        key.as_str()
                    ),
                );
            }
        };
        Ok(Condition::Field { key, check })
    }
}

fn only_keys(obj: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), FilterError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => err(
            at,
            format!("unexpected key {k:?} next to {:?}", allowed.join(", ")),
        ),
        None => Ok(()),
    }
}

/// `{"key": "a.b"}`, the argument of `is_empty` and `is_null`.
fn payload_field(v: &Value, at: &str) -> Result<KeyPath, FilterError> {
    let Some(obj) = v.as_object() else {
        return err(at, "expected {\"key\": \"...\"}");
    };
    only_keys(obj, &["key"], at)?;
    match obj.get("key") {
        Some(Value::String(s)) => KeyPath::parse(s).map_err(|e| FilterError(format!("{at}: {e}"))),
        Some(other) => err(at, format!("\"key\" must be a string, got {}", kind(other))),
        None => err(at, "\"key\" is missing"),
    }
}

fn has_id(v: &Value, at: &str) -> Result<Condition, FilterError> {
    let Some(items) = v.as_array() else {
        return err(at, format!("expected a list of point ids, got {}", kind(v)));
    };
    let ids = items
        .iter()
        .map(|id| PointId::from_json(id).map_err(|e| FilterError(format!("{at}: {e}"))))
        .collect::<Result<HashSet<_>, _>>()?;
    Ok(Condition::HasId(ids))
}

fn match_check(v: &Value, at: &str) -> Result<FieldCheck, FilterError> {
    let Some(obj) = v.as_object() else {
        return err(at, format!("expected an object, got {}", kind(v)));
    };
    let mut entries = obj.iter();
    let (Some((name, arg)), None) = (entries.next(), entries.next()) else {
        return err(
            at,
            "expected exactly one of \"value\", \"any\", \"except\"".to_string(),
        );
    };
    let at = format!("{at}.{name}");
    match name.as_str() {
        "value" => Ok(FieldCheck::Value(match_value(arg, &at)?)),
        "any" => Ok(FieldCheck::Any(value_list(arg, &at)?)),
        "except" => Ok(FieldCheck::Except(value_list(arg, &at)?)),
        "text" => match arg {
            Value::String(t) => Ok(FieldCheck::Text(t.clone())),
            other => err(&at, format!("expected a string, got {}", kind(other))),
        },
        "text_any" | "phrase" => err(
            &at,
            "token matches need a full-text index, which is not supported yet; \"text\" \
             matches a substring",
        ),
        _ => err(
            &at,
            "unknown match kind; expected \"value\", \"any\" or \"except\"",
        ),
    }
}

fn match_value(v: &Value, at: &str) -> Result<MatchValue, FilterError> {
    match v {
        Value::String(s) => Ok(MatchValue::Keyword(s.clone())),
        Value::Bool(b) => Ok(MatchValue::Bool(*b)),
        Value::Number(n) => integer(n, at).map(MatchValue::Integer),
        other => err(
            at,
            format!(
                "expected a string, an integer or a boolean, got {}",
                kind(other)
            ),
        ),
    }
}

fn integer(n: &serde_json::Number, at: &str) -> Result<i64, FilterError> {
    if let Some(i) = n.as_i64() {
        Ok(i)
    } else if n.is_u64() {
        err(
            at,
            format!("integer {n} does not fit in a signed 64-bit integer"),
        )
    } else {
        err(
            at,
            format!(
                "float {n} cannot be matched exactly; use \"range\" for numbers with fractions"
            ),
        )
    }
}

fn value_list(v: &Value, at: &str) -> Result<ValueList, FilterError> {
    let Some(items) = v.as_array() else {
        return err(at, format!("expected a list, got {}", kind(v)));
    };
    if items.iter().all(Value::is_string) {
        let set = items.iter().filter_map(|s| s.as_str().map(str::to_string));
        return Ok(ValueList::Keywords(set.collect()));
    }
    if items.iter().all(Value::is_number) {
        let set = items
            .iter()
            .enumerate()
            .map(|(i, n)| integer(n.as_number().expect("checked"), &format!("{at}[{i}]")));
        return Ok(ValueList::Integers(set.collect::<Result<_, _>>()?));
    }
    err(at, "expected a list of strings or a list of integers")
}

fn range(v: &Value, at: &str) -> Result<Range, FilterError> {
    let Some(obj) = v.as_object() else {
        return err(at, format!("expected an object, got {}", kind(v)));
    };
    let mut r = Range::default();
    for (name, bound) in obj {
        let slot = match name.as_str() {
            "gt" => &mut r.gt,
            "gte" => &mut r.gte,
            "lt" => &mut r.lt,
            "lte" => &mut r.lte,
            _ => return err(at, format!("unknown range bound {name:?}")),
        };
        *slot = match bound {
            Value::Null => None,
            Value::Number(n) => n.as_f64(),
            Value::String(_) => {
                return err(
                    &format!("{at}.{name}"),
                    "datetime ranges are not supported; bounds must be numbers",
                );
            }
            other => {
                return err(
                    &format!("{at}.{name}"),
                    format!("expected a number, got {}", kind(other)),
                );
            }
        };
    }
    Ok(r)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn assert_refused(v: Value, want: &[&str]) {
        assert_refused_ref(&v, want)
    }

    fn assert_refused_ref(v: &Value, want: &[&str]) {
        let msg = match Filter::from_json(v) {
            Ok(f) => panic!("accepted as {f:?}"),
            Err(e) => e.0,
        };
        for w in want {
            assert!(msg.contains(w), "message {msg:?} lacks {w:?}");
        }
    }

    #[test]
    fn accepts_qdrant_shapes() {
        let f = Filter::from_json(&json!({
            "must": [
                {"key": "lexname", "match": {"value": "noun.animal"}},
                {"key": "chars", "range": {"gt": 1, "gte": null, "lt": 40.5, "lte": 100}},
                {"key": "n", "match": {"value": -4}},
                {"key": "ok", "match": {"value": false}},
                {"key": "pos", "match": {"any": ["n", "v"]}},
                {"key": "k", "match": {"except": [1, 2]}},
                {"has_id": [1, 2, "550e8400-e29b-41d4-a716-446655440000"]},
                {"is_empty": {"key": "x"}},
                {"is_null": {"key": "y"}},
                {"should": [{"must_not": {"key": "a.b[].c", "match": {"value": "z"}}}]},
                {}
            ],
            "should": {"key": "s", "match": {"any": [7]}},
            "must_not": [],
            "min_should": {"conditions": [{"has_id": [3]}], "min_count": 1}
        }))
        .unwrap();
        assert_eq!(f.must.len(), 11);
        assert_eq!(f.should.len(), 1);
        assert!(f.must_not.is_empty());
        assert_eq!(f.min_should.as_ref().unwrap().min_count, 1);
        match &f.must[1] {
            Condition::Field {
                check: FieldCheck::Range(r),
                ..
            } => assert_eq!(
                *r,
                Range {
                    gt: Some(1.0),
                    gte: None,
                    lt: Some(40.5),
                    lte: Some(100.0)
                }
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            &f.must[4],
            Condition::Field { check: FieldCheck::Any(ValueList::Keywords(s)), .. } if s.len() == 2
        ));
        assert!(matches!(
            &f.must[5],
            Condition::Field { check: FieldCheck::Except(ValueList::Integers(s)), .. } if s.len() == 2
        ));
    }

    #[test]
    fn refusals_name_the_problem() {
        let field = |cond: Value| json!({"must": [cond]});
        assert_refused(json!({"must": 5}), &["filter.must", "a number"]);
        assert_refused(json!({"must": "x"}), &["filter.must", "a string"]);
        assert_refused(json!([1]), &["a filter must be a JSON object"]);
        assert_refused(json!({"musts": []}), &["unknown filter key \"musts\""]);
        assert_refused(
            json!({"must": [1]}),
            &["filter.must[0]", "condition must be a JSON object"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"value": [1]}})),
            &["filter.must[0].match.value", "a list"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"value": 1.5}})),
            &["float 1.5", "range"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"value": 18446744073709551615u64}})),
            &["does not fit"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"value": null}})),
            &["got null"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"any": [1, "b"]}})),
            &["list of strings or a list of integers"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"any": [1.5]}})),
            &["any[0]", "float"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"except": "b"}})),
            &["except", "expected a list"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"phrase": "b"}})),
            &["full-text index"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"phrase": "b c"}})),
            &["full-text index"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"text_any": "b"}})),
            &["full-text"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"values": 1}})),
            &["unknown match kind"],
        );
        assert_refused(field(json!({"key": "a", "match": {}})), &["exactly one"]);
        assert_refused(
            field(json!({"key": "a", "match": {"value": 1, "any": [1]}})),
            &["exactly one"],
        );
        assert_refused(
            field(json!({"key": "a", "range": {"gt": "a"}})),
            &["range.gt", "datetime ranges are not supported"],
        );
        assert_refused(
            field(json!({"key": "a", "range": {"gte": "2020-01-01T00:00:00Z"}})),
            &["datetime"],
        );
        assert_refused(
            field(json!({"key": "a", "range": {"gt": true}})),
            &["range.gt", "a boolean"],
        );
        assert_refused(
            field(json!({"key": "a", "range": {"above": 1}})),
            &["unknown range bound \"above\""],
        );
        assert_refused(
            field(json!({"key": "a", "range": [1]})),
            &["range", "a list"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"value": 1}, "range": {"gt": 1}})),
            &["both \"match\" and \"range\""],
        );
        assert_refused(
            field(json!({"key": "a"})),
            &["neither \"match\" nor \"range\""],
        );
        assert_refused(field(json!({"match": {"value": 1}})), &["no \"key\""]);
        assert_refused(
            field(json!({"key": 3, "match": {"value": 1}})),
            &["\"key\" must be a string"],
        );
        assert_refused(
            field(json!({"key": "a..b", "match": {"value": 1}})),
            &["payload key \"a..b\""],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"value": 1}, "boost": 2})),
            &["unknown field condition key \"boost\""],
        );
        assert_refused(
            field(
                json!({"key": "loc", "geo_radius": {"center": {"lon": 0, "lat": 0}, "radius": 1}}),
            ),
            &["geo", "not supported"],
        );
        assert_refused(
            field(json!({"key": "loc", "geo_bounding_box": {}})),
            &["geo"],
        );
        assert_refused(field(json!({"key": "loc", "geo_polygon": {}})), &["geo"]);
        assert_refused(
            field(json!({"key": "a", "values_count": {"gt": 1}})),
            &["values_count"],
        );
        assert_refused(
            field(json!({"key": "a", "is_empty": true, "match": {"value": 1}})),
            &["unexpected key \"match\""],
        );
        assert_refused(
            field(json!({"nested": {"key": "a", "filter": {}}})),
            &["\"nested\" conditions are not supported"],
        );
        assert_refused(field(json!({"has_vector": "v"})), &["has_vector"]);
        assert_refused(field(json!({"foo": 1})), &["unknown condition key \"foo\""]);
        assert_refused(
            field(json!({"must": [], "foo": 1})),
            &["unknown condition key \"foo\""],
        );
        assert_refused(field(json!({"has_id": [-1]})), &["has_id", "-1"]);
        assert_refused(
            field(json!({"has_id": ["not-a-uuid"]})),
            &["has_id", "not a UUID"],
        );
        assert_refused(field(json!({"has_id": [1.5]})), &["has_id"]);
        assert_refused(
            field(json!({"has_id": 1})),
            &["expected a list of point ids"],
        );
        assert_refused(
            field(json!({"has_id": [1], "key": "a"})),
            &["unknown field condition key \"has_id\""],
        );
        assert_refused(
            field(json!({"has_id": [1], "must": []})),
            &["unexpected key \"must\""],
        );
        assert_refused(
            field(json!({"is_empty": {"key": "a", "x": 1}})),
            &["unexpected key \"x\""],
        );
        assert_refused(field(json!({"is_empty": {}})), &["\"key\" is missing"]);
        assert_refused(field(json!({"is_null": "a"})), &["expected {\"key\""]);
        assert_refused(
            json!({"min_should": {"conditions": []}}),
            &["min_count", "missing"],
        );
        assert_refused(
            json!({"min_should": {"min_count": 1}}),
            &["conditions", "missing"],
        );
        assert_refused(
            json!({"min_should": {"conditions": [], "min_count": -1}}),
            &["min_count -1"],
        );
        assert_refused(
            json!({"min_should": {"conditions": [], "min_count": 1, "max": 2}}),
            &["unknown key \"max\""],
        );
        assert_refused(json!({"min_should": [1]}), &["min_should", "expected"]);
        // Errors deep inside carry their whole location.
        assert_refused(
            json!({"should": [{"must_not": [{"key": "a", "match": {"value": 0.5}}]}]}),
            &["filter.should[0].must_not[0].match.value"],
        );
    }

    #[test]
    fn depth_and_size_are_bounded() {
        let nest = |levels: usize| {
            let mut v = json!({"key": "a", "match": {"value": 1}});
            for _ in 1..levels {
                v = json!({"must": [v]});
            }
            v
        };
        // `nest(n)` wraps one field condition in n - 1 filters.
        assert!(Filter::from_json(&nest(MAX_FILTER_DEPTH + 1)).is_ok());
        assert_refused(nest(MAX_FILTER_DEPTH + 2), &["nest at most 32 levels"]);
        // Far deeper than any stack would take, still refused cleanly (built without recursion).
        let mut deep = json!({});
        for _ in 0..100_000 {
            // Not `json!`, which would copy `deep` recursively.
            deep = Value::Object(Map::from_iter([("must".to_string(), deep)]));
        }
        assert_refused_ref(&deep, &["nest at most"]);
        // serde_json drops deep values recursively; take it apart iteratively.
        while let Value::Object(mut m) = deep {
            deep = m.remove("must").unwrap_or(Value::Null);
        }

        let many = |n: usize| json!({"should": vec![json!({"has_id": [1]}); n]});
        assert!(Filter::from_json(&many(MAX_FILTER_CONDITIONS)).is_ok());
        assert_refused(
            many(MAX_FILTER_CONDITIONS + 1),
            &["at most 10000 conditions"],
        );
        // Nested filters count too.
        let nested = json!({"should": vec![json!({"must": [{"has_id": [1]}]}); MAX_FILTER_CONDITIONS / 2 + 1]});
        assert_refused(nested, &["at most 10000 conditions"]);
    }
}
