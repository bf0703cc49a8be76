//! The engine's reads against PostgreSQL: queries ([`StoreRead`]), pages
//! cut in the database, and the restart snapshot. The statements and the
//! writes are in `ops.rs`; these reads run on the writer connection, and
//! [`read_with`] also on the reader pool (`pool.rs`).

use std::collections::HashSet;

use engine::store::page::PageBounds;
use engine::store::{
    EventRow, EventType, IdempotencyRow, ReadResult, SessionState, Snapshot, SnapshotScope,
    StoreRead, StoredSession,
};
use postgres::{GenericClient, Row};

use super::ops::{Pq, Prepared};
use super::StoreError;
use crate::store::lineage::lineage_row;
use crate::store::rows::{read_event, read_key, read_profile, read_session, seq_to_i64, Cols};
use crate::store::Result;

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A read failed in the client or while decoding.
pub(crate) enum ReadError {
    Pg(postgres::Error),
    Store(StoreError),
}

impl From<postgres::Error> for ReadError {
    fn from(e: postgres::Error) -> Self {
        ReadError::Pg(e)
    }
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> Self {
        ReadError::Store(e)
    }
}

fn events(rows: Vec<Row>) -> std::result::Result<Vec<EventRow>, ReadError> {
    Ok(rows.iter().map(read_event).collect::<Result<Vec<_>>>()?)
}

