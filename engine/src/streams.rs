//! The stream hub: every open NDJSON response, by connection, with the
//! per-stream flow accounting the fan-out decisions read (frames in
//! flight, the gapless byte window, keepalive timing). Which streams a
//! session's events go to is the session's (its fan-out list,
//! `sessions/streams.rs`): publication is handed that list and the hub
//! only filters it to the streams still open on that session. What a
//! stream receives is decided by `subscribe.rs` (subscriptions) and the
//! turn gate (turn streams), which the engine routes through it.

use std::collections::{BTreeMap, VecDeque};

use proto::jsonrpc::{Extension, Extensions};
use serde_json::Value;

use crate::ids::SessionId;
use crate::{ConnId, MonoMs};

mod deltas;
mod session;
pub use deltas::{DeltaBatch, DeltaCursor, DeltaLimits};
pub(crate) use session::{Fanout, SessionStreams};

/// An appended event as the streams carry it, with its EventView JSON
/// rendered once.
#[derive(Debug, Clone)]
pub struct Appended {
    pub seq: u64,
    pub id: String,
    /// The EventView JSON with NDJSON line separators already escaped
    /// (every use of it goes into a frame), shared by the live frames and
    /// the turn's `result.events` instead of copied into each.
    pub json: EventJson,
}

/// An event's rendering, shared. An `Arc<String>` rather than an
/// `Arc<str>`: the text is rendered into a `String`, and moving that into
/// an `Arc<str>` copies it (a `provider.request` view carries the whole
/// history: one more buffer of its size per turn).
pub type EventJson = std::sync::Arc<String>;

/// An open NDJSON response on a connection.
pub struct Stream {
    pub session_id: SessionId,
    /// The request id (`None` = notification: no terminal frame).
    pub id: Option<Value>,
    pub kind: StreamKind,
    /// Frames emitted but not yet flushed (byte size; whether a delta):
    /// the consumer's lag.
    pub in_flight: VecDeque<(usize, bool)>,
    /// Delta frames among `in_flight`: they count toward the byte window,
    /// never toward the lag limit in frames (a burst of deltas must not
    /// get a subscriber dropped).
    pub deltas_in_flight: usize,
    /// The streaming attempt whose deltas this stream follows (extension
    /// `turn.deltas`).
    pub deltas: Option<DeltaCursor>,
    /// Bytes of the oldest in-flight frame already flushed.
    pub flushed_partial: usize,
    /// Bytes of in-flight frames not yet flushed (the gapless window).
    pub in_flight_bytes: usize,
    /// Bytes emitted on the connection before this stream's first frame
    /// (earlier responses, the head) and not yet flushed: flush reports
    /// cover them first, so they never count as this consumer's progress.
    pub unflushed_before: usize,
    /// When the last bytes went out (keepalive timing).
    pub last_write: MonoMs,
    /// Extensions the stream's client opted into (docs/extensions.md).
    pub ext: Extensions,
}

pub enum StreamKind {
    /// A single-answer method: nothing is forwarded.
    Single,
    /// `session.subscribe` (its [`Subscription`] is the session's, in its
    /// `SessionStreams`).
    Subscribe,
    /// A gated request waiting in the FIFO: silent until admitted.
    Queued,
    /// The gate holder's stream: every event except its own input.
    Turn,
}

/// A subscriber's position relative to the live log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Live events are written as they are published.
    Live,
    /// A store read is in flight; live events published meanwhile wait in
    /// `buffered`. `overflow`: the buffer outgrew the lag limit and was
    /// dropped (gapless only), so the store must be read once more.
    Reading { overflow: bool },
    /// Gapless only: over its byte window. Nothing is written or buffered
    /// until the consumer drains; then the store is read from `delivered`.
    Stalled,
}

pub struct Subscription {
    pub phase: Phase,
    pub buffered: Vec<Appended>,
    /// Highest seq delivered so far.
    pub delivered: u64,
    pub marker: Marker,
    pub until: Until,
}

/// The `subscribe.replay_complete` marker, sent (when asked for) once, at
/// the first switch to live delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Not yet live: the id of the last event replayed so far.
    Due { last_id: Option<String> },
    /// Live once already (the marker went out, or was not asked for).
    Done,
}

/// What ends a subscription, besides its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The session's close, or a fault (`lagged`, a failed replay).
    Close,
    /// Gapless only: the session closed while this stream was behind. It
    /// reads the rest of the log (the close included) and then ends.
    LogEnd,
}

impl Subscription {
    /// A new subscription: replaying first when it asked to start after
    /// an event, live at once otherwise.
    pub fn new(replay: bool) -> Self {
        Subscription {
            phase: match replay {
                true => Phase::Reading { overflow: false },
                false => Phase::Live,
            },
            buffered: Vec::new(),
            delivered: 0,
            marker: Marker::Due { last_id: None },
            until: Until::Close,
        }
    }

