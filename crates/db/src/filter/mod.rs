//! Qdrant's filter model over JSON payloads, and payload indexes.
//!
//! [`Filter::from_json`] reads Qdrant's REST filter shapes (`must`, `should`, `must_not`,
//! `min_should`; field `match`/`range`, `has_id`, `is_empty`, `is_null`, nested filters) and
//! refuses what it does not implement with a [`FilterError`] naming the construct, rather than
//! silently matching something else. [`Filter::matches`] evaluates it against one point.
//! [`PayloadIndex`] keeps keyword and integer indexes of a segment's payloads and turns a filter
//! into [`Candidates`]: a superset of the matching offsets, exact when the indexes decided
//! every condition.
//!
//! Semantics follow Qdrant's condition checker where it is specific, with these choices:
//! - an integer `match` matches integer payload values only: `3` matches `3`, never `3.0`;
//!   `range` compares every number (integer or float) as `f64`;
//! - a point without the field (or with `null` there) does not match `match.except`, as in
//!   Qdrant's checker; a present non-null value of another type (say a bool against a list of
//!   strings) does match it;
//! - `should: []` (an empty list) is no constraint, like an absent `should`; Qdrant itself
//!   would match nothing there;
//! - `text`, `text_any` and `phrase` matches are refused (there is no full-text index);
//! - a key walks into objects by `.`, fans out over arrays by `[]` and also when a `.` step
//!   meets an array of objects (Qdrant's older path semantics); `[n]` picks one element. The
//!   value reached, if an array, matches when any element matches (one level deep).

mod candidates;
mod eval;
mod index;
mod model;
mod parse;
mod path;
mod shape;

pub(crate) use path::KeyPath;

pub use index::{Candidates, PayloadIndex, PayloadIndexKind};
pub use model::Filter;
pub use shape::FieldUse;

/// Why a filter (or a payload index request) was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

/// Deepest nesting of filters inside filters that is accepted; keeps evaluation's recursion
/// (and the filter's own drop) far from the stack's end whatever the request holds.
pub const MAX_FILTER_DEPTH: usize = 32;

/// Most conditions (counting nested filters) one filter may hold, so a request cannot make
/// every point's evaluation arbitrarily expensive.
pub const MAX_FILTER_CONDITIONS: usize = 10_000;

/// Most steps in one payload key (`a.b[].c` has four), which bounds the path walk's recursion.
pub const MAX_KEY_STEPS: usize = 64;
