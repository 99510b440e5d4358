//! [`CrashStorage`]: a real directory whose every change through [`Storage`] is also kept
//! in a model of what a power loss would keep, and which a "crash" turns into exactly that.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// The test double for [`Storage`]: a real directory (the root) plus a model of what of it
/// survives a power loss, as conservatively as Linux ext4/xfs promise it. Everything under
/// the root is real, so code that reads through `std::fs`, `pread`, `mmap` or io_uring (an
/// index opening its node files) sees what the writers wrote; only what went through this
/// storage and was made durable survives [`CrashStorage::crash`].
///
/// The model:
/// - Every file has `durable` bytes (as of its last [`StorageFile::sync_data`] or
///   [`Storage::truncate`]) and `current` bytes (the real file's). Writes change `current`.
/// - Every directory has a durable and a current set of entries (name to file or directory).
///   Creating, renaming and removing change the current set; [`Storage::sync_dir`] makes the
///   directory's current set durable. So a file created and synced in a directory that was
///   never synced is lost in a crash, a rename not followed by `sync_dir` is undone, and a
///   removed file comes back.
/// - A file or directory made outside this storage (with `std::fs`) is adopted, with no
///   durable bytes and no durable entry, the first time a call through it touches it; one
///   never touched is not in the model at all. Either way a crash forgets it: a writer that
///   bypasses the storage is found by the test that crashes it.
/// - [`CrashStorage::crash`] rewrites the root to hold only the durable state, reached from
///   the root through durable entries, and returns a storage over it;
///   [`CrashStorage::crash_torn`] also keeps a prefix (chosen by a seed) of each file's
///   unsynced appended tail, sometimes as the real bytes and sometimes as zeros (a size
///   update that reached the disk before the data), which models torn appends.
/// - [`CrashStorage::set_fail_after`] makes every mutating operation (create, append, write,
///   sync, rename, remove, truncate) after the first `n` fail with nothing taking effect: the
///   process "died" there. [`CrashStorage::ops`] counts the operations that succeeded, so a
///   test can run a workload once, then again for every crash point `0..=ops`.
///
/// Reads (`list`, `exists`, `read`, `len`) see the real, current state and are not counted.
/// Paths must be absolute and lie under the root. Cloning shares the state (it is one file
/// system), as does every handle it opens. Nothing is fsynced for real: the model is the
/// durability, so a test of thousands of crash points runs at page-cache speed.
#[derive(Debug, Clone)]
pub struct CrashStorage {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Clone)]
struct State {
    root: PathBuf,
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    ops: u64,
    fail_after: Option<u64>,
}

const ROOT: u64 = 0;

#[derive(Debug, Clone)]
enum Node {
    File {
        durable: Vec<u8>,
        current: Vec<u8>,
    },
    Dir {
        durable: BTreeMap<String, u64>,
        current: BTreeMap<String, u64>,
    },
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {what}", path.display()),
    )
}

fn put(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[offset as usize..end].copy_from_slice(data);
}

