use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Mutex;

/// Draws one bar per phase on stderr when it is a terminal (indicatif hides it otherwise).
pub struct Bars {
    current: Mutex<Option<ProgressBar>>,
}

impl Bars {
    pub fn new() -> Self {
        Self {
            current: Mutex::new(None),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = self.current.lock().unwrap().take() {
            bar.finish();
        }
    }
}

impl diskvec_index::Progress for Bars {
    fn phase(&self, name: &str, total: u64) {
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
        if let Some(bar) = self.current.lock().unwrap().as_ref() {
            bar.inc(steps);
        }
    }
}

/// `optimize(wait)` with a bar that follows the collection's background build (seal,
/// vacuum or merge, phase by phase), polled from `info()`; hidden when stderr is not a
/// terminal.
pub fn optimize(col: &diskvec_db::Collection) -> diskvec_db::Result<()> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg:>60} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_message("optimizing");
    std::thread::scope(|s| {
        let work = s.spawn(|| col.optimize(true));
        while !work.is_finished() {
            if let Some(t) = col.info().task {
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
