//! Recovery: validating the log files found at open and replaying their records.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::record::{self, Parsed, FILE_HEADER_LEN, RECORD_HEADER_LEN};
use super::{io_err, Recovered, ReplayFn, TornTail, WalError};
use crate::storage::Storage;

/// A log file as the writer keeps track of it.
#[derive(Debug, Clone)]
pub(super) struct LogFile {
    pub first_op: u64,
    pub path: PathBuf,
    /// Its length; for the file being written, its length when the writer took it over.
    pub bytes: u64,
}

/// What open found: the files to continue with, and the op the next append gets.
pub(super) struct Recovery {
    /// Sorted by first op; empty when the log has no file yet.
    pub log_files: Vec<LogFile>,
    pub next_op: u64,
    pub recovered: Recovered,
}

/// The records of one file, validated.
struct Scan {
    records: Vec<(u64, Range<usize>)>,
    /// Where a torn tail starts, and how many bytes it has (only ever set for the last file).
    torn: Option<(usize, usize)>,
}

fn corrupt(file: &Path, offset: usize, what: impl Into<String>) -> WalError {
    WalError::Corrupt {
        file: file.to_path_buf(),
        offset: offset as u64,
        what: what.into(),
    }
}

/// Validates the records of a file whose header was checked. In the last file, a bad record
/// with no valid record anywhere after it is a torn tail (an append a crash interrupted);
/// anywhere else a bad record is corruption and refuses the open.
fn scan_file(
    path: &Path,
    data: &[u8],
    first_op: u64,
    max_record_bytes: u32,
    last: bool,
) -> Result<Scan, WalError> {
    let mut records = Vec::new();
    let mut pos = FILE_HEADER_LEN;
    let mut expect = first_op;
    while pos < data.len() {
        match record::parse_at(data, pos, max_record_bytes) {
            Parsed::Record { op, body, end } => {
                if op != expect {
                    let what = if expect == first_op {
                        format!("first record has op {op}, but the file name says op {first_op}")
                    } else {
                        format!("op {op} follows op {}", expect - 1)
                    };
                    return Err(corrupt(path, pos, what));
                }
                records.push((op, body));
                expect += 1;
                pos = end;
            }
            Parsed::Refused(what) => return Err(corrupt(path, pos, what)),
            Parsed::Bad(what) => {
                if !last {
                    return Err(corrupt(path, pos, what));
                }
                if let Some((at, op)) = valid_record_after(data, pos, expect - 1, max_record_bytes)
                {
                    return Err(corrupt(
                        path,
                        pos,
                        format!(
                            "{what}, yet a valid record (op {op}) follows at byte {at}: \
                             damage in the middle of the log, not a torn tail"
                        ),
                    ));
                }
                return Ok(Scan {
                    records,
                    torn: Some((pos, data.len() - pos)),
                });
            }
        }
    }
    Ok(Scan {
        records,
        torn: None,
    })
}

/// The first offset after `bad` holding a whole record with a valid CRC and an op after
/// `last_good`. Only headers whose op could follow `last_good` in the bytes left are
/// checksummed, so garbage and zeros are skipped without hashing (linear in practice).
fn valid_record_after(
    data: &[u8],
    bad: usize,
    last_good: u64,
    max_record_bytes: u32,
) -> Option<(usize, u64)> {
    let max_later_records = ((data.len() - bad) / RECORD_HEADER_LEN) as u64 + 1;
    let mut at = bad + 1;
    while at + RECORD_HEADER_LEN <= data.len() {
        let op = u64::from_le_bytes(data[at + 8..at + 16].try_into().unwrap());
        if op > last_good && op - last_good <= max_later_records {
            if let Parsed::Record { op, .. } = record::parse_at(data, at, max_record_bytes) {
                return Some((at, op));
            }
        }
        at += 1;
    }
    None
}

