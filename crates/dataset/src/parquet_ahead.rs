//! A parquet vector file decoded by several threads at once: row groups are dealt round
//! robin to the workers, each decodes its groups in order (values widened to f32, checked
//! finite) and hands over one chunk at a time, and the reader takes the chunks back in file
//! order. Decoding a list column of float16 values costs ~15 µs a 768-d row on one core, as
//! much as the rest of a build's pass over its input, so one thread decoding while the
//! others compute left most of a pass waiting on it.
//!
//! Each worker holds at most one finished chunk (a rendezvous channel) besides the one it
//! is decoding, so `workers x 2` chunks are in flight at most.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use crate::parquet_io::{append_vectors, guarded};
use crate::{invalid, io_error, Matrix, Result};

/// What a worker hands over: a chunk of its current row group, or the group's end.
enum Piece {
    Rows(Result<Matrix>),
    GroupEnd,
}

/// Chunks of a parquet vector file in file order, decoded ahead by worker threads.
pub(crate) struct ParquetAhead {
    receivers: Vec<Receiver<Piece>>,
    workers: Vec<JoinHandle<()>>,
    /// The row group whose chunks come next, and how many the file has.
    group: usize,
    groups: usize,
    path: PathBuf,
}

impl ParquetAhead {
    /// Starts `threads` workers (at least 1, at most one per row group) over the file at
    /// `path`, whose footer `metadata` holds, in chunks of at most `chunk_rows` rows.
    pub fn start(
        path: &Path,
        metadata: ArrowReaderMetadata,
        chunk_rows: usize,
        threads: usize,
    ) -> Result<Self> {
        let row_groups = metadata.metadata().row_groups();
        let groups = row_groups.len();
        let mut starts = Vec::with_capacity(groups);
        let mut row = 0usize;
        for g in row_groups {
            starts.push(row);
            row += g.num_rows().max(0) as usize;
        }
        let threads = threads.clamp(1, groups.max(1));
        let (mut receivers, mut workers) = (Vec::new(), Vec::new());
        for first in 0..threads {
            let file = File::open(path).map_err(io_error(path))?;
            let (send, receive) = sync_channel(0);
            let job = Worker {
                path: path.to_path_buf(),
                file,
                metadata: metadata.clone(),
                chunk_rows,
                groups: (first..groups)
                    .step_by(threads)
                    .map(|g| (g, starts[g]))
                    .collect(),
                send,
            };
            let handle = std::thread::Builder::new()
                .name(format!("parquet-decode-{first}"))
                .spawn(move || job.run())
                .map_err(io_error(path))?;
            receivers.push(receive);
            workers.push(handle);
        }
        Ok(Self {
            receivers,
            workers,
            group: 0,
            groups,
            path: path.to_path_buf(),
        })
    }

    /// The next chunk, `None` after the last row group.
    pub fn next(&mut self) -> Option<Result<Matrix>> {
        while self.group < self.groups {
            let from = &self.receivers[self.group % self.receivers.len()];
            match from.recv() {
                Ok(Piece::Rows(rows)) => return Some(rows),
                Ok(Piece::GroupEnd) => self.group += 1,
                Err(_) => {
                    // A worker stops early only after handing over an error, which ends
                    // the read: reaching here means it died some other way.
                    self.group = self.groups;
                    return Some(Err(invalid(
                        &self.path,
                        "the parquet decoding thread stopped unexpectedly",
                    )));
                }
            }
        }
        None
    }
}

impl Drop for ParquetAhead {
    fn drop(&mut self) {
        // Workers waiting to hand over a chunk see the receivers gone and stop.
        self.receivers.clear();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// One decoding thread: its row groups (number, first row), in order.
struct Worker {
    path: PathBuf,
    file: File,
    metadata: ArrowReaderMetadata,
    chunk_rows: usize,
    groups: Vec<(usize, usize)>,
    send: SyncSender<Piece>,
}

impl Worker {
    fn run(self) {
        for &(group, first_row) in &self.groups {
            match self.decode_group(group, first_row) {
                Ok(true) => {}
                // The reader is gone: nobody wants the rest.
                Ok(false) => return,
                Err(e) => {
                    let _ = self.send.send(Piece::Rows(Err(e)));
                    return;
                }
            }
            if self.send.send(Piece::GroupEnd).is_err() {
                return;
            }
        }
    }

    /// Decodes row group `group` (its first row is `first_row` of the file) and hands over
    /// its chunks; `Ok(false)` when the reader went away.
    fn decode_group(&self, group: usize, first_row: usize) -> Result<bool> {
        let path = &self.path;
        let input = self.file.try_clone().map_err(io_error(path))?;
        let mut reader = guarded(path, || {
            ParquetRecordBatchReaderBuilder::new_with_metadata(input, self.metadata.clone())
                .with_row_groups(vec![group])
                .with_batch_size(self.chunk_rows)
                .build()
                .map_err(|e| invalid(path, format!("not a readable parquet file: {e}")))
        })?;
        let mut row = first_row;
        loop {
            let chunk = guarded(path, || {
                let Some(batch) = reader
                    .next()
                    .transpose()
                    .map_err(|e| invalid(path, format!("corrupt parquet data: {e}")))?
                else {
                    return Ok(None);
                };
                let mut m = Matrix {
                    data: Vec::new(),
                    dim: 0,
                    ids: Vec::new(),
                };
                append_vectors(path, &batch, row, &mut m)?;
                crate::stream::check_finite(path, &m, row)?;
                Ok(Some(m))
            })?;
            let Some(m) = chunk else {
                return Ok(true);
            };
            row += m.ids.len();
            if self.send.send(Piece::Rows(Ok(m))).is_err() {
                return Ok(false);
            }
        }
    }
}

/// The footer of the parquet file `file` (at `path`), read once for every worker.
pub(crate) fn footer(path: &Path, file: &File) -> Result<ArrowReaderMetadata> {
    // The embedded Arrow schema is skipped, as everywhere parquet is read (parquet_io.rs).
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    guarded(path, || {
        ArrowReaderMetadata::load(file, options)
            .map_err(|e| invalid(path, format!("not a readable parquet file: {e}")))
    })
}
