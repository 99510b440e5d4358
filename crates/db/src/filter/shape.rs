//! What a filter asks of the payload indexes, and how big it is: the facts strict mode
//! (`crate::strict`) limits.

use super::model::{Condition, FieldCheck, Filter, MatchValue, ValueList};
use super::text::TextMatch;

/// One field condition of a filter: its key, and the payload index kinds that can answer it.
/// Kinds are Qdrant's schema names, plus `"keyword-prefix"` for a keyword index created with
/// `prefix: true` (the only kind that answers `match.prefix`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldUse {
    pub key: String,
    pub kinds: &'static [&'static str],
}

impl Filter {
    /// Every field condition (and `is_empty` / `is_null`), nested filters included, in the
    /// order written. Inside `nested`, keys are the whole path from the payload's root
    /// (`country.cities[].population`), as the index on such a field is named.
    pub fn field_uses(&self) -> Vec<FieldUse> {
        let mut out = Vec::new();
        self.walk("", &mut |prefix, c| {
            let (key, kinds) = match c {
                Condition::Field { key, check } => (key, answering_kinds(check)),
                // Qdrant: any index will do (each keeps which points lack the field).
                Condition::IsEmpty(key) | Condition::IsNull(key) => (key, ANY_KIND),
                _ => return,
            };
            out.push(FieldUse {
                key: join(prefix, key.as_str()),
                kinds,
            });
        });
        out
    }

    /// Conditions in all, a nested filter's own conditions counted and the nesting one not
    /// (Qdrant's count for `filter_max_conditions`).
    pub fn condition_count(&self) -> usize {
        let mut n = 0;
        self.walk("", &mut |_, c| {
            if !matches!(c, Condition::Filter(_) | Condition::Nested(_)) {
                n += 1;
            }
        });
        n
    }

    /// The most values one condition lists (`match.any`, `match.except`, `has_id`): what
    /// `condition_max_size` bounds.
    pub fn largest_condition(&self) -> usize {
        let mut most = 0;
        self.walk("", &mut |_, c| {
            let size = match c {
                Condition::Field {
                    check: FieldCheck::Any(list) | FieldCheck::Except(list),
                    ..
                } => list_len(list),
                Condition::HasId(ids) => ids.len(),
                _ => 0,
            };
            most = most.max(size);
        });
        most
    }

    /// Visits every condition with the key prefix it sits under (`""` outside `nested`).
    fn walk<'a>(&'a self, prefix: &str, visit: &mut dyn FnMut(&str, &'a Condition)) {
        let min_should = self.min_should.iter().flat_map(|m| &m.conditions);
        for c in self
            .must
            .iter()
            .chain(&self.should)
            .chain(&self.must_not)
            .chain(min_should)
        {
            visit(prefix, c);
            match c {
                Condition::Filter(inner) => inner.walk(prefix, visit),
                Condition::Nested(nested) => nested
                    .filter
                    .walk(&join(prefix, nested.key.as_str()), visit),
                _ => {}
            }
        }
    }
}

/// Every payload index kind.
const ANY_KIND: &[&str] = &[
    "keyword", "integer", "float", "bool", "geo", "text", "datetime", "uuid",
];

/// `key` under a nested prefix.
fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn list_len(list: &ValueList) -> usize {
    match list {
        ValueList::Keywords(s) => s.len(),
        ValueList::Integers(s) => s.len(),
    }
}

fn answering_kinds(check: &FieldCheck) -> &'static [&'static str] {
    match check {
        // An empty list has no type: either kind of index answers it.
        FieldCheck::Any(list) | FieldCheck::Except(list) if list.is_empty() => {
            &["keyword", "uuid", "integer"]
        }
        FieldCheck::Value(MatchValue::Keyword(_))
        | FieldCheck::Any(ValueList::Keywords(_))
        | FieldCheck::Except(ValueList::Keywords(_)) => &["keyword", "uuid"],
        FieldCheck::Value(MatchValue::Integer(_))
        | FieldCheck::Any(ValueList::Integers(_))
        | FieldCheck::Except(ValueList::Integers(_)) => &["integer"],
        FieldCheck::Value(MatchValue::Bool(_)) => &["bool"],
        FieldCheck::Text(TextMatch::Phrase, _) => &["text-phrase"],
        FieldCheck::Text(..) => &["text"],
        // Capabilities an index's options give (`Collection::index_capabilities`): a
        // keyword index created with `prefix: true`, an integer index's `range` (on unless
        // turned off; `lookup` off takes away "integer").
        FieldCheck::Prefix(_) => &["keyword-prefix"],
        // Qdrant: a numeric range needs an integer or float index, a datetime range a
        // datetime index.
        FieldCheck::Range(_) => &["integer-range", "float"],
        FieldCheck::DatetimeRange(_) => &["datetime"],
        FieldCheck::Geo(_) => &["geo"],
        FieldCheck::ValuesCount(_) => ANY_KIND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uses_counts_and_sizes_reach_into_nested_filters() {
        let f = Filter::from_json(&json!({
            "must": [{"key": "city", "match": {"value": "Berlin"}}],
            "should": [{"must": [
                {"key": "n", "range": {"gt": 1}},
                {"key": "tag", "match": {"any": ["a", "b", "c"]}}
            ]}],
            "must_not": [{"has_id": [1, 2]}]
        }))
        .unwrap();
        let keys: Vec<_> = f.field_uses().into_iter().map(|u| u.key).collect();
        assert_eq!(keys, ["city", "n", "tag"]);
        assert_eq!(f.field_uses()[1].kinds, ["integer-range", "float"]);
        assert_eq!(f.condition_count(), 4);
        assert_eq!(f.largest_condition(), 3);
        assert_eq!(Filter::default().condition_count(), 0);
        let empty =
            Filter::from_json(&json!({"must": [{"key": "n", "match": {"any": []}}]})).unwrap();
        assert!(empty.field_uses()[0].kinds.contains(&"integer"));
    }

    #[test]
    fn nested_keys_join_and_new_conditions_name_their_indexes() {
        let f = Filter::from_json(&json!({
            "must": [
                {"nested": {"key": "country.cities", "filter": {"must": [
                    {"key": "population", "range": {"gte": 8.0}},
                    {"nested": {"key": "parts[]", "filter": {"must_not": [
                        {"key": "sightseeing", "values_count": {"lt": 3}},
                        {"is_null": {"key": "name"}}
                    ]}}}
                ]}}},
                {"key": "loc", "geo_bounding_box": {"top_left": {"lon": 0, "lat": 1}, "bottom_right": {"lon": 1, "lat": 0}}},
                {"key": "at", "range": {"gte": "2020-01-01"}},
                {"is_empty": {"key": "e"}}
            ]
        }))
        .unwrap();
        let uses: Vec<(String, Vec<&str>)> = f
            .field_uses()
            .into_iter()
            .map(|u| (u.key, u.kinds.to_vec()))
            .collect();
        let keys: Vec<&str> = uses.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "country.cities[].population",
                "country.cities[].parts[].sightseeing",
                "country.cities[].parts[].name",
                "loc",
                "at",
                "e"
            ]
        );
        assert_eq!(uses[1].1, ANY_KIND);
        assert_eq!(uses[2].1, ANY_KIND);
        assert_eq!(uses[3].1, ["geo"]);
        assert_eq!(uses[4].1, ["datetime"]);
        // The nested conditions are not counted themselves, their contents are.
        assert_eq!(f.condition_count(), 6);
    }
}
