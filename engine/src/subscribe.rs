//! `session.subscribe` (spec 01 §6.3): replay from the store, then live
//! fan-out, with the reference's `lagged` drop, and the opt-in gapless mode
//! (docs/extensions.md) that falls back to the store instead of dropping.
//!
//! Correctness rests on the store's ordering contract: a read observes every
//! write emitted before it. So a subscriber that stops taking live events
//! loses nothing as long as it later reads the store from the last seq it
//! delivered; events published while a read is in flight are buffered and
//! deduplicated by seq when the read lands.
//!
//! Each subscription's state (phase, buffer, replay progress, marker) is
//! its session's ([`SessionStreams`]); the logic here is that part's, and
//! acts on the connection's part (frames, the byte window, the end) through
//! the [`Services`] it is handed.

use proto::jsonrpc::{self, Extension, Parsed, SubscribeParams};
use serde_json::Value;

use crate::conn::{PendingRead, ReplayRead};
use crate::ids::SessionId;
use crate::log::Appended;
use crate::store::{ReadError, ReadResult, RenderedEvent, StoreRead};
use crate::streams::StreamKind;
use crate::ConnId;
use proto::jsonrpc::codes;

/// Rows per replay read (spec 01 §6.3).
const REPLAY_PAGE: usize = 200;

use crate::services::Services;
use crate::streams::SessionStreams;
use crate::streams::{FlowLimits, Live};
pub use crate::streams::{Phase, Subscription, Until};

/// Events this large leave in their live frames as their shared rendering,
/// not copied (`Services::event_frame`).
const SHARE_VIEW_FROM: usize = 4096;

impl SessionStreams {
    /// Session closed: every subscription of it ends cleanly. A gapless
    /// subscription still behind (stalled or reading the store) would lose
    /// the events up to the close, which it was promised: it reads on to
    /// the end of the log first (found by sim seed 135).
    pub(crate) fn end_subscriptions(&mut self, svc: &mut Services, session_id: &SessionId) {
        for conn in self.subscriptions(svc, session_id) {
            let gapless = svc.stream_has(conn, Extension::SubscribeGapless);
            match self.sub_mut(svc, conn) {
                Some(sub) if gapless && sub.phase != Phase::Live => sub.until = Until::LogEnd,
                _ => svc.end_stream(conn),
            }
        }
    }

