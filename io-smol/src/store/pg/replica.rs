//! Replica mode on PostgreSQL (docs/scaling.md): seq lanes, session
//! leases and the fence on commits. Every expiry is computed and compared
//! with the database server's clock, so replicas' clocks never matter.
//!
//! * Each replica process draws a random *fencing token* at start
//!   ([`ReplicaIdentity::new`]) and writes it into the seq lane it takes
//!   (`replica_lanes`) and into every lease it takes (`session_leases`).
//!   Renewals (`renewer.rs`) find its rows by that token.
//! * Every commit batch checks, first thing in its own transaction, that
//!   the lane still carries our token and has not expired, and likewise
//!   the lease of every session the batch writes ([`fence`]), locking those
//!   rows (`FOR SHARE`) until it commits: a takeover of the lane or of one
//!   of those leases waits for the commit, and a commit after a takeover
//!   fails and is rolled back. So a replica that slept through its lease
//!   can never write into a lane or a session another replica took, and a
//!   lane's seqs never collide.
//! * A lease claim checks the lane the same way before it takes anything.
//! * Catalogue writes `NOTIFY bae_catalog` in their own transaction
//!   (`listener.rs` reads them on the other replicas).

use std::collections::BTreeSet;

use engine::replicas::Fence;
use engine::store::{Claimed, IdempotencyRow, KeyRow, Lease, ReadResult, StoreWrite};
use postgres::{Client, NoTls};

use super::renewer::LeaseWatch;
use super::{client_config, pg_text, PgStore};
use crate::config::DatabaseUrl;
use crate::store::rows::{read_key, read_session, Cols};
use crate::store::{Result, StoreError};

/// Seq lanes: the most replicas that may share one database at once.
pub const LANES: u64 = 64;

/// Channel of the catalogue notices.
pub(super) const CHANNEL: &str = "bae_catalog";

/// Who this replica is, for its lane and lease rows.
#[derive(Debug, Clone)]
pub struct ReplicaIdentity {
    pub owner: String,
    /// `host:port` of the client listener, as advertised.
    pub addr: String,
    pub lease_ms: i64,
    /// This process's fencing token (see the module docs): positive,
    /// random, never reused by another process.
    pub token: i64,
}

impl ReplicaIdentity {
    /// `owner` at `addr` with a fresh fencing token from the OS RNG. A
    /// restart with the same `BAE_REPLICA_ID` gets another token, so its
    /// frozen predecessor is fenced off as soon as it takes a row over.
    pub fn new(owner: String, addr: String, lease_ms: i64) -> ReplicaIdentity {
        let mut bytes = [0u8; 8];
        // An unavailable OS RNG is unrecoverable (as for key material).
        getrandom::getrandom(&mut bytes).expect("OS random number generator unavailable");
        // Positive and never 0: 0 is the column's default.
        let token = (i64::from_le_bytes(bytes) & i64::MAX).max(1);
        ReplicaIdentity {
            owner,
            addr,
            lease_ms,
            token,
        }
    }

    /// The lease as the `f64` the SQL multiplies an interval with.
    pub(super) fn lease(&self) -> f64 {
        self.lease_ms as f64
    }
}

/// Replica mode as the writer connection knows it.
#[derive(Debug)]
pub(crate) struct ReplicaState {
    pub(super) me: ReplicaIdentity,
    /// The seq lane, once claimed.
    pub(super) lane: Option<i32>,
    /// When a renewal last succeeded (shared with the renewer thread).
    pub(super) watch: LeaseWatch,
}

impl ReplicaState {
    /// Refuses to start a write when the last successful renewal is older
    /// than 3/4 of the lease (a process that was stopped, or starved, may
    /// have lost its leases meanwhile; the database would refuse the
    /// write anyway, this never even tries).
    fn fresh(&self) -> Result<()> {
        match self.watch.stale() {
            None => Ok(()),
            Some(ms) => Err(StoreError::Fenced(format!(
                "a renewed lease (the last renewal succeeded {ms} ms ago, more than 3/4 of \
                 BAE_LEASE_MS)"
            ))),
        }
    }
}

pub(super) fn connect(url: &DatabaseUrl, application: &str) -> Result<Client> {
    client_config(url, application)?
        .connect(NoTls)
        .map_err(|e| StoreError::Connect {
            target: url.to_string(),
            detail: pg_text(url, &e),
        })
}

/// The lane check of [`fence`]: our lane, our token, not expired, locked
/// until the transaction ends (public for the fencing tests).
pub const LANE_HELD: &str = "SELECT lane FROM replica_lanes WHERE lane = $1 AND token = $2 \
    AND expires_at > clock_timestamp() FOR SHARE";

/// Inside a transaction, before anything else: `Err(what)` unless this
/// replica still holds its lane (locked until the transaction ends).
fn lane_held(
    tx: &mut postgres::Transaction<'_>,
    state: &ReplicaState,
) -> std::result::Result<std::result::Result<(), String>, postgres::Error> {
    let Some(lane) = state.lane else {
        return Ok(Err("a seq lane (none was claimed)".into()));
    };
    let held = tx.query_opt(LANE_HELD, &[&lane, &state.me.token])?;
    Ok(match held {
        Some(_) => Ok(()),
        None => Err(format!("its seq lane {lane}")),
    })
}