/// Answers `read` on `c` (a connection or a transaction).
pub(crate) fn read_with(
    c: &mut impl GenericClient,
    stmts: &Prepared,
    read: &StoreRead,
) -> std::result::Result<ReadResult, ReadError> {
    let result = match read {
        // Pages leave the store rendered (the engine only sends them).
        StoreRead::EventsPage { .. }
        | StoreRead::ReplayPage { .. }
        | StoreRead::ExportPage { .. } => {
            let (
                Some(bounds),
                Some(StoreRead::Events {
                    session_id,
                    after_seq,
                    limit: n,
                }),
            ) = (PageBounds::of(read), engine::store::page_rows_read(read))
            else {
                return Ok(ReadResult::Events(Vec::new()));
            };
            let after = seq_to_i64(after_seq)?;
            let max_bytes = limit(bounds.max_bytes);
            let rows = c.query(
                stmts.get(Pq::PageEvents),
                &[&session_id, &after, &limit(n), &max_bytes],
            )?;
            let total = match rows.first() {
                Some(r) => r.int(7)?,
                None => 0,
            };
            let mut rows = events(rows)?;
            let mut more = limit(rows.len()) < total;
            more |= engine::store::page::trim_page(&mut rows, bounds);
            engine::store::render_page(read, &rows, more).unwrap_or(ReadResult::Events(rows))
        }
        StoreRead::Runtime => ReadResult::Runtime(Default::default()),
        StoreRead::Lineage {
            session_id,
            children,
        } => {
            let own = c.query_opt(stmts.get(Pq::LineageOf), &[session_id])?;
            let own = own.map(|r| lineage_row(&r)).transpose()?;
            let mut kids = Vec::new();
            if *children {
                for r in c.query(stmts.get(Pq::LineageChildren), &[session_id])? {
                    kids.push(lineage_row(&r)?);
                }
            }
            ReadResult::Lineage {
                own,
                children: kids,
            }
        }
        // Answered by `PgStore::claim_lease` on the writer connection.
        StoreRead::ClaimLease { .. } => {
            return Err(ReadError::Store(StoreError::Postgres(
                "lease claims run on the writer connection".into(),
            )))
        }
        StoreRead::Events {
            session_id,
            after_seq,
            limit: n,
        } => {
            let after = seq_to_i64(*after_seq)?;
            let rows = c.query(
                stmts.get(Pq::SelectEvents),
                &[session_id, &after, &limit(*n)],
            )?;
            ReadResult::Events(events(rows)?)
        }
        StoreRead::EventSeq {
            session_id,
            event_id,
        } => {
            let row = c.query_opt(stmts.get(Pq::SelectEventSeq), &[event_id, session_id])?;
            ReadResult::EventSeq(match row {
                Some(r) => Some(r.int(0)? as u64),
                None => None,
            })
        }
        StoreRead::LatestOfType {
            session_id,
            event_type,
            before_seq,
            limit: n,
        } => {
            let at_most =
                before_seq.map_or(i64::MAX, |b| i64::try_from(b).map_or(i64::MAX, |b| b - 1));
            let rows = c.query(
                stmts.get(Pq::LatestOfType),
                &[session_id, &event_type.as_str(), &at_most, &limit(*n)],
            )?;
            ReadResult::Events(events(rows)?)
        }
        StoreRead::EventById {
            session_id,
            event_id,
        } => {
            let rows = c.query(stmts.get(Pq::SelectEventById), &[event_id, session_id])?;
            ReadResult::Events(events(rows)?)
        }
        StoreRead::OfTypesFrom {
            session_id,
            event_types,
            from_seq,
        } => {
            let from = seq_to_i64(*from_seq)?;
            let types: Vec<&str> = event_types.iter().map(|t: &EventType| t.as_str()).collect();
            let rows = c.query(stmts.get(Pq::OfTypesFrom), &[session_id, &types, &from])?;
            ReadResult::Events(events(rows)?)
        }
        StoreRead::EventsAt { session_id, seqs } => {
            let seqs: Vec<i64> = seqs.iter().map(|s| seq_to_i64(*s)).collect::<Result<_>>()?;
            let rows = c.query(stmts.get(Pq::EventsAt), &[&seqs, session_id])?;
            ReadResult::Events(events(rows)?)
        }
        StoreRead::LoadSession {
            session_id,
            drivers_since,
        } => {
            let s = stored_session(c, stmts, session_id, *drivers_since)?;
            ReadResult::Session(s.map(Box::new))
        }
        StoreRead::SessionsOfClient {
            client_id,
            drivers_since,
        } => {
            let mut out = Vec::new();
            for r in c.query(stmts.get(Pq::SessionsOfClient), &[client_id])? {
                let id = r.text(0)?;
                out.extend(stored_session(c, stmts, &id, *drivers_since)?);
            }
            ReadResult::Sessions(out)
        }
        StoreRead::Usage {
            scope,
            since_ms,
            until_ms,
            by_turn,
        } => {
            use engine::store::UsageScope;
            let (q, id) = match scope {
                UsageScope::Session(id) => (Pq::UsageSession, id),
                UsageScope::ClientKey(id) => (Pq::UsageKey, id),
                UsageScope::Profile(id) => (Pq::UsageProfile, id),
            };
            let since = i64::try_from(since_ms.unwrap_or(0)).unwrap_or(i64::MAX);
            let until = until_ms.map_or(i64::MAX, |u| i64::try_from(u).unwrap_or(i64::MAX));
            let rows = c.query(stmts.get(q), &[id, &since, &until, by_turn])?;
            let n = |r: &Row, i: usize| r.int(i).map(|v| u64::try_from(v).unwrap_or(0));
            let mut sums = Vec::with_capacity(rows.len());
            for r in &rows {
                sums.push(engine::usage::Sum {
                    provider: r.text(0)?,
                    turn_seq: by_turn.then(|| n(r, 1)).transpose()?,
                    turn_event_id: by_turn.then(|| r.text(7)).transpose()?,
                    calls: n(r, 2)?,
                    tokens: proto::provider::Tokens {
                        input: n(r, 3)?,
                        output: n(r, 4)?,
                        cache_write: n(r, 5)?,
                        cache_read: n(r, 6)?,
                    },
                });
            }
            ReadResult::Usage(sums)
        }
        StoreRead::SessionList {
            after,
            limit: n,
            state,
        } => {
            let after = seq_to_i64(*after)?;
            let state = state.map(|s| s.as_str());
            let rows = c.query(
                stmts.get(Pq::SessionList),
                &[&after, &state, &limit(n.saturating_add(1))],
            )?;
            let mut list = Vec::with_capacity(rows.len());
            for r in &rows {
                list.push((r.int(11)?.max(0) as u64, read_session(r)?));
            }
            let more = list.len() > *n;
            list.truncate(*n);
            ReadResult::SessionList { rows: list, more }
        }
    };
    Ok(result)
}

