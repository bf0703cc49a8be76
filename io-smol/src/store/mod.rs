//! SQLite storage (spec 08): connection setup, migrations, the engine's
//! write/read contract ([`engine::store`]) and the admin-key bootstrap.
//! This file holds the connection and its statement cache; the writes are
//! in `write.rs`, the reads and the snapshot in `read.rs`.
//!
//! One [`Store`] owns one SQLite connection. The driver moves it onto a
//! dedicated worker thread and talks to it through a [`StoreConn`], which
//! keeps every prepared statement for the lifetime of the connection.
//!
//! # Durability (`synchronous`)
//!
//! The database runs in WAL mode (best effort, spec 08 §8.3). With
//! [`Synchronous::Normal`] every committed transaction has been written to
//! the WAL file before `COMMIT` returns, so it survives a process crash or
//! `kill -9`; only the WAL fsync is deferred to checkpoints, so the last
//! transactions may be lost on power loss or an OS crash (the database is
//! never corrupted). [`Synchronous::Full`] fsyncs the WAL on every commit
//! and is durable against power loss too, at the cost of one fsync per
//! group commit.

mod backend;
mod bootstrap;
mod checkpoint;
mod history;
mod history_db;
mod json_scan;
pub(crate) mod lineage;
pub mod page_pool;
pub mod pg;
mod queries;
mod read;
pub(crate) mod rows;
mod schema;
mod usage_db;
mod write;

use queries::Q;
use rows::*;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use engine::store::{
    EventRow, EventType, KeyRole, KeyRow, ProfileRow, ReadResult, SessionRow, SessionState,
    Snapshot, SnapshotScope, StoreRead, StoreWrite, StoredSession,
};
use serde_json::Value;
use sqlite::{Connection, State, Statement};

pub use backend::{Backend, Worker};
pub use bootstrap::{
    bootstrap_admin_key, is_sha256_hex, is_valid_argon2id_phc, BootstrapError, BootstrapOutcome,
    BootstrapSettings, ADMIN_KEY_PREFIX, BOOTSTRAP_ADMIN_NAME, PROVISIONED_ADMIN_NAME,
};
pub use schema::{
    EXTRA_COLUMNS, EXTRA_INDEXES, EXTRA_TABLES, LATEST_VERSION, MIGRATIONS, RETIRED_INDEXES,
};

/// Busy timeout of every connection (spec 08 §1).
pub const BUSY_TIMEOUT_MS: usize = 10_000;

/// Default page cache of the store connection, in KiB
/// (`BAE_SQLITE_CACHE_KIB`).
pub const DEFAULT_CACHE_KIB: usize = 512;

/// Largest page cache `PRAGMA cache_size` takes (SQLite reads it as a
/// 32-bit int and would silently use its minimum for anything larger).
pub const MAX_CACHE_KIB: usize = i32::MAX as usize;

/// `PRAGMA synchronous` setting (see the module docs for what each means).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Survives process crashes; may lose the newest commits on power loss.
    #[default]
    Normal,
    /// fsync on every commit.
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "PRAGMA synchronous = NORMAL",
            Synchronous::Full => "PRAGMA synchronous = FULL",
        }
    }
}

/// A storage failure. `Display` gives a log-safe, operator-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The database file could not be opened or created.
    Open { path: PathBuf, detail: String },
    /// The database was written by a newer binary.
    NewerSchema { db: i64, max: i64 },
    /// Migrations failed (the transaction was rolled back).
    Migrate { detail: String },
    /// Any other SQLite error.
    Sqlite(String),
    /// A stored value could not be interpreted.
    Corrupt(String),
    /// PostgreSQL could not be reached or refused the connection; `target`
    /// is the URL with its password redacted.
    Connect { target: String, detail: String },
    /// The PostgreSQL server is older than this binary supports.
    ServerVersion { found: String },
    /// The database role may not create or use the server's tables.
    Privileges { detail: String },
    /// Any other PostgreSQL error.
    Postgres(String),
    /// The connection to PostgreSQL was lost (crash-only: fatal).
    ConnectionLost(String),
    /// Replica mode: this replica no longer holds its seq lane or a lease
    /// its work needs; the transaction was rolled back (crash-only: fatal).
    Fenced(String),
}

