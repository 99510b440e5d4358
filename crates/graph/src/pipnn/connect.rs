//! Every node reachable from the entry: a graph made of neighbourhoods only (leaf k-NN
//! lists) has no edge between clusters that no leaf shares, and a search never reaches
//! them. Each node left unreached gets one edge from the reached node a search finds
//! nearest to it (NSG's repair, Fu et al. 2019); what that node reaches is then reached.

use crate::{BestFirst, Graph, GraphVectors, Scorer};

/// Candidates of the search that finds a reached node near an unreached one.
const REPAIR_LIST: usize = 32;

struct From<'a, V> {
    vectors: &'a V,
    node: u32,
}

impl<V: GraphVectors> Scorer for From<'_, V> {
    fn distance(&self, id: u32) -> f32 {
        self.vectors.distance(self.node, id)
    }
}

/// Adds edges to `graph` (its lists stay within their room) until every node is reachable
/// from its medoid; returns the number of edges added.
pub(crate) fn connect_all<V: GraphVectors>(graph: &mut Graph, vectors: &V) -> usize {
    let n = graph.len();
    if n == 0 {
        return 0;
    }
    let entry = graph.medoid;
    let mut reached = vec![false; n];
    let mut stack = Vec::new();
    mark_reachable(graph, entry, &mut reached, &mut stack);
    let mut search = BestFirst::new(n, REPAIR_LIST);
    let mut added = 0;
    for u in 0..n as u32 {
        if reached[u as usize] {
            continue;
        }
        let scorer = From { vectors, node: u };
        search.reset(REPAIR_LIST);
        search.enter(entry, scorer.distance(entry), None);
        search.run(&*graph, &scorer, None, |_| {});
        // The nearest reached node with room; else the nearest, giving up its last
        // (farthest) edge.
        let found: Vec<u32> = search
            .found()
            .map(|(_, v)| v)
            .filter(|&v| reached[v as usize])
            .collect();
        let from = found
            .iter()
            .copied()
            .find(|&v| graph.neighbors(v).len() < graph.room())
            .unwrap_or(found.first().copied().unwrap_or(entry));
        graph.add_edge(from, u);
        added += 1;
        mark_reachable(graph, u, &mut reached, &mut stack);
    }
    added
}

fn mark_reachable(graph: &Graph, from: u32, reached: &mut [bool], stack: &mut Vec<u32>) {
    if std::mem::replace(&mut reached[from as usize], true) {
        return;
    }
    stack.push(from);
    while let Some(p) = stack.pop() {
        for &q in graph.neighbors(p) {
            if !std::mem::replace(&mut reached[q as usize], true) {
                stack.push(q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FullVectors;
    use diskvec_vector::Metric;

    #[test]
    fn unreached_islands_get_an_edge_and_everything_is_then_reachable() {
        // Two islands on a line: 0-1-2 and 10-11-12, linked within only.
        let points = [0.0f32, 1.0, 2.0, 10.0, 11.0, 12.0];
        let vectors = FullVectors::new(&points, 1, Metric::L2);
        let lists = vec![vec![1], vec![0, 2], vec![1], vec![4], vec![3, 5], vec![4]];
        let mut graph = Graph::from_lists(&lists, 0);
        assert_eq!(connect_all(&mut graph, &vectors), 1);
        // Node 2 (nearest the island, with room) links to 3.
        assert_eq!(graph.neighbors(2), &[1, 3]);
        let mut reached = vec![false; 6];
        mark_reachable(&graph, 0, &mut reached, &mut Vec::new());
        assert!(reached.iter().all(|&r| r));
        assert_eq!(connect_all(&mut graph, &vectors), 0);
        // A full list gives up its last edge.
        let mut full = Graph::from_lists(&[vec![1, 2], vec![0, 2], vec![0, 1]], 0);
        full.add_edge(0, 9);
        assert_eq!(full.neighbors(0), &[1, 9]);
    }
}
