//! The persisted schema: the nine numbered migrations of spec 08 §2 and the
//! extra (unnumbered) indexes this server adds for its hot queries.

/// Highest migration version this binary knows (spec 08 §2).
pub const LATEST_VERSION: i64 = 9;

/// One forward-only migration.
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    /// One or more statements, executed as a script.
    pub sql: &'static str,
}

/// The numbered migrations, in order. The SQL of an applied migration must
/// never change: databases written by the reference server (same version)
/// are a compatibility surface.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "schema_version",
        sql: "CREATE TABLE IF NOT EXISTS schema_version (
                  version    INTEGER PRIMARY KEY,
                  applied_at TEXT NOT NULL
              );",
    },
    Migration {
        version: 2,
        name: "keys",
        sql: "CREATE TABLE keys (
                  id           TEXT PRIMARY KEY,
                  name         TEXT NOT NULL,
                  key_hash     TEXT NOT NULL,
                  key_prefix   TEXT NOT NULL,
                  role         TEXT NOT NULL CHECK (role IN ('client', 'session')),
                  profile_id   TEXT REFERENCES profiles(id),
                  client_id    TEXT REFERENCES keys(id),
                  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                  last_used_at TEXT,
                  deleted_at   TEXT
              );",
    },
    Migration {
        version: 3,
        name: "profiles",
        sql: "CREATE TABLE profiles (
                  id               TEXT PRIMARY KEY,
                  name             TEXT NOT NULL UNIQUE,
                  provider_config  TEXT NOT NULL,
                  fallback_configs TEXT NOT NULL DEFAULT '[]',
                  mcp_servers      TEXT NOT NULL DEFAULT '[]',
                  allowed_tools    TEXT NOT NULL DEFAULT '[]',
                  created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                  updated_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                  deleted_at       TEXT
              );",
    },
    Migration {
        version: 4,
        name: "sessions",
        sql: "CREATE TABLE sessions (
                  id             TEXT PRIMARY KEY,
                  client_key_id  TEXT NOT NULL REFERENCES keys(id),
                  profile_id     TEXT NOT NULL REFERENCES profiles(id),
                  state          TEXT NOT NULL CHECK (state IN ('open', 'closed', 'error')),
                  client_version TEXT,
                  client_tools   TEXT NOT NULL DEFAULT '{}',
                  created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                  closed_at      TEXT
              );",
    },
    Migration {
        version: 5,
        name: "session_events",
        sql: "CREATE TABLE session_events (
                  id            TEXT PRIMARY KEY,
                  session_id    TEXT NOT NULL REFERENCES sessions(id),
                  client_key_id TEXT,
                  event_type    TEXT NOT NULL,
                  payload       TEXT NOT NULL,
                  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
              );",
    },
    Migration {
        version: 6,
        name: "admin_key_role",
        // Create-copy-drop-rename: SQLite cannot alter a CHECK constraint.
        // Foreign keys are off while migrations run, so dropping the old
        // table does not cascade or fail on the rows that reference it.
        sql: "CREATE TABLE keys_new (
                  id           TEXT PRIMARY KEY,
                  name         TEXT NOT NULL,
                  key_hash     TEXT NOT NULL,
                  key_prefix   TEXT NOT NULL,
                  role         TEXT NOT NULL CHECK (role IN ('client', 'session', 'admin')),
                  profile_id   TEXT REFERENCES profiles(id),
                  client_id    TEXT REFERENCES keys(id),
                  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                  last_used_at TEXT,
                  deleted_at   TEXT
              );
              INSERT INTO keys_new (id, name, key_hash, key_prefix, role, profile_id,
                                    client_id, created_at, last_used_at, deleted_at)
                  SELECT id, name, key_hash, key_prefix, role, profile_id,
                         client_id, created_at, last_used_at, deleted_at
                  FROM keys ORDER BY rowid;
              DROP TABLE keys;
              ALTER TABLE keys_new RENAME TO keys;",
    },
    Migration {
        version: 7,
        name: "profiles_sandboxes",
        sql: "ALTER TABLE profiles ADD COLUMN available_sandboxes TEXT;
              ALTER TABLE sessions ADD COLUMN sandbox_tools TEXT;",
    },
    Migration {
        version: 8,
        name: "sessions_subagent_tools",
        sql: "ALTER TABLE sessions ADD COLUMN subagent_tools TEXT;",
    },
    Migration {
        version: 9,
        name: "sessions_compaction",
        sql: "ALTER TABLE sessions ADD COLUMN compaction TEXT;
              CREATE INDEX idx_session_events_session_type
                  ON session_events(session_id, event_type);",
    },
];

