//! Per client key and per profile quotas (docs/extensions.md, "Quotas"):
//! sessions open at once, requests per second (a token bucket with a
//! burst) and a token budget over a window. Off unless an operator sets a
//! quota through the admin API; without one every check passes and
//! nothing is counted but the open sessions (so a quota set later starts
//! from the true figure).
//!
//! Both scopes apply: a request of a key with its own quota and a profile
//! quota must pass both (a profile's figures are shared by all its keys).
//!
//! A component of the catalogue with its own vocabulary: the catalogue
//! asks [`Quotas::admit_request`], [`Quotas::admit_session`] and
//! [`Quotas::admit_turn`] before acting, reports sessions opened and
//! closed and the tokens each provider reply reported, and renders
//! [`Quotas::status`]. Time arrives as an argument: the buckets run on the
//! engine's monotonic clock, the budget windows on the wall clock (they
//! are aligned to the Unix epoch, so `1d` is a UTC day on every replica).

mod spec;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use spec::{from_stored, parse, render_window, Quota, QuotaError};

pub use crate::store::QuotaScope as Scope;
use crate::time::{MonoMs, UnixMs};
use crate::token_bucket::Bucket;

/// The tokens a budget counts of a reply's usage: input, output and both
/// cache kinds, as the provider reported them.
pub fn billed(t: &proto::provider::Tokens) -> u64 {
    (t.input)
        .saturating_add(t.output)
        .saturating_add(t.cache_write)
        .saturating_add(t.cache_read)
}

/// Which quota refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rate,
    OpenSessions,
    TokenBudget,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Rate, Kind::OpenSessions, Kind::TokenBudget];

    /// The quota's field name: the `quota` member of a refusal, the
    /// `kind` label in `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Rate => "requests_per_second",
            Kind::OpenSessions => "max_open_sessions",
            Kind::TokenBudget => "token_budget",
        }
    }
}

/// A refused request, with what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: Kind,
    pub scope: Scope,
    pub limit: u64,
    /// The window in ms (`1000` for a rate, `None` for open sessions).
    pub window_ms: Option<u64>,
    /// When a retry may pass (`None` for open sessions: when one closes).
    pub retry_after_ms: Option<u64>,
}

impl Refusal {
    /// `Retry-After` in whole seconds, at least one.
    pub fn retry_after_s(&self) -> Option<u64> {
        self.retry_after_ms.map(|ms| ms.div_ceil(1000).max(1))
    }

    /// The human text of the refusal (problem `detail`, JSON-RPC message).
    pub fn detail(&self) -> String {
        let whose = match &self.scope {
            Scope::Key(id) => format!("client key {id}"),
            Scope::Profile(id) => format!("profile {id}"),
        };
        match self.kind {
            Kind::Rate => format!(
                "quota_exceeded: {whose} is over its {} requests per second",
                self.limit
            ),
            Kind::OpenSessions => format!(
                "quota_exceeded: {whose} has its {} open sessions; close one first",
                self.limit
            ),
            Kind::TokenBudget => format!(
                "quota_exceeded: {whose} has used its token budget of {} for this {} window",
                self.limit,
                self.window_ms.map(render_window).unwrap_or_default()
            ),
        }
    }

    /// The members shared by the problem body and the JSON-RPC `data`:
    /// `retry_after_ms`, `limit`, `window`, `quota`, `scope`, `id`.
    pub fn data(&self) -> serde_json::Value {
        let (scope, id) = (self.scope.kind(), self.scope.id());
        serde_json::json!({
            "retry_after_ms": self.retry_after_ms,
            "limit": self.limit,
            "window": self.window_ms.map(render_window),
            "quota": self.kind.as_str(),
            "scope": scope,
            "id": id,
        })
    }
}

/// Tokens used in the current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Window {
    start_ms: u64,
    used: u64,
}

