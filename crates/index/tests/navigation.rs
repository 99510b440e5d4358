//! Searches that walk the graph in DRAM (the navigation file) and read only to re-rank.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{clustered, exact_rows, recall};
use diskvec_index::diskann::{
    build, BuildParams, DiskIndex, NavOff, OpenOptions, SearchParams, WalkCodes, MIN_CODE_RECALL,
};
use diskvec_index::NoProgress;
use diskvec_vector::{Metric, Rows};

const DIM: usize = 48;
const N: usize = 3000;

fn build_index(dir: &Path, metric: Metric) -> Vec<f32> {
    let data = clustered(N, DIM, 5);
    let ids: Vec<i64> = (0..N as i64).collect();
    let params = BuildParams {
        metric,
        max_degree: 24,
        build_list: 60,
        pq_bytes: Some(12),
        ..Default::default()
    };
    // One build thread: a parallel build's graph varies with thread timing. (The searches
    // below still overlap reads, so their counts can move a little from run to run; the
    // graph they walk does not.)
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| build(&data, DIM, &ids, &params, dir, &NoProgress))
        .unwrap();
    data
}

/// Exact (id, distance) lists, closest first.
fn truth(data: &[f32], queries: &[f32], metric: Metric, k: usize) -> Vec<Vec<(i64, f32)>> {
    exact_rows(data, queries, DIM, metric, k)
        .into_iter()
        .map(|r| r.into_iter().map(|(i, d)| (i as i64, d)).collect())
        .collect()
}

fn open(dir: &Path, navigation: bool) -> DiskIndex {
    DiskIndex::open(
        dir,
        &OpenOptions {
            cache_nodes: Some(0),
            navigation,
            ..Default::default()
        },
    )
    .unwrap()
}

fn params(k: usize, search_list: usize, rerank_sigmas: f32) -> SearchParams {
    SearchParams {
        k,
        search_list,
        rerank_sigmas,
        ..Default::default()
    }
}

#[test]
fn walking_in_dram_keeps_recall_with_far_fewer_reads_on_every_metric() {
    for metric in [Metric::Cosine, Metric::L2, Metric::InnerProduct] {
        let dir = tempfile::tempdir().unwrap();
        let data = build_index(dir.path(), metric);
        let queries = clustered(100, DIM, 77);
        let gt = truth(&data, &queries, metric, 50);
        let gt_ids: Vec<Vec<i64>> = gt.iter().map(|l| l.iter().map(|e| e.0).collect()).collect();
        let run = |idx: &DiskIndex| {
            let (res, _) = idx
                .search_batch(Rows::new(&queries, DIM), &params(50, 120, 1.5), 2)
                .unwrap();
            let rec = res
                .iter()
                .zip(&gt_ids)
                .map(|(r, t)| recall(&r.ids, t, 50))
                .sum::<f64>()
                / res.len() as f64;
            let reads = res.iter().map(|r| r.reads as f64).sum::<f64>() / res.len() as f64;
            (rec, reads)
        };
        let graph = open(dir.path(), false);
        assert!(!graph.navigates_in_dram());
        let nav = open(dir.path(), true);
        assert!(nav.navigates_in_dram());
        assert!(nav.dram_bytes() > graph.dram_bytes() + N * DIM / 2);
        let (recall_graph, reads_graph) = run(&graph);
        let (recall_nav, reads_nav) = run(&nav);
        eprintln!(
            "{metric}: recall {recall_graph} -> {recall_nav}, reads {reads_graph} -> {reads_nav}"
        );
        assert!(
            recall_nav >= 0.98 && recall_nav >= recall_graph,
            "{metric}: recall {recall_nav} with navigation, {recall_graph} without"
        );
        assert!(
            reads_nav < 0.85 * reads_graph,
            "{metric}: {reads_nav} reads per query with navigation, {reads_graph} without"
        );
    }
}

