//! The read side of the store: the engine's queries ([`StoreRead`]) and
//! the restart snapshot. `provider.request` payloads are expanded to their
//! original text before they leave the store (`history_db.rs`).

use super::*;
use engine::store::page::{collect_page, PageBounds};
use engine::store::{page_rows_read, render_page};

impl<'c> StoreConn<'c> {
    /// Answers one engine query, with every payload as the engine wrote it.
    pub fn read(&mut self, read: &StoreRead) -> Result<ReadResult> {
        // Pages leave the store rendered (the engine only sends them).
        if let Some(bounds) = PageBounds::of(read) {
            if let StoreRead::EventsPage { .. } = read {
                if let Some(body) = self.render_page_direct(read, bounds)? {
                    return Ok(ReadResult::Page(body));
                }
            }
            let (mut rows, mut more) = self.page_rows(read, bounds)?;
            // Rows stored in shared-history form are weighed again once
            // expanded (a no-op for whole payloads).
            self.expand_rows(&mut rows)?;
            more |= engine::store::page::trim_page(&mut rows, bounds);
            return Ok(render_page(read, &rows, more).unwrap_or(ReadResult::Events(rows)));
        }
        let mut result = self.read_stored(read)?;
        if let ReadResult::Events(rows) = &mut result {
            self.expand_rows(rows)?;
        }
        Ok(result)
    }

    /// An events page rendered straight from the statement's columns into
    /// its body: each payload is copied once, and no row is built. `None`
    /// when a row needs more than a copy (a `provider.request` kept in
    /// shared-history form, or text that is not UTF-8): the caller then
    /// renders the page from rows, cut at the same row.
    fn render_page_direct(
        &mut self,
        read: &StoreRead,
        bounds: PageBounds,
    ) -> Result<Option<engine::bytes::Bytes>> {
        Ok(self
            .with_page_events(read, |st| render_rows(st, bounds))?
            .flatten())
    }

    /// A page's rows as stored, read no further than its bounds.
    fn page_rows(&mut self, read: &StoreRead, bounds: PageBounds) -> Result<(Vec<EventRow>, bool)> {
        Ok(self
            .with_page_events(read, |st| collect_page(&mut Cursor(st), bounds))?
            .unwrap_or_default())
    }

