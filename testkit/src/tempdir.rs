//! A minimal temporary directory under `std::env::temp_dir()`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A directory removed on drop unless [`TestDir::keep`] was called, it was
/// adopted with [`TestDir::existing`], or `TESTKIT_KEEP_DIRS` is set.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
    remove: bool,
}

impl TestDir {
    /// Create a fresh, uniquely named directory.
    pub fn new(prefix: &str) -> io::Result<TestDir> {
        let base = std::env::temp_dir();
        loop {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("{prefix}-{}-{n}-{nanos:08x}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TestDir { path, remove: true }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Adopt an existing directory (created if missing); never removed.
    pub fn existing(path: impl Into<PathBuf>) -> io::Result<TestDir> {
        let path = path.into();
        std::fs::create_dir_all(&path)?;
        Ok(TestDir {
            path,
            remove: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// Do not remove the directory on drop.
    pub fn keep(&mut self) {
        self.remove = false;
    }

    /// Whether the directory will be removed on drop.
    pub fn will_remove(&self) -> bool {
        self.remove
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A file's path in a fresh [`TestDir`] of its own (which it keeps alive):
/// a database that goes, with its `-wal` and `-shm`, when the test is done.
#[derive(Debug)]
pub struct TestPath {
    path: PathBuf,
    _dir: TestDir,
}

impl TestPath {
    pub fn new(prefix: &str, file_name: &str) -> io::Result<TestPath> {
        let dir = TestDir::new(prefix)?;
        Ok(TestPath {
            path: dir.join(file_name),
            _dir: dir,
        })
    }
}

impl std::ops::Deref for TestPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TestPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if self.remove && std::env::var_os("TESTKIT_KEEP_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
