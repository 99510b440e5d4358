//! [`CrashStorage`]: an in-memory file system that knows what a power loss would keep.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// The test double for [`Storage`]: an in-memory file system that models what survives a
/// power loss, as conservatively as Linux ext4/xfs promise it.
///
/// The model:
/// - Every file has `durable` bytes (as of its last [`StorageFile::sync_data`] or
///   [`Storage::truncate`]) and `current` bytes. Writes change `current` only.
/// - Every directory has a durable and a current set of entries (name to file or directory).
///   Creating, renaming and removing change the current set; [`Storage::sync_dir`] makes the
///   directory's current set durable. So a file created and synced in a directory that was
///   never synced is lost in a crash, a rename not followed by `sync_dir` is undone, and a
///   removed file comes back.
/// - [`CrashStorage::crash`] returns a new storage holding only the durable state, reached
///   from the root through durable entries; [`CrashStorage::crash_torn`] also keeps a prefix
///   (chosen by a seed) of each file's unsynced tail, sometimes as the real bytes and
///   sometimes as zeros (a size update that reached the disk before the data), which models
///   torn appends.
/// - [`CrashStorage::set_fail_after`] makes every mutating operation (create, append, sync,
///   rename, remove, truncate) after the first `n` fail with nothing taking effect: the
///   process "died" there. [`CrashStorage::ops`] counts the operations that succeeded, so a
///   test can run a workload once, then again for every crash point `0..=ops`.
///
/// Reads (`list`, `exists`, `read`, `len`) see the current state and are not counted.
/// Paths are resolved from one root; `/a/b` and `a/b` name the same file. Cloning shares the
/// state (it is one file system), as does every handle it opens.
#[derive(Debug, Clone, Default)]
pub struct CrashStorage {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Clone)]
struct State {
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

impl Default for State {
    fn default() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node::Dir {
                durable: BTreeMap::new(),
                current: BTreeMap::new(),
            },
        );
        State {
            nodes,
            next_ino: ROOT + 1,
            ops: 0,
            fail_after: None,
        }
    }
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

/// The path's names, from the root.
fn names(path: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_string_lossy().into_owned()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => return Err(invalid(path, "`..` is not supported")),
        }
    }
    Ok(out)
}

impl State {
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

    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let mut ino = ROOT;
        for name in names(path)? {
            match self.nodes.get(&ino) {
                Some(Node::Dir { current, .. }) => {
                    ino = *current.get(&name).ok_or_else(|| not_found(path))?;
                }
                _ => return Err(not_found(path)),
            }
        }
        Ok(ino)
    }

    /// The directory that holds `path`, and the last name of `path`.
    fn parent_of(&self, path: &Path) -> io::Result<(u64, String)> {
        let mut n = names(path)?;
        let name = n.pop().ok_or_else(|| invalid(path, "no file name"))?;
        let mut ino = ROOT;
        for part in n {
            match self.nodes.get(&ino) {
                Some(Node::Dir { current, .. }) => {
                    ino = *current.get(&part).ok_or_else(|| not_found(path))?;
                }
                _ => return Err(not_found(path)),
            }
        }
        match self.nodes.get(&ino) {
            Some(Node::Dir { .. }) => Ok((ino, name)),
            _ => Err(invalid(path, "parent is not a directory")),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match self.nodes.get_mut(&dir) {
            Some(Node::Dir { current, .. }) => current,
            _ => unreachable!("parent_of checked that this is a directory"),
        }
    }

    fn new_node(&mut self, node: Node) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    fn file_mut(&mut self, ino: u64) -> (&mut Vec<u8>, &mut Vec<u8>) {
        match self.nodes.get_mut(&ino) {
            Some(Node::File { durable, current }) => (durable, current),
            _ => unreachable!("file handles only point at files"),
        }
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
                        // Appends only ever extend `current` past `durable` (truncate syncs).
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
            nodes,
            next_ino: self.next_ino,
            ops: 0,
            fail_after: None,
        }
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
    /// An empty file system holding only the root directory.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has already failed; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state after a power loss now: only what was made durable. The returned storage
    /// is independent of this one (which tests should stop using).
    pub fn crash(&self) -> CrashStorage {
        CrashStorage {
            state: Arc::new(Mutex::new(self.lock().crashed(None))),
        }
    }

    /// Like [`Self::crash`], but each file whose entry survives also keeps a prefix of its
    /// unsynced tail, of a length chosen by `seed`; a quarter of the time the kept bytes read
    /// as zeros instead of what was written.
    pub fn crash_torn(&self, seed: u64) -> CrashStorage {
        CrashStorage {
            state: Arc::new(Mutex::new(self.lock().crashed(Some(seed)))),
        }
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
        let st = self.lock();
        match st.nodes.get(&st.lookup(path)?) {
            Some(Node::File { durable, .. }) => Ok(durable.len() as u64),
            _ => Err(invalid(path, "not a file")),
        }
    }
}

