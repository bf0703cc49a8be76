//! Which sessions keep their provider-facing history in memory.
//!
//! A session's history is cached from its first turn on, so that the next
//! turn needs no store read. Kept for every session that ever ran a turn,
//! those caches are most of a busy server's heap. This component decides
//! which caches to drop: a session whose gate is free and has no waiters is
//! *idle*; an idle session's cache is dropped once it has been idle for
//! [`Limits::idle_ms`], or at once, oldest idle first, while the caches
//! together weigh more than [`Limits::budget_bytes`]. A dropped cache is
//! rebuilt from the log by the next arrival, exactly as after a restart
//! (`turn::recover`), so dropping one never changes what a client sees.
//!
//! Weights are the heap a cached history's text takes
//! (`proto::provider::HistoryText::weight`, about its bytes); the engine
//! reports them as histories load and grow.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::SessionId;
use crate::MonoMs;

/// `BAE_HISTORY_CACHE_BYTES` unless configured: 1 MiB. Sessions with a
/// turn in flight keep their histories whatever the budget; it bounds only
/// what idle ones hold. Reading a dropped history back costs a few store
/// reads (3.6 ms per turn on average over a 1,000-turn session when every
/// turn must read it back), small beside the provider call of the turn that
/// needs it, while every idle history kept is heap the server does not give
/// back after load (docs/performance.md, "Defaults and store costs, measured").
pub const DEFAULT_BUDGET_BYTES: usize = 1024 * 1024;
/// `BAE_HISTORY_IDLE` unless configured: 30 s.
pub const DEFAULT_IDLE_MS: u64 = 30_000;

/// When cached histories are dropped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Estimated bytes all cached histories may weigh before idle ones are
    /// dropped, oldest idle first.
    pub budget_bytes: usize,
    /// How long an idle session keeps its cache (0: dropped as soon as the
    /// session is idle).
    pub idle_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            budget_bytes: DEFAULT_BUDGET_BYTES,
            idle_ms: DEFAULT_IDLE_MS,
        }
    }
}

#[derive(Debug, Default)]
struct Entry {
    bytes: usize,
    /// When the session last became idle (`None`: busy).
    idle_since: Option<MonoMs>,
}

/// The bookkeeping of every cached history: its weight and idleness.
#[derive(Debug, Default)]
pub struct HistoryCache {
    limits: Limits,
    total: usize,
    entries: BTreeMap<SessionId, Entry>,
    /// Idle sessions by the time they became idle.
    idle: BTreeSet<(MonoMs, SessionId)>,
}

impl HistoryCache {
    pub fn new(limits: Limits) -> Self {
        HistoryCache {
            limits,
            ..HistoryCache::default()
        }
    }

    /// Estimated bytes of every cached history.
    pub fn total_bytes(&self) -> usize {
        self.total
    }

    /// Cached histories being tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `id`'s history was (re)built with this weight; the session is busy.
    pub fn loaded(&mut self, id: &SessionId, bytes: usize) {
        self.busy(id);
        let e = self.entries.entry(id.clone()).or_default();
        self.total = self.total - e.bytes + bytes;
        e.bytes = bytes;
    }

    /// A message of this weight was appended to `id`'s cached history.
    pub fn grew(&mut self, id: &str, bytes: usize) {
        if let Some(e) = self.entries.get_mut(id) {
            e.bytes += bytes;
            self.total += bytes;
        }
    }

    /// `id` is in use (an arrival, a turn): its cache must stay.
    pub fn busy(&mut self, id: &str) {
        if let Some((key, e)) = self.entries.get_key_value(id) {
            if let Some(since) = e.idle_since {
                let key = key.clone();
                self.idle.remove(&(since, key));
            }
        }
        if let Some(e) = self.entries.get_mut(id) {
            e.idle_since = None;
        }
    }

    /// `id`'s gate is free with nobody waiting, as of `now`.
    pub fn idle(&mut self, id: &str, now: MonoMs) {
        let Some((key, e)) = self.entries.get_key_value(id) else {
            return;
        };
        if e.idle_since.is_some() {
            return;
        }
        let key = key.clone();
        self.idle.insert((now, key.clone()));
        if let Some(e) = self.entries.get_mut(&key) {
            e.idle_since = Some(now);
        }
    }

