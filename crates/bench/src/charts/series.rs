//! A configuration's line (with point markers) and its legend entry.

use plotters::prelude::*;

use super::style::series_color;

use super::canvas::Canvas;

/// A configuration's index in the run (its colour), label and points.
pub type Curve<'a> = (usize, &'a str, Vec<(f64, f64)>);

pub type Chart<'a, 'b, X, Y> = ChartContext<'a, Canvas<'b>, Cartesian2d<X, Y>>;

pub fn line<'a, 'b: 'a, X, Y>(
    chart: &mut Chart<'a, 'b, X, Y>,
    i: usize,
    label: &str,
    points: &[(f64, f64)],
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let color = series_color(i);
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?
        .label(label)
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(-10, 0), (10, 0)], color.stroke_width(2))
                + Circle::new((0, 0), 4, color.filled())
        });
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    Ok(())
}

/// Draws the legend of the series drawn so far.
pub fn legend<'a, 'b: 'a, X, Y>(
    chart: &mut Chart<'a, 'b, X, Y>,
    at: SeriesLabelPosition,
) -> anyhow::Result<()>
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(at)
        .margin(8)
        .legend_area_size(26)
        .label_font(super::style::text(super::style::LEGEND))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}
