//! An in-memory store with the same semantics as the SQLite store: used by
//! the simulator and by engine tests. Pure data structure, no I/O.

use std::collections::BTreeMap;

use crate::store::{
    Claimed, EventRow, IdempotencyRow, KeyRole, KeyRow, Lease, LineageRow, Origin, ProfileRow,
    ReadResult, SessionCounts, SessionRow, SessionState, Snapshot, SnapshotScope, StoreRead,
    StoreWrite, StoredSession, UsageRow, UsageScope,
};

#[derive(Debug, Clone, Default)]
pub struct MemStore {
    pub profiles: Vec<ProfileRow>,
    pub keys: Vec<KeyRow>,
    pub sessions: Vec<SessionRow>,
    /// Events by seq (rowid order).
    pub events: BTreeMap<u64, EventRow>,
    /// Event seqs per session, ascending.
    by_session: BTreeMap<String, Vec<u64>>,
    /// Idempotency keys by (session, client key, key).
    idempotency: BTreeMap<(String, String, String), IdempotencyRow>,
    /// Where forked and imported sessions came from, in creation order.
    pub lineage: Vec<LineageRow>,
    /// Usage rows by their `provider.response` seq.
    pub usage: BTreeMap<u64, UsageRow>,
    pub quotas: BTreeMap<crate::store::QuotaScope, crate::store::QuotaRow>,
}

impl MemStore {
    /// A store holding one admin key for `token`, as a runtime's bootstrap
    /// writes it before the engine starts (engine tests and benches, the
    /// simulator).
    pub fn with_admin_key(id: &str, token: &str) -> MemStore {
        let mut store = MemStore::default();
        store.apply(&StoreWrite::InsertKey(KeyRow {
            id: id.into(),
            name: "bootstrap-admin".into(),
            key_hash: crate::auth::digest_hex(token),
            key_prefix: token.chars().take(8).collect(),
            role: KeyRole::Admin,
            profile_id: None,
            client_id: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            last_used_at: None,
            deleted_at: None,
        }));
        store
    }

    /// Applies one batch atomically (all writes are infallible here).
    pub fn commit(&mut self, batch: &[StoreWrite]) {
        for w in batch {
            self.apply(w);
        }
    }

    pub fn apply(&mut self, w: &StoreWrite) {
        match w {
            StoreWrite::InsertProfile(p) => self.profiles.push(p.clone()),
            StoreWrite::UpdateProfile(p) => {
                if let Some(slot) = self.profiles.iter_mut().find(|x| x.id == p.id) {
                    *slot = p.clone();
                }
            }
            StoreWrite::InsertKey(k) => self.keys.push(k.clone()),
            StoreWrite::RevokeKey { id, at } => {
                if let Some(k) = self.keys.iter_mut().find(|k| &k.id == id) {
                    k.deleted_at = Some(at.clone());
                }
            }
            // One store, one server: leases are not kept.
            StoreWrite::LeaseNewSession { .. } => {}
            StoreWrite::RevokeSessionKeysOf { client_id, at } => {
                for k in self.keys.iter_mut() {
                    let of = k.client_id.as_deref() == Some(client_id.as_str());
                    if k.role == KeyRole::Session && of && k.deleted_at.is_none() {
                        k.deleted_at = Some(at.clone());
                    }
                }
            }
            StoreWrite::SetKeyHash { id, key_hash } => {
                if let Some(k) = self.keys.iter_mut().find(|k| &k.id == id) {
                    k.key_hash = key_hash.clone();
                }
            }
            StoreWrite::TouchKey { id, at } => {
                if let Some(k) = self.keys.iter_mut().find(|k| &k.id == id) {
                    k.last_used_at = Some(at.clone());
                }
            }
            StoreWrite::InsertSession(s) => self.sessions.push(s.clone()),
            StoreWrite::SetSessionState {
                id,
                state,
                closed_at,
            } => {
                if let Some(s) = self.sessions.iter_mut().find(|s| &s.id == id) {
                    s.state = *state;
                    s.closed_at = closed_at.clone();
                }
            }
            StoreWrite::SetSessionTools {
                id,
                client_tools,
                sandbox_tools,
                subagent_tools,
            } => {
                if let Some(s) = self.sessions.iter_mut().find(|s| &s.id == id) {
                    s.client_tools = client_tools.clone();
                    s.sandbox_tools = sandbox_tools.clone();
                    s.subagent_tools = subagent_tools.clone();
                }
            }
            StoreWrite::InsertEvent(e) => {
                assert!(
                    !self.events.contains_key(&e.seq),
                    "duplicate event rowid {}",
                    e.seq
                );
                self.by_session
                    .entry(e.session_id.clone())
                    .or_default()
                    .push(e.seq);
                self.events.insert(e.seq, e.clone());
            }
            StoreWrite::PutIdempotency(row) => {
                let id = (
                    row.session_id.clone(),
                    row.client_key_id.clone(),
                    row.key.clone(),
                );
                self.idempotency.insert(id, row.clone());
            }
            StoreWrite::ExpireIdempotency { before_ms } => {
                self.idempotency.retain(|_, r| r.created_ms >= *before_ms);
            }
            StoreWrite::InsertLineage(row) => self.lineage.push(row.clone()),
            StoreWrite::InsertUsage(row) => {
                self.usage
                    .entry(row.event_seq)
                    .or_insert_with(|| row.clone());
            }
            StoreWrite::PutQuota(row) => {
                self.quotas.insert(row.scope.clone(), row.clone());
            }
            StoreWrite::DeleteQuota(scope) => {
                self.quotas.remove(scope);
            }
        }
    }

