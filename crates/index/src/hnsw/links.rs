//! The neighbour lists of an HNSW graph: locked lists while the build inserts in
//! parallel, then one frozen layout for searching.

use std::sync::RwLock;

/// Per node, per level from 0 up to the node's own: its neighbours, each list behind its
/// own lock so parallel insertions can relink different nodes at once.
pub(crate) type BuildLinks = Vec<Vec<RwLock<Vec<u32>>>>;

/// The lists once the build is done. Level 0 of every node sits in one array with a
/// fixed stride (count, then the ids), so a search reads a node's list with no lock,
/// no copy and no pointer to chase; the upper levels, which about one node in M has,
/// sit in a second array, found through an offset per node.
pub(crate) struct FrozenLinks {
    level0_stride: usize,
    level0: Vec<u32>,
    upper_stride: usize,
    /// Where a node's level 1 starts in `upper` (its higher levels follow), or
    /// `NO_UPPER` for a node on level 0 only.
    upper_at: Vec<u32>,
    /// How many levels above 0 each node has.
    upper_levels: Vec<u8>,
    upper: Vec<u32>,
}

const NO_UPPER: u32 = u32::MAX;

impl FrozenLinks {
    pub(crate) fn freeze(lists: BuildLinks) -> Self {
        let lists: Vec<Vec<Vec<u32>>> = lists
            .into_iter()
            .map(|levels| {
                levels
                    .into_iter()
                    .map(|l| l.into_inner().unwrap_or_else(|e| e.into_inner()))
                    .collect()
            })
            .collect();
        let level0_stride = 1 + lists
            .iter()
            .filter_map(|l| l.first())
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        let upper_stride = 1 + lists
            .iter()
            .flat_map(|l| l.iter().skip(1))
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        let mut level0 = diskvec_vector::filled_with_huge_pages(0u32, lists.len() * level0_stride);
        let mut upper_at = vec![NO_UPPER; lists.len()];
        let mut upper_levels = vec![0u8; lists.len()];
        let mut upper = Vec::new();
        for (node, levels) in lists.iter().enumerate() {
            if let Some(l0) = levels.first() {
                write_list(&mut level0[node * level0_stride..][..level0_stride], l0);
            }
            if levels.len() > 1 {
                upper_at[node] = (upper.len() / upper_stride) as u32;
                // Levels are drawn capped at 16 (build.rs), far below u8's bound.
                upper_levels[node] = (levels.len() - 1) as u8;
                for list in &levels[1..] {
                    let at = upper.len();
                    upper.resize(at + upper_stride, 0);
                    write_list(&mut upper[at..], list);
                }
            }
        }
        Self {
            level0_stride,
            level0,
            upper_stride,
            upper_at,
            upper_levels,
            upper,
        }
    }

    /// The neighbours of `node` on `level` (empty above the node's own level).
    #[inline]
    pub(crate) fn neighbors(&self, node: u32, level: usize) -> &[u32] {
        let slot = if level == 0 {
            &self.level0[node as usize * self.level0_stride..][..self.level0_stride]
        } else {
            let first = self.upper_at[node as usize];
            if first == NO_UPPER || level > self.upper_levels[node as usize] as usize {
                return &[];
            }
            let at = (first as usize + level - 1) * self.upper_stride;
            match self.upper.get(at..at + self.upper_stride) {
                Some(slot) => slot,
                None => return &[],
            }
        };
        &slot[1..1 + slot[0] as usize]
    }

    pub(crate) fn dram_bytes(&self) -> usize {
        (self.level0.len() + self.upper_at.len() + self.upper.len()) * 4 + self.upper_levels.len()
    }
}

/// A list into its slot: the count, then the ids.
fn write_list(slot: &mut [u32], list: &[u32]) {
    slot[0] = list.len() as u32;
    slot[1..1 + list.len()].copy_from_slice(list);
}

/// A graph's lists in one of the two forms.
pub(crate) enum Links {
    Building(BuildLinks),
    Frozen(FrozenLinks),
}

impl Links {
    /// Freezes building lists (frozen ones stay as they are).
    pub(crate) fn freeze(&mut self) {
        if let Links::Building(lists) = self {
            *self = Links::Frozen(FrozenLinks::freeze(std::mem::take(lists)));
        }
    }

    /// Starts fetching the level-0 list of `node` (a hint: nothing for other levels, which
    /// few nodes have, or for lists still being built).
    #[inline]
    pub(crate) fn prefetch(&self, node: u32, level: usize) {
        if let (Links::Frozen(frozen), 0) = (self, level) {
            if let Some(slot) = frozen.level0.get(node as usize * frozen.level0_stride..) {
                diskvec_vector::prefetch(&slot[..frozen.level0_stride.min(slot.len())], 4);
            }
        }
    }

    /// Runs `f` on the neighbours of `node` on `level` (empty above the node's level).
    #[inline]
    pub(crate) fn with<R>(&self, node: u32, level: usize, f: impl FnOnce(&[u32]) -> R) -> R {
        match self {
            Links::Frozen(frozen) => f(frozen.neighbors(node, level)),
            Links::Building(lists) => match lists[node as usize].get(level) {
                Some(list) => f(&list.read().unwrap_or_else(|e| e.into_inner())),
                None => f(&[]),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(raw: &[&[&[u32]]]) -> BuildLinks {
        raw.iter()
            .map(|levels| levels.iter().map(|l| RwLock::new(l.to_vec())).collect())
            .collect()
    }

    #[test]
    fn frozen_lists_read_back_as_built() {
        let raw: &[&[&[u32]]] = &[
            &[&[1, 2, 3], &[2], &[3]],
            &[&[0]],
            &[&[0, 1, 3, 4], &[0, 3]],
            &[&[], &[0], &[0]],
            &[&[2]],
        ];
        let frozen = FrozenLinks::freeze(lists(raw));
        let links = Links::Frozen(frozen);
        let building = Links::Building(lists(raw));
        for (node, levels) in raw.iter().enumerate() {
            for level in 0..4 {
                let want: &[u32] = levels.get(level).copied().unwrap_or(&[]);
                let node = node as u32;
                assert_eq!(
                    links.with(node, level, |l| l.to_vec()),
                    want,
                    "node {node} level {level}"
                );
                assert_eq!(building.with(node, level, |l| l.to_vec()), want);
            }
        }
    }
}
