//! Every supported file type reads back what was written, and bad files are refused
//! with a message that names the file.

use std::io::Write;
use std::path::Path;

use diskvec_dataset::{
    read_vectors, write_neighbors, write_vectors, DatasetDir, Matrix, Neighbors,
};
use diskvec_vector::ElementType;

fn sample() -> Matrix {
    Matrix {
        data: (0..12).map(|x| x as f32 * 0.5).collect(),
        dim: 3,
        ids: vec![10, 11, 12, 13],
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn parquet_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.parquet");
    write_vectors(&p, &sample()).unwrap();
    assert_eq!(read_vectors(&p).unwrap(), sample());
    let gt = Neighbors {
        query_ids: vec![0, 1],
        lists: vec![vec![3, 1, 2], vec![0]],
    };
    let q = dir.path().join("neighbors.parquet");
    write_neighbors(&q, &gt).unwrap();
    assert_eq!(
        DatasetDir::open(dir.path()).unwrap().neighbors().unwrap(),
        gt
    );
}

#[test]
fn fvecs_bvecs_and_npy_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut fvecs = Vec::new();
    let mut bvecs = Vec::new();
    for row in 0..2 {
        fvecs.extend_from_slice(&2i32.to_le_bytes());
        bvecs.extend_from_slice(&2i32.to_le_bytes());
        for c in 0..2 {
            fvecs.extend_from_slice(&((row * 2 + c) as f32).to_le_bytes());
            bvecs.push((row * 2 + c) as u8);
        }
    }
    let expected = Matrix {
        data: vec![0.0, 1.0, 2.0, 3.0],
        dim: 2,
        ids: vec![0, 1],
    };
    write(&dir.path().join("a.fvecs"), &fvecs);
    write(&dir.path().join("a.bvecs"), &bvecs);
    assert_eq!(read_vectors(&dir.path().join("a.fvecs")).unwrap(), expected);
    assert_eq!(read_vectors(&dir.path().join("a.bvecs")).unwrap(), expected);

    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<118}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    for x in [0.0f32, 1.0, 2.0, 3.0] {
        npy.extend_from_slice(&x.to_le_bytes());
    }
    write(&dir.path().join("a.npy"), &npy);
    assert_eq!(read_vectors(&dir.path().join("a.npy")).unwrap(), expected);
}

#[test]
fn bad_files_are_refused_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let nan = Matrix {
        data: vec![1.0, f32::NAN],
        dim: 2,
        ids: vec![7],
    };
    let p = dir.path().join("nan.parquet");
    write_vectors(&p, &nan).unwrap();
    let err = read_vectors(&p).unwrap_err().to_string();
    assert!(
        err.contains("nan.parquet") && err.contains("non-finite") && err.contains("id 7"),
        "{err}"
    );

    let p = dir.path().join("trunc.fvecs");
    write(&p, &[2, 0, 0, 0, 1, 2, 3]);
    let err = read_vectors(&p).unwrap_err().to_string();
    assert!(
        err.contains("trunc.fvecs") && err.contains("truncated"),
        "{err}"
    );

    let p = dir.path().join("junk.parquet");
    write(&p, b"this is not parquet at all");
    assert!(read_vectors(&p)
        .unwrap_err()
        .to_string()
        .contains("junk.parquet"));

    let p = dir.path().join("x.csv");
    write(&p, b"1,2");
    assert!(read_vectors(&p).is_err());

    let empty = Matrix {
        data: vec![],
        dim: 2,
        ids: vec![],
    };
    let p = dir.path().join("empty.parquet");
    write_vectors(&p, &empty).unwrap();
    assert!(read_vectors(&p)
        .unwrap_err()
        .to_string()
        .contains("no vectors"));

    assert!(DatasetDir::open(&dir.path().join("missing")).is_err());
    let d = DatasetDir::open(dir.path()).unwrap();
    assert!(d.test().unwrap_err().to_string().contains("test.parquet"));
}

#[test]
fn reads_the_shared_real_dataset_when_present() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/datasets/wordnet-minilm384-50k");
    if !dir.exists() {
        eprintln!("skipping: {} not found", dir.display());
        return;
    }
    let d = DatasetDir::open(&dir).unwrap();
    let test = d.test().unwrap();
    assert_eq!((test.len(), test.dim), (1000, 384));
    let gt = d.neighbors().unwrap();
    assert_eq!(gt.lists.len(), 1000);
    assert!(gt.lists.iter().all(|l| l.len() == 100));
    let norm: f32 = test.row(0).iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-3);
}

/// Reads `path` as a stream of `chunk` rows and joins the chunks.
fn streamed(path: &Path, chunk: usize) -> diskvec_dataset::Result<Matrix> {
    let mut s = diskvec_dataset::open_stream(path, chunk)?;
    let mut all = Matrix {
        data: Vec::new(),
        dim: s.dim(),
        ids: Vec::new(),
    };
    while let Some(m) = s.next_chunk()? {
        assert!(m.len() <= chunk && m.dim == s.dim());
        all.data.extend(m.data);
        all.ids.extend(m.ids);
    }
    assert_eq!(all.len(), s.rows());
    Ok(all)
}