#[test]
fn a_navigating_index_drops_its_pq_codes_and_codebook_and_ranks_approximately_by_the_4_bit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path(), Metric::L2);
    let graph = open(dir.path(), false);
    let nav = open(dir.path(), true);
    let navigation = nav.navigation().expect("navigation loaded");
    assert_eq!(navigation.walk, WalkCodes::Sq4);
    // Everything the graph search holds, less the PQ codes (12 bytes a node) and the
    // codebook (256 centroids of DIM floats, their norms in each of 12 subspaces, 13 subspace
    // offsets), plus the navigation data.
    let codebook = 4 * 256 * (DIM + 12) + std::mem::size_of::<usize>() * 13;
    assert_eq!(
        nav.dram_bytes(),
        graph.dram_bytes() - N * 12 - codebook + navigation.dram_bytes()
    );
    let queries = clustered(20, DIM, 91);
    let gt = truth(&data, &queries, Metric::L2, 10);
    let ids: Vec<i64> = (0..N as i64).collect();
    for index in [&graph, &nav] {
        let mut found = 0;
        for (q, t) in queries.chunks_exact(DIM).zip(&gt) {
            let approx = index.approximate_distances(q, &ids).unwrap();
            assert_eq!(approx.len(), N);
            let mut order: Vec<usize> = (0..N).collect();
            order.sort_by(|&a, &b| approx[a].total_cmp(&approx[b]));
            let best: Vec<i64> = order[..50].iter().map(|&i| ids[i]).collect();
            found += t.iter().filter(|e| best.contains(&e.0)).count();
        }
        let share = found as f64 / (10 * gt.len()) as f64;
        assert!(
            share >= 0.95,
            "navigating {}: {share} of the true 10 among the best 50 approximate",
            index.navigates_in_dram()
        );
        let err = index
            .approximate_distances(&queries[..DIM], &[N as i64])
            .expect_err("an id the index does not hold");
        assert!(err.to_string().contains("not in this index"), "{err}");
    }
}

#[test]
fn infinite_sigmas_read_every_candidate_and_return_exact_distances() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path(), Metric::L2);
    let queries = clustered(20, DIM, 78);
    let gt = truth(&data, &queries, Metric::L2, 10);
    let idx = open(dir.path(), true);
    let (res, _) = idx
        .search_batch(Rows::new(&queries, DIM), &params(10, 40, f32::INFINITY), 1)
        .unwrap();
    for (r, q) in res.iter().zip(queries.chunks_exact(DIM)) {
        // Every accepted candidate of the list is read (sector mates may come free).
        assert!(r.reads + r.free_expansions + r.cache_hits >= 40, "{r:?}");
        for (&id, &d) in r.ids.iter().zip(&r.distances) {
            let exact = Metric::L2.distance(q, &data[id as usize * DIM..(id as usize + 1) * DIM]);
            assert!((d - exact).abs() <= 1e-3 * exact.max(1.0), "{d} vs {exact}");
        }
    }
    let hits: usize = res
        .iter()
        .zip(&gt)
        .map(|(r, t)| {
            r.ids
                .iter()
                .filter(|i| t.iter().any(|e| e.0 == **i))
                .count()
        })
        .sum();
    assert!(
        hits as f64 / 200.0 >= 0.95,
        "recall {}",
        hits as f64 / 200.0
    );
}

#[test]
fn fewer_sigmas_read_less_and_zero_still_answers_from_the_codes() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path(), Metric::Cosine);
    let queries = clustered(50, DIM, 79);
    let gt = truth(&data, &queries, Metric::Cosine, 10);
    let idx = open(dir.path(), true);
    let run = |sigmas: f32| {
        let p = SearchParams {
            exact_distances: false,
            ..params(10, 60, sigmas)
        };
        let (res, _) = idx.search_batch(Rows::new(&queries, DIM), &p, 2).unwrap();
        let mut hits = 0;
        for (r, t) in res.iter().zip(&gt) {
            assert_eq!(r.ids.len(), 10);
            hits += r
                .ids
                .iter()
                .filter(|i| t.iter().any(|e| e.0 == **i))
                .count();
        }
        let reads = res
            .iter()
            .map(|r| (r.reads + r.cache_hits) as f64)
            .sum::<f64>();
        (hits as f64 / 500.0, reads / 50.0)
    };
    let (recall_zero, reads_zero) = run(0.0);
    let (recall_default, reads_default) = run(1.5);
    let (recall_all, reads_all) = run(f32::INFINITY);
    assert!(
        reads_zero < reads_default && reads_default < reads_all,
        "reads {reads_zero} / {reads_default} / {reads_all}"
    );
    assert!(
        recall_zero >= 0.6,
        "recall {recall_zero} from the codes alone"
    );
    assert!(
        recall_default >= recall_all - 0.02,
        "recall {recall_default} vs {recall_all} reading every candidate"
    );
}

