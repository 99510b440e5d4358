//! Where a panel's legend goes: the corner its data leaves emptiest, like matplotlib's
//! `loc="best"`, so the legend does not hide the lines it names.

use plotters::chart::SeriesLabelPosition;

/// Pixels a legend takes per entry, and per character of its longest label plus the
/// sample line and padding (DejaVu Sans at the legend size, plotters' legend layout).
const ROW_PX: f64 = 25.0;
const CHAR_PX: f64 = 7.5;
const PAD_PX: f64 = 60.0;

/// Legend box size, as fractions of a `plot` (width, height) in pixels.
pub fn box_size(labels: &[&str], plot: (u32, u32)) -> (f64, f64) {
    let chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let w = (chars as f64 * CHAR_PX + PAD_PX) / f64::from(plot.0.max(1));
    let h = (labels.len() as f64 * ROW_PX + 10.0) / f64::from(plot.1.max(1));
    (w.min(1.0), h.min(1.0))
}

/// `lines` are polylines in plot fractions (0..1, y up); segments are sampled so a line
/// crossing a corner counts even with no marker in it. `size` is the legend's, from
/// `box_size`.
pub fn best_corner(lines: &[Vec<(f64, f64)>], (w, h): (f64, f64)) -> SeriesLabelPosition {
    let mut samples = Vec::new();
    for line in lines {
        samples.extend(line.iter().copied());
        for pair in line.windows(2) {
            for s in 1..16 {
                let t = s as f64 / 16.0;
                samples.push((
                    pair[0].0 + (pair[1].0 - pair[0].0) * t,
                    pair[0].1 + (pair[1].1 - pair[0].1) * t,
                ));
            }
        }
    }
    // In order of preference on a tie, as matplotlib's "best".
    let (mid0, mid1) = (0.5 - h / 2.0, 0.5 + h / 2.0);
    let candidates = [
        (SeriesLabelPosition::UpperRight, 1.0 - w, 1.0, 1.0 - h, 1.0),
        (SeriesLabelPosition::UpperLeft, 0.0, w, 1.0 - h, 1.0),
        (SeriesLabelPosition::LowerLeft, 0.0, w, 0.0, h),
        (SeriesLabelPosition::LowerRight, 1.0 - w, 1.0, 0.0, h),
        (SeriesLabelPosition::MiddleRight, 1.0 - w, 1.0, mid0, mid1),
        (SeriesLabelPosition::MiddleLeft, 0.0, w, mid0, mid1),
    ];
    let mut best = (usize::MAX, SeriesLabelPosition::UpperRight);
    for (pos, x0, x1, y0, y1) in candidates {
        let n = samples
            .iter()
            .filter(|&&(x, y)| x >= x0 && x <= x1 && y >= y0 && y <= y1)
            .count();
        if n < best.0 {
            best = (n, pos);
        }
    }
    best.1
}

/// `v` as a fraction of `lo..hi`.
pub fn frac(v: f64, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        (v - lo) / (hi - lo)
    } else {
        0.5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legend_avoids_the_data() {
        // A line falling from the upper left to the lower right leaves the other corners.
        let falling = vec![vec![(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)]];
        let size = (0.4, 0.4);
        assert!(matches!(
            best_corner(&falling, size),
            SeriesLabelPosition::UpperRight
        ));
        let rising_top = vec![vec![(0.0, 0.6), (1.0, 1.0)], vec![(0.0, 0.1), (0.4, 0.2)]];
        assert!(matches!(
            best_corner(&rising_top, size),
            SeriesLabelPosition::LowerRight
        ));
        // Lines along the top and the bottom leave the middle.
        let apart = vec![vec![(0.0, 0.9), (1.0, 0.95)], vec![(0.0, 0.05), (1.0, 0.1)]];
        assert!(matches!(
            best_corner(&apart, size),
            SeriesLabelPosition::MiddleRight
        ));
        assert_eq!(box_size(&["abcd", "ab"], (200, 100)), (0.45, 0.6));
    }
}
