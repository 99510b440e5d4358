//! The stable, coverage-free driver: mutates seeds (valid encodings and past crashes) with
//! the edits that break decoders most often, and runs a target on each result until a time
//! budget is spent, catching a panic and saving its input for reproduction.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Values a length or count field is most likely to mishandle.
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    3,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xfff,
    0x1000,
    0x7fff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    1 << 40,
    1 << 62,
    i64::MAX as u64,
    u64::MAX,
    u64::MAX - 1,
];

/// One mutated copy of `input`; `pool` lends chunks for splicing.
pub fn mutate(rng: &mut SmallRng, input: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    let edits = 1 + rng.random_range(0..4);
    for _ in 0..edits {
        let len = out.len();
        match rng.random_range(0..10) {
            0 | 1 if len > 0 => {
                let at = rng.random_range(0..len);
                out[at] ^= 1 << rng.random_range(0..8);
            }
            2 if len > 0 => {
                let at = rng.random_range(0..len);
                out[at] = [0, 0xff, rng.random()][rng.random_range(0..3)];
            }
            3 if len > 0 => {
                let keep = rng.random_range(0..len);
                out.truncate(keep);
            }
            4 => {
                let extra = rng.random_range(1..64);
                let fill: u8 = [0, 0xff, rng.random()][rng.random_range(0..3)];
                out.extend(std::iter::repeat_n(fill, extra));
            }
            5 | 6 if len > 0 => {
                // A length field rewritten: a huge (or zero) value at a random place,
                // more often at a 4-byte boundary where the formats keep their fields.
                let width = [1usize, 2, 4, 8][rng.random_range(0..4)];
                let mut at = rng.random_range(0..len);
                if rng.random_bool(0.7) {
                    at -= at % 4;
                }
                let v = INTERESTING[rng.random_range(0..INTERESTING.len())];
                let v = if rng.random_bool(0.2) {
                    v.wrapping_neg()
                } else {
                    v
                };
                let bytes = v.to_le_bytes();
                let end = (at + width).min(len);
                out[at..end].copy_from_slice(&bytes[..end - at]);
            }
            7 if !pool.is_empty() => {
                // Splice: a chunk of another seed over (or onto the end of) this one.
                let other = &pool[rng.random_range(0..pool.len())];
                if !other.is_empty() {
                    let from = rng.random_range(0..other.len());
                    let n = rng.random_range(1..=(other.len() - from).min(256));
                    let at = rng.random_range(0..=len);
                    let end = (at + n).min(len);
                    out.splice(at..end, other[from..from + n].iter().copied());
                }
            }
            8 if len > 1 => {
                // A chunk of this input copied elsewhere in it.
                let from = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - from).min(64));
                let to = rng.random_range(0..len);
                let chunk = out[from..from + n].to_vec();
                let end = (to + n).min(len);
                out[to..end].copy_from_slice(&chunk[..end - to]);
            }
            9 if len > 0 => {
                let at = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - at).min(64));
                out.drain(at..at + n);
            }
            _ => out.push(rng.random()),
        }
    }
    out
}

/// What a run did.
pub struct Report {
    pub executions: u64,
    /// The input that panicked, saved under `crash_dir`, and the panic's message.
    pub crash: Option<(PathBuf, String)>,
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string panic)".into())
}

/// Runs `target` on every seed, then on mutations of seeds and of earlier mutants, until
/// `budget` is spent or an input panics.
pub fn run(
    name: &str,
    target: fn(&[u8]),
    seeds: &[Vec<u8>],
    budget: Duration,
    rng_seed: u64,
    crash_dir: &Path,
) -> Report {
    let mut rng = SmallRng::seed_from_u64(rng_seed);
    let start = Instant::now();
    let mut executions = 0u64;
    // Mutants are kept a while so edits stack up (a sealed checksum and a changed field).
    let mut pool: Vec<Vec<u8>> = seeds.to_vec();
    let mut next = 0usize;
    loop {
        let input = if next < seeds.len() {
            next += 1;
            seeds[next - 1].clone()
        } else {
            if start.elapsed() >= budget {
                break;
            }
            let base = &pool[rng.random_range(0..pool.len())];
            mutate(&mut rng, base, &pool)
        };
        executions += 1;
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| target(&input))) {
            let _ = std::fs::create_dir_all(crash_dir);
            let file = crash_dir.join(format!("{name}-{:08x}.bin", crc32fast::hash(&input)));
            let _ = std::fs::write(&file, &input);
            return Report {
                executions,
                crash: Some((file, panic_message(p.as_ref()))),
            };
        }
        if next >= seeds.len() && rng.random_range(0..16) == 0 && input.len() <= 1 << 16 {
            if pool.len() < seeds.len() + 256 {
                pool.push(input);
            } else {
                let at = rng.random_range(seeds.len()..pool.len());
                pool[at] = input;
            }
        }
    }
    Report {
        executions,
        crash: None,
    }
}
