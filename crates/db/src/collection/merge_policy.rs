//! Which sealed segments a background merge takes.
//!
//! Every sealed segment costs each search a graph walk of its own, so their number is kept
//! near `MERGE_ABOVE`. But a merge rebuilds every point it takes: folding the newest seal of
//! 20,000 points into the smallest segments of a 10M collection rebuilt 1.44M old points, ten
//! minutes of a core beside the searches, and the next seal did it again with another 1.1M
//! (docs/benchmarks.md, session 43). So while writes come, merges are tiered: a segment's
//! tier is its size in powers of `TIER_FAN_IN` above the seal size, a merge takes
//! `TIER_FAN_IN` segments of one tier (the lowest that holds as many), and each point is
//! rebuilt once per tier on its way to a full-size segment. Up to `MERGE_ABOVE_WHILE_WRITING`
//! segments are let stand meanwhile; past that, and once writes stop, the smallest are merged
//! back to `MERGE_ABOVE`.

/// Writes count as coming until this long after the last one. Short: a pause this long in a
/// stream is rare, and costs only one merge of the smallest.
pub(crate) const WRITES_PAUSED: std::time::Duration = std::time::Duration::from_secs(2);

/// More sealed segments than this and the smallest are merged (once writes stop).
pub(crate) const MERGE_ABOVE: usize = 8;

/// While writes come, more sealed segments than this and the smallest are merged whatever
/// their tiers (up to this many, only tiered merges run).
pub(crate) const MERGE_ABOVE_WHILE_WRITING: usize = 2 * MERGE_ABOVE;

/// Fewest segments one smallest-first merge may stop at: segments grow in steps instead of
/// every merge rebuilding everything sealed so far, whose cost grows with the collection while
/// seals, and the writers behind them, wait. When seals outran the merges (a bulk load: 85 sealed segments at 8.7M
/// points, each merge of eight making a 0.5M segment that a later merge rebuilt again) a
/// smallest-first merge takes as many of the smallest as bring the count back to
/// `MERGE_ABOVE`, up to `max_segment_points`, so most points are rebuilt once on their way to a
/// full-size segment. `optimize` and the idle merge take all.
const MERGE_FAN_IN: usize = 8;

/// Segments a tiered merge takes while writes come, and the size ratio between tiers. Four,
/// not eight (`MERGE_FAN_IN`, which it was until session 46): each sealed segment is a graph search more for every query, and at 500 points
/// a second into 10M the searches' cost per query doubled while eight seals of a tier
/// waited for their merge (8 -> 16 segments, session 45); a merge of four 20,000-point seals
/// is a few seconds of a core. Each point is rebuilt once per tier, so a smaller fan-in
/// rebuilds it more often (log4 against log8 of its way to a full-size segment).
const TIER_FAN_IN: usize = 4;

/// How a merge chooses its segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Writes are coming: `TIER_FAN_IN` segments of one tier, or the smallest past
    /// `MERGE_ABOVE_WHILE_WRITING`.
    Tiered,
    /// Writes stopped: the smallest, back to `MERGE_ABOVE`.
    Smallest,
    /// `optimize`: every segment that fits.
    All,
}

/// The sealed segments (id, live points) a merge takes, sorted by id; fewer than two means
/// no merge. `seal_points`: the size a seal makes (the first tier's); `max_points`: the most
/// one segment may hold.
pub(crate) fn to_merge(
    sealed: Vec<(u64, usize)>,
    max_points: usize,
    seal_points: usize,
    pick: Pick,
) -> Vec<u64> {
    match pick {
        Pick::All => smallest_to_merge(sealed, max_points, true),
        _ if sealed.len() <= MERGE_ABOVE => Vec::new(),
        Pick::Tiered if sealed.len() <= MERGE_ABOVE_WHILE_WRITING => {
            tiered_to_merge(sealed, max_points, seal_points)
        }
        Pick::Tiered | Pick::Smallest => smallest_to_merge(sealed, max_points, false),
    }
}

/// Whether more than `MERGE_ABOVE` segments that a merge could still take (under half of
/// `max_points` each) wait: a merge picked then is overdue (`overdue`), while writes come
/// too. A tier's merge at the merge lane's own low priority (eight seals, 220,000 points)
/// took 290 s beside four searching clients while new segments kept arriving.
fn piled_up(sealed: impl Iterator<Item = usize>, max_points: usize) -> bool {
    sealed.filter(|&live| live < max_points / 2).count() > MERGE_ABOVE
}

