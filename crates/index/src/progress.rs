/// Where long work reports how far it is. The CLI draws bars; libraries pass `NoProgress`.
pub trait Progress: Sync {
    /// A new phase of `total` steps begins.
    fn phase(&self, name: &str, total: u64);
    /// `steps` more steps of the current phase are done.
    fn advance(&self, steps: u64);
    /// Whether the caller no longer wants the build: it stops at its next check and
    /// returns `IndexError::Cancelled`, leaving any previous index as it was.
    fn cancelled(&self) -> bool {
        false
    }
}

pub struct NoProgress;

impl Progress for NoProgress {
    fn phase(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
}
