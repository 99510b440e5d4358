//! Configurations to benchmark, written `kind[:key=value,...]` on the command line, e.g.
//! `hnsw`, `diskann:paths=4`, `hnswlib:ef=64`, `milvus:index=diskann`. A sweep of the
//! search-time knob (ef or L) is written with slashes: `hnsw:sweep=16/32/64/100/200`.

use std::collections::BTreeMap;

use anyhow::{bail, Context};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// diskvec's in-memory HNSW.
    Hnsw,
    /// diskvec's disk index.
    Diskann,
    /// Peers, run by the Python driver in their own process.
    Hnswlib,
    Diskannpy,
    Milvus,
}

impl Kind {
    fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "hnsw" => Self::Hnsw,
            "diskann" => Self::Diskann,
            "hnswlib" => Self::Hnswlib,
            "diskannpy" => Self::Diskannpy,
            "milvus" => Self::Milvus,
            other => bail!(
                "unknown configuration kind {other:?}; expected hnsw, diskann, hnswlib, diskannpy or milvus"
            ),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Hnsw => "hnsw",
            Self::Diskann => "diskann",
            Self::Hnswlib => "hnswlib",
            Self::Diskannpy => "diskannpy",
            Self::Milvus => "milvus",
        }
    }

    /// Peers run in the Python driver; diskvec's kinds in a child `diskvec` process.
    pub fn is_peer(self) -> bool {
        matches!(self, Self::Hnswlib | Self::Diskannpy | Self::Milvus)
    }

    /// The options this kind understands.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Self::Hnsw => &["m", "ef_construction", "ef", "sweep"],
            Self::Diskann => &[
                "paths",
                "dirs",
                "r",
                "l_build",
                "pq_bytes",
                "search_list",
                "beam_width",
                "queries_per_thread",
                "cache_nodes",
                "stripe_kib",
                "mirror",
                "queue_depth",
                "sweep",
            ],
            Self::Hnswlib => &["m", "ef_construction", "ef", "sweep", "python"],
            Self::Diskannpy => &[
                "r",
                "l_build",
                "pq_bytes",
                "search_list",
                "beam_width",
                "cache_nodes",
                "sweep",
                "python",
            ],
            Self::Milvus => &[
                "index",
                "m",
                "ef_construction",
                "ef",
                "search_list",
                "sweep",
                "build_timeout",
                "python",
            ],
        }
    }

    /// True for the in-memory HNSW kinds (whose DRAM the briefs price).
    pub fn in_memory(self, options: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Hnsw | Self::Hnswlib => true,
            Self::Milvus => options.get("index").is_none_or(|i| i == "hnsw"),
            _ => false,
        }
    }
}

/// One configuration: a kind and its options, as written.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub kind: Kind,
    pub options: BTreeMap<String, String>,
    /// The name in reports: the kind and its options (sorted), without `python`.
    pub label: String,
}

impl std::str::FromStr for Config {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let kind = Kind::parse(kind.trim())?;
        let mut options = BTreeMap::new();
        for pair in rest.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                bail!("{s}: option {pair:?} is not key=value");
            };
            let k = k.trim().to_string();
            if !kind.keys().contains(&k.as_str()) {
                bail!(
                    "{s}: {} does not take {k:?}; it takes {}",
                    kind.name(),
                    kind.keys().join(", ")
                );
            }
            if options.insert(k.clone(), v.trim().to_string()).is_some() {
                bail!("{s}: {k} is given twice");
            }
        }
        let mut c = Self {
            kind,
            options,
            label: String::new(),
        };
        // Where a peer runs and which extra points are measured are not what it is: the
        // name in reports leaves out `python` and `sweep`.
        c.label = c.written(&["python", "sweep"]);
        c.sweep()?;
        if kind == Kind::Milvus {
            let index = c.text("index", "hnsw");
            if index != "hnsw" && index != "diskann" {
                bail!("{s}: milvus index must be hnsw or diskann, not {index:?}");
            }
        }
        Ok(c)
    }
}

impl Config {
    /// The configuration written back, options sorted, leaving out `skip`.
    fn written(&self, skip: &[&str]) -> String {
        let shown: Vec<String> = self
            .options
            .iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if shown.is_empty() {
            self.kind.name().to_string()
        } else {
            format!("{}:{}", self.kind.name(), shown.join(","))
        }
    }

