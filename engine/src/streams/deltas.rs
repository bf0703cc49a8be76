//! The hub's part of extension `turn.deltas`: which streams get a streaming
//! attempt's text, and how a slow one is kept from slowing the turn or
//! holding memory without bound.
//!
//! A stream follows an attempt from its first delta (one that opened
//! later never sees a suffix of it). Below the delta window (unflushed
//! bytes) it gets every delta as it comes, the frame rendered once for all
//! such streams. Past the window its deltas are joined per block and held,
//! and sent once it has drained to half the window (or when the attempt
//! completes: the reply is whole, the held text goes before the final
//! events). A subscription holding more than [`HOLD_WINDOWS`] windows gets
//! one `session.delta_discard` (`lagged`) and no more of the attempt (a
//! turn's own stream is never dropped). An
//! attempt that fails or is cancelled ends with `session.delta_discard` on
//! every stream still following it. Deltas are never logged.

use std::sync::Arc;

use proto::jsonrpc::{self, DeltaOf, DiscardReason, Extension};
use proto::provider::stream::Fragment;

use super::{Hub, StreamKind};
use crate::bytes::Bytes;
use crate::store::encode_frame;
use crate::{ConnId, MonoMs};

/// The text one provider chunk added to a streaming attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaBatch {
    /// Event id of the turn's `client.message.send`.
    pub turn: Arc<str>,
    /// Event id of the attempt's `provider.request`.
    pub request: Arc<str>,
    /// The attempt's position in the provider chain.
    pub attempt: usize,
    /// The attempt's first batch: streams start following it here.
    pub first: bool,
    pub fragments: Vec<Fragment>,
}

impl DeltaBatch {
    fn of(&self) -> DeltaOf<'_> {
        DeltaOf {
            turn: &self.turn,
            request: &self.request,
            attempt: self.attempt,
        }
    }
}

/// The attempt a stream follows, and how far.
#[derive(Debug)]
pub struct DeltaCursor {
    turn: Arc<str>,
    request: Arc<str>,
    attempt: usize,
    follow: Follow,
}

/// Windows of text a subscriber's held deltas may reach before they are
/// dropped: a reader that keeps up but whose flush reports come late (a
/// burst of chunks handled before its writer ran) is not dropped.
pub const HOLD_WINDOWS: usize = 16;

/// What a batch does on one stream.
enum Act {
    Send,
    Lagged,
}

#[derive(Debug)]
enum Follow {
    /// Every delta goes out as it comes.
    Live,
    /// Over the window: text joined per block, waiting for the drain.
    Held { frags: Vec<Fragment>, bytes: usize },
    /// Given up for this attempt (the `lagged` marker was sent).
    Dropped,
}

/// The windows of delta delivery, in unflushed bytes.
#[derive(Debug, Clone, Copy)]
pub struct DeltaLimits {
    /// `Config::delta_window_bytes`.
    pub window: usize,
    /// A gapless subscriber's own window: deltas never push it over.
    pub gapless_window: usize,
}

fn frame(of: DeltaOf<'_>, f: &Fragment) -> Vec<u8> {
    encode_frame(&jsonrpc::delta_frame(of, f.index, f.kind.as_str(), &f.text))
}

fn discard(of: DeltaOf<'_>, reason: DiscardReason) -> Vec<u8> {
    encode_frame(&jsonrpc::delta_discard_frame(of, reason))
}

impl DeltaCursor {
    fn of(&self) -> DeltaOf<'_> {
        DeltaOf {
            turn: &self.turn,
            request: &self.request,
            attempt: self.attempt,
        }
    }
}

impl Hub {
    /// Whether `conn` takes deltas at all: opted in, and a turn's own stream
    /// or a subscription.
    fn takes_deltas(&self, conn: ConnId) -> bool {
        self.streams.get(&conn).is_some_and(|s| {
            s.ext.has(Extension::TurnDeltas)
                && matches!(s.kind, StreamKind::Turn | StreamKind::Subscribe)
        })
    }

    /// The window that applies to `conn`.
    fn window(&self, conn: ConnId, limits: DeltaLimits) -> usize {
        match self.streams.get(&conn) {
            Some(s) if s.ext.has(Extension::SubscribeGapless) => {
                limits.window.min(limits.gapless_window)
            }
            _ => limits.window,
        }
    }

    fn send_delta(
        &mut self,
        conn: ConnId,
        bytes: Bytes,
        now: MonoMs,
        out: &mut Vec<(ConnId, Bytes)>,
    ) {
        self.sent_frame(conn, bytes.len(), true, now);
        out.push((conn, bytes));
    }

