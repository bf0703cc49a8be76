//! The engine's writes against PostgreSQL and the statements both sides
//! use: one prepared statement per query, the SQLite store's column order
//! (rows decode through the shared [`Cols`] mapping), one transaction per
//! batch. The reads and the snapshot are in `read.rs`.

use engine::store::{EventRow, ReadResult, Snapshot, SnapshotScope, StoreRead, StoreWrite};
use postgres::types::{ToSql, Type};
use postgres::{IsolationLevel, Row, Statement};

use super::read::{read_with, snapshot, ReadError};
use super::{PgStore, StoreError};
use crate::store::rows::Cols;
use crate::store::{Activity, Result};
use engine::replicas::Fence;

/// The statements, by [`Pq`].
macro_rules! pg_queries {
    ($($name:ident = $sql:expr;)*) => {
        #[derive(Debug, Clone, Copy)]
        pub(crate) enum Pq { $($name),* }
        impl Pq {
            const ALL: &'static [Pq] = &[$(Pq::$name),*];
            fn sql(self) -> &'static str {
                match self { $(Pq::$name => $sql),* }
            }
        }
    };
}

pg_queries! {
    InsertUsage = "INSERT INTO bae_usage (event_seq, session_id, turn_seq, client_key_id, \
        profile_id, provider, model, compaction, created_ms, input_tokens, output_tokens, \
        cache_write_tokens, cache_read_tokens, turn_event_id) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
        ON CONFLICT (event_seq) DO NOTHING";
    // Sums by provider entry (and turn): `$1` the scope's id, `$2..$3` the
    // window, `$4` whether by turn.
    UsageSession = "SELECT provider, CASE WHEN $4 THEN turn_seq ELSE 0 END AS t, \
        COUNT(*)::BIGINT, SUM(input_tokens)::BIGINT, SUM(output_tokens)::BIGINT, SUM(cache_write_tokens)::BIGINT, SUM(cache_read_tokens)::BIGINT, MIN(turn_event_id) FROM bae_usage \
        WHERE session_id = $1 AND created_ms >= $2 AND created_ms < $3 \
        GROUP BY t, provider ORDER BY t, provider";
    UsageKey = "SELECT provider, 0::BIGINT, COUNT(*)::BIGINT, SUM(input_tokens)::BIGINT, SUM(output_tokens)::BIGINT, SUM(cache_write_tokens)::BIGINT, SUM(cache_read_tokens)::BIGINT FROM bae_usage \
        WHERE client_key_id = $1 AND created_ms >= $2 AND created_ms < $3 AND $4::BOOLEAN IS NOT NULL \
        GROUP BY provider ORDER BY provider";
    UsageProfile = "SELECT provider, 0::BIGINT, COUNT(*)::BIGINT, SUM(input_tokens)::BIGINT, SUM(output_tokens)::BIGINT, SUM(cache_write_tokens)::BIGINT, SUM(cache_read_tokens)::BIGINT FROM bae_usage \
        WHERE profile_id = $1 AND created_ms >= $2 AND created_ms < $3 AND $4::BOOLEAN IS NOT NULL \
        GROUP BY provider ORDER BY provider";
    PutQuota = "INSERT INTO bae_quotas (scope, id, quota, updated_at) VALUES ($1, $2, $3, $4) \
        ON CONFLICT (scope, id) DO UPDATE SET quota = EXCLUDED.quota, \
        updated_at = EXCLUDED.updated_at";
    DeleteQuota = "DELETE FROM bae_quotas WHERE scope = $1 AND id = $2";
    AllQuotas = "SELECT scope, id, quota, updated_at FROM bae_quotas \
        ORDER BY scope COLLATE \"C\", id COLLATE \"C\"";
    OpenByCreator = "SELECT client_key_id, profile_id, COUNT(*)::BIGINT FROM sessions \
        WHERE state = 'open' GROUP BY client_key_id, profile_id \
        ORDER BY client_key_id COLLATE \"C\", profile_id COLLATE \"C\"";
    InsertProfile = "INSERT INTO profiles (id, name, provider_config, fallback_configs, \
        mcp_servers, allowed_tools, available_sandboxes, created_at, updated_at, deleted_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
    UpdateProfile = "UPDATE profiles SET name = $2, provider_config = $3, fallback_configs = $4, \
        mcp_servers = $5, allowed_tools = $6, available_sandboxes = $7, created_at = $8, \
        updated_at = $9, deleted_at = $10 WHERE id = $1";
    InsertKey = "INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, client_id, \
        created_at, last_used_at, deleted_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
    RevokeKey = "UPDATE keys SET deleted_at = $2 WHERE id = $1";
    RevokeSessionKeysOf = "UPDATE keys SET deleted_at = $2 WHERE role = 'session' \
        AND client_id = $1 AND deleted_at IS NULL";
    SetKeyHash = "UPDATE keys SET key_hash = $2 WHERE id = $1";
    TouchKey = "UPDATE keys SET last_used_at = $2 WHERE id = $1";
    InsertSession = "INSERT INTO sessions (id, client_key_id, profile_id, state, client_version, \
        client_tools, created_at, closed_at, sandbox_tools, subagent_tools, compaction) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
    SetSessionState = "UPDATE sessions SET state = $2, closed_at = $3 WHERE id = $1";
    SetSessionTools = "UPDATE sessions SET client_tools = $2, sandbox_tools = $3, \
        subagent_tools = $4 WHERE id = $1";
    InsertEvent = "INSERT INTO session_events (seq, id, session_id, client_key_id, event_type, \
        payload, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
    // A run of consecutive events in one statement (one round trip), in
    // their order.
    InsertEvents = "INSERT INTO session_events (seq, id, session_id, client_key_id, event_type, \
        payload, created_at) SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], \
        $4::text[], $5::text[], $6::text[], $7::text[])";
    PutIdempotency = "INSERT INTO bae_idempotency_keys (session_id, client_key_id, key, digest, \
        created_ms, outcome) VALUES ($1, $2, $3, $4, $5, $6) \
        ON CONFLICT (session_id, client_key_id, key) DO UPDATE SET digest = EXCLUDED.digest, \
        created_ms = EXCLUDED.created_ms, outcome = EXCLUDED.outcome";
    ExpireIdempotency = "DELETE FROM bae_idempotency_keys WHERE created_ms < $1";
    SelectEvents = "SELECT seq, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
    // A page's rows (at most $3), none after the first once the ones
    // before it weigh $4 bytes (`engine::store::page::row_bytes`): a page
    // of large events is cut in the database, not after transferring it.
    // `total` counts the rows before that cut.
    PageEvents = "SELECT seq, id, session_id, client_key_id, event_type, payload, created_at, \
        total FROM (SELECT p.*, COALESCE(SUM(octet_length(p.payload) + octet_length(p.id) \
        + octet_length(p.session_id) + octet_length(p.event_type) + 96) OVER (ORDER BY p.seq \
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before, \
        ROW_NUMBER() OVER (ORDER BY p.seq) AS rn, COUNT(*) OVER () AS total \
        FROM (SELECT seq, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3) p) w \
        WHERE rn = 1 OR before < $4 ORDER BY seq";
    SelectEventSeq = "SELECT seq FROM session_events WHERE id = $1 AND session_id = $2";
    LatestOfType = "SELECT seq, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE session_id = $1 AND event_type = $2 AND seq <= $3 \
        ORDER BY seq DESC LIMIT $4";
    SelectEventById = "SELECT seq, id, session_id, client_key_id, event_type, payload, \
        created_at FROM session_events WHERE id = $1 AND session_id = $2";
    OfTypesFrom = "SELECT seq, id, session_id, client_key_id, event_type, payload, created_at \
        FROM session_events WHERE session_id = $1 AND event_type = ANY($2) AND seq >= $3 \
        ORDER BY seq";
    // In the order asked (repeats included), like one lookup per seq.
    EventsAt = "SELECT e.seq, e.id, e.session_id, e.client_key_id, e.event_type, e.payload, \
        e.created_at FROM unnest($1::bigint[]) WITH ORDINALITY AS q(seq, n) \
        JOIN session_events e ON e.seq = q.seq WHERE e.session_id = $2 ORDER BY q.n";
    AllProfiles = "SELECT id, name, provider_config, fallback_configs, mcp_servers, allowed_tools, \
        available_sandboxes, created_at, updated_at, deleted_at FROM profiles ORDER BY ord";
    ActiveKeys = "SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, created_at, \
        last_used_at, deleted_at FROM keys WHERE deleted_at IS NULL ORDER BY ord";
    AllSessions = "SELECT id, client_key_id, profile_id, state, client_version, client_tools, \
        sandbox_tools, subagent_tools, compaction, created_at, closed_at FROM sessions \
        ORDER BY ord";
    MaxSeq = "SELECT COALESCE(MAX(seq), 0) FROM session_events";
    // Registrations a fork or an import copied (up to its lineage row's
    // `copied_through`) are its parent's, not its own (issue 38).
    Drivers = "SELECT e.session_id, e.client_key_id FROM session_events e \
        JOIN sessions s ON s.id = e.session_id \
        LEFT JOIN bae_session_lineage l ON l.session_id = e.session_id \
        WHERE s.state = 'open' AND e.event_type = 'session.driver.register' \
        AND e.client_key_id IS NOT NULL AND e.seq > COALESCE(l.copied_through, 0) \
        ORDER BY e.seq";
    EventCount = "SELECT COUNT(*) FROM session_events";
    SessionCounts = "SELECT COUNT(*), COUNT(*) FILTER (WHERE state = 'open') FROM sessions";
    OpenRegistrations = "SELECT COUNT(*) FROM (SELECT DISTINCT e.session_id, e.client_key_id \
        FROM session_events e JOIN sessions s ON s.id = e.session_id \
        LEFT JOIN bae_session_lineage l ON l.session_id = e.session_id \
        WHERE s.state = 'open' AND e.event_type = 'session.driver.register' \
        AND e.client_key_id IS NOT NULL AND e.seq > COALESCE(l.copied_through, 0)) r";
    ActiveUserKeys = "SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, \
        created_at, last_used_at, deleted_at FROM keys WHERE deleted_at IS NULL \
        AND role <> 'session' ORDER BY ord";
    SessionById = "SELECT id, client_key_id, profile_id, state, client_version, client_tools, \
        sandbox_tools, subagent_tools, compaction, created_at, closed_at FROM sessions \
        WHERE id = $1";
    KeysOfSession = "SELECT id, name, key_hash, key_prefix, role, profile_id, client_id, \
        created_at, last_used_at, deleted_at FROM keys WHERE role = 'session' \
        AND name = convert_to($1, 'UTF8') AND deleted_at IS NULL ORDER BY ord";
    DriversOfSession = "SELECT client_key_id FROM session_events WHERE session_id = $1 \
        AND event_type = 'session.driver.register' AND seq >= $2 \
        AND seq > COALESCE((SELECT copied_through FROM bae_session_lineage \
        WHERE session_id = $1), 0) AND client_key_id IS NOT NULL ORDER BY seq";
    SessionsOfClient = "SELECT id FROM sessions WHERE convert_to(id, 'UTF8') IN (SELECT name \
        FROM keys WHERE role = 'session' AND client_id = $1 AND deleted_at IS NULL) ORDER BY ord";
    SessionList = "SELECT id, client_key_id, profile_id, state, client_version, client_tools, \
        sandbox_tools, subagent_tools, compaction, created_at, closed_at, ord FROM sessions \
        WHERE ord > $1 AND ($2::text IS NULL OR state = $2) ORDER BY ord LIMIT $3";
    AllIdempotency = "SELECT session_id, client_key_id, key, digest, created_ms, outcome \
        FROM bae_idempotency_keys";
    InsertLineage = "INSERT INTO bae_session_lineage (session_id, kind, parent_id, \
        parent_event_id, source_session_id, created_at, copied_through) \
        VALUES ($1, $2, $3, $4, $5, $6, $7)";
    LineageOf = "SELECT session_id, kind, parent_id, parent_event_id, source_session_id, \
        created_at, COALESCE(copied_through, 0) FROM bae_session_lineage WHERE session_id = $1";
    LineageChildren = "SELECT session_id, kind, parent_id, parent_event_id, \
        source_session_id, created_at, COALESCE(copied_through, 0) FROM bae_session_lineage \
        WHERE parent_id = $1 ORDER BY ord";
    Activity = "SELECT \
        (SELECT COUNT(*) FROM profiles WHERE deleted_at IS NULL), \
        (SELECT COUNT(*) FROM keys WHERE role = 'client' AND deleted_at IS NULL), \
        (SELECT COUNT(*) FROM sessions WHERE state = 'open'), \
        (SELECT COUNT(*) FROM sessions), \
        (SELECT COUNT(*) FROM session_events)";
}

