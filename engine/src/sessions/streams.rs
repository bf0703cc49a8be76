//! The session's part of its NDJSON streams: its fan-out list, the
//! streams its events go to, in connection order. The connection's part
//! (bytes in flight, the window, keepalive, what kind of request it
//! answers) stays in the endpoint's stream hub (`crate::streams`), which
//! reports every stream that ends; the engine drops it from its session's
//! list when it next settles. Publication is handed the list
//! ([`Sessions::fanout`]), so the services that append never reach the
//! sessions table.

use std::collections::BTreeSet;

use super::Sessions;
use crate::ids::SessionId;
use crate::ConnId;

/// Who gets a session's events: every stream opened on it and not yet
/// seen to end (the hub filters out any that ended since).
#[derive(Default)]
pub(crate) struct SessionStreams {
    conns: BTreeSet<ConnId>,
}

impl SessionStreams {
    pub(crate) fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}

impl Sessions {
    /// A stream opened on `id` (any kind: the hub decides per kind what
    /// it takes).
    pub(crate) fn stream_opened(&mut self, id: SessionId, conn: ConnId) {
        self.table.entry(id).or_default().streams.conns.insert(conn);
    }

    /// `conn`'s stream on `id` ended. `reopened`: the connection already
    /// has its next stream open on the same session, which stays listed.
    pub(crate) fn stream_ended(&mut self, id: &str, conn: ConnId, reopened: bool) {
        if reopened {
            return;
        }
        if let Some(s) = self.table.get_mut(id) {
            s.streams.conns.remove(&conn);
        }
        self.prune(id);
    }

    /// `id`'s fan-out list, in connection order (may name streams that
    /// ended since the engine last settled: the hub filters them).
    pub(crate) fn fanout(&self, id: &str) -> Vec<ConnId> {
        (self.table.get(id))
            .map(|s| s.streams.conns.iter().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use crate::history_cache::HistoryCache;

    #[test]
    fn the_list_keeps_connection_order_and_prunes_with_its_last_stream() {
        let mut t = Sessions::new(HistoryCache::default(), Faults::default());
        for c in [3, 1, 2] {
            t.stream_opened(SessionId::new("s"), ConnId(c));
        }
        assert_eq!(t.fanout("s"), [1, 2, 3].map(ConnId));
        t.stream_ended("s", ConnId(2), true);
        assert_eq!(t.fanout("s"), [1, 2, 3].map(ConnId), "reopened stays");
        for c in [1, 2, 3] {
            t.stream_ended("s", ConnId(c), false);
        }
        assert!(t.fanout("s").is_empty());
        assert_eq!(t.known_id("s"), None, "the entry went with its last stream");
    }
}
