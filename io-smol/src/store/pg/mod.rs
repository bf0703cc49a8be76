//! PostgreSQL storage: the same write-batch/read contract as the SQLite
//! store ([`engine::store`]), selected by `BAE_DATABASE_URL`.
//!
//! The `postgres` crate is synchronous, so a [`PgStore`] lives on the store
//! thread exactly like the SQLite connection: one transaction per group
//! commit, committed before anything it gates is revealed. Reads can also
//! run on extra reader connections (`pool.rs`).
//!
//! Faults are crash-only, as for SQLite: a failed commit, or any lost
//! connection, exits the process (code 1) before an output gated on the
//! batch is released. A batch is one transaction, so after a restart it is
//! either wholly stored or absent.

pub mod listener;
mod ops;
pub(crate) mod pool;
mod read;
pub mod renewer;
pub mod replica;
pub mod schema;

use std::fmt;
use std::time::Duration;

use postgres::{Client, NoTls};

use super::{MigrateReport, Result, StoreError};
use crate::config::DatabaseUrl;
pub use schema::{PG_LATEST_VERSION, PG_MIGRATIONS, PG_MIN_SERVER_VERSION, PG_TABLES};

/// Connect timeout used when the URL sets none (`connect_timeout=`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sent data may stay unacknowledged before the connection counts
/// as lost, unless the URL sets `tcp_user_timeout`: a silent network
/// partition ends in a crash-only exit instead of a commit that never
/// returns.
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);
/// TCP keepalive idle time unless the URL sets `keepalives_idle` (the
/// client's own default is two hours).
pub const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(30);

/// Lock id (`pg_advisory_xact_lock`) that serialises migrations of servers
/// starting at once on one database.
const MIGRATION_LOCK: i64 = 0x6261_6573_7276; // "baesrv"

/// Creation-time expression of the admin-key bootstrap (the format of every
/// other timestamp the engine writes).
pub(crate) const NOW_SQL: &str =
    "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

/// One PostgreSQL connection of the store.
pub struct PgStore {
    client: Client,
    url: DatabaseUrl,
    /// Prepared statements (`ops.rs`), prepared once the schema exists.
    stmts: Option<ops::Prepared>,
    /// Extra connections that answer runs of reads (`pool.rs`).
    readers: Option<pool::Readers>,
    /// Replica mode: lease claims, fenced and notifying commits.
    replica: Option<replica::ReplicaState>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore").field("url", &self.url).finish()
    }
}

/// The text of a client error, with the URL's password scrubbed: the
/// server's message and SQLSTATE for a database error, else the error and
/// its causes.
pub(crate) fn pg_text(url: &DatabaseUrl, e: &postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => {
            let mut t = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                t.push_str(&format!("; {d}"));
            }
            t
        }
        None => {
            let mut t = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(s) = src {
                let s_text = s.to_string();
                if !t.contains(&s_text) {
                    t.push_str(&format!(": {s_text}"));
                }
                src = s.source();
            }
            t
        }
    };
    url.scrub(&text)
}

/// The client settings of every connection: the URL's, plus the defaults
/// above for what it leaves unset.
pub(crate) fn client_config(url: &DatabaseUrl, application: &str) -> Result<postgres::Config> {
    let mut config: postgres::Config =
        url.expose()
            .parse()
            .map_err(|e: postgres::Error| StoreError::Connect {
                target: url.to_string(),
                detail: pg_text(url, &e),
            })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
    }
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(DEFAULT_KEEPALIVES_IDLE);
    }
    if config.get_application_name().is_none() {
        config.application_name(application);
    }
    Ok(config)
}

fn is_privilege_error(e: &postgres::Error) -> bool {
    e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
}

impl PgStore {
    /// Connects to `url` (10 s connect timeout unless the URL sets one) and
    /// checks the server version. Does not migrate.
    pub fn connect(url: &DatabaseUrl) -> Result<PgStore> {
        let connect_err = |detail: String| StoreError::Connect {
            target: url.to_string(),
            detail,
        };
        let mut client = client_config(url, "baesrv")?
            .connect(NoTls)
            .map_err(|e| connect_err(pg_text(url, &e)))?;
        let version: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .and_then(|r| r.try_get(0))
            .map_err(|e| connect_err(pg_text(url, &e)))?;
        if version < PG_MIN_SERVER_VERSION {
            let shown: String = client
                .query_one("SHOW server_version", &[])
                .and_then(|r| r.try_get(0))
                .unwrap_or_else(|_| version.to_string());
            return Err(StoreError::ServerVersion { found: shown });
        }
        Ok(PgStore {
            client,
            url: url.clone(),
            stmts: None,
            readers: None,
            replica: None,
        })
    }

    /// The URL with its password redacted.
    pub fn describe(&self) -> String {
        self.url.to_string()
    }

    fn err(&self, e: postgres::Error) -> StoreError {
        if self.client.is_closed() {
            StoreError::ConnectionLost(pg_text(&self.url, &e))
        } else if is_privilege_error(&e) {
            StoreError::Privileges {
                detail: pg_text(&self.url, &e),
            }
        } else {
            StoreError::Postgres(pg_text(&self.url, &e))
        }
    }