#[test]
fn estimated_distances_return_the_same_ids_with_fewer_reads_and_exact_ones_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let data = build_index(dir.path(), Metric::L2);
    let queries = clustered(40, DIM, 82);
    let idx = open(dir.path(), true);
    let exact = params(30, 100, 1.5);
    let estimated = SearchParams {
        exact_distances: false,
        ..exact
    };
    let (a, _) = idx
        .search_batch(Rows::new(&queries, DIM), &exact, 2)
        .unwrap();
    let (b, _) = idx
        .search_batch(Rows::new(&queries, DIM), &estimated, 2)
        .unwrap();
    let (mut reads_exact, mut reads_estimated, mut same) = (0, 0, 0);
    for ((x, y), q) in a.iter().zip(&b).zip(queries.chunks_exact(DIM)) {
        reads_exact += x.reads;
        reads_estimated += y.reads;
        let mut xs = x.ids.clone();
        let mut ys = y.ids.clone();
        xs.sort_unstable();
        ys.sort_unstable();
        same += (xs == ys) as usize;
        for (&id, &d) in x.ids.iter().zip(&x.distances) {
            let truth = Metric::L2.distance(q, &data[id as usize * DIM..(id as usize + 1) * DIM]);
            assert!((d - truth).abs() <= 1e-3 * truth.max(1.0), "{d} vs {truth}");
        }
    }
    assert!(
        reads_estimated < reads_exact,
        "{reads_estimated} vs {reads_exact}"
    );
    // Surely-in candidates are the same either way; only a band member's exact distance
    // can rank it differently against a neighbour's estimate.
    assert!(same >= 30, "{same} of 40 queries returned the same ids");
}

#[test]
fn a_filter_keeps_rejected_nodes_out_of_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    build_index(dir.path(), Metric::L2);
    let queries = clustered(10, DIM, 80);
    let idx = open(dir.path(), true);
    for q in queries.chunks_exact(DIM) {
        let r = idx
            .search_where(q, &params(10, 80, 1.5), Some(Arc::new(|id| id % 3 == 0)))
            .unwrap();
        assert_eq!(r.ids.len(), 10, "{r:?}");
        assert!(r.ids.iter().all(|id| id % 3 == 0), "{:?}", r.ids);
        assert!(r.distances.windows(2).all(|w| w[0] <= w[1]));
    }
}

#[test]
fn bad_sigmas_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    build_index(dir.path(), Metric::L2);
    let idx = open(dir.path(), true);
    let q = vec![0.5f32; DIM];
    for bad in [-1.0, f32::NAN] {
        let err = idx
            .search(&q, &params(10, 40, bad))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rerank sigmas"), "{err}");
    }
}

fn nav_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nav."))
        .collect();
    names.sort();
    names
}

#[test]
fn an_index_without_its_navigation_file_or_with_a_damaged_one_searches_the_graph_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    build_index(dir.path(), Metric::L2);
    let first = nav_files(dir.path());
    assert_eq!(first.len(), 1, "{first:?}");
    // A rebuild replaces the generation, navigation file included.
    build_index(dir.path(), Metric::L2);
    let second = nav_files(dir.path());
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(first, second);
    let path = dir.path().join(&second[0]);

    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    // Derived data: the index still opens, searches the graph, and says why.
    let damaged = open(dir.path(), true);
    assert!(!damaged.navigates_in_dram());
    let problem = damaged
        .navigation_problem()
        .expect("the damage is reported");
    assert!(
        problem.contains("nav.") && problem.contains("checksum"),
        "{problem}"
    );
    assert_eq!(
        damaged
            .search(&[0.1f32; DIM], &params(10, 40, 1.5))
            .unwrap()
            .ids
            .len(),
        10
    );
    let report = diskvec_index::diskann::verify(dir.path(), &NoProgress).unwrap();
    assert!(
        report
            .damage
            .iter()
            .any(|d| d.file == path && d.problem.contains("checksum")),
        "{:?}",
        report.damage
    );
    assert!(open(dir.path(), false).navigation_problem().is_none());

    // An index built before the file existed: searched the old way.
    std::fs::remove_file(&path).unwrap();
    let idx = open(dir.path(), true);
    assert!(!idx.navigates_in_dram());
    assert!(idx
        .navigation_problem()
        .unwrap()
        .contains("no navigation file"));
    let r = idx.search(&[0.1f32; DIM], &params(10, 40, 1.5)).unwrap();
    assert_eq!(r.ids.len(), 10);
    assert!(r.reads > 0);
}

/// Dimensions holding several separate clusters of values (as in the database's tests):
/// 16 evenly spaced levels cannot tell neighbours apart there.
fn multimodal(n: usize, dim: usize) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    (0..n as u64)
        .flat_map(|i| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(i);
            let centre = (i % 7) as f32;
            (0..dim)
                .map(move |d| centre * ((d % 3) as f32) + rng.random_range(-1.0..1.0))
                .collect::<Vec<f32>>()
        })
        .collect()
}