/// Every statement, prepared on one connection.
pub(crate) struct Prepared(Vec<Statement>);

impl Prepared {
    pub(super) fn get(&self, q: Pq) -> &Statement {
        &self.0[q as usize]
    }
}

impl Cols for Row {
    fn text(&self, i: usize) -> Result<String> {
        if self.columns()[i].type_() == &Type::BYTEA {
            let bytes: Vec<u8> = self.try_get(i).map_err(corrupt)?;
            return String::from_utf8(bytes)
                .map_err(|_| StoreError::Corrupt(format!("column {i} is not UTF-8")));
        }
        self.try_get(i).map_err(corrupt)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        if self.columns()[i].type_() == &Type::BYTEA {
            let bytes: Option<Vec<u8>> = self.try_get(i).map_err(corrupt)?;
            return bytes
                .map(|b| {
                    String::from_utf8(b)
                        .map_err(|_| StoreError::Corrupt(format!("column {i} is not UTF-8")))
                })
                .transpose();
        }
        self.try_get(i).map_err(corrupt)
    }
    fn int(&self, i: usize) -> Result<i64> {
        self.try_get(i).map_err(corrupt)
    }
}

fn corrupt(e: postgres::Error) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

impl PgStore {
    /// Prepares every statement (once the schema exists).
    fn prepared(&mut self) -> Result<&Prepared> {
        if self.stmts.is_none() {
            let mut v = Vec::with_capacity(Pq::ALL.len());
            for q in Pq::ALL {
                let st = self.client.prepare(q.sql()).map_err(|e| self.err(e))?;
                v.push(st);
            }
            self.stmts = Some(Prepared(v));
        }
        Ok(self.stmts.as_ref().expect("just prepared"))
    }