#[derive(Debug)]
struct Held {
    quota: Quota,
    bucket: Option<Bucket>,
    window: Window,
}

impl Held {
    fn new(quota: Quota, now: MonoMs) -> Self {
        let bucket = quota
            .requests_per_second
            .map(|r| Bucket::with_burst(r, 1000, quota.burst.unwrap_or(r), now));
        Held {
            quota,
            bucket,
            window: Window::default(),
        }
    }

    /// The window at `unix`, rolled over when it has ended.
    fn window(&mut self, unix: UnixMs) -> Option<(u64, &mut Window)> {
        let len = self.quota.window_ms?;
        let start = unix.0 - unix.0 % len.max(1);
        if self.window.start_ms != start {
            self.window = Window {
                start_ms: start,
                used: 0,
            };
        }
        Some((len, &mut self.window))
    }
}

/// One scope's quota and consumption (admin answers, the console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub scope: Scope,
    pub quota: Quota,
    pub open_sessions: u64,
    pub requests_available: Option<u64>,
    /// Tokens used in the current window, and when it started (unix ms).
    pub tokens_used: Option<u64>,
    pub window_start_ms: Option<u64>,
}

/// An open-session count restored at start.
pub use crate::store::OpenCount;

/// Every scope's quota, buckets, windows and open-session counts.
#[derive(Debug, Default)]
pub struct Quotas {
    held: BTreeMap<Scope, Held>,
    /// Open sessions by creator key and by profile (every scope, quota or
    /// not).
    open: BTreeMap<Scope, u64>,
    /// Refusals by [`Kind::ALL`] order.
    refused: [u64; 3],
    /// Replica mode: how often budgets re-read the store, and when next.
    refresh: Option<(u64, MonoMs)>,
}

/// Replica mode: the interval of [`Quotas::take_refresh`].
pub const REFRESH_MS: u64 = 1000;

impl Quotas {
    /// The quotas and open-session counts a store holds; unreadable
    /// stored quotas are skipped with an error log.
    pub fn restore(rows: &[crate::store::QuotaRow], open: &[OpenCount], now: MonoMs) -> Self {
        let mut q = Quotas::default();
        for row in rows {
            match spec::from_stored(&row.quota) {
                Ok(quota) => q.set(row.scope.clone(), quota, now),
                Err(e) => tracing::error!(scope = ?row.scope, error = %e, "stored quota skipped"),
            }
        }
        for c in open {
            *q.open
                .entry(Scope::Key(c.client_key_id.clone()))
                .or_default() += c.open;
            *q.open
                .entry(Scope::Profile(c.profile_id.clone()))
                .or_default() += c.open;
        }
        q
    }

    /// Replica mode: budgets re-read the store's usage every `every_ms`.
    pub fn refresh_every(&mut self, every_ms: u64, now: MonoMs) {
        self.refresh = Some((every_ms, MonoMs(now.0.saturating_add(every_ms))));
    }

    /// When budgets are next re-read (`None`: no budget, or not replicas).
    pub fn next_refresh(&self) -> Option<MonoMs> {
        let (_, at) = self.refresh?;
        (self.held.values().any(|h| h.quota.token_budget.is_some())).then_some(at)
    }

    /// The budgeted scopes to re-read now, if due.
    pub fn take_refresh(&mut self, now: MonoMs) -> Vec<Scope> {
        match self.refresh {
            Some((every, at)) if now >= at => {
                self.refresh = Some((every, MonoMs(now.0.saturating_add(every))));
                self.budgeted()
            }
            _ => Vec::new(),
        }
    }

    /// Whether any quota is set (a cheap test on hot paths).
    pub fn is_on(&self) -> bool {
        !self.held.is_empty()
    }

