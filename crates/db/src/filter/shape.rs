//! What a filter asks of the payload indexes, and how big it is: the facts strict mode
//! (`crate::strict`) limits.

use super::model::{Condition, FieldCheck, Filter, MatchValue, ValueList};

/// One field condition of a filter: its key, and the payload index kinds that can answer it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldUse {
    pub key: String,
    pub kinds: &'static [&'static str],
}

impl Filter {
    /// Every field condition, nested filters included, in the order written.
    pub fn field_uses(&self) -> Vec<FieldUse> {
        let mut out = Vec::new();
        self.walk(&mut |c| {
            if let Condition::Field { key, check } = c {
                out.push(FieldUse {
                    key: key.to_string(),
                    kinds: answering_kinds(check),
                });
            }
        });
        out
    }

    /// Conditions in all, a nested filter's own conditions counted and the nesting one not
    /// (Qdrant's count for `filter_max_conditions`).
    pub fn condition_count(&self) -> usize {
        let mut n = 0;
        self.walk(&mut |c| {
            if !matches!(c, Condition::Filter(_)) {
                n += 1;
            }
        });
        n
    }

    /// The most values one condition lists (`match.any`, `match.except`, `has_id`): what
    /// `condition_max_size` bounds.
    pub fn largest_condition(&self) -> usize {
        let mut most = 0;
        self.walk(&mut |c| {
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

    fn walk<'a>(&'a self, visit: &mut dyn FnMut(&'a Condition)) {
        let min_should = self.min_should.iter().flat_map(|m| &m.conditions);
        for c in self
            .must
            .iter()
            .chain(&self.should)
            .chain(&self.must_not)
            .chain(min_should)
        {
            visit(c);
            if let Condition::Filter(inner) = c {
                inner.walk(visit);
            }
        }
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
        FieldCheck::Text(_) => &["text"],
        FieldCheck::Range(_) => &["integer", "float", "datetime"],
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
        assert_eq!(f.field_uses()[1].kinds, ["integer", "float", "datetime"]);
        assert_eq!(f.condition_count(), 4);
        assert_eq!(f.largest_condition(), 3);
        assert_eq!(Filter::default().condition_count(), 0);
        let empty =
            Filter::from_json(&json!({"must": [{"key": "n", "match": {"any": []}}]})).unwrap();
        assert!(empty.field_uses()[0].kinds.contains(&"integer"));
    }
}
