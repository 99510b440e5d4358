//! Colours, text sizes and number formats shared by the charts.

use plotters::style::{RGBColor, TextStyle};

use super::font::FAMILY;

/// matplotlib's default colour cycle, so charts read like the ones drawn before and each
/// configuration keeps one colour across panels.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4),
    (0xff, 0x7f, 0x0e),
    (0x2c, 0xa0, 0x2c),
    (0xd6, 0x27, 0x28),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
];

/// The colour of the `i`-th configuration of a run.
pub fn series_color(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

pub fn text(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into()
}

pub const TITLE: u32 = 16;
pub const CAPTION: u32 = 19;
pub const AXIS: u32 = 15;
pub const TICK: u32 = 13;
pub const LEGEND: u32 = 13;

/// A tick label: as many decimals as small values need and none for large ones, without
/// the float noise (0.9000000000000001) plotters' default formatter prints.
pub fn tick(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// 1234567 as "1,234,567", as the Python charts printed dataset sizes.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let groups: Vec<_> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(String::from_utf8_lossy)
        .collect();
    groups.join(",")
}

/// `lo..hi` widened by 5% each side, and to a small span around a single value, so no
/// point sits on the frame and a one-point range is still a range.
pub fn padded(lo: f64, hi: f64) -> (f64, f64) {
    let span = hi - lo;
    if span > 0.0 {
        (lo - span * 0.05, hi + span * 0.05)
    } else {
        let d = (lo.abs() * 0.05).max(0.01);
        (lo - d, hi + d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_without_float_noise() {
        assert_eq!(tick(0.9000000000000001), "0.9");
        assert_eq!(tick(0.875), "0.875");
        assert_eq!(tick(12.5), "12.5");
        assert_eq!(tick(3500.0), "3500");
        assert_eq!(tick(0.0), "0");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(50_000), "50,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(padded(1.0, 1.0), (0.95, 1.05));
    }
}
