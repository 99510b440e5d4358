//! Qdrant's `quantization_config` to and from diskvec's `Quantization`: the size of the
//! compressed copy of each vector that sealed segments keep in DRAM (see its notes).

use diskvec_db::Quantization;
use serde_json::{json, Value};

use crate::envelope::ApiError;

/// `quantization_config` at `at`: `None` when absent, `Some(None)` when turned off
/// (`"Disabled"` or null in a change), `Some(Some(q))` when set.
pub fn parse(v: Option<&Value>, at: &str) -> Result<Option<Option<Quantization>>, ApiError> {
    let bad = |m: String| ApiError::bad_request(format!("{at}: {m}"));
    let always_ram = |o: &Value| match o.get("always_ram") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(bad(format!(
            "always_ram must be true or false, got {other}"
        ))),
    };
    let Some(v) = v else { return Ok(None) };
    match v {
        Value::Null => Ok(Some(None)),
        Value::String(s) if s == "Disabled" => Ok(Some(None)),
        Value::Object(m) if m.len() == 1 => {
            let (kind, o) = m.iter().next().expect("one entry");
            match kind.as_str() {
                "scalar" => {
                    match o.get("type").and_then(Value::as_str) {
                        Some("int8") => {}
                        other => {
                            return Err(bad(format!(
                                "scalar.type must be \"int8\", got {}",
                                other.unwrap_or("nothing")
                            )))
                        }
                    }
                    let quantile = match o.get("quantile") {
                        None | Some(Value::Null) => None,
                        Some(q) => match q.as_f64().filter(|q| (0.5..=1.0).contains(q)) {
                            Some(q) => Some(q as f32),
                            None => {
                                return Err(ApiError::validation(format!(
                                    "{at}.scalar.quantile: value {q} invalid, must be from 0.5 \
                                     to 1"
                                )))
                            }
                        },
                    };
                    Ok(Some(Some(Quantization::Scalar {
                        quantile,
                        always_ram: always_ram(o)?,
                    })))
                }
                "product" => {
                    let ratio = o
                        .get("compression")
                        .and_then(Value::as_str)
                        .and_then(|c| c.strip_prefix('x'))
                        .and_then(|r| r.parse().ok())
                        .filter(|r| Quantization::RATIOS.contains(r))
                        .ok_or_else(|| {
                            bad("product.compression must be one of x4, x8, x16, x32, x64".into())
                        })?;
                    Ok(Some(Some(Quantization::Product {
                        ratio,
                        always_ram: always_ram(o)?,
                    })))
                }
                other => Err(bad(format!(
                    "{other} quantization is not supported: diskvec's DRAM codes are \
                     product-quantized, sized by \"scalar\" (int8: one byte per dimension) or \
                     \"product\" (a compression ratio)"
                ))),
            }
        }
        other => Err(bad(format!(
            "must be {{\"scalar\": {{...}}}}, {{\"product\": {{...}}}} or \"Disabled\", got {other}"
        ))),
    }
}

/// As Qdrant shows it: only the options that were given.
pub fn echo(q: Option<Quantization>) -> Value {
    let with_ram = |mut v: Value, ram: Option<bool>| {
        if let Some(r) = ram {
            v["always_ram"] = json!(r);
        }
        v
    };
    match q {
        None => Value::Null,
        Some(Quantization::Scalar {
            quantile,
            always_ram,
        }) => {
            let mut s = json!({"type": "int8"});
            if let Some(q) = quantile {
                // Shown as written (0.8, not 0.800000011920929).
                s["quantile"] = json!((f64::from(q) * 1e6).round() / 1e6);
            }
            json!({ "scalar": with_ram(s, always_ram) })
        }
        Some(Quantization::Product { ratio, always_ram }) => {
            json!({ "product": with_ram(json!({"compression": format!("x{ratio}")}), always_ram) })
        }
    }
}
