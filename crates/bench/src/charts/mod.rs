//! PNG charts of a bench run, drawn in-process: QPS against recall over each
//! configuration's sweep, QPS per concurrency level, and serial latency percentiles, side by
//! side in one image per dataset.

mod axis;
mod canvas;
mod concurrency;
mod encode;
mod font;
mod latency;
mod legend;
mod qps_recall;
mod series;
mod style;

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

pub use style::PALETTE;

use crate::harness::RunFile;
use canvas::Canvas;
use style::{text, thousands, CAPTION, TITLE};

/// Pixel size of a chart image (matplotlib's 16 x 4.8 inches at 110 dpi, as before).
pub const WIDTH: u32 = 1760;
pub const HEIGHT: u32 = 528;

type Area<'a> = DrawingArea<Canvas<'a>, Shift>;

/// The panels, left to right: title and drawing function.
type Panel = fn(&Area, &RunFile) -> anyhow::Result<Option<String>>;
const PANELS: [(&str, Panel); 3] = [
    (qps_recall::TITLE, qps_recall::draw),
    (concurrency::TITLE, concurrency::draw),
    (latency::TITLE, latency::draw),
];

/// What charting a run gave: the image written, if any, and a one-line note for each panel
/// or image that was left out.
#[derive(Debug, Default)]
pub struct Charted {
    pub path: Option<PathBuf>,
    pub notes: Vec<String>,
}

/// Where `draw_run` writes a run's chart.
pub fn chart_path(run: &RunFile, dir: &Path) -> PathBuf {
    dir.join(format!("{}.png", run.dataset.name))
}

/// Draws `run`'s charts into `dir/DATASET.png`. Never fails: a panel without data is left
/// empty with a note, and an image with no panel to show, or that cannot be drawn or
/// written, is not written, with a note.
pub fn draw_run(run: &RunFile, dir: &Path) -> Charted {
    let path = chart_path(run, dir);
    let mut notes = Vec::new();
    let drawn = draw(run, &mut notes);
    let written = match drawn {
        Ok(Some(rgb)) => encode::write_png(&path, WIDTH, HEIGHT, &rgb).map(|()| true),
        Ok(None) => {
            notes.push(format!("{}: no data to chart", path.display()));
            Ok(false)
        }
        Err(e) => Err(e),
    };
    let path = match written {
        Ok(true) => Some(path),
        Ok(false) => None,
        Err(e) => {
            notes.push(format!("{} not drawn: {e:#}", path.display()));
            None
        }
    };
    Charted {
        path,
        notes: notes.into_iter().map(|n| n.replace('\n', " ")).collect(),
    }
}

/// The image's pixels (RGB), or None when no panel has anything to show.
fn draw(run: &RunFile, notes: &mut Vec<String>) -> anyhow::Result<Option<Vec<u8>>> {
    let mut rgb = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
    let mut shown = 0;
    {
        let root = Canvas::new(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (head, body) = root.split_vertically(34);
        head.draw(&Text::new(
            heading(run),
            (WIDTH as i32 / 2, 10),
            text(TITLE).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
        ))?;
        for ((title, panel), area) in PANELS.iter().zip(body.split_evenly((1, 3))) {
            match panel(&area, run) {
                Ok(None) => shown += 1,
                Ok(Some(why)) => {
                    notes.push(format!(
                        "{}: chart \"{title}\" skipped: {why}",
                        run.dataset.name
                    ));
                    empty_panel(&area, title)?;
                }
                Err(e) => {
                    notes.push(format!(
                        "{}: chart \"{title}\" not drawn: {e:#}",
                        run.dataset.name
                    ));
                    area.fill(&WHITE)?;
                    empty_panel(&area, title)?;
                }
            }
        }
        root.present()?;
    }
    Ok((shown > 0).then_some(rgb))
}

/// "name (synthetic): 1,000,000 x 768, date, machine", the Python charts' title.
fn heading(run: &RunFile) -> String {
    let d = &run.dataset;
    let synth = if d.synthetic.is_some() {
        " (synthetic)"
    } else {
        ""
    };
    format!(
        "{}{synth}: {} x {}, {}, {}",
        d.name,
        thousands(d.vectors),
        d.dim,
        run.date,
        run.machine
    )
}

/// A panel with its title and "no data", so the image keeps its layout.
fn empty_panel(area: &Area, title: &str) -> anyhow::Result<()> {
    let area = area.titled(title, text(CAPTION))?;
    let (w, h) = area.dim_in_pixel();
    let grey = BLACK.mix(0.5);
    let centred = text(style::AXIS)
        .color(&grey)
        .pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Center,
        ));
    area.draw(&Text::new("no data", (w as i32 / 2, h as i32 / 2), centred))?;
    Ok(())
}
