/// Where long work reports how far it is. The CLI draws bars; libraries pass `NoProgress`.
pub trait Progress: Sync {
    /// A new phase of `total` steps begins.
    fn phase(&self, name: &str, total: u64);
    /// `steps` more steps of the current phase are done.
    fn advance(&self, steps: u64);
}

pub struct NoProgress;

impl Progress for NoProgress {
    fn phase(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
}