impl State {
    fn empty(root: PathBuf) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node::Dir {
                durable: BTreeMap::new(),
                current: BTreeMap::new(),
            },
        );
        State {
            root,
            nodes,
            next_ino: ROOT + 1,
            ops: 0,
            fail_after: None,
        }
    }

    /// Counts one mutating operation, or refuses it past the crash point.
    fn tick(&mut self) -> io::Result<()> {
        if self.fail_after.is_some_and(|n| self.ops >= n) {
            return Err(io::Error::other(format!(
                "simulated crash: storage operation {} refused",
                self.ops + 1
            )));
        }
        self.ops += 1;
        Ok(())
    }

    /// The path's names below the root.
    fn names(&self, path: &Path) -> io::Result<Vec<String>> {
        let rest = path
            .strip_prefix(&self.root)
            .map_err(|_| invalid(path, "outside the crash model's root"))?;
        let mut out = Vec::new();
        for c in rest.components() {
            match c {
                Component::Normal(n) => out.push(n.to_string_lossy().into_owned()),
                Component::CurDir => {}
                _ => return Err(invalid(path, "`..` is not supported")),
            }
        }
        Ok(out)
    }

    fn new_node(&mut self, node: Node) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match self.nodes.get_mut(&dir) {
            Some(Node::Dir { current, .. }) => current,
            _ => unreachable!("only directories are walked through"),
        }
    }

    /// The node of `path` in the current tree, adopting what exists on the disk but not in
    /// the model yet (made outside the storage): no durable bytes, no durable entry.
    fn adopt(&mut self, path: &Path) -> io::Result<u64> {
        let mut ino = ROOT;
        let mut real = self.root.clone();
        for name in self.names(path)? {
            real.push(&name);
            let child = match self.nodes.get(&ino) {
                Some(Node::Dir { current, .. }) => current.get(&name).copied(),
                _ => return Err(not_found(path)),
            };
            ino = match child {
                Some(child) => child,
                None => {
                    let meta = fs::symlink_metadata(&real).map_err(|_| not_found(path))?;
                    let node = if meta.is_dir() {
                        Node::Dir {
                            durable: BTreeMap::new(),
                            current: BTreeMap::new(),
                        }
                    } else {
                        Node::File {
                            durable: Vec::new(),
                            current: fs::read(&real)?,
                        }
                    };
                    let child = self.new_node(node);
                    self.entries_mut(ino).insert(name, child);
                    child
                }
            };
        }
        Ok(ino)
    }

    /// The directory that holds `path` (adopted), and the last name of `path`.
    fn parent_of(&mut self, path: &Path) -> io::Result<(u64, String)> {
        let name = self
            .names(path)?
            .pop()
            .ok_or_else(|| invalid(path, "no file name"))?;
        let parent = path.parent().ok_or_else(|| invalid(path, "no parent"))?;
        let dir = self.adopt(parent)?;
        match self.nodes.get(&dir) {
            Some(Node::Dir { .. }) => Ok((dir, name)),
            _ => Err(invalid(path, "parent is not a directory")),
        }
    }

    fn file_mut(&mut self, ino: u64) -> (&mut Vec<u8>, &mut Vec<u8>) {
        match self.nodes.get_mut(&ino) {
            Some(Node::File { durable, current }) => (durable, current),
            _ => unreachable!("file handles only point at files"),
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.nodes.get(&ino), Some(Node::Dir { .. }))
    }

    /// What a power loss leaves: the durable entries and bytes, optionally with torn tails.
    fn crashed(&self, torn_seed: Option<u64>) -> State {
        let mut nodes = HashMap::new();
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if nodes.contains_key(&ino) {
                continue;
            }
            let node = match &self.nodes[&ino] {
                Node::Dir { durable, .. } => {
                    stack.extend(durable.values().copied());
                    Node::Dir {
                        durable: durable.clone(),
                        current: durable.clone(),
                    }
                }
                Node::File { durable, current } => {
                    let mut kept = durable.clone();
                    if let Some(seed) = torn_seed {
                        // Only an appended tail can be torn; a positional rewrite is lost whole.
                        if current.len() > durable.len() && current.starts_with(durable) {
                            let mut rng = SplitMix(seed ^ ino.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                            let extra = current.len() - durable.len();
                            let keep = (rng.next() % (extra as u64 + 1)) as usize;
                            let tail = &current[durable.len()..durable.len() + keep];
                            if rng.next().is_multiple_of(4) {
                                kept.resize(kept.len() + keep, 0);
                            } else {
                                kept.extend_from_slice(tail);
                            }
                        }
                    }
                    Node::File {
                        durable: kept.clone(),
                        current: kept,
                    }
                }
            };
            nodes.insert(ino, node);
        }
        State {
            root: self.root.clone(),
            nodes,
            next_ino: self.next_ino,
            ops: 0,
            fail_after: None,
        }
    }

    /// Makes the disk under the root hold exactly this state's current tree.
    fn write_out(&self) -> io::Result<()> {
        for entry in fs::read_dir(&self.root)? {
            let path = entry?.path();
            if path.is_dir() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
        }
        let mut stack = vec![(ROOT, self.root.clone())];
        while let Some((ino, real)) = stack.pop() {
            match &self.nodes[&ino] {
                Node::Dir { current, .. } => {
                    if ino != ROOT {
                        fs::create_dir(&real)?;
                    }
                    stack.extend(current.iter().map(|(n, &c)| (c, real.join(n))));
                }
                Node::File { current, .. } => fs::write(&real, current)?,
            }
        }
        Ok(())
    }
}

