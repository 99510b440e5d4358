//! Axes with the ticks we choose. plotters' log axis crowds its ticks (700, 800, 900 and 1000
//! overlap) or leaves a decade unlabelled, and its fixed-key-point axis takes no labels.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::prelude::Ranged;

use super::style::tick;

/// `inner`'s mapping with ticks (and grid lines) at `ticks`, labelled by `label`.
pub struct Ticked<R> {
    pub inner: R,
    pub ticks: Vec<f64>,
    pub label: fn(f64) -> String,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(v, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Only bold grid lines: light ones between ticks would be unlabelled clutter.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

impl<R: Ranged<ValueType = f64>> ValueFormatter<f64> for Ticked<R> {
    fn format(v: &f64) -> String {
        tick(*v)
    }

    fn format_ext(&self, v: &f64) -> String {
        (self.label)(*v)
    }
}

/// Ticks for a log axis over `lo..hi` (both positive): 1-2-5 per decade, only the powers of
/// ten when that would crowd the axis, every digit when the range is under a decade or so.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let within = |mults: &[f64]| -> Vec<f64> {
        let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        (first..=last)
            .flat_map(|e| mults.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| *v >= lo && *v <= hi)
            .collect()
    };
    let usual = within(&[1.0, 2.0, 5.0]);
    if usual.len() > 8 {
        within(&[1.0])
    } else if usual.len() < 3 {
        within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    } else {
        usual
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_neither_crowd_nor_leave_gaps() {
        assert_eq!(
            log_ticks(40.0, 5000.0),
            vec![50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]
        );
        assert_eq!(
            log_ticks(90.0, 3500.0),
            vec![100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(
            log_ticks(1.0, 1e6),
            vec![1.0, 10.0, 100.0, 1000.0, 1e4, 1e5, 1e6]
        );
        assert_eq!(log_ticks(150.0, 450.0), vec![200.0, 300.0, 400.0]);
    }
}
