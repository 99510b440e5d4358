//! The charts of a hand-made run: written where `chart_path` says, a PNG of the chart size,
//! and each panel showing every configuration in its colour.

use std::collections::HashSet;
use std::path::Path;

use diskvec_bench::charts::{chart_path, draw_run, HEIGHT, PALETTE, WIDTH};
use diskvec_bench::harness::{DatasetInfo, RunFile};
use diskvec_bench::price::PriceTable;
use diskvec_bench::raw::CaseRaw;
use diskvec_bench::result::{summarize, CaseResult, SweepPoint};

fn case(label: &str, scale: f64) -> CaseResult {
    let mut r = summarize(
        &CaseRaw::default(),
        &[],
        10,
        "ef",
        100,
        &PriceTable::default(),
    );
    r.label = label.into();
    r.conc_num_list = vec![1, 5, 10, 20];
    r.conc_qps_list = vec![900.0, 2500.0, 3100.0, 3000.0]
        .into_iter()
        .map(|q| q * scale)
        .collect();
    r.serial_latency_p50 = 0.9 / scale;
    r.serial_latency_p95 = 1.2 / scale;
    r.serial_latency_p99 = 1.6 / scale;
    // Out of knob order, as merged runs may be: the line must follow the knob.
    r.sweep = [(200, 0.99, 1800.0), (50, 0.90, 4000.0), (100, 0.96, 3000.0)]
        .into_iter()
        .map(|(knob, recall, qps)| SweepPoint {
            knob,
            concurrency: 10,
            qps: qps * scale,
            recall: recall * scale.min(1.0),
            ndcg: 1.0,
            latency_p99: 2.0,
        })
        .collect();
    r
}

fn run(results: Vec<CaseResult>) -> RunFile {
    RunFile {
        date: "2026-11-22".into(),
        machine: "test machine".into(),
        dataset: DatasetInfo {
            name: "tiny-set".into(),
            path: "/nowhere".into(),
            vectors: 50_000,
            dim: 384,
            queries: 100,
            synthetic: None,
        },
        k: 10,
        metric: "cosine".into(),
        concurrency: vec![1, 5, 10, 20],
        duration_seconds: 1.0,
        threads: 2,
        prices: PriceTable::default(),
        results,
        skipped: vec![],
    }
}

/// Width, height and RGB pixels of a PNG file.
fn decode(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb, "{path:?}");
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "{path:?}");
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(3)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width, info.height, pixels)
}

/// The pixels of columns `x0..x1` and rows `y0..y1`.
fn region(pixels: &[[u8; 3]], x0: u32, x1: u32, y0: u32, y1: u32) -> Vec<[u8; 3]> {
    (y0..y1)
        .flat_map(|y| (x0..x1).map(move |x| pixels[(y * WIDTH + x) as usize]))
        .collect()
}

#[test]
fn each_panel_shows_every_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let labels = ["hnsw", "diskann:paths=1", "diskann:paths=4"];
    let r = run(vec![
        case(labels[0], 1.0),
        case(labels[1], 0.3),
        case(labels[2], 0.35),
    ]);
    let charted = draw_run(&r, dir.path());
    assert!(charted.notes.is_empty(), "{:?}", charted.notes);
    let path = charted.path.expect("a chart");
    assert_eq!(path, chart_path(&r, dir.path()));
    assert_eq!(path, dir.path().join("tiny-set.png"));
    let (w, h, pixels) = decode(&path);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    let white = [255, 255, 255];
    // The title strip carries the dataset's heading: text needs the embedded font.
    let head = region(&pixels, 0, WIDTH, 0, 30);
    let inked = head.iter().filter(|p| **p != white).count();
    assert!(inked > 500, "title strip has {inked} inked pixels");
    // Each third is one panel; each shows each configuration in its own colour (markers
    // and bars are filled with it exactly), on top of axes and text.
    for panel in 0..3 {
        let px = region(
            &pixels,
            panel * WIDTH / 3,
            (panel + 1) * WIDTH / 3,
            34,
            HEIGHT,
        );
        let distinct: HashSet<_> = px.iter().collect();
        assert!(
            distinct.len() > 20,
            "panel {panel}: {} colours",
            distinct.len()
        );
        let inked = px.iter().filter(|p| **p != white).count();
        assert!(
            inked > px.len() / 50,
            "panel {panel}: {inked} of {} pixels inked",
            px.len()
        );
        for (i, _) in labels.iter().enumerate() {
            let (r, g, b) = PALETTE[i];
            let n = px.iter().filter(|p| **p == [r, g, b]).count();
            assert!(n > 40, "panel {panel}: configuration {i} has {n} pixels");
        }
        let (r, g, b) = PALETTE[labels.len()];
        assert!(
            !px.contains(&[r, g, b]),
            "panel {panel} shows a configuration the run does not have"
        );
    }
}

#[test]
fn a_panel_without_data_is_skipped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let mut only = case("hnsw", 1.0);
    only.sweep.clear();
    let charted = draw_run(&run(vec![only]), dir.path());
    let path = charted.path.expect("the other panels are drawn");
    assert_eq!(decode(&path).0, WIDTH);
    assert_eq!(charted.notes.len(), 1, "{:?}", charted.notes);
    assert!(
        charted.notes[0].contains("QPS vs recall") && charted.notes[0].contains("skipped"),
        "{:?}",
        charted.notes
    );
    // Nothing at all to draw: no image, a note, no panic.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let charted = draw_run(&run(vec![]), &empty);
    assert!(charted.path.is_none());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert!(
        charted.notes.iter().any(|n| n.contains("no data")),
        "{:?}",
        charted.notes
    );
    // A directory that cannot be written is a note too.
    let charted = draw_run(
        &run(vec![case("hnsw", 1.0)]),
        &dir.path().join("missing/dir"),
    );
    assert!(charted.path.is_none());
    assert!(
        charted.notes.iter().any(|n| n.contains("not drawn")),
        "{:?}",
        charted.notes
    );
}