impl PgStore {
    /// Replica mode from now on: lease claims answer for `identity`, and
    /// commits are fenced and notify the other replicas. Returns the watch
    /// the lease renewer reports to and the driver checks before it
    /// reveals anything.
    pub fn set_replica(&mut self, identity: ReplicaIdentity) -> Result<LeaseWatch> {
        // A transaction of this connection that stops between statements
        // (the process was frozen) holds its fence locks; the server ends
        // it after a quarter of the lease, so a takeover never waits for
        // the sleeper to wake up.
        let idle = (identity.lease_ms / 4).max(100);
        self.client
            .batch_execute(&format!("SET idle_in_transaction_session_timeout = {idle}"))
            .map_err(|e| self.err(e))?;
        let watch = LeaseWatch::new(identity.lease_ms as u64);
        self.replica = Some(ReplicaState {
            me: identity,
            lane: None,
            watch: watch.clone(),
        });
        Ok(watch)
    }

    /// Takes the first free (or expired) seq lane for this replica, with
    /// its token. A takeover waits for any fenced commit of the lane's
    /// previous holder still in flight (`FOR SHARE`, [`fence`]), so the
    /// snapshot read after it sees every seq the lane ever held.
    pub fn claim_lane(&mut self) -> Result<u64> {
        let Some(state) = self.replica.as_ref() else {
            return Err(StoreError::Postgres("not in replica mode".into()));
        };
        let me = state.me.clone();
        for lane in 0..LANES as i32 {
            let row = self
                .client
                .query_opt(
                    "INSERT INTO replica_lanes (lane, owner, token, expires_at) \
                     VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond') \
                     ON CONFLICT (lane) DO UPDATE SET owner = EXCLUDED.owner, \
                     token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
                     WHERE replica_lanes.expires_at < now() \
                     OR replica_lanes.owner = EXCLUDED.owner RETURNING lane",
                    &[&lane, &me.owner, &me.token, &me.lease()],
                )
                .map_err(|e| self.err(e))?;
            if row.is_some() {
                if let Some(state) = self.replica.as_mut() {
                    state.lane = Some(lane);
                }
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
    /// connection, in one transaction that first checks our lane).
    pub(crate) fn claim_lease(
        &mut self,
        session_id: &str,
        drivers_since: u64,
    ) -> Result<ReadResult> {
        let Some(state) = self.replica.as_ref() else {
            return Err(StoreError::Postgres(
                "session leases need replica mode (BAE_REPLICA_ADVERTISE)".into(),
            ));
        };
        state.fresh()?;
        let r = (|| -> std::result::Result<Result<Lease>, postgres::Error> {
            let mut tx = self.client.transaction()?;
            if let Err(what) = lane_held(&mut tx, state)? {
                return Ok(Err(StoreError::Fenced(what)));
            }
            let me = &state.me;
            let session = tx.query_opt(
                &format!("SELECT {SESSION_COLS} FROM sessions WHERE id = $1"),
                &[&session_id],
            )?;
            let Some(session) = session else {
                tx.commit()?;
                return Ok(Ok(Lease::NoSession));
            };
            // Ours already, or expired (by the database's clock), or held
            // by an earlier process with our fixed `BAE_REPLICA_ID`.
            let mine = tx.query_opt(
                "INSERT INTO session_leases (session_id, owner, addr, token, expires_at) \
                 VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond') \
                 ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, \
                 addr = EXCLUDED.addr, token = EXCLUDED.token, \
                 expires_at = EXCLUDED.expires_at \
                 WHERE session_leases.token = EXCLUDED.token \
                 OR session_leases.owner = EXCLUDED.owner \
                 OR session_leases.expires_at <= now() RETURNING owner",
                &[&session_id, &me.owner, &me.addr, &me.token, &me.lease()],
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
                    "SELECT {KEY_COLS} FROM keys WHERE role = 'session' \
                     AND name = convert_to($1, 'UTF8') AND deleted_at IS NULL ORDER BY ord"
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
            // Registrations that follow the session (durable drivers):
            // those from `drivers_since` on, as a restart reads them, and
            // none a fork or an import copied (issue 38).
            let since = i64::try_from(drivers_since).unwrap_or(i64::MAX);
            let drivers = tx.query(
                "SELECT client_key_id FROM session_events WHERE session_id = $1 \
                 AND event_type = 'session.driver.register' AND seq >= $2 \
                 AND seq > COALESCE((SELECT copied_through FROM bae_session_lineage \
                 WHERE session_id = $1), 0) AND client_key_id IS NOT NULL ORDER BY seq",
                &[&session_id, &since],
            )?;
            tx.commit()?;
            Ok(claimed(&session, &keys, max_seq, &idem, &drivers))
        })();
        match r {
            Ok(lease) => lease.map(ReadResult::Lease),
            Err(e) => Err(self.err(e)),
        }
    }
}

/// The rows of a claim, decoded.
fn claimed(
    session: &postgres::Row,
    keys: &[postgres::Row],
    max_seq: i64,
    idem: &[postgres::Row],
    drivers: &[postgres::Row],
) -> Result<Lease> {
    let mut idempotency = Vec::new();
    for r in idem {
        idempotency.push(IdempotencyRow {
            session_id: r.text(0)?,
            client_key_id: r.text(1)?,
            key: r.text(2)?,
            digest: r.text(3)?,
            created_ms: r.int(4)?.max(0) as u64,
            outcome: r.opt_text(5)?,
        });
    }
    let session = read_session(session)?;
    let mut registered: Vec<String> = Vec::new();
    if session.state == engine::store::SessionState::Open {
        for r in drivers {
            let key = r.text(0)?;
            if !registered.contains(&key) {
                registered.push(key);
            }
        }
    }
    Ok(Lease::Mine(Box::new(Claimed {
        session,
        keys: keys.iter().map(read_key).collect::<Result<Vec<KeyRow>>>()?,
        max_seq: max_seq.max(0) as u64,
        idempotency,
        drivers: registered,
    })))
}

pub(super) const PROFILE_COLS: &str = "id, name, provider_config, fallback_configs, \
    mcp_servers, allowed_tools, available_sandboxes, created_at, updated_at, deleted_at";
pub(super) const KEY_COLS: &str = "id, name, key_hash, key_prefix, role, profile_id, client_id, \
    created_at, last_used_at, deleted_at";
pub(super) const SESSION_COLS: &str = "id, client_key_id, profile_id, state, client_version, \
    client_tools, sandbox_tools, subagent_tools, compaction, created_at, closed_at";

/// First thing in a batch's transaction (replica mode): `Err(what)` unless
/// this replica still holds its lane and (once the leases of sessions the
/// batch creates are inserted) the lease of every session of `fence`, by
/// our token and unexpired by the database's clock. The rows checked stay
/// locked until the transaction ends, so no takeover can slip in between
/// this check and the commit. Locks are taken in one order everywhere
/// (lane, then leases by id), as the renewer does, so the two never
/// deadlock. Without a fence (a lone server never gets here) only the new
/// sessions' leases are written.
pub(crate) fn fence(
    tx: &mut postgres::Transaction<'_>,
    state: &ReplicaState,
    fence: Option<&Fence>,
    batch: &[StoreWrite],
) -> std::result::Result<std::result::Result<(), String>, postgres::Error> {
    if fence.is_some() {
        if let Err(what) = lane_held(tx, state)? {
            return Ok(Err(what));
        }
    }
    let me = &state.me;
    for w in batch {
        if let StoreWrite::LeaseNewSession { session_id } = w {
            // A new id: nobody else can hold it (a conflict fails below).
            tx.execute(
                "INSERT INTO session_leases (session_id, owner, addr, token, expires_at) \
                 VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond') \
                 ON CONFLICT (session_id) DO NOTHING",
                &[session_id, &me.owner, &me.addr, &me.token, &me.lease()],
            )?;
        }
    }
    let Some(fence) = fence.filter(|f| !f.sessions.is_empty()) else {
        return Ok(Ok(()));
    };
    let held = tx.query(
        "SELECT session_id FROM session_leases WHERE session_id = ANY($1) AND token = $2 \
         AND expires_at > clock_timestamp() ORDER BY session_id FOR SHARE",
        &[&fence.sessions, &me.token],
    )?;
    if held.len() == fence.sessions.len() {
        return Ok(Ok(()));
    }
    let held: BTreeSet<String> = held.iter().map(|r| r.get(0)).collect();
    let lost = (fence.sessions.iter())
        .find(|s| !held.contains(*s))
        .cloned()
        .unwrap_or_default();
    Ok(Err(format!("the lease of session {lost}")))
}

impl PgStore {
    /// Replica mode: the monotonic check before a commit (see
    /// [`ReplicaState::fresh`]); `Ok` for a lone server.
    pub(super) fn replica_fresh(&self) -> Result<()> {
        self.replica.as_ref().map_or(Ok(()), ReplicaState::fresh)
    }
}

/// The catalogue notices of a batch: `p:`, `k:` or `s:` and the row's id,
/// or `q:` and a quota's scope and id (`q:key:<id>`, `q:profile:<id>`).
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
            StoreWrite::PutQuota(q) => Some(format!("q:{}:{}", q.scope.kind(), q.scope.id())),
            StoreWrite::DeleteQuota(q) => Some(format!("q:{}:{}", q.kind(), q.id())),
            _ => None,
        })
        .collect();
    set.into_iter().collect()
}

/// Inside a batch's transaction, after its writes: sends its catalogue
/// notices, delivered by PostgreSQL only if the transaction commits.
pub(crate) fn notify(
    tx: &mut postgres::Transaction<'_>,
    batch: &[StoreWrite],
) -> std::result::Result<(), postgres::Error> {
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
    Ok(())
}
