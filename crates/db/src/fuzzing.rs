//! Entry points for the fuzz targets, not an API: the decoders of bytes that come back from
//! disk or another node, behind types that are otherwise private.

use crate::ops::{Operation, SpaceTypes, StoredPoint};
use crate::point::{Payload, PointId};
use crate::vectors::{PointVectors, SparseVector};
use diskvec_vector::ElementType;

/// An operation decoded from a log record's body.
pub struct DecodedOperation(Operation);

impl DecodedOperation {
    /// Its record body, as the log writes it (vectors in f32).
    pub fn encode(&self) -> Vec<u8> {
        body(&self.0, &SpaceTypes::default())
    }
}

/// `op`'s record body with vectors written as `types` says.
fn body(op: &Operation, types: &SpaceTypes) -> Vec<u8> {
    let mut out = Vec::new();
    op.encode_into(&mut out, usize::MAX, types)
        .expect("no payload is over an unbounded size");
    out
}

/// A write-ahead log record's body (the replicated log carries the same bodies): decoded,
/// or refused with the reason.
pub fn decode_operation(body: &[u8]) -> Result<DecodedOperation, String> {
    Operation::decode(body).map(DecodedOperation)
}

/// Valid record bodies of every kind a log holds: upserts with every vector kind and
/// payloads, typed upserts (float16 and uint8 spaces), deletes, an empty upsert.
pub fn operation_seeds() -> Vec<Vec<u8>> {
    let payload = serde_json::json!({"pos": "n", "chars": 12, "tags": ["a", "b"], "x": 0.5});
    let mut spaces = PointVectors::default();
    spaces.set_dense(1, vec![1.0, 2.0]);
    spaces.set_multi(0, vec![1.0, 2.0, 3.0, 4.0]);
    spaces.set_sparse(
        0,
        SparseVector {
            indices: vec![3, 70_000],
            values: vec![0.25, -1.5],
        },
    );
    let point = |id, vectors, payload: Payload| StoredPoint {
        id,
        vectors,
        payload,
    };
    let upsert = Operation::Upsert(vec![
        point(
            PointId::Num(7),
            PointVectors::one_dense(vec![0.5, -1.0, 3.0]),
            payload.as_object().cloned().unwrap_or_default(),
        ),
        point(PointId::Uuid(99.into()), spaces, Payload::new()),
    ]);
    let mut typed_vectors = PointVectors::default();
    typed_vectors.set_dense(0, vec![0.5, -1.0, 65504.0]);
    typed_vectors.set_dense(1, vec![0.0, 255.0, 7.0]);
    let typed = Operation::Upsert(vec![point(PointId::Num(11), typed_vectors, Payload::new())]);
    let types = SpaceTypes {
        dense: vec![ElementType::Float16, ElementType::Uint8],
        multi: Vec::new(),
    };
    let plain = SpaceTypes::default();
    vec![
        body(&upsert, &plain),
        body(&typed, &types),
        body(
            &Operation::Delete(vec![PointId::Num(1), PointId::Uuid(5.into())]),
            &plain,
        ),
        body(&Operation::Upsert(Vec::new()), &plain),
    ]
}
