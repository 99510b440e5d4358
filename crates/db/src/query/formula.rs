//! Formula queries (Qdrant's `{"formula": ..., "defaults": ...}`): each candidate a node's
//! prefetches found is scored by an expression over its prefetch scores (`$score`,
//! `$score[i]`), payload values (a key), conditions (1 when the point matches, else 0),
//! arithmetic, geo distance, datetimes and decay curves. Evaluated in f64 as Qdrant does;
//! a result that is not a finite number is an error naming the step, not a score.

use serde_json::{Map, Value};

use crate::filter::{haversine_m, parse_datetime, GeoPoint, KeyPath};
use crate::{DbError, Filter, Payload, Result};

/// A formula and the values its variables take when a point has none.
#[derive(Clone, Debug, PartialEq)]
pub struct Formula {
    pub(crate) expr: Expr,
    /// Variable name (a payload key, or `$score[i]`) to value.
    pub defaults: Map<String, Value>,
}

/// Which decay curve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decay {
    Lin,
    Exp,
    Gauss,
}

/// Payload keys are parsed once, with the formula, not per point scored.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Constant(f64),
    /// The score the point has in prefetch `i` (0 when it was not found there).
    Score(usize),
    /// The number at a payload key.
    Payload(KeyPath),
    /// 1 when the point matches, else 0.
    Condition(Box<Filter>),
    /// Metres from `origin` to the location at a payload key.
    GeoDistance {
        origin: (f64, f64),
        key: KeyPath,
    },
    /// Seconds since 1970 of a datetime given, or at a payload key.
    Datetime(f64),
    DatetimeKey(KeyPath),
    Mult(Vec<Expr>),
    Sum(Vec<Expr>),
    Neg(Box<Expr>),
    Abs(Box<Expr>),
    Div {
        left: Box<Expr>,
        right: Box<Expr>,
        by_zero: Option<f64>,
    },
    Sqrt(Box<Expr>),
    Pow(Box<Expr>, Box<Expr>),
    Exp(Box<Expr>),
    Log10(Box<Expr>),
    Ln(Box<Expr>),
    /// A curve of `x`'s distance from `target`, 1 there and `midpoint` at `scale` away:
    /// `lambda` folds midpoint and scale into one constant.
    Decay {
        kind: Decay,
        x: Box<Expr>,
        target: Option<Box<Expr>>,
        lambda: f64,
    },
}

fn bad(message: impl Into<String>) -> DbError {
    DbError::BadRequest(message.into())
}

/// The expression kinds, by the one key of their object (anything else is a condition).
const KINDS: &[&str] = &[
    "mult",
    "sum",
    "neg",
    "abs",
    "div",
    "sqrt",
    "pow",
    "exp",
    "log10",
    "ln",
    "lin_decay",
    "exp_decay",
    "gauss_decay",
    "geo_distance",
    "datetime",
    "datetime_key",
];

impl Formula {
    /// `{"formula": expression, "defaults": {...}}`.
    pub fn from_json(body: &Value) -> Result<Self> {
        let expr = body
            .get("formula")
            .ok_or_else(|| bad("query.formula is missing"))?;
        let defaults = match body.get("defaults") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(bad("query.defaults must be an object")),
        };
        Ok(Self {
            expr: Expr::from_json(expr, "query.formula")?,
            defaults,
        })
    }

    /// The payload keys the formula reads as variables, each with the index kinds that
    /// hold its values, and its conditions: what strict mode asks indexes for.
    pub fn uses(&self) -> (Vec<(String, &'static [&'static str])>, Vec<&Filter>) {
        let (mut keys, mut conditions) = (Vec::new(), Vec::new());
        self.expr.walk(&mut |e| match e {
            Expr::Payload(k) => keys.push((k.as_str().to_string(), &["integer", "float"][..])),
            Expr::DatetimeKey(k) => keys.push((k.as_str().to_string(), &["datetime"][..])),
            Expr::GeoDistance { key, .. } => keys.push((key.as_str().to_string(), &["geo"][..])),
            Expr::Condition(f) => conditions.push(&**f),
            _ => {}
        });
        (keys, conditions)
    }

    /// The formula's value for one point: `scores[i]` its score in prefetch `i`,
    /// `matches` whether it matches a condition.
    pub fn score(
        &self,
        payload: &Payload,
        scores: &[Option<f32>],
        matches: &dyn Fn(&Filter) -> bool,
    ) -> Result<f32> {
        let point = Point {
            payload,
            scores,
            matches,
            defaults: &self.defaults,
        };
        let value = point.eval(&self.expr)?;
        let score = value as f32;
        if !score.is_finite() {
            return Err(bad(format!(
                "The formula's result {value} is not a finite 32-bit number"
            )));
        }
        Ok(score)
    }
}

