use crate::{IoError, Result, SECTOR};

/// How a logical byte range is laid over `paths` devices: stripe `s` (of `stripe_bytes`)
/// lives on path `s % paths`, at stripe slot `s / paths` of that path's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeMap {
    pub paths: usize,
    pub stripe_bytes: u64,
}

/// One contiguous part of a logical read that lies on one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub path: usize,
    /// Offset in that path's file.
    pub physical: u64,
    /// Offset within the logical read's buffer.
    pub at: usize,
    pub len: usize,
}

impl StripeMap {
    pub fn new(paths: usize, stripe_bytes: u64) -> Result<Self> {
        if paths == 0 || stripe_bytes == 0 || !stripe_bytes.is_multiple_of(SECTOR as u64) {
            return Err(IoError::Usage(format!(
                "a stripe map needs at least one path and a stripe that is a whole number of {SECTOR}-byte sectors (got {paths} paths, {stripe_bytes} bytes)"
            )));
        }
        Ok(Self {
            paths,
            stripe_bytes,
        })
    }

    /// The path and physical offset holding logical byte `logical`.
    pub fn locate(&self, logical: u64) -> (usize, u64) {
        let stripe = logical / self.stripe_bytes;
        let within = logical % self.stripe_bytes;
        let path = (stripe % self.paths as u64) as usize;
        (
            path,
            (stripe / self.paths as u64) * self.stripe_bytes + within,
        )
    }

    /// Splits the logical range `offset..offset+len` at stripe boundaries.
    pub fn pieces(&self, offset: u64, len: usize) -> Vec<Piece> {
        self.iter_pieces(offset, len).collect()
    }

    /// The same pieces without allocating (the query path calls this for every read).
    pub fn iter_pieces(&self, offset: u64, len: usize) -> impl Iterator<Item = Piece> + '_ {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            if at >= len {
                return None;
            }
            let logical = offset + at as u64;
            let room = (self.stripe_bytes - logical % self.stripe_bytes) as usize;
            let take = room.min(len - at);
            let (path, physical) = self.locate(logical);
            let piece = Piece {
                path,
                physical,
                at,
                len: take,
            };
            at += take;
            Some(piece)
        })
    }

    /// How many pieces `pieces(offset, len)` has.
    pub fn piece_count(&self, offset: u64, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let first = offset / self.stripe_bytes;
        let last = (offset + len as u64 - 1) / self.stripe_bytes;
        (last - first + 1) as usize
    }

    /// Bytes of a logical file of `logical_len` bytes that `path` stores.
    pub fn path_len(&self, path: usize, logical_len: u64) -> u64 {
        let full = logical_len / self.stripe_bytes;
        let tail = logical_len % self.stripe_bytes;
        let n = self.paths as u64;
        let mut stripes = full / n;
        if (path as u64) < full % n {
            stripes += 1;
        }
        let mut bytes = stripes * self.stripe_bytes;
        if tail > 0 && full % n == path as u64 {
            bytes += tail;
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_round_robins_stripes() {
        let m = StripeMap::new(4, 8192).unwrap();
        assert_eq!(m.locate(0), (0, 0));
        assert_eq!(m.locate(8192), (1, 0));
        assert_eq!(m.locate(3 * 8192 + 100), (3, 100));
        assert_eq!(m.locate(4 * 8192), (0, 8192));
        assert_eq!(m.locate(9 * 8192 + 4096), (1, 2 * 8192 + 4096));
    }

    #[test]
    fn reads_crossing_stripe_boundaries_split_and_tile_the_buffer() {
        let m = StripeMap::new(3, 8192).unwrap();
        let pieces = m.pieces(4096, 4 * 4096);
        assert_eq!(
            pieces,
            vec![
                Piece {
                    path: 0,
                    physical: 4096,
                    at: 0,
                    len: 4096
                },
                Piece {
                    path: 1,
                    physical: 0,
                    at: 4096,
                    len: 8192
                },
                Piece {
                    path: 2,
                    physical: 0,
                    at: 12288,
                    len: 4096
                },
            ]
        );
        assert_eq!(
            m.pieces(8192, 8192),
            vec![Piece {
                path: 1,
                physical: 0,
                at: 0,
                len: 8192
            }]
        );
        for (off, len) in [
            (4096u64, 16384usize),
            (8192, 8192),
            (0, 4096),
            (4096, 4096),
            (0, 40960),
        ] {
            assert_eq!(
                m.piece_count(off, len),
                m.pieces(off, len).len(),
                "{off} {len}"
            );
        }
        let one = StripeMap::new(1, 4096).unwrap();
        let p = one.pieces(4096, 12288);
        assert!(p.iter().all(|x| x.path == 0));
        assert_eq!(p.iter().map(|x| x.len).sum::<usize>(), 12288);
        assert_eq!(p[1].physical, 8192);
    }

    #[test]
    fn path_lengths_add_up_and_match_locate() {
        for (paths, stripe) in [(1u64, 4096u64), (2, 8192), (4, 65536), (3, 4096)] {
            let m = StripeMap::new(paths as usize, stripe).unwrap();
            for len in [0u64, 4096, stripe, stripe * 5 + 4096, stripe * 8, 1 << 20] {
                let total: u64 = (0..paths as usize).map(|p| m.path_len(p, len)).sum();
                assert_eq!(total, len, "{paths} paths, stripe {stripe}, len {len}");
                if len > 0 {
                    let (p, phys) = m.locate(len - 1);
                    assert_eq!(m.path_len(p, len), phys + 1);
                }
            }
        }
    }

    #[test]
    fn refuses_bad_maps() {
        assert!(StripeMap::new(0, 4096).is_err());
        assert!(StripeMap::new(2, 1000).is_err());
    }
}