    /// The whole configuration as text, to hand to a child process.
    pub fn spec(&self) -> String {
        self.written(&[])
    }

    pub fn text(&self, key: &str, default: &str) -> String {
        self.options
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    pub fn usize(&self, key: &str, default: usize) -> anyhow::Result<usize> {
        match self.options.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .with_context(|| format!("{}: {key}={v:?} is not a whole number", self.label)),
        }
    }

    pub fn optional_usize(&self, key: &str) -> anyhow::Result<Option<usize>> {
        self.options
            .contains_key(key)
            .then(|| self.usize(key, 0))
            .transpose()
    }

    pub fn flag(&self, key: &str) -> anyhow::Result<bool> {
        match self.options.get(key).map(String::as_str) {
            None | Some("false") | Some("0") | Some("no") => Ok(false),
            Some("true") | Some("1") | Some("yes") | Some("") => Ok(true),
            Some(v) => bail!("{}: {key}={v:?} is not true or false", self.label),
        }
    }

    /// The search-time knob's name for this kind: ef for HNSW kinds, L otherwise.
    pub fn knob(&self) -> &'static str {
        if self.kind.in_memory(&self.options) {
            "ef"
        } else {
            "search_list"
        }
    }

    /// The knob's value for the headline run (the briefs use ef = 100; L = 100 alike).
    pub fn knob_value(&self) -> anyhow::Result<usize> {
        self.usize(self.knob(), 100)
    }

    /// Extra knob values for the QPS-recall curve.
    pub fn sweep(&self) -> anyhow::Result<Vec<usize>> {
        let Some(v) = self.options.get("sweep") else {
            return Ok(Vec::new());
        };
        v.split('/')
            .map(|x| {
                x.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .with_context(|| {
                        format!("{}: sweep value {x:?} is not a positive number", self.label)
                    })
            })
            .collect()
    }

    /// The options as JSON, for the Python driver.
    pub fn options_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.options).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kinds_options_and_sweeps() {
        let c: Config = "diskann:paths=4,sweep=20/50/100".parse().unwrap();
        assert_eq!(c.kind, Kind::Diskann);
        assert_eq!(c.usize("paths", 1).unwrap(), 4);
        assert_eq!(c.usize("r", 64).unwrap(), 64);
        assert_eq!(c.sweep().unwrap(), vec![20, 50, 100]);
        assert_eq!(c.knob(), "search_list");
        let h: Config = "hnsw".parse().unwrap();
        assert_eq!((h.knob(), h.knob_value().unwrap()), ("ef", 100));
        assert!(!h.kind.is_peer());
        let m: Config = "milvus:index=diskann,search_list=50".parse().unwrap();
        assert!(m.kind.is_peer());
        assert_eq!((m.knob(), m.knob_value().unwrap()), ("search_list", 50));
        let p: Config = "hnswlib:python=/v/bin/python,m=8".parse().unwrap();
        assert_eq!(p.label, "hnswlib:m=8");
        assert_eq!(c.label, "diskann:paths=4");
        assert_eq!(c.spec().parse::<Config>().unwrap(), c);
        let m2: Config = "milvus".parse().unwrap();
        assert_eq!(m2.knob(), "ef");
    }

    #[test]
    fn mistakes_are_named() {
        let err = |s: &str| s.parse::<Config>().unwrap_err().to_string();
        assert!(err("faiss").contains("unknown configuration kind"));
        assert!(err("hnsw:paths=2").contains("does not take \"paths\""));
        assert!(err("hnsw:m").contains("not key=value"));
        assert!(err("hnsw:m=3,m=4").contains("twice"));
        assert!(err("hnsw:sweep=10/x").contains("sweep value"));
        assert!(err("milvus:index=ivf").contains("hnsw or diskann"));
        let c: Config = "hnsw:m=abc".parse().unwrap();
        assert!(c
            .usize("m", 30)
            .unwrap_err()
            .to_string()
            .contains("whole number"));
        let d: Config = "diskann:mirror=maybe".parse().unwrap();
        assert!(d.flag("mirror").is_err());
    }
}
