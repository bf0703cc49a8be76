//! Usage accounting against SQLite: the rows of `bae_usage` (one per
//! successful provider attempt, written in the transaction of its
//! `provider.response`) and their sums (`engine::usage`); and the quotas
//! (`bae_quotas`) whose budgets read them.

use engine::store::{UsageRow, UsageScope};
use engine::usage::Sum;
use proto::provider::Tokens;

use super::*;

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl<'c> StoreConn<'c> {
    pub(super) fn insert_usage(&mut self, r: &UsageRow) -> Result<()> {
        let st = self.stmt(Q::InsertUsage)?;
        st.bind((1, to_i64(r.event_seq)))?;
        st.bind((2, r.session_id.as_str()))?;
        st.bind((3, to_i64(r.turn_seq)))?;
        st.bind((4, r.client_key_id.as_str()))?;
        st.bind((5, r.profile_id.as_str()))?;
        st.bind((6, r.provider.as_str()))?;
        st.bind((7, r.model.as_str()))?;
        st.bind((8, i64::from(r.compaction)))?;
        st.bind((9, to_i64(r.created_ms)))?;
        let t = &r.tokens;
        st.bind((10, to_i64(t.input)))?;
        st.bind((11, to_i64(t.output)))?;
        st.bind((12, to_i64(t.cache_write)))?;
        st.bind((13, to_i64(t.cache_read)))?;
        st.bind((14, r.turn_event_id.as_str()))?;
        finish(st)
    }

    /// A quota, inserted or replaced (`bae_quotas`, beside the usage rows
    /// its budgets are read from).
    pub(super) fn put_quota(&mut self, r: &engine::store::QuotaRow) -> Result<()> {
        let st = self.stmt(Q::PutQuota)?;
        st.bind((1, r.scope.kind()))?;
        st.bind((2, r.scope.id()))?;
        st.bind((3, r.quota.as_str()))?;
        st.bind((4, r.updated_at.as_str()))?;
        finish(st)
    }

    /// [`engine::store::StoreRead::Usage`].
    pub(super) fn usage_sums(
        &mut self,
        scope: &UsageScope,
        window: (Option<u64>, Option<u64>),
        by_turn: bool,
    ) -> Result<ReadResult> {
        let (q, id) = match scope {
            UsageScope::Session(id) if by_turn => (Q::UsageSessionTurns, id),
            UsageScope::Session(id) => (Q::UsageSession, id),
            UsageScope::ClientKey(id) => (Q::UsageKey, id),
            UsageScope::Profile(id) => (Q::UsageProfile, id),
        };
        let st = self.stmt(q)?;
        st.bind((1, id.as_str()))?;
        st.bind((2, to_i64(window.0.unwrap_or(0))))?;
        st.bind((3, window.1.map_or(i64::MAX, to_i64)))?;
        let mut sums = Vec::new();
        let r = (|| -> Result<()> {
            while st.next()? == State::Row {
                let n = |i: usize| st.read::<i64, _>(i).map(to_u64);
                sums.push(Sum {
                    provider: st.read::<String, _>(0)?,
                    turn_seq: by_turn.then(|| n(1)).transpose()?,
                    turn_event_id: by_turn.then(|| st.read::<String, _>(7)).transpose()?,
                    calls: n(2)?,
                    tokens: Tokens {
                        input: n(3)?,
                        output: n(4)?,
                        cache_write: n(5)?,
                        cache_read: n(6)?,
                    },
                });
            }
            Ok(())
        })();
        let _ = st.reset();
        r?;
        Ok(ReadResult::Usage(sums))
    }
}
