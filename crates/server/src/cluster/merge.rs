//! Answers of every shard made into the collection's answer: scored lists merged by score,
//! scroll pages by point id, counts summed.

use std::cmp::Ordering;

use serde_json::Value;

/// Whether the lists are best-first by higher scores, read from the lists themselves (each
/// shard sorts its list as the query's metric asks) when the caller cannot tell from the
/// collection's metric; lists of one score each say nothing, and count as higher first.
fn direction(lists: &[Vec<Value>]) -> bool {
    for list in lists {
        let scores: Vec<f64> = list
            .iter()
            .filter_map(|p| p.get("score").and_then(Value::as_f64))
            .collect();
        if let (Some(first), Some(last)) = (scores.first(), scores.last()) {
            if first != last {
                return first > last;
            }
        }
    }
    true
}

/// The best `limit` after skipping `offset` of the shards' lists, each already best-first:
/// by higher scores if `higher_first` (the metric's way: similarities), by lower if not
/// (distances), as the lists show it when `None`.
pub fn merge_scored(
    lists: Vec<Vec<Value>>,
    offset: usize,
    limit: usize,
    higher_first: Option<bool>,
) -> Vec<Value> {
    let higher_first = higher_first.unwrap_or_else(|| direction(&lists));
    let score = |p: &Value| p.get("score").and_then(Value::as_f64).unwrap_or(f64::NAN);
    let mut all: Vec<(usize, usize, Value)> = lists
        .into_iter()
        .enumerate()
        .flat_map(|(shard, list)| {
            list.into_iter()
                .enumerate()
                .map(move |(rank, p)| (shard, rank, p))
        })
        .collect();
    all.sort_by(|a, b| {
        let by_score = score(&a.2).total_cmp(&score(&b.2));
        let by_score = if higher_first {
            by_score.reverse()
        } else {
            by_score
        };
        // Equal scores by point id, as one node breaks ties (each shard's list is so too).
        by_score
            .then_with(|| id_order(&a.2["id"], &b.2["id"]))
            .then(a.1.cmp(&b.1))
            .then(a.0.cmp(&b.0))
    });
    all.into_iter()
        .skip(offset)
        .take(limit)
        .map(|(_, _, p)| p)
        .collect()
}

/// Point ids in Qdrant's scroll order: numbers by value, then UUIDs (their canonical text
/// sorts as their value).
pub fn id_order(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.as_u64().unwrap_or(0).cmp(&y.as_u64().unwrap_or(0))
        }
        (Value::Number(_), _) => Ordering::Less,
        (_, Value::Number(_)) => Ordering::Greater,
        (Value::String(x), Value::String(y)) => x.to_lowercase().cmp(&y.to_lowercase()),
        _ => Ordering::Equal,
    }
}

/// One scroll page from each shard's page of up to `limit + 1` points: the first `limit`
/// by id and the id after them, where the next page starts.
pub fn merge_scroll(pages: Vec<Vec<Value>>, limit: usize) -> (Vec<Value>, Value) {
    let mut all: Vec<Value> = pages.into_iter().flatten().collect();
    all.sort_by(|a, b| id_order(&a["id"], &b["id"]));
    let next = all.get(limit).map_or(Value::Null, |p| p["id"].clone());
    all.truncate(limit);
    (all, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hits(scores: &[(u64, f64)]) -> Vec<Value> {
        scores
            .iter()
            .map(|(id, s)| json!({"id": id, "score": s}))
            .collect()
    }

    fn ids(list: &[Value]) -> Vec<u64> {
        list.iter().map(|p| p["id"].as_u64().unwrap()).collect()
    }

    #[test]
    fn scored_lists_merge_best_first_either_way() {
        let similar = vec![hits(&[(1, 0.9), (2, 0.5)]), hits(&[(3, 0.8), (4, 0.7)])];
        assert_eq!(ids(&merge_scored(similar, 1, 2, None)), [3, 4]);
        let distances = vec![hits(&[(1, 0.1), (2, 0.5)]), hits(&[(3, 0.2), (4, 0.3)])];
        assert_eq!(ids(&merge_scored(distances, 0, 3, None)), [1, 3, 4]);
        let flat = vec![hits(&[(1, 1.0)]), hits(&[(2, 1.0)])];
        assert_eq!(ids(&merge_scored(flat, 0, 5, None)), [1, 2]);
        // Ties by point id over the shards, as one node breaks them.
        let tied = vec![hits(&[(1, 0.0), (2, 0.0)]), hits(&[(0, 0.0), (4, 0.0)])];
        assert_eq!(ids(&merge_scored(tied, 0, 3, Some(true))), [0, 1, 2]);
        // One hit per shard says nothing of the direction: the metric does.
        let one_each = vec![hits(&[(1, 0.4)]), hits(&[(2, 0.1)])];
        assert_eq!(ids(&merge_scored(one_each.clone(), 0, 1, Some(false))), [2]);
        assert_eq!(ids(&merge_scored(one_each, 0, 1, Some(true))), [1]);
    }

    #[test]
    fn scroll_pages_merge_by_id_with_the_next_offset() {
        let a = vec![json!({"id": 1}), json!({"id": 4}), json!({"id": 7})];
        let b = vec![
            json!({"id": 2}),
            json!({"id": "00000000-0000-0000-0000-000000000001"}),
        ];
        let (page, next) = merge_scroll(vec![a.clone(), b.clone()], 3);
        assert_eq!(ids(&page), [1, 2, 4]);
        assert_eq!(next, json!(7));
        let (page, next) = merge_scroll(vec![a, b], 10);
        assert_eq!(page.len(), 5);
        assert_eq!(page[4]["id"], json!("00000000-0000-0000-0000-000000000001"));
        assert_eq!(next, Value::Null);
    }
}
