//! Reading Qdrant's REST filter JSON into a [`Filter`], refusing what is not implemented.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::model::{
    Condition, CountRange, DatetimeRange, FieldCheck, Filter, Geo, GeoPoint, MatchValue, MinShould,
    Nested, Range, ValueList,
};
use super::path::KeyPath;
use super::text::TextMatch;
use super::{
    datetime, FilterError, MAX_FILTER_CONDITIONS, MAX_FILTER_DEPTH, NO_FIELD_CHECK, NO_SLICE,
};
use crate::point::PointId;

const FILTER_KEYS: [&str; 4] = ["must", "should", "must_not", "min_should"];

impl Filter {
    /// Reads a filter in Qdrant's REST shape. `null` (the whole filter or any clause) means
    /// absent. Anything not implemented (token matches, `has_id` inside
    /// `nested`) or malformed is refused with a message naming where it is.
    pub fn from_json(v: &Value) -> Result<Filter, FilterError> {
        if v.is_null() {
            return Ok(Filter::default());
        }
        Parser {
            conditions: 0,
            in_nested: false,
        }
        .filter(v, 1, "filter")
    }
}

fn err<T>(at: &str, msg: impl std::fmt::Display) -> Result<T, FilterError> {
    Err(FilterError(format!("{at}: {msg}")))
}

struct Parser {
    conditions: usize,
    /// Inside a `nested` filter, where point ids mean nothing.
    in_nested: bool,
}

