//! QPS against recall over each configuration's ef / search-list sweep (log QPS).

use plotters::coord::combinators::LogCoord;
use plotters::prelude::*;

use super::axis::{log_ticks, Ticked};
use super::legend::{best_corner, box_size, frac};
use super::series::{legend, line, Curve};
use super::style::{padded, text, tick, AXIS, CAPTION, TICK};
use super::Area;
use crate::harness::RunFile;

pub const TITLE: &str = "QPS vs recall (ef / L sweep)";

/// Draws the panel, or says why there is nothing to draw.
pub fn draw(area: &Area, run: &RunFile) -> anyhow::Result<Option<String>> {
    let curves: Vec<Curve> = run
        .results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let mut sweep: Vec<_> = r
                .sweep
                .iter()
                // A log axis has no place for zero QPS.
                .filter(|p| p.recall.is_finite() && p.qps.is_finite() && p.qps > 0.0)
                .collect();
            sweep.sort_by_key(|p| p.knob);
            let pts: Vec<_> = sweep.iter().map(|p| (p.recall, p.qps)).collect();
            (!pts.is_empty()).then_some((i, r.label.as_str(), pts))
        })
        .collect();
    let all = || curves.iter().flat_map(|c| c.2.iter().copied());
    let Some((x_lo, x_hi, y_lo, y_hi)) = all().fold(None, |acc, (x, y)| {
        let (a, b, c, d) = acc.unwrap_or((x, x, y, y));
        Some((a.min(x), b.max(x), c.min(y), d.max(y)))
    }) else {
        return Ok(Some("no sweep points".into()));
    };
    let (x0, x1) = padded(x_lo, x_hi);
    let (y0, y1) = (y_lo / 1.3, y_hi * 1.3);
    let mut chart = ChartBuilder::on(area)
        .caption(TITLE, text(CAPTION))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            x0..x1,
            Ticked {
                inner: LogCoord::from((y0..y1).log_scale()),
                ticks: log_ticks(y0, y1),
                label: tick,
            },
        )?;
    chart
        .configure_mesh()
        .x_desc(format!("recall@{}", run.k))
        .y_desc("QPS (at the best concurrency)")
        .axis_desc_style(text(AXIS))
        .label_style(text(TICK))
        .x_label_formatter(&|v| tick(*v))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    for (i, label, pts) in &curves {
        line(&mut chart, *i, label, pts)?;
    }
    let (l0, l1) = (y0.ln(), y1.ln());
    let fracs: Vec<Vec<_>> = curves
        .iter()
        .map(|c| {
            c.2.iter()
                .map(|&(x, y)| (frac(x, x0, x1), frac(y.ln(), l0, l1)))
                .collect()
        })
        .collect();
    let labels: Vec<&str> = curves.iter().map(|c| c.1).collect();
    let size = box_size(&labels, chart.plotting_area().dim_in_pixel());
    legend(&mut chart, best_corner(&fracs, size))?;
    Ok(None)
}