    pub(crate) fn subscribe(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        params: Parsed<SubscribeParams>,
    ) {
        let (since, asked) = match params {
            Ok(p) => (p.since_event_id, p.extensions),
            Err(msg) => return svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        // Attach first, then replay, so nothing committed meanwhile is lost.
        if let Some(s) = svc.stream_mut(conn) {
            s.ext = s.ext.union(asked);
            s.kind = StreamKind::Subscribe;
            (self.subs).insert(conn, Subscription::new(since.is_some()));
        }
        match since {
            Some(event_id) => svc.read(
                StoreRead::EventSeq {
                    session_id: session_id.to_string(),
                    event_id,
                },
                PendingRead::Replay(ReplayRead::Start { conn }),
            ),
            None => self.caught_up(svc, conn),
        }
    }

    /// The subscription of `conn`, while its stream is open as one (an
    /// ended one stays listed until the engine settles).
    pub(crate) fn sub_mut(&mut self, svc: &Services, conn: ConnId) -> Option<&mut Subscription> {
        let open = matches!(
            svc.streams.get(conn).map(|s| &s.kind),
            Some(StreamKind::Subscribe)
        );
        self.subs.get_mut(&conn).filter(|_| open)
    }

    /// First switch to live delivery: the `subscribe.replay_complete`
    /// marker between replayed and live events, once per stream.
    pub(crate) fn caught_up(&mut self, svc: &mut Services, conn: ConnId) {
        let Some(sub) = self.sub_mut(svc, conn) else {
            return;
        };
        let Some(last_id) = sub.go_live() else {
            return;
        };
        if svc.stream_has(conn, Extension::ReplayComplete) {
            let frame = jsonrpc::replay_complete_frame(last_id.as_deref());
            svc.frame(conn, &frame);
        }
    }

    pub(crate) fn on_replay_start(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        result: Result<ReadResult, ReadError>,
    ) {
        match result {
            // An unknown or foreign id replays from the very first event.
            Ok(ReadResult::EventSeq(seq)) => {
                let seq = seq.map(|s| s + svc.faults.replay_skips_boundary() as u64);
                if let Some(sub) = self.sub_mut(svc, conn) {
                    sub.delivered = seq.unwrap_or(0);
                }
                self.read_page(svc, conn)
            }
            _ => svc.replay_failed(conn),
        }
    }

    /// Reads the next page after the last delivered seq. Everything
    /// published before this read is visible to it, so the buffer restarts.
    pub(crate) fn read_page(&mut self, svc: &mut Services, conn: ConnId) {
        let Some(s) = svc.streams.get(conn) else {
            return;
        };
        let session_id = s.session_id.to_string();
        let Some(sub) = self.sub_mut(svc, conn) else {
            return;
        };
        sub.phase = Phase::Reading { overflow: false };
        sub.buffered.clear();
        let after_seq = sub.delivered;
        let max_bytes = svc.config.max_page_bytes;
        svc.read(
            StoreRead::ReplayPage {
                session_id,
                after_seq,
                limit: REPLAY_PAGE,
                max_bytes,
            },
            PendingRead::Replay(ReplayRead::Page { conn }),
        );
    }

    pub(crate) fn on_replay_page(
        &mut self,
        svc: &mut Services,
        conn: ConnId,
        result: Result<ReadResult, ReadError>,
    ) {
        // Rendered by the store: this loop only moves bytes.
        let (rows, more): (Vec<RenderedEvent>, bool) = match result {
            Ok(ReadResult::Frames { frames, more }) => (frames, more),
            _ => return svc.replay_failed(conn),
        };
        if self.sub_mut(svc, conn).is_none() {
            return;
        }
        for row in rows {
            if svc.over_window(conn) {
                // The rest is re-read once the consumer drains.
                if let Some(sub) = self.sub_mut(svc, conn) {
                    sub.phase = Phase::Stalled;
                    sub.buffered.clear();
                }
                return;
            }
            let delivered = self.sub_mut(svc, conn).map_or(u64::MAX, |s| s.delivered);
            if row.seq <= delivered {
                continue;
            }
            svc.encoded_frame(conn, row.frame);
            if let Some(sub) = self.sub_mut(svc, conn) {
                sub.replayed(row.seq, row.id);
            }
        }
        let overflow = matches!(
            self.sub_mut(svc, conn).map(|s| s.phase),
            Some(Phase::Reading { overflow: true })
        );
        if more || overflow {
            return self.read_page(svc, conn);
        }
        // Caught up: deliver what arrived meanwhile, skipping duplicates.
        let pending = match self.sub_mut(svc, conn) {
            Some(sub) => std::mem::take(&mut sub.buffered),
            None => return,
        };
        self.caught_up(svc, conn);
        for ev in pending {
            self.deliver(svc, conn, &ev);
        }
        if self.sub_mut(svc, conn).is_some_and(|s| s.finished()) {
            svc.end_stream(conn);
        }
    }

    /// Flush progress on a stalled gapless stream: once it is down to half
    /// its window, it catches up from the store.
    pub(crate) fn subscriber_drained(&mut self, svc: &mut Services, conn: ConnId) {
        let low_water = svc.config.subscriber_window_bytes / 2;
        let Some(in_flight) = svc.streams.get(conn).map(|s| s.in_flight_bytes) else {
            return;
        };
        let stalled = self
            .sub_mut(svc, conn)
            .is_some_and(|s| s.phase == Phase::Stalled);
        if stalled && in_flight <= low_water {
            self.read_page(svc, conn);
        }
    }

    /// Ends every `session.subscribe` stream of the session (level-triggered:
    /// also those still replaying).
    pub(crate) fn unsubscribe_all(&mut self, svc: &mut Services, session_id: &SessionId) {
        for conn in self.subscriptions(svc, session_id) {
            svc.end_stream(conn);
        }
    }

    /// The session's streams still open on it as subscriptions.
    fn subscriptions(&self, svc: &Services, session_id: &SessionId) -> Vec<ConnId> {
        svc.streams
            .of_session(self.conns(), session_id)
            .into_iter()
            .filter(|c| {
                matches!(
                    svc.streams.get(*c).map(|s| &s.kind),
                    Some(StreamKind::Subscribe)
                )
            })
            .collect()
    }

    /// Fans a committed event out to the session's live streams.
    pub(crate) fn publish(&mut self, svc: &mut Services, session_id: &str, ev: &Appended) {
        let limits = svc.flow_limits();
        // Taken for the loop: writing a frame may end a stream and start the
        // next pipelined request, whose own publishes must not see it.
        let quiet = std::mem::take(&mut svc.quiet);
        // Rendered once, at the first stream that takes it, and shared by
        // the rest; each stream's frame still leaves in this loop's order.
        let mut shared: Option<std::sync::Arc<[u8]>> = None;
        for conn in svc.streams.of_session(self.conns(), session_id) {
            let sub = self.subs.get_mut(&conn);
            match (svc.streams).publish(conn, sub, ev, quiet.contains(&conn), limits) {
                Live::Frame if ev.json.len() >= SHARE_VIEW_FROM => svc.event_frame(conn, ev),
                Live::Frame => {
                    let frame = shared
                        .get_or_insert_with(|| crate::store::encode_event_frame(&ev.json).into());
                    let frame = frame.clone();
                    svc.encoded_frame(conn, frame);
                }
                live => svc.act_live(conn, ev, live),
            }
        }
        svc.quiet = quiet;
    }

    /// Writes one live event unless already delivered (see
    /// [`crate::streams::Hub::deliver`]).
    fn deliver(&mut self, svc: &mut Services, conn: ConnId, ev: &Appended) {
        let limits = svc.flow_limits();
        let sub = self.sub_mut(svc, conn);
        let live = svc.streams.deliver(conn, sub, ev, limits);
        svc.act_live(conn, ev, live);
    }
}

impl Services {
    /// Whether a gapless stream is over its window.
    pub(crate) fn over_window(&self, conn: ConnId) -> bool {
        (self.streams.get(conn)).is_some_and(|s| s.over_window(self.config.subscriber_window_bytes))
    }

