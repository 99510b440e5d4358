//! Qdrant's `quantization_config` to and from diskvec's `Quantization`: the size of the
//! compressed copy of each vector that sealed segments keep in DRAM (see its notes). Every
//! kind Qdrant has is taken for the code size it implies; the object is shown back as given.

use diskvec_db::Quantization;
use serde_json::{Map, Value};

use crate::envelope::ApiError;

/// `quantization_config` at `at`: `None` when absent, `Some(None)` when turned off
/// (`"Disabled"` or null), `Some(Some(q))` when set.
pub fn parse(v: Option<&Value>, at: &str) -> Result<Option<Option<Quantization>>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    let (kind, o) = match v {
        Value::Null => return Ok(Some(None)),
        Value::String(s) if s == "Disabled" => return Ok(Some(None)),
        Value::Object(m) if m.len() == 1 => m.iter().next().expect("one entry"),
        other => {
            return Err(ApiError::bad_request(format!(
                "{at} must be {{\"scalar\" | \"product\" | \"binary\" | \"turbo\": {{...}}}} or \
                 \"Disabled\", got {other}"
            )))
        }
    };
    let Value::Object(options) = o else {
        return Err(ApiError::bad_request(format!(
            "{at}.{kind} must be an object"
        )));
    };
    let bits_per_dim = bits(kind, options, &format!("{at}.{kind}"))?;
    if let Some(r) = options
        .get("always_ram")
        .filter(|r| !r.is_null() && !r.is_boolean())
    {
        return Err(ApiError::bad_request(format!(
            "{at}.{kind}.always_ram must be true or false, got {r}"
        )));
    }
    Ok(Some(Some(Quantization {
        bits_per_dim,
        given: v.clone(),
    })))
}

/// Bits of code per dimension a setting asks for.
fn bits(kind: &str, o: &Map<String, Value>, at: &str) -> Result<f32, ApiError> {
    let text = |key: &str| o.get(key).and_then(Value::as_str);
    let wrong = |key: &str, allowed: &str| {
        ApiError::bad_request(format!(
            "{at}.{key} must be one of {allowed}, got {}",
            o.get(key).map_or("nothing".into(), Value::to_string)
        ))
    };
    match kind {
        "scalar" => {
            if text("type") != Some("int8") {
                return Err(wrong("type", "\"int8\""));
            }
            if let Some(q) = o.get("quantile").filter(|q| !q.is_null()) {
                if !q.as_f64().is_some_and(|q| (0.5..=1.0).contains(&q)) {
                    return Err(ApiError::validation(format!(
                        "{at}.quantile: value {q} invalid, must be from 0.5 to 1"
                    )));
                }
            }
            Ok(8.0)
        }
        "product" => match text("compression") {
            Some("x4") => Ok(8.0),
            Some("x8") => Ok(4.0),
            Some("x16") => Ok(2.0),
            Some("x32") => Ok(1.0),
            Some("x64") => Ok(0.5),
            _ => Err(wrong("compression", "x4, x8, x16, x32, x64")),
        },
        "binary" => match text("encoding") {
            None | Some("one_bit") => Ok(1.0),
            Some("two_bits") => Ok(2.0),
            Some("one_and_half_bits") => Ok(1.5),
            _ => Err(wrong("encoding", "one_bit, two_bits, one_and_half_bits")),
        },
        "turbo" => match text("bits") {
            None | Some("bits4") => Ok(4.0),
            Some("bits2") => Ok(2.0),
            Some("bits1_5") => Ok(1.5),
            Some("bits1") => Ok(1.0),
            _ => Err(wrong("bits", "bits4, bits2, bits1_5, bits1")),
        },
        other => Err(ApiError::bad_request(format!(
            "{at}: quantization {other:?} is not one of scalar, product, binary, turbo"
        ))),
    }
}

/// As Qdrant shows it: the object as given.
pub fn echo(q: Option<&Quantization>) -> Value {
    q.map_or(Value::Null, |q| q.given.clone())
}
