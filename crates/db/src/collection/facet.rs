//! Facets: how many points hold each value of a payload key (Qdrant's `facet`), counted
//! exactly over the points a filter matches.

use std::collections::HashMap;

use serde_json::Value;

use super::Collection;
use crate::filter::{Filter, KeyPath};
use crate::{DbError, Result};

/// One value of a faceted key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FacetValue {
    Bool(bool),
    Integer(i64),
    Keyword(String),
}

impl FacetValue {
    pub fn of(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Some(Self::Keyword(s.clone())),
            Value::Bool(b) => Some(Self::Bool(*b)),
            Value::Number(n) => n.as_i64().map(Self::Integer),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Self::Bool(b) => Value::Bool(*b),
            Self::Integer(i) => Value::from(*i),
            Self::Keyword(s) => Value::String(s.clone()),
        }
    }
}

/// Points read per page of the scan.
const PAGE: usize = 1_000;

impl Collection {
    /// The `limit` most frequent values of `key` among the points `filter` matches, with
    /// how many points hold each (a point counts once per value, however often it lists
    /// it), most frequent first, ties by value (`false` before `true`, then numbers, then
    /// text). Keyword, integer and bool values count; others (floats, objects) do not.
    pub fn facet(
        &self,
        key: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<(FacetValue, usize)>> {
        let path = KeyPath::parse(key).map_err(|e| DbError::InvalidInput(e.to_string()))?;
        let mut counts: HashMap<FacetValue, usize> = HashMap::new();
        let mut offset = None;
        loop {
            let (page, next) = self.scroll(filter, PAGE, offset, true, false)?;
            for record in &page {
                let Some(payload) = &record.payload else {
                    continue;
                };
                let mut seen: Vec<FacetValue> = Vec::new();
                path.any_value(payload, &mut |v| {
                    let values: &[Value] = match v {
                        Value::Array(items) => items,
                        one => std::slice::from_ref(one),
                    };
                    for value in values.iter().filter_map(FacetValue::of) {
                        if !seen.contains(&value) {
                            seen.push(value);
                        }
                    }
                    false
                });
                for value in seen {
                    *counts.entry(value).or_default() += 1;
                }
            }
            match next {
                Some(n) => offset = Some(n),
                None => break,
            }
        }
        let mut hits: Vec<(FacetValue, usize)> = counts.into_iter().collect();
        hits.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits.truncate(limit);
        Ok(hits)
    }
}
