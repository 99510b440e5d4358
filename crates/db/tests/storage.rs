//! The storage interface: the real file system's implementation, and `write_atomic` crashed
//! at every point under the simulated one.

use diskvec_db::storage::{write_atomic, CrashStorage, FsStorage, Storage};

#[test]
fn fs_storage_does_what_the_trait_says() {
    let tmp = tempfile::tempdir().unwrap();
    let s = FsStorage;
    let dir = tmp.path().join("a/b");
    s.create_dir_all(&dir).unwrap();
    let f = dir.join("f");
    assert!(!s.exists(&f));
    let mut h = s.open_append(&f).unwrap();
    assert!(h.is_empty());
    h.append(b"hello ").unwrap();
    h.sync_data().unwrap();
    drop(h);
    let mut h = s.open_append(&f).unwrap();
    assert_eq!(h.len(), 6, "a reopened file appends at its end");
    h.append(b"world").unwrap();
    assert_eq!(h.len(), 11);
    assert_eq!(s.read(&f).unwrap(), b"hello world");
    s.truncate(&f, 5).unwrap();
    assert_eq!(s.read(&f).unwrap(), b"hello");
    s.open_append(&dir.join("c")).unwrap();
    s.rename(&f, &dir.join("b")).unwrap();
    assert_eq!(
        s.list(&dir).unwrap(),
        vec!["b".to_string(), "c".to_string()]
    );
    s.sync_dir(&dir).unwrap();
    s.remove_file(&dir.join("c")).unwrap();
    assert_eq!(s.list(&dir).unwrap(), vec!["b".to_string()]);
    s.remove_dir_all(&tmp.path().join("a")).unwrap();
    assert!(!s.exists(&dir));
    assert!(s.read(&f).is_err());
}

#[test]
fn write_atomic_on_the_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("manifest.json");
    write_atomic(&FsStorage, &path, b"{\"v\":1}").unwrap();
    write_atomic(&FsStorage, &path, b"{\"v\":2}").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"v\":2}");
    let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temporary file left behind");
}

/// Replaces `d/m`'s content at every crash point; after the crash it must read as exactly
/// the old or the new content (or be absent when there was no old content), and as the new
/// one if `write_atomic` returned.
fn all_or_nothing(old: Option<&[u8]>) {
    let new = b"the new content, longer than the old one".as_slice();
    let setup = || {
        let tmp = tempfile::tempdir().unwrap();
        let s = CrashStorage::new(tmp.path()).unwrap();
        s.create_dir_all(&s.root().join("d")).unwrap();
        s.sync_dir(&s.root()).unwrap();
        let path = s.root().join("d/m");
        if let Some(old) = old {
            write_atomic(&s, &path, old).unwrap();
        }
        (tmp, s, path)
    };
    let (_probe_dir, probe, path) = setup();
    let base = probe.ops();
    write_atomic(&probe, &path, new).unwrap();
    let total = probe.ops() - base;
    assert!(total >= 4);

    let mut saw_old = false;
    let mut saw_new = false;
    for point in 0..=total {
        // A crash rewrites the directory: each way of crashing gets a run of its own.
        for seed in std::iter::once(None).chain((0..8).map(Some)) {
            let (_dir, s, path) = setup();
            s.set_fail_after(base + point);
            let result = write_atomic(&s, &path, new);
            assert_eq!(result.is_ok(), point == total, "crash point {point}");
            let state = match seed {
                None => s.crash(),
                Some(seed) => s.crash_torn(seed),
            };
            let got = state.read(&path).ok();
            match got.as_deref() {
                Some(g) if g == new => saw_new = true,
                // Once write_atomic returned, the new content is the only answer.
                g if g == old && result.is_err() => saw_old = true,
                g => panic!("crash point {point}/{total}: {path:?} holds {g:?}"),
            }
            let names = state.list(&state.root().join("d")).unwrap();
            assert!(names.len() <= 2, "{names:?}");
        }
    }
    assert!(saw_old && saw_new);
}

#[test]
fn write_atomic_is_all_or_nothing_at_every_crash_point() {
    all_or_nothing(Some(b"old"));
    all_or_nothing(None);
}

#[test]
fn crash_storage_keeps_only_durable_state() {
    let run = |sync_dir: bool| {
        let tmp = tempfile::tempdir().unwrap();
        let s = CrashStorage::new(tmp.path()).unwrap();
        let dir = s.root().join("x");
        s.create_dir_all(&dir).unwrap();
        s.sync_dir(&s.root()).unwrap();
        let mut f = s.open_append(&dir.join("f")).unwrap();
        f.append(b"synced").unwrap();
        f.sync_data().unwrap();
        f.append(b" unsynced").unwrap();
        if sync_dir {
            s.sync_dir(&dir).unwrap();
        }
        let c = s.crash();
        // The storage that crashed is dead: nothing it holds writes into the crashed state.
        assert!(f.append(b"!").is_err() && f.sync_data().is_err());
        assert_eq!(c.ops(), 0);
        (tmp, c.read(&dir.join("f")).ok())
    };
    // The name was never made durable.
    assert_eq!(run(false).1, None);
    assert_eq!(run(true).1.as_deref(), Some(b"synced".as_slice()));
}
