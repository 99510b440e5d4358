//! Row-major vectors kept in DRAM in their storage type (float32, float16 or uint8), read as
//! f32: a growing segment's rows take the bytes its space's datatype says, as the sealed
//! records on SSD do, so a float16 space holds half the bytes in DRAM and a scan of rows not
//! yet linked reads half as many.

use std::cell::RefCell;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::{prefetch, ElementType, Metric};

thread_local! {
    /// A row widened to f32 for a distance (each thread its own: searches run in many).
    static WIDE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows of one dimension, stored as one element type. Values pushed are already rounded to
/// the type (`ElementType::round_in_place`), so storing them loses nothing.
#[derive(Clone, Debug, PartialEq)]
pub enum TypedRows {
    Float32(Vec<f32>),
    Float16(Vec<f16>),
    Uint8(Vec<u8>),
}

impl TypedRows {
    /// Empty, with room for `values` numbers.
    pub fn with_capacity(element: ElementType, values: usize) -> Self {
        match element {
            ElementType::Float32 => Self::Float32(Vec::with_capacity(values)),
            ElementType::Float16 => Self::Float16(Vec::with_capacity(values)),
            ElementType::Uint8 => Self::Uint8(Vec::with_capacity(values)),
        }
    }

    pub fn element(&self) -> ElementType {
        match self {
            Self::Float32(_) => ElementType::Float32,
            Self::Float16(_) => ElementType::Float16,
            Self::Uint8(_) => ElementType::Uint8,
        }
    }

    /// Numbers held (rows times their dimension).
    pub fn len(&self) -> usize {
        match self {
            Self::Float32(v) => v.len(),
            Self::Float16(v) => v.len(),
            Self::Uint8(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the numbers held take.
    pub fn bytes(&self) -> usize {
        self.len() * self.element().bytes()
    }

    /// Bytes allocated, held or not.
    pub fn capacity_bytes(&self) -> usize {
        let capacity = match self {
            Self::Float32(v) => v.capacity(),
            Self::Float16(v) => v.capacity(),
            Self::Uint8(v) => v.capacity(),
        };
        capacity * self.element().bytes()
    }

    /// Appends a row of values the type holds exactly (see `ElementType::round_in_place`).
    pub fn push_row(&mut self, row: &[f32]) {
        debug_assert!(self.element().holds_exactly(row), "a row not rounded first");
        match self {
            Self::Float32(v) => v.extend_from_slice(row),
            Self::Float16(v) => {
                let at = v.len();
                v.resize(at + row.len(), f16::ZERO);
                v[at..].convert_from_f32_slice(row);
            }
            Self::Uint8(v) => v.extend(row.iter().map(|&x| x as u8)),
        }
    }

    /// Appends a row of zeros.
    pub fn push_zeros(&mut self, dim: usize) {
        match self {
            Self::Float32(v) => v.resize(v.len() + dim, 0.0),
            Self::Float16(v) => v.resize(v.len() + dim, f16::ZERO),
            Self::Uint8(v) => v.resize(v.len() + dim, 0),
        }
    }

    /// Moves `other`'s rows (of the same type) to the end, leaving it empty.
    pub fn append(&mut self, other: &mut TypedRows) {
        match (self, other) {
            (Self::Float32(a), Self::Float32(b)) => a.append(b),
            (Self::Float16(a), Self::Float16(b)) => a.append(b),
            (Self::Uint8(a), Self::Uint8(b)) => a.append(b),
            (a, b) => panic!("appending {} rows to {} rows", b.element(), a.element()),
        }
    }

    /// Numbers `from..to`, widened to f32 and appended to `out`.
    pub fn extend_f32(&self, from: usize, to: usize, out: &mut Vec<f32>) {
        match self {
            Self::Float32(v) => out.extend_from_slice(&v[from..to]),
            Self::Float16(v) => {
                let at = out.len();
                out.resize(at + (to - from), 0.0);
                v[from..to].convert_to_f32_slice(&mut out[at..]);
            }
            Self::Uint8(v) => out.extend(v[from..to].iter().map(|&b| f32::from(b))),
        }
    }

    /// Row `i` of `dim` numbers, widened to f32.
    pub fn row_f32(&self, dim: usize, i: u32) -> Vec<f32> {
        let at = i as usize * dim;
        let mut out = Vec::with_capacity(dim);
        self.extend_f32(at, at + dim, &mut out);
        out
    }

    /// The numbers as f32 when they are stored so.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Self::Float32(v) => Some(v),
            _ => None,
        }
    }

    /// Distance from a prepared f32 `query` of `dim` numbers to row `i`: float32 and float16
    /// rows in place (float16 widened in registers), uint8 ones widened first into a
    /// per-thread row.
    #[inline]
    pub fn distance(&self, metric: Metric, query: &[f32], i: u32) -> f32 {
        let dim = query.len();
        let at = i as usize * dim;
        match self {
            Self::Float32(v) => metric.distance(query, &v[at..at + dim]),
            Self::Float16(v) => metric.distance_f16(query, &v[at..at + dim]),
            Self::Uint8(_) => with_wide(dim, |wide| {
                self.widen_into(at, wide);
                metric.distance(query, wide)
            }),
        }
    }

    /// Distance between rows `a` and `b` of `dim` numbers.
    pub fn distance_between(&self, metric: Metric, dim: usize, a: u32, b: u32) -> f32 {
        match self {
            Self::Float32(v) => {
                let (a, b) = (a as usize * dim, b as usize * dim);
                metric.distance(&v[a..a + dim], &v[b..b + dim])
            }
            Self::Float16(v) => with_wide(dim, |wide| {
                self.widen_into(a as usize * dim, wide);
                let b = b as usize * dim;
                metric.distance_f16(wide, &v[b..b + dim])
            }),
            Self::Uint8(_) => {
                let row_a = self.row_f32(dim, a);
                self.distance(metric, &row_a, b)
            }
        }
    }

    /// Starts fetching the first `lines` cache lines of row `i`.
    #[inline]
    pub fn prefetch_row(&self, dim: usize, i: u32, lines: usize) {
        let at = i as usize * dim;
        match self {
            Self::Float32(v) => prefetch(&v[at..at + dim], lines),
            Self::Float16(v) => prefetch(&v[at..at + dim], lines),
            Self::Uint8(v) => prefetch(&v[at..at + dim], lines),
        }
    }

    /// Widens the `wide.len()` numbers from `at` into `wide`.
    #[inline]
    fn widen_into(&self, at: usize, wide: &mut [f32]) {
        let to = at + wide.len();
        match self {
            Self::Float32(v) => wide.copy_from_slice(&v[at..to]),
            Self::Float16(v) => v[at..to].convert_to_f32_slice(wide),
            Self::Uint8(v) => {
                for (w, &b) in wide.iter_mut().zip(&v[at..to]) {
                    *w = f32::from(b);
                }
            }
        }
    }
}

/// Runs `f` on this thread's widening row, `dim` long (a fresh one if `f` is reached again
/// from inside itself, which no distance does).
#[inline]
fn with_wide<R>(dim: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    WIDE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut wide) => {
            wide.resize(dim, 0.0);
            f(&mut wide[..dim])
        }
        Err(_) => f(&mut vec![0.0; dim]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounded(element: ElementType, rows: usize, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..rows * dim)
            .map(|i| match element {
                ElementType::Uint8 => ((i * 37) % 256) as f32,
                _ => ((i * 37) % 101) as f32 / 50.0 - 1.0,
            })
            .collect();
        element.round_in_place(&mut v).unwrap();
        v
    }

    #[test]
    fn every_type_gives_back_its_rows_and_the_distances_of_f32() {
        let (rows, dim) = (7, 19);
        for element in ElementType::ALL {
            let values = rounded(element, rows, dim);
            let mut typed = TypedRows::with_capacity(element, 0);
            for row in values.chunks(dim) {
                typed.push_row(row);
            }
            typed.push_zeros(dim);
            assert_eq!(typed.len(), (rows + 1) * dim);
            assert_eq!(typed.bytes(), (rows + 1) * dim * element.bytes());
            let mut all = Vec::new();
            typed.extend_f32(0, rows * dim, &mut all);
            assert_eq!(all, values, "{element}");
            assert_eq!(typed.row_f32(dim, rows as u32), vec![0.0; dim]);
            let query = &values[dim..2 * dim];
            for metric in [Metric::L2, Metric::InnerProduct] {
                for i in 0..rows as u32 {
                    let row = &values[i as usize * dim..(i as usize + 1) * dim];
                    assert_eq!(
                        typed.distance(metric, query, i),
                        metric.distance(query, row)
                    );
                    assert_eq!(
                        typed.distance_between(metric, dim, 1, i),
                        metric.distance(query, row)
                    );
                }
            }
            let mut more = TypedRows::with_capacity(element, dim);
            more.push_row(&values[..dim]);
            typed.append(&mut more);
            assert!(more.is_empty());
            assert_eq!(typed.row_f32(dim, rows as u32 + 1), values[..dim].to_vec());
        }
    }

    #[test]
    #[should_panic(expected = "appending float16 rows to float32 rows")]
    fn rows_of_two_types_are_never_mixed() {
        TypedRows::with_capacity(ElementType::Float32, 0)
            .append(&mut TypedRows::with_capacity(ElementType::Float16, 0));
    }
}