impl Expr {
    fn from_json(v: &Value, at: &str) -> Result<Self> {
        let boxed =
            |v: &Value, what: &str| Self::from_json(v, &format!("{at}.{what}")).map(Box::new);
        match v {
            Value::Number(n) => n
                .as_f64()
                .map(Expr::Constant)
                .ok_or_else(|| bad(format!("{at}: {n} is not a number"))),
            Value::String(s) => variable(s, at),
            Value::Object(m)
                if m.len() == 1 && KINDS.contains(&m.keys().next().unwrap().as_str()) =>
            {
                let (kind, body) = m.iter().next().expect("one entry");
                let list = |what: &str| match body {
                    Value::Array(items) => items
                        .iter()
                        .enumerate()
                        .map(|(i, e)| Self::from_json(e, &format!("{at}.{what}[{i}]")))
                        .collect::<Result<Vec<_>>>(),
                    _ => Err(bad(format!("{at}.{what} must be a list of expressions"))),
                };
                let field = |name: &str| {
                    body.get(name)
                        .ok_or_else(|| bad(format!("{at}.{kind}.{name} is missing")))
                };
                let number = |name: &str| -> Result<Option<f64>> {
                    match body.get(name) {
                        None | Some(Value::Null) => Ok(None),
                        Some(x) => x
                            .as_f64()
                            .map(Some)
                            .ok_or_else(|| bad(format!("{at}.{kind}.{name} must be a number"))),
                    }
                };
                Ok(match kind.as_str() {
                    "mult" => Expr::Mult(list("mult")?),
                    "sum" => Expr::Sum(list("sum")?),
                    "neg" => Expr::Neg(boxed(body, "neg")?),
                    "abs" => Expr::Abs(boxed(body, "abs")?),
                    "sqrt" => Expr::Sqrt(boxed(body, "sqrt")?),
                    "exp" => Expr::Exp(boxed(body, "exp")?),
                    "log10" => Expr::Log10(boxed(body, "log10")?),
                    "ln" => Expr::Ln(boxed(body, "ln")?),
                    "div" => Expr::Div {
                        left: boxed(field("left")?, "div.left")?,
                        right: boxed(field("right")?, "div.right")?,
                        by_zero: number("by_zero_default")?,
                    },
                    "pow" => Expr::Pow(
                        boxed(field("base")?, "pow.base")?,
                        boxed(field("exponent")?, "pow.exponent")?,
                    ),
                    "geo_distance" => {
                        let origin = field("origin")?;
                        let coord = |c: &str| {
                            origin.get(c).and_then(Value::as_f64).ok_or_else(|| {
                                bad(format!("{at}.geo_distance.origin.{c} must be a number"))
                            })
                        };
                        let key = field("to")?
                            .as_str()
                            .ok_or_else(|| bad(format!("{at}.geo_distance.to must be a key")))?;
                        Expr::GeoDistance {
                            origin: (coord("lon")?, coord("lat")?),
                            key: key_path(key, at)?,
                        }
                    }
                    "datetime" => {
                        let text = body.as_str().unwrap_or_default();
                        let nanos = parse_datetime(text).ok_or_else(|| {
                            bad(format!("{at}.datetime: {body} is not a datetime"))
                        })?;
                        Expr::Datetime(nanos as f64 / 1e9)
                    }
                    "datetime_key" => Expr::DatetimeKey(key_path(
                        body.as_str()
                            .ok_or_else(|| bad(format!("{at}.datetime_key must be a key")))?,
                        at,
                    )?),
                    decay => {
                        let kind = match decay {
                            "lin_decay" => Decay::Lin,
                            "exp_decay" => Decay::Exp,
                            _ => Decay::Gauss,
                        };
                        let target = match body.get("target") {
                            None | Some(Value::Null) => None,
                            Some(t) => Some(boxed(t, &format!("{decay}.target"))?),
                        };
                        Expr::Decay {
                            kind,
                            x: boxed(field("x")?, &format!("{decay}.x"))?,
                            target,
                            lambda: lambda(kind, number("midpoint")?, number("scale")?)?,
                        }
                    }
                })
            }
            Value::Object(_) => {
                // A condition, as a filter's `must` holds it.
                let filter = Filter::from_json(&serde_json::json!({ "must": [v] }))
                    .map_err(|e| bad(format!("{at}: not an expression or a condition: {e}")))?;
                Ok(Expr::Condition(Box::new(filter)))
            }
            other => Err(bad(format!(
                "{at}: {other} is not an expression (a number, a variable, a condition or \
                 an object such as {{\"sum\": [...]}})"
            ))),
        }
    }

    fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        f(self);
        match self {
            Expr::Mult(list) | Expr::Sum(list) => list.iter().for_each(|e| e.walk(f)),
            Expr::Neg(e)
            | Expr::Abs(e)
            | Expr::Sqrt(e)
            | Expr::Exp(e)
            | Expr::Log10(e)
            | Expr::Ln(e) => e.walk(f),
            Expr::Div { left, right, .. } | Expr::Pow(left, right) => {
                left.walk(f);
                right.walk(f);
            }
            Expr::Decay { x, target, .. } => {
                x.walk(f);
                if let Some(t) = target {
                    t.walk(f);
                }
            }
            _ => {}
        }
    }
}

/// `$score` (prefetch 0), `$score[i]`, or a payload key.
fn variable(name: &str, at: &str) -> Result<Expr> {
    if name == "$score" {
        return Ok(Expr::Score(0));
    }
    let score = name
        .strip_prefix("$score[")
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|i| i.parse().ok());
    match score {
        Some(i) => Ok(Expr::Score(i)),
        None => Ok(Expr::Payload(key_path(name, at)?)),
    }
}

/// A variable's payload key, parsed once with the formula.
fn key_path(key: &str, at: &str) -> Result<KeyPath> {
    KeyPath::parse(key).map_err(|e| bad(format!("{at}: formula variable: {e}")))
}

/// The decay constant of a curve that is `midpoint` at `scale` from its target (Qdrant's
/// parameters and bounds).
fn lambda(kind: Decay, midpoint: Option<f64>, scale: Option<f64>) -> Result<f64> {
    let midpoint = midpoint.unwrap_or(0.5);
    let scale = scale.unwrap_or(1.0);
    let inside = match kind {
        Decay::Lin => (0.0..=1.0).contains(&midpoint),
        Decay::Exp | Decay::Gauss => midpoint > 0.0 && midpoint < 1.0,
    };
    if !inside {
        return Err(bad(format!(
            "Decay midpoint should be in the range {}, got {midpoint}.",
            if kind == Decay::Lin {
                "[0.0, 1.0]"
            } else {
                "(0.0, 1.0)"
            }
        )));
    }
    if scale <= 0.0 {
        return Err(bad(format!(
            "Decay scale should be non-zero positive, got {scale}."
        )));
    }
    Ok(match kind {
        Decay::Lin => (1.0 - midpoint) / scale,
        Decay::Exp => midpoint.ln() / scale,
        Decay::Gauss => midpoint.ln() / (scale * scale),
    })
}

/// One point as a formula sees it.
struct Point<'a> {
    payload: &'a Payload,
    scores: &'a [Option<f32>],
    matches: &'a dyn Fn(&Filter) -> bool,
    defaults: &'a Map<String, Value>,
}

