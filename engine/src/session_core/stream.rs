//! A streamed provider attempt (`stream = true` on its registry entry): its
//! body arrives in chunks, read by proto's assembler into exactly the reply
//! the unstreamed call would give; its text goes to opted-in streams as
//! deltas ([`Effect::Deltas`]); a watchdog fails it when nothing arrives in
//! time (first byte) or nothing but pings does (idle). A failure of any
//! kind is one failed attempt, logged as the walk logs every failure, and
//! its connection is closed ([`Effect::AbortCall`]); nothing of a partial
//! reply is ever logged.

use std::sync::Arc;

use proto::jsonrpc::DiscardReason;
use proto::provider::stream::{Assembler, Fragment, StreamError, StreamLimits};
use proto::provider::Kind;

use super::effect::{Effect, World};
use super::retry::Failure;
use super::walk::{self, Streamed};
use super::SessionCore;
use crate::streams::DeltaBatch;
use crate::{CallId, MonoMs, ProviderReply, StreamSettings};

/// The reading of one streamed call.
pub(crate) struct AttemptStream {
    asm: Assembler,
    settings: StreamSettings,
    sent: MonoMs,
    /// When the last event carrying progress arrived (`None`: no byte yet).
    progress_at: Option<MonoMs>,
    /// Only pings (or comments) arrived since then.
    pinged: bool,
    /// Deltas of this attempt went out: its end is announced.
    deltas: bool,
}

impl AttemptStream {
    pub(crate) fn new(kind: Kind, settings: StreamSettings, sent: MonoMs) -> Self {
        AttemptStream {
            asm: Assembler::new(
                kind,
                StreamLimits {
                    max_bytes: settings.max_bytes,
                    ..StreamLimits::default()
                },
            ),
            settings,
            sent,
            progress_at: None,
            pinged: false,
            deltas: false,
        }
    }

    /// When the watchdog must look next.
    pub(crate) fn next_check(&self) -> MonoMs {
        match self.progress_at {
            None => self.sent + self.settings.first_byte_timeout_ms,
            Some(at) => at + self.settings.idle_timeout_ms,
        }
    }

    /// The timeout that has passed at `now`, as the attempt's error text.
    fn expired(&self, now: MonoMs) -> Option<String> {
        if now < self.next_check() {
            return None;
        }
        Some(match self.progress_at {
            None => format!(
                "provider stream timed out: nothing received within {} ms",
                self.settings.first_byte_timeout_ms
            ),
            Some(_) if self.pinged => format!(
                "provider stream timed out: only pings for {} ms",
                self.settings.idle_timeout_ms
            ),
            Some(_) => format!(
                "provider stream timed out: no event for {} ms",
                self.settings.idle_timeout_ms
            ),
        })
    }

    fn feed(
        &mut self,
        bytes: &[u8],
        now: MonoMs,
        out: &mut Vec<Fragment>,
    ) -> Result<(), StreamError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let progress = self.asm.feed(bytes, out)?;
        if progress || self.progress_at.is_none() {
            self.progress_at = Some(now);
        }
        self.pinged = !progress;
        Ok(())
    }
}

impl SessionCore {
    /// Body bytes of the streamed call `call`: `None` when no turn waits
    /// for it; `Some(at)` when its watchdog must look earlier than armed
    /// (the first byte came: the idle timeout counts from now on).
    pub fn on_chunk(
        &mut self,
        call: CallId,
        bytes: &[u8],
        world: &dyn World,
        now: MonoMs,
    ) -> Option<Option<MonoMs>> {
        if self.waiting_call() != Some(call) {
            return None;
        }
        let first = (self.turn()?.stream()).is_some_and(|s| s.progress_at.is_none());
        self.step(|c| c.chunk(call, bytes, world, now));
        let stream = self.turn().and_then(|t| t.stream());
        Some(stream.filter(|_| first).map(|s| s.next_check()))
    }

