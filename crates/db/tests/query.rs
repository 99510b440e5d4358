//! The universal query against brute force: prefetches re-scored, fused (RRF, DBSF) and
//! ordered, recommendations, discovery and context by their scoring rules, hybrid dense +
//! sparse search, and the requests that make no sense refused with Qdrant's words.

mod common;

use std::collections::HashMap;

use common::clustered_vector;
use diskvec_db::query::{Fusion, OrderValue, Query, QueryRequest, RecommendStrategy, VectorInput};
use diskvec_db::{
    Collection, CollectionConfig, Database, DenseSpace, Filter, NamedVectors, PointId, PointRecord,
    SearchRequest, SparseSpace, SparseVector, Vector,
};
use diskvec_vector::Metric;
use serde_json::json;

const N: u64 = 300;

fn collection(db: &Database) -> std::sync::Arc<Collection> {
    let mut c = CollectionConfig::with_spaces(
        vec![DenseSpace::new("", 6, Metric::Cosine)],
        vec![SparseSpace::new("words", Default::default())],
    );
    c.seal_threshold = 120;
    c.idle_merge_ms = 0;
    let col = db.create_collection("q", c).unwrap();
    let points = (0..N)
        .map(|i| {
            let mut vectors =
                NamedVectors::from([(String::new(), Vector::Dense(clustered_vector(i, 6, 4)))]);
            vectors.insert(
                "words".into(),
                Vector::Sparse(SparseVector {
                    indices: vec![(i % 9) as u32, 20 + (i % 4) as u32],
                    values: vec![1.0 + (i % 3) as f32, 0.5],
                }),
            );
            let payload = json!({"price": (i * 37 % 101) as f64 / 10.0, "even": i % 2 == 0});
            PointRecord {
                id: PointId::Num(i),
                vectors,
                payload: payload.as_object().unwrap().clone(),
            }
        })
        .collect();
    col.upsert(points).unwrap();
    col.optimize(true).unwrap();
    col
}

fn ids(hits: &[diskvec_db::Hit]) -> Vec<u64> {
    hits.iter()
        .map(|h| match h.id {
            PointId::Num(n) => n,
            PointId::Uuid(_) => panic!("uuid"),
        })
        .collect()
}

fn nearest(v: Vec<f32>, limit: usize) -> QueryRequest {
    let mut q = QueryRequest::new(Some(Query::Nearest(VectorInput::Dense(v))), limit);
    q.search_list = Some(300);
    q
}

/// Cosine similarities of every point to `q`, by id.
fn cosines(q: &[f32]) -> HashMap<u64, f32> {
    let unit = |v: &[f32]| {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect::<Vec<f32>>()
    };
    let q = unit(q);
    (0..N)
        .map(|i| {
            let v = unit(&clustered_vector(i, 6, 4));
            (i, v.iter().zip(&q).map(|(a, b)| a * b).sum())
        })
        .collect()
}

