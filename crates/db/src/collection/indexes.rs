//! Payload indexes: created and dropped per field, for every segment at once, and kept in
//! the manifest (no log record: an index is rebuilt from the payloads at open; keyword and
//! integer indexes change speed, never answers, and a text index's options are kept with it).

use super::{lock, Collection};
use crate::filter::{PayloadIndex, PayloadIndexKind};
use crate::segment::Segment;
use crate::Result;

impl Collection {
    /// Indexes `field` as `kind` ("keyword", "integer", "text" with default options, or
    /// one of Qdrant's kinds recorded without a structure) in every segment; returns once
    /// the manifest records it.
    pub fn create_payload_index(&self, field: &str, kind: &str) -> Result<()> {
        self.create_payload_index_with(field, kind, None)
    }

    /// `create_payload_index` with the options it was asked with (`params`: Qdrant's
    /// `field_schema` object): kept to show them, and a text index's decide its tokens.
    /// Every sealed segment's new index is built before anything changes, so a payload that
    /// cannot be read leaves the indexes as they were.
    pub fn create_payload_index_with(
        &self,
        field: &str,
        kind: &str,
        params: Option<serde_json::Value>,
    ) -> Result<()> {
        let kind = PayloadIndexKind::from_schema(kind, params.as_ref())
            .map_err(|e| crate::DbError::InvalidInput(e.to_string()))?;
        PayloadIndex::check_key(field).map_err(|e| crate::DbError::InvalidInput(e.to_string()))?;
        let inner = &self.inner;
        let _guard = lock(&inner.writer);
        // The options first (in memory): a manifest written meanwhile by the background
        // holds the new kind only with its options.
        let old_params = {
            let mut manifest = lock(&inner.manifest);
            match params {
                Some(p) => manifest.payload_index_params.insert(field.to_string(), p),
                None => manifest.payload_index_params.remove(field),
            }
        };
        let restore = || {
            let mut manifest = lock(&inner.manifest);
            match old_params.clone() {
                Some(p) => manifest.payload_index_params.insert(field.to_string(), p),
                None => manifest.payload_index_params.remove(field),
            };
        };
        {
            let mut state = inner.state.write().unwrap_or_else(|e| e.into_inner());
            let new_field = !state.fields.iter().any(|(f, _)| f == field);
            if let Some(max) = self.strict_mode().and_then(|s| s.max_payload_index_count) {
                if new_field && state.fields.len() >= max {
                    restore();
                    return Err(crate::DbError::BadRequest(format!(
                        "Collection already has the maximum number of payload indices ({max}). \
                         Help: Please delete an existing index before creating a new one."
                    )));
                }
            }
            let mut built = Vec::new();
            for (id, s) in &state.segments {
                if let Segment::Sealed(s) = s {
                    match s.build_index_field(field, kind.clone()) {
                        Ok(index) => built.push((*id, index)),
                        Err(e) => {
                            restore();
                            return Err(e);
                        }
                    }
                }
            }
            state.fields.retain(|(f, _)| f != field);
            state.fields.push((field.to_string(), kind.clone()));
            for s in state.segments.values() {
                if let Segment::Growing(g) = s {
                    let mut g = g.write().unwrap_or_else(|e| e.into_inner());
                    g.index.add_field(field, kind.clone());
                    let g = &mut *g;
                    for (offset, p) in g.payloads.iter().enumerate() {
                        if !g.deleted.contains(offset as u32) {
                            g.index.insert(offset as u32, p);
                        }
                    }
                }
            }
            for (id, index) in built {
                if let Some(Segment::Sealed(s)) = state.segments.get(&id) {
                    s.install_index_field(field, index);
                }
            }
        }
        inner.write_manifest(None)
    }

    /// Live points the index of `field` holds a value for, from the indexes alone (no
    /// payload is read); `None` when the field has no index structure (a kind recorded
    /// only) or no index.
    pub fn indexed_points(&self, field: &str) -> Option<usize> {
        let state = self.inner.state.read().unwrap_or_else(|e| e.into_inner());
        let mut total = 0;
        for segment in state.segments.values() {
            let (held, deleted) = match segment {
                Segment::Growing(g) => {
                    let g = g.read().unwrap_or_else(|e| e.into_inner());
                    (g.index.indexed_offsets(field)?, g.deleted.clone())
                }
                Segment::Sealed(s) => {
                    let held = s
                        .payload_index
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .indexed_offsets(field)?;
                    (
                        held,
                        s.deleted.read().unwrap_or_else(|e| e.into_inner()).clone(),
                    )
                }
            };
            total += (held - deleted).len() as usize;
        }
        Some(total)
    }

    /// The options each index was created with, where it was given some.
    pub fn payload_index_params(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        lock(&self.inner.manifest).payload_index_params.clone()
    }

    /// Drops the index of `field` (no error if there was none).
    pub fn delete_payload_index(&self, field: &str) -> Result<()> {
        let inner = &self.inner;
        let _guard = lock(&inner.writer);
        {
            let mut state = inner.state.write().unwrap_or_else(|e| e.into_inner());
            state.fields.retain(|(f, _)| f != field);
            for s in state.segments.values() {
                match s {
                    Segment::Growing(g) => g
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .index
                        .remove_field(field),
                    Segment::Sealed(s) => s
                        .payload_index
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove_field(field),
                }
            }
        }
        inner.write_manifest(None)
    }

    /// Indexed fields and their kinds.
    pub fn payload_indexes(&self) -> Vec<(String, String)> {
        self.inner
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .fields
            .iter()
            .map(|(f, k)| (f.clone(), k.name().to_string()))
            .collect()
    }
}