/// Opens the log in `dir` (already existing): validates every file, replays the records with
/// op >= `from` through `apply` in op order, cuts a torn tail, and says where to continue.
pub(super) fn recover(
    storage: &dyn Storage,
    dir: &Path,
    max_record_bytes: u32,
    from: u64,
    apply: &mut ReplayFn<'_>,
) -> Result<Recovery, WalError> {
    let from = from.max(1);
    let mut files: Vec<(u64, PathBuf)> = storage
        .list(dir)
        .map_err(io_err("list", dir))?
        .iter()
        .filter_map(|name| record::parse_file_name(name).map(|op| (op, dir.join(name))))
        .collect();
    files.sort();
    if let Some((0, path)) = files.first() {
        return Err(corrupt(
            path,
            0,
            "ops start at 1; a file cannot start at op 0",
        ));
    }

    // A crash between creating a file and syncing its header leaves a last file with no
    // whole header; no record can follow it (records are written only after the header is
    // durable), so it holds nothing and goes.
    let mut last_data = None;
    let mut removed_first = None;
    if let Some((first, path)) = files.last().cloned() {
        let data = storage.read(&path).map_err(io_err("read", &path))?;
        match record::check_file_header(&data) {
            Err(why) if data.len() <= FILE_HEADER_LEN => {
                log::warn!(
                    "{}: removing a log file whose creation a crash interrupted ({why})",
                    path.display()
                );
                storage
                    .remove_file(&path)
                    .map_err(io_err("remove", &path))?;
                storage.sync_dir(dir).map_err(io_err("sync", dir))?;
                files.pop();
                removed_first = Some(first);
            }
            _ => last_data = Some(data),
        }
    }
    let Some((last_first, last_path)) = files.last().cloned() else {
        // Numbering starts where the caller's state ends, so ops never go backwards.
        let next_op = from.max(removed_first.unwrap_or(1));
        return Ok(Recovery {
            log_files: Vec::new(),
            next_op,
            recovered: Recovered {
                last_op: next_op - 1,
                replayed: 0,
                torn_tail: None,
                files: 0,
            },
        });
    };
    let last_data = match last_data {
        Some(d) => d,
        None => storage
            .read(&last_path)
            .map_err(io_err("read", &last_path))?,
    };

    let first_on_disk = files[0].0;
    if from < first_on_disk {
        return Err(WalError::Invalid(format!(
            "{}: replay from op {from} asked for, but the log starts at op {first_on_disk}: \
             ops {from}..{} were truncated while the caller still needs them",
            dir.display(),
            first_on_disk - 1
        )));
    }
    // The last file first: it says where the log ends, which must be checked against `from`
    // before anything is applied.
    record::check_file_header(&last_data).map_err(|w| corrupt(&last_path, 0, w))?;
    let last_scan = scan_file(&last_path, &last_data, last_first, max_record_bytes, true)?;
    let last_op = last_first + last_scan.records.len() as u64 - 1;
    if from > last_op + 1 {
        return Err(WalError::Invalid(format!(
            "{}: replay from op {from} asked for, but the log ends at op {last_op}: the caller \
             holds state from ops the log never made durable",
            dir.display()
        )));
    }

    let mut apply_one = |op: u64, body: &[u8]| -> Result<bool, WalError> {
        if op < from {
            return Ok(false);
        }
        apply(op, body).map_err(|message| WalError::Apply { op, message })?;
        Ok(true)
    };
    let mut log_files = Vec::with_capacity(files.len());
    let mut replayed = 0u64;
    let mut expect = first_on_disk;
    for (first, path) in &files[..files.len() - 1] {
        if *first != expect {
            return Err(corrupt(path, 0, gap(*first, expect)));
        }
        let data = storage.read(path).map_err(io_err("read", path))?;
        record::check_file_header(&data).map_err(|w| corrupt(path, 0, w))?;
        let scan = scan_file(path, &data, *first, max_record_bytes, false)?;
        for (op, body) in &scan.records {
            replayed += apply_one(*op, &data[body.clone()])? as u64;
        }
        expect = first + scan.records.len() as u64;
        log_files.push(LogFile {
            first_op: *first,
            path: path.clone(),
            bytes: data.len() as u64,
        });
    }
    if last_first != expect {
        return Err(corrupt(&last_path, 0, gap(last_first, expect)));
    }
    for (op, body) in &last_scan.records {
        replayed += apply_one(*op, &last_data[body.clone()])? as u64;
    }

    let mut valid_len = last_data.len();
    let mut torn_tail = None;
    if let Some((offset, cut)) = last_scan.torn {
        log::warn!(
            "{}: cutting a torn tail of {cut} bytes at byte {offset} (a write a crash \
             interrupted; the log ends at op {last_op})",
            last_path.display()
        );
        storage
            .truncate(&last_path, offset as u64)
            .map_err(io_err("truncate", &last_path))?;
        valid_len = offset;
        torn_tail = Some(TornTail {
            file: last_path.clone(),
            offset: offset as u64,
            bytes_cut: cut as u64,
        });
    }
    log_files.push(LogFile {
        first_op: last_first,
        path: last_path,
        bytes: valid_len as u64,
    });
    Ok(Recovery {
        recovered: Recovered {
            last_op,
            replayed,
            torn_tail,
            files: log_files.len(),
        },
        log_files,
        next_op: last_op + 1,
    })
}

fn gap(first: u64, expect: u64) -> String {
    format!(
        "file starts at op {first}, but the previous file ends at op {}",
        expect - 1
    )
}