    /// `id`'s cache is gone (dropped, failed, or the session closed).
    pub fn forget(&mut self, id: &str) {
        self.busy(id);
        if let Some(e) = self.entries.remove(id) {
            self.total -= e.bytes;
        }
    }

    /// Sessions whose caches go now, oldest idle first; they are forgotten.
    pub fn evictions(&mut self, now: MonoMs) -> Vec<SessionId> {
        let mut out = Vec::new();
        while let Some((since, id)) = self.idle.first().cloned() {
            let expired = now.0.saturating_sub(since.0) >= self.limits.idle_ms;
            if !expired && self.total <= self.limits.budget_bytes {
                break;
            }
            self.forget(&id);
            out.push(id);
        }
        out
    }

    /// When the oldest idle cache expires (`None` also when that is past
    /// the end of time: an idle time of `u64::MAX` keeps caches for good).
    pub fn next_deadline(&self) -> Option<MonoMs> {
        let (since, _) = self.idle.first()?;
        since.0.checked_add(self.limits.idle_ms).map(MonoMs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SessionId {
        SessionId::from(s)
    }

    fn cache(budget_bytes: usize, idle_ms: u64) -> HistoryCache {
        HistoryCache::new(Limits {
            budget_bytes,
            idle_ms,
        })
    }

    #[test]
    fn a_busy_cache_is_never_dropped_however_heavy() {
        let mut c = cache(10, 5);
        c.loaded(&id("a"), 1_000);
        assert!(c.evictions(MonoMs(1_000_000)).is_empty());
        assert_eq!(c.next_deadline(), None);
        assert_eq!(c.total_bytes(), 1_000);
    }

    #[test]
    fn an_idle_cache_goes_after_the_idle_time_not_before() {
        let mut c = cache(1 << 20, 100);
        c.loaded(&id("a"), 10);
        c.idle("a", MonoMs(50));
        assert_eq!(c.next_deadline(), Some(MonoMs(150)));
        assert!(c.evictions(MonoMs(149)).is_empty());
        assert_eq!(c.evictions(MonoMs(150)), vec![id("a")]);
        assert!(c.is_empty());
        assert_eq!(c.total_bytes(), 0);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn over_budget_the_oldest_idle_go_first_until_it_fits() {
        let mut c = cache(15, 1_000);
        for (n, at) in [("a", 1), ("b", 2), ("c", 3)] {
            c.loaded(&id(n), 10);
            c.idle(n, MonoMs(at));
        }
        assert_eq!(c.evictions(MonoMs(4)), vec![id("a"), id("b")]);
        assert_eq!(c.next_deadline(), Some(MonoMs(1_003)));
        let mut forever = cache(usize::MAX, u64::MAX);
        forever.loaded(&id("a"), 1);
        forever.idle("a", MonoMs(5));
        assert_eq!(forever.next_deadline(), None);
        assert_eq!(c.total_bytes(), 10);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn busy_again_leaves_the_idle_order_and_keeps_its_weight() {
        let mut c = cache(0, 1_000);
        c.loaded(&id("a"), 10);
        c.idle("a", MonoMs(1));
        c.busy("a");
        c.grew("a", 5);
        assert!(c.evictions(MonoMs(5_000)).is_empty());
        assert_eq!(c.total_bytes(), 15);
        // Idle again: the idle time counts from the new moment.
        c.idle("a", MonoMs(6_000));
        c.idle("a", MonoMs(6_500));
        assert_eq!(c.next_deadline(), Some(MonoMs(7_000)));
    }

    #[test]
    fn reloading_replaces_the_weight_and_forget_subtracts_it() {
        let mut c = cache(1 << 20, 1_000);
        c.loaded(&id("a"), 10);
        c.loaded(&id("b"), 7);
        c.loaded(&id("a"), 3);
        assert_eq!(c.total_bytes(), 10);
        c.forget("b");
        c.forget("b");
        assert_eq!(c.total_bytes(), 3);
        c.grew("b", 100);
        assert_eq!(c.total_bytes(), 3, "an untracked session does not count");
    }
}