    /// Applies `batch` in order inside one transaction; on any error it is
    /// rolled back and nothing of the batch is stored.
    pub fn commit(&mut self, batch: &[StoreWrite]) -> Result<()> {
        self.commit_fenced(batch, None)
    }

    /// [`PgStore::commit`] in replica mode: the batch first passes the
    /// monotonic check and, inside its transaction, `fence`
    /// ([`super::replica::fence`]); when either fails nothing of it is
    /// stored and the error is [`StoreError::Fenced`].
    pub fn commit_fenced(&mut self, batch: &[StoreWrite], fence: Option<&Fence>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.replica_fresh()?;
        self.prepared()?;
        let stmts = self.stmts.take().expect("prepared");
        let replica = self.replica.as_ref();
        let mut fenced = None;
        let r = (|| {
            let mut tx = self.client.transaction()?;
            if let Some(state) = replica {
                if let Err(what) = super::replica::fence(&mut tx, state, fence, batch)? {
                    // Dropped uncommitted: rolled back.
                    fenced = Some(what);
                    return Ok(());
                }
            }
            let mut rest = batch;
            while let Some(w) = rest.first() {
                let run = rest
                    .iter()
                    .take_while(|w| matches!(w, StoreWrite::InsertEvent(_)))
                    .count();
                if run > 1 {
                    insert_events(&mut tx, &stmts, &rest[..run])?;
                    rest = &rest[run..];
                } else {
                    apply(&mut tx, &stmts, w)?;
                    rest = &rest[1..];
                }
            }
            if replica.is_some() {
                super::replica::notify(&mut tx, batch)?;
            }
            tx.commit()
        })();
        self.stmts = Some(stmts);
        if let Some(what) = fenced {
            return Err(StoreError::Fenced(what));
        }
        // Dropping an unfinished transaction rolls it back.
        r.map_err(|e| self.err(e))
    }

