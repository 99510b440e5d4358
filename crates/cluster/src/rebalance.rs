//! Spreading a collection's replicas evenly over the live nodes: which replicas to move where
//! (`diskvec cluster rebalance`; Qdrant's open-source build leaves this to its paid cloud).

use std::collections::BTreeMap;

/// Moves (shard, from, to) that leave every live node holding a number of the collection's
/// replicas within one of every other's, each shard's replicas on distinct nodes. `shards[s]`
/// lists the nodes holding shard `s`; replicas on nodes not in `live` are left where they are
/// (they count for no one). Moves go from the most loaded node to the least loaded one that
/// does not hold the shard yet.
pub fn plan<N: Ord + Clone>(shards: &[Vec<N>], live: &[N]) -> Vec<(usize, N, N)> {
    let mut holding: Vec<Vec<N>> = shards.to_vec();
    let mut load: BTreeMap<N, usize> = live.iter().map(|n| (n.clone(), 0)).collect();
    for s in &holding {
        for n in s {
            if let Some(c) = load.get_mut(n) {
                *c += 1;
            }
        }
    }
    let mut moves = Vec::new();
    // Each move narrows the spread; the bound only guards against a loop.
    for _ in 0..shards.len() * live.len().max(1) {
        let Some((busiest, most)) = load
            .iter()
            .max_by_key(|(n, c)| (**c, std::cmp::Reverse(*n)))
            .map(|(n, c)| (n.clone(), *c))
        else {
            break;
        };
        let mut candidates: Vec<(usize, N)> = load
            .iter()
            .filter(|(_, c)| **c + 1 < most)
            .map(|(n, c)| (*c, n.clone()))
            .collect();
        candidates.sort();
        let found = candidates.into_iter().find_map(|(_, target)| {
            holding
                .iter()
                .position(|s| s.contains(&busiest) && !s.contains(&target))
                .map(|shard| (shard, target))
        });
        let Some((shard, target)) = found else {
            break;
        };
        holding[shard].retain(|n| *n != busiest);
        holding[shard].push(target.clone());
        *load.get_mut(&busiest).expect("a live node") -= 1;
        *load.get_mut(&target).expect("a live node") += 1;
        moves.push((shard, busiest, target));
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(shards: &[Vec<&str>], moves: &[(usize, &str, &str)], live: &[&str]) -> Vec<usize> {
        let mut holding: Vec<Vec<&str>> = shards.to_vec();
        for (s, from, to) in moves {
            assert!(holding[*s].contains(from) && !holding[*s].contains(to));
            holding[*s].retain(|n| n != from);
            holding[*s].push(to);
        }
        live.iter()
            .map(|n| holding.iter().filter(|s| s.contains(n)).count())
            .collect()
    }

    #[test]
    fn a_new_node_takes_its_share_and_replicas_stay_apart() {
        // 3 shards x 2 replicas on a, b, c; d joins empty.
        let shards = vec![vec!["a", "b"], vec!["b", "c"], vec!["c", "a"]];
        let live = ["a", "b", "c", "d"];
        let moves = plan(&shards, &live);
        let after = loads(&shards, &moves, &live);
        assert!(
            after.iter().max().unwrap() - after.iter().min().unwrap() <= 1,
            "{after:?}"
        );
        assert_eq!(after.iter().sum::<usize>(), 6);
        assert_eq!(moves.len(), 1);
        // Balanced already: nothing to do.
        assert!(plan(&shards, &["a", "b", "c"]).is_empty());
        // Everything on one node, three more live: spread out.
        let lump = vec![vec!["a"], vec!["a"], vec!["a"], vec!["a"]];
        let moves = plan(&lump, &["a", "b", "c", "d"]);
        assert_eq!(loads(&lump, &moves, &["a", "b", "c", "d"]), [1, 1, 1, 1]);
    }
}