#[test]
fn data_the_codes_cannot_resolve_gets_no_navigation_and_is_answered_by_the_graph() {
    let dim = 16;
    let n = 450;
    let data = multimodal(n, dim);
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<i64> = (0..n as i64).collect();
    let params = BuildParams {
        metric: Metric::Cosine,
        max_degree: 24,
        build_list: 50,
        ..Default::default()
    };
    let report = build(&data, dim, &ids, &params, dir.path(), &NoProgress).unwrap();
    let off = report.navigation_off.expect("navigation left off");
    assert_eq!(off.why, NavOff::WeakCodes, "{off}");
    assert!(off.code_recall < MIN_CODE_RECALL);
    let graph = open(dir.path(), false);
    let nav = open(dir.path(), true);
    assert!(!nav.navigates_in_dram());
    assert_eq!(nav.navigation_stepped_aside(), Some(&off));
    assert_eq!(nav.navigation_problem(), None, "left off is not a problem");
    assert_eq!(nav.dram_bytes(), graph.dram_bytes(), "nothing more in DRAM");
    for q in (0..n).step_by(37) {
        let query = &data[q * dim..(q + 1) * dim];
        let p = SearchParams {
            k: 5,
            search_list: 200,
            ..Default::default()
        };
        let with = nav.search(query, &p).unwrap();
        let without = graph.search(query, &p).unwrap();
        assert_eq!(with.ids[0], q as i64, "query {q}: {with:?}");
        assert_eq!(with.ids, without.ids, "query {q}");
    }
}

/// Built in shards with nodes in input order, the 4-bit codes go into the navigation file
/// as they are encoded; leaving navigation off must replace that file whole, with nothing
/// of the abandoned codes written into it after.
#[test]
fn navigation_left_off_after_codes_were_streamed_leaves_a_whole_file() {
    let (n, dim) = (20_000, 128);
    let data = multimodal(n, dim);
    let ids: Vec<i64> = (0..n as i64).collect();
    let params = BuildParams {
        metric: Metric::L2,
        max_degree: 16,
        build_list: 32,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let report = common::build_in_order(&data, dim, &ids, &params, dir.path(), Some(12_000), true);
    let report = report.unwrap();
    assert!(report.shards > 1);
    let off = report.navigation_off.expect("navigation left off");
    let nav = open(dir.path(), true);
    assert_eq!(nav.navigation_stepped_aside(), Some(&off));
    assert_eq!(nav.navigation_problem(), None);
    let checked = diskvec_index::diskann::verify(dir.path(), &NoProgress).unwrap();
    assert!(checked.damage.is_empty(), "{:?}", checked.damage);
}

#[test]
fn low_dimensional_data_whose_lists_outweigh_its_vectors_gets_no_navigation() {
    let (n, dim) = (2000, 6);
    let data = clustered(n, dim, 17);
    let ids: Vec<i64> = (0..n as i64).collect();
    let params = BuildParams {
        metric: Metric::L2,
        max_degree: 32,
        build_list: 64,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let report = build(&data, dim, &ids, &params, dir.path(), &NoProgress).unwrap();
    let off = report.navigation_off.expect("navigation left off");
    assert!(off.nav_bytes > off.raw_bytes, "{off:?}");
    if off.code_recall >= MIN_CODE_RECALL {
        assert_eq!(off.why, NavOff::LargerThanVectors, "{off}");
    }
    let nav = open(dir.path(), true);
    assert!(!nav.navigates_in_dram());
    assert_eq!(nav.navigation_stepped_aside(), Some(&off));
    // 48 dimensions of the same kind of data pay: navigation is written and loaded.
    let dir = tempfile::tempdir().unwrap();
    build_index(dir.path(), Metric::L2);
    assert!(open(dir.path(), true).navigates_in_dram());
}

#[test]
fn a_batch_answers_each_query_as_a_single_search_does() {
    let dir = tempfile::tempdir().unwrap();
    build_index(dir.path(), Metric::L2);
    let queries = clustered(50, DIM, 81);
    let idx = open(dir.path(), true);
    let p = params(10, 100, 1.5);
    let (batch, _) = idx.search_batch(Rows::new(&queries, DIM), &p, 2).unwrap();
    for (i, q) in queries.chunks_exact(DIM).enumerate() {
        let one = idx.search(q, &p).unwrap();
        assert_eq!(one.ids, batch[i].ids, "query {i}");
        assert_eq!(one.distances, batch[i].distances, "query {i}");
    }
}
