//! The PostgreSQL schema: its own numbered migrations (the SQLite numbers
//! are the reference server's compatibility surface; nothing reads a
//! PostgreSQL database but this server), recorded in `schema_version`.
//!
//! Same tables, columns and meaning as the SQLite schema of spec 08 with
//! the server's extra tables, except:
//!
//! * `session_events.seq` is the explicit event sequence (SQLite's rowid);
//!   the other tables carry an identity `ord` for creation order;
//! * the texts a client chooses and the store keeps verbatim (profile and
//!   key names, `client_version`, idempotency keys) are `BYTEA`: UTF-8 as
//!   given, since PostgreSQL `TEXT` cannot hold a NUL character that JSON
//!   lets a client send;
//! * ordering by a text column uses `COLLATE "C"` (byte order, as SQLite).
//!
//! Keys are stored as SHA-256 digests only, exactly as in SQLite.

/// One forward-only migration.
pub struct PgMigration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Highest migration version this binary knows.
pub const PG_LATEST_VERSION: i64 = 9;

/// Oldest PostgreSQL server accepted (`server_version_num`).
pub const PG_MIN_SERVER_VERSION: i32 = 130000;

/// Every table the server reads and writes (checked for privileges at
/// start).
pub const PG_TABLES: &[&str] = &[
    "schema_version",
    "profiles",
    "keys",
    "sessions",
    "session_events",
    "bae_idempotency_keys",
    "session_leases",
    "replica_lanes",
    "bae_session_lineage",
    "bae_usage",
    "bae_quotas",
];