    /// Sets (or replaces) a scope's quota; its bucket starts full and its
    /// window's usage is unknown until [`Quotas::seed`].
    pub fn set(&mut self, scope: Scope, quota: Quota, now: MonoMs) {
        let mut held = Held::new(quota, now);
        // A replaced quota with the same window keeps its count.
        if let Some(old) = self.held.get(&scope) {
            if old.quota.window_ms == quota.window_ms {
                held.window = old.window;
            }
        }
        self.held.insert(scope, held);
    }

    pub fn remove(&mut self, scope: &Scope) -> bool {
        self.held.remove(scope).is_some()
    }

    pub fn get(&self, scope: &Scope) -> Option<Quota> {
        self.held.get(scope).map(|h| h.quota)
    }

    /// The store's sum of `scope`'s tokens since `since_ms` (the start of
    /// the window asked with [`Quotas::window_start`]); the larger of it and
    /// the count held wins, so a reply credited meanwhile is not lost.
    pub fn seed(&mut self, scope: &Scope, since_ms: u64, used: u64) {
        if let Some(h) = self.held.get_mut(scope) {
            if h.window.start_ms == since_ms {
                h.window.used = h.window.used.max(used);
            } else if h.quota.window_ms.is_some() && since_ms > h.window.start_ms {
                h.window = Window {
                    start_ms: since_ms,
                    used,
                };
            }
        }
    }

    /// The start of `scope`'s current budget window (`None`: no budget).
    pub fn window_start(&mut self, scope: &Scope, unix: UnixMs) -> Option<u64> {
        let h = self.held.get_mut(scope)?;
        h.quota.token_budget?;
        h.window(unix).map(|(_, w)| w.start_ms)
    }

    /// Scopes with a token budget (their usage is read at start).
    pub fn budgeted(&self) -> Vec<Scope> {
        (self.held.iter())
            .filter(|(_, h)| h.quota.token_budget.is_some())
            .map(|(s, _)| s.clone())
            .collect()
    }

    fn scopes(key: &str, profile: Option<&str>) -> [Option<Scope>; 2] {
        [
            Some(Scope::Key(key.to_string())),
            profile.map(|p| Scope::Profile(p.to_string())),
        ]
    }

    fn refuse(&mut self, r: Refusal) -> Result<(), Refusal> {
        if let Some(n) = self.refused.get_mut(r.kind as usize) {
            *n += 1;
        }
        Err(r)
    }

    /// A request of `key` (of `profile`): one token from each bucket that
    /// applies, or the refusal of the first that is empty (then none is
    /// taken).
    pub fn admit_request(
        &mut self,
        key: &str,
        profile: Option<&str>,
        now: MonoMs,
    ) -> Result<(), Refusal> {
        if !self.is_on() {
            return Ok(());
        }
        let mut takers = Vec::new();
        for scope in Self::scopes(key, profile).into_iter().flatten() {
            let Some(h) = self.held.get_mut(&scope) else {
                continue;
            };
            let Some(b) = h.bucket.as_mut() else { continue };
            let wait = b.wait_ms(now, 1);
            if wait > 0 {
                let limit = b.rate();
                return self.refuse(Refusal {
                    kind: Kind::Rate,
                    scope,
                    limit,
                    window_ms: Some(1000),
                    retry_after_ms: Some(wait),
                });
            }
            takers.push(scope);
        }
        for scope in takers {
            if let Some(b) = self.held.get_mut(&scope).and_then(|h| h.bucket.as_mut()) {
                b.take(now, 1);
            }
        }
        Ok(())
    }

    /// Whether `key` (of `profile`) may open one more session.
    pub fn admit_session(&mut self, key: &str, profile: Option<&str>) -> Result<(), Refusal> {
        if !self.is_on() {
            return Ok(());
        }
        for scope in Self::scopes(key, profile).into_iter().flatten() {
            let Some(max) = self
                .held
                .get(&scope)
                .and_then(|h| h.quota.max_open_sessions)
            else {
                continue;
            };
            if self.open.get(&scope).copied().unwrap_or(0) >= max {
                return self.refuse(Refusal {
                    kind: Kind::OpenSessions,
                    scope,
                    limit: max,
                    window_ms: None,
                    retry_after_ms: None,
                });
            }
        }
        Ok(())
    }