/// The segments of an overdue merge: segments piled up (`piled_up`) and `pick` takes some of
/// them now (empty when no merge is overdue). While writes come and no tier holds
/// `TIER_FAN_IN`, up to `MERGE_ABOVE_WHILE_WRITING` segments stand with no merge to hurry (and
/// seals are not raised for one).
pub(crate) fn overdue_merge(
    sealed: Vec<(u64, usize)>,
    max_points: usize,
    seal_points: usize,
    pick: Pick,
) -> Vec<u64> {
    if !piled_up(sealed.iter().map(|&(_, live)| live), max_points) {
        return Vec::new();
    }
    let picked = to_merge(sealed, max_points, seal_points, pick);
    if picked.len() >= 2 {
        picked
    } else {
        Vec::new()
    }
}

/// A segment's tier: 0 below `TIER_FAN_IN` seals' worth of points, 1 below
/// `TIER_FAN_IN`² seals' worth, and so on.
fn tier(live: usize, seal_points: usize) -> u32 {
    let mut tier = 0;
    let mut bound = seal_points.max(1).saturating_mul(TIER_FAN_IN);
    while live >= bound && bound < usize::MAX {
        tier += 1;
        bound = bound.saturating_mul(TIER_FAN_IN);
    }
    tier
}

/// `TIER_FAN_IN` of the lowest tier that holds as many segments a merge can take (under
/// half of `max_points`), the smallest first, as many as fit one segment.
fn tiered_to_merge(sealed: Vec<(u64, usize)>, max_points: usize, seal_points: usize) -> Vec<u64> {
    let mut mergeable: Vec<(u32, usize, u64)> = sealed
        .into_iter()
        .filter(|&(_, live)| live < max_points / 2)
        .map(|(id, live)| (tier(live, seal_points), live, id))
        .collect();
    mergeable.sort_unstable();
    for same_tier in mergeable.chunk_by(|a, b| a.0 == b.0) {
        if same_tier.len() < TIER_FAN_IN {
            continue;
        }
        let mut total = 0;
        let mut picked = Vec::new();
        for &(_, live, id) in same_tier.iter().take(TIER_FAN_IN) {
            if total + live > max_points {
                break;
            }
            total += live;
            picked.push(id);
        }
        if picked.len() >= 2 {
            picked.sort_unstable();
            return picked;
        }
    }
    Vec::new()
}

