//! Dot product and squared L2 distance between an f32 query and a float16 row, each row
//! widened in registers (F16C) as it is read: a float16 space's rows in DRAM are compared
//! without first being copied out as f32. The four accumulators and terms of `kernels.rs`; CPUs
//! without AVX2, FMA and F16C widen the row into a buffer and take the f32 kernels.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Σ a·b over the common length.
#[inline]
pub(crate) fn dot_f16(a: &[f32], b: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma_f16c() {
        // SAFETY: the function needs AVX2, FMA and F16C, which `avx2_fma_f16c` has just
        // found on this CPU; it reads only inside both slices (see `sum_of_terms`).
        return unsafe { x86::sum_of_terms::<false>(a, b) };
    }
    crate::kernels::dot(a, &widened(b))
}

/// Σ (a-b)² over the common length.
#[inline]
pub(crate) fn l2sq_f16(a: &[f32], b: &[f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma_f16c() {
        // SAFETY: as in `dot_f16`.
        return unsafe { x86::sum_of_terms::<true>(a, b) };
    }
    crate::kernels::l2sq(a, &widened(b))
}

fn widened(b: &[f16]) -> Vec<f32> {
    let mut out = vec![0.0; b.len()];
    b.convert_to_f32_slice(&mut out);
    out
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn avx2_fma_f16c() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    use crate::kernels::x86::{horizontal_sum, term};

    const STEP: usize = 32;

    /// Eight float16 values from `p`, widened.
    ///
    /// # Safety
    /// `p` points at 8 readable float16 values (16 bytes, any alignment).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_half(p: *const f16) -> __m256 {
        // SAFETY: the caller's promise; `loadu` has no alignment requirement.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }

    /// Σ of `term` over the common length of `a` and `b`. Reads `a[i..i + 8]` and
    /// `b[i..i + 8]` only while `i + 8 <= n`, `n` the shorter length; the tail indexes with
    /// bounds checks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn sum_of_terms<const L2: bool>(a: &[f32], b: &[f16]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads below): in bounds, as the function's comment says.
        unsafe {
            while i + STEP <= n {
                for (k, s) in acc.iter_mut().enumerate() {
                    let at = i + 8 * k;
                    *s = term::<L2>(_mm256_loadu_ps(pa.add(at)), load_half(pb.add(at)), *s);
                }
                i += STEP;
            }
            while i + 8 <= n {
                acc[0] = term::<L2>(_mm256_loadu_ps(pa.add(i)), load_half(pb.add(i)), acc[0]);
                i += 8;
            }
        }
        let mut sum = horizontal_sum(acc);
        for j in i..n {
            let y = b[j].to_f32();
            sum += if L2 {
                (a[j] - y) * (a[j] - y)
            } else {
                a[j] * y
            };
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_kernels_agree_with_the_f32_ones_on_widened_rows() {
        let a: Vec<f32> = (0..1100)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let b: Vec<f16> = (0..1100)
            .map(|i| f16::from_f32(((i * 53 % 89) as f32 - 44.0) / 13.0))
            .collect();
        for len in (0..70).chain([96, 383, 384, 385, 767, 768, 1024]) {
            for offset in [0, 1, 3] {
                let (x, y) = (&a[offset..offset + len], &b[offset..offset + len]);
                let wide = widened(y);
                let tol = |w: f32| 1e-4 * w.abs().max(1.0);
                let (want_dot, want_l2) = (
                    crate::kernels::dot(x, &wide),
                    crate::kernels::l2sq(x, &wide),
                );
                assert!(
                    (dot_f16(x, y) - want_dot).abs() <= tol(want_dot),
                    "dot len {len}"
                );
                assert!(
                    (l2sq_f16(x, y) - want_l2).abs() <= tol(want_l2),
                    "l2 len {len}"
                );
            }
        }
    }
}