    /// [`StoreConn::with_events`] over the plain read of a page read
    /// (`None` for any other read).
    fn with_page_events<T>(
        &mut self,
        read: &StoreRead,
        f: impl FnOnce(&mut Statement<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let Some(StoreRead::Events {
            session_id,
            after_seq,
            limit,
        }) = page_rows_read(read)
        else {
            return Ok(None);
        };
        self.with_events(&session_id, after_seq, limit, f).map(Some)
    }

    /// Runs `f` over `SelectEvents` bound to a session, a seq to read after
    /// and a row limit, then resets the statement.
    fn with_events<T>(
        &mut self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
        f: impl FnOnce(&mut Statement<'_>) -> Result<T>,
    ) -> Result<T> {
        let after = seq_to_i64(after_seq)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let st = self.stmt(Q::SelectEvents)?;
        st.bind((1, session_id))?;
        st.bind((2, after))?;
        st.bind((3, limit))?;
        let r = f(st);
        let _ = st.reset();
        r
    }

    /// Answers one engine query with the rows as stored.
    pub(super) fn read_stored(&mut self, read: &StoreRead) -> Result<ReadResult> {
        match read {
            // Answered by the store thread (`serve_store_jobs`), which
            // times commits; a direct read has no figures.
            StoreRead::EventsPage { .. }
            | StoreRead::ReplayPage { .. }
            | StoreRead::ExportPage { .. } => {
                let rows = match PageBounds::of(read) {
                    Some(bounds) => self.page_rows(read, bounds)?.0,
                    None => Vec::new(),
                };
                Ok(ReadResult::Events(rows))
            }
            StoreRead::Runtime => Ok(ReadResult::Runtime(Default::default())),
            StoreRead::Lineage {
                session_id,
                children,
            } => self.lineage(session_id, *children),
            StoreRead::ClaimLease { .. } => Err(StoreError::Sqlite(
                "session leases need the PostgreSQL store (replica mode)".into(),
            )),
            StoreRead::LoadSession {
                session_id,
                drivers_since,
            } => self
                .in_read(|c| c.stored_session(session_id, *drivers_since))
                .map(|s| ReadResult::Session(s.map(Box::new))),
            StoreRead::SessionsOfClient {
                client_id,
                drivers_since,
            } => self
                .in_read(|c| c.sessions_of_client(client_id, *drivers_since))
                .map(ReadResult::Sessions),
            StoreRead::SessionList {
                after,
                limit,
                state,
            } => self.session_list(*after, *limit, *state),
            StoreRead::Usage {
                scope,
                since_ms,
                until_ms,
                by_turn,
            } => self.usage_sums(scope, (*since_ms, *until_ms), *by_turn),
            StoreRead::Events {
                session_id,
                after_seq,
                limit,
            } => self
                .with_events(session_id, *after_seq, *limit, collect_events)
                .map(ReadResult::Events),
            StoreRead::EventSeq {
                session_id,
                event_id,
            } => {
                let seq = self.lookup_seq(Q::SelectEventSeq, event_id, session_id)?;
                Ok(ReadResult::EventSeq(seq))
            }
            StoreRead::LatestOfType {
                session_id,
                event_type,
                before_seq,
                limit,
            } => {
                // `rowid <= before - 1`; no bound = every rowid.
                let at_most =
                    before_seq.map_or(i64::MAX, |b| i64::try_from(b).map_or(i64::MAX, |b| b - 1));
                let limit = i64::try_from(*limit).unwrap_or(i64::MAX);
                let st = self.stmt(Q::LatestOfType)?;
                st.bind((1, session_id.as_str()))?;
                st.bind((2, event_type.as_str()))?;
                st.bind((3, at_most))?;
                st.bind((4, limit))?;
                collect_events(st).map(ReadResult::Events)
            }
            StoreRead::EventById {
                session_id,
                event_id,
            } => {
                let st = self.stmt(Q::SelectEventById)?;
                st.bind((1, event_id.as_str()))?;
                st.bind((2, session_id.as_str()))?;
                collect_events(st).map(ReadResult::Events)
            }
            StoreRead::OfTypesFrom {
                session_id,
                event_types,
                from_seq,
            } => {
                // One index range per type (`idx_session_events_session_type`
                // ends in the implicit rowid), merged by seq; one read
                // transaction so that the ranges see the same state.
                let from = seq_to_i64(*from_seq)?;
                self.run(Q::BeginRead)?;
                let r = self.of_types_from(session_id, event_types, from);
                let _ = self.run(Q::Commit);
                r.map(ReadResult::Events)
            }
            StoreRead::EventsAt { session_id, seqs } => {
                let mut rows = Vec::with_capacity(seqs.len());
                for seq in seqs {
                    let seq = seq_to_i64(*seq)?;
                    let st = self.stmt(Q::SelectEventAt)?;
                    st.bind((1, seq))?;
                    st.bind((2, session_id.as_str()))?;
                    let r = (|| -> Result<()> {
                        if st.next()? == State::Row {
                            rows.push(read_event(st)?);
                        }
                        Ok(())
                    })();
                    let _ = st.reset();
                    r?;
                }
                Ok(ReadResult::Events(rows))
            }
        }
    }

    /// `f` inside one read transaction (its queries see one state).
    fn in_read<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.run(Q::BeginRead)?;
        let r = f(self);
        let _ = self.run(Q::Commit);
        r
    }

    /// One session with its active session keys and (when open) the
    /// client keys of its registrations from `drivers_since` on.
    fn stored_session(&mut self, id: &str, drivers_since: u64) -> Result<Option<StoredSession>> {
        let mut session = None;
        self.each_bound_row(Q::SessionById, &[id], |st| {
            session = Some(read_session(st)?);
            Ok(())
        })?;
        let Some(session) = session else {
            return Ok(None);
        };
        let mut keys = Vec::new();
        self.each_bound_row(Q::KeysOfSession, &[id], |st| {
            keys.push(read_key(st)?);
            Ok(())
        })?;
        let mut drivers: Vec<String> = Vec::new();
        if session.state == SessionState::Open {
            let st = self.stmt(Q::DriversOfSession)?;
            st.bind((1, id))?;
            st.bind((2, seq_to_i64(drivers_since)?))?;
            let r = (|| -> Result<()> {
                while st.next()? == State::Row {
                    let key = st.text(0)?;
                    if !drivers.contains(&key) {
                        drivers.push(key);
                    }
                }
                Ok(())
            })();
            let _ = st.reset();
            r?;
        }
        Ok(Some(StoredSession {
            session,
            keys,
            drivers,
        }))
    }

    fn sessions_of_client(&mut self, client_id: &str, since: u64) -> Result<Vec<StoredSession>> {
        let mut ids = Vec::new();
        self.each_bound_row(Q::SessionsOfClient, &[client_id], |st| {
            ids.push(st.text(0)?);
            Ok(())
        })?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(self.stored_session(&id, since)?);
        }
        Ok(out)
    }

