use crate::{kernels, kernels_f16};

/// How closeness is measured. Every distance here is "smaller is closer".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Squared Euclidean distance.
    L2,
    /// 1 - cosine similarity. Vectors are unit-normalized on the way in, so this is 1 - dot.
    Cosine,
    /// Negative dot product.
    InnerProduct,
}

impl Metric {
    pub fn code(self) -> u32 {
        match self {
            Metric::L2 => 0,
            Metric::Cosine => 1,
            Metric::InnerProduct => 2,
        }
    }

    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            0 => Some(Metric::L2),
            1 => Some(Metric::Cosine),
            2 => Some(Metric::InnerProduct),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "ip",
        }
    }

    /// Brings a vector into the form distances expect (unit length for cosine).
    /// A zero vector stays zero: its cosine distance to anything is then 1.
    pub fn prepare(self, v: &mut [f32]) {
        if self == Metric::Cosine {
            let norm = kernels::dot(v, v).sqrt();
            if norm.is_infinite() {
                // Components near f32's limit (3e38) overflow the sum of squares in f32;
                // in f64 it stays finite, and the unit vector is exact.
                let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
                v.iter_mut()
                    .for_each(|x| *x = (f64::from(*x) / norm) as f32);
            } else if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
    }

    /// Distance between two prepared vectors of equal length.
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        match self {
            Metric::L2 => kernels::l2sq(a, b),
            Metric::Cosine => 1.0 - kernels::dot(a, b),
            Metric::InnerProduct => -kernels::dot(a, b),
        }
    }

    /// `distance` to a float16 row, widened in registers as it is read.
    #[inline]
    pub fn distance_f16(self, a: &[f32], b: &[half::f16]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        match self {
            Metric::L2 => kernels_f16::l2sq_f16(a, b),
            Metric::Cosine => 1.0 - kernels_f16::dot_f16(a, b),
            Metric::InnerProduct => -kernels_f16::dot_f16(a, b),
        }
    }

    /// Whether product-quantization tables should hold squared L2 (true) or -dot (false).
    /// Cosine works on unit vectors, where L2 orders like cosine and quantizes better.
    pub fn pq_uses_l2(self) -> bool {
        self != Metric::InnerProduct
    }
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Ok(Metric::L2),
            "cosine" | "cos" | "angular" => Ok(Metric::Cosine),
            "ip" | "dot" | "inner_product" | "innerproduct" => Ok(Metric::InnerProduct),
            _ => Err(format!("unknown metric {s:?}: expected cosine, l2 or ip")),
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Squared L2 over short slices: the reference the vectorized centroid search is tested against.
#[inline]
#[cfg(test)]
pub(crate) fn l2sq_short(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_huge_components_is_a_unit_vector() {
        let mut v = [3e38f32, 3e38, 0.0, 0.0];
        Metric::Cosine.prepare(&mut v);
        let half = std::f32::consts::FRAC_1_SQRT_2;
        assert!(v.iter().all(|x| x.is_finite()), "{v:?}");
        assert!(
            (v[0] - half).abs() < 1e-6 && (v[1] - half).abs() < 1e-6,
            "{v:?}"
        );
    }

    #[test]
    fn distances_match_hand_computed_values() {
        let a = [1.0f32, 2.0, 3.0];
        let b = [4.0f32, 6.0, 3.0];
        assert!((Metric::L2.distance(&a, &b) - 25.0).abs() < 1e-5);
        assert!((Metric::InnerProduct.distance(&a, &b) + 25.0).abs() < 1e-5);
        let mut c = [3.0f32, 4.0];
        Metric::Cosine.prepare(&mut c);
        assert!((c[0] - 0.6).abs() < 1e-6 && (c[1] - 0.8).abs() < 1e-6);
        let mut d = [4.0f32, -3.0];
        Metric::Cosine.prepare(&mut d);
        assert!((Metric::Cosine.distance(&c, &d) - 1.0).abs() < 1e-5);
        assert!(Metric::Cosine.distance(&c, &c).abs() < 1e-5);
    }

    #[test]
    fn metric_names_round_trip() {
        for m in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
            assert_eq!(m.name().parse::<Metric>().unwrap(), m);
            assert_eq!(Metric::from_code(m.code()), Some(m));
        }
        assert!("hamming".parse::<Metric>().is_err());
        assert_eq!(Metric::from_code(9), None);
    }
}
