//! How a full vector is stored: float32, float16 or uint8 per component (Qdrant's `datatype`).
//! Values enter as f32; a type narrower than f32 rounds them once, where they enter, and every
//! reader widens the stored bytes back to f32, so codes, graph and reranking all see the values
//! the index holds.

use half::slice::HalfFloatSliceExt;

/// The element type of stored vectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ElementType {
    #[default]
    Float32,
    /// IEEE binary16, little-endian; values rounded to nearest even.
    Float16,
    /// Whole numbers 0-255, one byte each.
    Uint8,
}

/// A value a type cannot hold, at `position` of the block given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutOfRange {
    pub position: usize,
    pub value: f32,
    pub element: ElementType,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.element {
            ElementType::Float16 => write!(
                f,
                "{} is beyond float16's largest finite value {}",
                self.value,
                half::f16::MAX
            ),
            _ => write!(
                f,
                "{} is not a whole number from 0 to 255, which uint8 storage holds",
                self.value
            ),
        }
    }
}

impl ElementType {
    pub const ALL: [ElementType; 3] = [Self::Float32, Self::Float16, Self::Uint8];

    /// Bytes one component takes.
    pub fn bytes(self) -> usize {
        match self {
            Self::Float32 => 4,
            Self::Float16 => 2,
            Self::Uint8 => 1,
        }
    }

    /// The number stored in file headers.
    pub fn code(self) -> u32 {
        match self {
            Self::Float32 => 0,
            Self::Float16 => 1,
            Self::Uint8 => 2,
        }
    }

    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.code() == code)
    }

    /// Qdrant's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Float16 => "float16",
            Self::Uint8 => "uint8",
        }
    }

    /// Rounds `values` in place to what this type holds (float16: nearest even); refuses,
    /// naming the first, a value it cannot hold (float16: finite beyond ±65504; uint8: not a
    /// whole number in 0-255). Values are finite (checked before).
    pub fn round_in_place(self, values: &mut [f32]) -> Result<(), OutOfRange> {
        let refuse = |position: usize, value: f32| OutOfRange {
            position,
            value,
            element: self,
        };
        match self {
            Self::Float32 => Ok(()),
            Self::Float16 => {
                let max = f32::from(half::f16::MAX);
                if let Some(p) = values.iter().position(|x| x.abs() > max) {
                    // Between 65504 and 65520 rounds down to 65504 in IEEE terms, but a value
                    // past the largest finite one is a value the type does not have.
                    return Err(refuse(p, values[p]));
                }
                let mut narrow = [half::f16::ZERO; 64];
                for chunk in values.chunks_mut(64) {
                    let narrow = &mut narrow[..chunk.len()];
                    narrow.convert_from_f32_slice(chunk);
                    narrow.convert_to_f32_slice(chunk);
                }
                Ok(())
            }
            Self::Uint8 => match values
                .iter()
                .position(|&x| !(0.0..=255.0).contains(&x) || x.fract() != 0.0)
            {
                Some(p) => Err(refuse(p, values[p])),
                None => Ok(()),
            },
        }
    }

    /// Whether every value is one this type holds exactly (rounding would change nothing).
    pub fn holds_exactly(self, values: &[f32]) -> bool {
        match self {
            Self::Float32 => true,
            Self::Float16 => values
                .iter()
                .all(|&x| f32::from(half::f16::from_f32(x)) == x),
            Self::Uint8 => values
                .iter()
                .all(|&x| (0.0..=255.0).contains(&x) && x.fract() == 0.0),
        }
    }

    /// Writes `values` (which this type holds exactly: see `round_in_place`) into `out`,
    /// `values.len() * bytes()` long, little-endian.
    pub fn encode(self, values: &[f32], out: &mut [u8]) {
        debug_assert_eq!(out.len(), values.len() * self.bytes());
        debug_assert!(self.holds_exactly(values));
        match self {
            Self::Float32 => {
                for (chunk, x) in out.chunks_exact_mut(4).zip(values) {
                    chunk.copy_from_slice(&x.to_le_bytes());
                }
            }
            Self::Float16 => {
                for (chunk, x) in out.chunks_exact_mut(2).zip(values) {
                    chunk.copy_from_slice(&half::f16::from_f32(*x).to_le_bytes());
                }
            }
            Self::Uint8 => {
                for (b, x) in out.iter_mut().zip(values) {
                    *b = *x as u8;
                }
            }
        }
    }

    /// The stored `bytes` widened to f32, appended to `out` (cleared first).
    pub fn decode_into(self, bytes: &[u8], out: &mut Vec<f32>) {
        out.clear();
        match self {
            Self::Float32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
            ),
            Self::Float16 => {
                let n = bytes.len() / 2;
                out.resize(n, 0.0);
                match bytemuck::try_cast_slice::<u8, half::f16>(&bytes[..2 * n]) {
                    // Aligned on a little-endian machine: the bytes are the values, and the
                    // slice conversion uses F16C where the CPU has it.
                    Ok(halves) if cfg!(target_endian = "little") => {
                        halves.convert_to_f32_slice(out)
                    }
                    _ => {
                        for (x, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                            *x = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                        }
                    }
                }
            }
            Self::Uint8 => out.extend(bytes.iter().map(|&b| f32::from(b))),
        }
    }
}

