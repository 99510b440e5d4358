//! The background build in progress (seal, vacuum or merge), its phase and how far it is,
//! so `info()` can tell a user what a yellow collection is doing and how long is left.

use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// A running background build, as `CollectionInfo::task` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct TaskInfo {
    /// "seal", "vacuum" or "merge".
    pub kind: &'static str,
    /// Points going into the new segment.
    pub points: usize,
    /// The build's current phase ("pq training", "graph", "layout", ...), empty before the
    /// first.
    pub phase: String,
    /// Steps of the phase done, and its total (0: unknown).
    pub done: u64,
    pub total: u64,
    pub seconds: f64,
    /// Memory the build was granted (0 before it is planned), what its plan expects to use
    /// at its peak, and its shards (1: the whole build in memory).
    pub memory_budget: u64,
    pub estimated_peak: u64,
    pub shards: usize,
}

struct Running {
    kind: &'static str,
    points: usize,
    phase: String,
    done: u64,
    total: u64,
    started: Instant,
    plan: Option<diskvec_index::diskann::BuildPlan>,
}

/// Records the build's progress; the build reports through `diskvec_index::Progress`.
#[derive(Default)]
pub(crate) struct TaskProgress {
    running: Mutex<Option<Running>>,
    /// The last build that ended (finished or failed), as it stood at its end.
    last: Mutex<Option<TaskInfo>>,
}

impl TaskProgress {
    /// Marks a build as running until the returned guard drops (on error paths too).
    pub fn begin(&self, kind: &'static str, points: usize) -> TaskGuard<'_> {
        *self.lock() = Some(Running {
            kind,
            points,
            phase: String::new(),
            done: 0,
            total: 0,
            started: Instant::now(),
            plan: None,
        });
        TaskGuard(self)
    }

    /// The number of points, once known.
    pub fn set_points(&self, points: usize) {
        if let Some(r) = self.lock().as_mut() {
            r.points = points;
        }
    }

    /// How the build will run within the memory it was granted.
    pub fn set_plan(&self, plan: &diskvec_index::diskann::BuildPlan) {
        if let Some(r) = self.lock().as_mut() {
            r.plan = Some(plan.clone());
        }
    }

    pub fn current(&self) -> Option<TaskInfo> {
        self.lock().as_ref().map(|r| TaskInfo {
            kind: r.kind,
            points: r.points,
            phase: r.phase.clone(),
            done: r.done,
            total: r.total,
            seconds: r.started.elapsed().as_secs_f64(),
            memory_budget: r.plan.as_ref().map_or(0, |p| p.budget),
            estimated_peak: r.plan.as_ref().map_or(0, |p| p.estimated_peak),
            shards: r.plan.as_ref().map_or(0, |p| p.shards),
        })
    }

    /// The last build that ended, as it stood at its end.
    pub fn last(&self) -> Option<TaskInfo> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl diskvec_index::Progress for TaskProgress {
    fn phase(&self, name: &str, total: u64) {
        if let Some(r) = self.lock().as_mut() {
            r.phase = name.to_string();
            r.done = 0;
            r.total = total;
        }
    }

    fn advance(&self, steps: u64) {
        if let Some(r) = self.lock().as_mut() {
            r.done += steps;
        }
    }
}

pub(crate) struct TaskGuard<'a>(&'a TaskProgress);

impl Drop for TaskGuard<'_> {
    fn drop(&mut self) {
        let ended = self.0.current();
        *self.0.lock() = None;
        if ended.is_some() {
            *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = ended;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diskvec_index::Progress;

    #[test]
    fn a_task_reports_its_phase_and_ends_with_its_guard() {
        let p = TaskProgress::default();
        assert!(p.current().is_none());
        {
            let _guard = p.begin("merge", 0);
            p.phase("graph", 10);
            p.advance(3);
            p.advance(4);
            p.set_points(500);
            let t = p.current().unwrap();
            assert_eq!(
                (t.kind, t.points, t.phase.as_str()),
                ("merge", 500, "graph")
            );
            assert_eq!((t.done, t.total), (7, 10));
            p.phase("layout write", 2);
            assert_eq!(p.current().unwrap().done, 0);
        }
        assert!(p.current().is_none(), "the guard ends the task");
        let last = p.last().unwrap();
        assert_eq!((last.kind, last.points, last.done), ("merge", 500, 0));
        // Reports outside a task are ignored.
        p.advance(5);
        assert!(p.current().is_none());
    }
}
