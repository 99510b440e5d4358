//! The numbers of a configuration's run, computed from its raw record the way
//! VectorDBBench computes them; field names follow VectorDBBench's result metrics.

use serde::{Deserialize, Serialize};

use crate::metrics::{accuracy, Latency};
use crate::price::PriceTable;
use crate::raw::{CaseRaw, RunRaw};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepPoint {
    pub knob: usize,
    pub concurrency: usize,
    pub qps: f64,
    pub recall: f64,
    pub ndcg: f64,
    pub latency_p99: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseResult {
    pub label: String,
    /// The search-time knob of the headline run: "ef" or "search_list", and its value.
    pub knob: String,
    pub knob_value: usize,
    /// Seconds: insert + optimize (build until searchable).
    pub load_duration: f64,
    pub insert_duration: f64,
    pub optimize_duration: f64,
    /// Highest QPS over the concurrency levels, and the level it came from.
    pub qps: f64,
    pub qps_concurrency: usize,
    pub conc_num_list: Vec<usize>,
    pub conc_qps_list: Vec<f64>,
    pub conc_latency_avg_list: Vec<f64>,
    pub conc_latency_p50_list: Vec<f64>,
    pub conc_latency_p95_list: Vec<f64>,
    pub conc_latency_p99_list: Vec<f64>,
    pub conc_failed_list: Vec<u64>,
    /// Serial phase, at k.
    pub recall: f64,
    pub ndcg: f64,
    /// Serial-phase latencies, milliseconds.
    pub serial_latency_avg: f64,
    pub serial_latency_p50: f64,
    pub serial_latency_p95: f64,
    pub serial_latency_p99: f64,
    pub serving_peak_rss_bytes: Option<u64>,
    pub serving_peak_is_clean: bool,
    pub load_peak_rss_bytes: Option<u64>,
    pub index_dram_bytes: Option<u64>,
    pub disk_bytes: u64,
    /// Node reads per query counted by the index (serial phase), where it counts them.
    pub reads_per_query: Option<f64>,
    /// Bytes the serving process read from storage per query, in 4 KiB units (serial phase).
    pub device_reads_per_query: Option<f64>,
    /// Price of the DRAM (peak RSS) and SSD capacity used, and QPS per dollar of it.
    pub cost_usd: Option<f64>,
    pub qps_per_dollar: Option<f64>,
    /// Mean watts during the headline level and QPS per watt, where RAPL is readable.
    pub watts: Option<f64>,
    pub qps_per_watt: Option<f64>,
    pub sweep: Vec<SweepPoint>,
    pub notes: Vec<String>,
}

pub fn summarize(
    raw: &CaseRaw,
    truth: &[Vec<i64>],
    k: usize,
    knob: &str,
    knob_value: usize,
    prices: &PriceTable,
) -> CaseResult {
    let lat: Vec<Latency> = raw
        .levels
        .iter()
        .map(|l| Latency::of(&l.latencies_ms))
        .collect();
    let best = raw
        .levels
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.qps().total_cmp(&b.1.qps()));
    let (best_qps, best_conc) = best.map_or((0.0, 0), |(_, l)| (l.qps(), l.concurrency));
    let (recall, ndcg) = accuracy(&raw.serial.answers, truth, k);
    let serial = Latency::of(&raw.serial.latencies_ms);
    let per_query = |x: Option<u64>| {
        x.filter(|_| raw.serial.queries > 0)
            .map(|v| v as f64 / raw.serial.queries as f64)
    };
    let cost = raw
        .serving_peak_rss_bytes
        .map(|rss| prices.cost(rss, raw.disk_bytes));
    let watts = best
        .and_then(|(_, l)| l.joules.map(|j| j / l.seconds))
        .filter(|w| *w > 0.0);
    let sweep = raw
        .sweep
        .iter()
        .map(|r| {
            let (recall, ndcg) = accuracy(&r.answers, truth, k);
            SweepPoint {
                knob: r.knob,
                concurrency: r.concurrency,
                qps: r.qps(),
                recall,
                ndcg,
                latency_p99: Latency::of(&r.latencies_ms).p99,
            }
        })
        .collect();
    CaseResult {
        label: raw.label.clone(),
        knob: knob.to_string(),
        knob_value,
        load_duration: raw.insert_seconds + raw.build_seconds,
        insert_duration: raw.insert_seconds,
        optimize_duration: raw.build_seconds,
        qps: best_qps,
        qps_concurrency: best_conc,
        conc_num_list: raw.levels.iter().map(|l| l.concurrency).collect(),
        conc_qps_list: raw.levels.iter().map(RunRaw::qps).collect(),
        conc_latency_avg_list: lat.iter().map(|l| l.avg).collect(),
        conc_latency_p50_list: lat.iter().map(|l| l.p50).collect(),
        conc_latency_p95_list: lat.iter().map(|l| l.p95).collect(),
        conc_latency_p99_list: lat.iter().map(|l| l.p99).collect(),
        conc_failed_list: raw.levels.iter().map(|l| l.errors).collect(),
        recall,
        ndcg,
        serial_latency_avg: serial.avg,
        serial_latency_p50: serial.p50,
        serial_latency_p95: serial.p95,
        serial_latency_p99: serial.p99,
        serving_peak_rss_bytes: raw.serving_peak_rss_bytes,
        serving_peak_is_clean: raw.serving_peak_is_clean,
        load_peak_rss_bytes: raw.load_peak_rss_bytes,
        index_dram_bytes: raw.index_dram_bytes,
        disk_bytes: raw.disk_bytes,
        reads_per_query: per_query(raw.serial.index_reads),
        device_reads_per_query: per_query(raw.serial.device_read_bytes).map(|b| b / 4096.0),
        cost_usd: cost,
        qps_per_dollar: cost.filter(|c| *c > 0.0).map(|c| best_qps / c),
        watts,
        qps_per_watt: watts.map(|w| best_qps / w),
        sweep,
        notes: raw.notes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: usize, seconds: f64, lat: &[f64], answers: Vec<Vec<i64>>) -> RunRaw {
        RunRaw {
            concurrency: c,
            knob: 10,
            seconds,
            queries: lat.len() as u64,
            latencies_ms: lat.to_vec(),
            answers,
            ..Default::default()
        }
    }

    #[test]
    fn headline_numbers_come_from_the_right_phase() {
        let truth = vec![vec![1, 2], vec![3, 4]];
        let raw = CaseRaw {
            label: "x".into(),
            insert_seconds: 1.0,
            build_seconds: 2.5,
            serving_peak_rss_bytes: Some(2_000_000_000),
            disk_bytes: 10_000_000_000,
            levels: vec![
                run(1, 2.0, &[1.0; 10], vec![]),
                run(
                    5,
                    2.0,
                    &[2.0, 2.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0],
                    vec![],
                ),
                run(10, 2.0, &[9.0; 8], vec![]),
            ],
            serial: RunRaw {
                device_read_bytes: Some(2 * 4096 * 3),
                index_reads: Some(7),
                ..run(1, 1.0, &[1.0, 3.0], vec![vec![1, 9], vec![4, 3]])
            },
            ..Default::default()
        };
        let prices = PriceTable {
            dram_usd_per_gb: 10.0,
            ssd_usd_per_gb: 1.0,
            source: String::new(),
        };
        let r = summarize(&raw, &truth, 2, "ef", 10, &prices);
        assert_eq!(r.load_duration, 3.5);
        // 12 queries in 2 s at concurrency 5 is the most.
        assert_eq!((r.qps, r.qps_concurrency), (6.0, 5));
        assert_eq!(r.conc_qps_list, vec![5.0, 6.0, 4.0]);
        assert_eq!(r.recall, 0.75);
        assert_eq!(r.serial_latency_p50, 2.0);
        assert_eq!(r.reads_per_query, Some(3.5));
        assert_eq!(r.device_reads_per_query, Some(3.0));
        assert_eq!(r.cost_usd, Some(30.0));
        assert_eq!(r.qps_per_dollar, Some(0.2));
        assert_eq!((r.watts, r.qps_per_watt), (None, None));
    }
}
