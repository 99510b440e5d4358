//! A walk over a Parquet footer before the parquet crate decodes it. The crate's Thrift
//! decoder reserves room for as many elements as a list header claims, so a footer of a
//! few hundred bytes can ask for gigabytes (found by fuzzing; an allocation that large
//! fails and aborts the process). Every list, set, map and string here must fit in the
//! bytes that remain, which bounds what any header can make the decoder reserve.

/// Deepest nesting of structs and containers a footer may have (real ones use under 10).
const MAX_DEPTH: usize = 64;

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

type Check = std::result::Result<(), String>;

impl Walk<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn byte(&mut self) -> std::result::Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| format!("footer ends inside a value at byte {}", self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "footer has an overlong integer at byte {}",
            self.at
        ))
    }

    fn skip(&mut self, n: u64) -> Check {
        if n > self.remaining() as u64 {
            return Err(format!(
                "footer claims {n} bytes at byte {} with {} left",
                self.at,
                self.remaining()
            ));
        }
        self.at += n as usize;
        Ok(())
    }

    /// A count of elements each taking at least `min_bytes`, checked against what is left.
    fn count(&mut self, n: u64, min_bytes: u64) -> std::result::Result<u64, String> {
        if n.saturating_mul(min_bytes) > self.remaining() as u64 {
            return Err(format!(
                "footer claims {n} elements at byte {} with {} bytes left",
                self.at,
                self.remaining()
            ));
        }
        Ok(n)
    }

    fn value(&mut self, kind: u8, depth: usize) -> Check {
        if depth > MAX_DEPTH {
            return Err(format!("footer nests deeper than {MAX_DEPTH} levels"));
        }
        match kind {
            1 | 2 => Ok(()),
            3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let header = self.byte()?;
                let short = (header >> 4) as u64;
                let n = if short == 15 { self.varint()? } else { short };
                let n = self.count(n, 1)?;
                let element = header & 0x0f;
                for _ in 0..n {
                    // Booleans in a list take a byte each.
                    if element == 1 || element == 2 {
                        self.skip(1)?;
                    } else {
                        self.value(element, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                let n = self.count(n, 2)?;
                if n == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                for _ in 0..n {
                    self.value(kinds >> 4, depth + 1)?;
                    self.value(kinds & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            12 => self.structure(depth + 1),
            other => Err(format!(
                "footer has unknown type {other} at byte {}",
                self.at
            )),
        }
    }

    /// Walks a struct; returns the value of its i32 field `wanted`, if present.
    fn structure_with(
        &mut self,
        depth: usize,
        wanted: i16,
    ) -> std::result::Result<Option<i64>, String> {
        let mut id = 0i16;
        let mut found = None;
        loop {
            let header = self.byte()?;
            if header == 0 {
                return Ok(found);
            }
            let delta = (header >> 4) as i16;
            id = if delta == 0 {
                let z = self.varint()?;
                ((z >> 1) as i64 ^ -((z & 1) as i64)) as i16
            } else {
                id.wrapping_add(delta)
            };
            let kind = header & 0x0f;
            // Integers of every width are the same varint, and the crate reads any of them.
            if id == wanted && (4..=6).contains(&kind) {
                let z = self.varint()?;
                found = Some((z >> 1) as i64 ^ -((z & 1) as i64));
            } else if depth == 1 && id == SCHEMA_FIELD && kind == 9 {
                self.schema(depth)?;
            } else {
                self.value(kind, depth)?;
            }
        }
    }

    fn structure(&mut self, depth: usize) -> Check {
        self.structure_with(depth, -1).map(|_| ())
    }

    /// FileMetaData's schema: a list of SchemaElements, each of which may claim children.
    /// The crate reserves room for the claimed number, so none may claim more elements
    /// than the schema has.
    fn schema(&mut self, depth: usize) -> Check {
        let header = self.byte()?;
        let short = (header >> 4) as u64;
        let n = if short == 15 { self.varint()? } else { short };
        let n = self.count(n, 1)?;
        if header & 0x0f != 12 {
            return Err("footer's schema is not a list of structs".into());
        }
        for _ in 0..n {
            if let Some(children) = self.structure_with(depth + 1, NUM_CHILDREN_FIELD)? {
                if children < 0 || children as u64 > n {
                    return Err(format!(
                        "footer's schema claims {children} children in a schema of {n} elements"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Field ids of the Parquet Thrift definitions: FileMetaData.schema, SchemaElement.num_children.
const SCHEMA_FIELD: i16 = 2;
const NUM_CHILDREN_FIELD: i16 = 5;

/// Checks the footer of the Parquet file `input`: framing, and that no length or count in
/// it claims more than the footer holds. The parquet crate still decodes and checks it.
pub(crate) fn check<R: parquet::file::reader::ChunkReader>(input: &R) -> Check {
    let n = input.len();
    let read = |start: u64, len: usize| {
        input
            .get_bytes(start, len)
            .map_err(|e| format!("footer unreadable: {e}"))
    };
    if n < 12 {
        return Err("no parquet footer (file truncated or not parquet)".into());
    }
    let tail = read(n - 8, 8)?;
    if &tail[4..] != b"PAR1" {
        return Err("no parquet footer (file truncated or not parquet)".into());
    }
    let len = u32::from_le_bytes(tail[..4].try_into().unwrap()) as u64;
    if len > n - 12 {
        return Err(format!("footer length {len} exceeds the file's {n} bytes"));
    }
    let footer = read(n - 8 - len, len as usize)?;
    let mut walk = Walk {
        bytes: &footer,
        at: 0,
    };
    walk.structure_with(1, -1).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(file: &[u8]) -> Check {
        super::check(&super::super::parquet_io::in_memory(file))
    }

    fn file_with_footer(footer: &[u8]) -> Vec<u8> {
        let mut f = b"PAR1".to_vec();
        f.extend_from_slice(footer);
        f.extend_from_slice(&(footer.len() as u32).to_le_bytes());
        f.extend_from_slice(b"PAR1");
        f
    }

    #[test]
    fn lying_counts_and_lengths_are_refused() {
        // Field 1 (delta 1), a list of structs (0x9 with element 0xc) claiming 2^30 items.
        let huge_list = [0x19, 0xfc, 0x80, 0x80, 0x80, 0x80, 0x04, 0x00];
        assert!(check(&file_with_footer(&huge_list))
            .unwrap_err()
            .contains("elements"));
        // Field 1, binary of 1000 bytes in a 4-byte footer.
        let long_string = [0x18, 0xe8, 0x07, 0x00];
        assert!(check(&file_with_footer(&long_string))
            .unwrap_err()
            .contains("claims"));
        // A well-formed struct: field 1 i32 = 5, field 3 a list of two i32, stop.
        let fine = [0x15, 0x0a, 0x29, 0x25, 0x02, 0x04, 0x00];
        check(&file_with_footer(&fine)).unwrap();
        // The schema (field 2): one element claiming 5 children is refused; 0 is fine.
        let greedy = [0x29, 0x1c, 0x55, 0x0a, 0x00, 0x00];
        assert!(check(&file_with_footer(&greedy))
            .unwrap_err()
            .contains("children"));
        let leaf = [0x29, 0x1c, 0x55, 0x00, 0x00, 0x00];
        check(&file_with_footer(&leaf)).unwrap();
        assert!(check(b"PAR1").is_err());
    }
}
