//! Operations as the write-ahead log records them. Every write of a collection becomes one
//! of these before it touches memory; replaying them in op order rebuilds what was lost.
//!
//! Payload updates are logged as upserts of the points' new full contents, so replay never
//! depends on the state it starts from: it is idempotent with point versions alone.

use diskvec_vector::ElementType;

use crate::vectors::{NamedVectors, PointVectors, SparseVector, Vector};
use crate::{Payload, PointId};

/// One point as a user writes it: its id, its vectors by space name, its payload.
#[derive(Clone, Debug, PartialEq)]
pub struct PointRecord {
    pub id: PointId,
    pub vectors: NamedVectors,
    pub payload: Payload,
}

impl PointRecord {
    /// A point with one vector, in the unnamed dense space.
    pub fn new(id: PointId, vector: Vec<f32>, payload: Payload) -> Self {
        Self {
            id,
            vectors: NamedVectors::from([(String::new(), Vector::Dense(vector))]),
            payload,
        }
    }

    /// Its vector in the unnamed dense space, if it has one.
    pub fn vector(&self) -> Option<&[f32]> {
        match self.vectors.get("") {
            Some(Vector::Dense(v)) => Some(v),
            _ => None,
        }
    }
}

/// One point as the log records it and segments store it: vectors by space index,
/// checked and prepared for their metrics.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StoredPoint {
    pub id: PointId,
    pub vectors: PointVectors,
    pub payload: Payload,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Operation {
    Upsert(Vec<StoredPoint>),
    Delete(Vec<PointId>),
}

/// An upsert of points with one dense vector each (log format 1, still replayed).
const UPSERT_ONE_VECTOR: u8 = 1;
const DELETE: u8 = 2;
/// An upsert of points with vectors in any of the collection's spaces.
const UPSERT: u8 = 3;
/// As `UPSERT`, each dense and multivector entry in its space's element type (a type byte
/// before its values): written when some space is float16 or uint8, so a float16 log is
/// half the bytes.
const UPSERT_TYPED: u8 = 4;

/// The element type each dense and multivector space stores, by space index: how the log
/// writes their values (they are already rounded to it).
#[derive(Clone, Debug, Default)]
pub(crate) struct SpaceTypes {
    pub dense: Vec<ElementType>,
    pub multi: Vec<ElementType>,
}

impl SpaceTypes {
    pub fn of(config: &crate::CollectionConfig) -> Self {
        Self {
            dense: config.dense.iter().map(|s| s.datatype).collect(),
            multi: config.multi.iter().map(|s| s.datatype).collect(),
        }
    }

    fn narrow(&self) -> bool {
        self.dense
            .iter()
            .chain(&self.multi)
            .any(|&e| e != ElementType::Float32)
    }
}
const ID_NUM: u8 = 0;
const ID_UUID: u8 = 1;

/// A payload that encodes to more JSON than a collection allows.
#[derive(Debug, PartialEq)]
pub(crate) struct PayloadTooLarge {
    pub id: PointId,
    pub bytes: usize,
}

