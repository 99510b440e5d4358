//! The parsed filter: what [`super::parse`] builds and [`super::eval`] and the candidate
//! planner walk.

use std::collections::HashSet;

use super::path::KeyPath;
use crate::point::PointId;

/// A Qdrant filter, parsed and checked. Built with [`Filter::from_json`]; the default (empty)
/// filter matches every point.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub(crate) must: Vec<Condition>,
    /// Empty means no constraint (see the module notes).
    pub(crate) should: Vec<Condition>,
    pub(crate) must_not: Vec<Condition>,
    pub(crate) min_should: Option<MinShould>,
}

impl Filter {
    /// Whether the filter has no conditions at all, so it matches every point.
    pub fn is_empty(&self) -> bool {
        self.must.is_empty()
            && self.should.is_empty()
            && self.must_not.is_empty()
            && self.min_should.is_none()
    }
}

/// At least `min_count` of `conditions` must match.
#[derive(Clone, Debug)]
pub(crate) struct MinShould {
    pub(crate) conditions: Vec<Condition>,
    pub(crate) min_count: usize,
}

#[derive(Clone, Debug)]
pub(crate) enum Condition {
    Field {
        key: KeyPath,
        check: FieldCheck,
    },
    /// The key reaches nothing, or only nulls and empty arrays.
    IsEmpty(KeyPath),
    /// The key reaches a null (an array holding null does not count).
    IsNull(KeyPath),
    HasId(HashSet<PointId>),
    Filter(Box<Filter>),
}

#[derive(Clone, Debug)]
pub(crate) enum FieldCheck {
    Value(MatchValue),
    /// `match.text`: the string value holds this text (Qdrant's meaning for a field without
    /// a full-text index; token matching on a text index comes with the text index).
    Text(String),
    Any(ValueList),
    Except(ValueList),
    Range(Range),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MatchValue {
    Keyword(String),
    Integer(i64),
    Bool(bool),
}

/// The list of `any` / `except`. An empty JSON list is read as an empty keyword list, as
/// Qdrant's untagged parse does.
#[derive(Clone, Debug)]
pub(crate) enum ValueList {
    Keywords(HashSet<String>),
    Integers(HashSet<i64>),
}

impl ValueList {
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            ValueList::Keywords(s) => s.is_empty(),
            ValueList::Integers(s) => s.is_empty(),
        }
    }
}

/// Numeric bounds, compared as `f64` against any JSON number.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Range {
    pub(crate) gt: Option<f64>,
    pub(crate) gte: Option<f64>,
    pub(crate) lt: Option<f64>,
    pub(crate) lte: Option<f64>,
}

impl Range {
    pub(crate) fn contains(&self, x: f64) -> bool {
        self.above_lower(x) && self.below_upper(x)
    }

    /// The lower bounds alone: monotone (false, then true) as `x` grows.
    pub(crate) fn above_lower(&self, x: f64) -> bool {
        self.gt.is_none_or(|b| x > b) && self.gte.is_none_or(|b| x >= b)
    }

    /// The upper bounds alone: monotone (true, then false) as `x` grows.
    pub(crate) fn below_upper(&self, x: f64) -> bool {
        self.lt.is_none_or(|b| x < b) && self.lte.is_none_or(|b| x <= b)
    }
}
