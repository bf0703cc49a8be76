//! Replica mode on PostgreSQL (docs/scaling.md): session leases, seq lanes,
//! the fence on commits and the catalogue notices. Every time comparison
//! uses the database server's clock (`now()`), so replicas' clocks never
//! matter.
//!
//! * A lease is a `session_leases` row; [`PgStore`]'s claim takes it when it
//!   is absent, expired or already ours. The renewer thread extends every
//!   lease and the lane of this replica every `lease / 3` on its own
//!   connection, and exits the process (crash-only) when it has not
//!   succeeded for `3/4` of the lease: no lease of ours can expire while we
//!   still serve its session.
//! * A commit that appends to, or changes, a session whose lease another
//!   replica holds is rolled back and fails (crash-only exit): a replica
//!   that lost a lease can never write into the new owner's log.
//! * Catalogue writes `NOTIFY bae_catalog` in their own transaction; the
//!   listener thread re-reads the named rows and hands them to the engine.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use engine::store::{
    CatalogUpdate, Claimed, IdempotencyRow, KeyRow, Lease, ReadResult, StoreWrite,
};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};

use super::{client_config, pg_text, PgStore};
use crate::config::DatabaseUrl;
use crate::store::rows::{read_key, read_profile, read_session, Cols};
use crate::store::{Result, StoreError};

/// Seq lanes: the most replicas that may share one database at once.
pub const LANES: u64 = 64;

/// Channel of the catalogue notices.
const CHANNEL: &str = "bae_catalog";

/// Who this replica is, for its lease rows.
#[derive(Debug, Clone)]
pub struct ReplicaIdentity {
    pub owner: String,
    /// `host:port` of the client listener, as advertised.
    pub addr: String,
    pub lease_ms: i64,
}

const PROFILE_COLS: &str = "id, name, provider_config, fallback_configs, mcp_servers, \
    allowed_tools, available_sandboxes, created_at, updated_at, deleted_at";
const KEY_COLS: &str = "id, name, key_hash, key_prefix, role, profile_id, client_id, created_at, \
    last_used_at, deleted_at";
const SESSION_COLS: &str = "id, client_key_id, profile_id, state, client_version, client_tools, \
    sandbox_tools, subagent_tools, compaction, created_at, closed_at";

fn connect(url: &DatabaseUrl, application: &str) -> Result<Client> {
    client_config(url, application)?
        .connect(NoTls)
        .map_err(|e| StoreError::Connect {
            target: url.to_string(),
            detail: pg_text(url, &e),
        })
}

impl PgStore {
    /// Replica mode from now on: lease claims answer for `identity`, and
    /// commits are fenced and notify the other replicas.
    pub fn set_replica(&mut self, identity: ReplicaIdentity) {
        self.replica = Some(identity);
    }

    /// Takes the first free (or expired) seq lane for this replica.
    pub fn claim_lane(&mut self) -> Result<u64> {
        let Some(me) = self.replica.clone() else {
            return Err(StoreError::Postgres("not in replica mode".into()));
        };
        for lane in 0..LANES as i32 {
            let row = self
                .client
                .query_opt(
                    "INSERT INTO replica_lanes (lane, owner, expires_at) \
                     VALUES ($1, $2, now() + $3 * interval '1 millisecond') \
                     ON CONFLICT (lane) DO UPDATE SET owner = EXCLUDED.owner, \
                     expires_at = EXCLUDED.expires_at \
                     WHERE replica_lanes.expires_at < now() \
                     OR replica_lanes.owner = EXCLUDED.owner RETURNING lane",
                    &[&lane, &me.owner, &(me.lease_ms as f64)],
                )
                .map_err(|e| self.err(e))?;
            if row.is_some() {
                return Ok(lane as u64);
            }
        }
        Err(StoreError::Postgres(format!(
            "all {LANES} replica lanes are held by running replicas"
        )))
    }