    fn session_list(
        &mut self,
        after: u64,
        limit: usize,
        state: Option<SessionState>,
    ) -> Result<ReadResult> {
        let st = self.stmt(Q::SessionList)?;
        st.bind((1, seq_to_i64(after)?))?;
        st.bind((2, state.map(|s| s.as_str())))?;
        st.bind((
            3,
            i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1),
        ))?;
        let mut rows = Vec::new();
        let r = (|| -> Result<()> {
            while st.next()? == State::Row {
                let pos = st.read::<i64, _>(11)?.max(0) as u64;
                rows.push((pos, read_session(st)?));
            }
            Ok(())
        })();
        let _ = st.reset();
        r?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        Ok(ReadResult::SessionList { rows, more })
    }

    /// [`StoreConn::each_row`] of a query bound to text parameters.
    pub(super) fn each_bound_row(
        &mut self,
        q: Q,
        params: &[&str],
        mut f: impl FnMut(&Statement<'c>) -> Result<()>,
    ) -> Result<()> {
        let st = self.stmt(q)?;
        let r = (|| {
            for (i, p) in params.iter().enumerate() {
                st.bind((i + 1, *p))?;
            }
            while st.next()? == State::Row {
                f(st)?;
            }
            Ok(())
        })();
        let _ = st.reset();
        r
    }

    fn lookup_seq(&mut self, q: Q, event_id: &str, session_id: &str) -> Result<Option<u64>> {
        let st = self.stmt(q)?;
        st.bind((1, event_id))?;
        st.bind((2, session_id))?;
        let r = (|| {
            if st.next()? == State::Row {
                Ok(Some(st.read::<i64, _>(0)? as u64))
            } else {
                Ok(None)
            }
        })();
        let _ = st.reset();
        r
    }

    fn of_types_from(
        &mut self,
        session_id: &str,
        event_types: &[EventType],
        from: i64,
    ) -> Result<Vec<EventRow>> {
        let mut rows = Vec::new();
        let mut seen: Vec<EventType> = Vec::with_capacity(event_types.len());
        for &event_type in event_types {
            if seen.contains(&event_type) {
                continue;
            }
            seen.push(event_type);
            let st = self.stmt(Q::OfTypeFrom)?;
            st.bind((1, session_id))?;
            st.bind((2, event_type.as_str()))?;
            st.bind((3, from))?;
            rows.append(&mut collect_events(st)?);
        }
        // Each range is ascending and seqs are unique: a stable sort of
        // the concatenation is the merge.
        rows.sort_by_key(|r| r.seq);
        Ok(rows)
    }

    /// Counts for the periodic activity summary (spec 04 §5 step 12).
    pub fn activity(&mut self) -> Result<Activity> {
        let mut a = Activity::default();
        self.each_row(Q::Activity, |st| {
            let n = |i: usize| st.read::<i64, _>(i).map(|v| v.max(0) as u64);
            a = Activity {
                profiles: n(0)?,
                client_keys: n(1)?,
                open_sessions: n(2)?,
                total_sessions: n(3)?,
                events: n(4)?,
            };
            Ok(())
        })?;
        Ok(a)
    }

    /// Everything the engine restores from at start (see [`Snapshot`]).
    pub fn load_snapshot(&mut self) -> Result<Snapshot> {
        self.load_snapshot_of(SnapshotScope::Full)
    }

    /// [`StoreConn::load_snapshot`] of one scope.
    pub fn load_snapshot_of(&mut self, scope: SnapshotScope) -> Result<Snapshot> {
        self.in_read(|c| c.snapshot_inner(scope))
    }

    fn snapshot_inner(&mut self, scope: SnapshotScope) -> Result<Snapshot> {
        let full = scope == SnapshotScope::Full;
        let mut snap = Snapshot::default();
        self.each_row(Q::AllProfiles, |st| {
            snap.profiles.push(read_profile(st)?);
            Ok(())
        })?;
        let keys = if full {
            Q::ActiveKeys
        } else {
            Q::ActiveUserKeys
        };
        self.each_row(keys, |st| {
            snap.keys.push(read_key(st)?);
            Ok(())
        })?;
        if full {
            self.each_row(Q::AllSessions, |st| {
                snap.sessions.push(read_session(st)?);
                Ok(())
            })?;
        }
        self.each_row(Q::SessionCounts, |st| {
            snap.stored_sessions.total = st.read::<i64, _>(0)?.max(0) as u64;
            snap.stored_sessions.open = st.read::<i64, _>(1)?.max(0) as u64;
            Ok(())
        })?;
        self.each_row(Q::OpenRegistrations, |st| {
            snap.stored_sessions.drivers = st.read::<i64, _>(0)?.max(0) as u64;
            Ok(())
        })?;
        self.each_row(Q::MaxSeq, |st| {
            snap.max_event_seq = st.read::<i64, _>(0)?.max(0) as u64;
            Ok(())
        })?;
        let mut seen = HashSet::new();
        if full {
            self.each_row(Q::Drivers, |st| {
                let pair = (st.text(0)?, st.text(1)?);
                if seen.insert(pair.clone()) {
                    snap.drivers.push(pair);
                }
                Ok(())
            })?;
        }
        self.each_row(Q::EventCount, |st| {
            snap.events_total = st.read::<i64, _>(0)?.max(0) as u64;
            Ok(())
        })?;
        self.each_row(Q::AllIdempotency, |st| {
            snap.idempotency.push(engine::store::IdempotencyRow {
                session_id: st.text(0)?,
                client_key_id: st.text(1)?,
                key: st.text(2)?,
                digest: st.text(3)?,
                created_ms: st.read::<i64, _>(4)?.max(0) as u64,
                outcome: st.opt_text(5)?,
            });
            Ok(())
        })?;
        self.each_row(Q::AllQuotas, |st| {
            snap.quotas.extend(super::rows::read_quota(st)?);
            Ok(())
        })?;
        self.each_row(Q::OpenByCreator, |st| {
            snap.open_sessions.push(super::rows::read_open_count(st)?);
            Ok(())
        })?;
        Ok(snap)
    }

    fn each_row(&mut self, q: Q, mut f: impl FnMut(&Statement<'c>) -> Result<()>) -> Result<()> {
        let st = self.stmt(q)?;
        let r = (|| {
            while st.next()? == State::Row {
                f(st)?;
            }
            Ok(())
        })();
        let _ = st.reset();
        r
    }
}

/// A page read's SQLite statement as a row cursor: a row's columns are
/// read only when the page takes it.
struct Cursor<'s, 'c>(&'s mut Statement<'c>);

impl engine::store::page::RowCursor for Cursor<'_, '_> {
    type Error = StoreError;
    fn advance(&mut self) -> Result<bool> {
        Ok(self.0.next()? == State::Row)
    }
    fn row(&mut self) -> Result<EventRow> {
        read_event(self.0)
    }
}

/// The body of an events page from a bound `SelectEvents` statement, cut as
/// [`collect_page`] cuts (see [`StoreConn::render_page_direct`]).
fn render_rows(st: &mut Statement<'_>, bounds: PageBounds) -> Result<Option<engine::bytes::Bytes>> {
    use engine::store::page::weigh;
    use proto::wire::page::{push_page_close, PAGE_OPEN};
    if st.column_count() < 7 {
        return Ok(None);
    }
    // A kept buffer whose page was written (`page_pool.rs`).
    let mut out = super::page_pool::take(bounds.max_bytes.min(64 * 1024));
    out.push_str(PAGE_OPEN);
    let (mut taken, mut bytes, mut last_seq, mut more) = (0usize, 0usize, 0i64, false);
    while st.next()? == State::Row {
        if taken >= bounds.limit || (taken > 0 && bytes >= bounds.max_bytes) {
            more = true;
            break;
        }
        let seq = st.read::<i64, _>(0)?;
        let st = &*st;
        let text = |i| column_text(st, i).and_then(|b| std::str::from_utf8(b).ok());
        let (Some(id), Some(session_id), Some(event_type), Some(payload), Some(created_at)) =
            (text(1), text(2), text(4), text(5), text(6))
        else {
            return Ok(None);
        };
        let client_key_id = match column_text(st, 3) {
            None => None,
            Some(b) => match std::str::from_utf8(b) {
                Ok(k) => Some(k),
                Err(_) => return Ok(None),
            },
        };
        if event_type == history::EVENT_TYPE && payload.starts_with(history::HEADER) {
            return Ok(None);
        }
        if taken > 0 {
            out.push(',');
        }
        proto::wire::push_event_view(
            &mut out,
            id,
            session_id,
            client_key_id,
            event_type,
            payload,
            created_at,
        );
        bytes = bytes.saturating_add(weigh(id, session_id, event_type, payload));
        taken += 1;
        last_seq = seq;
    }
    let cursor = more.then(|| last_seq.to_string());
    push_page_close(&mut out, cursor.as_deref());
    Ok(Some(super::page_pool::give(out)))
}

/// Runs a bound event query to completion, collecting its rows, and resets
/// it.
fn collect_events(st: &mut Statement<'_>) -> Result<Vec<EventRow>> {
    let mut rows = Vec::new();
    let r = (|| {
        while st.next()? == State::Row {
            rows.push(read_event(st)?);
        }
        Ok(())
    })();
    let _ = st.reset();
    r.map(|()| rows)
}
