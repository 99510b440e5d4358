//! The parsed filter: what [`super::parse`] builds and [`super::eval`] and the candidate
//! planner walk.

use std::collections::HashSet;

use super::path::KeyPath;
use super::text::TextMatch;
use crate::point::PointId;

/// A Qdrant filter, parsed and checked. Built with [`Filter::from_json`]; the default (empty)
/// filter matches every point.
#[derive(Clone, Debug, Default, PartialEq)]
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
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MinShould {
    pub(crate) conditions: Vec<Condition>,
    pub(crate) min_count: usize,
}

#[derive(Clone, Debug, PartialEq)]
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
    /// The point has a vector in the space of this name (`""`: the unnamed one).
    HasVector(String),
    /// The points whose id hashes to `index` of `total` slices (Qdrant's `slice`): `total`
    /// such filters split the collection into disjoint parts that cover it.
    Slice {
        total: u32,
        index: u32,
    },
    Filter(Box<Filter>),
    /// Qdrant's `nested`: the filter must hold within one element of the array at `key`,
    /// each object element checked on its own as if it were the whole payload.
    Nested(Box<Nested>),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Nested {
    /// The key as written with `[]` appended unless it already ends so (Qdrant's
    /// `array_key`): it reaches the array's elements.
    pub(crate) key: KeyPath,
    pub(crate) filter: Filter,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum FieldCheck {
    Value(MatchValue),
    /// `match.text`, `text_any`, `phrase`: token matches on a field with a text index
    /// (`text.rs`); without one, the string value holds the text (any word of it for
    /// `text_any`), as in Qdrant.
    Text(TextMatch, String),
    /// `match.prefix`: the string value starts with this.
    Prefix(String),
    Any(ValueList),
    Except(ValueList),
    Range(Range),
    /// `range` with datetime bounds: the string values that parse as datetimes, compared as
    /// instants.
    DatetimeRange(DatetimeRange),
    Geo(Geo),
    /// How many values the key holds (an array's length, 1 for another value, 0 for null or
    /// a missing key); evaluated against each value reached, not one at a time inside it.
    ValuesCount(CountRange),
}

/// Datetime bounds, as nanoseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct DatetimeRange {
    pub(crate) gt: Option<i128>,
    pub(crate) gte: Option<i128>,
    pub(crate) lt: Option<i128>,
    pub(crate) lte: Option<i128>,
}

impl DatetimeRange {
    pub(crate) fn contains(&self, t: i128) -> bool {
        self.gt.is_none_or(|b| t > b)
            && self.gte.is_none_or(|b| t >= b)
            && self.lt.is_none_or(|b| t < b)
            && self.lte.is_none_or(|b| t <= b)
    }
}

/// Bounds on a count of values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CountRange {
    pub(crate) gt: Option<u64>,
    pub(crate) gte: Option<u64>,
    pub(crate) lt: Option<u64>,
    pub(crate) lte: Option<u64>,
}

impl CountRange {
    pub(crate) fn contains(&self, n: u64) -> bool {
        self.gt.is_none_or(|b| n > b)
            && self.gte.is_none_or(|b| n >= b)
            && self.lt.is_none_or(|b| n < b)
            && self.lte.is_none_or(|b| n <= b)
    }
}

/// A point on the globe, in degrees; checked to lie within [-180, 180] × [-90, 90] when it
/// comes from a filter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GeoPoint {
    pub(crate) lon: f64,
    pub(crate) lat: f64,
}

/// The geo conditions; a payload location is an object with numeric `lon` and `lat`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Geo {
    /// Within `radius` metres of `center` (strictly, by the haversine distance).
    Radius { center: GeoPoint, radius: f64 },
    /// Strictly inside the box; a `top_left` east of `bottom_right` crosses the antimeridian.
    BoundingBox {
        top_left: GeoPoint,
        bottom_right: GeoPoint,
    },
    /// Strictly inside the exterior ring and outside every interior ring (a point on any
    /// ring is outside). Rings are closed: first point equal to the last.
    Polygon {
        exterior: Vec<GeoPoint>,
        interiors: Vec<Vec<GeoPoint>>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MatchValue {
    Keyword(String),
    Integer(i64),
    Bool(bool),
}

/// The list of `any` / `except`. An empty JSON list is read as an empty keyword list, as
/// Qdrant's untagged parse does.
#[derive(Clone, Debug, PartialEq)]
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
