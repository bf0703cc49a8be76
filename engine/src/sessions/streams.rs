//! The session's part of its NDJSON streams: its fan-out list (the
//! streams its events go to, in connection order) and each
//! `session.subscribe` stream's [`Subscription`] (phase, replay progress,
//! buffer, marker; the logic is `crate::subscribe`'s). The connection's
//! part (bytes in flight, the window, keepalive, what kind of request it
//! answers, the extensions it asked for) stays in the endpoint's stream hub
//! (`crate::streams`), which reports every stream that ends; the engine
//! drops it from its session's part when it next settles. Publication is
//! handed the part (`streams::Fanout`; the type lives beside the hub so
//! that the services need not import the sessions), so the services that append never reach
//! the sessions table.

use super::Sessions;
use crate::conn::ReplayRead;
use crate::ids::SessionId;
use crate::services::Services;
use crate::store::{ReadError, ReadResult};
use crate::streams::{Fanout, Hub, SessionStreams};
use crate::ConnId;

impl Sessions {
    /// A stream opened on `id` (any kind: the hub decides per kind what
    /// it takes).
    pub(crate) fn stream_opened(&mut self, id: SessionId, conn: ConnId) {
        self.table.entry(id).or_default().streams.opened(conn);
    }

    /// `conn`'s stream on `id` ended. `reopened`: the connection already
    /// has its next stream open on the same session, which stays listed.
    pub(crate) fn stream_ended(&mut self, id: &str, conn: ConnId, reopened: bool) {
        if reopened {
            return;
        }
        // One lookup (not `prune`'s second one): every request's stream
        // ends here.
        let Some(s) = self.table.get_mut(id) else {
            return;
        };
        s.streams.ended(conn);
        if s.is_empty() {
            self.table.remove(id);
        }
    }

    /// Every stream the hub saw end leaves its session's part (unless the
    /// connection's next stream is already open on the same session).
    pub(crate) fn unlist_ended(&mut self, hub: &mut Hub) {
        for (conn, id) in hub.take_ended() {
            let reopened = hub.is_open_on(conn, &id);
            self.stream_ended(&id, conn, reopened);
        }
    }

    /// `id`'s part, to publish to (see [`Fanout`]).
    pub(crate) fn streams_mut(&mut self, id: &str) -> Fanout<'_> {
        Some(&mut self.table.get_mut(id)?.streams)
    }

    /// A replay read's answer goes to the subscription of the session its
    /// stream is open on.
    pub(crate) fn replay_read(
        &mut self,
        svc: &mut Services,
        read: ReplayRead,
        result: Result<ReadResult, ReadError>,
    ) {
        let conn = read.conn();
        let id = svc.streams.get(conn).map(|s| s.session_id.clone());
        // A stream gone without its read dropped (its connection closed)
        // still gets the failure frame it always got.
        let mut gone = SessionStreams::default();
        let streams = match id.and_then(|id| self.streams_mut(&id)) {
            Some(s) => s,
            None => &mut gone,
        };
        match read {
            ReplayRead::Start { .. } => streams.on_replay_start(svc, conn, result),
            ReplayRead::Page { .. } => streams.on_replay_page(svc, conn, result),
        }
    }

    /// Flush progress on `conn`: a stalled subscription may read on.
    pub(crate) fn stream_flushed(&mut self, svc: &mut Services, conn: ConnId) {
        let Some(id) = svc.streams.get(conn).map(|s| s.session_id.clone()) else {
            return;
        };
        if let Some(streams) = self.streams_mut(&id) {
            streams.subscriber_drained(svc, conn);
        }
    }

    /// `id`'s fan-out list, in connection order (may name streams that
    /// ended since the engine last settled: the hub filters them).
    pub(crate) fn fanout(&self, id: &str) -> Vec<ConnId> {
        (self.table.get(id))
            .map(|s| s.streams.conns().iter().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Faults;
    use crate::history_cache::HistoryCache;
    use crate::streams::Subscription;

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

    /// A connection's subscription ended and its next stream opened on the
    /// same session before the engine settled: the new stream is no
    /// subscription, and the late end notice leaves it listed.
    #[test]
    fn a_reopened_connection_leaves_its_old_subscription_behind() {
        let mut t = Sessions::new(HistoryCache::default(), Faults::default());
        t.stream_opened(SessionId::new("s"), ConnId(1));
        let part = t.streams_mut("s").unwrap();
        part.subs.insert(ConnId(1), Subscription::new(false));
        t.stream_opened(SessionId::new("s"), ConnId(1));
        assert!(t.streams_mut("s").unwrap().subs.is_empty());
        t.stream_ended("s", ConnId(1), true);
        assert_eq!(t.fanout("s"), [ConnId(1)]);
    }
}
