//! Qdrant's filter model over JSON payloads, and payload indexes.
//!
//! [`Filter::from_json`] reads Qdrant's REST filter shapes (`must`, `should`, `must_not`,
//! `min_should`; field `match` (`value`, `any`, `except`, `text`, `prefix`), `range`
//! (numbers or datetimes), `geo_radius`,
//! `geo_bounding_box`, `geo_polygon`, `values_count`; `has_id`, `is_empty`, `is_null`,
//! `nested`, and filters inside filters) and refuses what it does not implement with a
//! [`FilterError`] naming the construct, rather than silently matching something else.
//! [`Filter::matches`] evaluates it against one point. [`PayloadIndex`] keeps keyword and
//! integer indexes of a segment's payloads and turns a filter into [`Candidates`]: a superset
//! of the matching offsets, exact when the indexes decided every condition.
//!
//! Semantics follow Qdrant's condition checker where it is specific, with these choices:
//! - an integer `match` matches integer payload values only: `3` matches `3`, never `3.0`;
//!   `range` with number bounds compares every number (integer or float) as `f64`;
//! - `range` with any string bound is a datetime range: every bound must be a datetime
//!   (RFC 3339, or `YYYY-MM-DD`, `YYYY-MM-DD HH:MM[:SS[.f]]` read as UTC; see `datetime`),
//!   and it matches payload strings that parse as datetimes, compared as instants;
//! - geo conditions match payload objects `{"lon", "lat"}` (or lists of them): strictly
//!   within the haversine radius (metres, the Earth's mean radius), strictly inside the box
//!   (crossing the antimeridian when `top_left` is east of `bottom_right`), inside the
//!   polygon's exterior and outside its holes (a point on a ring is outside);
//! - `values_count` counts each value the key reaches (an array's elements, 1 for any other
//!   value, 0 for null), and a key that reaches nothing holds 0 values;
//! - `nested` appends `[]` to its key and matches when one object element passes the inner
//!   filter on its own, keys inside relative to the element; `has_id` inside it is refused
//!   (Qdrant accepts it there and never matches it);
//! - a point without the field (or with `null` there) does not match `match.except`, as in
//!   Qdrant's checker; a present non-null value of another type (say a bool against a list of
//!   strings) does match it;
//! - `should: []` (an empty list) is no constraint, like an absent `should`; Qdrant itself
//!   would match nothing there;
//! - a field condition holds exactly one check: none is Qdrant's "At least one field
//!   condition must be specified" ([`FilterError::is_validation`]), two or more are refused
//!   (Qdrant would match either);
//! - `text`, `text_any` and `phrase` match tokens on a field with a text index (`text.rs`);
//!   without one, `text` and `phrase` match a substring and `text_any` any whitespace-split
//!   word of the query as a substring (Qdrant's meaning without a full-text index); `prefix`
//!   matches a start of string values;
//! - a key walks into objects by `.`, fans out over arrays by `[]` (a `.` step that meets
//!   an array reaches nothing: `country.cities[].population`, not `country.cities.population`,
//!   as in Qdrant's current paths); `[n]` picks one element. The value reached, if an array,
//!   matches when any element matches (one level deep).

mod candidates;
mod combine;
mod datetime;
mod eval;
mod geo;
mod index;
mod model;
mod parse;
mod path;
mod shape;
mod text;

pub(crate) use datetime::parse as parse_datetime;
pub use eval::slice_of as shard_of;
pub(crate) use eval::PointContext;
pub(crate) use geo::haversine_m;
pub(crate) use model::GeoPoint;
pub(crate) use path::KeyPath;

pub use index::{Candidates, PayloadIndex, PayloadIndexKind};
pub use model::Filter;
pub use shape::FieldUse;
pub use text::{TextIndexParams, TextMatch, TokenizerKind};

/// Why a filter (or a payload index request) was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

/// Qdrant's words for a field condition without any check.
const NO_FIELD_CHECK: &str = "At least one field condition must be specified";

/// Words of a slice whose index is past its total (a 422 in Qdrant).
const NO_SLICE: &str = "Slice index out of range";

impl FilterError {
    /// Whether Qdrant refuses this one in its schema validation (HTTP 422, "Validation error
    /// in JSON body") rather than as a malformed body (400): a field condition with no check.
    pub fn is_validation(&self) -> bool {
        // After the location (`filter.must[0]: `), which holds no user text.
        self.0
            .split_once(": ")
            .is_some_and(|(_, what)| what.starts_with(NO_FIELD_CHECK) || what.starts_with(NO_SLICE))
    }
}

/// Deepest nesting of filters inside filters that is accepted; keeps evaluation's recursion
/// (and the filter's own drop) far from the stack's end whatever the request holds.
pub const MAX_FILTER_DEPTH: usize = 32;

/// Most conditions (counting nested filters) one filter may hold, so a request cannot make
/// every point's evaluation arbitrarily expensive.
pub const MAX_FILTER_CONDITIONS: usize = 10_000;

/// Most steps in one payload key (`a.b[].c` has four), which bounds the path walk's recursion.
pub const MAX_KEY_STEPS: usize = 64;