    pub(crate) fn replay_failed(&mut self, conn: ConnId) {
        let frame = jsonrpc::error_frame(
            Some(&Value::Null),
            codes::APPLICATION_ERROR,
            "replay failed",
        );
        self.frame(conn, &frame);
        self.end_stream(conn);
    }

    pub(crate) fn act_live(&mut self, conn: ConnId, ev: &Appended, live: Live) {
        match live {
            Live::Skip => {}
            Live::Frame => self.event_frame(conn, ev),
            Live::Lagged => self.lagged(conn),
        }
    }

    /// One event's frame. A large event (a `provider.request` carrying the
    /// history) leaves as three sends, its shared rendering between the
    /// frame's head and tail, not copied into a frame of its own: a long
    /// session's turns would copy their history once more for each.
    pub(crate) fn event_frame(&mut self, conn: ConnId, ev: &Appended) {
        use proto::jsonrpc::{EVENT_FRAME_HEAD, EVENT_FRAME_TAIL};
        if ev.json.len() < SHARE_VIEW_FROM {
            return self.encoded_frame(conn, crate::store::encode_event_frame(&ev.json));
        }
        let len = EVENT_FRAME_HEAD.len() + ev.json.len() + EVENT_FRAME_TAIL.len();
        let mut head = Vec::with_capacity(EVENT_FRAME_HEAD.len() + 12);
        proto::http::encode_chunk_head(len, &mut head);
        head.extend_from_slice(EVENT_FRAME_HEAD.as_bytes());
        let mut tail = Vec::with_capacity(EVENT_FRAME_TAIL.len() + 2);
        tail.extend_from_slice(EVENT_FRAME_TAIL.as_bytes());
        tail.extend_from_slice(b"\r\n");
        let total = head.len() + ev.json.len() + tail.len();
        self.streams.sent(conn, total, self.now.mono);
        self.send(conn, head);
        self.send(conn, ev.json.clone());
        self.send(conn, tail);
    }

    pub(crate) fn flow_limits(&self) -> FlowLimits {
        FlowLimits {
            lag_limit: self.config.subscriber_lag_limit,
            window_bytes: self.config.subscriber_window_bytes,
        }
    }

    pub(crate) fn lagged(&mut self, conn: ConnId) {
        self.frame(conn, jsonrpc::LAGGED_FRAME);
        self.end_stream(conn);
    }
}
