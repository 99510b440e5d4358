//! The small file-system interface the WAL and the manifest write through. (Being written.)