    /// Answers one engine query.
    pub fn read(&mut self, read: &StoreRead) -> Result<ReadResult> {
        if let StoreRead::ClaimLease {
            session_id,
            drivers_since,
        } = read
        {
            return self.claim_lease(session_id, *drivers_since);
        }
        self.prepared()?;
        let stmts = self.stmts.take().expect("prepared");
        let r = read_with(&mut self.client, &stmts, read);
        self.stmts = Some(stmts);
        r.map_err(|e| match e {
            ReadError::Pg(e) => self.err(e),
            ReadError::Store(e) => e,
        })
    }

    /// Everything the engine restores from at start, from one consistent
    /// (repeatable-read) view.
    pub fn load_snapshot(&mut self) -> Result<Snapshot> {
        self.load_snapshot_of(SnapshotScope::Full)
    }

    /// [`PgStore::load_snapshot`] of one scope.
    pub fn load_snapshot_of(&mut self, scope: SnapshotScope) -> Result<Snapshot> {
        self.prepared()?;
        let stmts = self.stmts.take().expect("prepared");
        let r = (|| -> std::result::Result<Snapshot, ReadError> {
            let mut tx = self
                .client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let snap = snapshot(&mut tx, &stmts, scope)?;
            tx.commit()?;
            Ok(snap)
        })();
        self.stmts = Some(stmts);
        r.map_err(|e| match e {
            ReadError::Pg(e) => self.err(e),
            ReadError::Store(e) => e,
        })
    }

