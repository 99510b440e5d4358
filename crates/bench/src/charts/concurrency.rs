//! QPS at each concurrency level of the concurrent phase.

use plotters::prelude::*;

use super::legend::{best_corner, box_size, frac};
use super::series::{legend, line, Curve};
use super::style::{padded, text, tick, AXIS, CAPTION, TICK};
use super::Area;
use crate::harness::RunFile;

pub const TITLE: &str = "Concurrent phase";

pub fn draw(area: &Area, run: &RunFile) -> anyhow::Result<Option<String>> {
    let curves: Vec<Curve> = run
        .results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let pts: Vec<_> = r
                .conc_num_list
                .iter()
                .zip(&r.conc_qps_list)
                .map(|(&c, &q)| (c as f64, q))
                .filter(|(_, q)| q.is_finite())
                .collect();
            (!pts.is_empty()).then_some((i, r.label.as_str(), pts))
        })
        .collect();
    let levels = || curves.iter().flat_map(|c| c.2.iter().map(|p| p.0));
    let Some((lo, hi)) = levels().fold(None, |acc, x| {
        let (a, b) = acc.unwrap_or((x, x));
        Some((a.min(x), b.max(x)))
    }) else {
        return Ok(Some("no concurrency levels".into()));
    };
    let (x0, x1) = padded(lo, hi);
    let y_max = curves
        .iter()
        .flat_map(|c| c.2.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    // From zero, so the heights of the lines compare as ratios.
    let (y0, y1) = (0.0, if y_max > 0.0 { y_max * 1.08 } else { 1.0 });
    let mut chart = ChartBuilder::on(area)
        .caption(TITLE, text(CAPTION))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .x_desc("concurrent clients")
        .y_desc("QPS")
        .axis_desc_style(text(AXIS))
        .label_style(text(TICK))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    for (i, label, pts) in &curves {
        line(&mut chart, *i, label, pts)?;
    }
    let fracs: Vec<Vec<_>> = curves
        .iter()
        .map(|c| {
            c.2.iter()
                .map(|&(x, y)| (frac(x, x0, x1), frac(y, y0, y1)))
                .collect()
        })
        .collect();
    let labels: Vec<&str> = curves.iter().map(|c| c.1).collect();
    let size = box_size(&labels, chart.plotting_area().dim_in_pixel());
    legend(&mut chart, best_corner(&fracs, size))?;
    Ok(None)
}