    /// `MAX(version)` of `schema_version`, 0 when the table is absent.
    pub fn schema_version(&mut self) -> Result<i64> {
        let exists: bool = self
            .client
            .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.err(e))?;
        if !exists {
            return Ok(0);
        }
        let v: i64 = self
            .client
            .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.err(e))?;
        Ok(v)
    }

    /// Applies every pending migration in one transaction (under an
    /// advisory lock, so servers starting together migrate once), refuses a
    /// database migrated by a newer binary, then checks that the role may
    /// use every table.
    pub fn migrate(&mut self) -> Result<MigrateReport> {
        let url = self.url.clone();
        let mig = |e: postgres::Error| {
            let detail = pg_text(&url, &e);
            if is_privilege_error(&e) {
                StoreError::Privileges { detail }
            } else {
                StoreError::Migrate { detail }
            }
        };
        let from = self.schema_version()?;
        if from > PG_LATEST_VERSION {
            return Err(StoreError::NewerSchema {
                db: from,
                max: PG_LATEST_VERSION,
            });
        }
        if from < PG_LATEST_VERSION {
            let mut tx = self.client.transaction().map_err(mig)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .map_err(mig)?;
            // Re-read under the lock: another server may have migrated.
            let exists: bool = tx
                .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])
                .and_then(|r| r.try_get(0))
                .map_err(mig)?;
            let current: i64 = match exists {
                false => 0,
                true => tx
                    .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
                    .and_then(|r| r.try_get(0))
                    .map_err(mig)?,
            };
            if current > PG_LATEST_VERSION {
                return Err(StoreError::NewerSchema {
                    db: current,
                    max: PG_LATEST_VERSION,
                });
            }
            let mut applied = Vec::new();
            for m in PG_MIGRATIONS.iter().filter(|m| m.version > current) {
                tx.batch_execute(m.sql).map_err(|e| {
                    let mut err = mig(e);
                    if let StoreError::Migrate { detail } = &mut err {
                        *detail = format!("migration {} ({}): {detail}", m.version, m.name);
                    }
                    err
                })?;
                tx.execute(
                    &format!(
                        "INSERT INTO schema_version (version, applied_at) VALUES ($1, {NOW_SQL})"
                    ),
                    &[&m.version],
                )
                .map_err(mig)?;
                applied.push((m.version, m.name));
            }
            tx.commit().map_err(mig)?;
            for (version, name) in applied {
                tracing::info!(version, name, "applied database migration");
            }
        }
        self.check_privileges()?;
        Ok(MigrateReport {
            from,
            to: PG_LATEST_VERSION,
        })
    }

    /// Every table must be readable and writable by the connecting role,
    /// or the server would only find out at its first commit.
    fn check_privileges(&mut self) -> Result<()> {
        let tables: Vec<&str> = PG_TABLES.to_vec();
        let rows = self
            .client
            .query(
                // A list of privileges is true when any one is held: ask
                // for each.
                "SELECT t, current_user::text FROM unnest($1::text[]) AS t \
                 WHERE NOT (has_table_privilege(current_user, t, 'SELECT') \
                 AND has_table_privilege(current_user, t, 'INSERT') \
                 AND has_table_privilege(current_user, t, 'UPDATE') \
                 AND has_table_privilege(current_user, t, 'DELETE'))",
                &[&tables],
            )
            .map_err(|e| self.err(e))?;
        if rows.is_empty() {
            return Ok(());
        }
        let missing: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        let role: String = rows[0].get(1);
        Err(StoreError::Privileges {
            detail: format!(
                "role \"{role}\" lacks SELECT, INSERT, UPDATE or DELETE on {}",
                missing.join(", ")
            ),
        })
    }

    /// Runs `f` in one transaction (the admin-key bootstrap).
    pub(crate) fn with_transaction<T, E>(
        &mut self,
        f: impl FnOnce(&mut postgres::Transaction<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<StoreError>,
    {
        let url = self.url.clone();
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| StoreError::Postgres(pg_text(&url, &e)))?;
        let v = f(&mut tx)?;
        tx.commit()
            .map_err(|e| StoreError::Postgres(pg_text(&url, &e)))?;
        Ok(v)
    }

    /// Opens the reader connections: `pool_size - 1` of them (this one is
    /// the writer). Call after [`PgStore::migrate`].
    pub fn start_readers(&mut self, pool_size: usize) -> Result<()> {
        let readers = pool::Readers::start(&self.url, pool_size.saturating_sub(1))?;
        self.readers = Some(readers).filter(|r| !r.is_empty());
        Ok(())
    }

    /// Answers consecutive reads: in parallel on the readers when there
    /// are any and more than one read, else in order on this connection.
    pub fn read_many(
        &mut self,
        reads: Vec<engine::store::StoreRead>,
    ) -> Vec<Result<engine::store::ReadResult>> {
        // Lease claims run on this connection, which knows the replica.
        let claims = reads
            .iter()
            .any(|r| matches!(r, engine::store::StoreRead::ClaimLease { .. }));
        match &mut self.readers {
            Some(readers) if reads.len() > 1 && !claims => readers.run(reads),
            _ => reads.iter().map(|r| self.read(r)).collect(),
        }
    }

    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    pub(crate) fn url(&self) -> &DatabaseUrl {
        &self.url
    }
}
