//! The bytes of a log file: its header and its records (layout drawn in docs/format.md).

use std::ops::Range;

pub(super) const MAGIC: [u8; 8] = *b"DVWAL\0\0\0";
pub(super) const VERSION: u32 = 1;
pub(super) const FILE_HEADER_LEN: usize = 16;
pub(super) const RECORD_HEADER_LEN: usize = 16;

/// `wal-<first op, 20 digits>.log`: zero-padded so that name order is op order.
pub(super) fn file_name(first_op: u64) -> String {
    format!("wal-{first_op:020}.log")
}

/// The first op of a file named by [`file_name`]; `None` for any other name.
pub(super) fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(super) fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a file's header; the error says what is wrong with it.
pub(super) fn check_file_header(data: &[u8]) -> Result<(), String> {
    if data.len() < FILE_HEADER_LEN {
        return Err(format!(
            "file of {} bytes is shorter than its {FILE_HEADER_LEN}-byte header",
            data.len()
        ));
    }
    if data[..8] != MAGIC {
        return Err("bad magic: not a write-ahead log file".into());
    }
    let crc = u32::from_le_bytes(data[12..16].try_into().unwrap());
    if crc != crc32c::crc32c(&data[..12]) {
        return Err("header crc mismatch".into());
    }
    // Checked after the CRC so that a damaged header is reported as damaged.
    let version = u32::from_le_bytes(data[8..12].try_into().unwrap());
    if version != VERSION {
        return Err(format!(
            "unsupported log version {version} (this build reads {VERSION})"
        ));
    }
    Ok(())
}

/// The CRC a record carries: over its op (u64 LE) followed by its body.
pub(super) fn record_crc(op: u64, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&op.to_le_bytes()), body)
}

/// A record built before its op is known, so that copying and checksumming the body happen
/// outside the writer's lock; [`Encoded::seal`] fills in the op and the CRC.
pub(super) struct Encoded {
    pub buf: Vec<u8>,
    body_crc: u32,
}

/// A record's body built in place behind room for its header, so that the body a caller
/// encodes is not copied again into the record ([`super::Wal::append_record`]).
#[derive(Debug)]
pub struct RecordBuf(Vec<u8>);

impl RecordBuf {
    /// Encodes a body with `fill`, which may only append to the buffer it is given.
    pub fn encode<E>(fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<Self, E> {
        let mut buf = vec![0u8; RECORD_HEADER_LEN];
        fill(&mut buf)?;
        Ok(Self(buf))
    }

    /// The body's bytes.
    pub fn body(&self) -> &[u8] {
        &self.0[RECORD_HEADER_LEN..]
    }
}

impl Encoded {
    /// `body.len()` must fit in u32 (the caller checked it against max_record_bytes).
    #[cfg(test)]
    pub fn new(body: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(RECORD_HEADER_LEN + body.len());
        buf.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
        buf.extend_from_slice(body);
        Self::from_record(RecordBuf(buf))
    }

    /// The record around a body built in place (its length must fit in u32).
    pub fn from_record(record: RecordBuf) -> Self {
        let mut buf = record.0;
        let body_len = buf.len() - RECORD_HEADER_LEN;
        buf[..4].copy_from_slice(&(body_len as u32).to_le_bytes());
        let body_crc = crc32c::crc32c(&buf[RECORD_HEADER_LEN..]);
        Encoded { buf, body_crc }
    }

    pub fn seal(&mut self, op: u64) {
        let body_len = self.buf.len() - RECORD_HEADER_LEN;
        let op_crc = crc32c::crc32c(&op.to_le_bytes());
        let crc = crc32c::crc32c_combine(op_crc, self.body_crc, body_len);
        self.buf[4..8].copy_from_slice(&crc.to_le_bytes());
        self.buf[8..16].copy_from_slice(&op.to_le_bytes());
    }
}

/// What is at a byte offset of a log file.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parsed {
    Record {
        op: u64,
        body: Range<usize>,
        end: usize,
    },
    /// Not a whole, checksummed record; says why.
    Bad(String),
    /// A whole, checksummed record that may not be there; says why.
    Refused(String),
}

