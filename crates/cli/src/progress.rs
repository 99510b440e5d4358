use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// JSON progress lines come at most this often within a phase (and at every phase's start).
const JSON_EVERY: Duration = Duration::from_secs(1);

/// Reports a long job's progress: one bar per phase on stderr when it is a terminal
/// (indicatif hides it otherwise), or, for `--json` runs, one JSON line per phase start and
/// per second on stderr (`{"progress": {"phase", "done", "total", "seconds"}}`), so a
/// script reading stdout's result can follow the work too.
pub struct Bars {
    current: Mutex<Option<ProgressBar>>,
    json: Option<Mutex<JsonPhase>>,
}

struct JsonPhase {
    phase: String,
    done: u64,
    total: u64,
    started: Instant,
    last_line: Instant,
}

impl JsonPhase {
    fn emit(&mut self) {
        self.last_line = Instant::now();
        eprintln!(
            "{}",
            serde_json::json!({"progress": {
                "phase": self.phase, "done": self.done, "total": self.total,
                "seconds": self.started.elapsed().as_secs_f64(),
            }})
        );
    }
}

impl Bars {
    pub fn new() -> Self {
        Self::for_output(false)
    }

    /// Bars, or JSON lines when `json` (the command's `--json`).
    pub fn for_output(json: bool) -> Self {
        Self {
            current: Mutex::new(None),
            json: json.then(|| {
                Mutex::new(JsonPhase {
                    phase: String::new(),
                    done: 0,
                    total: 0,
                    started: Instant::now(),
                    last_line: Instant::now(),
                })
            }),
        }
    }

    pub fn finish(&self) {
        if let Some(j) = &self.json {
            let mut j = j.lock().unwrap();
            if !j.phase.is_empty() {
                j.emit();
            }
            return;
        }
        if let Some(bar) = self.current.lock().unwrap().take() {
            bar.finish();
        }
    }
}

impl diskvec_index::Progress for Bars {
    fn phase(&self, name: &str, total: u64) {
        if let Some(j) = &self.json {
            let mut j = j.lock().unwrap();
            j.phase = name.to_string();
            (j.done, j.total) = (0, total);
            j.emit();
            return;
        }
        let mut current = self.current.lock().unwrap();
        if let Some(bar) = current.take() {
            bar.finish();
        }
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{msg:>18} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})")
                .unwrap()
                .progress_chars("=> "),
        );
        bar.set_message(name.to_string());
        *current = Some(bar);
    }

    fn advance(&self, steps: u64) {
        if let Some(j) = &self.json {
            let mut j = j.lock().unwrap();
            j.done += steps;
            if j.last_line.elapsed() >= JSON_EVERY {
                j.emit();
            }
            return;
        }
        if let Some(bar) = self.current.lock().unwrap().as_ref() {
            bar.inc(steps);
        }
    }
}

/// `optimize(wait)` with a bar that follows the collection's background build (seal,
/// vacuum or merge, phase by phase), polled from `info()`; hidden when stderr is not a
/// terminal.
pub fn optimize(col: &diskvec_db::Collection, json: bool) -> diskvec_db::Result<()> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg:>60} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_message("optimizing");
    let mut last_line = Instant::now() - JSON_EVERY;
    std::thread::scope(|s| {
        let work = s.spawn(|| col.optimize(true));
        while !work.is_finished() {
            if let Some(t) = col.info().task {
                if json {
                    if last_line.elapsed() >= JSON_EVERY {
                        last_line = Instant::now();
                        eprintln!("{}", serde_json::json!({ "progress": t }));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                let how = match t.shards {
                    0 => String::new(),
                    1 => format!(
                        ", in memory ({})",
                        diskvec_index::diskann::mib(t.estimated_peak)
                    ),
                    n => format!(
                        ", {n} shards within {}",
                        diskvec_index::diskann::mib(t.memory_budget)
                    ),
                };
                bar.set_message(format!(
                    "{} of {} points{how}: {}",
                    t.kind, t.points, t.phase
                ));
                bar.set_length(t.total);
                bar.set_position(t.done.min(t.total));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        bar.finish_and_clear();
        work.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