    /// Switches to live delivery. The first time, returns the marker's
    /// `last_id` (the marker is due); `None` after.
    pub fn go_live(&mut self) -> Option<Option<String>> {
        self.phase = Phase::Live;
        match std::mem::replace(&mut self.marker, Marker::Done) {
            Marker::Due { last_id } => Some(last_id),
            Marker::Done => None,
        }
    }

    /// A replayed event went out.
    pub fn replayed(&mut self, seq: u64, id: String) {
        self.delivered = seq;
        if let Marker::Due { last_id } = &mut self.marker {
            *last_id = Some(id);
        }
    }

    /// Whether the stream has delivered all it was to (caught up live
    /// after reading on past its session's close).
    pub fn finished(&self) -> bool {
        self.until == Until::LogEnd && self.phase == Phase::Live
    }
}

/// The flow bounds of live delivery (`BAE_SUBSCRIBER_LAG_LIMIT`,
/// `BAE_SUBSCRIBER_WINDOW_BYTES`).
#[derive(Debug, Clone, Copy)]
pub struct FlowLimits {
    /// Unflushed frames (plain streams) or buffered events (a replaying
    /// subscriber) before a consumer gets `lagged`.
    pub lag_limit: usize,
    /// Unflushed bytes of a gapless subscriber before it stalls.
    pub window_bytes: usize,
}

/// What to do with a live event on one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// Nothing is written now (not this stream's, already delivered,
    /// buffered behind a replay, or stalled until the consumer drains).
    Skip,
    /// Write the event frame.
    Frame,
    /// The consumer is too far behind: the `lagged` error, then the end.
    Lagged,
}

impl Stream {
    /// A gapless stream with `window_bytes` or more unflushed: it stops
    /// taking live events until it drains.
    pub fn over_window(&self, window_bytes: usize) -> bool {
        self.ext.has(Extension::SubscribeGapless) && self.in_flight_bytes >= window_bytes
    }
}

/// Every open stream.
#[derive(Default)]
pub struct Hub {
    streams: BTreeMap<ConnId, Stream>,
    /// Streams ended since the engine last looked, with their sessions:
    /// the sessions' fan-out lists drop them then (until that, the lists
    /// may name a stream that ended, which [`Hub::of_session`] filters).
    ended: Vec<(ConnId, SessionId)>,
    /// Turn streams ended since the engine last looked: their turns stop
    /// listing them once the input that ended them is handled.
    ended_turns: Vec<ConnId>,
}

impl Hub {
    /// Opens a stream on `conn`; `unflushed_before` is what the connection
    /// still has to flush of earlier bytes.
    pub fn open(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        unflushed_before: usize,
        now: MonoMs,
    ) {
        self.streams.insert(
            conn,
            Stream {
                session_id: session_id.clone(),
                id: None,
                kind: StreamKind::Single,
                in_flight: VecDeque::new(),
                deltas_in_flight: 0,
                deltas: None,
                flushed_partial: 0,
                in_flight_bytes: 0,
                unflushed_before,
                last_write: now,
                ext: Extensions::default(),
            },
        );
    }

    /// Removes the stream on `conn` (its request is answered or its
    /// connection is gone).
    pub fn end(&mut self, conn: ConnId) -> Option<Stream> {
        let stream = self.streams.remove(&conn)?;
        if matches!(stream.kind, StreamKind::Turn) {
            self.ended_turns.push(conn);
        }
        self.ended.push((conn, stream.session_id.clone()));
        Some(stream)
    }

    /// The streams ended since the last call, each with its session.
    pub fn take_ended(&mut self) -> Vec<(ConnId, SessionId)> {
        std::mem::take(&mut self.ended)
    }

    pub fn has_ended_turns(&self) -> bool {
        !self.ended_turns.is_empty()
    }