    /// The frames `batch` puts on `session_id`'s streams, in stream order.
    pub fn deltas(
        &mut self,
        fanout: &[ConnId],
        session_id: &str,
        batch: &DeltaBatch,
        limits: DeltaLimits,
        now: MonoMs,
    ) -> Vec<(ConnId, Bytes)> {
        let mut out = Vec::new();
        // Rendered once, shared by every stream that takes them as they are.
        let mut shared: Option<Vec<Bytes>> = None;
        for conn in self.of_session(fanout, session_id) {
            if !self.takes_deltas(conn) {
                continue;
            }
            let window = self.window(conn, limits);
            let Some(s) = self.streams.get_mut(&conn) else {
                continue;
            };
            if batch.first {
                s.deltas = Some(DeltaCursor {
                    turn: batch.turn.clone(),
                    request: batch.request.clone(),
                    attempt: batch.attempt,
                    follow: Follow::Live,
                });
            }
            let over = s.in_flight_bytes >= window;
            let own = matches!(s.kind, StreamKind::Turn);
            let Some(cursor) = s.deltas.as_mut().filter(|c| c.request == batch.request) else {
                continue;
            };
            let act = match &mut cursor.follow {
                Follow::Dropped => continue,
                Follow::Live if !over => Act::Send,
                follow => {
                    if matches!(follow, Follow::Live) {
                        *follow = Follow::Held {
                            frags: Vec::new(),
                            bytes: 0,
                        };
                    }
                    let Follow::Held { frags, bytes } = follow else {
                        continue;
                    };
                    for f in &batch.fragments {
                        *bytes += f.text.len();
                        match frags.last_mut() {
                            Some(l) if l.index == f.index && l.kind == f.kind => {
                                l.text.push_str(&f.text)
                            }
                            _ => frags.push(f.clone()),
                        }
                    }
                    // A turn's own stream is what the turn serves: its text
                    // is held whole (it gets the whole reply in its result
                    // anyway); a subscriber up to the hold bound.
                    if own || *bytes <= window.saturating_mul(HOLD_WINDOWS) {
                        continue;
                    }
                    *follow = Follow::Dropped;
                    Act::Lagged
                }
            };
            match act {
                Act::Send => {
                    let frames = shared.get_or_insert_with(|| {
                        (batch.fragments.iter())
                            .map(|f| Bytes::Shared(frame(batch.of(), f).into()))
                            .collect()
                    });
                    for f in frames.clone() {
                        self.send_delta(conn, f, now, &mut out);
                    }
                }
                Act::Lagged => {
                    let marker = discard(batch.of(), DiscardReason::Lagged);
                    self.send_delta(conn, Bytes::Owned(marker), now, &mut out);
                }
            }
        }
        out
    }

    /// Flush progress on `conn`: its held deltas, once it has drained to
    /// half its window.
    pub fn deltas_drained(&mut self, conn: ConnId, limits: DeltaLimits, now: MonoMs) -> Vec<Bytes> {
        // Every flush of every stream comes here: most hold nothing.
        let held = (self.streams.get(&conn))
            .and_then(|s| s.deltas.as_ref())
            .is_some_and(|c| matches!(c.follow, Follow::Held { .. }));
        if !held {
            return Vec::new();
        }
        let window = self.window(conn, limits);
        let Some(s) = self.streams.get_mut(&conn) else {
            return Vec::new();
        };
        if s.in_flight_bytes > window / 2 {
            return Vec::new();
        }
        self.release_held(conn, now)
    }

    /// `conn`'s held deltas as frames; it follows live again.
    fn release_held(&mut self, conn: ConnId, now: MonoMs) -> Vec<Bytes> {
        let Some(cursor) = self.streams.get_mut(&conn).and_then(|s| s.deltas.as_mut()) else {
            return Vec::new();
        };
        // Only a held stream goes live again: a dropped one stays dropped
        // (it would see the attempt's text with a gap).
        if !matches!(cursor.follow, Follow::Held { .. }) {
            return Vec::new();
        }
        let Follow::Held { frags, .. } = std::mem::replace(&mut cursor.follow, Follow::Live) else {
            return Vec::new();
        };
        let frames: Vec<Vec<u8>> = frags.iter().map(|f| frame(cursor.of(), f)).collect();
        let mut out = Vec::new();
        for f in frames {
            self.send_delta(conn, Bytes::Owned(f), now, &mut out);
        }
        out.into_iter().map(|(_, b)| b).collect()
    }

    /// The attempt of `request` ended. Completed (`None`): streams still
    /// holding its text get it now, before the final events. Failed or
    /// cancelled: every stream following it gets the discard marker.
    pub fn deltas_ended(
        &mut self,
        fanout: &[ConnId],
        session_id: &str,
        request: &str,
        reason: Option<DiscardReason>,
        now: MonoMs,
    ) -> Vec<(ConnId, Bytes)> {
        let mut out = Vec::new();
        for conn in self.of_session(fanout, session_id) {
            let Some(s) = self.streams.get_mut(&conn) else {
                continue;
            };
            let Some(cursor) = s.deltas.take_if(|c| &*c.request == request) else {
                continue;
            };
            let held = matches!(cursor.follow, Follow::Held { .. });
            match reason {
                _ if matches!(cursor.follow, Follow::Dropped) => {}
                None if held => {
                    s.deltas = Some(cursor);
                    for b in self.release_held(conn, now) {
                        out.push((conn, b));
                    }
                    if let Some(s) = self.streams.get_mut(&conn) {
                        s.deltas = None;
                    }
                }
                None => {}
                Some(reason) => {
                    let marker = discard(cursor.of(), reason);
                    self.send_delta(conn, Bytes::Owned(marker), now, &mut out);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