/// The field condition kinds; one field condition holds exactly one of them.
const FIELD_CHECKS: [&str; 8] = [
    "match",
    "range",
    "geo_radius",
    "geo_bounding_box",
    "geo_polygon",
    "values_count",
    "is_empty",
    "is_null",
];

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
        if let Some(k) = obj.keys().find(|k| FIELD_CHECKS[..6].contains(&k.as_str())) {
            return err(at, format!("field condition ({k:?}) has no \"key\""));
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
        if let Some(name) = obj.get("has_vector") {
            only_keys(obj, &["has_vector"], at)?;
            return match name {
                Value::String(n) => Ok(Condition::HasVector(n.clone())),
                other => err(
                    &format!("{at}.has_vector"),
                    format!("expected a vector space name, got {}", kind(other)),
                ),
            };
        }
        if let Some(slice) = obj.get("slice") {
            only_keys(obj, &["slice"], at)?;
            let at = format!("{at}.slice");
            let [total, index] = fields(slice, ["total", "index"], &at)?;
            let whole = |v: &Value, name: &str| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        FilterError(format!("{at}.{name}: expected a non-negative integer"))
                    })
            };
            let (total, index) = (whole(total, "total")?, whole(index, "index")?);
            if total == 0 {
                return err(&at, "total: expected a positive integer, got 0");
            }
            if index >= total {
                return err(
                    &at,
                    format!("{NO_SLICE}: index {index} must be less than total {total}"),
                );
            }
            return Ok(Condition::Slice { total, index });
        }
        if let Some(ids) = obj.get("has_id") {
            only_keys(obj, &["has_id"], at)?;
            if self.in_nested {
                // Qdrant accepts it there and never matches it.
                return err(
                    at,
                    "\"has_id\" is not supported inside \"nested\"; put it outside the nested \
                     condition",
                );
            }
            return has_id(ids, &format!("{at}.has_id"));
        }
        if let Some(inner) = obj.get("nested") {
            only_keys(obj, &["nested"], at)?;
            return self.nested(inner, depth, &format!("{at}.nested"));
        }
        if obj.keys().all(|k| FILTER_KEYS.contains(&k.as_str())) {
            check_depth(depth, at)?;
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

    /// `{"key": k, "filter": {...}}`, the argument of `nested`.
    fn nested(&mut self, v: &Value, depth: usize, at: &str) -> Result<Condition, FilterError> {
        let Some(obj) = v.as_object() else {
            return err(
                at,
                format!(
                    "expected {{\"key\": ..., \"filter\": {{...}}}}, got {}",
                    kind(v)
                ),
            );
        };
        only_keys(obj, &["key", "filter"], at)?;
        let key = match obj.get("key") {
            Some(Value::String(s)) => {
                // Qdrant's `array_key`: the elements of the array at the key.
                let text = if s.ends_with("[]") {
                    s.clone()
                } else {
                    format!("{s}[]")
                };
                KeyPath::parse(&text).map_err(|e| FilterError(format!("{at}: {e}")))?
            }
            Some(other) => {
                return err(at, format!("\"key\" must be a string, got {}", kind(other)))
            }
            None => return err(at, "\"key\" is missing"),
        };
        let Some(inner) = obj.get("filter").filter(|v| !v.is_null()) else {
            return err(at, "\"filter\" is missing");
        };
        check_depth(depth, at)?;
        let outer = std::mem::replace(&mut self.in_nested, true);
        let filter = self.filter(inner, depth + 1, &format!("{at}.filter"));
        self.in_nested = outer;
        Ok(Condition::Nested(Box::new(Nested {
            key,
            filter: filter?,
        })))
    }

    fn field(&mut self, obj: &Map<String, Value>, at: &str) -> Result<Condition, FilterError> {
        if let Some(k) = obj
            .keys()
            .find(|k| k.as_str() != "key" && !FIELD_CHECKS.contains(&k.as_str()))
        {
            return err(at, format!("unknown field condition key {k:?}"));
        }
        let key = match &obj["key"] {
            Value::String(s) => KeyPath::parse(s).map_err(|e| FilterError(format!("{at}: {e}")))?,
            other => return err(at, format!("\"key\" must be a string, got {}", kind(other))),
        };
        let present: Vec<(&str, &Value)> = FIELD_CHECKS
            .iter()
            .filter_map(|name| obj.get(*name).filter(|v| !v.is_null()).map(|v| (*name, v)))
            .collect();
        let (name, arg) = match present.as_slice() {
            [one] => *one,
            [] => {
                return err(
                    at,
                    format!(
                        "{NO_FIELD_CHECK}: the condition on {:?} has none of {}",
                        key.as_str(),
                        FIELD_CHECKS.join(", ")
                    ),
                );
            }
            [(a, _), (b, _), ..] => {
                return err(
                    at,
                    format!(
                        "condition on {key:?} has both {a:?} and {b:?}; put them in separate \
                         conditions",
                        key = key.as_str()
                    ),
                );
            }
        };
        let inner_at = format!("{at}.{name}");
        let check = match name {
            // `{"key": k, "is_empty": true}`: the same as `{"is_empty": {"key": k}}`; false
            // negates it. Likewise `is_null`.
            "is_empty" | "is_null" => {
                let Some(wanted) = arg.as_bool() else {
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
            "match" => match_check(arg, &inner_at)?,
            "range" => range(arg, &inner_at)?,
            "geo_radius" => FieldCheck::Geo(geo_radius(arg, &inner_at)?),
            "geo_bounding_box" => FieldCheck::Geo(geo_bounding_box(arg, &inner_at)?),
            "geo_polygon" => FieldCheck::Geo(geo_polygon(arg, &inner_at)?),
            "values_count" => FieldCheck::ValuesCount(values_count(arg, &inner_at)?),
            _ => unreachable!("every field check kind is handled"),
        };
        Ok(Condition::Field { key, check })
    }
}

fn check_depth(depth: usize, at: &str) -> Result<(), FilterError> {
    if depth >= MAX_FILTER_DEPTH {
        return err(
            at,
            format!("filters may nest at most {MAX_FILTER_DEPTH} levels deep"),
        );
    }
    Ok(())
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
            "expected exactly one of \"value\", \"any\", \"except\", \"text\", \"prefix\""
                .to_string(),
        );
    };
    // The name joins the location only once it is known: a location holds no user text
    // (`FilterError::is_validation` reads the words after it).
    if ![
        "value", "any", "except", "text", "prefix", "phrase", "text_any",
    ]
    .contains(&name.as_str())
    {
        return err(at, format!("unknown match kind {name:?}"));
    }
    let at = format!("{at}.{name}");
    match name.as_str() {
        "value" => Ok(FieldCheck::Value(match_value(arg, &at)?)),
        "any" => Ok(FieldCheck::Any(value_list(arg, &at)?)),
        "except" => Ok(FieldCheck::Except(value_list(arg, &at)?)),
        "text" | "prefix" | "text_any" | "phrase" => match arg {
            Value::String(t) => Ok(match name.as_str() {
                "prefix" => FieldCheck::Prefix(t.clone()),
                "text" => FieldCheck::Text(TextMatch::All, t.clone()),
                "text_any" => FieldCheck::Text(TextMatch::Any, t.clone()),
                _ => FieldCheck::Text(TextMatch::Phrase, t.clone()),
            }),
            other => err(&at, format!("expected a string, got {}", kind(other))),
        },
        _ => err(
            &at,
            "unknown match kind; expected \"value\", \"any\", \"except\", \"text\" or \
             \"prefix\"",
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

/// A numeric range, or a datetime range when any bound is a string (as Qdrant decides).
fn range(v: &Value, at: &str) -> Result<FieldCheck, FilterError> {
    let Some(obj) = v.as_object() else {
        return err(at, format!("expected an object, got {}", kind(v)));
    };
    if let Some(name) = obj.keys().find(|k| !BOUNDS.contains(&k.as_str())) {
        return err(at, format!("unknown range bound {name:?}"));
    }
    if obj.values().any(Value::is_string) {
        let mut r = DatetimeRange::default();
        for (name, bound) in obj {
            let at = format!("{at}.{name}");
            let t = match bound {
                Value::Null => None,
                Value::String(s) => Some(datetime::parse(s).ok_or_else(|| {
                    FilterError(format!(
                        "{at}: '{s}' does not match accepted datetime format (RFC3339). \
                         Example: 2014-01-01T00:00:00Z"
                    ))
                })?),
                other => {
                    return err(
                        &at,
                        format!(
                            "a datetime range's bounds must all be datetime strings, got {}",
                            kind(other)
                        ),
                    );
                }
            };
            *bound_slot(&mut r.gt, &mut r.gte, &mut r.lt, &mut r.lte, name) = t;
        }
        return Ok(FieldCheck::DatetimeRange(r));
    }
    let mut r = Range::default();
    for (name, bound) in obj {
        let value = match bound {
            Value::Null => None,
            Value::Number(n) => n.as_f64(),
            other => {
                return err(
                    &format!("{at}.{name}"),
                    format!(
                        "expected a number or a datetime string, got {}",
                        kind(other)
                    ),
                );
            }
        };
        *bound_slot(&mut r.gt, &mut r.gte, &mut r.lt, &mut r.lte, name) = value;
    }
    Ok(FieldCheck::Range(r))
}

const BOUNDS: [&str; 4] = ["gt", "gte", "lt", "lte"];

/// The slot of bound `name`, one of [`BOUNDS`].
fn bound_slot<'a, T>(
    gt: &'a mut Option<T>,
    gte: &'a mut Option<T>,
    lt: &'a mut Option<T>,
    lte: &'a mut Option<T>,
    name: &str,
) -> &'a mut Option<T> {
    match name {
        "gt" => gt,
        "gte" => gte,
        "lt" => lt,
        _ => lte,
    }
}

fn values_count(v: &Value, at: &str) -> Result<CountRange, FilterError> {
    let Some(obj) = v.as_object() else {
        return err(at, format!("expected an object, got {}", kind(v)));
    };
    let mut r = CountRange::default();
    for (name, bound) in obj {
        if !BOUNDS.contains(&name.as_str()) {
            return err(at, format!("unknown values_count bound {name:?}"));
        }
        let value = match bound {
            Value::Null => None,
            Value::Number(n) if n.is_u64() => n.as_u64(),
            other => {
                return err(
                    &format!("{at}.{name}"),
                    format!("expected a non-negative integer, got {}", kind(other)),
                );
            }
        };
        *bound_slot(&mut r.gt, &mut r.gte, &mut r.lt, &mut r.lte, name) = value;
    }
    Ok(r)
}

/// An object holding exactly the keys `names` (each required), in that order.
fn fields<'a, const N: usize>(
    v: &'a Value,
    names: [&str; N],
    at: &str,
) -> Result<[&'a Value; N], FilterError> {
    let Some(obj) = v.as_object() else {
        return err(
            at,
            format!(
                "expected an object with {}, got {}",
                names.join(", "),
                kind(v)
            ),
        );
    };
    only_keys(obj, &names, at)?;
    let mut out = [&Value::Null; N];
    for (slot, name) in out.iter_mut().zip(names) {
        match obj.get(name) {
            Some(x) if !x.is_null() => *slot = x,
            _ => return err(at, format!("missing field `{name}`")),
        }
    }
    Ok(out)
}

