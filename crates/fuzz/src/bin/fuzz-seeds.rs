//! Writes each target's seeds (valid encodings and regression inputs) into
//! `<dir>/<target>/`, the corpus layout cargo-fuzz reads (`scripts/fuzz.sh` runs this).

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    for (name, _) in diskvec_fuzz::TARGETS {
        let out = dir.join(name);
        std::fs::create_dir_all(&out).expect("a corpus directory");
        let seeds = diskvec_fuzz::seeds::valid(name).into_iter().chain(
            diskvec_fuzz::seeds::regressions(name)
                .into_iter()
                .map(|(_, b)| b),
        );
        for bytes in seeds {
            let file = out.join(format!("seed-{:08x}", crc32fast::hash(&bytes)));
            std::fs::write(&file, &bytes).expect("a seed file");
        }
        println!(
            "{}: {} seeds",
            out.display(),
            std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0)
        );
    }
}
