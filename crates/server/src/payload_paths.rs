//! Payload selectors by path (`with_payload: {"include": ["country.cities[].name"]}`): the
//! parts of a payload a path reaches, kept or taken out, nested objects and arrays alike.

use serde_json::{Map, Value};

use diskvec_db::Payload;

/// One step of a path: a key of an object, or every element of an array (`[]`).
#[derive(Debug, PartialEq)]
enum Step<'a> {
    Key(&'a str),
    Each,
}

fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let name = part.trim_end_matches("[]");
        if !name.is_empty() {
            out.push(Step::Key(name));
        }
        out.extend((0..(part.len() - name.len()) / 2).map(|_| Step::Each));
    }
    out
}

/// The part of `v` that `steps` reach, with the objects and arrays on the way.
fn project(v: &Value, steps: &[Step]) -> Option<Value> {
    match steps.split_first() {
        None => Some(v.clone()),
        Some((Step::Key(k), rest)) => {
            let inner = project(v.as_object()?.get(*k)?, rest)?;
            Some(Value::Object(Map::from_iter([(k.to_string(), inner)])))
        }
        Some((Step::Each, rest)) => Some(Value::Array(
            v.as_array()?
                .iter()
                .filter_map(|x| project(x, rest))
                .collect(),
        )),
    }
}

/// Merges `from` into `into`: objects key by key, arrays element by element.
fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, v) in b.into_iter().enumerate() {
                match a.get_mut(i) {
                    Some(existing) => merge(existing, v),
                    None => a.push(v),
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Removes what `steps` reach from `v`.
fn remove(v: &mut Value, steps: &[Step]) {
    match steps.split_first() {
        None => {}
        Some((Step::Key(k), [])) => {
            if let Some(o) = v.as_object_mut() {
                o.remove(*k);
            }
        }
        Some((Step::Key(k), rest)) => {
            if let Some(child) = v.as_object_mut().and_then(|o| o.get_mut(*k)) {
                remove(child, rest);
            }
        }
        Some((Step::Each, rest)) => {
            if let Some(items) = v.as_array_mut() {
                items.iter_mut().for_each(|x| remove(x, rest));
            }
        }
    }
}

/// Only what `paths` reach of `payload`.
pub fn include(payload: Payload, paths: &[String]) -> Payload {
    let whole = Value::Object(payload);
    let mut out = Value::Object(Map::new());
    for path in paths {
        if let Some(part) = project(&whole, &steps(path)) {
            merge(&mut out, part);
        }
    }
    match out {
        Value::Object(m) => m,
        _ => Payload::new(),
    }
}

/// `payload` without what `paths` reach.
pub fn exclude(payload: Payload, paths: &[String]) -> Payload {
    let mut whole = Value::Object(payload);
    for path in paths {
        remove(&mut whole, &steps(path));
    }
    match whole {
        Value::Object(m) => m,
        _ => Payload::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload() -> Payload {
        json!({
            "city": "Berlin",
            "country": {"name": "Germany", "capital": "Berlin",
                        "cities": [{"name": "Berlin", "pop": 3.7}, {"name": "Munich", "pop": 1.5}]},
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn paths_keep_or_take_out_nested_parts() {
        assert_eq!(
            Value::Object(include(
                payload(),
                &paths(&["country.name", "country.capital"])
            )),
            json!({"country": {"name": "Germany", "capital": "Berlin"}})
        );
        assert_eq!(
            Value::Object(include(payload(), &paths(&["country.cities[].name"]))),
            json!({"country": {"cities": [{"name": "Berlin"}, {"name": "Munich"}]}})
        );
        assert_eq!(
            Value::Object(include(payload(), &paths(&["city", "nothing.here"]))),
            json!({"city": "Berlin"})
        );
        assert_eq!(
            Value::Object(exclude(
                payload(),
                &paths(&["country.cities[].pop", "city"])
            )),
            json!({"country": {"name": "Germany", "capital": "Berlin",
                               "cities": [{"name": "Berlin"}, {"name": "Munich"}]}})
        );
        assert_eq!(
            steps("a[].b"),
            vec![Step::Key("a"), Step::Each, Step::Key("b")]
        );
    }
}