/// `{"lon": x, "lat": y}`, within the globe's ranges (Qdrant's check and words).
fn geo_point(v: &Value, at: &str) -> Result<GeoPoint, FilterError> {
    let [lon, lat] = fields(v, ["lon", "lat"], at)?;
    let number = |x: &Value, name: &str| match x.as_f64() {
        Some(f) => Ok(f),
        None => err(
            &format!("{at}.{name}"),
            format!("expected a number, got {}", kind(x)),
        ),
    };
    let (lon, lat) = (number(lon, "lon")?, number(lat, "lat")?);
    if !(-180.0..=180.0).contains(&lon) || !(-90.0..=90.0).contains(&lat) {
        return err(
            at,
            format!(
                "Wrong format of GeoPoint payload: expected `lat` = {lat} within [-90;90] and \
                 `lon` = {lon} within [-180;180]"
            ),
        );
    }
    Ok(GeoPoint { lon, lat })
}

fn geo_radius(v: &Value, at: &str) -> Result<Geo, FilterError> {
    let [center, radius] = fields(v, ["center", "radius"], at)?;
    let center = geo_point(center, &format!("{at}.center"))?;
    let Some(radius) = radius.as_f64() else {
        return err(
            &format!("{at}.radius"),
            format!("expected a number of metres, got {}", kind(radius)),
        );
    };
    Ok(Geo::Radius { center, radius })
}