#[test]
fn prefetches_are_rescored_fused_and_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let (a, b) = (clustered_vector(1_001, 6, 4), clustered_vector(1_002, 6, 4));
    // A nearest query over a prefetch of everything answers as the nearest query alone.
    let root = col.query(&nearest(a.clone(), 10), false, false).unwrap();
    let mut rescored = nearest(a.clone(), 10);
    rescored.prefetch = vec![QueryRequest::new(None, 1_000)];
    let rescored = col.query(&rescored, false, false).unwrap();
    assert_eq!(ids(&root), ids(&rescored));
    let exact = cosines(&a);
    for h in &rescored {
        let PointId::Num(id) = h.id else { panic!() };
        assert!(
            (h.score - exact[&id]).abs() < 1e-4,
            "{} vs {}",
            h.score,
            exact[&id]
        );
    }
    // RRF of two searches, as Qdrant defines it (k = 2).
    let (ra, rb) = (
        col.query(&nearest(a.clone(), 10), false, false).unwrap(),
        col.query(&nearest(b.clone(), 10), false, false).unwrap(),
    );
    let mut want: HashMap<u64, f32> = HashMap::new();
    for list in [&ra, &rb] {
        for (rank, id) in ids(list).into_iter().enumerate() {
            *want.entry(id).or_default() += 1.0 / (rank as f32 + 2.0);
        }
    }
    let mut fused = QueryRequest::new(
        Some(Query::Fusion(Fusion::Rrf {
            k: 2,
            weights: None,
        })),
        10,
    );
    fused.prefetch = vec![nearest(a.clone(), 10), nearest(b.clone(), 10)];
    let got = col.query(&fused, true, false).unwrap();
    assert_eq!(got.len(), 10);
    for h in &got {
        let PointId::Num(id) = h.id else { panic!() };
        assert!((h.score - want[&id]).abs() < 1e-6, "point {id}");
        assert!(h.payload.is_some());
    }
    assert!(got.windows(2).all(|w| w[0].score >= w[1].score));
    fused.query = Some(Query::Fusion(Fusion::Dbsf));
    assert_eq!(col.query(&fused, false, false).unwrap().len(), 10);
    // Ordered by a payload value, ascending or descending, within a filter.
    let even =
        Filter::from_json(&json!({"must": [{"key": "even", "match": {"value": true}}]})).unwrap();
    for descending in [false, true] {
        let mut by_price = QueryRequest::new(
            Some(Query::OrderBy {
                key: "price".into(),
                descending,
                start_from: Some(OrderValue::Number(5.0)),
            }),
            20,
        );
        by_price.filter = Some(even.clone());
        let got = col.query(&by_price, true, false).unwrap();
        let prices: Vec<f64> = got
            .iter()
            .map(|h| h.payload.as_ref().unwrap()["price"].as_f64().unwrap())
            .collect();
        let mut sorted = prices.clone();
        sorted.sort_by(|x, y| {
            if descending {
                y.total_cmp(x)
            } else {
                x.total_cmp(y)
            }
        });
        assert_eq!(prices, sorted);
        assert!(ids(&got).iter().all(|i| i % 2 == 0));
    }
    // A sample is every match, in an order that changes.
    let sample = QueryRequest::new(Some(Query::Sample), 50);
    let orders: Vec<Vec<u64>> = (0..4)
        .map(|_| ids(&col.query(&sample, false, false).unwrap()))
        .collect();
    assert!(orders.iter().any(|o| o != &orders[0]));
    let mut all = ids(&col
        .query(&QueryRequest::new(Some(Query::Sample), 1_000), false, false)
        .unwrap());
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>());
}

#[test]
fn examples_score_by_their_rules_and_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let point = |i| VectorInput::Point(PointId::Num(i));
    // By point id: the point itself is not among the results.
    let by_id = col
        .query(
            &QueryRequest::new(Some(Query::Nearest(point(7))), 5),
            false,
            false,
        )
        .unwrap();
    assert!(!ids(&by_id).contains(&7));
    assert_eq!(ids(&by_id).len(), 5);
    // Best score: brute force over every other point.
    let sims: Vec<HashMap<u64, f32>> = [1u64, 2, 3]
        .iter()
        .map(|&i| cosines(&clustered_vector(i, 6, 4)))
        .collect();
    let sigmoid = |x: f32| 0.5 * (x / (1.0 + x.abs()) + 1.0);
    let mut want: Vec<(f32, u64)> = (0..N)
        .filter(|i| ![1, 2, 3].contains(i))
        .map(|i| {
            let p = sims[0][&i].max(sims[1][&i]);
            let n = sims[2][&i];
            (if p > n { sigmoid(p) } else { -sigmoid(n) }, i)
        })
        .collect();
    want.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let reco = Query::Recommend {
        positive: vec![point(1), point(2)],
        negative: vec![point(3)],
        strategy: RecommendStrategy::BestScore,
    };
    let got = col
        .query(&QueryRequest::new(Some(reco), 10), false, false)
        .unwrap();
    assert_eq!(
        ids(&got),
        want.iter().take(10).map(|w| w.1).collect::<Vec<_>>()
    );
    // Average vector: a nearest search for 2 avg(positive) - avg(negative), examples out.
    let avg = Query::Recommend {
        positive: vec![point(1), point(2)],
        negative: vec![point(3)],
        strategy: RecommendStrategy::AverageVector,
    };
    let got = ids(&col
        .query(&QueryRequest::new(Some(avg), 10), false, false)
        .unwrap());
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|i| ![1, 2, 3].contains(i)));
    // Context: no point can beat zero, the best of them reach it.
    let context = Query::Context(vec![(point(1), point(3))]);
    let got = col
        .query(&QueryRequest::new(Some(context), 5), false, false)
        .unwrap();
    assert!(got.iter().all(|h| h.score <= 0.0) && got[0].score > -1e-6);
    // Discovery: the points on the positive side of the pair rank above the others.
    let discover = Query::Discover {
        target: point(5),
        context: vec![(point(1), point(3))],
    };
    let got = col
        .query(&QueryRequest::new(Some(discover), 10), false, false)
        .unwrap();
    assert!(got.iter().all(|h| h.score >= 1.0), "{got:?}");
}

