//! `GET /collections/{name}/optimizations`: the collection's background builds in Qdrant's
//! shapes. diskvec's seals, merges and vacuums are Qdrant's optimizations; frozen growing
//! segments waiting for their seal are the queue; every other segment is idle.

use std::time::Instant;

use axum::extract::{Path, Query, State};
use diskvec_db::{SegmentInfo, TaskInfo};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::envelope::{ok, ApiError, ApiResult};
use crate::{blocking, AppState};

#[derive(Deserialize)]
pub struct Params {
    /// Comma-separated: queued, completed, idle_segments.
    with: Option<String>,
    completed_limit: Option<usize>,
}

/// A segment id as the UUID Qdrant names segments by.
fn segment_uuid(id: u64) -> String {
    format!("00000000-0000-4000-8000-{id:012x}")
}

fn segment(s: &SegmentInfo) -> Value {
    json!({"uuid": segment_uuid(s.id), "points_count": s.points - s.deleted})
}

/// Qdrant's optimizer names for diskvec's builds.
fn optimizer(kind: &str) -> &'static str {
    match kind {
        "seal" => "indexing",
        "vacuum" => "vacuum",
        _ => "merge",
    }
}

fn optimization(t: &TaskInfo, n: usize, done: bool) -> Value {
    let mut progress = json!({"name": t.kind, "children": []});
    if done {
        progress["duration_sec"] = json!(t.seconds);
    } else if !t.phase.is_empty() {
        let mut phase = json!({"name": t.phase, "done": t.done, "children": []});
        if t.total > 0 {
            phase["total"] = json!(t.total);
        }
        progress["children"] = json!([phase]);
    }
    json!({
        // diskvec numbers its builds by nothing else: the uuid tells them apart in one answer.
        "uuid": format!("00000000-0000-4000-9000-{n:012x}"),
        "optimizer": optimizer(t.kind),
        "status": if done { "done" } else { "optimizing" },
        "segments": [],
        "progress": progress,
    })
}

pub async fn list(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult {
    let t = Instant::now();
    let mut wanted = Vec::new();
    for item in params.with.as_deref().unwrap_or("").split(',') {
        match item.trim() {
            "" => {}
            w @ ("queued" | "completed" | "idle_segments") => wanted.push(w),
            other => {
                return Err(ApiError::validation_in(
                    "query parameters",
                    format!(
                    "with: unknown field {other:?}; expected queued, completed or idle_segments"
                ),
                ))
            }
        }
    }
    let col = s.db.collection(&name)?;
    let info = blocking(move || Ok(col.info())).await?;
    let (queued, idle): (Vec<&SegmentInfo>, Vec<&SegmentInfo>) =
        info.segments.iter().partition(|s| s.kind == "frozen");
    let mut out = json!({
        "summary": {
            "queued_optimizations": queued.len(),
            "queued_segments": queued.len(),
            "queued_points": queued.iter().map(|s| s.points - s.deleted).sum::<usize>(),
            "idle_segments": idle.len(),
        },
        "running": info.tasks.iter().enumerate().map(|(n, t)| optimization(t, n, false)).collect::<Vec<_>>(),
    });
    if wanted.contains(&"queued") {
        out["queued"] = queued
            .iter()
            .map(|s| json!({"optimizer": "indexing", "segments": [segment(s)]}))
            .collect();
    }
    if wanted.contains(&"completed") {
        let limit = params.completed_limit.unwrap_or(16);
        out["completed"] = info
            .last_task
            .iter()
            .take(limit)
            .map(|t| optimization(t, info.tasks.len(), true))
            .collect();
    }
    if wanted.contains(&"idle_segments") {
        out["idle_segments"] = idle.iter().map(|s| segment(s)).collect();
    }
    Ok(ok(out, t))
}
