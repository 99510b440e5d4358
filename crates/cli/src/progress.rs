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

/// A spinner for a step that reports no progress of its own (sealing); hidden, like the
/// bars, when stderr is not a terminal.
pub fn spinner(message: &str) -> ProgressBar {
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").unwrap());
    spinner.set_message(message.to_string());
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    spinner
}
