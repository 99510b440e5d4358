//! The write-ahead log as a file found at open: any bytes under a log file's name are
//! refused as corrupt, or recovered (a torn tail cut) into a log that replays ops in order
//! from the file's first and keeps what is appended after.

use std::sync::Arc;

use diskvec_db::storage::{FsStorage, Storage};
use diskvec_db::wal::{Wal, WalOptions};

/// The name of a log file whose first record is op 1.
const FIRST_FILE: &str = "wal-00000000000000000001.log";

/// Largest record body a fuzzed log may hold: a length field must not size an allocation.
const MAX_RECORD: u32 = 1 << 16;

fn options() -> WalOptions {
    WalOptions {
        max_record_bytes: MAX_RECORD,
        ..WalOptions::default()
    }
}

/// The records a log replayed at open: op and body.
type Replayed = Vec<(u64, Vec<u8>)>;

/// Opens the log in `dir`, collecting the replayed records.
fn open(dir: &std::path::Path) -> Result<(Wal, Replayed), String> {
    let storage: Arc<dyn Storage> = Arc::new(FsStorage);
    let mut replayed = Vec::new();
    let (wal, _) = Wal::open(storage, dir, options(), 1, &mut |op, body| {
        replayed.push((op, body.to_vec()));
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok((wal, replayed))
}

/// Bytes of the file header (magic, version, CRC-32C of both) and of a record's header
/// (body length, CRC-32C of op and body, op).
const FILE_HEADER: usize = 16;
const RECORD_HEADER: usize = 16;

/// A copy of a log file image with its header's and every whole record's CRC recomputed,
/// so mutations reach what the checksums guard (lengths, op order, the torn-tail rule).
pub fn reseal(data: &[u8]) -> Vec<u8> {
    let mut s = data.to_vec();
    if s.len() < FILE_HEADER {
        return s;
    }
    let crc = crc32c::crc32c(&s[..12]);
    s[12..16].copy_from_slice(&crc.to_le_bytes());
    let mut pos = FILE_HEADER;
    while s.len() - pos >= RECORD_HEADER {
        let len = u32::from_le_bytes(s[pos..pos + 4].try_into().unwrap()) as usize;
        let body = pos + RECORD_HEADER;
        if len > s.len() - body {
            break;
        }
        let crc =
            crc32c::crc32c_append(crc32c::crc32c(&s[pos + 8..pos + 16]), &s[body..body + len]);
        s[pos + 4..pos + 8].copy_from_slice(&crc.to_le_bytes());
        pos = body + len;
    }
    s
}

/// `data` as the only log file, as found and resealed: refused, or replayed as ops 1, 2,
/// ... whose bodies are within the limit; then an append gets the next op and is the last
/// record replayed by a second open.
pub fn wal_file(data: &[u8]) {
    one_file(data);
    one_file(&reseal(data));
}

fn one_file(data: &[u8]) {
    let dir = tempfile::tempdir().expect("a scratch directory");
    std::fs::write(dir.path().join(FIRST_FILE), data).expect("writing the log file");
    let opened = crate::bounded(data.len(), 4, crate::SLACK, || open(dir.path()));
    let Ok((wal, replayed)) = opened else {
        return;
    };
    for (i, (op, body)) in replayed.iter().enumerate() {
        assert_eq!(*op, i as u64 + 1, "ops replayed out of order");
        assert!(
            body.len() <= MAX_RECORD as usize,
            "a record over the limit replayed"
        );
    }
    let next = replayed.len() as u64 + 1;
    let op = wal
        .append(b"appended after recovery")
        .expect("an append after recovery");
    assert_eq!(
        op, next,
        "the append did not get the op after the last replayed"
    );
    wal.close().expect("closing the log");
    let (_, again) = open(dir.path()).expect("a log this process wrote opens");
    assert_eq!(
        again.len() as u64,
        next,
        "records lost or gained across a reopen"
    );
    assert_eq!(
        again.last().map(|(op, b)| (*op, b.as_slice())),
        Some((next, &b"appended after recovery"[..])),
        "the append was not replayed last"
    );
    assert_eq!(
        &again[..replayed.len()],
        &replayed[..],
        "a reopen replayed other records"
    );
}

/// A log file of a few records, as the writer leaves it.
pub fn wal_file_seed() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let (wal, _) = open(dir.path()).expect("a new log");
    for body in [&b"first"[..], b"", &[7u8; 300]] {
        wal.append(body).expect("an append");
    }
    wal.close().expect("closing the log");
    std::fs::read(dir.path().join(FIRST_FILE)).expect("the log file")
}