    /// Counts for the periodic activity summary.
    pub fn activity(&mut self) -> Result<Activity> {
        self.prepared()?;
        let st = self
            .stmts
            .as_ref()
            .expect("prepared")
            .get(Pq::Activity)
            .clone();
        let row = self.client.query_one(&st, &[]).map_err(|e| self.err(e))?;
        let n = |i: usize| row.int(i).map(|v| v.max(0) as u64);
        Ok(Activity {
            profiles: n(0)?,
            client_keys: n(1)?,
            open_sessions: n(2)?,
            total_sessions: n(3)?,
            events: n(4)?,
        })
    }
}

fn apply(
    tx: &mut postgres::Transaction<'_>,
    stmts: &Prepared,
    w: &StoreWrite,
) -> std::result::Result<(), postgres::Error> {
    let exec = |tx: &mut postgres::Transaction<'_>, q: Pq, p: &[&(dyn ToSql + Sync)]| {
        tx.execute(stmts.get(q), p).map(|_| ())
    };
    match w {
        StoreWrite::InsertProfile(p) | StoreWrite::UpdateProfile(p) => {
            let q = match w {
                StoreWrite::InsertProfile(_) => Pq::InsertProfile,
                _ => Pq::UpdateProfile,
            };
            let v = crate::store::rows::ProfileTexts::of(p);
            exec(
                tx,
                q,
                &[
                    &p.id,
                    &p.name.as_bytes(),
                    &v.primary,
                    &v.fallbacks,
                    &v.mcp,
                    &v.tools,
                    &v.sandboxes,
                    &p.created_at,
                    &p.updated_at,
                    &p.deleted_at,
                ],
            )
        }
        StoreWrite::InsertKey(k) => exec(
            tx,
            Pq::InsertKey,
            &[
                &k.id,
                &k.name.as_bytes(),
                &k.key_hash,
                &k.key_prefix,
                &k.role.as_str(),
                &k.profile_id,
                &k.client_id,
                &k.created_at,
                &k.last_used_at,
                &k.deleted_at,
            ],
        ),
        StoreWrite::RevokeKey { id, at } => exec(tx, Pq::RevokeKey, &[id, at]),
        StoreWrite::RevokeSessionKeysOf { client_id, at } => {
            exec(tx, Pq::RevokeSessionKeysOf, &[client_id, at])
        }
        // Written with the replica's token (`replica::fence`).
        StoreWrite::LeaseNewSession { .. } => Ok(()),
        StoreWrite::SetKeyHash { id, key_hash } => exec(tx, Pq::SetKeyHash, &[id, key_hash]),
        StoreWrite::TouchKey { id, at } => exec(tx, Pq::TouchKey, &[id, at]),
        StoreWrite::InsertSession(s) => exec(
            tx,
            Pq::InsertSession,
            &[
                &s.id,
                &s.client_key_id,
                &s.profile_id,
                &s.state.as_str(),
                &s.client_version.as_deref().map(str::as_bytes),
                &s.client_tools,
                &s.created_at,
                &s.closed_at,
                &s.sandbox_tools,
                &s.subagent_tools,
                &s.compaction,
            ],
        ),
        StoreWrite::SetSessionState {
            id,
            state,
            closed_at,
        } => exec(tx, Pq::SetSessionState, &[id, &state.as_str(), closed_at]),
        StoreWrite::SetSessionTools {
            id,
            client_tools,
            sandbox_tools,
            subagent_tools,
        } => exec(
            tx,
            Pq::SetSessionTools,
            &[id, client_tools, sandbox_tools, subagent_tools],
        ),
        StoreWrite::InsertEvent(e) => {
            // Out of range only for a seq no engine assigns; the insert
            // then fails like any constraint would.
            let seq = i64::try_from(e.seq).unwrap_or(-1);
            exec(
                tx,
                Pq::InsertEvent,
                &[
                    &seq,
                    &e.id,
                    &e.session_id,
                    &e.client_key_id,
                    &e.event_type,
                    &e.payload,
                    &e.created_at,
                ],
            )
        }
        StoreWrite::PutIdempotency(r) => {
            let created = i64::try_from(r.created_ms).unwrap_or(i64::MAX);
            exec(
                tx,
                Pq::PutIdempotency,
                &[
                    &r.session_id,
                    &r.client_key_id,
                    &r.key.as_bytes(),
                    &r.digest,
                    &created,
                    &r.outcome,
                ],
            )
        }
        StoreWrite::ExpireIdempotency { before_ms } => {
            let before = i64::try_from(*before_ms).unwrap_or(i64::MAX);
            exec(tx, Pq::ExpireIdempotency, &[&before])
        }
        StoreWrite::InsertLineage(row) => {
            let c = crate::store::lineage::LineageCols::of(row);
            exec(
                tx,
                Pq::InsertLineage,
                &[
                    &row.session_id,
                    &c.kind,
                    &c.parent_id,
                    &c.parent_event_id,
                    &c.source_session_id,
                    &row.created_at,
                    &c.copied_through,
                ],
            )
        }
        StoreWrite::InsertUsage(r) => {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let t = &r.tokens;
            exec(
                tx,
                Pq::InsertUsage,
                &[
                    &n(r.event_seq),
                    &r.session_id,
                    &n(r.turn_seq),
                    &r.client_key_id,
                    &r.profile_id,
                    &r.provider,
                    &r.model,
                    &r.compaction,
                    &n(r.created_ms),
                    &n(t.input),
                    &n(t.output),
                    &n(t.cache_write),
                    &n(t.cache_read),
                    &r.turn_event_id,
                ],
            )
        }
        StoreWrite::PutQuota(r) => exec(
            tx,
            Pq::PutQuota,
            &[&r.scope.kind(), &r.scope.id(), &r.quota, &r.updated_at],
        ),
        StoreWrite::DeleteQuota(scope) => exec(tx, Pq::DeleteQuota, &[&scope.kind(), &scope.id()]),
    }
}