/// A small deterministic generator, so the library needs no `rand`.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl CrashStorage {
    /// A storage over the directory `root`, whose present content counts as durable.
    pub fn new(root: &Path) -> io::Result<Self> {
        let root = root.canonicalize()?;
        let mut state = State::empty(root.clone());
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir)? {
                let path = entry?.path();
                state.adopt(&path)?;
                if path.is_dir() {
                    stack.push(path);
                }
            }
        }
        for node in state.nodes.values_mut() {
            match node {
                Node::File { durable, current } => durable.clone_from(current),
                Node::Dir { durable, current } => durable.clone_from(current),
            }
        }
        Ok(Self {
            state: Arc::new(Mutex::new(state)),
        })
    }

    /// The directory this storage models.
    pub fn root(&self) -> PathBuf {
        self.lock().root.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has already failed; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn crash_with(&self, torn_seed: Option<u64>) -> CrashStorage {
        let mut st = self.lock();
        let crashed = st.crashed(torn_seed);
        // The process that used this storage is dead: nothing it still holds writes again.
        st.fail_after = Some(0);
        crashed
            .write_out()
            .expect("the crash model rewrites its root directory");
        CrashStorage {
            state: Arc::new(Mutex::new(crashed)),
        }
    }

    /// A power loss now: rewrites the root to hold only what was made durable and returns
    /// the storage over it. This storage refuses every change from now on. Whatever reads
    /// the root (open files, maps) must be closed first.
    pub fn crash(&self) -> CrashStorage {
        self.crash_with(None)
    }

    /// Like [`Self::crash`], but each file whose entry survives also keeps a prefix of its
    /// unsynced tail, of a length chosen by `seed`; a quarter of the time the kept bytes read
    /// as zeros instead of what was written.
    pub fn crash_torn(&self, seed: u64) -> CrashStorage {
        self.crash_with(Some(seed))
    }

    /// From now on, every mutating operation after the first `ops` (counted since this
    /// storage was made) fails and changes nothing.
    pub fn set_fail_after(&self, ops: u64) {
        self.lock().fail_after = Some(ops);
    }

    /// Lets operations succeed again.
    pub fn clear_fail_after(&self) {
        self.lock().fail_after = None;
    }

    /// How many mutating operations have succeeded.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The bytes of a file that would survive a crash now (its entry aside).
    pub fn durable_len(&self, path: &Path) -> io::Result<u64> {
        let mut st = self.lock();
        let ino = st.adopt(path)?;
        match st.nodes.get(&ino) {
            Some(Node::File { durable, .. }) => Ok(durable.len() as u64),
            _ => Err(invalid(path, "not a file")),
        }
    }
}

struct CrashFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    file: File,
    cursor: u64,
}

impl CrashFile {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let state = Arc::clone(&self.state);
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        st.tick()?;
        self.file.write_all_at(data, offset)?;
        put(st.file_mut(self.ino).1, offset, data);
        Ok(())
    }
}

impl StorageFile for CrashFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.write(self.cursor, data)?;
        self.cursor += data.len() as u64;
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write(offset, data)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let (durable, current) = st.file_mut(self.ino);
        durable.clone_from(current);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.cursor
    }
}

impl CrashStorage {
    /// Opens `path` for writing through the model; `empty` truncates it.
    fn open(&self, path: &Path, empty: bool) -> io::Result<Box<dyn StorageFile>> {
        let mut st = self.lock();
        st.tick()?;
        st.parent_of(path)?;
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(empty)
            .open(path)?;
        let ino = st.adopt(path)?;
        if st.is_dir(ino) {
            return Err(invalid(path, "is a directory"));
        }
        let (durable, current) = st.file_mut(ino);
        if empty {
            current.clear();
            // The truncation may reach the disk at any moment (a journal commit of anything
            // else): the model keeps the worse outcome, an empty file.
            durable.clear();
        }
        let cursor = current.len() as u64;
        Ok(Box::new(CrashFile {
            state: Arc::clone(&self.state),
            ino,
            file,
            cursor,
        }))
    }
}

impl CrashStorage {
    /// Removes the file (or, with `dir`, the directory tree) at `path`. Unlinking its entry
    /// is the one change to the model: until its parent is synced a crash brings it back
    /// with whatever of it was durable.
    fn unlink(&self, path: &Path, dir: bool) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let ino = st.adopt(path)?;
        match (st.is_dir(ino), dir) {
            (true, false) => return Err(invalid(path, "is a directory")),
            (false, true) => return Err(invalid(path, "not a directory")),
            _ => {}
        }
        let (parent, name) = st.parent_of(path)?;
        if dir {
            fs::remove_dir_all(path)?;
        } else {
            fs::remove_file(path)?;
        }
        st.entries_mut(parent).remove(&name);
        Ok(())
    }
}