/// One session with its active session keys and (when open) the client
/// keys of its registrations from `since` on (see `StoreRead::LoadSession`).
fn stored_session(
    c: &mut impl GenericClient,
    stmts: &Prepared,
    id: &str,
    since: u64,
) -> std::result::Result<Option<StoredSession>, ReadError> {
    let Some(row) = c.query_opt(stmts.get(Pq::SessionById), &[&id])? else {
        return Ok(None);
    };
    let session = read_session(&row)?;
    let mut keys = Vec::new();
    for r in c.query(stmts.get(Pq::KeysOfSession), &[&id])? {
        keys.push(read_key(&r)?);
    }
    let mut drivers: Vec<String> = Vec::new();
    if session.state == SessionState::Open {
        let since = seq_to_i64(since)?;
        for r in c.query(stmts.get(Pq::DriversOfSession), &[&id, &since])? {
            let key = r.text(0)?;
            if !drivers.contains(&key) {
                drivers.push(key);
            }
        }
    }
    Ok(Some(StoredSession {
        session,
        keys,
        drivers,
    }))
}

pub(super) fn snapshot(
    c: &mut impl GenericClient,
    stmts: &Prepared,
    scope: SnapshotScope,
) -> std::result::Result<Snapshot, ReadError> {
    let full = scope == SnapshotScope::Full;
    let mut snap = Snapshot::default();
    for r in c.query(stmts.get(Pq::AllProfiles), &[])? {
        snap.profiles.push(read_profile(&r)?);
    }
    let keys = if full {
        Pq::ActiveKeys
    } else {
        Pq::ActiveUserKeys
    };
    for r in c.query(stmts.get(keys), &[])? {
        snap.keys.push(read_key(&r)?);
    }
    if full {
        for r in c.query(stmts.get(Pq::AllSessions), &[])? {
            snap.sessions.push(read_session(&r)?);
        }
    }
    let counts = c.query_one(stmts.get(Pq::SessionCounts), &[])?;
    snap.stored_sessions.total = counts.int(0)?.max(0) as u64;
    snap.stored_sessions.open = counts.int(1)?.max(0) as u64;
    let regs = c.query_one(stmts.get(Pq::OpenRegistrations), &[])?;
    snap.stored_sessions.drivers = regs.int(0)?.max(0) as u64;
    snap.max_event_seq = c.query_one(stmts.get(Pq::MaxSeq), &[])?.int(0)?.max(0) as u64;
    let mut seen = HashSet::new();
    if full {
        for r in c.query(stmts.get(Pq::Drivers), &[])? {
            let pair = (r.text(0)?, r.text(1)?);
            if seen.insert(pair.clone()) {
                snap.drivers.push(pair);
            }
        }
    }
    snap.events_total = c.query_one(stmts.get(Pq::EventCount), &[])?.int(0)?.max(0) as u64;
    for r in c.query(stmts.get(Pq::AllIdempotency), &[])? {
        snap.idempotency.push(IdempotencyRow {
            session_id: r.text(0)?,
            client_key_id: r.text(1)?,
            key: r.text(2)?,
            digest: r.text(3)?,
            created_ms: r.int(4)?.max(0) as u64,
            outcome: r.opt_text(5)?,
        });
    }
    for r in c.query(stmts.get(Pq::AllQuotas), &[])? {
        snap.quotas.extend(crate::store::rows::read_quota(&r)?);
    }
    for r in c.query(stmts.get(Pq::OpenByCreator), &[])? {
        snap.open_sessions
            .push(crate::store::rows::read_open_count(&r)?);
    }
    Ok(snap)
}