impl Point<'_> {
    fn eval(&self, e: &Expr) -> Result<f64> {
        let finite = |value: f64, what: String| {
            if value.is_finite() {
                Ok(value)
            } else {
                Err(bad(format!(
                    "The formula's step {what} = {value} is not a finite number"
                )))
            }
        };
        Ok(match e {
            Expr::Constant(c) => *c,
            Expr::Score(i) => match self.scores.get(*i).copied().flatten() {
                Some(s) => f64::from(s),
                None => self
                    .defaults
                    .get(&format!("$score[{i}]"))
                    .or_else(|| (*i == 0).then(|| self.defaults.get("$score")).flatten())
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
            },
            Expr::Payload(key) => {
                let v = self.value(key, "number")?;
                v.as_f64()
                    .ok_or_else(|| type_error(key.as_str(), "number", "Value is not a number"))?
            }
            Expr::Condition(f) => f64::from(u8::from((self.matches)(f))),
            Expr::GeoDistance { origin, key } => {
                let v = self.value(key, "geo point")?;
                let coord = |c: &str| v.get(c).and_then(Value::as_f64);
                let (Some(lon), Some(lat)) = (coord("lon"), coord("lat")) else {
                    return Err(type_error(
                        key.as_str(),
                        "geo point",
                        "Value is not a geo point",
                    ));
                };
                let from = GeoPoint {
                    lon: origin.0,
                    lat: origin.1,
                };
                haversine_m(from, GeoPoint { lon, lat })
            }
            Expr::Datetime(seconds) => *seconds,
            Expr::DatetimeKey(key) => {
                let v = self.value(key, "datetime")?;
                let nanos = v.as_str().and_then(parse_datetime).ok_or_else(|| {
                    type_error(key.as_str(), "datetime", "Value is not a datetime")
                })?;
                nanos as f64 / 1e9
            }
            Expr::Mult(list) => {
                let mut product = 1.0;
                for e in list {
                    let v = self.eval(e)?;
                    if v == 0.0 {
                        return Ok(0.0);
                    }
                    product *= v;
                }
                product
            }
            Expr::Sum(list) => {
                let mut sum = 0.0;
                for e in list {
                    sum += self.eval(e)?;
                }
                sum
            }
            Expr::Neg(e) => -self.eval(e)?,
            Expr::Abs(e) => self.eval(e)?.abs(),
            Expr::Div {
                left,
                right,
                by_zero,
            } => {
                let l = self.eval(left)?;
                if l == 0.0 {
                    return Ok(0.0);
                }
                let r = self.eval(right)?;
                match (r == 0.0, by_zero) {
                    (true, Some(d)) => *d,
                    _ => finite(l / r, format!("{l}/{r}"))?,
                }
            }
            Expr::Sqrt(e) => {
                let v = self.eval(e)?;
                finite(v.sqrt(), format!("√{v}"))?
            }
            Expr::Pow(base, exponent) => {
                let (b, x) = (self.eval(base)?, self.eval(exponent)?);
                finite(b.powf(x), format!("{b}^{x}"))?
            }
            Expr::Exp(e) => {
                let v = self.eval(e)?;
                finite(v.exp(), format!("exp({v})"))?
            }
            Expr::Log10(e) => {
                let v = self.eval(e)?;
                finite(v.log10(), format!("log10({v})"))?
            }
            Expr::Ln(e) => {
                let v = self.eval(e)?;
                finite(v.ln(), format!("ln({v})"))?
            }
            Expr::Decay {
                kind,
                x,
                target,
                lambda,
            } => {
                let x = self.eval(x)?;
                let target = match target {
                    Some(t) => self.eval(t)?,
                    None => 0.0,
                };
                let d = x - target;
                match kind {
                    Decay::Lin => (1.0 - lambda * d.abs()).max(0.0),
                    Decay::Exp => (lambda * d.abs()).exp(),
                    Decay::Gauss => (lambda * d * d).exp(),
                }
            }
        })
    }

    /// The value at `key` (one value as itself, several as a list), or its default.
    fn value(&self, path: &KeyPath, wanted: &str) -> Result<Value> {
        let key = path.as_str();
        let mut found: Vec<Value> = Vec::new();
        // Nulls are no value (a key set to null, or to an empty list, takes the default).
        path.any_value(self.payload, &mut |v| {
            match v {
                Value::Array(items) => found.extend(items.iter().filter(|i| !i.is_null()).cloned()),
                Value::Null => {}
                v => found.push(v.clone()),
            }
            false
        });
        match found.len() {
            0 => {
                self.defaults.get(key).cloned().ok_or_else(|| {
                    type_error(key, wanted, "No value found in a payload nor defaults")
                })
            }
            1 => Ok(found.pop().expect("one value")),
            _ => Ok(Value::Array(found)),
        }
    }
}