impl Storage for CrashStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        st.names(dir)?;
        fs::create_dir_all(dir)?;
        let ino = st.adopt(dir)?;
        if !st.is_dir(ino) {
            return Err(invalid(dir, "exists and is a file"));
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        super::FsStorage.list(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.open(path, false)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.open(path, true)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let ino = st.adopt(path)?;
        if st.is_dir(ino) {
            return Err(invalid(path, "is a directory"));
        }
        OpenOptions::new().write(true).open(path)?.set_len(len)?;
        let (durable, current) = st.file_mut(ino);
        current.resize(len as usize, 0);
        durable.clone_from(current);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let ino = st.adopt(from)?;
        let (from_dir, from_name) = st.parent_of(from)?;
        let (to_dir, to_name) = st.parent_of(to)?;
        if let Ok(old) = st.adopt(to) {
            if st.is_dir(old) {
                return Err(invalid(to, "is a directory"));
            }
        }
        fs::rename(from, to)?;
        st.entries_mut(from_dir).remove(&from_name);
        st.entries_mut(to_dir).insert(to_name, ino);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.unlink(path, false)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.unlink(path, true)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let ino = st.adopt(dir)?;
        match st.nodes.get_mut(&ino) {
            Some(Node::Dir { durable, current }) => {
                durable.clone_from(current);
                Ok(())
            }
            _ => Err(invalid(dir, "not a directory")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{create_dir_all_durable, write_atomic};

    /// A storage over a fresh directory, and a function naming paths in it.
    fn fresh() -> (tempfile::TempDir, CrashStorage) {
        let dir = tempfile::tempdir().unwrap();
        let s = CrashStorage::new(dir.path()).unwrap();
        (dir, s)
    }

    fn p(s: &CrashStorage, name: &str) -> PathBuf {
        s.root().join(name)
    }

    fn write(s: &CrashStorage, name: &str, data: &[u8], sync: bool) {
        let mut f = s.open_append(&p(s, name)).unwrap();
        f.append(data).unwrap();
        if sync {
            f.sync_data().unwrap();
        }
    }

    fn read(s: &CrashStorage, name: &str) -> Vec<u8> {
        s.read(&p(s, name)).unwrap()
    }

    #[test]
    fn synced_file_in_unsynced_dir_is_lost() {
        let (_d, s) = fresh();
        write(&s, "a", b"hello", true);
        let c = s.crash();
        assert!(!c.exists(&p(&c, "a")));
        write(&c, "a", b"hello", true);
        c.sync_dir(&c.root()).unwrap();
        let c = c.crash();
        assert_eq!(read(&c, "a"), b"hello");
    }

    #[test]
    fn unsynced_data_is_lost_but_entry_survives() {
        let (_d, s) = fresh();
        write(&s, "a", b"hello", false);
        s.sync_dir(&s.root()).unwrap();
        let c = s.crash();
        assert_eq!(read(&c, "a"), b"");
        write(&c, "a", b"hello", true);
        let mut f = c.open_append(&p(&c, "a")).unwrap();
        f.append(b" world").unwrap();
        // Syncing through any handle makes the whole file durable.
        write(&c, "a", b"", true);
        let c = c.crash();
        assert_eq!(read(&c, "a"), b"hello world");
        let mut f = c.open_append(&p(&c, "a")).unwrap();
        f.append(b"!").unwrap();
        drop(f);
        assert_eq!(read(&c, "a"), b"hello world!");
        assert_eq!(read(&c.crash(), "a"), b"hello world");
    }

    #[test]
    fn positional_writes_are_durable_only_when_synced() {
        let (_d, s) = fresh();
        let mut f = s.create(&p(&s, "f")).unwrap();
        f.append(b"0000abcd").unwrap();
        f.write_at(0, b"12").unwrap();
        f.write_at(10, b"zz").unwrap();
        assert_eq!(f.len(), 8);
        f.append(b"x").unwrap();
        assert_eq!(read(&s, "f"), b"1200abcdx\0zz");
        f.sync_data().unwrap();
        f.write_at(0, b"99").unwrap();
        drop(f);
        s.sync_dir(&s.root()).unwrap();
        let c = s.crash_torn(3);
        assert_eq!(read(&c, "f"), b"1200abcdx\0zz");
    }

    #[test]
    fn rename_without_sync_dir_is_undone() {
        let setup = || {
            let (d, s) = fresh();
            write(&s, "old", b"1", true);
            write(&s, "new", b"2", true);
            s.sync_dir(&s.root()).unwrap();
            s.rename(&p(&s, "new"), &p(&s, "old")).unwrap();
            assert_eq!(read(&s, "old"), b"2");
            (d, s)
        };
        let (_d, s) = setup();
        let c = s.crash();
        assert_eq!(read(&c, "old"), b"1");
        assert_eq!(read(&c, "new"), b"2");
        let (_d, s) = setup();
        s.sync_dir(&s.root()).unwrap();
        let c = s.crash();
        assert_eq!(read(&c, "old"), b"2");
        assert!(!c.exists(&p(&c, "new")));
    }

    #[test]
    fn remove_without_sync_dir_comes_back() {
        let setup = || {
            let (d, s) = fresh();
            s.create_dir_all(&p(&s, "d")).unwrap();
            s.sync_dir(&s.root()).unwrap();
            write(&s, "d/f", b"x", true);
            s.sync_dir(&p(&s, "d")).unwrap();
            s.remove_file(&p(&s, "d/f")).unwrap();
            assert!(!s.exists(&p(&s, "d/f")));
            (d, s)
        };
        let (_d, s) = setup();
        let c = s.crash();
        assert!(c.exists(&p(&c, "d/f")));
        let (_d, s) = setup();
        s.remove_dir_all(&p(&s, "d")).unwrap();
        assert_eq!(read(&s.crash(), "d/f"), b"x");
        let (_d, s) = setup();
        s.remove_dir_all(&p(&s, "d")).unwrap();
        s.sync_dir(&s.root()).unwrap();
        let c = s.crash();
        assert!(!c.exists(&p(&c, "d")));
    }

    #[test]
    fn new_directories_need_their_parents_synced() {
        let (_d, s) = fresh();
        s.create_dir_all(&p(&s, "a/b/c")).unwrap();
        s.sync_dir(&p(&s, "a/b")).unwrap();
        let c = s.crash();
        assert!(!c.exists(&p(&c, "a")));
        create_dir_all_durable(&c, &p(&c, "a/b/c")).unwrap();
        let c = c.crash();
        assert!(c.exists(&p(&c, "a/b/c")));
    }

    #[test]
    fn what_was_written_outside_the_storage_is_forgotten() {
        let (_d, s) = fresh();
        std::fs::create_dir(p(&s, "d")).unwrap();
        std::fs::write(p(&s, "d/outside"), b"x").unwrap();
        std::fs::write(p(&s, "loose"), b"y").unwrap();
        write(&s, "d/inside", b"z", true);
        s.sync_dir(&p(&s, "d")).unwrap();
        s.sync_dir(&s.root()).unwrap();
        let c = s.crash();
        assert_eq!(read(&c, "d/inside"), b"z");
        assert!(!c.exists(&p(&c, "d/outside")) && !c.exists(&p(&c, "loose")));
    }

    #[test]
    fn truncate_is_durable() {
        let (_d, s) = fresh();
        write(&s, "f", b"0123456789", false);
        s.sync_dir(&s.root()).unwrap();
        s.truncate(&p(&s, "f"), 4).unwrap();
        assert_eq!(read(&s.crash(), "f"), b"0123");
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_the_unsynced_tail() {
        let mut lengths = std::collections::BTreeSet::new();
        let mut zeroed = false;
        for seed in 0..100 {
            let (_d, s) = fresh();
            write(&s, "f", b"abc", true);
            s.sync_dir(&s.root()).unwrap();
            write(&s, "f", b"defghijklmnop", false);
            let got = read(&s.crash_torn(seed), "f");
            assert!(got.starts_with(b"abc") && got.len() <= 16);
            let tail = &got[3..];
            if !b"defghijklmnop".starts_with(tail) {
                assert!(tail.iter().all(|&b| b == 0), "{got:?}");
                zeroed = true;
            }
            lengths.insert(got.len());
        }
        assert!(lengths.len() > 5 && zeroed, "{lengths:?}");
    }

    #[test]
    fn fail_after_refuses_everything_later() {
        let (_d, s) = fresh();
        s.set_fail_after(2);
        let mut f = s.open_append(&p(&s, "f")).unwrap();
        f.append(b"a").unwrap();
        assert!(f.append(b"b").is_err());
        assert!(f.sync_data().is_err());
        assert!(s.sync_dir(&s.root()).is_err());
        assert_eq!(s.ops(), 2);
        assert_eq!(read(&s, "f"), b"a");
        s.clear_fail_after();
        f.sync_data().unwrap();
        assert_eq!(s.ops(), 3);
    }

    #[test]
    fn paths_outside_the_root_are_refused() {
        let (_d, s) = fresh();
        let other = tempfile::tempdir().unwrap();
        let err = s.open_append(&other.path().join("f")).err().unwrap();
        assert!(err.to_string().contains("outside"), "{err}");
    }

    #[test]
    fn write_atomic_replaces_durably() {
        let (_d, s) = fresh();
        write_atomic(&s, &p(&s, "m"), b"one").unwrap();
        write_atomic(&s, &p(&s, "m"), b"two").unwrap();
        let c = s.crash();
        assert_eq!(read(&c, "m"), b"two");
        assert_eq!(c.list(&c.root()).unwrap(), vec!["m".to_string()]);
    }
}