impl Operation {
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out, usize::MAX, &SpaceTypes::default())
            .expect("no payload is over an unbounded size");
        out
    }

    /// Appends the record body to `out`, each payload's JSON written in place (not
    /// serialized aside and copied); refuses a payload whose JSON is over `max_payload`
    /// bytes, which is measured so, at no extra cost. Vectors are written as `types` says
    /// their spaces store them.
    pub fn encode_into(
        &self,
        out: &mut Vec<u8>,
        max_payload: usize,
        types: &SpaceTypes,
    ) -> Result<(), PayloadTooLarge> {
        match self {
            Operation::Upsert(points) => {
                let typed = types.narrow().then_some(types);
                out.push(if typed.is_some() {
                    UPSERT_TYPED
                } else {
                    UPSERT
                });
                put_u32(out, points.len() as u32);
                for p in points {
                    put_id(out, p.id);
                    put_vectors(out, &p.vectors, typed);
                    let at = out.len();
                    put_u32(out, 0);
                    serde_json::to_writer(&mut *out, &p.payload).expect("a JSON map serializes");
                    let bytes = out.len() - at - 4;
                    if bytes > max_payload {
                        return Err(PayloadTooLarge { id: p.id, bytes });
                    }
                    out[at..at + 4].copy_from_slice(&(bytes as u32).to_le_bytes());
                }
            }
            Operation::Delete(ids) => {
                out.push(DELETE);
                put_u32(out, ids.len() as u32);
                for &id in ids {
                    put_id(out, id);
                }
            }
        }
        Ok(())
    }

    /// Decodes a record body; a body that does not parse (the log's checksum matched, so
    /// this is a bug or a foreign file) is refused with the reason.
    pub fn decode(body: &[u8]) -> Result<Self, String> {
        let mut r = Reader { buf: body, at: 0 };
        let op = match r.u8()? {
            kind @ (UPSERT | UPSERT_TYPED | UPSERT_ONE_VECTOR) => {
                let n = r.u32()? as usize;
                let mut points = Vec::with_capacity(n.min(body.len() / 8));
                for _ in 0..n {
                    let id = r.id()?;
                    let vectors = match kind {
                        UPSERT_ONE_VECTOR => PointVectors::one_dense(r.floats()?),
                        _ => r.vectors(kind == UPSERT_TYPED)?,
                    };
                    let len = r.u32()? as usize;
                    let payload = serde_json::from_slice(r.take(len)?)
                        .map_err(|e| format!("payload of point {id}: {e}"))?;
                    points.push(StoredPoint {
                        id,
                        vectors,
                        payload,
                    });
                }
                Operation::Upsert(points)
            }
            DELETE => {
                let n = r.u32()? as usize;
                let mut ids = Vec::with_capacity(n.min(body.len()));
                for _ in 0..n {
                    ids.push(r.id()?);
                }
                Operation::Delete(ids)
            }
            other => return Err(format!("unknown operation kind {other}")),
        };
        if r.at != body.len() {
            return Err(format!("{} bytes after the operation", body.len() - r.at));
        }
        Ok(op)
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_floats(out: &mut Vec<u8>, values: &[f32]) {
    put_elements(out, ElementType::Float32, values);
}

/// `values` as `element` holds them (they are already rounded to it), after a type byte
/// and their count.
fn put_typed(out: &mut Vec<u8>, element: ElementType, values: &[f32]) {
    out.push(element.code() as u8);
    put_elements(out, element, values);
}

/// A count, then `values` in `element`'s bytes.
fn put_elements(out: &mut Vec<u8>, element: ElementType, values: &[f32]) {
    put_u32(out, values.len() as u32);
    let at = out.len();
    out.resize(at + values.len() * element.bytes(), 0);
    element.encode(values, &mut out[at..]);
}

/// The vectors a point has: a count and (space, values) of its dense ones, a count and
/// (space, indices, values) of its sparse ones, then a count and (space, values: rows back
/// to back) of its multivectors. A space index fits a byte (`MAX_SPACES`). With `typed`,
/// dense and multivector values are written in their space's element type.
fn put_vectors(out: &mut Vec<u8>, v: &PointVectors, typed: Option<&SpaceTypes>) {
    let put =
        |out: &mut Vec<u8>, types: Option<&Vec<ElementType>>, space: usize, values| match types {
            Some(types) => put_typed(out, types.get(space).copied().unwrap_or_default(), values),
            None => put_floats(out, values),
        };
    let dense = v
        .dense
        .iter()
        .enumerate()
        .filter_map(|(i, d)| Some((i, d.as_ref()?)));
    out.push(dense.clone().count() as u8);
    for (space, values) in dense {
        out.push(space as u8);
        put(out, typed.map(|t| &t.dense), space, values);
    }
    let sparse = v
        .sparse
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s.as_ref()?)));
    out.push(sparse.clone().count() as u8);
    for (space, s) in sparse {
        out.push(space as u8);
        put_u32(out, s.indices.len() as u32);
        for i in &s.indices {
            out.extend_from_slice(&i.to_le_bytes());
        }
        for x in &s.values {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    let multi = v
        .multi
        .iter()
        .enumerate()
        .filter_map(|(i, m)| Some((i, m.as_ref()?)));
    out.push(multi.clone().count() as u8);
    for (space, rows) in multi {
        out.push(space as u8);
        put(out, typed.map(|t| &t.multi), space, rows);
    }
}

fn put_id(out: &mut Vec<u8>, id: PointId) {
    match id {
        PointId::Num(n) => {
            out.push(ID_NUM);
            out.extend_from_slice(&n.to_le_bytes());
        }
        PointId::Uuid(u) => {
            out.push(ID_UUID);
            out.extend_from_slice(&u.get().to_le_bytes());
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| format!("record ends inside a field at byte {}", self.at))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn words(&mut self, n: usize) -> Result<&'a [u8], String> {
        self.take(n.checked_mul(4).ok_or("length overflows")?)
    }
    fn floats(&mut self) -> Result<Vec<f32>, String> {
        self.elements(ElementType::Float32)
    }
    /// Values after a type byte and a count, widened to f32.
    fn typed(&mut self) -> Result<Vec<f32>, String> {
        let code = self.u8()?;
        let element = ElementType::from_code(u32::from(code))
            .ok_or_else(|| format!("unknown vector element type {code}"))?;
        self.elements(element)
    }
    /// A count, then that many values in `element`'s bytes, widened to f32.
    fn elements(&mut self, element: ElementType) -> Result<Vec<f32>, String> {
        let n = self.u32()? as usize;
        let bytes = self.take(n.checked_mul(element.bytes()).ok_or("length overflows")?)?;
        let mut values = Vec::new();
        element.decode_into(bytes, &mut values);
        Ok(values)
    }
    /// Dense or multivector values: f32, or `typed`.
    fn values(&mut self, typed: bool) -> Result<Vec<f32>, String> {
        if typed {
            self.typed()
        } else {
            self.floats()
        }
    }
    fn vectors(&mut self, typed: bool) -> Result<PointVectors, String> {
        let mut v = PointVectors::default();
        for _ in 0..self.u8()? {
            let space = self.u8()? as usize;
            let values = self.values(typed)?;
            v.set_dense(space, values);
        }
        for _ in 0..self.u8()? {
            let space = self.u8()? as usize;
            let n = self.u32()? as usize;
            let indices = self
                .words(n)?
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let values = self
                .words(n)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            v.set_sparse(space, SparseVector { indices, values });
        }
        for _ in 0..self.u8()? {
            let space = self.u8()? as usize;
            let rows = self.values(typed)?;
            v.set_multi(space, rows);
        }
        Ok(v)
    }
    fn id(&mut self) -> Result<PointId, String> {
        match self.u8()? {
            ID_NUM => Ok(PointId::Num(u64::from_le_bytes(
                self.take(8)?.try_into().unwrap(),
            ))),
            ID_UUID => Ok(PointId::Uuid(
                u128::from_le_bytes(self.take(16)?.try_into().unwrap()).into(),
            )),
            other => Err(format!("unknown point id kind {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operations_round_trip_and_damage_is_refused() {
        let payload = json!({"pos": "n", "chars": 12, "tags": ["a", "b"]});
        let mut spaces = PointVectors::default();
        spaces.set_dense(2, vec![1.0, 2.0]);
        spaces.set_multi(1, vec![1.0, 2.0, 3.0, 4.0]);
        spaces.set_sparse(
            1,
            SparseVector {
                indices: vec![3, 70_000],
                values: vec![0.25, -1.5],
            },
        );
        let ops = [
            Operation::Upsert(vec![
                StoredPoint {
                    id: PointId::Num(7),
                    vectors: PointVectors::one_dense(vec![0.5, -1.0, f32::MIN_POSITIVE]),
                    payload: payload.as_object().unwrap().clone(),
                },
                StoredPoint {
                    id: PointId::Uuid((u128::MAX - 3).into()),
                    vectors: spaces,
                    payload: Payload::new(),
                },
                StoredPoint {
                    id: PointId::Num(8),
                    vectors: PointVectors::default(),
                    payload: Payload::new(),
                },
            ]),
            Operation::Delete(vec![PointId::Num(1), PointId::Uuid(5.into())]),
            Operation::Upsert(Vec::new()),
        ];
        for op in &ops {
            let bytes = op.encode();
            assert_eq!(&Operation::decode(&bytes).unwrap(), op);
            for cut in 0..bytes.len() {
                assert!(Operation::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Operation::decode(&longer).is_err());
        }
        assert!(Operation::decode(&[9])
            .unwrap_err()
            .contains("unknown operation"));
        // With a float16 or uint8 space, upserts are written in the spaces' types (kind 4):
        // the same operation back, in fewer bytes.
        let types = SpaceTypes {
            dense: vec![
                ElementType::Float16,
                ElementType::Float32,
                ElementType::Uint8,
            ],
            multi: vec![ElementType::Float32, ElementType::Float16],
        };
        let mut typed = PointVectors::default();
        typed.set_dense(0, vec![0.5, -1.0, 65504.0, 0.099975586]);
        typed.set_dense(2, vec![0.0, 255.0, 7.0]);
        typed.set_multi(1, vec![1.0, 2.0, 3.0, -4.0]);
        typed.set_sparse(0, SparseVector::default());
        let op = Operation::Upsert(vec![StoredPoint {
            id: PointId::Num(11),
            vectors: typed,
            payload: Payload::new(),
        }]);
        let mut bytes = Vec::new();
        op.encode_into(&mut bytes, usize::MAX, &types).unwrap();
        assert_eq!(bytes[0], UPSERT_TYPED);
        assert!(
            bytes.len() < op.encode().len() - 20,
            "{} bytes",
            bytes.len()
        );
        assert_eq!(Operation::decode(&bytes).unwrap(), op);
        for cut in 0..bytes.len() {
            assert!(Operation::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // The first dense entry's type byte (after kind, count, id and the dense count and
        // space) names no type.
        // Any byte changed decodes to something or to an error, never a panic.
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[at] ^= flip;
                let _ = Operation::decode(&bad);
            }
        }
        let mut unknown = bytes.clone();
        unknown[1 + 4 + 9 + 2] = 9;
        assert!(Operation::decode(&unknown)
            .unwrap_err()
            .contains("element type 9"));
        // A record of log format 1 (one dense vector per point) replays as dense space 0.
        let mut v1 = vec![UPSERT_ONE_VECTOR];
        v1.extend_from_slice(&1u32.to_le_bytes());
        put_id(&mut v1, PointId::Num(5));
        put_floats(&mut v1, &[1.0, -2.0]);
        v1.extend_from_slice(&2u32.to_le_bytes());
        v1.extend_from_slice(b"{}");
        assert_eq!(
            Operation::decode(&v1).unwrap(),
            Operation::Upsert(vec![StoredPoint {
                id: PointId::Num(5),
                vectors: PointVectors::one_dense(vec![1.0, -2.0]),
                payload: Payload::new(),
            }])
        );
        // A payload over the limit is named with its size; one at the limit is not.
        let big = &ops[0];
        let Operation::Upsert(points) = big else {
            unreachable!()
        };
        let json = serde_json::to_vec(&points[0].payload).unwrap().len();
        let mut out = Vec::new();
        assert_eq!(
            big.encode_into(&mut out, json - 1, &SpaceTypes::default()),
            Err(PayloadTooLarge {
                id: points[0].id,
                bytes: json
            })
        );
        out.clear();
        big.encode_into(&mut out, json, &SpaceTypes::default())
            .unwrap();
        assert_eq!(out, big.encode());
    }
}
