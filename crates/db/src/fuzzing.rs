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

/// A collection manifest decoded from its file's bytes.
pub struct DecodedManifest(crate::manifest::Manifest);

impl DecodedManifest {
    /// The file's bytes as a write would leave them.
    pub fn encode(&self) -> Vec<u8> {
        self.0.encode()
    }
}

/// A collection's `manifest.dvc`: decoded, or refused with the reason.
pub fn decode_manifest(bytes: &[u8]) -> Result<DecodedManifest, String> {
    crate::manifest::Manifest::decode(bytes, std::path::Path::new("manifest.dvc"))
        .map(DecodedManifest)
        .map_err(|e| e.to_string())
}

/// Manifests as collections write them: new, and with segments, deleted bitmaps, payload
/// indexes and a float16 space (version 3).
pub fn manifest_seeds() -> Vec<Vec<u8>> {
    use crate::manifest::{Manifest, SegmentEntry};
    let fresh = Manifest::new(crate::CollectionConfig::new(
        4,
        diskvec_vector::Metric::Cosine,
    ));
    let mut config = crate::CollectionConfig::new(3, diskvec_vector::Metric::L2);
    if let Some(space) = config.dense.first_mut() {
        space.datatype = ElementType::Float16;
    }
    let mut used = Manifest::new(config);
    used.payload_indexes.push(("pos".into(), "keyword".into()));
    used.segments = vec![
        SegmentEntry {
            id: 1,
            points: 1000,
            deleted_file: Some("deleted-1-3.bin".into()),
        },
        SegmentEntry {
            id: 2,
            points: 7,
            deleted_file: None,
        },
    ];
    used.checkpoint_op = 1007;
    used.next_segment_id = 3;
    used.generation = 4;
    vec![fresh.encode(), used.encode()]
}
