//! The sessions' idempotency keys (extension `send.idempotent`): each
//! session's keys live in its entry (`idempotency::SessionKeys`); the
//! table keeps only the expiry index over all of them (`KeyExpiry`).

use proto::jsonrpc::SendMessageCall;

use super::{Session, Sessions};
use crate::idempotency::{self, Entry, Sent};
use crate::ids::{KeyId, SessionId};
use crate::model::Catalog;
use crate::services::Services;
use crate::session_core::{TurnLoop, UserMessage};
use crate::store::{IdempotencyRow, StoreWrite};
use crate::ConnId;

impl Sessions {
    /// The stored keys at start, indexed oldest first.
    pub(crate) fn restore_keys(&mut self, catalog: &Catalog, rows: &[IdempotencyRow]) {
        let mut rows: Vec<&IdempotencyRow> = rows.iter().collect();
        rows.sort_by_key(|r| r.created_ms);
        self.adopt_keys(catalog, rows);
    }

    /// Replica mode: a claimed session's stored keys, indexed in the order
    /// given (keys already held stay as they are).
    pub(crate) fn adopt_keys<'r>(
        &mut self,
        catalog: &Catalog,
        rows: impl IntoIterator<Item = &'r IdempotencyRow>,
    ) {
        for r in rows {
            let sid = self
                .known_id(&r.session_id)
                .unwrap_or_else(|| catalog.session_id(&r.session_id));
            let kid = catalog.key_id(&r.client_key_id);
            let keys = &mut self.table.entry(sid.clone()).or_default().idem;
            if keys.insert(&kid, &r.key, Entry::stored(r)) {
                self.keys.push(r.created_ms, sid, kid, r.key.clone());
            }
        }
    }

    /// Runs a `sendMessage` key's checks against its session's keys and
    /// core. `true`: answered (replayed, attached or refused). `false`: it
    /// runs, its key carried on `message`.
    pub(crate) fn idem_send(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        key: String,
        message: &mut UserMessage,
    ) -> bool {
        self.expire_keys(svc);
        let key_text = key.clone();
        let Session { core, idem, .. } = self.table.entry(session_id.clone()).or_default();
        let sent = idem.send(svc, core.as_mut(), conn, session_id, key_id, key, message);
        match sent {
            Sent::Answered => {
                // Nothing was recorded: an entry made just now goes again.
                self.prune(session_id);
                true
            }
            Sent::Run => false,
            Sent::First { created_ms } => {
                (self.keys).push(created_ms, session_id.clone(), key_id.clone(), key_text);
                false
            }
        }
    }

    /// Replays a finished key's answer (`SessionKeys::replay_finished`).
    pub(crate) fn idem_replay_finished(
        &self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: &SendMessageCall,
    ) -> bool {
        self.table.get(session_id.as_str()).is_some_and(|s| {
            s.idem
                .replay_finished(svc, conn, session_id, key_id, params)
        })
    }

    /// The key's request took the gate: durable from the next commit.
    pub(crate) fn idem_started(
        &mut self,
        svc: &mut Services,
        session_id: &SessionId,
        key_id: &KeyId,
        key: &str,
    ) {
        if let Some(s) = self.table.get_mut(session_id.as_str()) {
            s.idem
                .put(svc, session_id, key_id, key, idempotency::mark_started);
        }
    }

    /// The turn `t` answered: `outcome` renders what a retry of its key
    /// gets (nothing happens for a turn without one).
    pub(crate) fn idem_finished(
        &mut self,
        svc: &mut Services,
        session_id: &SessionId,
        t: &TurnLoop,
        outcome: impl FnOnce() -> String,
    ) {
        let Some(idem) = &t.idem else {
            return;
        };
        let text = outcome();
        if let Some(s) = self.table.get_mut(session_id.as_str()) {
            let f = idempotency::set_outcome(text);
            s.idem.put(svc, session_id, &t.key_id, &idem.key, f);
        }
    }

    /// Drops keys past the retention, in memory and in the store.
    fn expire_keys(&mut self, svc: &mut Services) {
        let before_ms = (svc.now.unix.0).saturating_sub(svc.config.idempotency_retention_ms);
        let mut any = false;
        for (created_ms, sid, kid, key) in self.keys.due(before_ms) {
            if let Some(s) = self.table.get_mut(sid.as_str()) {
                any |= s.idem.expire(&kid, &key, created_ms);
            }
            self.prune(&sid);
        }
        if any {
            svc.write(StoreWrite::ExpireIdempotency { before_ms });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::table;
    use super::*;

    #[test]
    fn expiry_forgets_old_keys_only_and_the_entries_they_left() {
        let row = |sid: &str, key: &str, created_ms| IdempotencyRow {
            session_id: sid.into(),
            client_key_id: "k".into(),
            key: key.into(),
            digest: "d".into(),
            created_ms,
            outcome: None,
        };
        let mut t = table(1000);
        let catalog = Catalog::default();
        let rows = [
            row("s", "new", 200),
            row("s", "old", 100),
            row("r", "old", 100),
        ];
        t.restore_keys(&catalog, &rows);
        // A key already held is not adopted again, nor indexed twice.
        t.adopt_keys(&catalog, &[row("s", "new", 300)]);
        let due = t.keys.due(150);
        assert_eq!(due.len(), 2);
        for (created_ms, sid, kid, key) in due {
            let keys = &mut t.table.get_mut(sid.as_str()).unwrap().idem;
            assert!(keys.expire(&kid, &key, created_ms));
            t.prune(&sid);
        }
        // "r" held only its key: its entry went with it. "s" keeps "new",
        // which does not keep it resident.
        assert_eq!(t.known_id("r"), None);
        assert!(!t.table["s"].idem.is_empty() && !t.holds("s"));
        let left: Vec<u64> = t.keys.due(u64::MAX).iter().map(|d| d.0).collect();
        assert_eq!(left, vec![200]);
    }
}