    fn chunk(&mut self, call: CallId, bytes: &[u8], world: &dyn World, now: MonoMs) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        let compaction = t.is_compaction();
        let (turn, request) = (t.input_event.clone(), t.request_event.clone());
        let attempt = t.attempt;
        let Some(stream) = t.stream_mut() else {
            return;
        };
        let mut fragments = Vec::new();
        if let Err(e) = stream.feed(bytes, now, &mut fragments) {
            return self.stream_failed(call, e, world, now);
        }
        // A compaction's summary is not an assistant message: no deltas.
        let (Some(turn), Some(request)) = (turn, request) else {
            return;
        };
        if fragments.is_empty() || compaction {
            return;
        }
        let first = !std::mem::replace(&mut stream.deltas, true);
        self.emit(Effect::Deltas(DeltaBatch {
            turn,
            request,
            attempt,
            first,
            fragments,
        }));
    }

    /// The streamed call's reply came (the body ended, or it failed before
    /// or while it streamed).
    pub(super) fn stream_ended(
        &mut self,
        mut stream: AttemptStream,
        reply: ProviderReply,
        world: &dyn World,
        now: MonoMs,
    ) {
        let deltas = stream.deltas;
        // For the entry's retry policy: a status before the stream started
        // is judged as unstreamed, a fault of the stream itself as a
        // transport failure (retried only with `transport = true`).
        let failure = match &reply {
            ProviderReply::Streamed => Failure::Transport,
            _ => Failure::of(&reply),
        };
        let outcome = match &reply {
            ProviderReply::Streamed => Some(stream.asm.finish()),
            // A 2xx body the driver read whole (a server that does not
            // stream): the same reader takes it.
            ProviderReply::Http { status, body, .. } if (200..300).contains(status) => {
                let mut ignored = Vec::new();
                let fed = stream.asm.feed(body, &mut ignored);
                Some(fed.and_then(|_| stream.asm.finish()))
            }
            // An error status or a transport failure reads as unstreamed.
            _ => None,
        };
        let failed = !matches!(outcome, Some(Ok(_)));
        self.end_deltas(deltas, failed.then_some(DiscardReason::Failed));
        match outcome {
            None => self.walk(failure, |a| walk::on_reply(a, reply), world, now),
            Some(Ok(resp)) => {
                let answered = |a| walk::on_stream(a, Streamed::Reply(resp));
                self.walk(Failure::Other, answered, world, now)
            }
            Some(Err(e)) => self.walk(failure, |a| walk::on_stream(a, fault(&e)), world, now),
        }
    }

    /// A stream fault while it ran: the call is closed and the attempt
    /// fails (a retry under its entry's policy, or the fallback walk).
    fn stream_failed(&mut self, call: CallId, e: StreamError, world: &dyn World, now: MonoMs) {
        let deltas =
            (self.turn_mut().and_then(super::TurnLoop::take_stream)).is_some_and(|s| s.deltas);
        self.emit(Effect::AbortCall(call));
        self.end_deltas(deltas, Some(DiscardReason::Failed));
        let failed = |a| walk::on_stream(a, fault(&e));
        self.walk(Failure::Transport, failed, world, now);
    }

    /// The watchdog of streamed call `call` at `now`: `Some(next check)`
    /// while it lives; `None` once it is over (a timeout failed it, or the
    /// turn no longer waits for it).
    pub fn stream_check(&mut self, call: CallId, world: &dyn World, now: MonoMs) -> Option<MonoMs> {
        if self.waiting_call() != Some(call) {
            return None;
        }
        let stream = self.turn()?.stream()?;
        let Some(error) = stream.expired(now) else {
            return Some(stream.next_check());
        };
        let complete = stream.asm.is_complete();
        self.step(|c| {
            let Some(stream) = c.turn_mut().and_then(super::TurnLoop::take_stream) else {
                return;
            };
            c.emit(Effect::AbortCall(call));
            if complete {
                // Its last event came but the body never ended: the reply is
                // whole, the connection is what hangs.
                c.stream_ended(*stream, ProviderReply::Streamed, world, now);
            } else {
                c.end_deltas(stream.deltas, Some(DiscardReason::Failed));
                let failed = Streamed::Failed { error, body: None };
                let failed = |a| walk::on_stream(a, failed);
                c.walk(Failure::Transport, failed, world, now);
            }
        });
        None
    }

    /// Announces the end of the attempt's deltas, if any went out.
    fn end_deltas(&mut self, deltas: bool, reason: Option<DiscardReason>) {
        let request = self.turn().and_then(|t| t.request_event.clone());
        if let (true, Some(request)) = (deltas, request) {
            self.emit(Effect::DeltasEnded { request, reason });
        }
    }
}

impl super::TurnLoop {
    /// The `provider.request` id of the attempt in flight when deltas of it
    /// went out (a cancel then discards them).
    pub fn streaming_deltas(&self) -> Option<Arc<str>> {
        let streaming = self.stream().is_some_and(|s| s.deltas);
        self.request_event.clone().filter(|_| streaming)
    }
}

fn fault(e: &StreamError) -> Streamed {
    Streamed::Failed {
        error: e.to_string(),
        body: e.body().map(str::to_string),
    }
}
