//! Which sessions the catalogue holds (`BAE_RESIDENT_SESSIONS`).
//!
//! Sessions live in the store; the catalogue holds those in use, and at
//! most `budget` idle ones besides, the most recently used. An idle session
//! beyond the budget is evicted: its record, session keys and driver
//! registrations leave memory, and the next request naming it loads them
//! back with one store read (`crate::placement`), as a restart would,
//! except that registrations made by this process come back too. A session
//! is in use (pinned) while anything refers to it: a runtime entry (gate,
//! turn, cached history), an open stream, MCP connections, a sandbox, a
//! create waiting for its MCP servers; the engine decides, this component
//! only orders the candidates.
//!
//! The order is a queue of touches, oldest first: touching a session
//! stamps it with a new tick and queues `(tick, id)`; an entry whose tick
//! is no longer its session's is stale and skipped.

use std::collections::{BTreeMap, VecDeque};

use crate::ids::SessionId;
use crate::store::{SessionCounts, SessionState};
use crate::time::MonoMs;

/// How long an eviction pass that found only pinned sessions waits before
/// trying again (unless a session is added first).
pub const RETRY_MS: u64 = 1_000;

/// Pops a pass may spend on pinned sessions before it gives up.
pub const PINNED_PER_PASS: usize = 64;

#[derive(Debug)]
pub struct Residency {
    /// Idle sessions kept beyond the pinned ones; `None`: every session is
    /// held (and a start loads them all).
    budget: Option<usize>,
    queue: VecDeque<(u64, SessionId)>,
    tick: u64,
    /// Sessions in the store and not in the catalogue, by state, and their
    /// driver registrations (the gauges count them too).
    pub stored: SessionCounts,
    /// The last pass found only pinned sessions: the next waits for an
    /// added session or this deadline.
    stalled_until: Option<MonoMs>,
    /// Reads in flight that must see every session they name stay put
    /// (the revocation cascade): no eviction meanwhile.
    holds: u32,
    /// Loads in flight per session. Such a session stays once it is back
    /// (another load brought it): a later answer read before that one's
    /// changes must find it held, never replace it.
    loading: BTreeMap<String, u32>,
}

impl Residency {
    pub fn new(budget: Option<usize>) -> Self {
        Residency {
            budget,
            queue: VecDeque::new(),
            tick: 0,
            stored: SessionCounts::default(),
            stalled_until: None,
            holds: 0,
            loading: BTreeMap::new(),
        }
    }

    /// Whether sessions may be out of the catalogue (and loaded on use).
    pub fn lazy(&self) -> bool {
        self.budget.is_some()
    }

    /// `id` was used: it becomes the most recent. Returns its new tick (the
    /// session record keeps it).
    pub fn touch(&mut self, id: &SessionId) -> u64 {
        if self.budget.is_none() {
            return 0;
        }
        self.tick += 1;
        self.queue.push_back((self.tick, id.clone()));
        self.tick
    }

    /// A session was added to the catalogue (created or loaded): a stalled
    /// pass may now find work.
    pub fn added(&mut self) {
        self.stalled_until = None;
    }

    /// A session left the catalogue for the store.
    pub fn evicted(&mut self, state: SessionState, drivers: usize) {
        self.stored.total += 1;
        if state == SessionState::Open {
            self.stored.open += 1;
        }
        self.stored.drivers += drivers as u64;
    }

    /// A stored session came back into the catalogue.
    pub fn loaded(&mut self, state: SessionState, drivers: usize) {
        self.stored.total = self.stored.total.saturating_sub(1);
        if state == SessionState::Open {
            self.stored.open = self.stored.open.saturating_sub(1);
        }
        self.stored.drivers = self.stored.drivers.saturating_sub(drivers as u64);
        self.added();
    }

    /// A load of `id` was asked for.
    pub fn loading(&mut self, id: &str) {
        *self.loading.entry(id.to_string()).or_default() += 1;
    }