fn geo_bounding_box(v: &Value, at: &str) -> Result<Geo, FilterError> {
    let [top_left, bottom_right] = fields(v, ["top_left", "bottom_right"], at)?;
    Ok(Geo::BoundingBox {
        top_left: geo_point(top_left, &format!("{at}.top_left"))?,
        bottom_right: geo_point(bottom_right, &format!("{at}.bottom_right"))?,
    })
}

/// Most points (exterior and holes together) one `geo_polygon` may have.
const MAX_POLYGON_POINTS: usize = 10_000;

fn geo_polygon(v: &Value, at: &str) -> Result<Geo, FilterError> {
    let Some(obj) = v.as_object() else {
        return err(
            at,
            format!(
                "expected {{\"exterior\": ..., \"interiors\": [...]}}, got {}",
                kind(v)
            ),
        );
    };
    only_keys(obj, &["exterior", "interiors"], at)?;
    let exterior = match obj.get("exterior").filter(|v| !v.is_null()) {
        Some(line) => line_string(line, &format!("{at}.exterior"))?,
        None => return err(at, "missing field `exterior`"),
    };
    let interiors = match obj.get("interiors") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(lines)) => lines
            .iter()
            .enumerate()
            .map(|(i, line)| line_string(line, &format!("{at}.interiors[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return err(
                &format!("{at}.interiors"),
                format!("expected a list, got {}", kind(other)),
            );
        }
    };
    // Every point is checked against every edge: the rings' size bounds that cost.
    let points = exterior.len() + interiors.iter().map(Vec::len).sum::<usize>();
    if points > MAX_POLYGON_POINTS {
        return err(
            at,
            format!("a polygon may have at most {MAX_POLYGON_POINTS} points, got {points}"),
        );
    }
    Ok(Geo::Polygon {
        exterior,
        interiors,
    })
}

