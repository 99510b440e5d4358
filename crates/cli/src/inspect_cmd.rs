use std::path::PathBuf;

use anyhow::Context;
use diskvec_index::diskann::{layout_version_for, DiskIndex, OpenOptions, WalkCodes};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub index: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let idx = DiskIndex::open(
        &args.index,
        &OpenOptions {
            cache_nodes: Some(0),
            navigation: true,
            ..Default::default()
        },
    )
    .with_context(|| format!("opening the index {}", args.index.display()))?;
    let h = idx.header();
    let l = idx.layout();
    let version = layout_version_for(h.element);
    let raw = h.count as f64 * h.dim as f64 * 4.0;
    let nav = idx.navigation();
    let nav_bytes = nav.map_or(0, |n| n.dram_bytes());
    let dram = (idx.dram_bytes() - nav_bytes) as f64;
    let walk = |n: &diskvec_index::diskann::Navigation| match n.walk {
        WalkCodes::Sq4 => "4-bit",
        WalkCodes::Pq => "pq",
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "count": h.count, "dim": h.dim, "metric": h.metric.name(), "max_degree": h.max_degree,
                "build_list": h.build_list, "alpha": h.alpha, "pq_bytes": h.pq_bytes,
                "layout_version": version, "dtype": h.element.name(), "node_bytes": l.node_bytes,
                "nodes_per_sector": l.nodes_per_sector, "sectors_per_node": l.sectors_per_node,
                "medoid": h.medoid, "dram_bytes": dram as u64, "disk_bytes": idx.disk_bytes(),
                "navigation": nav.map(|n| serde_json::json!({
                    "dram_bytes": nav_bytes, "walk_codes": walk(n), "code_recall": n.code_recall,
                    "codes_decide": n.codes_decide(),
                })),
                "navigation_off": idx.navigation_stepped_aside().map(|off| serde_json::json!({
                    "why": off.to_string(), "code_recall": off.code_recall,
                    "would_take_bytes": off.nav_bytes,
                })),
                "raw_vector_bytes": raw as u64,
                "paths": idx.placement().0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "stripe_bytes": idx.placement().1, "mirrored": idx.mirrored(),
            })
        );
        return Ok(());
    }
    println!("index          {}", args.index.display());
    println!("layout version {version}");
    println!(
        "vectors        {} x {} dims, metric {}, stored as {}",
        h.count, h.dim, h.metric, h.element
    );
    println!(
        "graph          max degree {}, build list {}, alpha {}, entry node {}",
        h.max_degree, h.build_list, h.alpha, h.medoid
    );
    println!(
        "node record    {} B, {} per 4 KiB sector{}",
        l.node_bytes,
        l.nodes_per_sector,
        if l.sectors_per_node > 1 {
            format!(", {} sectors each", l.sectors_per_node)
        } else {
            String::new()
        }
    );
    println!("PQ code        {} B per vector", h.pq_bytes);
    println!(
        "DRAM           {:.2} MiB with no node cache ({:.1}% of the raw vectors)",
        dram / 1048576.0,
        100.0 * dram / raw
    );
    match nav {
        Some(n) => println!(
            "navigation     {:.2} MiB more with --navigation ({:.1}% of the raw vectors); walk by {} codes; \
             4-bit codes found {:.0}% of sampled neighbours ({})",
            nav_bytes as f64 / 1048576.0,
            100.0 * nav_bytes as f64 / raw,
            walk(n),
            100.0 * n.code_recall,
            if n.codes_decide() {
                "they decide candidates unread"
            } else {
                "too few: every candidate is read"
            }
        ),
        None => match (idx.navigation_stepped_aside(), idx.navigation_problem()) {
            (Some(off), _) => println!("navigation     left off by the build: {off}"),
            (None, Some(problem)) => println!("navigation     none: {problem}"),
            (None, None) => println!("navigation     none"),
        },
    }
    let (files, stripe) = idx.placement();
    println!(
        "disk           {:.2} MiB of nodes",
        idx.disk_bytes() as f64 / 1048576.0
    );
    if files.len() == 1 {
        println!("placement      one path: {}", files[0].display());
    } else {
        println!(
            "placement      {} paths, {} KiB stripes:",
            files.len(),
            stripe / 1024
        );
        for f in &files {
            println!("                 {}", f.display());
        }
    }
    Ok(())
}
