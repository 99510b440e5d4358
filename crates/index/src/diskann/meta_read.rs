//! Reading `meta.dvm` without holding the whole file twice: the header and codebook first,
//! then the PQ codes straight into the huge-page buffer the index keeps them in, then the
//! rest, with the checksum computed along the way. A file that is not what its header says
//! is left to `Meta::decode` (on the whole file) to name its problem.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::header::{check_version, Reader};
use super::meta::{codebook_end, codes_span, head_crc, Meta, CRC_AT, META_HEADER, META_MAGIC};
use crate::error::file_error;
use crate::Result;

/// Codes not kept are read through a buffer of this size.
const SKIP_BUFFER: usize = 1 << 20;

/// The meta file at `path`, or `None` when it is damaged or not one (the caller decodes
/// the whole file then, for the error). Without `keep_codes` the codes are checksummed a
/// buffer at a time and dropped.
pub(crate) fn read_streamed(path: &Path, keep_codes: bool) -> Result<Option<Meta>> {
    let mut file = File::open(path).map_err(file_error(path))?;
    let meta = read_from(&mut file, path, keep_codes);
    // What it holds is in memory now (or not wanted there): a cached copy would be charged
    // twice, and an index opened again (compact codes refused) read it twice, making it active.
    diskvec_io::forget_cached(&file);
    meta
}

fn read_from(file: &mut File, path: &Path, keep_codes: bool) -> Result<Option<Meta>> {
    let len = file.metadata().map_err(file_error(path))?.len();
    let Ok(len) = usize::try_from(len) else {
        return Ok(None);
    };
    if len < META_HEADER {
        return Ok(None);
    }
    let mut head = vec![0u8; META_HEADER];
    file.read_exact(&mut head).map_err(file_error(path))?;
    if &head[..8] != META_MAGIC {
        return Ok(None);
    }
    let codes_at = codebook_end(&head).filter(|&end| end <= len);
    let Some(codes_at) = codes_at else {
        return Ok(None);
    };
    head.resize(codes_at, 0);
    file.read_exact(&mut head[META_HEADER..])
        .map_err(file_error(path))?;
    let Some(span) = codes_span(&head, len) else {
        return Ok(None);
    };
    let mut sum = head_crc(&head);
    let codes = if keep_codes {
        let mut codes = diskvec_vector::filled_with_huge_pages(0u8, span.len());
        file.read_exact(&mut codes).map_err(file_error(path))?;
        sum.update(&codes);
        codes
    } else {
        let mut buf = vec![0u8; SKIP_BUFFER.min(span.len())];
        let mut left = span.len();
        while left > 0 {
            let piece = &mut buf[..left.min(SKIP_BUFFER)];
            file.read_exact(piece).map_err(file_error(path))?;
            sum.update(piece);
            left -= piece.len();
        }
        Vec::new()
    };
    let mut tail = Vec::with_capacity(len - span.end);
    file.read_to_end(&mut tail).map_err(file_error(path))?;
    if span.end + tail.len() != len {
        return Ok(None);
    }
    sum.update(&tail);
    let crc = u32::from_le_bytes(head[CRC_AT..CRC_AT + 4].try_into().unwrap());
    if sum.finalize() != crc {
        return Ok(None);
    }
    check_version(Reader { buf: &head, at: 8 }.u32(), path)?;
    Meta::assemble(&head, (codes, span.len()), &tail, path).map(Some)
}