#[test]
fn hybrid_dense_and_sparse_prefetches_fuse() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let sparse = SparseVector {
        indices: vec![4, 21],
        values: vec![1.0, 1.0],
    };
    let mut words = QueryRequest::new(
        Some(Query::Nearest(VectorInput::Sparse(sparse.clone()))),
        20,
    );
    words.using = "words".into();
    let mut hybrid = QueryRequest::new(
        Some(Query::Fusion(Fusion::Rrf {
            k: 2,
            weights: None,
        })),
        10,
    );
    hybrid.prefetch = vec![nearest(clustered_vector(1_003, 6, 4), 20), words];
    let fused = col.query(&hybrid, false, false).unwrap();
    // The same fusion computed here from the two lists searched alone.
    let dense_top = ids(&col
        .query(&nearest(clustered_vector(1_003, 6, 4), 20), false, false)
        .unwrap());
    let mut req = SearchRequest::new(20);
    req.using = "words".into();
    let sparse_top = ids(&col.search_sparse(sparse, &req).unwrap());
    let mut want: HashMap<u64, f32> = HashMap::new();
    for list in [&dense_top, &sparse_top] {
        for (rank, id) in list.iter().enumerate() {
            *want.entry(*id).or_default() += 1.0 / (rank as f32 + 2.0);
        }
    }
    let mut want: Vec<(u64, f32)> = want.into_iter().collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    assert_eq!(fused.len(), 10);
    for (h, (id, score)) in fused.iter().zip(&want) {
        assert_eq!(h.id, PointId::Num(*id));
        assert!((h.score - score).abs() < 1e-6);
    }
}

#[test]
fn meaningless_requests_are_refused_in_qdrants_words() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let err = |q: &QueryRequest| col.query(q, false, false).unwrap_err().to_string();
    let mut no_query = QueryRequest::new(None, 10);
    no_query.prefetch = vec![QueryRequest::new(None, 10)];
    assert!(err(&no_query).contains("A query is needed to merge the prefetches"));
    let mut threshold = QueryRequest::new(None, 10);
    threshold.score_threshold = Some(1.0);
    assert!(err(&threshold).contains("A query is needed to use the score_threshold"));
    let mut ordered = QueryRequest::new(
        Some(Query::OrderBy {
            key: "price".into(),
            descending: false,
            start_from: None,
        }),
        10,
    );
    ordered.score_threshold = Some(1.0);
    assert!(err(&ordered).contains("Can't use score_threshold with an order_by query"));
    let mut unknown = nearest(vec![1.0; 6], 3);
    unknown.using = "nope".into();
    assert!(err(&unknown).contains("Not existing vector name error: nope"));
    let missing = QueryRequest::new(
        Some(Query::Nearest(VectorInput::Point(PointId::Num(12_345)))),
        3,
    );
    assert!(err(&missing).contains("12345"));
    let short = nearest(vec![1.0; 3], 3);
    assert!(err(&short).contains("expected dim: 6, got 3"));
}

