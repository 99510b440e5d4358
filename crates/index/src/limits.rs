//! The allowed range of every size parameter, in one place, so the CLI, Python and the
//! library refuse the same values with the same message (naming the parameter and its
//! range) before anything is allocated from them.
//!
//! Why these bounds:
//! - Each DISKANN query in flight reserves memory proportional to its search list L (a
//!   visited set sized for 32·L ids, the re-rank pool, the candidate list): about 300 bytes
//!   per unit of L, so L = 10,000 is about 3 MiB per query, and a thread keeps up to
//!   `queries_per_thread` queries in flight. Recall stops improving long before L = 10,000,
//!   so larger values only ever come from typos, and k (which raises L to itself) has the
//!   same bound. HNSW's ef and efConstruction are the same kind of list and share it.
//! - Queue depth sizes an io_uring ring per path and thread, with one read buffer per
//!   entry; the kernel refuses rings above 32,768 entries (and the failure would look like
//!   io_uring being unavailable), so 4,096 keeps ring creation working with room to spare.
//! - Beam width times queries per thread is the reads a thread keeps in flight; 64 each
//!   is already far past what saturates an NVMe drive from one thread.
//! - Threads above 1,024 are not a configuration this code is meant for; each search
//!   thread also opens its own engines.
//! - Node ids are u32, so no index holds more than 2^32 - 2 vectors, the most nodes a
//!   cache can hold; a cache larger than the index is clamped to the index.

use crate::diskann::{OpenOptions, SearchParams};
use crate::{IndexError, Result};

/// An inclusive range a size parameter must lie in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// How messages name the parameter (CLI flags and Python keywords are this name with
    /// `-` or `_` for spaces).
    pub name: &'static str,
    pub min: usize,
    pub max: usize,
}

impl Limit {
    /// `value` if it lies in the range, else an error naming the parameter and the range.
    pub fn check(&self, value: usize) -> Result<usize> {
        if (self.min..=self.max).contains(&value) {
            Ok(value)
        } else {
            Err(self.out_of_range(value))
        }
    }

    /// The error for a value outside the range (any integer type, negative ones too).
    pub fn out_of_range(&self, got: impl std::fmt::Display) -> IndexError {
        IndexError::OutOfRange(format!(
            "{} must be between {} and {}, got {got}",
            self.name, self.min, self.max
        ))
    }
}

/// The largest k and search list (see the module docs for why).
pub const MAX_LIST: usize = 10_000;

pub const K: Limit = Limit {
    name: "k",
    min: 1,
    max: MAX_LIST,
};
pub const SEARCH_LIST: Limit = Limit {
    name: "search list",
    min: 1,
    max: MAX_LIST,
};
pub const BEAM_WIDTH: Limit = Limit {
    name: "beam width",
    min: 1,
    max: 64,
};
pub const QUERIES_PER_THREAD: Limit = Limit {
    name: "queries per thread",
    min: 1,
    max: 64,
};
pub const QUEUE_DEPTH: Limit = Limit {
    name: "queue depth",
    min: 1,
    max: 4096,
};
pub const THREADS: Limit = Limit {
    name: "threads",
    min: 1,
    max: 1024,
};
/// Node ids are u32 and one is kept free as "no node".
pub const MAX_VECTORS: usize = u32::MAX as usize - 1;
pub const CACHE_NODES: Limit = Limit {
    name: "cache nodes",
    min: 0,
    max: MAX_VECTORS,
};
pub const MAX_DEGREE: Limit = Limit {
    name: "max degree",
    min: 1,
    max: 1024,
};
pub const BUILD_LIST: Limit = Limit {
    name: "build list",
    min: 1,
    max: MAX_LIST,
};
/// HNSW's M: below 2 the graph cannot stay connected; level 0 keeps 2M links.
pub const HNSW_M: Limit = Limit {
    name: "M",
    min: 2,
    max: 512,
};
pub const EF: Limit = Limit {
    name: "ef",
    min: 1,
    max: MAX_LIST,
};
pub const EF_CONSTRUCTION: Limit = Limit {
    name: "efConstruction",
    min: 1,
    max: MAX_LIST,
};

/// PQ code bytes: each byte codes at least one dimension.
pub fn pq_bytes(dim: usize) -> Limit {
    Limit {
        name: "PQ bytes",
        min: 1,
        max: dim.max(1),
    }
}

/// Checks a DISKANN search's parameters; returns them with the search list actually used
/// (raised to k when below it: fewer candidates than results cannot fill the answer).
pub fn check_search_params(p: &SearchParams) -> Result<SearchParams> {
    K.check(p.k)?;
    SEARCH_LIST.check(p.search_list)?;
    BEAM_WIDTH.check(p.beam_width)?;
    QUERIES_PER_THREAD.check(p.queries_per_thread)?;
    if p.rerank_sigmas.is_nan() || p.rerank_sigmas < 0.0 {
        return Err(IndexError::InvalidArgument(format!(
            "rerank sigmas must be a number >= 0 (inf re-ranks every candidate), got {}",
            p.rerank_sigmas
        )));
    }
    Ok(SearchParams {
        search_list: p.search_list.max(p.k),
        ..*p
    })
}

/// Checks the sizes `DiskIndex::open` allocates from.
pub fn check_open_options(o: &OpenOptions) -> Result<()> {
    QUEUE_DEPTH.check(o.queue_depth)?;
    if let Some(c) = o.cache_nodes {
        CACHE_NODES.check(c)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_parameter_and_the_range() {
        assert_eq!(K.check(10).unwrap(), 10);
        let e = K.check(1 << 40).unwrap_err().to_string();
        assert!(
            e.contains("k must be between 1 and 10000, got 1099511627776"),
            "{e}"
        );
        let e = THREADS.out_of_range(-3).to_string();
        assert!(
            e.contains("threads must be between 1 and 1024, got -3"),
            "{e}"
        );
        assert!(CACHE_NODES.check(0).is_ok());
        assert!(pq_bytes(8).check(9).is_err());
    }
}