/// Parses the record starting at `pos` of `data` (a whole file).
pub(super) fn parse_at(data: &[u8], pos: usize, max_record_bytes: u32) -> Parsed {
    let avail = data.len() - pos;
    if avail < RECORD_HEADER_LEN {
        return Parsed::Bad(format!(
            "record header cut short: the file ends {avail} bytes into its {RECORD_HEADER_LEN}"
        ));
    }
    let h = &data[pos..pos + RECORD_HEADER_LEN];
    let len = u32::from_le_bytes(h[0..4].try_into().unwrap());
    let crc = u32::from_le_bytes(h[4..8].try_into().unwrap());
    let op = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let body_start = pos + RECORD_HEADER_LEN;
    if len > max_record_bytes {
        let what = format!("length {len} beyond max record size {max_record_bytes}");
        let fits = (len as usize) <= data.len() - body_start;
        if fits && record_crc(op, &data[body_start..body_start + len as usize]) == crc {
            // A real record, written under a larger limit: cutting it as a torn tail would
            // destroy it.
            return Parsed::Refused(format!("{what} (a valid record; raise max_record_bytes)"));
        }
        return Parsed::Bad(what);
    }
    if (len as usize) > data.len() - body_start {
        return Parsed::Bad(format!(
            "record cut short: a {len}-byte body, but the file ends {} bytes into it",
            data.len() - body_start
        ));
    }
    let body = body_start..body_start + len as usize;
    if record_crc(op, &data[body.clone()]) != crc {
        return Parsed::Bad(format!("crc mismatch (record claims op {op}, {len} bytes)"));
    }
    Parsed::Record {
        op,
        end: body.end,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_by_op() {
        assert_eq!(file_name(17), "wal-00000000000000000017.log");
        assert_eq!(parse_file_name(&file_name(u64::MAX)), Some(u64::MAX));
        assert!(file_name(9) < file_name(10));
        for bad in [
            "wal-17.log",
            "wal-0000000000000000001x.log",
            "x.log",
            "wal-00000000000000000017.tmp",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn sealed_crc_equals_direct_crc() {
        for len in [0usize, 1, 7, 100, 5000] {
            let body: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mut e = Encoded::new(&body);
            e.seal(12345);
            let mut file = file_header().to_vec();
            file.extend_from_slice(&e.buf);
            assert_eq!(
                parse_at(&file, FILE_HEADER_LEN, u32::MAX),
                Parsed::Record {
                    op: 12345,
                    body: 32..32 + len,
                    end: 32 + len
                }
            );
        }
    }

    #[test]
    fn header_checks() {
        assert!(check_file_header(&file_header()).is_ok());
        let mut h = file_header();
        h[8] = 2;
        assert!(check_file_header(&h).unwrap_err().contains("crc"));
        assert!(check_file_header(&h[..10]).unwrap_err().contains("shorter"));
        assert!(check_file_header(&[0u8; 16]).unwrap_err().contains("magic"));
    }

    #[test]
    fn bad_records_say_why() {
        let mut e = Encoded::new(b"hello");
        e.seal(1);
        let mut file = file_header().to_vec();
        file.extend_from_slice(&e.buf);
        let Parsed::Bad(w) = parse_at(&file[..30], 16, 100) else {
            panic!()
        };
        assert!(w.contains("cut short"), "{w}");
        let Parsed::Refused(w) = parse_at(&file, 16, 4) else {
            panic!()
        };
        assert!(w.contains("length 5 beyond max record size 4"), "{w}");
        // Not a whole record: possibly garbage a crash left, so only "bad".
        let Parsed::Bad(w) = parse_at(&file[..34], 16, 4) else {
            panic!()
        };
        assert!(w.contains("length 5 beyond max record size 4"), "{w}");
        file[34] ^= 1;
        let Parsed::Bad(w) = parse_at(&file, 16, 100) else {
            panic!()
        };
        assert!(w.contains("crc mismatch"), "{w}");
    }
}
