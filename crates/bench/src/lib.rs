//! The benchmark harness: VectorDBBench's Performance case (load, concurrent phase, serial
//! phase) run on diskvec's index kinds and on peers, with reports; and synthetic datasets.

pub mod metrics;
pub mod synth;
pub mod config;
pub mod machine;
pub mod price;