/// A node's filter holds for its prefetches: a fused list ranks only the points the node
/// may return, so each prefetch fills its limit with them. A random sample keeps its
/// random order past an offset.
#[test]
fn a_filter_reaches_the_prefetches_and_samples_stay_random_past_an_offset() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let even =
        Filter::from_json(&json!({"must": [{"key": "even", "match": {"value": true}}]})).unwrap();
    let (a, b) = (clustered_vector(2_001, 6, 4), clustered_vector(2_002, 6, 4));
    let mut fused = QueryRequest::new(
        Some(Query::Fusion(Fusion::Rrf {
            k: 2,
            weights: None,
        })),
        10,
    );
    fused.prefetch = vec![nearest(a.clone(), 10), nearest(b.clone(), 10)];
    fused.filter = Some(even.clone());
    let got = col.query(&fused, false, false).unwrap();
    // The same fusion from the two lists searched with the filter.
    let filtered = |v: Vec<f32>| {
        let mut q = nearest(v, 10);
        q.filter = Some(even.clone());
        ids(&col.query(&q, false, false).unwrap())
    };
    let (la, lb) = (filtered(a), filtered(b));
    assert_eq!(la.len(), 10);
    let mut want: HashMap<u64, f32> = HashMap::new();
    for list in [&la, &lb] {
        for (rank, id) in list.iter().enumerate() {
            *want.entry(*id).or_default() += 1.0 / (rank as f32 + 2.0);
        }
    }
    for h in &got {
        let PointId::Num(id) = h.id else { panic!() };
        assert!(id % 2 == 0, "{id} is odd");
        assert!(
            (want[&id] - h.score).abs() < 1e-6,
            "{id}: {} vs {}",
            want[&id],
            h.score
        );
    }
    // Sample two prefetched points, skip one: both show up over enough tries.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let mut q = QueryRequest::new(Some(Query::Sample), 1);
        q.prefetch = vec![QueryRequest::new(None, 2)];
        q.offset = 1;
        seen.extend(ids(&col.query(&q, false, false).unwrap()));
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// IDF weights counted over a corpus filter, apart from the retrieval filter (Qdrant's
/// `params.idf.corpus`), with its formula; refused on a space without the modifier.
#[test]
fn idf_is_counted_over_the_corpus_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = CollectionConfig::with_spaces(
        vec![DenseSpace::new("d", 2, Metric::InnerProduct)],
        vec![SparseSpace::new("t", diskvec_db::SparseModifier::Idf)],
    );
    let col = db.create_collection("idf", c).unwrap();
    let layout: [(&str, &[u32]); 4] = [("a", &[0, 1]), ("a", &[0]), ("b", &[0, 1, 2]), ("b", &[1])];
    let points = layout
        .iter()
        .enumerate()
        .map(|(i, (tenant, dims))| {
            let v = SparseVector {
                indices: dims.to_vec(),
                values: vec![1.0; dims.len()],
            };
            PointRecord {
                id: PointId::Num(i as u64),
                vectors: NamedVectors::from([("t".to_string(), Vector::Sparse(v))]),
                payload: json!({"tenant": tenant}).as_object().unwrap().clone(),
            }
        })
        .collect();
    col.upsert(points).unwrap();
    let idf = |n: f32, df: f32| ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
    let query = SparseVector {
        indices: vec![0, 1, 2],
        values: vec![1.0; 3],
    };
    let mut q = QueryRequest::new(Some(Query::Nearest(VectorInput::Sparse(query))), 10);
    q.using = "t".into();
    q.idf_corpus = Some(
        Filter::from_json(&json!({"must": [{"key": "tenant", "match": {"value": "a"}}]})).unwrap(),
    );
    let hits = col.query(&q, false, false).unwrap();
    let score = |id: u64| {
        hits.iter()
            .find(|h| h.id == PointId::Num(id))
            .unwrap()
            .score
    };
    // Tenant a: N = 2, df = [2, 1, 0]; every point scored with them.
    assert!((score(2) - (idf(2.0, 2.0) + idf(2.0, 1.0) + idf(2.0, 0.0))).abs() < 1e-5);
    assert!((score(3) - idf(2.0, 1.0)).abs() < 1e-5);
    q.using = "d".into();
    q.query = Some(Query::Nearest(VectorInput::Dense(vec![1.0, 0.0])));
    assert!(col.query(&q, false, false).is_err());
}

/// Maximal marginal relevance: with diversity, the second pick leaves the first one's
/// cluster; without, it is plain nearest order. Scores stay similarities to the query.
#[test]
fn mmr_trades_closeness_for_variety() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = db
        .create_collection("mmr", CollectionConfig::new(2, Metric::L2))
        .unwrap();
    // A tight cluster near (0, 0) and a lone point at (3, 0).
    let at = |id: u64, x: f32, y: f32| {
        PointRecord::new(PointId::Num(id), vec![x, y], Default::default())
    };
    col.upsert(vec![
        at(1, 0.0, 0.0),
        at(2, 0.1, 0.0),
        at(3, 0.0, 0.1),
        at(4, 3.0, 0.0),
    ])
    .unwrap();
    let query = |diversity: f32| {
        let mut q = QueryRequest::new(
            Some(Query::NearestMmr {
                vector: VectorInput::Dense(vec![0.5, 0.0]),
                diversity,
                candidates: Some(4),
            }),
            2,
        );
        q.search_list = Some(10);
        col.query(&q, false, false).unwrap()
    };
    let plain = query(0.0);
    assert_eq!(ids(&plain), vec![2, 1]);
    let varied = query(0.9);
    assert_eq!(ids(&varied), vec![2, 4]);
    // The score of point 4 is its distance to the query.
    assert!((varied[1].score - 2.5).abs() < 1e-5, "{}", varied[1].score);
}