impl std::str::FromStr for ElementType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "float32" | "f32" => Ok(Self::Float32),
            "float16" | "f16" => Ok(Self::Float16),
            "uint8" | "u8" => Ok(Self::Uint8),
            _ => Err(format!(
                "unknown vector datatype {s:?}: expected float32, float16 or uint8"
            )),
        }
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_rounds_to_nearest_even_and_refuses_overflow() {
        let mut v = [1.0f32, 0.1, -2.5e-6, 65504.0, -65504.0, 1.0 + 1.0 / 2048.0];
        ElementType::Float16.round_in_place(&mut v).unwrap();
        assert_eq!(v[0], 1.0);
        assert_eq!(v[1], f32::from(half::f16::from_f32(0.1)));
        assert!(v[2] < 0.0 && v[2] != -2.5e-6, "subnormal kept: {}", v[2]);
        assert_eq!(v[3], 65504.0);
        // Halfway between 1 and the next float16 (1 + 2^-10): ties go to the even one, 1.
        assert_eq!(v[5], 1.0);
        assert!(ElementType::Float16.holds_exactly(&v));
        let mut big = [0.0f32, 70000.0];
        let e = ElementType::Float16.round_in_place(&mut big).unwrap_err();
        assert_eq!((e.position, e.value), (1, 70000.0));
        assert!(e.to_string().contains("65504"), "{e}");
    }

    #[test]
    fn uint8_holds_whole_numbers_from_0_to_255_only() {
        let mut ok = [0.0f32, 3.0, 255.0];
        ElementType::Uint8.round_in_place(&mut ok).unwrap();
        for bad in [256.0f32, -1.0, 3.5] {
            let e = ElementType::Uint8
                .round_in_place(&mut [1.0, bad])
                .unwrap_err();
            assert_eq!((e.position, e.value), (1, bad));
            assert!(e.to_string().contains("0 to 255"), "{e}");
        }
    }

    #[test]
    fn encode_then_decode_gives_the_rounded_values_back() {
        let mut v: Vec<f32> = (0..37).map(|i| (i as f32 * 7.0) % 256.0).collect();
        for e in ElementType::ALL {
            e.round_in_place(&mut v).unwrap();
            let mut bytes = vec![0u8; v.len() * e.bytes()];
            e.encode(&v, &mut bytes);
            let mut back = Vec::new();
            // Also from an odd offset: the unaligned path.
            let mut shifted = vec![0u8; bytes.len() + 1];
            shifted[1..].copy_from_slice(&bytes);
            e.decode_into(&bytes, &mut back);
            assert_eq!(back, v, "{e}");
            e.decode_into(&shifted[1..], &mut back);
            assert_eq!(back, v, "{e} unaligned");
        }
        let mut frac: Vec<f32> = (0..37).map(|i| i as f32 * 0.37 - 5.0).collect();
        ElementType::Float16.round_in_place(&mut frac).unwrap();
        let mut bytes = vec![0u8; frac.len() * 2];
        ElementType::Float16.encode(&frac, &mut bytes);
        let mut back = Vec::new();
        ElementType::Float16.decode_into(&bytes, &mut back);
        assert_eq!(back, frac);
    }

    #[test]
    fn names_and_codes_round_trip() {
        for e in ElementType::ALL {
            assert_eq!(e.name().parse::<ElementType>().unwrap(), e);
            assert_eq!(ElementType::from_code(e.code()), Some(e));
        }
        assert!("turbo4".parse::<ElementType>().is_err());
        assert_eq!(ElementType::from_code(3), None);
    }
}
