//! The write side of the store: one engine batch ([`StoreWrite`]s) as one
//! SQLite transaction. Kept apart from the connection setup (`mod.rs`) and
//! the reads (`read.rs`); the usage, quota and lineage rows are written by
//! their own files (`usage_db.rs`, `lineage.rs`), and `provider.request`
//! payloads take their stored form in `history_db.rs`.

use super::*;

impl<'c> StoreConn<'c> {
    /// Applies `batch` in order inside one `BEGIN IMMEDIATE … COMMIT`
    /// transaction. On any error the transaction is rolled back and nothing
    /// of the batch is stored.
    pub fn commit(&mut self, batch: &[StoreWrite]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.run(Q::Begin)?;
        self.touched.clear();
        let mut outcome = Ok(());
        for w in batch {
            if let Err(e) = self.apply(w) {
                outcome = Err(e);
                break;
            }
        }
        if outcome.is_ok() {
            outcome = self.run(Q::Commit);
        }
        if outcome.is_err() {
            let _ = self.run(Q::Rollback);
            for session in std::mem::take(&mut self.touched) {
                self.history.forget(&session);
            }
        }
        outcome
    }

    fn apply(&mut self, w: &StoreWrite) -> Result<()> {
        match w {
            StoreWrite::InsertProfile(p) => self.write_profile(Q::InsertProfile, p),
            StoreWrite::UpdateProfile(p) => self.write_profile(Q::UpdateProfile, p),
            StoreWrite::InsertKey(k) => {
                let st = self.stmt(Q::InsertKey)?;
                st.bind((1, k.id.as_str()))?;
                st.bind((2, k.name.as_str()))?;
                st.bind((3, k.key_hash.as_str()))?;
                st.bind((4, k.key_prefix.as_str()))?;
                st.bind((5, k.role.as_str()))?;
                st.bind((6, k.profile_id.as_deref()))?;
                st.bind((7, k.client_id.as_deref()))?;
                st.bind((8, k.created_at.as_str()))?;
                st.bind((9, k.last_used_at.as_deref()))?;
                st.bind((10, k.deleted_at.as_deref()))?;
                finish(st)
            }
            StoreWrite::RevokeKey { id, at } => self.two_text(Q::RevokeKey, id, at),
            StoreWrite::RevokeSessionKeysOf { client_id, at } => {
                self.two_text(Q::RevokeSessionKeysOf, client_id, at)
            }
            // Replica mode runs on PostgreSQL only.
            StoreWrite::LeaseNewSession { .. } => Ok(()),
            StoreWrite::SetKeyHash { id, key_hash } => self.two_text(Q::SetKeyHash, id, key_hash),
            StoreWrite::TouchKey { id, at } => self.two_text(Q::TouchKey, id, at),
            StoreWrite::InsertSession(s) => {
                let st = self.stmt(Q::InsertSession)?;
                st.bind((1, s.id.as_str()))?;
                st.bind((2, s.client_key_id.as_str()))?;
                st.bind((3, s.profile_id.as_str()))?;
                st.bind((4, s.state.as_str()))?;
                st.bind((5, s.client_version.as_deref()))?;
                st.bind((6, s.client_tools.as_str()))?;
                st.bind((7, s.created_at.as_str()))?;
                st.bind((8, s.closed_at.as_deref()))?;
                st.bind((9, s.sandbox_tools.as_str()))?;
                st.bind((10, s.subagent_tools.as_str()))?;
                st.bind((11, s.compaction.as_deref()))?;
                finish(st)
            }
            StoreWrite::SetSessionState {
                id,
                state,
                closed_at,
            } => {
                // A session that is no longer open gets no more requests.
                if *state != SessionState::Open {
                    self.history.forget(id);
                }
                let st = self.stmt(Q::SetSessionState)?;
                st.bind((1, id.as_str()))?;
                st.bind((2, state.as_str()))?;
                st.bind((3, closed_at.as_deref()))?;
                finish(st)
            }
            StoreWrite::SetSessionTools {
                id,
                client_tools,
                sandbox_tools,
                subagent_tools,
            } => {
                let st = self.stmt(Q::SetSessionTools)?;
                st.bind((1, id.as_str()))?;
                st.bind((2, client_tools.as_str()))?;
                st.bind((3, sandbox_tools.as_str()))?;
                st.bind((4, subagent_tools.as_str()))?;
                finish(st)
            }
            StoreWrite::InsertEvent(e) => {
                let seq = seq_to_i64(e.seq)?;
                let payload = self.stored_payload(e)?;
                let st = self.stmt(Q::InsertEvent)?;
                st.bind((1, seq))?;
                st.bind((2, e.id.as_str()))?;
                st.bind((3, e.session_id.as_str()))?;
                st.bind((4, e.client_key_id.as_deref()))?;
                st.bind((5, e.event_type.as_str()))?;
                st.bind((6, payload.as_ref()))?;
                st.bind((7, e.created_at.as_str()))?;
                finish(st)
            }
            StoreWrite::PutIdempotency(r) => {
                let created = i64::try_from(r.created_ms).unwrap_or(i64::MAX);
                let st = self.stmt(Q::PutIdempotency)?;
                st.bind((1, r.session_id.as_str()))?;
                st.bind((2, r.client_key_id.as_str()))?;
                st.bind((3, r.key.as_str()))?;
                st.bind((4, r.digest.as_str()))?;
                st.bind((5, created))?;
                st.bind((6, r.outcome.as_deref()))?;
                finish(st)
            }
            StoreWrite::ExpireIdempotency { before_ms } => {
                let before = i64::try_from(*before_ms).unwrap_or(i64::MAX);
                let st = self.stmt(Q::ExpireIdempotency)?;
                st.bind((1, before))?;
                finish(st)
            }
            StoreWrite::InsertLineage(row) => self.insert_lineage(row),
            StoreWrite::InsertUsage(r) => self.insert_usage(r),
            StoreWrite::PutQuota(r) => self.put_quota(r),
            StoreWrite::DeleteQuota(scope) => {
                self.two_text(Q::DeleteQuota, scope.kind(), scope.id())
            }
        }
    }

    fn write_profile(&mut self, q: Q, p: &ProfileRow) -> Result<()> {
        let v = ProfileTexts::of(p);
        let st = self.stmt(q)?;
        st.bind((1, p.id.as_str()))?;
        st.bind((2, p.name.as_str()))?;
        st.bind((3, v.primary.as_str()))?;
        st.bind((4, v.fallbacks.as_str()))?;
        st.bind((5, v.mcp.as_str()))?;
        st.bind((6, v.tools.as_str()))?;
        st.bind((7, v.sandboxes.as_str()))?;
        st.bind((8, p.created_at.as_str()))?;
        st.bind((9, p.updated_at.as_str()))?;
        st.bind((10, p.deleted_at.as_deref()))?;
        finish(st)
    }

    fn two_text(&mut self, q: Q, a: &str, b: &str) -> Result<()> {
        let st = self.stmt(q)?;
        st.bind((1, a))?;
        st.bind((2, b))?;
        finish(st)
    }
}