    fn session_events(&self, session_id: &str) -> impl DoubleEndedIterator<Item = &EventRow> {
        self.by_session
            .get(session_id)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
            .iter()
            .filter_map(|seq| self.events.get(seq))
    }

    /// The session's event seqs with `from <= seq < before` (no upper
    /// bound when `before` is `None`), ascending.
    fn session_seqs(&self, session_id: &str, from: u64, before: Option<u64>) -> &[u64] {
        let all = self
            .by_session
            .get(session_id)
            .map(|v| v.as_slice())
            .unwrap_or(&[]);
        let lo = all.partition_point(|&s| s < from);
        let hi = before.map_or(all.len(), |b| all.partition_point(|&s| s < b));
        all.get(lo..hi.max(lo)).unwrap_or(&[])
    }

    pub fn read(&self, read: &StoreRead) -> ReadResult {
        match read {
            StoreRead::Events {
                session_id,
                after_seq,
                limit,
            } => ReadResult::Events(
                self.session_events(session_id)
                    .filter(|e| e.seq > *after_seq)
                    .take(*limit)
                    .cloned()
                    .collect(),
            ),
            StoreRead::EventSeq {
                session_id,
                event_id,
            } => ReadResult::EventSeq(
                self.session_events(session_id)
                    .find(|e| &e.id == event_id)
                    .map(|e| e.seq),
            ),
            StoreRead::LatestOfType {
                session_id,
                event_type,
                before_seq,
                limit,
            } => ReadResult::Events(
                self.session_seqs(session_id, 0, *before_seq)
                    .iter()
                    .rev()
                    .filter_map(|seq| self.events.get(seq))
                    .filter(|e| e.event_type == event_type.as_str())
                    .take(*limit)
                    .cloned()
                    .collect(),
            ),
            StoreRead::EventById {
                session_id,
                event_id,
            } => ReadResult::Events(
                self.session_events(session_id)
                    .find(|e| &e.id == event_id)
                    .cloned()
                    .into_iter()
                    .collect(),
            ),
            StoreRead::OfTypesFrom {
                session_id,
                event_types,
                from_seq,
            } => ReadResult::Events(
                self.session_seqs(session_id, *from_seq, None)
                    .iter()
                    .filter_map(|seq| self.events.get(seq))
                    .filter(|e| event_types.iter().any(|t| e.event_type == t.as_str()))
                    .cloned()
                    .collect(),
            ),
            StoreRead::Lineage {
                session_id,
                children,
            } => ReadResult::Lineage {
                own: (self.lineage.iter())
                    .find(|l| &l.session_id == session_id)
                    .cloned(),
                children: (self.lineage.iter())
                    .filter(|_| *children)
                    .filter(|l| {
                        matches!(&l.origin, Origin::Fork { parent_id, .. } if parent_id == session_id)
                    })
                    .cloned()
                    .collect(),
            },
            StoreRead::EventsPage { .. }
            | StoreRead::ReplayPage { .. }
            | StoreRead::ExportPage { .. } => {
                let rows = match crate::store::page_rows_read(read).map(|r| self.read(&r)) {
                    Some(ReadResult::Events(rows)) => rows,
                    _ => Vec::new(),
                };
                crate::store::render_from_rows(read, rows).unwrap_or(ReadResult::Events(Vec::new()))
            }
            StoreRead::Runtime => ReadResult::Runtime(Default::default()),
            // One store, one server: every session is this one's.
            StoreRead::ClaimLease {
                session_id,
                drivers_since,
            } => ReadResult::Lease(self.claim(session_id, *drivers_since)),
            StoreRead::LoadSession {
                session_id,
                drivers_since,
            } => ReadResult::Session(
                (self.sessions.iter())
                    .find(|s| &s.id == session_id)
                    .map(|s| Box::new(self.stored(s, *drivers_since))),
            ),
            StoreRead::SessionsOfClient {
                client_id,
                drivers_since,
            } => {
                let of_client = |s: &&SessionRow| {
                    self.keys.iter().any(|k| {
                        k.role == KeyRole::Session
                            && k.name == s.id
                            && k.deleted_at.is_none()
                            && k.client_id.as_deref() == Some(client_id.as_str())
                    })
                };
                ReadResult::Sessions(
                    (self.sessions.iter())
                        .filter(of_client)
                        .map(|s| self.stored(s, *drivers_since))
                        .collect(),
                )
            }
            StoreRead::SessionList {
                after,
                limit,
                state,
            } => {
                let mut rows: Vec<(u64, SessionRow)> = (self.sessions.iter())
                    .enumerate()
                    .map(|(i, s)| (i as u64 + 1, s))
                    .filter(|(pos, s)| *pos > *after && state.is_none_or(|st| st == s.state))
                    .take(limit + 1)
                    .map(|(pos, s)| (pos, s.clone()))
                    .collect();
                let more = rows.len() > *limit;
                rows.truncate(*limit);
                ReadResult::SessionList { rows, more }
            }
            StoreRead::Usage {
                scope,
                since_ms,
                until_ms,
                by_turn,
            } => {
                let rows = self.usage.values().filter(|r| {
                    let of = match scope {
                        UsageScope::Session(id) => &r.session_id == id,
                        UsageScope::ClientKey(id) => &r.client_key_id == id,
                        UsageScope::Profile(id) => &r.profile_id == id,
                    };
                    of && since_ms.is_none_or(|s| r.created_ms >= s)
                        && until_ms.is_none_or(|u| r.created_ms < u)
                });
                ReadResult::Usage(crate::usage::sum_rows(rows, *by_turn))
            }
            StoreRead::EventsAt { session_id, seqs } => ReadResult::Events(
                seqs.iter()
                    .filter_map(|seq| self.events.get(seq))
                    .filter(|e| &e.session_id == session_id)
                    .cloned()
                    .collect(),
            ),
        }
    }