/// `exact` compares every matching point: a sealed segment's graph search with a list as
/// short as the results may miss neighbours, the exact one never does (checked against
/// brute force over a filter, in a sealed and a growing segment).
#[test]
fn exact_searches_miss_nothing_sealed_or_growing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let dim = 24;
    let mut c = CollectionConfig::new(dim, Metric::L2);
    c.seal_threshold = 3000;
    c.idle_merge_ms = 0;
    let col = db.create_collection("x", c).unwrap();
    let vector = |i: u64| clustered_vector(i, dim, 40);
    let points = |r: std::ops::Range<u64>| -> Vec<PointRecord> {
        r.map(|i| PointRecord {
            id: PointId::Num(i),
            vectors: NamedVectors::from([(String::new(), Vector::Dense(vector(i)))]),
            payload: json!({"odd": i % 2 == 1}).as_object().unwrap().clone(),
        })
        .collect()
    };
    col.upsert(points(0..3000)).unwrap();
    col.optimize(true).unwrap();
    col.upsert(points(3000..4500)).unwrap();
    let odd =
        Filter::from_json(&json!({"must": [{"key": "odd", "match": {"value": true}}]})).unwrap();
    for q in 0..20u64 {
        let query = vector(100_000 + q * 13);
        let mut truth: Vec<(f32, u64)> = (0..4500u64)
            .filter(|i| i % 2 == 1)
            .map(|i| {
                let d: f32 = vector(i)
                    .iter()
                    .zip(&query)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum();
                (d, i)
            })
            .collect();
        truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut req = SearchRequest::new(10);
        req.search_list = Some(10);
        req.filter = Some(odd.clone());
        req.exact = true;
        let hits = col.search(&query, &req).unwrap();
        let want: Vec<u64> = truth[..10].iter().map(|t| t.1).collect();
        assert_eq!(ids(&hits), want, "query {q}");
    }
}

/// A formula re-scores the union of its prefetches: `$score[i]` is a point's score in
/// prefetch i (0 where it was not found), payload keys are numbers, conditions are 0 or 1;
/// a formula that meets no number fails naming the key, and one without prefetches is
/// refused.
#[test]
fn formulas_score_the_prefetched_points() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let q = clustered_vector(5, 6, 4);
    let sim = cosines(&q);
    let price = |i: u64| (i * 37 % 101) as f64 / 10.0;
    let formula = |f: serde_json::Value| {
        let body = json!({"formula": f, "defaults": {"missing": 1.5}});
        Query::Formula(diskvec_db::query::formula::Formula::from_json(&body).unwrap())
    };
    let mut by_price = QueryRequest::new(
        Some(Query::OrderBy {
            key: "price".into(),
            descending: true,
            start_from: None,
        }),
        20,
    );
    by_price.search_list = None;
    let mut req = QueryRequest::new(
        Some(formula(json!({"sum": [
            {"mult": ["$score", 10.0]},
            "$score[1]",
            {"neg": "price"},
            {"mult": [{"key": "even", "match": {"value": true}}, 100.0]},
            "missing",
        ]}))),
        300,
    );
    req.prefetch = vec![nearest(q.clone(), 30), by_price];
    let hits = col.query(&req, false, false).unwrap();
    let near: Vec<u64> = ids(&col.query(&nearest(q.clone(), 30), false, false).unwrap());
    let mut want: Vec<(u64, f64)> = near
        .iter()
        .copied()
        .chain((0..N).filter(|&i| !near.contains(&i)).filter(|&i| {
            // The 20 highest prices (ties broken by id) were the second prefetch.
            let rank = (0..N)
                .filter(|&j| price(j) > price(i) || (price(j) == price(i) && j < i))
                .count();
            rank < 20
        }))
        .map(|i| {
            let s = if near.contains(&i) {
                f64::from(sim[&i])
            } else {
                0.0
            };
            let even = if i % 2 == 0 { 100.0 } else { 0.0 };
            (i, 10.0 * s - price(i) + even + 1.5)
        })
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    assert_eq!(hits.len(), want.len());
    for (hit, (id, score)) in hits.iter().zip(&want) {
        assert_eq!(hit.id, PointId::Num(*id));
        assert!(
            (f64::from(hit.score) - score).abs() < 1e-3,
            "{hit:?} vs {score}"
        );
    }

    let mut unknown = QueryRequest::new(Some(formula(json!("nowhere"))), 5);
    unknown.prefetch = vec![nearest(q.clone(), 5)];
    let err = col.query(&unknown, false, false).unwrap_err().to_string();
    assert!(err.contains("nowhere") && err.contains("No value"), "{err}");
    let alone = QueryRequest::new(Some(formula(json!("price"))), 5);
    assert!(col.query(&alone, false, false).is_err());
}

