//! The FIFO turn gate (spec 01 §8.3): arrival rules, admission of the
//! oldest live waiter, the engine's own abandonment timer, cancels, and
//! the hand-over after a restart rebuilt a parked pause from the log.

use std::collections::VecDeque;

use super::{Holder, Idem, Op, Pause, Takeover, Waiter};
use crate::faults::Faults;
use crate::{ConnId, MonoMs};

/// A request that now holds the gate (the gate is `Running`).
#[derive(Debug)]
pub struct Start {
    pub waiter: Waiter,
    pub takeover: Takeover,
}

/// Why a request may not wait on the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    ShuttingDown,
    /// `max_queued_per_session` requests already wait.
    QueueFull,
    /// A compaction never waits on a live pause (spec 07 §4.2 step 4).
    TurnInProgress,
}

/// What became of an arrival.
#[derive(Debug)]
pub enum Arrival {
    Start(Start),
    Queued,
    Refused(Waiter, Refusal),
}

/// Bounds on queueing, from the engine's configuration and state.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_queued: usize,
    pub shutting_down: bool,
}

/// One session's gate: who holds it and who waits, in arrival order.
#[derive(Debug, Default)]
pub struct Gate {
    holder: Holder,
    queue: VecDeque<Waiter>,
    /// Empty unless the simulator planted a gate bug.
    faults: Faults,
}

impl Gate {
    pub fn new(faults: Faults) -> Self {
        Gate {
            faults,
            ..Gate::default()
        }
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    #[cfg(test)]
    pub fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.queue.iter()
    }

