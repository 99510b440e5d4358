use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A point's payload: a JSON object.
pub type Payload = serde_json::Map<String, Value>;

/// A point's external id: an unsigned integer or a UUID, as in Qdrant. The two kinds never
/// compare equal (`1` and `"00000000-0000-0000-0000-000000000001"` are different points).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PointId {
    Num(u64),
    Uuid(Uuid128),
}

/// A UUID's 128 bits as two 64-bit halves, high first (so they order as the `u128` does).
/// A `u128` field would align `PointId` to 16 bytes and make every id 32 bytes instead of 24:
/// a million points' ids, the id tracker's keys and a merge's copy of them, 8 MB each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid128 {
    hi: u64,
    lo: u64,
}

impl Uuid128 {
    pub fn get(self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }
}

impl From<u128> for Uuid128 {
    fn from(u: u128) -> Self {
        Self {
            hi: (u >> 64) as u64,
            lo: u as u64,
        }
    }
}

impl PointId {
    /// Reads `7` or `"550e8400-e29b-41d4-a716-446655440000"`; anything else is refused with
    /// the reason.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        match v {
            Value::Number(n) => n
                .as_u64()
                .map(PointId::Num)
                .ok_or_else(|| format!("point id {n} is not an unsigned 64-bit integer")),
            Value::String(s) => Self::parse_uuid(s),
            other => Err(format!(
                "point id must be an unsigned integer or a UUID string, got {other}"
            )),
        }
    }

    pub fn parse_uuid(s: &str) -> Result<Self, String> {
        uuid::Uuid::parse_str(s)
            .map(|u| PointId::Uuid(u.as_u128().into()))
            .map_err(|e| format!("point id {s:?} is not a UUID: {e}"))
    }

    pub fn to_json(self) -> Value {
        match self {
            PointId::Num(n) => Value::from(n),
            PointId::Uuid(u) => {
                Value::from(uuid::Uuid::from_u128(u.get()).hyphenated().to_string())
            }
        }
    }
}

impl fmt::Display for PointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointId::Num(n) => write!(f, "{n}"),
            PointId::Uuid(u) => write!(f, "{}", uuid::Uuid::from_u128(u.get()).hyphenated()),
        }
    }
}

impl Serialize for PointId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for PointId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        PointId::from_json(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_json() {
        for id in [
            PointId::Num(0),
            PointId::Num(u64::MAX),
            PointId::Uuid((0x1234 << 64 | 7).into()),
            PointId::Uuid(u128::MAX.into()),
        ] {
            assert_eq!(PointId::from_json(&id.to_json()).unwrap(), id);
        }
        assert_eq!(std::mem::size_of::<PointId>(), 24);
        assert!(PointId::Uuid(1.into()) < PointId::Uuid((1 << 64).into()));
        assert!(PointId::from_json(&Value::from(-1)).is_err());
        assert!(PointId::from_json(&Value::from(1.5)).is_err());
        assert!(PointId::from_json(&Value::from("not-a-uuid")).is_err());
        assert_ne!(
            PointId::from_json(&Value::from(1)).unwrap(),
            PointId::from_json(&Value::from("00000000-0000-0000-0000-000000000001")).unwrap()
        );
    }
}