/// Relevance feedback (naive): a x similarity to the target + sum over ordered pairs of
/// examples (better, worse) of (score difference)^b x c x (similarity to the better - to
/// the worse); examples given by id are left out; an empty feedback list is refused.
#[test]
fn relevance_feedback_scores_by_the_naive_formula() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    let target = clustered_vector(50, 6, 4);
    let body = json!({"query": {"relevance_feedback": {
        "target": target,
        "feedback": [{"example": 1, "score": 0.9}, {"example": 2, "score": 0.1},
                     {"example": 3, "score": 0.1}],
        "strategy": {"naive": {"a": 0.5, "b": 2.0, "c": 3.0}}}}, "limit": 10});
    let req = diskvec_db::query::json::request(&body, &db).unwrap();
    let hits = col.query(&req, false, false).unwrap();
    let (t, p1, p2, p3) = (
        cosines(&target),
        cosines(&clustered_vector(1, 6, 4)),
        cosines(&clustered_vector(2, 6, 4)),
        cosines(&clustered_vector(3, 6, 4)),
    );
    let weight = 0.8f32.powf(2.0) * 3.0;
    let mut want: Vec<(u64, f32)> = (0..N)
        .filter(|i| ![1, 2, 3].contains(i))
        .map(|i| {
            let s = 0.5 * t[&i] + weight * (p1[&i] - p2[&i]) + weight * (p1[&i] - p3[&i]);
            (i, s)
        })
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    assert_eq!(
        ids(&hits),
        want[..10].iter().map(|w| w.0).collect::<Vec<_>>()
    );
    for (h, (_, s)) in hits.iter().zip(&want) {
        assert!((h.score - s).abs() < 1e-4, "{} vs {s}", h.score);
    }
    let empty = json!({"query": {"relevance_feedback": {"target": target, "feedback": [],
        "strategy": {"naive": {"a": 1.0, "b": 1.0, "c": 1.0}}}}});
    let err = diskvec_db::query::json::request(&empty, &db).unwrap_err();
    assert!(matches!(err, diskvec_db::DbError::Validation(_)), "{err}");
}

/// Examples a cluster router found on other shards (`example_vectors`) are compared by the
/// vectors given, and their points are left out of the results as examples by id are.
#[test]
fn examples_found_elsewhere_score_by_their_given_vectors_and_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let col = collection(&db);
    // Point 7's vector handed in as the vector of id 5 (as if 5 were elsewhere with it):
    // the answer is 7's neighbours, 7 first, less point 5.
    let given = clustered_vector(7, 6, 4);
    let ask = |id: u64| {
        let body = json!({"query": {"recommend": {"positive": [id]}}, "limit": 6,
                          "params": {"exact": true},
                          "example_vectors": {id.to_string(): given}});
        let req = diskvec_db::query::json::request(&body, &db).unwrap();
        ids(&col.query(&req, false, false).unwrap())
    };
    let by_vector = ids(&col.query(&nearest(given.clone(), 8), false, false).unwrap());
    assert_eq!(by_vector[0], 7);
    let but = |id: u64| -> Vec<u64> {
        by_vector
            .iter()
            .copied()
            .filter(|&i| i != id)
            .take(6)
            .collect()
    };
    assert_eq!(ask(5), but(5));
    // Given as its own vector, 7 is an example: left out.
    assert_eq!(ask(7), but(7));
    // An id it does not give is looked up here, and a point id in place of a vector refused.
    let body = json!({"query": {"nearest": 9}, "limit": 3,
                      "example_vectors": {"5": given}});
    let req = diskvec_db::query::json::request(&body, &db).unwrap();
    assert!(!ids(&col.query(&req, false, false).unwrap()).contains(&9));
    let bad = json!({"query": {"nearest": 9}, "example_vectors": {"9": 4}});
    assert!(diskvec_db::query::json::request(&bad, &db).is_err());
}