    /// A load of `id` was answered.
    pub fn loaded_answer(&mut self, id: &str) {
        if let Some(n) = self.loading.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                self.loading.remove(id);
            }
        }
    }

    /// Whether a load of `id` is in flight.
    pub fn is_loading(&self, id: &str) -> bool {
        self.loading.contains_key(id)
    }

    pub fn hold(&mut self) {
        self.holds += 1;
    }

    pub fn release(&mut self) {
        self.holds = self.holds.saturating_sub(1);
    }

    /// How many sessions must leave for `resident` to fit the budget, now
    /// (0 when none, or while a pass is stalled or a hold is in place).
    pub fn excess(&mut self, resident: usize, now: MonoMs) -> usize {
        let Some(budget) = self.budget else {
            return 0;
        };
        match self.stalled_until {
            Some(t) if now < t => return 0,
            // Due: the deadline is spent whatever this pass finds.
            Some(_) => self.stalled_until = None,
            None => {}
        }
        if self.holds > 0 {
            return 0;
        }
        resident.saturating_sub(budget)
    }

    /// The oldest queued touch.
    pub fn pop(&mut self) -> Option<(u64, SessionId)> {
        self.queue.pop_front()
    }

    /// The pass gave up on pinned sessions at `now`.
    pub fn stall(&mut self, now: MonoMs) {
        self.stalled_until = Some(now + RETRY_MS);
    }

    /// When a stalled pass is due again.
    pub fn next_deadline(&self) -> Option<MonoMs> {
        self.stalled_until
    }

    /// Drops stale entries once they outnumber the live ones (`current`
    /// says whether an entry is its session's latest touch).
    pub fn compact(&mut self, resident: usize, current: impl Fn(u64, &SessionId) -> bool) {
        if self.queue.len() > 2 * resident + 64 {
            self.queue.retain(|(t, id)| current(*t, id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keep_all_residency_never_evicts_or_queues() {
        let mut r = Residency::new(None);
        assert!(!r.lazy());
        assert_eq!(r.touch(&SessionId::new("ses_a")), 0);
        assert_eq!(r.excess(1_000_000, MonoMs(0)), 0);
        assert!(r.pop().is_none());
    }

    #[test]
    fn touches_come_back_oldest_first_with_their_ticks() {
        let mut r = Residency::new(Some(1));
        let (a, b) = (SessionId::new("ses_a"), SessionId::new("ses_b"));
        let ta = r.touch(&a);
        let tb = r.touch(&b);
        let ta2 = r.touch(&a);
        assert!(ta < tb && tb < ta2);
        assert_eq!(r.excess(2, MonoMs(0)), 1);
        assert_eq!(r.pop(), Some((ta, a.clone())));
        assert_eq!(r.pop(), Some((tb, b)));
        assert_eq!(r.pop(), Some((ta2, a)));
    }

    #[test]
    fn a_stalled_pass_waits_for_a_new_session_or_its_deadline() {
        let mut r = Residency::new(Some(0));
        r.stall(MonoMs(10));
        assert_eq!(r.excess(5, MonoMs(11)), 0);
        assert_eq!(r.next_deadline(), Some(MonoMs(10 + RETRY_MS)));
        assert_eq!(r.excess(5, MonoMs(10 + RETRY_MS)), 5);
        assert_eq!(r.next_deadline(), None, "a due deadline is spent");
        r.stall(MonoMs(20));
        r.added();
        assert_eq!(r.excess(5, MonoMs(21)), 5);
        r.hold();
        assert_eq!(r.excess(5, MonoMs(21)), 0);
        r.release();
        assert_eq!(r.excess(5, MonoMs(21)), 5);
    }

    #[test]
    fn stored_counts_follow_evictions_and_loads() {
        let mut r = Residency::new(Some(0));
        r.evicted(SessionState::Open, 2);
        r.evicted(SessionState::Closed, 0);
        assert_eq!((r.stored.total, r.stored.open, r.stored.drivers), (2, 1, 2));
        r.loaded(SessionState::Open, 2);
        assert_eq!((r.stored.total, r.stored.open, r.stored.drivers), (1, 0, 0));
    }

    #[test]
    fn stale_entries_are_compacted_once_they_dominate() {
        let mut r = Residency::new(Some(0));
        let a = SessionId::new("ses_a");
        let mut last = 0;
        for _ in 0..200 {
            last = r.touch(&a);
        }
        r.compact(1, |t, _| t == last);
        assert_eq!(r.pop(), Some((last, a)));
        assert!(r.pop().is_none());
    }
}