#[test]
fn streams_deliver_in_chunks_what_a_whole_read_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let m = Matrix {
        data: (0..7 * 5).map(|x| x as f32 * 0.25).collect(),
        dim: 5,
        ids: (100..107).collect(),
    };
    let p = dir.path().join("train.parquet");
    write_vectors(&p, &m).unwrap();
    let (mut fvecs, mut bvecs) = (Vec::new(), Vec::new());
    for row in m.data.chunks(5) {
        fvecs.extend_from_slice(&5i32.to_le_bytes());
        bvecs.extend_from_slice(&5i32.to_le_bytes());
        row.iter()
            .for_each(|x| fvecs.extend_from_slice(&x.to_le_bytes()));
        row.iter().for_each(|x| bvecs.push((*x * 4.0) as u8));
    }
    write(&dir.path().join("a.fvecs"), &fvecs);
    write(&dir.path().join("a.bvecs"), &bvecs);
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (7, 5), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<118}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    m.data
        .iter()
        .for_each(|x| npy.extend_from_slice(&x.to_le_bytes()));
    write(&dir.path().join("a.npy"), &npy);
    for name in ["train.parquet", "a.fvecs", "a.bvecs", "a.npy"] {
        let p = dir.path().join(name);
        for chunk in [1, 3, 7, 100] {
            assert_eq!(
                streamed(&p, chunk).unwrap(),
                read_vectors(&p).unwrap(),
                "{name} {chunk}"
            );
        }
    }
}

#[test]
fn a_file_of_many_row_groups_decoded_by_several_threads_streams_in_file_order() {
    // Float16 files are written in row groups of 4,096 rows: 10,001 rows make three, which
    // the decoding threads share; chunks of every size must come back in file order.
    let dir = tempfile::tempdir().unwrap();
    let (rows, dim) = (10_001usize, 4usize);
    let m = Matrix {
        data: (0..rows * dim).map(|x| (x % 2048) as f32).collect(),
        dim,
        ids: (0..rows as i64).map(|i| 7 * i + 3).collect(),
    };
    let p = dir.path().join("groups.parquet");
    let mut w = diskvec_dataset::VectorWriter::create(&p, dim, ElementType::Float16).unwrap();
    w.append(&m.ids, &m.data).unwrap();
    w.finish().unwrap();
    for chunk in [1000, 4096, 5000, 100_000] {
        assert_eq!(streamed(&p, chunk).unwrap(), m, "chunks of {chunk}");
    }
    // Read again from the start while the first reader is half way (a build's later pass).
    let mut first = diskvec_dataset::open_stream(&p, 512).unwrap();
    first.next_chunk().unwrap().unwrap();
    let again = first.reopen().unwrap();
    drop(first);
    assert_eq!(again.rows(), rows);

    // A NaN in the last row group names its row and id, whichever thread decoded it.
    let mut bad = m.clone();
    bad.data[9_000 * dim + 1] = f32::NAN;
    let p = dir.path().join("late-nan.parquet");
    let mut w = diskvec_dataset::VectorWriter::create(&p, dim, ElementType::Float32).unwrap();
    for (ids, data) in bad.ids.chunks(3000).zip(bad.data.chunks(3000 * dim)) {
        w.append(ids, data).unwrap();
    }
    w.finish().unwrap();
    let err = streamed(&p, 700).unwrap_err().to_string();
    assert!(
        err.contains("vector 9000 (id 63003)") && err.contains("position 1"),
        "{err}"
    );
}

#[test]
fn a_file_that_ends_early_or_changes_row_length_while_streaming_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Truncated after it was opened: the rows announced at open are missing at the end.
    let p = dir.path().join("shrinks.fvecs");
    // Larger than the reader's buffer, so the cut is met while streaming.
    let (rows, dim) = (3000usize, 256usize);
    let mut fvecs = Vec::new();
    for row in 0..rows {
        fvecs.extend_from_slice(&(dim as i32).to_le_bytes());
        for _ in 0..dim {
            fvecs.extend_from_slice(&(row as f32).to_le_bytes());
        }
    }
    write(&p, &fvecs);
    let mut s = diskvec_dataset::open_stream(&p, 100).unwrap();
    assert_eq!(s.rows(), rows);
    s.next_chunk().unwrap().unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len((4 + 4 * dim as u64) * 2000 + 10)
        .unwrap();
    let err = loop {
        match s.next_chunk() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a truncated file streamed to its end"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        err.contains("shrinks.fvecs") && err.contains("truncated"),
        "{err}"
    );

    // A row whose header says another dimension (same byte count: 2 floats vs 8 bytes).
    let p = dir.path().join("ragged.bvecs");
    let mut bvecs = Vec::new();
    for d in [8i32, 8, 8] {
        bvecs.extend_from_slice(&d.to_le_bytes());
        bvecs.extend_from_slice(&[1u8; 8]);
    }
    bvecs[24..28].copy_from_slice(&4i32.to_le_bytes());
    write(&p, &bvecs);
    let err = streamed(&p, 1).unwrap_err().to_string();
    assert!(err.contains("row 2 says dimension 4"), "{err}");

    // NaN in a later chunk names its row and id.
    let m = Matrix {
        data: vec![1.0, 2.0, 3.0, 4.0, 5.0, f32::NAN],
        dim: 2,
        ids: vec![4, 5, 6],
    };
    let p = dir.path().join("nan.parquet");
    write_vectors(&p, &m).unwrap();
    let err = streamed(&p, 1).unwrap_err().to_string();
    assert!(
        err.contains("vector 2 (id 6)") && err.contains("non-finite"),
        "{err}"
    );

    // A .npy whose data is shorter than its shape is refused at open.
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (9, 5), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<118}\n");
    npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    npy.extend_from_slice(padded.as_bytes());
    npy.extend_from_slice(&[0u8; 40]);
    let p = dir.path().join("short.npy");
    write(&p, &npy);
    let err = diskvec_dataset::open_stream(&p, 4)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("shorter than its shape"), "{err}");
}