    /// Seq of the last event a fork or an import copied into `session_id`
    /// (0: none): registrations up to it are not the session's own.
    fn copied_through(&self, session_id: &str) -> u64 {
        (self.lineage.iter())
            .find(|l| l.session_id == session_id)
            .map_or(0, |l| l.copied_through)
    }

    /// Whether `e` registers a driver of its own session (not a copied
    /// registration of the session it was forked or imported from).
    fn own_registration(&self, e: &EventRow) -> bool {
        e.event_type == "session.driver.register" && e.seq > self.copied_through(&e.session_id)
    }

    /// Distinct `(session, client key)` registrations on the `open` sessions.
    fn open_registrations(&self, open: &std::collections::HashSet<&str>) -> u64 {
        let pairs: std::collections::BTreeSet<(&str, &str)> = (self.events.values())
            .filter(|e| self.own_registration(e))
            .filter(|e| open.contains(e.session_id.as_str()))
            .filter_map(|e| Some((e.session_id.as_str(), e.client_key_id.as_deref()?)))
            .collect();
        pairs.len() as u64
    }

    /// `s` with its active session keys and its drivers since `since`.
    fn stored(&self, s: &SessionRow, since: u64) -> StoredSession {
        let mut drivers: Vec<String> = Vec::new();
        if s.state == SessionState::Open {
            for e in self.session_events(&s.id) {
                let key = e.client_key_id.as_deref().unwrap_or_default();
                if self.own_registration(e)
                    && e.seq >= since
                    && !key.is_empty()
                    && !drivers.iter().any(|d| d == key)
                {
                    drivers.push(key.to_string());
                }
            }
        }
        StoredSession {
            session: s.clone(),
            keys: self.session_keys(&s.id),
            drivers,
        }
    }