    /// Asks every replica to re-read the admin keys (this one may have
    /// generated or rotated one at start).
    pub fn notify_admin_keys(&mut self) -> Result<()> {
        self.client
            .execute(
                "SELECT pg_notify($1, 'k:' || id) FROM keys WHERE role = 'admin'",
                &[&CHANNEL],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Answers [`engine::StoreRead::ClaimLease`] (on the writer
    /// connection, in one transaction).
    pub(crate) fn claim_lease(&mut self, session_id: &str) -> Result<ReadResult> {
        let Some(me) = self.replica.clone() else {
            return Err(StoreError::Postgres(
                "session leases need replica mode (BAE_REPLICA_ADVERTISE)".into(),
            ));
        };
        let r =
            (|| -> std::result::Result<std::result::Result<Lease, StoreError>, postgres::Error> {
                let mut tx = self.client.transaction()?;
                let session = tx.query_opt(
                    &format!("SELECT {SESSION_COLS} FROM sessions WHERE id = $1"),
                    &[&session_id],
                )?;
                let Some(session) = session else {
                    tx.commit()?;
                    return Ok(Ok(Lease::NoSession));
                };
                let mine = tx.query_opt(
                    "INSERT INTO session_leases (session_id, owner, addr, expires_at) \
                 VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond') \
                 ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, \
                 addr = EXCLUDED.addr, expires_at = EXCLUDED.expires_at \
                 WHERE session_leases.owner = EXCLUDED.owner \
                 OR session_leases.expires_at <= now() RETURNING owner",
                    &[&session_id, &me.owner, &me.addr, &(me.lease_ms as f64)],
                )?;
                if mine.is_none() {
                    let addr: String = tx
                        .query_one(
                            "SELECT addr FROM session_leases WHERE session_id = $1",
                            &[&session_id],
                        )?
                        .get(0);
                    tx.commit()?;
                    return Ok(Ok(Lease::Elsewhere { addr }));
                }
                let keys = tx.query(
                &format!(
                    "SELECT {KEY_COLS} FROM keys WHERE role = 'session' AND name = convert_to($1, 'UTF8') \
                     AND deleted_at IS NULL ORDER BY ord"
                ),
                &[&session_id],
            )?;
                let max_seq: i64 = tx
                    .query_one(
                        "SELECT COALESCE(MAX(seq), 0) FROM session_events WHERE session_id = $1",
                        &[&session_id],
                    )?
                    .get(0);
                let idem = tx.query(
                    "SELECT session_id, client_key_id, key, digest, created_ms, outcome \
                 FROM bae_idempotency_keys WHERE session_id = $1",
                    &[&session_id],
                )?;
                tx.commit()?;
                let decoded = (|| -> Result<Lease> {
                    let mut idempotency = Vec::new();
                    for r in &idem {
                        idempotency.push(IdempotencyRow {
                            session_id: r.text(0)?,
                            client_key_id: r.text(1)?,
                            key: r.text(2)?,
                            digest: r.text(3)?,
                            created_ms: r.int(4)?.max(0) as u64,
                            outcome: r.opt_text(5)?,
                        });
                    }
                    Ok(Lease::Mine(Box::new(Claimed {
                        session: read_session(&session)?,
                        keys: keys.iter().map(read_key).collect::<Result<Vec<KeyRow>>>()?,
                        max_seq: max_seq.max(0) as u64,
                        idempotency,
                    })))
                })();
                Ok(decoded)
            })();
        match r {
            Ok(Ok(lease)) => Ok(ReadResult::Lease(lease)),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(self.err(e)),
        }
    }
}

/// The sessions a batch writes into (events, state, tools).
fn sessions_written(batch: &[StoreWrite]) -> Vec<String> {
    let ids: BTreeSet<&str> = batch
        .iter()
        .filter_map(|w| match w {
            StoreWrite::InsertEvent(e) => Some(e.session_id.as_str()),
            StoreWrite::SetSessionState { id, .. } | StoreWrite::SetSessionTools { id, .. } => {
                Some(id.as_str())
            }
            _ => None,
        })
        .collect();
    ids.into_iter().map(String::from).collect()
}

/// The catalogue notices of a batch: `p:`, `k:` or `s:` and the row's id.
fn notices(batch: &[StoreWrite]) -> Vec<String> {
    let set: BTreeSet<String> = batch
        .iter()
        .filter_map(|w| match w {
            StoreWrite::InsertProfile(p) | StoreWrite::UpdateProfile(p) => {
                Some(format!("p:{}", p.id))
            }
            // Session keys too: a revocation's cascade starts from them on
            // whichever replica revokes.
            StoreWrite::InsertKey(k) => Some(format!("k:{}", k.id)),
            StoreWrite::RevokeKey { id, .. } => Some(format!("k:{id}")),
            StoreWrite::InsertSession(s) => Some(format!("s:{}", s.id)),
            StoreWrite::SetSessionState { id, .. } => Some(format!("s:{id}")),
            _ => None,
        })
        .collect();
    set.into_iter().collect()
}

/// Inside a batch's transaction, before its commit: `Some(session)` when
/// another replica holds the lease of a session the batch writes into
/// (the caller rolls back); else sends the batch's catalogue notices,
/// delivered by PostgreSQL only if the transaction commits.
pub(crate) fn fence_and_notify(
    tx: &mut postgres::Transaction<'_>,
    me: &ReplicaIdentity,
    batch: &[StoreWrite],
) -> std::result::Result<Option<String>, postgres::Error> {
    for w in batch {
        if let StoreWrite::LeaseNewSession { session_id } = w {
            tx.execute(
                "INSERT INTO session_leases (session_id, owner, addr, expires_at) \
                 VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond') \
                 ON CONFLICT (session_id) DO NOTHING",
                &[session_id, &me.owner, &me.addr, &(me.lease_ms as f64)],
            )?;
        }
    }
    let written = sessions_written(batch);
    if !written.is_empty() {
        let held = tx.query_opt(
            "SELECT session_id FROM session_leases WHERE session_id = ANY($1) \
             AND owner <> $2 AND expires_at > now() LIMIT 1",
            &[&written, &me.owner],
        )?;
        if let Some(row) = held {
            return Ok(Some(row.get(0)));
        }
    }
    let notes = notices(batch);
    for w in batch {
        if let StoreWrite::RevokeSessionKeysOf { client_id, at } = w {
            tx.execute(
                "SELECT pg_notify($1, 'k:' || id) FROM keys WHERE role = 'session' \
                 AND client_id = $2 AND deleted_at = $3",
                &[&CHANNEL, client_id, at],
            )?;
        }
    }
    if !notes.is_empty() {
        tx.execute(
            "SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n",
            &[&CHANNEL, &notes],
        )?;
    }
    Ok(None)
}

/// Extends this replica's leases and lane every `lease / 3` on its own
/// connection; exits the process when no renewal succeeded for `3/4` of
/// the lease (see the module docs).
pub fn start_renewer(url: DatabaseUrl, me: ReplicaIdentity) -> std::io::Result<()> {
    let lease = Duration::from_millis(me.lease_ms as u64);
    std::thread::Builder::new()
        .name("bae-lease".into())
        .spawn(move || {
            let mut client: Option<Client> = None;
            let mut last_ok = Instant::now();
            loop {
                let started = Instant::now();
                if client.as_ref().is_none_or(|c| c.is_closed()) {
                    client = connect(&url, "baesrv-lease").ok();
                }
                let renewed = client.as_mut().map(|c| {
                    c.execute(
                        "UPDATE session_leases SET expires_at = now() + $2 * interval \
                         '1 millisecond' WHERE owner = $1",
                        &[&me.owner, &(me.lease_ms as f64)],
                    )
                    .and_then(|_| {
                        c.execute(
                            "UPDATE replica_lanes SET expires_at = now() + $2 * interval \
                             '1 millisecond' WHERE owner = $1",
                            &[&me.owner, &(me.lease_ms as f64)],
                        )
                    })
                });
                let ok = matches!(renewed, Some(Ok(_)));
                match renewed {
                    Some(Ok(_)) => last_ok = started,
                    Some(Err(e)) => {
                        tracing::warn!(error = %pg_text(&url, &e), "lease renewal failed");
                        client = None;
                    }
                    None => tracing::warn!("lease renewal: cannot connect to PostgreSQL"),
                }
                if last_ok.elapsed() >= lease * 3 / 4 {
                    tracing::error!(
                        lease_ms = me.lease_ms,
                        "session leases could not be renewed in time; exiting (crash-only: \
                         another replica takes the sessions over once the leases expire)"
                    );
                    std::process::exit(1);
                }
                let pause = if ok { lease / 3 } else { lease / 10 };
                std::thread::sleep(pause.saturating_sub(started.elapsed()));
            }
        })
        .map(|_| ())
}

/// After a graceful stop: gives this replica's session leases and lane
/// back, so other replicas take its sessions at once (best effort: what is
/// not released expires).
pub fn release(url: &DatabaseUrl, owner: &str) {
    let released = connect(url, "baesrv-release").and_then(|mut c| {
        c.execute("DELETE FROM session_leases WHERE owner = $1", &[&owner])
            .and_then(|n| {
                c.execute("DELETE FROM replica_lanes WHERE owner = $1", &[&owner])
                    .map(|_| n)
            })
            .map_err(|e| StoreError::Postgres(pg_text(url, &e)))
    });
    match released {
        Ok(n) => tracing::info!(sessions = n, "session leases released"),
        Err(e) => tracing::warn!(error = %e, "session leases not released; they expire"),
    }
}

/// Reads catalogue rows: those the notices name, or every one (`None`,
/// after `LISTEN` starts, so nothing committed meanwhile is missed).
fn read_rows(
    c: &mut Client,
    names: Option<&BTreeSet<String>>,
) -> std::result::Result<Result<CatalogUpdate>, postgres::Error> {
    let pick = |prefix: &str| -> Vec<String> {
        names
            .map(|n| {
                n.iter()
                    .filter_map(|s| s.strip_prefix(prefix))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (profiles, keys, sessions) = match names {
        None => (
            c.query(
                &format!("SELECT {PROFILE_COLS} FROM profiles ORDER BY ord"),
                &[],
            )?,
            c.query(&format!("SELECT {KEY_COLS} FROM keys ORDER BY ord"), &[])?,
            c.query(
                &format!("SELECT {SESSION_COLS} FROM sessions ORDER BY ord"),
                &[],
            )?,
        ),
        Some(_) => (
            c.query(
                &format!("SELECT {PROFILE_COLS} FROM profiles WHERE id = ANY($1) ORDER BY ord"),
                &[&pick("p:")],
            )?,
            c.query(
                &format!("SELECT {KEY_COLS} FROM keys WHERE id = ANY($1) ORDER BY ord"),
                &[&pick("k:")],
            )?,
            c.query(
                &format!("SELECT {SESSION_COLS} FROM sessions WHERE id = ANY($1) ORDER BY ord"),
                &[&pick("s:")],
            )?,
        ),
    };
    Ok((|| {
        let mut u = CatalogUpdate {
            full: names.is_none(),
            ..CatalogUpdate::default()
        };
        for r in &profiles {
            u.profiles.push(read_profile(r)?);
        }
        for r in &keys {
            let k = read_key(r)?;
            match k.deleted_at {
                Some(_) => u.revoked.push(k),
                None => u.keys.push(k),
            }
        }
        for r in &sessions {
            u.sessions.push(read_session(r)?);
        }
        Ok(u)
    })())
}

/// `LISTEN`s for catalogue notices on its own connection and hands each
/// batch's rows to `deliver` (within a few milliseconds of the commit);
/// everything once after `LISTEN` starts. A lost connection exits the
/// process (crash-only): without notices a revoked key could keep working
/// here past the documented bound.
pub fn start_listener(
    url: DatabaseUrl,
    deliver: impl Fn(CatalogUpdate) -> bool + Send + 'static,
) -> Result<()> {
    let mut client = connect(&url, "baesrv-listen")?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| StoreError::Postgres(pg_text(&url, &e)))?;
    let fatal = |url: &DatabaseUrl, e: &dyn std::fmt::Display| -> ! {
        tracing::error!(
            database = %url,
            error = %url.scrub(&e.to_string()),
            "catalogue notices lost; exiting (crash-only: the restarted replica re-reads \
             the catalogue)"
        );
        std::process::exit(1)
    };
    match read_rows(&mut client, None) {
        Ok(Ok(all)) => {
            deliver(all);
        }
        Ok(Err(e)) => return Err(e),
        Err(e) => return Err(StoreError::Postgres(pg_text(&url, &e))),
    }
    std::thread::Builder::new()
        .name("bae-listen".into())
        .spawn(move || loop {
            let mut names = BTreeSet::new();
            {
                let mut n = client.notifications();
                let first = n.timeout_iter(Duration::from_secs(5)).next();
                match first {
                    Ok(Some(first)) => {
                        names.insert(first.payload().to_string());
                    }
                    Ok(None) => {}
                    Err(e) => fatal(&url, &e),
                }
                // Everything already received rides along.
                let mut rest = n.iter();
                loop {
                    match rest.next() {
                        Ok(Some(more)) => {
                            names.insert(more.payload().to_string());
                        }
                        Ok(None) => break,
                        Err(e) => fatal(&url, &e),
                    }
                }
            }
            if names.is_empty() {
                if let Err(e) = client.simple_query("SELECT 1") {
                    fatal(&url, &e);
                }
                continue;
            }
            match read_rows(&mut client, Some(&names)) {
                Ok(Ok(update)) => {
                    if !deliver(update) {
                        return;
                    }
                }
                Ok(Err(e)) => fatal(&url, &e),
                Err(e) => fatal(&url, &e),
            }
        })
        .map(|_| ())
        .map_err(|e| StoreError::Postgres(format!("cannot start the notice listener: {e}")))
}