/// `writes` (all [`StoreWrite::InsertEvent`]) as one statement.
fn insert_events(
    tx: &mut postgres::Transaction<'_>,
    stmts: &Prepared,
    writes: &[StoreWrite],
) -> std::result::Result<(), postgres::Error> {
    let rows: Vec<&EventRow> = writes
        .iter()
        .filter_map(|w| match w {
            StoreWrite::InsertEvent(e) => Some(e),
            _ => None,
        })
        .collect();
    // Out of range only for a seq no engine assigns (see `apply`).
    let seqs: Vec<i64> = rows
        .iter()
        .map(|e| i64::try_from(e.seq).unwrap_or(-1))
        .collect();
    let ids: Vec<&str> = rows.iter().map(|e| e.id.as_str()).collect();
    let sessions: Vec<&str> = rows.iter().map(|e| e.session_id.as_str()).collect();
    let keys: Vec<Option<&str>> = rows.iter().map(|e| e.client_key_id.as_deref()).collect();
    let types: Vec<&str> = rows.iter().map(|e| e.event_type.as_str()).collect();
    let payloads: Vec<&str> = rows.iter().map(|e| e.payload.as_str()).collect();
    let created: Vec<&str> = rows.iter().map(|e| e.created_at.as_str()).collect();
    tx.execute(
        stmts.get(Pq::InsertEvents),
        &[&seqs, &ids, &sessions, &keys, &types, &payloads, &created],
    )
    .map(|_| ())
}

/// Prepares every statement on `client` (a reader connection).
pub(crate) fn prepare_all(
    client: &mut postgres::Client,
) -> std::result::Result<Prepared, postgres::Error> {
    let mut v = Vec::with_capacity(Pq::ALL.len());
    for q in Pq::ALL {
        v.push(client.prepare(q.sql())?);
    }
    Ok(Prepared(v))
}
