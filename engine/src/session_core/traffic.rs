//! Provider traffic in the turn loop (docs/extensions.md, "Provider
//! traffic"): a prepared attempt on a limited entry, or a retry, waits for
//! the engine's admission before its `provider.request` is logged and its
//! call leaves; a failed attempt whose entry has a retry policy is tried
//! again on the same entry. With neither configured, an attempt leaves at
//! once, as in the reference.

use proto::wire::EventType;

use super::effect::{Admission, Call, Effect, Log, LogTag};
use super::retry::{Decision, Delay, Failure};
use super::turn::Phase;
use super::walk::{self, Walked};
use super::{SessionCore, World};
use crate::provider_limits::estimate_tokens;
use crate::{CallId, MonoMs};

/// A prepared attempt waiting for its slot or its retry time.
#[derive(Debug)]
pub struct Pending {
    /// The id the engine gave it ([`SessionCore::admission`]).
    ticket: Option<CallId>,
    /// Its `provider.request` payload, logged when it leaves.
    payload: String,
    call: Call,
}

impl SessionCore {
    /// Sends a prepared attempt now, or asks for its slot when its entry
    /// is limited or it is a retry.
    pub(super) fn dispatch_attempt(&mut self, payload: String, call: Call, delay: Option<Delay>) {
        if call.entry.limits.is_none() && delay.is_none() {
            self.log_request(payload);
            return self.emit(Effect::Call(Box::new(call)));
        }
        let admission = Admission {
            entry: call.entry.name.clone(),
            tokens: estimate_tokens(call.body.len()),
            delay,
        };
        if let Some(t) = self.turn_mut() {
            t.phase = Phase::Admitting(Box::new(Pending {
                ticket: None,
                payload,
                call,
            }));
        }
        self.emit(Effect::Admit(admission));
    }

    /// Logs an attempt's `provider.request` as it leaves (its deltas, when
    /// it streams, name this event).
    fn log_request(&mut self, payload: String) {
        self.emit(Effect::Log(Log {
            event: EventType::ProviderRequest,
            payload,
            quiet: false,
            tag: LogTag::Request,
            grew: None,
        }));
    }

    /// The engine's answer to [`Effect::Admit`]: the attempt's call is
    /// `ticket`, and may leave now (`go`) or waits.
    pub fn admission(&mut self, ticket: CallId, go: bool) {
        self.step(|c| {
            let Some(p) = c.turn_mut().and_then(|t| t.pending_mut()) else {
                return;
            };
            p.ticket = Some(ticket);
            if go {
                c.send_pending();
            }
        });
    }

    fn pending_ticket(&self) -> Option<CallId> {
        self.turn()?.pending()?.ticket
    }

    /// The waiting attempt `ticket` may leave now. `false`: no turn waits
    /// for it (the engine gives its slot back).
    pub fn admitted(&mut self, ticket: CallId) -> bool {
        if self.pending_ticket() != Some(ticket) {
            return false;
        }
        self.step(|c| c.send_pending());
        true
    }

    fn send_pending(&mut self) {
        let Some(p) = self.turn_mut().and_then(|t| t.take_pending()) else {
            return;
        };
        self.log_request(p.payload);
        let mut call = p.call;
        call.ticket = p.ticket;
        self.emit(Effect::Call(Box::new(call)));
    }

    /// The waiting attempt `ticket` waited past its entry's bound: it is
    /// logged as an attempt that failed without a response, and the walk
    /// goes on. `false`: no turn waits for it.
    pub fn admission_expired(
        &mut self,
        ticket: CallId,
        waited_ms: u64,
        world: &dyn World,
        now: MonoMs,
    ) -> bool {
        if self.pending_ticket() != Some(ticket) {
            return false;
        }
        self.step(|c| {
            let Some(p) = c.turn_mut().and_then(|t| t.take_pending()) else {
                return;
            };
            c.log_request(p.payload);
            let Some(attempt) = c.current_attempt() else {
                return;
            };
            let error = format!("provider limit: no call slot within {waited_ms} ms");
            let walked = walk::on_failure(attempt, error);
            c.after_walk(attempt, walked, world, now);
        });
        true
    }

    /// Whether the failed attempt is tried again under its entry's retry
    /// policy, and after which delay: then only its `provider.response`
    /// stays in `walked` (no session error: the round trip has not failed
    /// yet).
    pub(super) fn retried(&mut self, failure: Failure, walked: &mut Walked) -> Option<Delay> {
        let t = self.turn_mut()?;
        let policy = t.chain.get(t.attempt).and_then(|e| e.retry.as_ref())?;
        match policy.decide(failure, t.retries) {
            Decision::Retry(delay) => {
                t.retries += 1;
                walked.events.truncate(1);
                Some(delay)
            }
            Decision::Walk | Decision::TooLong { .. } => None,
        }
    }
}
