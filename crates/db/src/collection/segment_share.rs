//! What one segment is asked when a collection of several is searched: not the whole `k`
//! and search list, but the part of them its share of the points can hold.
//!
//! A query's k nearest points are spread over the segments about as the points are (a
//! segment holds the points that arrived while it was growing, so by position in the
//! space it is a sample of the collection). A segment holding a share `p` holds about
//! `k·p` of them, and at most `segment_k(k, p)` but for one query in `1 / TAIL`. Searching
//! it with the whole list L explores a region of the space that holds L·(1/p) of the
//! collection's points: every segment but the largest does the work of a search of the
//! whole collection, and a query over 7 even segments read 7x what one index reads (914
//! nodes against 214 at 10M, L = 200). Asked for its k_i with the list scaled as k_i / k,
//! a segment explores the same region the whole list explores in one index of every point.
//!
//! Only unfiltered searches are shared out: a filter's matches need not follow the points
//! (a field written only lately lives in the newest segments), and `exact` asks for all.

/// Chance that a segment holds more of a query's k nearest than it is asked for.
const TAIL: f64 = 1e-3;

/// The smallest list a graph search of a segment runs with: below it, the walk from the
/// entry point reaches the query's neighbourhood too seldom (unless L itself is smaller).
pub(crate) const MIN_SEGMENT_LIST: usize = 16;

/// The k and search list a segment holding `share` (0 to 1) of the points is asked for,
/// when the collection is asked for `k` with list `list`: the list scaled by the share of
/// the k it may hold, as many matches as fit in it.
pub(crate) fn segment_request(k: usize, list: usize, share: f64) -> (usize, usize) {
    if k == 0 || share >= 1.0 {
        return (k, list);
    }
    let k_i = segment_k(k, share);
    let scaled = (list as f64 * k_i as f64 / k as f64).ceil() as usize;
    let list_i = scaled.max(MIN_SEGMENT_LIST).max(k_i).min(list.max(k_i));
    // Returning more of its list than k_i costs the segment nothing (every point in it
    // was already compared), and covers the rare query it holds more of.
    (k.min(list_i), list_i)
}

/// The number of a query's `k` nearest a segment holding `share` of the points holds
/// at most, but for a chance of `TAIL`: an upper quantile of Binomial(k, share), at
/// least 1.
pub(crate) fn segment_k(k: usize, share: f64) -> usize {
    let p = share.clamp(0.0, 1.0);
    if p >= 0.5 {
        return k;
    }
    let n = k as f64;
    let variance = n * p * (1.0 - p);
    let quantile = if variance >= 25.0 {
        // Normal approximation (z of 1 - TAIL is 3.09), with the continuity correction.
        (n * p + 3.09 * variance.sqrt() + 0.5).ceil() as usize
    } else {
        binomial_quantile(k, p)
    };
    quantile.clamp(1, k)
}

/// The smallest x with P(Binomial(k, p) > x) <= TAIL, summed exactly. Called only where
/// k·p < 50, so (1 - p)^k stays far above f64's smallest normal number.
fn binomial_quantile(k: usize, p: f64) -> usize {
    let mut pmf = (k as f64 * (1.0 - p).ln()).exp();
    let mut cdf = pmf;
    let mut x = 0;
    while 1.0 - cdf > TAIL && x < k {
        pmf *= (k - x) as f64 / (x + 1) as f64 * p / (1.0 - p);
        x += 1;
        cdf += pmf;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P(Binomial(k, p) > x), by a direct sum, for checking the quantiles.
    fn tail_above(k: usize, p: f64, x: usize) -> f64 {
        let mut ln_choose = 0.0f64;
        let mut total = 0.0;
        for i in 0..=k {
            if i > 0 {
                ln_choose += ((k - i + 1) as f64).ln() - (i as f64).ln();
            }
            if i > x {
                total += (ln_choose + i as f64 * p.ln() + (k - i) as f64 * (1.0 - p).ln()).exp();
            }
        }
        total
    }

    #[test]
    fn the_quantile_leaves_at_most_the_tail_above_it_and_is_the_smallest_such() {
        for &(k, p) in &[(10, 0.14), (100, 0.14), (100, 0.02), (1000, 0.1), (10, 0.4)] {
            let x = segment_k(k, p);
            assert!(tail_above(k, p, x) <= TAIL * 1.05, "k {k} p {p}: x {x}");
            if x > 1 && k as f64 * p * (1.0 - p) < 25.0 {
                assert!(
                    tail_above(k, p, x - 1) > TAIL,
                    "k {k} p {p}: x {x} not smallest"
                );
            }
        }
    }

    #[test]
    fn a_seventh_of_the_points_is_asked_for_a_quarter_of_the_list() {
        let k_i = segment_k(100, 1.0 / 7.0);
        assert!((20..=30).contains(&k_i), "{k_i}");
        let (k_asked, list_i) = segment_request(100, 200, 1.0 / 7.0);
        assert_eq!(list_i, (200.0 * k_i as f64 / 100.0).ceil() as usize);
        assert_eq!(k_asked, list_i.min(100));
    }

    #[test]
    fn a_whole_or_major_segment_and_small_lists_are_left_alone() {
        assert_eq!(segment_request(10, 100, 1.0), (10, 100));
        assert_eq!(segment_request(10, 100, 0.6), (10, 100));
        assert_eq!(segment_request(0, 100, 0.1), (0, 100));
        // Never a longer list than the collection was asked for, never below the floor.
        assert_eq!(segment_request(10, 12, 0.01), (10, 12));
        assert_eq!(segment_request(10, 100, 0.001), (10, MIN_SEGMENT_LIST));
        assert_eq!(
            segment_request(100, 100, 0.001),
            (MIN_SEGMENT_LIST, MIN_SEGMENT_LIST)
        );
    }
}
