//! The store's database behind one type: the SQLite file (default) or
//! PostgreSQL (`BAE_DATABASE_URL`). Both implement the same write-batch /
//! read contract of [`engine::store`]; everything outside `store/` sees
//! only [`Backend`] and, on the store thread, [`Worker`].

use engine::replicas::Fence;
use engine::store::{ReadResult, Snapshot, SnapshotScope, StoreRead, StoreWrite};

use super::pg::PgStore;
use super::{Activity, MigrateReport, Result, Store, StoreConn};

/// An open store database.
#[derive(Debug)]
pub enum Backend {
    Sqlite(Store),
    // Boxed: a PostgreSQL client is several times the size of a SQLite one.
    Postgres(Box<PgStore>),
}

impl Backend {
    /// Applies pending migrations (refusing a newer schema).
    pub fn migrate(&mut self) -> Result<MigrateReport> {
        match self {
            Backend::Sqlite(s) => s.migrate(),
            Backend::Postgres(p) => p.migrate(),
        }
    }

    /// What the store restores the engine from.
    pub fn load_snapshot(&mut self, scope: SnapshotScope) -> Result<Snapshot> {
        match self {
            Backend::Sqlite(s) => s.load_snapshot_of(scope),
            Backend::Postgres(p) => p.load_snapshot_of(scope),
        }
    }

    /// Where the data lives, safe to log (a PostgreSQL password redacted).
    pub fn describe(&self) -> String {
        match self {
            Backend::Sqlite(s) => s.path().display().to_string(),
            Backend::Postgres(p) => p.describe(),
        }
    }

    /// The store thread's handle (SQLite: with its statement cache).
    pub fn worker(&mut self) -> Worker<'_> {
        match self {
            Backend::Sqlite(s) => {
                let checkpoints = s.background_checkpoints();
                Worker::Sqlite(s.conn(), checkpoints)
            }
            Backend::Postgres(p) => Worker::Postgres(p),
        }
    }
}

/// The store thread's view of a [`Backend`].
pub enum Worker<'a> {
    /// With the checkpoint thread, when it could be started.
    Sqlite(StoreConn<'a>, Option<super::checkpoint::Checkpointer>),
    Postgres(&'a mut PgStore),
}

impl Worker<'_> {
    /// One batch, atomically.
    pub fn commit(&mut self, batch: &[StoreWrite]) -> Result<()> {
        self.commit_fenced(batch, None)
    }

    /// One batch, atomically, after checking `fence` in its transaction
    /// (replica mode on PostgreSQL; a lone server's jobs carry none).
    pub fn commit_fenced(&mut self, batch: &[StoreWrite], fence: Option<&Fence>) -> Result<()> {
        match self {
            Worker::Sqlite(c, checkpoints) => {
                c.commit(batch)?;
                if let Some(ckpt) = checkpoints {
                    ckpt.committed();
                }
                Ok(())
            }
            Worker::Postgres(p) => p.commit_fenced(batch, fence),
        }
    }

    pub fn read(&mut self, read: &StoreRead) -> Result<ReadResult> {
        match self {
            Worker::Sqlite(c, _) => c.read(read),
            Worker::Postgres(p) => p.read(read),
        }
    }

    /// Consecutive reads (no write between them), answered in order; the
    /// PostgreSQL store may run them in parallel on its readers.
    pub fn read_many(&mut self, reads: Vec<StoreRead>) -> Vec<Result<ReadResult>> {
        match self {
            Worker::Sqlite(c, _) => reads.iter().map(|r| c.read(r)).collect(),
            Worker::Postgres(p) => p.read_many(reads),
        }
    }

    pub fn load_snapshot(&mut self, scope: SnapshotScope) -> Result<Snapshot> {
        match self {
            Worker::Sqlite(c, _) => c.load_snapshot_of(scope),
            Worker::Postgres(p) => p.load_snapshot_of(scope),
        }
    }

    pub fn activity(&mut self) -> Result<Activity> {
        match self {
            Worker::Sqlite(c, _) => c.activity(),
            Worker::Postgres(p) => p.activity(),
        }
    }
}