    /// The turn streams ended since the last call.
    pub fn take_ended_turns(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.ended_turns)
    }

    pub fn get(&self, conn: ConnId) -> Option<&Stream> {
        self.streams.get(&conn)
    }

    pub fn get_mut(&mut self, conn: ConnId) -> Option<&mut Stream> {
        self.streams.get_mut(&conn)
    }

    /// Whether the stream on `conn` opted into `e`.
    pub fn has(&self, conn: ConnId, e: Extension) -> bool {
        self.streams.get(&conn).is_some_and(|s| s.ext.has(e))
    }

    /// Whether the stream on `conn` is open on `session_id`.
    pub fn is_open_on(&self, conn: ConnId, session_id: &str) -> bool {
        (self.streams.get(&conn)).is_some_and(|s| s.session_id.as_str() == session_id)
    }

    /// The streams of `fanout` (a session's list, in connection order)
    /// still open on `session_id`.
    pub fn of_session<'a>(
        &self,
        fanout: impl IntoIterator<Item = &'a ConnId>,
        session_id: &str,
    ) -> Vec<ConnId> {
        (fanout.into_iter().copied())
            .filter(|c| self.is_open_on(*c, session_id))
            .collect()
    }

    /// A frame of `len` bytes goes out on `conn` now.
    pub fn sent(&mut self, conn: ConnId, len: usize, now: MonoMs) {
        self.sent_frame(conn, len, false, now);
    }

    fn sent_frame(&mut self, conn: ConnId, len: usize, delta: bool, now: MonoMs) {
        if let Some(s) = self.streams.get_mut(&conn) {
            s.in_flight.push_back((len, delta));
            s.deltas_in_flight += usize::from(delta);
            s.in_flight_bytes += len;
            s.last_write = now;
        }
    }

    /// `bytes` of `conn` reached the socket: earlier bytes first, then the
    /// stream's frames in order.
    pub fn flushed(&mut self, conn: ConnId, mut bytes: usize) {
        let Some(s) = self.streams.get_mut(&conn) else {
            return;
        };
        let earlier = bytes.min(s.unflushed_before);
        s.unflushed_before -= earlier;
        bytes -= earlier;
        s.in_flight_bytes = s.in_flight_bytes.saturating_sub(bytes);
        bytes += s.flushed_partial;
        while let Some(&(front, delta)) = s.in_flight.front() {
            if bytes >= front {
                bytes -= front;
                s.in_flight.pop_front();
                s.deltas_in_flight = s.deltas_in_flight.saturating_sub(usize::from(delta));
            } else {
                break;
            }
        }
        s.flushed_partial = if s.in_flight.is_empty() { 0 } else { bytes };
        if s.in_flight.is_empty() {
            s.in_flight_bytes = 0;
        }
    }

    /// A published event reaches stream `conn` (`quiet`: it is the
    /// stream's own request's input, never echoed to it); `sub` is its
    /// subscription, if a `session.subscribe` stream.
    pub fn publish(
        &mut self,
        conn: ConnId,
        sub: Option<&mut Subscription>,
        ev: &Appended,
        quiet: bool,
        limits: FlowLimits,
    ) -> Live {
        let Some(s) = self.streams.get_mut(&conn) else {
            return Live::Skip;
        };
        let gapless = s.ext.has(Extension::SubscribeGapless);
        match (&s.kind, sub) {
            (StreamKind::Single | StreamKind::Queued, _) => Live::Skip,
            (StreamKind::Turn, _) if quiet => Live::Skip,
            (StreamKind::Turn, _) => self.deliver(conn, None, ev, limits),
            (StreamKind::Subscribe, None) => Live::Skip,
            (StreamKind::Subscribe, Some(sub)) => match sub.phase {
                Phase::Live => self.deliver(conn, Some(sub), ev, limits),
                // In the store already: read once the consumer drains.
                Phase::Stalled | Phase::Reading { overflow: true } => Live::Skip,
                Phase::Reading { overflow: false } => {
                    sub.buffered.push(ev.clone());
                    if sub.buffered.len() <= limits.lag_limit {
                        Live::Skip
                    } else if gapless {
                        sub.buffered.clear();
                        sub.phase = Phase::Reading { overflow: true };
                        Live::Skip
                    } else {
                        Live::Lagged
                    }
                }
            },
        }
    }

    /// One live event for stream `conn`, unless already delivered. A plain
    /// consumer too far behind lags; a gapless one over its byte window
    /// stalls (and later catches up from the store). `sub`: the stream's
    /// subscription, if a `session.subscribe` stream.
    pub fn deliver(
        &mut self,
        conn: ConnId,
        sub: Option<&mut Subscription>,
        ev: &Appended,
        limits: FlowLimits,
    ) -> Live {
        let Some(s) = self.streams.get_mut(&conn) else {
            return Live::Skip;
        };
        let gapless = s.ext.has(Extension::SubscribeGapless);
        let over_window = s.over_window(limits.window_bytes);
        if let Some(sub) = sub {
            if ev.seq <= sub.delivered || sub.phase != Phase::Live {
                return Live::Skip;
            }
            if gapless {
                if over_window {
                    sub.phase = Phase::Stalled;
                    return Live::Skip;
                }
                sub.delivered = ev.seq;
                return Live::Frame;
            }
            sub.delivered = ev.seq;
        }
        if s.in_flight.len() - s.deltas_in_flight >= limits.lag_limit {
            Live::Lagged
        } else {
            Live::Frame
        }
    }

    /// Earliest keepalive deadline (`every` ms of silence), if any stream.
    pub fn next_keepalive(&self, every: u64) -> Option<MonoMs> {
        self.streams.values().map(|s| s.last_write + every).min()
    }

    /// Streams silent for `every` ms at `now`.
    pub fn keepalives_due(&self, every: u64, now: MonoMs) -> Vec<ConnId> {
        (self.streams.iter())
            .filter(|(_, s)| s.last_write + every <= now)
            .map(|(c, _)| *c)
            .collect()
    }
}

#[cfg(test)]
mod tests;
