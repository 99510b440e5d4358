//! Adding and deleting a vector space of a collection while it serves (Qdrant's
//! `PUT` and `DELETE /collections/{c}/vectors/{name}`).
//!
//! Spaces are named by their index in the config everywhere below the collection (log
//! records, segment files), so a deleted space keeps its slot, marked `removed`: no request
//! reaches it, no answer shows it, and the next seal, merge or vacuum of a segment leaves its
//! vectors out. A space added later, even under the same name, takes a new slot at the end.

use std::sync::Arc;

use super::{lock, Collection};
use crate::config::{CollectionConfig, DenseSpace, SparseSpace};
use crate::segment::Segment;
use crate::{DbError, Result};

/// A space to add.
#[derive(Clone, Debug)]
pub enum NewSpace {
    Dense(DenseSpace),
    /// A multivector space (MaxSim over rows of `dim` numbers).
    Multi(DenseSpace),
    Sparse(SparseSpace),
}

impl NewSpace {
    fn name(&self) -> &str {
        match self {
            NewSpace::Dense(s) | NewSpace::Multi(s) => &s.name,
            NewSpace::Sparse(s) => &s.name,
        }
    }
}

impl Collection {
    /// Adds a vector space; the points have no vector in it until they are given one.
    pub fn create_space(&self, space: NewSpace) -> Result<()> {
        self.change_spaces(|c| {
            if c.has_space(space.name()) {
                return Err(DbError::InvalidInput(format!(
                    "Vector with name `{}` already exists",
                    space.name()
                )));
            }
            match space {
                NewSpace::Dense(s) => c.dense.push(s),
                NewSpace::Multi(s) => c.multi.push(s),
                NewSpace::Sparse(s) => c.sparse.push(s),
            }
            Ok(())
        })
    }

    /// Deletes the vector space named `name` with every point's vector in it (the points
    /// stay, with their other vectors and payloads).
    pub fn delete_space(&self, name: &str) -> Result<()> {
        self.change_spaces(|c| {
            let removed = if let Some(i) = c.dense_space(name) {
                &mut c.dense[i].removed
            } else if let Some(i) = c.sparse_space(name) {
                &mut c.sparse[i].removed
            } else if let Some(i) = c.multi_space(name) {
                &mut c.multi[i].removed
            } else {
                return Err(DbError::NotFound(format!(
                    "Vector with name `{name}` does not exist"
                )));
            };
            *removed = true;
            Ok(())
        })
    }

    /// Applies `change` to the spaces: the manifest with them is written first (atomically),
    /// then, with writes held back and the segments locked, every segment follows and the
    /// new config is taken. Indexes never shift, so what a seal gathered under the old
    /// spaces still builds (an added space is simply empty there).
    fn change_spaces(
        &self,
        change: impl FnOnce(&mut CollectionConfig) -> Result<()>,
    ) -> Result<()> {
        let inner = &self.inner;
        let _writes_wait = lock(&inner.writer);
        let next = {
            let mut manifest = lock(&inner.manifest);
            inner.check_home()?;
            let mut next = (*inner.config()).clone();
            change(&mut next)?;
            next.check()?;
            let mut written = manifest.clone();
            written.config = next.clone();
            written.generation += 1;
            written.write(inner.storage.as_ref(), &inner.dir)?;
            *manifest = written;
            Arc::new(next)
        };
        let mut state = inner.state.write().unwrap_or_else(|e| e.into_inner());
        for segment in state.segments.values() {
            match segment {
                Segment::Growing(g) => g
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .follow_spaces(&next),
                Segment::Sealed(s) => s.follow_spaces(&next),
            }
        }
        *inner.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&next);
        state.config = next;
        Ok(())
    }
}