/// Secondary indexes for this server's hot queries (spec 08 §3.5).
///
/// They are deliberately NOT a numbered migration: `schema_version` must
/// stay at 9 (C-233) so that a database remains interchangeable with the
/// reference server of the same schema version. Extra indexes are invisible
/// to every query the reference makes (SQLite only ever adds access paths),
/// so `CREATE INDEX IF NOT EXISTS` at every start is both safe on a
/// reference-written database and idempotent on ours.
pub const EXTRA_INDEXES: &[&str] = &[
    // Session-key auth: role='session' AND name=<session id>.
    "CREATE INDEX IF NOT EXISTS bae_idx_keys_role_name ON keys(role, name)",
    // Event paging and per-session counts: (session_id, rowid) order. The
    // (session_id, event_type) index cannot serve `rowid > ? ORDER BY rowid`
    // across event types without a sort.
    "CREATE INDEX IF NOT EXISTS bae_idx_session_events_session ON session_events(session_id)",
];

/// Extra indexes of earlier versions that no query uses any more, dropped
/// at start: each still cost a B-tree insert on every write of its table.
pub const RETIRED_INDEXES: &[&str] = &[
    // On keys(role, key_prefix), for client-key auth by prefix; client keys
    // are authenticated from memory, and no statement reads keys by
    // prefix. Session-key prefixes are random, so every session open
    // dirtied (and often read back from disk) a random leaf of it.
    "DROP INDEX IF EXISTS bae_idx_keys_role_prefix",
];

