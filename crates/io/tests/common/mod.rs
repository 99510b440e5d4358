//! Helpers the engine tests share: which engines run here, numbered volumes, reading
//! every sector.
#![allow(dead_code)]

use diskvec_io::{EngineChoice, ReadEngine, SECTOR};

/// Both engines where io_uring can run here (asked for by name, so a silent fallback to
/// pread cannot pass for it); pread alone elsewhere, unless DISKVEC_REQUIRE_URING is set
/// (CI sets it), which makes a missing io_uring a failure.
pub fn engines() -> Vec<EngineChoice> {
    if diskvec_io::uring_available() {
        return vec![EngineChoice::Pread, EngineChoice::Uring];
    }
    assert!(
        std::env::var_os("DISKVEC_REQUIRE_URING").is_none(),
        "io_uring is required (DISKVEC_REQUIRE_URING) but cannot be set up here"
    );
    eprintln!("io_uring is unavailable here: only the pread engine is tested");
    vec![EngineChoice::Pread]
}

/// The engine a choice must give.
pub fn kind_of(choice: EngineChoice) -> diskvec_io::EngineKind {
    match choice {
        EngineChoice::Uring => diskvec_io::EngineKind::Uring,
        _ => diskvec_io::EngineKind::Pread,
    }
}

/// Stripes `sectors` sectors over `targets`, each starting with its own number.
pub fn write_numbered_volume(
    targets: &[std::path::PathBuf],
    stripe: u64,
    mirror: bool,
    sectors: u64,
) {
    let logical = sectors * SECTOR as u64;
    let mut w = diskvec_io::StripedWriter::create(
        &diskvec_io::storage::FsStorage,
        targets,
        stripe,
        mirror,
        logical,
    )
    .unwrap();
    for s in 0..sectors {
        let mut sector = vec![0u8; SECTOR];
        sector[..8].copy_from_slice(&s.to_le_bytes());
        w.write_all(&sector).unwrap();
    }
    w.finish().unwrap();
}

/// Reads every sector of a volume through one engine; returns the per-read results.
pub fn read_all(eng: &mut dyn ReadEngine, sectors: u64) -> Vec<Result<u64, String>> {
    let mut out = vec![Err("not read".to_string()); sectors as usize];
    let (mut next, mut seen) = (0u64, 0u64);
    let mut done = Vec::new();
    while seen < sectors {
        while next < sectors && eng.free_slots() > 0 {
            eng.submit(next * SECTOR as u64, SECTOR, next).unwrap();
            next += 1;
        }
        done.clear();
        eng.complete(1, &mut done).unwrap();
        for d in &done {
            out[d.tag as usize] = match &d.result {
                Ok(()) => Ok(u64::from_le_bytes(
                    eng.buffer(d.slot)[..8].try_into().unwrap(),
                )),
                Err(e) => Err(e.to_string()),
            };
            seen += 1;
        }
        for d in &done {
            eng.release(d.slot);
        }
    }
    out
}