/// The smallest first, at least `MERGE_FAN_IN` of them when there are, or as many as bring
/// the count back to `MERGE_ABOVE`, all of them with `merge_all`, as long as their points fit
/// one segment. Sorted by id.
fn smallest_to_merge(
    mut sealed: Vec<(u64, usize)>,
    max_points: usize,
    merge_all: bool,
) -> Vec<u64> {
    let fan_in = if merge_all {
        usize::MAX
    } else {
        MERGE_FAN_IN.max((sealed.len() + 1).saturating_sub(MERGE_ABOVE))
    };
    sealed.sort_by_key(|&(id, live)| (live, id));
    let mut picked = Vec::new();
    let mut total = 0;
    for (id, live) in sealed {
        if picked.len() == fan_in || (total + live > max_points && picked.len() >= 2) {
            break;
        }
        if total + live > max_points {
            continue;
        }
        total += live;
        picked.push(id);
    }
    picked.sort_unstable();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(sizes: &[usize]) -> Vec<(u64, usize)> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (i as u64, n))
            .collect()
    }

    #[test]
    fn nine_segments_merge_the_eight_smallest() {
        let picked = smallest_to_merge(
            segments(&[1_500_000, 20, 10, 30, 40, 50, 60, 70, 80]),
            2_000_000,
            false,
        );
        assert_eq!(picked, vec![1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn a_backlog_merges_back_to_the_limit_within_one_segment() {
        // 40 seals of 80k behind: 33 of them would bring the count back to 8, 25 fill a
        // segment of 2M.
        let picked = smallest_to_merge(segments(&[80_000; 40]), 2_000_000, false);
        assert_eq!(picked.len(), 25);
        let picked = smallest_to_merge(segments(&[80_000; 20]), 2_000_000, false);
        assert_eq!(picked.len(), 13, "20 segments: 13 merged leave 8");
    }

    #[test]
    fn merges_are_behind_when_segments_they_could_take_pile_up() {
        let max = 1_000_000;
        assert!(!piled_up([40_000; 8].into_iter(), max));
        assert!(piled_up([40_000; 9].into_iter(), max));
        // Full-size segments are not waiting for any merge (a 100M collection holds many).
        let full = std::iter::repeat_n(600_000, 50);
        assert!(!piled_up(full.clone().chain([40_000; 8]), max));
        assert!(piled_up(full.chain([40_000; 9]), max));
    }

    #[test]
    fn a_merge_is_overdue_only_when_one_is_picked() {
        let (max, seal) = (2_000_000, 20_000);
        // Nine seals of one tier while writes come: a tier merge, overdue.
        let seals = segments(&[20_000; 9]);
        assert_eq!(
            overdue_merge(seals.clone(), max, seal, Pick::Tiered),
            (0..4).collect::<Vec<u64>>()
        );
        // Nine of three tiers: none holds four, nothing is hurried until 16.
        let mixed = segments(&[
            20_000, 20_000, 20_000, 200_000, 200_000, 200_000, 900_000, 900_000, 900_000,
        ]);
        assert!(overdue_merge(mixed.clone(), max, seal, Pick::Tiered).is_empty());
        // Once writes stop, the smallest are merged back to eight, overdue.
        assert!(!overdue_merge(mixed, max, seal, Pick::Smallest).is_empty());
        assert!(overdue_merge(segments(&[20_000; 8]), max, seal, Pick::Smallest).is_empty());
    }

    #[test]
    fn segments_that_do_not_fit_are_left_out() {
        let picked = smallest_to_merge(
            segments(&[1_900_000, 150_000, 100_000, 1_000]),
            2_000_000,
            true,
        );
        assert_eq!(picked, vec![1, 2, 3]);
        assert!(smallest_to_merge(segments(&[1_900_000, 1_800_000]), 2_000_000, true).len() < 2);
    }

    /// The 10M collection of session 43 as the first seal of a stream arrived.
    const LOADED_10M: [usize; 8] = [
        1_640_000, 1_940_000, 1_940_000, 1_960_000, 160_000, 560_000, 700_000, 1_100_000,
    ];

    #[test]
    fn a_new_seal_is_not_folded_into_the_old_segments_while_writes_come() {
        let mut sizes = LOADED_10M.to_vec();
        sizes.push(20_000);
        let tiered = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Tiered);
        assert!(tiered.is_empty(), "{tiered:?}");
        // Once writes stop, the smallest are merged back to eight (what every merge did).
        let smallest = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Smallest);
        assert_eq!(smallest, vec![4, 5, 6, 8]);
    }

    #[test]
    fn four_seals_are_merged_among_themselves() {
        let mut sizes = LOADED_10M.to_vec();
        sizes.extend([20_000, 40_000, 20_000]);
        let picked = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Tiered);
        assert!(picked.is_empty(), "three of a tier wait: {picked:?}");
        sizes.extend([60_000, 20_000]);
        let picked = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Tiered);
        // The four smallest of the first tier (below 80k).
        assert_eq!(picked, vec![8, 9, 10, 12]);
    }

    #[test]
    fn past_twice_the_limit_the_smallest_are_merged_whatever_their_tiers() {
        let mut sizes = LOADED_10M.to_vec();
        sizes.extend([20_000; 7]);
        sizes.extend([300_000; 2]);
        assert_eq!(sizes.len(), 17);
        let picked = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Tiered);
        // 17 segments: ten of the smallest merged into one leave eight.
        assert_eq!(picked.len(), 10, "{picked:?}");
        assert!(
            picked.contains(&4),
            "the 160k segment is among the smallest"
        );
    }

    #[test]
    fn a_full_tier_merges_as_many_as_fit_one_segment() {
        // Nine segments of the third tier (320k to 1.28M at seals of 20k): four are taken
        // smallest first, as many as fit 2M.
        let sizes = [
            330_000, 900_000, 800_000, 700_000, 600_000, 500_000, 400_000, 950_000, 990_000,
        ];
        let picked = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Tiered);
        assert_eq!(picked, vec![0, 4, 5, 6]);
        // Three of that tier and six full-size segments: nothing while writes come.
        let mut sizes = sizes[..3].to_vec();
        sizes.extend([
            1_500_000, 1_600_000, 1_700_000, 1_800_000, 1_900_000, 2_000_000,
        ]);
        let picked = to_merge(segments(&sizes), 2_000_000, 20_000, Pick::Tiered);
        assert!(picked.is_empty(), "{picked:?}");
    }

    #[test]
    fn tiers_are_powers_of_the_fan_in_above_the_seal_size() {
        assert_eq!(tier(0, 20_000), 0);
        assert_eq!(tier(79_999, 20_000), 0);
        assert_eq!(tier(80_000, 20_000), 1);
        assert_eq!(tier(319_999, 20_000), 1);
        assert_eq!(tier(320_000, 20_000), 2);
        assert_eq!(tier(usize::MAX, usize::MAX), 0);
        assert!(tier(usize::MAX, 1) < 64);
        assert_eq!(tier(3, 0), 0);
    }
}