struct CrashFile {
    state: Arc<Mutex<State>>,
    ino: u64,
}

impl CrashFile {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StorageFile for CrashFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        st.file_mut(self.ino).1.extend_from_slice(data);
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let (durable, current) = st.file_mut(self.ino);
        durable.clone_from(current);
        Ok(())
    }

    fn len(&self) -> u64 {
        let mut st = self.lock();
        st.file_mut(self.ino).1.len() as u64
    }
}

impl Storage for CrashStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let mut ino = ROOT;
        for name in names(dir)? {
            let next = match st.nodes.get(&ino) {
                Some(Node::Dir { current, .. }) => current.get(&name).copied(),
                _ => return Err(invalid(dir, "a parent is a file")),
            };
            ino = match next {
                Some(child) => child,
                None => {
                    let child = st.new_node(Node::Dir {
                        durable: BTreeMap::new(),
                        current: BTreeMap::new(),
                    });
                    st.entries_mut(ino).insert(name, child);
                    child
                }
            };
        }
        match st.nodes.get(&ino) {
            Some(Node::Dir { .. }) => Ok(()),
            _ => Err(invalid(dir, "exists and is a file")),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        match st.nodes.get(&st.lookup(dir)?) {
            Some(Node::Dir { current, .. }) => Ok(current.keys().cloned().collect()),
            _ => Err(invalid(dir, "not a directory")),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        self.lock().lookup(path).is_ok()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let st = self.lock();
        match st.nodes.get(&st.lookup(path)?) {
            Some(Node::File { current, .. }) => Ok(current.clone()),
            _ => Err(invalid(path, "is a directory")),
        }
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut st = self.lock();
        st.tick()?;
        let (dir, name) = st.parent_of(path)?;
        let ino = match st.entries_mut(dir).get(&name).copied() {
            Some(ino) => match st.nodes.get(&ino) {
                Some(Node::File { .. }) => ino,
                _ => return Err(invalid(path, "is a directory")),
            },
            None => {
                let ino = st.new_node(Node::File {
                    durable: Vec::new(),
                    current: Vec::new(),
                });
                st.entries_mut(dir).insert(name, ino);
                ino
            }
        };
        Ok(Box::new(CrashFile {
            state: Arc::clone(&self.state),
            ino,
        }))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let ino = st.lookup(path)?;
        if !matches!(st.nodes.get(&ino), Some(Node::File { .. })) {
            return Err(invalid(path, "is a directory"));
        }
        let (durable, current) = st.file_mut(ino);
        current.resize(len as usize, 0);
        durable.clone_from(current);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let (from_dir, from_name) = st.parent_of(from)?;
        let (to_dir, to_name) = st.parent_of(to)?;
        let ino = *st
            .entries_mut(from_dir)
            .get(&from_name)
            .ok_or_else(|| not_found(from))?;
        if let Some(old) = st.entries_mut(to_dir).get(&to_name).copied() {
            if matches!(st.nodes.get(&old), Some(Node::Dir { .. })) {
                return Err(invalid(to, "is a directory"));
            }
        }
        st.entries_mut(from_dir).remove(&from_name);
        st.entries_mut(to_dir).insert(to_name, ino);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let (dir, name) = st.parent_of(path)?;
        let ino = *st
            .entries_mut(dir)
            .get(&name)
            .ok_or_else(|| not_found(path))?;
        if !matches!(st.nodes.get(&ino), Some(Node::File { .. })) {
            return Err(invalid(path, "is a directory"));
        }
        st.entries_mut(dir).remove(&name);
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let (dir, name) = st.parent_of(path)?;
        let ino = *st
            .entries_mut(dir)
            .get(&name)
            .ok_or_else(|| not_found(path))?;
        if !matches!(st.nodes.get(&ino), Some(Node::Dir { .. })) {
            return Err(invalid(path, "not a directory"));
        }
        // Unlinking the directory is the one change: until its parent is synced a crash
        // brings it back with whatever of its content was durable.
        st.entries_mut(dir).remove(&name);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.tick()?;
        let ino = st.lookup(dir)?;
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

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    fn write(s: &CrashStorage, path: &str, data: &[u8], sync: bool) {
        let mut f = s.open_append(p(path)).unwrap();
        f.append(data).unwrap();
        if sync {
            f.sync_data().unwrap();
        }
    }

    #[test]
    fn synced_file_in_unsynced_dir_is_lost() {
        let s = CrashStorage::new();
        write(&s, "/a", b"hello", true);
        assert!(!s.crash().exists(p("/a")));
        s.sync_dir(p("/")).unwrap();
        assert_eq!(s.crash().read(p("/a")).unwrap(), b"hello");
    }

    #[test]
    fn unsynced_data_is_lost_but_entry_survives() {
        let s = CrashStorage::new();
        write(&s, "/a", b"hello", false);
        s.sync_dir(p("/")).unwrap();
        let c = s.crash();
        assert_eq!(c.read(p("/a")).unwrap(), b"");
        write(&s, "/a", b"", true);
        let mut f = s.open_append(p("/a")).unwrap();
        f.append(b" world").unwrap();
        assert_eq!(s.crash().read(p("/a")).unwrap(), b"hello");
        // Syncing through any handle makes the whole file durable.
        write(&s, "/a", b"", true);
        assert_eq!(s.crash().read(p("/a")).unwrap(), b"hello world");
    }

    #[test]
    fn rename_without_sync_dir_is_undone() {
        let s = CrashStorage::new();
        write(&s, "/old", b"1", true);
        write(&s, "/new", b"2", true);
        s.sync_dir(p("/")).unwrap();
        s.rename(p("/new"), p("/old")).unwrap();
        assert_eq!(s.read(p("/old")).unwrap(), b"2");
        let c = s.crash();
        assert_eq!(c.read(p("/old")).unwrap(), b"1");
        assert_eq!(c.read(p("/new")).unwrap(), b"2");
        s.sync_dir(p("/")).unwrap();
        let c = s.crash();
        assert_eq!(c.read(p("/old")).unwrap(), b"2");
        assert!(!c.exists(p("/new")));
    }

    #[test]
    fn remove_without_sync_dir_comes_back() {
        let s = CrashStorage::new();
        s.create_dir_all(p("/d")).unwrap();
        s.sync_dir(p("/")).unwrap();
        write(&s, "/d/f", b"x", true);
        s.sync_dir(p("/d")).unwrap();
        s.remove_file(p("/d/f")).unwrap();
        assert!(!s.exists(p("/d/f")));
        assert!(s.crash().exists(p("/d/f")));
        s.remove_dir_all(p("/d")).unwrap();
        assert_eq!(s.crash().read(p("/d/f")).unwrap(), b"x");
        s.sync_dir(p("/")).unwrap();
        assert!(!s.crash().exists(p("/d")));
    }

    #[test]
    fn new_directories_need_their_parents_synced() {
        let s = CrashStorage::new();
        s.create_dir_all(p("/a/b/c")).unwrap();
        s.sync_dir(p("/a/b")).unwrap();
        assert!(!s.crash().exists(p("/a")));
        let s = CrashStorage::new();
        create_dir_all_durable(&s, p("/a/b/c")).unwrap();
        assert!(s.crash().exists(p("/a/b/c")));
    }

    #[test]
    fn truncate_is_durable() {
        let s = CrashStorage::new();
        write(&s, "/f", b"0123456789", false);
        s.sync_dir(p("/")).unwrap();
        s.truncate(p("/f"), 4).unwrap();
        assert_eq!(s.crash().read(p("/f")).unwrap(), b"0123");
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_the_unsynced_tail() {
        let s = CrashStorage::new();
        write(&s, "/f", b"abc", true);
        s.sync_dir(p("/")).unwrap();
        write(&s, "/f", b"defghijklmnop", false);
        let mut lengths = std::collections::BTreeSet::new();
        let mut zeroed = false;
        for seed in 0..200 {
            let got = s.crash_torn(seed).read(p("/f")).unwrap();
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
        let s = CrashStorage::new();
        s.set_fail_after(2);
        let mut f = s.open_append(p("/f")).unwrap();
        f.append(b"a").unwrap();
        assert!(f.sync_data().is_err());
        assert!(s.sync_dir(p("/")).is_err());
        assert_eq!(s.ops(), 2);
        s.clear_fail_after();
        f.sync_data().unwrap();
        assert_eq!(s.ops(), 3);
    }

    #[test]
    fn write_atomic_replaces_durably() {
        let s = CrashStorage::new();
        write_atomic(&s, p("/m"), b"one").unwrap();
        write_atomic(&s, p("/m"), b"two").unwrap();
        let c = s.crash();
        assert_eq!(c.read(p("/m")).unwrap(), b"two");
        assert_eq!(c.list(p("/")).unwrap(), vec!["m".to_string()]);
    }
}
