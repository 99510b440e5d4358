//! How fast `Sq8Gram` computes a leaf's pairwise distances on this CPU: multiply-adds per
//! second at leaf sizes 256, 512 and 1,024 of 768-byte codes, one thread and all of them,
//! for every kernel this CPU can run (the first is the one builds use).
//!
//! cargo run --release -p diskvec-vector --example gram_rate

use std::time::Instant;

use diskvec_vector::{gram_kernels, Sq8Gram};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

fn main() {
    let dim = 768;
    let threads = rayon::current_num_threads();
    println!("{threads} threads, dim {dim}");
    println!(
        "{:>12} {:>6} {:>14} {:>16}",
        "kernel", "leaf", "GMAC/s 1 thr", "GMAC/s all thr"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    for kernel in gram_kernels() {
        let gram = || Sq8Gram::with_kernel(kernel).expect("a kernel this CPU has");
        for leaf in [256usize, 512, 1024] {
            let codes: Vec<u8> = (0..leaf * dim).map(|_| rng.random()).collect();
            // Each block does leaf²/2 pair products of `dim` MACs (the tiles above the diagonal).
            let macs = (leaf * leaf / 2 * dim) as f64;
            let blocks = match kernel {
                "scalar" => 2,
                _ => (4e10 / macs).ceil() as usize,
            };
            let one = {
                let (mut gram, mut out) = (gram(), Vec::new());
                let start = Instant::now();
                for _ in 0..blocks {
                    gram.l2(&codes, dim, &mut out);
                    std::hint::black_box(&out);
                }
                blocks as f64 * macs / start.elapsed().as_secs_f64() / 1e9
            };
            let all = {
                let start = Instant::now();
                (0..blocks * threads).into_par_iter().for_each_init(
                    || (gram(), Vec::new()),
                    |(gram, out), _| {
                        gram.l2(&codes, dim, out);
                        std::hint::black_box(&out);
                    },
                );
                (blocks * threads) as f64 * macs / start.elapsed().as_secs_f64() / 1e9
            };
            println!("{kernel:>12} {leaf:>6} {one:>14.1} {all:>16.1}");
        }
    }
}