/// `{"points": [...]}`: a closed ring of at least 4 points (Qdrant's checks and words).
fn line_string(v: &Value, at: &str) -> Result<Vec<GeoPoint>, FilterError> {
    let [points] = fields(v, ["points"], at)?;
    let Some(items) = points.as_array() else {
        return err(
            &format!("{at}.points"),
            format!("expected a list of points, got {}", kind(points)),
        );
    };
    let points = items
        .iter()
        .enumerate()
        .map(|(i, p)| geo_point(p, &format!("{at}.points[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    if points.len() <= 3 {
        return err(
            at,
            format!(
                "polygon invalid, the size must be at least 4, got {}",
                points.len()
            ),
        );
    }
    let (first, last) = (points[0], points[points.len() - 1]);
    if (first.lat - last.lat).abs() > f64::EPSILON || (first.lon - last.lon).abs() > f64::EPSILON {
        return err(
            at,
            "polygon invalid, the first and the last points should be the same to form a \
             closed line",
        );
    }
    Ok(points)
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
            field(json!({"key": "a", "match": {"phrase": 1}})),
            &["phrase", "expected a string"],
        );
        assert_refused(
            field(json!({"key": "a", "match": {"text_any": ["b"]}})),
            &["text_any", "expected a string"],
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
            &[
                "range.gt",
                "'a' does not match accepted datetime format (RFC3339)",
            ],
        );
        assert_refused(
            field(json!({"key": "a", "range": {"gte": "2020-01-01T00:00:00Z", "lt": 5}})),
            &["range.lt", "datetime strings", "a number"],
        );
        assert_refused(
            field(json!({"key": "a", "range": {"gt": true}})),
            &["range.gt", "a number or a datetime string", "a boolean"],
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
            field(json!({"key": "a", "values_count": {"gt": 1}, "geo_radius": {}})),
            &["both \"geo_radius\" and \"values_count\""],
        );
        assert_refused(
            field(json!({"key": "a"})),
            &["At least one field condition must be specified", "\"a\""],
        );
        assert_refused(
            field(json!({"key": "a", "match": null})),
            &["At least one field condition must be specified"],
        );
        assert_refused(field(json!({"match": {"value": 1}})), &["no \"key\""]);
        assert_refused(
            field(json!({"values_count": {"gt": 1}})),
            &["(\"values_count\") has no \"key\""],
        );
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
            field(json!({"key": "a", "is_empty": true, "match": {"value": 1}})),
            &["both \"match\" and \"is_empty\""],
        );
        assert_refused(
            field(json!({"nested": {"key": "a"}})),
            &["filter.must[0].nested", "\"filter\" is missing"],
        );
        assert_refused(
            field(json!({"nested": {"filter": {}}})),
            &["\"key\" is missing"],
        );
        assert_refused(
            field(json!({"nested": {"key": 1, "filter": {}}})),
            &["\"key\" must be a string"],
        );
        assert_refused(
            field(json!({"nested": {"key": "a..b", "filter": {}}})),
            &["payload key \"a..b[]\""],
        );
        assert_refused(
            field(json!({"nested": {"key": "a", "filter": {}, "x": 1}})),
            &["unexpected key \"x\""],
        );
        assert_refused(
            field(json!({"nested": {"key": "a", "filter": {}}, "must": []})),
            &["unexpected key \"must\""],
        );
        assert_refused(field(json!({"nested": [1]})), &["nested", "got a list"]);
        assert_refused(
            field(
                json!({"nested": {"key": "a", "filter": {"must": [{"key": "b", "match": {"value": 1.5}}]}}}),
            ),
            &["filter.must[0].nested.filter.must[0].match.value", "float"],
        );
        // Point ids mean nothing inside an element; refused, however deep.
        assert_refused(
            field(
                json!({"nested": {"key": "a", "filter": {"should": [{"must": [{"has_id": [1]}]}]}}}),
            ),
            &[
                "nested.filter.should[0].must[0]",
                "\"has_id\" is not supported inside \"nested\"",
            ],
        );
        assert_refused(field(json!({"has_vector": 1})), &["has_vector"]);
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
    fn geo_values_count_datetime_and_nested_shapes() {
        let one = |cond: Value| -> Condition {
            let mut f =
                Filter::from_json(&json!({"must": [cond]})).unwrap_or_else(|e| panic!("{e}"));
            f.must.remove(0)
        };
        let check = |cond: Value| match one(cond) {
            Condition::Field { check, .. } => check,
            other => panic!("{other:?}"),
        };
        let p = |lon: f64, lat: f64| GeoPoint { lon, lat };
        assert_eq!(
            check(
                json!({"key": "l", "geo_radius": {"center": {"lon": 13.4, "lat": 52.5}, "radius": 1000}})
            ),
            FieldCheck::Geo(Geo::Radius {
                center: p(13.4, 52.5),
                radius: 1000.0
            })
        );
        assert_eq!(
            check(
                json!({"key": "l", "geo_bounding_box": {"top_left": {"lon": -180, "lat": 90}, "bottom_right": {"lat": -90, "lon": 180}}})
            ),
            FieldCheck::Geo(Geo::BoundingBox {
                top_left: p(-180.0, 90.0),
                bottom_right: p(180.0, -90.0)
            })
        );
        let ring = json!({"points": [
            {"lon": 0, "lat": 0}, {"lon": 1, "lat": 0}, {"lon": 1, "lat": 1}, {"lon": 0, "lat": 0}
        ]});
        let FieldCheck::Geo(Geo::Polygon {
            exterior,
            interiors,
        }) = check(
            json!({"key": "l", "geo_polygon": {"exterior": ring, "interiors": [ring, ring]}}),
        )
        else {
            panic!()
        };
        assert_eq!((exterior.len(), interiors.len()), (4, 2));
        for interiors in [json!(null), json!([])] {
            let c = check(
                json!({"key": "l", "geo_polygon": {"exterior": ring, "interiors": interiors}}),
            );
            assert!(
                matches!(c, FieldCheck::Geo(Geo::Polygon { interiors, .. }) if interiors.is_empty())
            );
        }
        assert_eq!(
            check(json!({"key": "t", "values_count": {"gt": 1, "lte": 3, "lt": null}})),
            FieldCheck::ValuesCount(CountRange {
                gt: Some(1),
                lte: Some(3),
                ..CountRange::default()
            })
        );
        let FieldCheck::DatetimeRange(r) = check(
            json!({"key": "d", "range": {"gte": "2015-01-01", "lt": "2015-01-02T00:00:00Z", "gt": null}}),
        ) else {
            panic!()
        };
        assert_eq!(r.lt.unwrap() - r.gte.unwrap(), 86_400 * 1_000_000_000);
        assert_eq!((r.gt, r.lte), (None, None));
        // Without a string bound it stays numeric.
        assert!(matches!(
            check(json!({"key": "d", "range": {"gt": null}})),
            FieldCheck::Range(_)
        ));
        // `nested` appends `[]` to its key unless it is there; has_id is fine beside it.
        let f = Filter::from_json(&json!({"must": [
            {"nested": {"key": "a.b", "filter": {"must": {"key": "c", "match": {"value": 1}}}}},
            {"nested": {"key": "x[]", "filter": {"must": {"nested": {"key": "y", "filter": {}}}}}},
            {"has_id": [1]}
        ]}))
        .unwrap();
        let Condition::Nested(n) = &f.must[0] else {
            panic!()
        };
        assert_eq!(n.key.as_str(), "a.b[]");
        assert_eq!(n.filter.must.len(), 1);
        let Condition::Nested(n) = &f.must[1] else {
            panic!()
        };
        assert_eq!(n.key.as_str(), "x[]");
        assert!(
            matches!(&n.filter.must[0], Condition::Nested(inner) if inner.key.as_str() == "y[]")
        );
        assert!(matches!(&f.must[2], Condition::HasId(_)));
    }

    #[test]
    fn geo_and_count_refusals_use_qdrants_words() {
        let field = |cond: Value| json!({"must": [cond]});
        let poly = |points: Value| {
            field(json!({"key": "l", "geo_polygon": {"exterior": {"points": points}}}))
        };
        let pts = |xs: &[(f64, f64)]| {
            Value::Array(
                xs.iter()
                    .map(|(lon, lat)| json!({"lon": lon, "lat": lat}))
                    .collect(),
            )
        };
        assert_refused(
            poly(pts(&[(-180.0, -90.0), (180.0, -90.0), (180.0, 90.0), (-180.0, 90.0)])),
            &["geo_polygon.exterior", "polygon invalid, the first and the last points should be the same to form a closed line"],
        );
        assert_refused(
            poly(pts(&[(-180.0, -90.0), (180.0, -90.0), (-180.0, -90.0)])),
            &["polygon invalid, the size must be at least 4, got 3"],
        );
        assert_refused(poly(json!([])), &["the size must be at least 4, got 0"]);
        assert_refused(poly(json!({})), &["exterior.points", "expected a list"]);
        assert_refused(
            field(
                json!({"key": "l", "geo_polygon": {"exterior": {"points": pts(&[(0.0, 0.0); 4])}, "interiors": [{"points": []}]}}),
            ),
            &["geo_polygon.interiors[0]", "at least 4"],
        );
        assert_refused(
            field(
                json!({"key": "l", "geo_polygon": {"exterior": {"points": pts(&[(0.0, 0.0); 4])}, "interiors": {}}}),
            ),
            &["interiors", "expected a list"],
        );
        assert_refused(
            field(json!({"key": "l", "geo_polygon": {"interiors": []}})),
            &["missing field `exterior`"],
        );
        assert_refused(
            field(json!({"key": "l", "geo_radius": {"center": {"lon": 200, "lat": 10}, "radius": 5}})),
            &["geo_radius.center", "Wrong format of GeoPoint payload: expected `lat` = 10 within [-90;90] and `lon` = 200 within [-180;180]"],
        );
        assert_refused(
            field(
                json!({"key": "l", "geo_radius": {"center": {"lon": 0, "lat": -90.5}, "radius": 5}}),
            ),
            &["Wrong format of GeoPoint"],
        );
        assert_refused(
            field(json!({"key": "l", "geo_radius": {"center": {"lon": 0}, "radius": 5}})),
            &["missing field `lat`"],
        );
        assert_refused(
            field(
                json!({"key": "l", "geo_radius": {"center": {"lon": "0", "lat": 0}, "radius": 5}}),
            ),
            &["center.lon", "expected a number"],
        );
        assert_refused(
            field(
                json!({"key": "l", "geo_radius": {"center": {"lon": 0, "lat": 0}, "radius": "5"}}),
            ),
            &["geo_radius.radius", "metres"],
        );
        assert_refused(
            field(json!({"key": "l", "geo_radius": {"center": {"lon": 0, "lat": 0}}})),
            &["missing field `radius`"],
        );
        assert_refused(
            field(
                json!({"key": "l", "geo_radius": {"center": {"lon": 0, "lat": 0}, "radius": 1, "r": 2}}),
            ),
            &["unexpected key \"r\""],
        );
        assert_refused(
            field(json!({"key": "l", "geo_bounding_box": {"top_left": {"lon": 0, "lat": 0}}})),
            &["missing field `bottom_right`"],
        );
        assert_refused(
            field(json!({"key": "l", "geo_bounding_box": 3})),
            &["expected an object with top_left, bottom_right"],
        );
        assert_refused(
            field(json!({"key": "t", "values_count": {"gt": -1}})),
            &["values_count.gt", "non-negative integer, got a number"],
        );
        assert_refused(
            field(json!({"key": "t", "values_count": {"gt": 1.5}})),
            &["non-negative integer, got a number"],
        );
        assert_refused(
            field(json!({"key": "t", "values_count": {"more": 1}})),
            &["unknown values_count bound \"more\""],
        );
        assert_refused(
            field(json!({"key": "t", "values_count": [1]})),
            &["values_count", "a list"],
        );
        for bad in [
            "Thu, 01 Jan 2015 01:00:00 +0100",
            "1420070400",
            "20150201",
            "2015032T060000Z",
        ] {
            assert_refused(
                field(json!({"key": "d", "range": {"gte": bad}})),
                &[&format!("'{bad}' does not match accepted datetime format (RFC3339). Example: 2014-01-01T00:00:00Z")],
            );
        }
        // A bad bound beside a good one is still refused.
        assert_refused(
            field(
                json!({"key": "d", "range": {"gte": "2015032T060000Z", "lte": "2015-02-01T06:00:00"}}),
            ),
            &["range.gte", "2015032T060000Z"],
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

    #[test]
    fn huge_polygons_and_spoofed_validation_words_are_refused_as_such() {
        let ring: Vec<_> = (0..=MAX_POLYGON_POINTS)
            .map(|i| {
                let a = i as f64 / MAX_POLYGON_POINTS as f64 * std::f64::consts::TAU;
                json!({"lon": a.cos(), "lat": a.sin()})
            })
            .chain([json!({"lon": 1.0, "lat": 0.0})])
            .collect();
        let f = json!({"must": [{"key": "g", "geo_polygon": {"exterior": {"points": ring}}}]});
        let e = Filter::from_json(&f).unwrap_err();
        assert!(e.0.contains("at most"), "{e}");
        // A match kind named like Qdrant's validation words is a plain error, not a 422.
        let spoof = json!({"must": [{"key": "a", "match":
            {"x: At least one field condition must be specified": 1}}]});
        let e = Filter::from_json(&spoof).unwrap_err();
        assert!(!e.is_validation(), "{e}");
        let bare = json!({"must": [{"key": "a"}]});
        assert!(Filter::from_json(&bare).unwrap_err().is_validation());
    }
}