    fn session_keys(&self, session_id: &str) -> Vec<KeyRow> {
        (self.keys.iter())
            .filter(|k| k.role == KeyRole::Session && k.name == session_id)
            .filter(|k| k.deleted_at.is_none())
            .cloned()
            .collect()
    }

    /// A lease answer for a lone server: the session as stored.
    pub fn claim(&self, session_id: &str, drivers_since: u64) -> Lease {
        let Some(session) = self.sessions.iter().find(|s| s.id == session_id) else {
            return Lease::NoSession;
        };
        let drivers = self.stored(session, drivers_since).drivers;
        Lease::Mine(Box::new(Claimed {
            drivers,
            session: session.clone(),
            keys: self.session_keys(session_id),
            max_seq: (self.by_session.get(session_id))
                .and_then(|v| v.last().copied())
                .unwrap_or(0),
            idempotency: (self.idempotency.values())
                .filter(|r| r.session_id == session_id)
                .cloned()
                .collect(),
        }))
    }

    /// What a restart restores from (same rules as the SQLite store).
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_of(SnapshotScope::Full)
    }

    /// [`MemStore::snapshot`] of one scope.
    pub fn snapshot_of(&self, scope: SnapshotScope) -> Snapshot {
        let lazy = scope == SnapshotScope::Lazy;
        let open: std::collections::HashSet<&str> = self
            .sessions
            .iter()
            .filter(|s| s.state == SessionState::Open)
            .map(|s| s.id.as_str())
            .collect();
        let mut drivers: Vec<(String, String)> = Vec::new();
        for e in self.events.values().filter(|_| !lazy) {
            if self.own_registration(e) && open.contains(e.session_id.as_str()) {
                let pair = (
                    e.session_id.clone(),
                    e.client_key_id.clone().unwrap_or_default(),
                );
                if !drivers.contains(&pair) {
                    drivers.push(pair);
                }
            }
        }
        Snapshot {
            profiles: self.profiles.clone(),
            keys: self
                .keys
                .iter()
                .filter(|k| k.deleted_at.is_none())
                .filter(|k| !(lazy && k.role == KeyRole::Session))
                .cloned()
                .collect(),
            sessions: if lazy {
                Vec::new()
            } else {
                self.sessions.clone()
            },
            stored_sessions: SessionCounts {
                total: self.sessions.len() as u64,
                open: open.len() as u64,
                drivers: self.open_registrations(&open),
            },
            max_event_seq: self.events.keys().next_back().copied().unwrap_or(0),
            drivers,
            events_total: self.events.len() as u64,
            idempotency: self.idempotency.values().cloned().collect(),
            quotas: self.quotas.values().cloned().collect(),
            open_sessions: self.open_counts(),
        }
    }

    /// Open sessions by creator key and profile, in key then profile order.
    fn open_counts(&self) -> Vec<crate::store::OpenCount> {
        let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
        for s in self
            .sessions
            .iter()
            .filter(|s| s.state == SessionState::Open)
        {
            *counts
                .entry((s.client_key_id.clone(), s.profile_id.clone()))
                .or_default() += 1;
        }
        (counts.into_iter())
            .map(
                |((client_key_id, profile_id), open)| crate::store::OpenCount {
                    client_key_id,
                    profile_id,
                    open,
                },
            )
            .collect()
    }
}