    /// How many requests wait (overload control).
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Whether anyone is queued (only then can the gate have a deadline).
    pub fn has_waiters(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The first history rebuild of a session since start: only a free
    /// gate starts one (later arrivals queue behind it).
    pub fn begin_recovery(&mut self) -> bool {
        let start = matches!(self.holder, Holder::Free);
        if start {
            self.holder = Holder::Recovering;
        }
        start
    }

    /// Queues `w` at the back, unless a limit refuses it (never `Start`).
    pub fn enqueue(&mut self, limits: Limits, w: Waiter) -> Arrival {
        if limits.shutting_down {
            return Arrival::Refused(w, Refusal::ShuttingDown);
        }
        if self.queue.len() >= limits.max_queued {
            return Arrival::Refused(w, Refusal::QueueFull);
        }
        self.queue.push_back(w);
        Arrival::Queued
    }

    /// The arrival rules of a request on a session whose history is loaded.
    /// A send resumes its owner's pause at once; anyone may retire an
    /// expired pause when nobody waits; a free gate with nobody waiting is
    /// taken; everything else queues. A compaction refuses a live pause.
    pub fn arrive(&mut self, now: MonoMs, limits: Limits, w: Waiter) -> Arrival {
        let compaction = matches!(w.op, Op::Compact(_));
        let empty = self.queue.is_empty();
        let takeover = match &self.holder {
            Holder::Paused(p) if !compaction && p.owner == w.key_id && !p.cancelled => {
                self.take_pause().map(Takeover::Resume)
            }
            Holder::Paused(p) if compaction && p.deadline > now => {
                return Arrival::Refused(w, Refusal::TurnInProgress)
            }
            Holder::Paused(p) if p.deadline <= now && empty => {
                self.take_pause().map(Takeover::Retire)
            }
            Holder::Free if empty => Some(Takeover::Fresh),
            _ => None,
        };
        match takeover {
            Some(takeover) => Arrival::Start(self.start(w, takeover)),
            None => self.enqueue(limits, w),
        }
    }

    /// The running turn ended without pausing: the gate passes on.
    pub fn release(&mut self, now: MonoMs, alive: impl Fn(ConnId) -> bool) -> Option<Start> {
        self.holder = Holder::Free;
        self.admit_next(now, alive)
    }

    /// The running turn paused for client tools: the gate stays taken for
    /// its owner. Queued compactions are returned, refused.
    pub fn park(&mut self, pause: Pause) -> Vec<Waiter> {
        self.holder = Holder::Paused(pause);
        let (compactions, rest): (Vec<_>, Vec<_>) = self
            .queue
            .drain(..)
            .partition(|w| matches!(w.op, Op::Compact(_)));
        self.queue = rest.into();
        compactions
    }

    /// Earliest pause deadline with someone waiting behind it (a pause
    /// nobody waits for needs no timer: the next arrival checks it).
    pub fn deadline(&self) -> Option<MonoMs> {
        match &self.holder {
            Holder::Paused(p) if !self.queue.is_empty() => Some(p.deadline),
            _ => None,
        }
    }

    /// The abandonment timer: a waiter behind an expired pause retires it.
    pub fn tick(&mut self, now: MonoMs, alive: impl Fn(ConnId) -> bool) -> Option<Start> {
        match &self.holder {
            Holder::Paused(p) if p.deadline <= now && !self.queue.is_empty() => {
                self.admit_next(now, alive)
            }
            _ => None,
        }
    }

    /// Cancels the parked pause if `owner` holds it (any owner when
    /// `None`): it expires now and no arrival resumes it. Returns the
    /// pause's owner, whose abandonment the caller logs.
    pub fn cancel_pause(&mut self, owner: Option<&str>) -> Option<crate::ids::KeyId> {
        match &mut self.holder {
            Holder::Paused(p) if owner.is_none_or(|o| p.owner == o) && !p.cancelled => {
                p.cancelled = true;
                p.deadline = MonoMs(0);
                Some(p.owner.clone())
            }
            _ => None,
        }
    }

    /// Takes `owner`'s queued requests out of the queue.
    pub fn remove_queued_of(&mut self, owner: &str) -> Vec<Waiter> {
        let (theirs, rest): (Vec<_>, Vec<_>) =
            self.queue.drain(..).partition(|w| w.key_id == owner);
        self.queue = rest.into();
        theirs
    }

    /// A connection went away: its waiters leave the queue (an idempotent
    /// request's oldest attached retry takes its place). Whether the queue
    /// changed.
    pub fn forget(&mut self, conn: ConnId) -> bool {
        let before = self.queue.len();
        for w in self.queue.iter_mut() {
            w.forget(conn);
        }
        self.queue.retain(|w| w.conn != conn);
        self.queue.len() != before
    }

    /// The queued request of `key_id` carrying idempotency key `key`.
    pub fn queued_idem(&mut self, key_id: &str, key: &str) -> Option<&mut Idem> {
        self.queue.iter_mut().find_map(|w| match &mut w.op {
            Op::Send(m) if w.key_id == key_id => m.idem.as_mut().filter(|i| i.key == key),
            _ => None,
        })
    }

    /// History was rebuilt after a start, with the pause found in the log
    /// (if any). The waiters that queued meanwhile are handed back in
    /// arrival order, for the arrival rules to run on each in turn.
    pub fn recovered(&mut self, pause: Option<Pause>) -> Vec<Waiter> {
        self.holder = match pause {
            Some(p) => Holder::Paused(p),
            None => Holder::Free,
        };
        self.queue.drain(..).collect()
    }

    /// The rebuild failed: the gate is free again and every waiter is
    /// handed back to be refused.
    pub fn recovery_failed(&mut self) -> Vec<Waiter> {
        self.holder = Holder::Free;
        self.queue.drain(..).collect()
    }

    /// The session closed, or shutdown began: every waiter leaves.
    pub fn drain(&mut self) -> Vec<Waiter> {
        self.queue.drain(..).collect()
    }

    /// Waiters whose 1-based position differs from the one last told, as
    /// `(stream, position)`; they count as told from now on.
    pub fn position_changes(&mut self) -> Vec<(ConnId, usize)> {
        let mut changed = Vec::new();
        for (i, w) in self.queue.iter_mut().enumerate() {
            if w.told != i + 1 {
                w.told = i + 1;
                changed.push((w.conn, i + 1));
            }
        }
        changed
    }

    /// The parked pause, leaving the gate free (`None` if none is parked).
    fn take_pause(&mut self) -> Option<Pause> {
        match std::mem::take(&mut self.holder) {
            Holder::Paused(p) => Some(p),
            other => {
                self.holder = other;
                None
            }
        }
    }

    fn start(&mut self, waiter: Waiter, takeover: Takeover) -> Start {
        self.holder = Holder::Running;
        Start { waiter, takeover }
    }

    /// Hands a free gate, or an expired pause, to the oldest waiter whose
    /// connection is still there.
    fn admit_next(&mut self, now: MonoMs, alive: impl Fn(ConnId) -> bool) -> Option<Start> {
        loop {
            let retire = match &self.holder {
                Holder::Free => false,
                Holder::Paused(p) if p.deadline <= now => true,
                _ => return None,
            };
            let w = if self.faults.admit_newest_waiter() {
                self.queue.pop_back()
            } else {
                self.queue.pop_front()
            };
            let w = w?;
            if !alive(w.conn) {
                continue;
            }
            let takeover = match retire.then(|| self.take_pause()).flatten() {
                Some(p) => Takeover::Retire(p),
                None => Takeover::Fresh,
            };
            return Some(self.start(w, takeover));
        }
    }
}