/// Tables only this server uses, created like [`EXTRA_INDEXES`] (outside
/// the numbered migrations, so `schema_version` stays the reference's):
/// a reference server never reads them.
pub const EXTRA_TABLES: &[&str] = &[
    // `sendMessage` idempotency keys (extension `send.idempotent`).
    "CREATE TABLE IF NOT EXISTS bae_idempotency_keys (
         session_id    TEXT NOT NULL,
         client_key_id TEXT NOT NULL,
         key           TEXT NOT NULL,
         digest        TEXT NOT NULL,
         created_ms    INTEGER NOT NULL,
         outcome       TEXT,
         PRIMARY KEY (session_id, client_key_id, key)
     )",
    "CREATE INDEX IF NOT EXISTS bae_idx_idempotency_created ON bae_idempotency_keys(created_ms)",
    // The elements of `provider.request` histories, stored once per
    // session (`history.rs`): `body` is a JSON array of consecutive
    // elements. Rows are only ever inserted, in the transaction of the
    // first event row that names them.
    "CREATE TABLE IF NOT EXISTS bae_history_chunks (
         session_id TEXT NOT NULL,
         ord        INTEGER NOT NULL,
         body       TEXT NOT NULL,
         PRIMARY KEY (session_id, ord)
     )",
    // Where forked and imported sessions came from (extension; the event
    // log holds only catalogue types, so plain readers never see it).
    // `kind` is `fork` (with the parent and the event it was forked
    // after) or `import` (with the source document's session id); a
    // column is added by [`EXTRA_COLUMNS`].
    "CREATE TABLE IF NOT EXISTS bae_session_lineage (
         session_id        TEXT PRIMARY KEY,
         kind              TEXT NOT NULL,
         parent_id         TEXT,
         parent_event_id   TEXT,
         source_session_id TEXT,
         created_at        TEXT NOT NULL
     )",
    "CREATE INDEX IF NOT EXISTS bae_idx_session_lineage_parent
         ON bae_session_lineage(parent_id)",
    // Usage accounting (extension): one row per successful provider
    // attempt, keyed by its `provider.response` event's seq, written in
    // that event's transaction (`usage_db.rs`).
    "CREATE TABLE IF NOT EXISTS bae_usage (
         event_seq          INTEGER PRIMARY KEY,
         session_id         TEXT NOT NULL,
         turn_seq           INTEGER NOT NULL,
         turn_event_id      TEXT NOT NULL,
         client_key_id      TEXT NOT NULL,
         profile_id         TEXT NOT NULL,
         provider           TEXT NOT NULL,
         model              TEXT NOT NULL,
         compaction         INTEGER NOT NULL,
         created_ms         INTEGER NOT NULL,
         input_tokens       INTEGER NOT NULL,
         output_tokens      INTEGER NOT NULL,
         cache_write_tokens INTEGER NOT NULL,
         cache_read_tokens  INTEGER NOT NULL
     )",
    "CREATE INDEX IF NOT EXISTS bae_idx_usage_session ON bae_usage(session_id, turn_seq)",
    "CREATE INDEX IF NOT EXISTS bae_idx_usage_key ON bae_usage(client_key_id, created_ms)",
    "CREATE INDEX IF NOT EXISTS bae_idx_usage_profile ON bae_usage(profile_id, created_ms)",
    // Quotas per client key and per profile (extension; `scope` is `key`
    // or `profile`, `quota` the JSON the admin API took).
    "CREATE TABLE IF NOT EXISTS bae_quotas (
         scope      TEXT NOT NULL,
         id         TEXT NOT NULL,
         quota      TEXT NOT NULL,
         updated_at TEXT NOT NULL,
         PRIMARY KEY (scope, id)
     )",
];

/// Columns of [`EXTRA_TABLES`] added after the table first shipped, as
/// `(table, column, declaration)`: each is added at start when missing
/// (SQLite has no `ADD COLUMN IF NOT EXISTS`), after the tables and before
/// the indexes. Forward-only, like the numbered migrations: a column is
/// never dropped or redefined, and rows written before it read NULL.
pub const EXTRA_COLUMNS: &[(&str, &str, &str)] = &[
    // The seq of the last event a fork or an import copied into the
    // session (issue 38): the `session.driver.register` events up to it
    // are its parent's, and a fork starts with no drivers. NULL (rows of
    // earlier versions) reads as 0: nothing is known to be copied.
    ("bae_session_lineage", "copied_through", "INTEGER"),
];

/// Adds one of [`EXTRA_COLUMNS`] unless the table has it, under the write
/// lock (another process may be starting on the same file).
pub(super) fn add_column(
    conn: &sqlite::Connection,
    table: &str,
    column: &str,
    decl: &str,
) -> super::Result<()> {
    let mig = |e: sqlite::Error| super::StoreError::Migrate {
        detail: format!("column {table}.{column}: {}", super::sqlite_text(&e)),
    };
    conn.execute("BEGIN IMMEDIATE").map_err(mig)?;
    let run = || -> Result<bool, sqlite::Error> {
        let mut st = conn.prepare("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2")?;
        st.bind((1, table))?;
        st.bind((2, column))?;
        st.next()?;
        if st.read::<i64, _>(0)? > 0 {
            return Ok(false);
        }
        drop(st);
        conn.execute(format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
        Ok(true)
    };
    match run() {
        Ok(added) => {
            conn.execute("COMMIT").map_err(mig)?;
            if added {
                tracing::info!(table, column, "added database column");
            }
            Ok(())
        }
        Err(e) => {
            let _ = conn.execute("ROLLBACK");
            Err(mig(e))
        }
    }
}
