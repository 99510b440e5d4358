//! The benchmark harness: VectorDBBench's Performance case (load, concurrent phase, serial
//! phase) run on diskvec's index kinds and on peers, with reports; and synthetic datasets.

pub mod case;
pub mod charts;
pub mod config;
pub mod harness;
pub mod head;
pub mod machine;
pub mod metrics;
pub mod phases;
pub mod price;
pub mod raw;
pub mod report;
pub mod result;
pub mod running_truth;
pub mod synth;
pub mod truth;
