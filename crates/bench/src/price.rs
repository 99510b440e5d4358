//! What memory and storage cost, for QPS per dollar: the briefs divide QPS by the price of
//! the DRAM (HNSW) or the SSD capacity (DiskANN) the index uses. Users edit the table to
//! their own prices with `--prices FILE` (JSON with the same fields).

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PriceTable {
    /// US dollars per GB (10^9 bytes) of server DRAM.
    pub dram_usd_per_gb: f64,
    /// US dollars per GB of enterprise NVMe SSD.
    pub ssd_usd_per_gb: f64,
    /// Where the figures come from and when they were taken.
    pub source: String,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self {
            // A 4 TB kit of 16 x 256 GB DDR5-6400 RDIMMs listed at $76,999 (Dec 2025).
            dram_usd_per_gb: 18.8,
            // 30 TB TLC enterprise SSDs at $9,000-11,000 in Q1 2026 (midpoint / 30,720 GB).
            ssd_usd_per_gb: 0.33,
            source: "defaults of 2026-11: DDR5 RDIMM from a 4 TB kit list price reported \
                     2025-12-29 (techpowerup via tuttotech.net); enterprise TLC NVMe from \
                     Q1-2026 30 TB contract prices (oscoo.com enterprise SSD guide 2026)"
                .into(),
        }
    }
}

impl PriceTable {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the price table {}", path.display()))?;
        let t: Self = serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: a price table is JSON with dram_usd_per_gb, ssd_usd_per_gb and source",
                path.display()
            )
        })?;
        anyhow::ensure!(
            t.dram_usd_per_gb > 0.0 && t.ssd_usd_per_gb > 0.0,
            "{}: prices must be positive",
            path.display()
        );
        Ok(t)
    }

    /// Dollars of the DRAM and SSD capacity a configuration occupies.
    pub fn cost(&self, dram_bytes: u64, disk_bytes: u64) -> f64 {
        dram_bytes as f64 / 1e9 * self.dram_usd_per_gb
            + disk_bytes as f64 / 1e9 * self.ssd_usd_per_gb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_and_loading() {
        let t = PriceTable {
            dram_usd_per_gb: 10.0,
            ssd_usd_per_gb: 0.5,
            source: "test".into(),
        };
        assert!((t.cost(2_000_000_000, 4_000_000_000) - 22.0).abs() < 1e-9);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prices.json");
        std::fs::write(&p, serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(PriceTable::load(&p).unwrap(), t);
        std::fs::write(
            &p,
            r#"{"dram_usd_per_gb": -1, "ssd_usd_per_gb": 1, "source": ""}"#,
        )
        .unwrap();
        assert!(PriceTable::load(&p).is_err());
        std::fs::write(&p, "{").unwrap();
        assert!(PriceTable::load(&p)
            .unwrap_err()
            .to_string()
            .contains("price table"));
    }
}
