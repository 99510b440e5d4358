use std::collections::VecDeque;

use diskvec_graph::Graph;

/// The order in which nodes are laid out on disk (position -> original id).
///
/// Breadth-first from the medoid, so the nodes every search passes through come first
/// (the node cache is then simply a prefix of the file), and each sector is filled with
/// graph neighbours of its first node, so one read often brings two nodes a search wants.
pub fn sector_order(graph: &Graph, per_sector: usize) -> Vec<u32> {
    sector_order_of(graph.len(), graph.medoid, per_sector, |u| {
        graph.neighbors(u)
    })
}

/// `sector_order` over any adjacency: `n` nodes, `neighbors(u)` the list of `u`.
pub fn sector_order_of<'a>(
    n: usize,
    medoid: u32,
    per_sector: usize,
    neighbors: impl Fn(u32) -> &'a [u32],
) -> Vec<u32> {
    let mut placed = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut queue = VecDeque::new();
    let mut next_unreached = 0usize;
    let place = |u: u32, placed: &mut [bool], order: &mut Vec<u32>, queue: &mut VecDeque<u32>| {
        placed[u as usize] = true;
        order.push(u);
        queue.extend(neighbors(u).iter().copied());
    };
    queue.push_back(medoid);
    while order.len() < n {
        let u = match queue.pop_front() {
            Some(u) => u,
            None => {
                // Nodes no path reaches still need a place.
                while placed[next_unreached] {
                    next_unreached += 1;
                }
                next_unreached as u32
            }
        };
        if placed[u as usize] {
            continue;
        }
        place(u, &mut placed, &mut order, &mut queue);
        for &v in neighbors(u) {
            if order.len() % per_sector == 0 {
                break;
            }
            if !placed[v as usize] {
                place(v, &mut placed, &mut order, &mut queue);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_permutation_that_packs_neighbours() {
        // A path 0-1-2-3-4-5 plus an isolated node 6; the medoid is 2.
        let g = Graph::from_lists(
            &[
                vec![1],
                vec![0, 2],
                vec![1, 3],
                vec![2, 4],
                vec![3, 5],
                vec![4],
                vec![],
            ],
            2,
        );
        let order = sector_order(&g, 2);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..7).collect::<Vec<_>>());
        assert_eq!(order[0], 2, "the medoid comes first");
        // Each sector starts with a node and is filled with its unplaced neighbours;
        // node 0's only neighbour is taken by then, so its sector-mate is the next in line.
        assert_eq!(order, vec![2, 1, 3, 4, 0, 5, 6]);
        assert_eq!(sector_order(&g, 1)[..3], [2, 1, 3]);
    }
}
