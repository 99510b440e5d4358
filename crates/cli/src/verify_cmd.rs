use std::path::PathBuf;

use anyhow::Context;
use diskvec_index::diskann::verify;

use crate::progress::Bars;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub index: PathBuf,
    /// Also print the findings as one JSON object (the last line of stdout).
    #[arg(long)]
    pub json: bool,
}

/// Prints every damaged sector (file and offset) and fails if there is any.
pub fn run(args: Args) -> anyhow::Result<()> {
    let bars = Bars::new();
    let report = verify(&args.index, &bars)
        .with_context(|| format!("verifying {}", args.index.display()))?;
    bars.finish();
    for d in &report.damage {
        println!("bad: {d}");
    }
    println!(
        "{}: checked {} sectors in {} files: {}",
        args.index.display(),
        report.sectors,
        report.files,
        if report.damage.is_empty() {
            "all intact".to_string()
        } else {
            format!("{} problems", report.damage.len())
        }
    );
    if args.json {
        let damage: Vec<serde_json::Value> = report
            .damage
            .iter()
            .map(|d| {
                serde_json::json!({
                    "file": d.file.display().to_string(), "offset": d.offset, "problem": d.problem,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"files": report.files, "sectors": report.sectors, "damage": damage})
        );
    }
    anyhow::ensure!(
        report.damage.is_empty(),
        "{} is damaged: {} problems",
        args.index.display(),
        report.damage.len()
    );
    Ok(())
}
