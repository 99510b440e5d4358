//! The PQ codebook a build encodes with: trained on the build's own sample, or one an earlier
//! build made (a database's seals reuse their collection's), but only while the new rows fit
//! it about as well as the rows it was trained on. Rows that drifted away from it (another
//! range of values, other topics) get a codebook of their own: codes of a codebook that does
//! not fit them would all fall on its edge centroids, and a walk steered by them gets lost.

use diskvec_vector::ProductQuantizer;

use super::build::BuildParams;
use super::compact::compact_code_bytes;
use crate::{IndexError, Result};

/// Rows over which a codebook's fit is measured (encoding them costs a few milliseconds).
const FIT_ROWS: usize = 2_048;

/// A given codebook is used while the new rows' distortion is at most this many times the
/// distortion it had on rows held out of its training. Rows of the same distribution came
/// within 15% of that in `diskvec_vector`'s test, values shifted by two standard deviations
/// over 5x (96x with 8,000 training rows).
const REUSE_UP_TO: f64 = 1.5;

/// A trained PQ codebook, its compact companion (`compact.rs`) and how well the first fits
/// rows like those it was trained on (the compact one, trained on the same rows, goes with it).
#[derive(Clone, Debug)]
pub struct Codebook {
    pub pq: ProductQuantizer,
    /// `None` where the codes are too small to have a compact set (`compact_code_bytes`).
    pub compact: Option<ProductQuantizer>,
    /// Mean squared reconstruction error over rows of its sample held out of its training.
    pub distortion: f64,
}

impl Codebook {
    fn train(params: &BuildParams, sample: &[f32], dim: usize, pq_bytes: usize) -> Result<Self> {
        let use_l2 = params.metric.pq_uses_l2();
        let (pq, distortion) = ProductQuantizer::train_holding_out(
            sample,
            dim,
            pq_bytes,
            use_l2,
            params.pq_sample,
            params.seed,
            FIT_ROWS,
        )
        .map_err(IndexError::InvalidArgument)?;
        let compact = compact_code_bytes(pq_bytes)
            .map(|bytes| {
                ProductQuantizer::train_projected(
                    sample,
                    dim,
                    bytes,
                    use_l2,
                    params.pq_sample,
                    params.seed,
                )
            })
            .transpose()
            .map_err(IndexError::InvalidArgument)?;
        Ok(Self {
            pq,
            compact,
            distortion,
        })
    }

    /// Whether it was made for a build of this shape and fits `sample` (prepared rows).
    fn fits(&self, params: &BuildParams, sample: &[f32], dim: usize, pq_bytes: usize) -> bool {
        let pq = &self.pq;
        if pq.dim != dim
            || pq.code_bytes() != pq_bytes
            || pq.uses_l2() != params.metric.pq_uses_l2()
            || self.compact.as_ref().map(ProductQuantizer::code_bytes)
                != compact_code_bytes(pq_bytes)
        {
            log::info!("the codebook given does not fit this build's shape; training one");
            return false;
        }
        let here = pq.distortion(sample, FIT_ROWS);
        let fits = here <= REUSE_UP_TO * self.distortion;
        if !fits {
            log::info!(
                "the codebook given fits these rows {:.2}x worse than its own; training one",
                here / self.distortion.max(f64::MIN_POSITIVE)
            );
        }
        fits
    }
}

/// The codebook `params` gives when it fits this build (`Codebook::fits`), else one trained
/// on `sample` (prepared rows).
pub(crate) fn codebook_for(
    params: &BuildParams,
    sample: &[f32],
    dim: usize,
    pq_bytes: usize,
) -> Result<std::sync::Arc<Codebook>> {
    if let Some(given) = &params.codebook {
        if given.fits(params, sample, dim, pq_bytes) {
            return Ok(std::sync::Arc::clone(given));
        }
    }
    Codebook::train(params, sample, dim, pq_bytes).map(std::sync::Arc::new)
}
