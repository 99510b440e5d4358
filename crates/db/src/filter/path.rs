//! Payload keys: `a.b.c`, `a[].b`, `a[0].b`, and the values they reach in a payload.

use std::fmt;

use serde_json::Value;

use super::{FilterError, MAX_KEY_STEPS};
use crate::point::Payload;

/// A parsed payload key. Equal keys are spelled the same, so the text doubles as the identity
/// used to find a field's index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KeyPath {
    text: String,
    first: String,
    rest: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Step {
    Key(String),
    /// `[]`: every element of an array.
    Each,
    /// `[n]`: one element of an array.
    At(usize),
}

impl KeyPath {
    pub(crate) fn parse(text: &str) -> Result<Self, FilterError> {
        let bad = |why: &str| FilterError(format!("payload key {text:?}: {why}"));
        let mut steps = Vec::new();
        let mut rest = text;
        let mut expect_name = true;
        while !rest.is_empty() {
            if expect_name {
                let end = rest.find(['.', '[', ']']).unwrap_or(rest.len());
                if end == 0 {
                    return Err(bad("empty name"));
                }
                steps.push(Step::Key(rest[..end].to_string()));
                rest = &rest[end..];
                expect_name = false;
            } else if let Some(after) = rest.strip_prefix('.') {
                rest = after;
                expect_name = true;
            } else if let Some(after) = rest.strip_prefix('[') {
                let close = after.find(']').ok_or_else(|| bad("unclosed '['"))?;
                let inside = &after[..close];
                steps.push(if inside.is_empty() {
                    Step::Each
                } else if inside.bytes().all(|b| b.is_ascii_digit()) {
                    Step::At(inside.parse().map_err(|_| bad("array index too large"))?)
                } else {
                    return Err(bad("expected [] or [number]"));
                });
                rest = &after[close + 1..];
            } else {
                return Err(bad("expected '.' or '[' after a name or ']'"));
            }
            if steps.len() > MAX_KEY_STEPS {
                return Err(bad(&format!("more than {MAX_KEY_STEPS} steps")));
            }
        }
        if expect_name {
            return Err(bad("empty name"));
        }
        let mut steps = steps.into_iter();
        let Some(Step::Key(first)) = steps.next() else {
            unreachable!("a key starts with a name");
        };
        Ok(KeyPath {
            text: text.to_string(),
            first,
            rest: steps.collect(),
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// Calls `f` on every value the key reaches, until `f` returns true; returns whether it did.
    /// A value reached that is itself an array is passed whole: callers decide how to look in.
    pub(crate) fn any_value<'a>(
        &self,
        payload: &'a Payload,
        f: &mut dyn FnMut(&'a Value) -> bool,
    ) -> bool {
        payload
            .get(&self.first)
            .is_some_and(|v| walk(&self.rest, v, f))
    }
}

impl KeyPath {
    /// Merges `src` into the object(s) the key reaches in `payload`, making what is missing
    /// on the way (Qdrant's set-payload-by-key): a name step makes an object where there is
    /// none (replacing a value of another type), `[n]` steps into an element that exists,
    /// `[]` into every element; the object reached takes `src`'s keys.
    pub(crate) fn set(&self, payload: &mut Payload, src: &Payload) {
        let slot = payload.entry(self.first.clone()).or_insert(Value::Null);
        set_at(&self.rest, slot, src);
    }
}

fn set_at(steps: &[Step], dest: &mut Value, src: &Payload) {
    let Some((head, rest)) = steps.split_first() else {
        if !dest.is_object() {
            *dest = Value::Object(Payload::new());
        }
        if let Value::Object(map) = dest {
            for (k, v) in src {
                map.insert(k.clone(), v.clone());
            }
        }
        return;
    };
    match head {
        Step::Key(k) => {
            if !dest.is_object() {
                *dest = Value::Object(Payload::new());
            }
            if let Value::Object(map) = dest {
                set_at(rest, map.entry(k.clone()).or_insert(Value::Null), src);
            }
        }
        Step::At(i) => match dest {
            Value::Array(items) => {
                if let Some(v) = items.get_mut(*i) {
                    set_at(rest, v, src);
                }
            }
            other => *other = Value::Array(Vec::new()),
        },
        Step::Each => match dest {
            Value::Array(items) => items.iter_mut().for_each(|v| set_at(rest, v, src)),
            other => *other = Value::Array(Vec::new()),
        },
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn walk<'a>(steps: &[Step], v: &'a Value, f: &mut dyn FnMut(&'a Value) -> bool) -> bool {
    let Some((head, rest)) = steps.split_first() else {
        return f(v);
    };
    match (head, v) {
        // A name steps into an object only: an array of objects at `a` is reached into by
        // `a[].b`, not `a.b` (Qdrant's paths since its v2 paths).
        (Step::Key(k), Value::Object(map)) => map.get(k).is_some_and(|x| walk(rest, x, f)),
        (Step::Each, Value::Array(items)) => items.iter().any(|x| walk(rest, x, f)),
        (Step::At(i), Value::Array(items)) => items.get(*i).is_some_and(|x| walk(rest, x, f)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn values(key: &str, payload: Value) -> Vec<Value> {
        let payload = payload.as_object().unwrap().clone();
        let mut out = Vec::new();
        KeyPath::parse(key).unwrap().any_value(&payload, &mut |v| {
            out.push(v.clone());
            false
        });
        out
    }

    #[test]
    fn keys_walk_objects_and_arrays() {
        let p = json!({
            "a": {"b": {"c": 1}},
            "country": {"cities": [{"name": "Berlin", "pop": 3.7}, {"name": "Munich"}, 5]},
            "list": [[1, 2], {"x": 9}],
            "plain": [1, 2]
        });
        assert_eq!(values("a.b.c", p.clone()), vec![json!(1)]);
        assert_eq!(values("a.b", p.clone()), vec![json!({"c": 1})]);
        assert_eq!(values("a.x", p.clone()), Vec::<Value>::new());
        assert_eq!(values("missing", p.clone()), Vec::<Value>::new());
        assert_eq!(
            values("country.cities[].name", p.clone()),
            vec![json!("Berlin"), json!("Munich")]
        );
        // No implicit fan-out over an array without `[]`.
        assert_eq!(
            values("country.cities.name", p.clone()),
            Vec::<Value>::new()
        );
        assert_eq!(
            values("country.cities[1].name", p.clone()),
            vec![json!("Munich")]
        );
        assert_eq!(
            values("country.cities[7].name", p.clone()),
            Vec::<Value>::new()
        );
        assert_eq!(
            values("list[]", p.clone()),
            vec![json!([1, 2]), json!({"x": 9})]
        );
        assert_eq!(values("list[][]", p.clone()), vec![json!(1), json!(2)]);
        // The leaf array is passed whole; `[]` passes its elements.
        assert_eq!(values("plain", p.clone()), vec![json!([1, 2])]);
        assert_eq!(values("plain[]", p.clone()), vec![json!(1), json!(2)]);
        // `[]` on a non-array reaches nothing.
        assert_eq!(values("a[]", p), Vec::<Value>::new());
    }

    #[test]
    fn bad_keys_are_refused_with_the_key_named() {
        for (key, why) in [
            ("", "empty name"),
            ("a.", "empty name"),
            (".a", "empty name"),
            ("a..b", "empty name"),
            ("a[", "unclosed"),
            ("a[x]", "expected [] or [number]"),
            ("a[]b", "expected '.' or '['"),
            ("[]", "empty name"),
            ("a]", "expected '.' or '['"),
            ("a[99999999999999999999999]", "too large"),
        ] {
            let err = KeyPath::parse(key).unwrap_err().0;
            assert!(err.contains(why), "{key:?}: {err}");
            assert!(err.contains(&format!("{key:?}")), "{key:?}: {err}");
        }
        let long = vec!["a"; MAX_KEY_STEPS + 1].join(".");
        assert!(KeyPath::parse(&long).unwrap_err().0.contains("steps"));
        assert!(KeyPath::parse(&vec!["a"; MAX_KEY_STEPS].join(".")).is_ok());
        assert_eq!(KeyPath::parse("a[].b").unwrap().as_str(), "a[].b");
    }
}
