//! Serial-phase latency percentiles, a group of bars per percentile.

use plotters::prelude::*;

use super::axis::Ticked;
use super::legend::box_size;
use super::series::legend;
use super::style::{series_color, text, tick, AXIS, CAPTION, TICK};
use super::Area;
use crate::harness::RunFile;
use plotters::coord::types::RangedCoordf64;

pub const TITLE: &str = "Serial latency";

const PERCENTILES: [&str; 3] = ["p50", "p95", "p99"];

pub fn draw(area: &Area, run: &RunFile) -> anyhow::Result<Option<String>> {
    let bars: Vec<(usize, &str, [f64; 3])> = run
        .results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let v = [
                r.serial_latency_p50,
                r.serial_latency_p95,
                r.serial_latency_p99,
            ];
            (i, r.label.as_str(), v)
        })
        .filter(|b| b.2.iter().any(|v| v.is_finite() && *v > 0.0))
        .collect();
    if bars.is_empty() {
        return Ok(Some("no serial latencies".into()));
    }
    let y_max = bars
        .iter()
        .flat_map(|b| b.2)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // Each percentile's group fills 80% of its unit, split evenly between configurations.
    let width = 0.8 / bars.len() as f64;
    let left = |g: usize, slot: usize| g as f64 + 0.1 + slot as f64 * width;
    // The legend goes in the upper left, over the p50 group, the shortest bars; the y axis
    // is stretched so the bars under the legend end below it. The plot's size is the
    // panel's less the margins, label areas and caption set below.
    let labels: Vec<&str> = bars.iter().map(|b| b.1).collect();
    let (w, h) = area.dim_in_pixel();
    let (legend_w, legend_h) = box_size(
        &labels,
        (w.saturating_sub(64 + 24), h.saturating_sub(48 + 24 + 30)),
    );
    let covered = bars
        .iter()
        .enumerate()
        .flat_map(|(slot, b)| b.2.iter().enumerate().map(move |(g, v)| (slot, g, *v)))
        .filter(|&(slot, g, v)| v.is_finite() && left(g, slot) < legend_w * 3.0)
        .map(|(_, _, v)| v)
        .fold(0.0, f64::max);
    let y1 = (y_max * 1.1).max(covered / (1.0 - legend_h - 0.04).max(0.2));
    let mut chart = ChartBuilder::on(area)
        .caption(TITLE, text(CAPTION))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            Ticked {
                inner: RangedCoordf64::from(0.0..PERCENTILES.len() as f64),
                // A tick under the middle of each group, named by its percentile.
                ticks: vec![0.5, 1.5, 2.5],
                label: |v| PERCENTILES.get(v as usize).unwrap_or(&"").to_string(),
            },
            0.0..y1,
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("ms")
        .axis_desc_style(text(AXIS))
        .label_style(text(TICK))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    for (slot, (i, label, values)) in bars.iter().enumerate() {
        let color = series_color(*i);
        chart
            .draw_series(
                values
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(g, &v)| {
                        let x = left(g, slot);
                        Rectangle::new([(x, 0.0), (x + width, v)], color.filled())
                    }),
            )?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x - 8, y - 6), (x + 8, y + 6)], color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(None)
}
