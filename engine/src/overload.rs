//! Server overload (docs/extensions.md, "Overload"): past configured
//! bounds on the engine's queues (requests waiting for a turn gate over
//! all sessions, store writes not yet committed), new client requests are
//! answered `503` with `Retry-After` at once, instead of joining queues
//! they would time out in. `/healthz` and `/api/v1/meta` always answer.
//! Off unless a bound is configured.
//!
//! A component with its own small vocabulary: the engine reports the
//! figures it has ([`Overload::note_backlog`], the waiting count on
//! [`Overload::check`]), asks before routing a request, and reads
//! [`Overload::status`] for `/metrics` and the console.

/// `BAE_OVERLOAD_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverloadLimits {
    /// Gated requests waiting over all sessions' turn gates.
    pub max_waiting: Option<usize>,
    /// Store writes emitted and not yet committed.
    pub max_store_backlog: Option<usize>,
    /// Seconds in the `Retry-After` of a refusal.
    pub retry_after_s: u64,
}

impl OverloadLimits {
    pub fn is_on(&self) -> bool {
        self.max_waiting.is_some() || self.max_store_backlog.is_some()
    }
}

/// Which bound was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    TurnQueue,
    StoreBacklog,
}

impl Cause {
    pub const ALL: [Cause; 2] = [Cause::TurnQueue, Cause::StoreBacklog];

    /// The label in `/metrics` and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::TurnQueue => "turn_queue",
            Cause::StoreBacklog => "store_backlog",
        }
    }

    /// The problem `detail` of a refusal.
    pub fn detail(self) -> &'static str {
        match self {
            Cause::TurnQueue => {
                "the server is overloaded: too many requests wait for a turn; retry later"
            }
            Cause::StoreBacklog => "the server is overloaded: the store is behind; retry later",
        }
    }
}

/// The figures and the refusals counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub limits: OverloadLimits,
    pub waiting: usize,
    pub backlog: usize,
    /// Refusals by [`Cause::ALL`] order.
    pub refused: [u64; 2],
}

#[derive(Debug, Default)]
pub struct Overload {
    status: Status,
}

impl Overload {
    pub fn new(limits: OverloadLimits) -> Self {
        Overload {
            status: Status {
                limits,
                ..Status::default()
            },
        }
    }

    pub fn is_on(&self) -> bool {
        self.status.limits.is_on()
    }

    /// Whether the turn-queue bound is configured (the engine counts
    /// waiters only then).
    pub fn watches_waiting(&self) -> bool {
        self.status.limits.max_waiting.is_some()
    }

    /// The driver's store backlog: writes emitted and not yet committed.
    pub fn note_backlog(&mut self, writes: usize) {
        self.status.backlog = writes;
    }

    /// Whether a new request is to be refused now, with `waiting` gated
    /// requests queued; a refusal is counted.
    pub fn check(&mut self, waiting: usize) -> Option<Cause> {
        let s = &mut self.status;
        s.waiting = waiting;
        let cause = if s.limits.max_waiting.is_some_and(|m| waiting >= m) {
            Cause::TurnQueue
        } else if s.limits.max_store_backlog.is_some_and(|m| s.backlog >= m) {
            Cause::StoreBacklog
        } else {
            return None;
        };
        if let Some(n) = s.refused.get_mut(cause as usize) {
            *n += 1;
        }
        Some(cause)
    }

    /// `Retry-After` seconds, as header text.
    pub fn retry_after(&self) -> String {
        self.status.limits.retry_after_s.to_string()
    }

    pub fn status(&self) -> Status {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_either_bound_and_counts() {
        let mut o = Overload::new(OverloadLimits {
            max_waiting: Some(3),
            max_store_backlog: Some(100),
            retry_after_s: 2,
        });
        assert!(o.is_on());
        assert_eq!(o.check(2), None);
        assert_eq!(o.check(3), Some(Cause::TurnQueue));
        o.note_backlog(100);
        assert_eq!(o.check(0), Some(Cause::StoreBacklog));
        o.note_backlog(99);
        assert_eq!(o.check(0), None);
        assert_eq!(o.status().refused, [1, 1]);
        assert_eq!(o.retry_after(), "2");
    }

    #[test]
    fn off_by_default() {
        let mut o = Overload::default();
        assert!(!o.is_on());
        o.note_backlog(usize::MAX);
        assert_eq!(o.check(usize::MAX), None);
    }
}