    /// Whether `key` (of `profile`) may start a turn: no budget that
    /// applies is used up in its current window.
    pub fn admit_turn(
        &mut self,
        key: &str,
        profile: Option<&str>,
        unix: UnixMs,
    ) -> Result<(), Refusal> {
        if !self.is_on() {
            return Ok(());
        }
        for scope in Self::scopes(key, profile).into_iter().flatten() {
            let Some(h) = self.held.get_mut(&scope) else {
                continue;
            };
            let Some(budget) = h.quota.token_budget else {
                continue;
            };
            let Some((len, w)) = h.window(unix) else {
                continue;
            };
            if w.used >= budget {
                let end = w.start_ms.saturating_add(len);
                return self.refuse(Refusal {
                    kind: Kind::TokenBudget,
                    scope,
                    limit: budget,
                    window_ms: Some(len),
                    retry_after_ms: Some(end.saturating_sub(unix.0).max(1)),
                });
            }
        }
        Ok(())
    }

    pub fn session_opened(&mut self, key: &str, profile: &str) {
        for scope in Self::scopes(key, Some(profile)).into_iter().flatten() {
            *self.open.entry(scope).or_default() += 1;
        }
    }

    pub fn session_closed(&mut self, key: &str, profile: &str) {
        for scope in Self::scopes(key, Some(profile)).into_iter().flatten() {
            if let Some(n) = self.open.get_mut(&scope) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.open.remove(&scope);
                }
            }
        }
    }

    /// Tokens a provider reply reported for a turn of `key` (of `profile`).
    pub fn credit(&mut self, key: &str, profile: &str, tokens: u64, unix: UnixMs) {
        if !self.is_on() {
            return;
        }
        for scope in Self::scopes(key, Some(profile)).into_iter().flatten() {
            if let Some((_, w)) = self.held.get_mut(&scope).and_then(|h| h.window(unix)) {
                w.used = w.used.saturating_add(tokens);
            }
        }
    }

    /// One scope's figures (`None`: no quota set).
    pub fn status_of(&mut self, scope: &Scope, now: MonoMs, unix: UnixMs) -> Option<Status> {
        let open_sessions = self.open.get(scope).copied().unwrap_or(0);
        let h = self.held.get_mut(scope)?;
        let requests_available = h.bucket.as_mut().map(|b| b.available(now));
        let window = h
            .quota
            .token_budget
            .and_then(|_| h.window(unix))
            .map(|(_, w)| *w);
        Some(Status {
            scope: scope.clone(),
            quota: h.quota,
            open_sessions,
            requests_available,
            tokens_used: window.map(|w| w.used),
            window_start_ms: window.map(|w| w.start_ms),
        })
    }

    /// Every scope with a quota, keys first, in id order.
    pub fn status(&mut self, now: MonoMs, unix: UnixMs) -> Vec<Status> {
        let scopes: Vec<Scope> = self.held.keys().cloned().collect();
        (scopes.iter())
            .filter_map(|s| self.status_of(s, now, unix))
            .collect()
    }

    /// Refusals so far by [`Kind::ALL`] order.
    pub fn refused(&self) -> [u64; 3] {
        self.refused
    }
}

impl Status {
    /// The admin answer: the quota as set and its consumption now.
    pub fn to_json(&self) -> serde_json::Value {
        let (scope, id) = (self.scope.kind(), self.scope.id());
        serde_json::json!({
            "scope": scope,
            "id": id,
            "quota": self.quota.to_json(),
            "usage": {
                "open_sessions": self.open_sessions,
                "requests_available": self.requests_available,
                "tokens_used": self.tokens_used,
                "window_start": self.window_start_ms
                    .map(proto::wire::time::format_created_at),
            },
        })
    }
}