fn type_error(key: &str, wanted: &str, why: &str) -> DbError {
    bad(format!(
        "Wrong input: the formula's variable {key:?} must be a {wanted}: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn score(formula: Value, payload: Value, scores: &[Option<f32>]) -> Result<f32> {
        let f = Formula::from_json(
            &json!({"formula": formula, "defaults": {"d": 2.0, "none": 1.0, "empty": 1.5}}),
        )?;
        let payload = payload.as_object().unwrap().clone();
        f.score(&payload, scores, &|filter| {
            filter.matches_point(crate::PointId::Num(1), Some(&payload), &|_| false)
        })
    }

    #[test]
    fn expressions_evaluate_as_qdrant_defines_them() {
        let p = json!({"price": 3.0, "tag": "x", "loc": {"lon": 0.0, "lat": 0.0}, "none": null, "empty": [],
                       "at": "2025-01-01T00:00:00Z", "many": [1.0, 2.0]});
        let s = |f: Value| score(f, p.clone(), &[Some(0.5), None]).unwrap();
        assert_eq!(
            s(json!({"sum": [{"mult": ["$score", 0.4]}, {"mult": ["price", 0.6]}]})),
            0.4 * 0.5 + 0.6 * 3.0
        );
        assert_eq!(
            s(json!({"div": {"left": "price", "right": {"sum": [1.0, {"abs": "price"}]}}})),
            0.75
        );
        assert_eq!(s(json!("$score[1]")), 0.0, "not found in prefetch 1");
        assert_eq!(s(json!("d")), 2.0, "a default");
        assert_eq!(
            s(json!({"sum": ["none", "empty"]})),
            2.5,
            "null and [] take the defaults"
        );
        assert_eq!(s(json!({"key": "tag", "match": {"value": "x"}})), 1.0);
        assert_eq!(s(json!({"key": "tag", "match": {"any": []}})), 0.0);
        assert_eq!(s(json!({"neg": {"pow": {"base": 2, "exponent": 3}}})), -8.0);
        assert_eq!(
            s(json!({"div": {"left": 1, "right": 0, "by_zero_default": 7}})),
            7.0
        );
        assert!(
            (s(json!({"geo_distance": {"origin": {"lon": 0.0, "lat": 1.0}, "to": "loc"}}))
                - 111_195.0)
                .abs()
                < 10.0
        );
        assert_eq!(s(json!({"datetime_key": "at"})), 1_735_689_600.0);
        assert_eq!(
            s(json!({"lin_decay": {"x": "price", "target": 2.0, "scale": 2.0}})),
            0.75
        );
        assert_eq!(s(json!({"exp_decay": {"x": 1.0, "midpoint": 0.25}})), 0.25);
        assert_eq!(
            s(json!({"gauss_decay": {"x": 1.0, "midpoint": 0.25}})),
            0.25
        );
        assert_eq!(s(json!({"ln": {"exp": 2.0}})), 2.0);
        assert_eq!(s(json!({"log10": 1000.0})), 3.0);
        assert_eq!(s(json!({"sqrt": 16.0})), 4.0);
    }

    #[test]
    fn what_has_no_number_is_an_error_that_names_it() {
        let p = json!({"many": [1.0, 2.0], "tag": "x"});
        for (f, words) in [
            (json!("missing"), "No value found"),
            (json!("tag"), "not a number"),
            (json!("many"), "not a number"),
            (json!({"div": {"left": 1, "right": 0}}), "1/0"),
            (json!({"sqrt": -4.0}), "√-4"),
            (json!({"ln": 0.0}), "ln(0)"),
        ] {
            let err = score(f.clone(), p.clone(), &[]).unwrap_err().to_string();
            assert!(err.contains(words), "{f}: {err}");
        }
        for bad in [
            json!({"lin_decay": {"x": 1.0, "midpoint": 2.0}}),
            json!({"exp_decay": {"x": 1.0, "scale": 0.0}}),
            json!({"div": {"left": 1}}),
            json!([1, 2]),
            json!({"key": "a", "nonsense": 1}),
            json!({"sum": ["a[", 1.0]}),
        ] {
            assert!(
                Formula::from_json(&json!({"formula": bad})).is_err(),
                "{bad}"
            );
        }
    }
}