pub const PG_MIGRATIONS: &[PgMigration] = &[
    PgMigration {
        version: 1,
        name: "schema_version",
        sql: "CREATE TABLE IF NOT EXISTS schema_version (
                  version    BIGINT PRIMARY KEY,
                  applied_at TEXT NOT NULL
              );",
    },
    PgMigration {
        version: 2,
        name: "core",
        sql: "CREATE TABLE profiles (
                  ord                 BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                  id                  TEXT PRIMARY KEY,
                  name                BYTEA NOT NULL UNIQUE,
                  provider_config     TEXT NOT NULL,
                  fallback_configs    TEXT NOT NULL DEFAULT '[]',
                  mcp_servers         TEXT NOT NULL DEFAULT '[]',
                  allowed_tools       TEXT NOT NULL DEFAULT '[]',
                  available_sandboxes TEXT,
                  created_at          TEXT NOT NULL,
                  updated_at          TEXT NOT NULL,
                  deleted_at          TEXT
              );
              CREATE TABLE keys (
                  ord          BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                  id           TEXT PRIMARY KEY,
                  name         BYTEA NOT NULL,
                  key_hash     TEXT NOT NULL,
                  key_prefix   TEXT NOT NULL,
                  role         TEXT NOT NULL CHECK (role IN ('client', 'session', 'admin')),
                  profile_id   TEXT REFERENCES profiles(id),
                  client_id    TEXT REFERENCES keys(id),
                  created_at   TEXT NOT NULL,
                  last_used_at TEXT,
                  deleted_at   TEXT
              );
              CREATE INDEX bae_idx_keys_role_name ON keys(role, name);
              CREATE INDEX bae_idx_keys_role_prefix ON keys(role, key_prefix);
              CREATE TABLE sessions (
                  ord            BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                  id             TEXT PRIMARY KEY,
                  client_key_id  TEXT NOT NULL REFERENCES keys(id),
                  profile_id     TEXT NOT NULL REFERENCES profiles(id),
                  state          TEXT NOT NULL CHECK (state IN ('open', 'closed', 'error')),
                  client_version BYTEA,
                  client_tools   TEXT NOT NULL DEFAULT '{}',
                  sandbox_tools  TEXT,
                  subagent_tools TEXT,
                  compaction     TEXT,
                  created_at     TEXT NOT NULL,
                  closed_at      TEXT
              );
              CREATE TABLE session_events (
                  seq           BIGINT PRIMARY KEY,
                  id            TEXT NOT NULL UNIQUE,
                  session_id    TEXT NOT NULL REFERENCES sessions(id),
                  client_key_id TEXT,
                  event_type    TEXT NOT NULL,
                  payload       TEXT NOT NULL,
                  created_at    TEXT NOT NULL
              );
              CREATE INDEX bae_idx_session_events_session ON session_events(session_id, seq);
              CREATE INDEX bae_idx_session_events_session_type
                  ON session_events(session_id, event_type, seq);",
    },
    PgMigration {
        version: 3,
        name: "idempotency_keys",
        sql: "CREATE TABLE bae_idempotency_keys (
                  session_id    TEXT NOT NULL,
                  client_key_id TEXT NOT NULL,
                  key           BYTEA NOT NULL,
                  digest        TEXT NOT NULL,
                  created_ms    BIGINT NOT NULL,
                  outcome       TEXT,
                  PRIMARY KEY (session_id, client_key_id, key)
              );
              CREATE INDEX bae_idx_idempotency_created ON bae_idempotency_keys(created_ms);",
    },
    // Replica mode (docs/scaling.md): which replica serves each session
    // and which seq lane each running replica writes in. Expiry uses the
    // database's clock; a lone server never writes these tables.
    PgMigration {
        version: 4,
        name: "replica_leases",
        sql: "CREATE TABLE session_leases (
                  session_id TEXT PRIMARY KEY,
                  owner      TEXT NOT NULL,
                  addr       TEXT NOT NULL,
                  expires_at TIMESTAMPTZ NOT NULL
              );
              CREATE INDEX bae_idx_session_leases_owner ON session_leases(owner);
              CREATE TABLE replica_lanes (
                  lane       INTEGER PRIMARY KEY,
                  owner      TEXT NOT NULL,
                  expires_at TIMESTAMPTZ NOT NULL
              );",
    },
    // Where forked and imported sessions came from (extension; see the
    // SQLite store's `bae_session_lineage`).
    PgMigration {
        version: 5,
        name: "session_lineage",
        sql: "CREATE TABLE bae_session_lineage (
                  ord               BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
                  session_id        TEXT PRIMARY KEY,
                  kind              TEXT NOT NULL CHECK (kind IN ('fork', 'import')),
                  parent_id         TEXT,
                  parent_event_id   TEXT,
                  source_session_id TEXT,
                  created_at        TEXT NOT NULL
              );
              CREATE INDEX bae_idx_session_lineage_parent ON bae_session_lineage(parent_id);",
    },
    // Fencing tokens (docs/scaling.md, "Fencing"): every running replica
    // process draws one at start and writes it into the lane and the
    // leases it takes; a commit checks, in its own transaction, that its
    // lane and the leases of the sessions it writes still carry it. The
    // owner name alone cannot fence: a restart with a fixed
    // `BAE_REPLICA_ID` shares it with a frozen predecessor. Renewals and
    // releases find a replica's rows by token.
    PgMigration {
        version: 6,
        name: "fencing_tokens",
        sql: "ALTER TABLE session_leases ADD COLUMN token BIGINT NOT NULL DEFAULT 0;
              ALTER TABLE replica_lanes ADD COLUMN token BIGINT NOT NULL DEFAULT 0;
              DROP INDEX bae_idx_session_leases_owner;
              CREATE INDEX bae_idx_session_leases_token ON session_leases(token);",
    },
    // Usage accounting (extension): one row per successful provider
    // attempt, keyed by its `provider.response` event's seq, written in
    // that event's transaction.
    PgMigration {
        version: 7,
        name: "usage",
        sql: "CREATE TABLE bae_usage (
                  event_seq          BIGINT PRIMARY KEY,
                  session_id         TEXT NOT NULL,
                  turn_seq           BIGINT NOT NULL,
                  turn_event_id      TEXT NOT NULL,
                  client_key_id      TEXT NOT NULL,
                  profile_id         TEXT NOT NULL,
                  provider           TEXT NOT NULL,
                  model              TEXT NOT NULL,
                  compaction         BOOLEAN NOT NULL,
                  created_ms         BIGINT NOT NULL,
                  input_tokens       BIGINT NOT NULL,
                  output_tokens      BIGINT NOT NULL,
                  cache_write_tokens BIGINT NOT NULL,
                  cache_read_tokens  BIGINT NOT NULL
              );
              CREATE INDEX bae_idx_usage_session ON bae_usage(session_id, turn_seq);
              CREATE INDEX bae_idx_usage_key ON bae_usage(client_key_id, created_ms);
              CREATE INDEX bae_idx_usage_profile ON bae_usage(profile_id, created_ms);",
    },
    // The seq of the last event a fork or an import copied into the
    // session (issue 38): its `session.driver.register` events up to it
    // are its parent's, and a fork starts with no drivers. NULL on the
    // rows of earlier versions reads as 0 (nothing known to be copied).
    PgMigration {
        version: 8,
        name: "lineage_copied_through",
        sql: "ALTER TABLE bae_session_lineage ADD COLUMN copied_through BIGINT;",
    },
    // Quotas per client key and per profile (extension): `scope` is `key`
    // or `profile`, `quota` the JSON the admin API took.
    PgMigration {
        version: 9,
        name: "quotas",
        sql: "CREATE TABLE bae_quotas (
                  scope      TEXT NOT NULL,
                  id         TEXT NOT NULL,
                  quota      TEXT NOT NULL,
                  updated_at TEXT NOT NULL,
                  PRIMARY KEY (scope, id)
              );",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Two branches once both added a "version 5": the versions must run
    /// 1, 2, 3… without a gap or repeat, and the binary's maximum must be
    /// the last of them, or a fresh database refuses to start.
    #[test]
    fn migrations_are_numbered_in_order_up_to_the_latest() {
        for (i, m) in PG_MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "migration {}", m.name);
        }
        assert_eq!(
            PG_MIGRATIONS.last().map(|m| m.version),
            Some(PG_LATEST_VERSION)
        );
    }
}