impl StoreError {
    /// Whether the store can no longer be used at all (the process exits,
    /// as after a failed commit).
    pub fn is_fatal(&self) -> bool {
        matches!(self, StoreError::ConnectionLost(_) | StoreError::Fenced(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Open { path, detail } => {
                let dir = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
                    _ => ".".to_string(),
                };
                write!(
                    f,
                    "cannot open database \"{}\": {detail}; the directory \"{dir}\" must exist \
                     and be writable by the server",
                    path.display()
                )
            }
            StoreError::NewerSchema { db, max } => write!(
                f,
                "database schema version {db} is newer than this binary supports (max {max}); \
                 upgrade the server or restore a compatible snapshot"
            ),
            StoreError::Migrate { detail } => {
                write!(f, "database migration failed: {detail}")?;
                if looks_like_permissions(detail) {
                    f.write_str(
                        "; the database file and its directory must exist and be writable \
                         by the server",
                    )?;
                }
                Ok(())
            }
            StoreError::Sqlite(detail) => write!(f, "database error: {detail}"),
            StoreError::Corrupt(detail) => write!(f, "unreadable database value: {detail}"),
            StoreError::Connect { target, detail } => write!(
                f,
                "cannot connect to PostgreSQL at \"{target}\" (BAE_DATABASE_URL): {detail}; \
                 check that the server runs, is reachable and accepts these credentials"
            ),
            StoreError::ServerVersion { found } => write!(
                f,
                "PostgreSQL server version {found} is not supported (13 or newer is required)"
            ),
            StoreError::Privileges { detail } => write!(
                f,
                "insufficient database privileges: {detail}; the role in BAE_DATABASE_URL \
                 must own the database's schema or be granted CREATE on it and SELECT, \
                 INSERT, UPDATE, DELETE on its tables (docs/scaling.md)"
            ),
            StoreError::Postgres(detail) => write!(f, "database error: {detail}"),
            StoreError::ConnectionLost(detail) => {
                write!(f, "connection to PostgreSQL lost: {detail}")
            }
            StoreError::Fenced(what) => write!(
                f,
                "fenced: this replica no longer holds {what} (another replica may have taken \
                 it over while this one was stopped or cut off); nothing was written"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<sqlite::Error> for StoreError {
    fn from(e: sqlite::Error) -> Self {
        StoreError::Sqlite(sqlite_text(&e))
    }
}

/// SQLite's wording for "cannot write here" (read-only file or directory,
/// or the WAL/journal cannot be created).
fn looks_like_permissions(detail: &str) -> bool {
    let d = detail.to_ascii_lowercase();
    d.contains("readonly") || d.contains("read-only") || d.contains("unable to open")
}

fn sqlite_text(e: &sqlite::Error) -> String {
    match (&e.message, e.code) {
        (Some(m), Some(c)) => format!("{m} (code {c})"),
        (Some(m), None) => m.clone(),
        (None, Some(c)) => format!("sqlite error code {c}"),
        (None, None) => "unknown sqlite error".to_string(),
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What [`Store::migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// Version found in the database before migrating (0 = fresh).
    pub from: i64,
    /// Version after migrating (always [`LATEST_VERSION`]).
    pub to: i64,
}

/// Database counts of the activity summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Activity {
    /// Live (not deleted) profiles.
    pub profiles: u64,
    /// Active client keys.
    pub client_keys: u64,
    pub open_sessions: u64,
    pub total_sessions: u64,
    pub events: u64,
}

impl Activity {
    /// Logs the summary line (live MCP connections are not the store's to
    /// know; the engine owns them).
    pub fn log(&self) {
        tracing::info!(
            profiles = self.profiles,
            client_keys = self.client_keys,
            open_sessions = self.open_sessions,
            total_sessions = self.total_sessions,
            events = self.events,
            "activity summary"
        );
    }
}

/// One SQLite connection to the server database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Write `provider.request` histories in shared chunks (reads always
    /// expand both forms). See [`Store::set_shared_history`].
    shared_history: bool,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if absent) the database at `path`: busy timeout 10 s,
    /// WAL journal (best effort), the given `synchronous`, foreign keys on,
    /// CHECK constraints not evaluated (see the comment in the body).
    /// Does not migrate; call [`Store::migrate`] next.
    pub fn open(path: impl AsRef<Path>, synchronous: Synchronous) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let open_err = |detail: String| StoreError::Open {
            path: path.clone(),
            detail,
        };
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(open_err("parent is not a directory".into())),
                Err(e) => return Err(open_err(format!("directory not accessible: {e}"))),
            }
        }
        let flags = sqlite::OpenFlags::new()
            .with_create()
            .with_read_write()
            .with_no_mutex();
        let mut conn =
            Connection::open_with_flags(&path, flags).map_err(|e| open_err(sqlite_text(&e)))?;
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            .map_err(|e| open_err(sqlite_text(&e)))?;
        // Touch the file so that a missing/unwritable location fails here.
        conn.execute("SELECT COUNT(*) FROM sqlite_master")
            .map_err(|e| open_err(sqlite_text(&e)))?;
        // Best effort (spec 08 §8.3): some filesystems refuse WAL.
        if let Err(e) = conn.execute("PRAGMA journal_mode = WAL") {
            tracing::debug!(error = %sqlite_text(&e), "journal_mode=WAL refused; keeping default");
        }
        conn.execute(synchronous.pragma())
            .map_err(|e| open_err(sqlite_text(&e)))?;
        conn.execute("PRAGMA foreign_keys = ON")
            .map_err(|e| open_err(sqlite_text(&e)))?;
        // The CHECK constraints of the schema (`keys.role`, `sessions.state`
        // IN a list of three) are not evaluated on this connection: SQLite
        // builds an ephemeral B-tree (its own pager and an 87 KB page-cache
        // allocation) for the list on every insert or state update (a fifth
        // of the store's instructions per kit text unit), and every value
        // this connection writes there comes from a closed Rust enum
        // (`KeyRole`, `SessionState`). The schema keeps them: other
        // connections still enforce them.
        conn.execute("PRAGMA ignore_check_constraints = ON")
            .map_err(|e| open_err(sqlite_text(&e)))?;
        Ok(Store {
            conn,
            path,
            shared_history: true,
        })
    }

    /// Sizes this connection's page cache (`PRAGMA cache_size`) to `kib`
    /// KiB. SQLite's own default is 2000 KiB; the store's working set (the
    /// tail of the events table and its indexes) fits in far less, and an
    /// idle server's RSS counts (docs/performance.md, "Defaults and store costs, measured").
    pub fn set_cache_kib(&self, kib: usize) -> Result<()> {
        self.conn.execute(format!("PRAGMA cache_size = -{kib}"))?;
        Ok(())
    }

    /// Moves WAL checkpoints off this connection's commits onto a thread
    /// of their own (see `checkpoint.rs`); `None` keeps the automatic ones.
    pub fn background_checkpoints(&self) -> Option<checkpoint::Checkpointer> {
        let ckpt = checkpoint::Checkpointer::start(&self.path)?;
        let backstop = format!("PRAGMA wal_autocheckpoint = {}", checkpoint::BACKSTOP_PAGES);
        if let Err(e) = self.conn.execute(backstop) {
            tracing::warn!(error = %sqlite_text(&e), "cannot raise the automatic checkpoint threshold");
            return None;
        }
        Some(ckpt)
    }

    /// The database file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `MAX(version)` of `schema_version`, 0 when the table is absent.
    pub fn schema_version(&self) -> Result<i64> {
        let mut st = self.conn.prepare(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
        )?;
        st.next()?;
        if st.read::<i64, _>(0)? == 0 {
            return Ok(0);
        }
        let mut st = self
            .conn
            .prepare("SELECT COALESCE(MAX(version), 0) FROM schema_version")?;
        st.next()?;
        Ok(st.read::<i64, _>(0)?)
    }

    /// Applies every pending migration (spec 08 §2) in one `IMMEDIATE`
    /// transaction with foreign keys off, then ensures the extra indexes.
    /// Refuses a database newer than [`LATEST_VERSION`].
    pub fn migrate(&self) -> Result<MigrateReport> {
        let from = self.schema_version()?;
        if from > LATEST_VERSION {
            return Err(StoreError::NewerSchema {
                db: from,
                max: LATEST_VERSION,
            });
        }
        if from < LATEST_VERSION {
            let mig = |e: sqlite::Error| StoreError::Migrate {
                detail: sqlite_text(&e),
            };
            // PRAGMA foreign_keys is a no-op inside a transaction: switch it
            // off before BEGIN and back on after COMMIT/ROLLBACK.
            self.conn
                .execute("PRAGMA foreign_keys = OFF")
                .map_err(mig)?;
            let outcome = self.apply_migrations(from);
            let restore = self.conn.execute("PRAGMA foreign_keys = ON");
            let applied = outcome?;
            restore.map_err(mig)?;
            for (version, name) in applied {
                tracing::info!(version, name, "applied database migration");
            }
        }
        for sql in EXTRA_TABLES {
            self.conn.execute(sql)?;
        }
        for &(table, column, decl) in EXTRA_COLUMNS {
            schema::add_column(&self.conn, table, column, decl)?;
        }
        for sql in EXTRA_INDEXES.iter().chain(RETIRED_INDEXES) {
            self.conn.execute(sql)?;
        }
        Ok(MigrateReport {
            from,
            to: LATEST_VERSION,
        })
    }

    fn apply_migrations(&self, from: i64) -> Result<Vec<(i64, &'static str)>> {
        let mig = |e: sqlite::Error| StoreError::Migrate {
            detail: sqlite_text(&e),
        };
        self.conn.execute("BEGIN IMMEDIATE").map_err(mig)?;
        let run = || -> Result<Vec<(i64, &'static str)>> {
            // Re-check under the write lock: another process may have
            // migrated between our read and BEGIN.
            let current = self.schema_version()?;
            if current > LATEST_VERSION {
                return Err(StoreError::NewerSchema {
                    db: current,
                    max: LATEST_VERSION,
                });
            }
            let mut applied = Vec::new();
            for m in MIGRATIONS.iter().filter(|m| m.version > current.max(from)) {
                self.conn.execute(m.sql).map_err(|e| StoreError::Migrate {
                    detail: format!("migration {} ({}): {}", m.version, m.name, sqlite_text(&e)),
                })?;
                let mut st = self
                    .conn
                    .prepare("INSERT INTO schema_version (version, applied_at) VALUES (?, datetime('now'))")
                    .map_err(mig)?;
                st.bind((1, m.version)).map_err(mig)?;
                while st.next().map_err(mig)? == State::Row {}
                applied.push((m.version, m.name));
            }
            Ok(applied)
        };
        match run() {
            Ok(applied) => match self.conn.execute("COMMIT") {
                Ok(()) => Ok(applied),
                Err(e) => {
                    let _ = self.conn.execute("ROLLBACK");
                    Err(mig(e))
                }
            },
            Err(e) => {
                let _ = self.conn.execute("ROLLBACK");
                Err(e)
            }
        }
    }

    /// A handle that caches prepared statements for as long as it lives.
    /// Whether new `provider.request` rows store their `messages` and
    /// `tools` once per session in `bae_history_chunks` (on for a store
    /// opened here; the server turns it on only with `BAE_SHARED_HISTORY`,
    /// since it changes the persisted payload format of spec 08). Rows of
    /// either form are always read back whole.
    pub fn set_shared_history(&mut self, on: bool) {
        self.shared_history = on;
    }

    pub fn conn(&self) -> StoreConn<'_> {
        StoreConn {
            shared_history: self.shared_history,
            conn: &self.conn,
            stmts: (0..Q::COUNT).map(|_| None).collect(),
            history: history::HistoryCache::new(history::CACHE_BYTES),
            touched: Vec::new(),
        }
    }

    /// See [`StoreConn::load_snapshot`].
    pub fn load_snapshot(&self) -> Result<Snapshot> {
        self.conn().load_snapshot()
    }

    /// See [`StoreConn::load_snapshot_of`].
    pub fn load_snapshot_of(&self, scope: SnapshotScope) -> Result<Snapshot> {
        self.conn().load_snapshot_of(scope)
    }

    /// See [`StoreConn::commit`].
    pub fn commit(&self, batch: &[StoreWrite]) -> Result<()> {
        self.conn().commit(batch)
    }

    /// See [`StoreConn::read`].
    pub fn read(&self, read: &StoreRead) -> Result<ReadResult> {
        self.conn().read(read)
    }

    /// Runs `f` inside one `BEGIN IMMEDIATE … COMMIT` transaction on this
    /// connection (rolled back when `f` or the commit fails). Used by the
    /// admin-key bootstrap.
    pub(crate) fn with_transaction<T, E>(
        &self,
        f: impl FnOnce(&Connection) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<StoreError>,
    {
        self.conn
            .execute("BEGIN IMMEDIATE")
            .map_err(StoreError::from)?;
        match f(&self.conn) {
            Ok(v) => match self.conn.execute("COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    let _ = self.conn.execute("ROLLBACK");
                    Err(StoreError::from(e).into())
                }
            },
            Err(e) => {
                let _ = self.conn.execute("ROLLBACK");
                Err(e)
            }
        }
    }

    pub(crate) fn raw(&self) -> &Connection {
        &self.conn
    }
}

/// A borrowed connection with a per-connection prepared-statement cache.
/// The store worker keeps one for its whole life.
pub struct StoreConn<'c> {
    conn: &'c Connection,
    stmts: Vec<Option<Statement<'c>>>,
    /// The latest stored `provider.request` of recently active sessions
    /// (`history_db.rs`).
    history: history::HistoryCache,
    /// Sessions whose history entry the open transaction changed: forgotten
    /// if it rolls back, so that no entry names a chunk that is not there.
    touched: Vec<String>,
    /// See [`Store::set_shared_history`].
    shared_history: bool,
}

impl<'c> StoreConn<'c> {
    /// The cached, reset statement for `q` (prepared on first use).
    fn stmt(&mut self, q: Q) -> Result<&mut Statement<'c>> {
        let slot = &mut self.stmts[q as usize];
        if slot.is_none() {
            *slot = Some(self.conn.prepare(q.sql())?);
        }
        let st = slot.as_mut().expect("just filled");
        st.reset()?;
        Ok(st)
    }

    fn run(&mut self, q: Q) -> Result<()> {
        let st = self.stmt(q)?;
        let r = step_to_end(st);
        let _ = st.reset();
        r
    }
}

fn step_to_end(st: &mut Statement<'_>) -> Result<()> {
    while st.next()? == State::Row {}
    Ok(())
}

/// Runs a bound write statement to completion and resets it.
fn finish(st: &mut Statement<'_>) -> Result<()> {
    let r = step_to_end(st);
    let _ = st.reset();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column `col` of every row `sql` gives on the store's connection.
    fn column(store: &Store, sql: &str, col: usize) -> Vec<String> {
        let mut st = store.raw().prepare(sql).unwrap();
        let mut out = Vec::new();
        while st.next().unwrap() == State::Row {
            out.push(st.read::<String, _>(col).unwrap());
        }
        out
    }

    /// `EXPLAIN QUERY PLAN` details of `q` on a migrated database.
    fn plan(store: &Store, q: Q) -> Vec<String> {
        column(store, &format!("EXPLAIN QUERY PLAN {}", q.sql()), 3)
    }

    /// The history reads and the chunk reads of stored `provider.request`
    /// histories are index range searches: no table scan, no sort.
    #[test]
    fn history_reads_search_an_index() {
        let store = Store::open(":memory:", Synchronous::Normal).unwrap();
        store.migrate().unwrap();
        for (q, index) in [
            (Q::LatestOfType, "idx_session_events_session_type"),
            (Q::OfTypeFrom, "idx_session_events_session_type"),
            (Q::SelectEventById, "sqlite_autoindex_session_events_1"),
            (Q::SelectChunks, "sqlite_autoindex_bae_history_chunks_1"),
            (Q::LastChunkOrd, "sqlite_autoindex_bae_history_chunks_1"),
        ] {
            let details = plan(&store, q);
            assert_eq!(details.len(), 1, "{q:?}: {details:?}");
            let d = &details[0];
            assert!(
                d.starts_with("SEARCH ") && d.contains(" INDEX ") && d.contains(index),
                "{q:?}: {d}"
            );
        }
    }

    #[test]
    fn the_page_cache_is_sized_in_kib() {
        let store = Store::open(":memory:", Synchronous::Normal).unwrap();
        store.set_cache_kib(DEFAULT_CACHE_KIB).unwrap();
        let mut st = store.raw().prepare("PRAGMA cache_size").unwrap();
        assert_eq!(st.next().unwrap(), State::Row);
        // Negative: a size in KiB, not in pages.
        assert_eq!(st.read::<i64, _>(0).unwrap(), -512);
    }

    /// The opcodes of `sql` as this store's connection compiles it.
    fn opcodes(store: &Store, sql: &str) -> Vec<String> {
        column(store, &format!("EXPLAIN {sql}"), 1)
    }

    /// The rows every session open writes build no ephemeral table: the
    /// schema's `CHECK (… IN (three values))` lists are not evaluated on the
    /// store's connection (docs/storage.md, "Connection setup").
    #[test]
    fn session_and_key_writes_build_no_ephemeral_table() {
        let store = Store::open(":memory:", Synchronous::Normal).unwrap();
        store.migrate().unwrap();
        for q in [
            Q::InsertSession,
            Q::InsertKey,
            Q::SetSessionState,
            Q::InsertEvent,
        ] {
            let ops = opcodes(&store, q.sql());
            assert!(
                ops.iter().any(|o| o == "Insert" || o == "IdxInsert"),
                "{q:?}: {ops:?}"
            );
            assert!(!ops.iter().any(|o| o == "OpenEphemeral"), "{q:?}: {ops:?}");
        }
    }

    /// Another connection to the same file still enforces the schema's
    /// CHECK constraints: only the store's own writes skip them.
    #[test]
    fn other_connections_still_enforce_the_check_constraints() {
        let path = testkit::TestPath::new("baesrv-checks", "bae.db").unwrap();
        let store = Store::open(&path, Synchronous::Normal).unwrap();
        store.migrate().unwrap();
        let other = Connection::open(&*path).unwrap();
        let bad = other.execute(
            "INSERT INTO keys (id, name, key_hash, key_prefix, role) \
             VALUES ('key_x', 'x', 'h', 'p', 'root')",
        );
        assert!(bad.is_err(), "a role outside the CHECK list was stored");
    }

    /// A database written by an earlier version loses the retired index
    /// at the next start; nothing else about it changes.
    #[test]
    fn retired_indexes_are_dropped_at_start() {
        let store = Store::open(":memory:", Synchronous::Normal).unwrap();
        store.migrate().unwrap();
        store
            .raw()
            .execute("CREATE INDEX bae_idx_keys_role_prefix ON keys(role, key_prefix)")
            .unwrap();
        let count = |store: &Store| {
            let mut st = store
                .raw()
                .prepare(
                    "SELECT COUNT(*) FROM sqlite_master \
                     WHERE type = 'index' AND name = 'bae_idx_keys_role_prefix'",
                )
                .unwrap();
            assert_eq!(st.next().unwrap(), State::Row);
            st.read::<i64, _>(0).unwrap()
        };
        assert_eq!(count(&store), 1);
        store.migrate().unwrap();
        assert_eq!(count(&store), 0);
        assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    }
}
