//! Shared provider limits (docs/extensions.md, "Provider traffic"): per
//! registry entry, a cap on calls in flight, requests per minute and input
//! tokens per minute (token buckets), with one FIFO queue per entry across
//! all sessions, so no session can starve another; and the timers of calls
//! that must not leave before a time (a retry's advised or backed-off
//! wait), for every entry, limited or not.
//!
//! A component with its own vocabulary: the engine [`ProviderLimits::ask`]s
//! for a call's slot, reports it [`ProviderLimits::done`] (answered,
//! aborted, or abandoned), ticks it, and routes its [`Notice`]s to the
//! session cores whose calls they name. It never sees a request body, a
//! session's turn or a clock: time arrives as an argument.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::token_bucket::Bucket;

use crate::faults::Faults;
use crate::ids::{IdMap, SessionId};
use crate::{CallId, MonoMs};

/// One entry's limits (`limits` in a `[[providers.entries]]` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryLimits {
    /// Calls in flight at once.
    pub max_concurrent: Option<u32>,
    /// Requests per minute (a bucket of that many, refilled continuously).
    pub requests_per_minute: Option<u64>,
    /// Estimated input tokens per minute ([`estimate_tokens`]), corrected
    /// by the usage each reply reports.
    pub input_tokens_per_minute: Option<u64>,
    /// How long a call may wait in the queue; past it, its attempt fails
    /// and the fallback walk goes on.
    pub max_wait_ms: u64,
}

/// Default [`EntryLimits::max_wait_ms`].
pub const DEFAULT_MAX_WAIT_MS: u64 = 60_000;

/// The input tokens a request is charged before its reply tells: a
/// quarter of its body's bytes, at least one (JSON text runs at about four
/// bytes a token; the reply's usage settles the difference).
pub fn estimate_tokens(body_len: usize) -> u64 {
    (body_len as u64 / 4).max(1)
}

/// A call asking for its slot.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    pub call: CallId,
    pub session: SessionId,
    /// Its registry entry's name.
    pub entry: &'a str,
    /// [`estimate_tokens`] of its body.
    pub tokens: u64,
    /// Not before this time (a retry's wait).
    pub not_before: Option<MonoMs>,
}

/// The answer to an [`Ask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Leave now (a limited entry's slot is held until `done`).
    Go,
    /// Wait for a [`Notice`].
    Wait,
}

/// What became of a waiting call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// It may leave now.
    Go { call: CallId, session: SessionId },
    /// It waited in its entry's queue past the bound: its attempt fails.
    Expired {
        call: CallId,
        session: SessionId,
        waited_ms: u64,
    },
}

/// One entry's figures (`/metrics`, the console).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryStatus {
    pub name: String,
    pub limits: Option<EntryLimits>,
    pub in_flight: u32,
    /// Calls waiting in its queue.
    pub queued: usize,
    /// Calls waiting out a retry delay.
    pub sleeping: usize,
    /// How long the oldest queued call has waited.
    pub oldest_wait_ms: u64,
    /// Calls that left through the queue (limited entries).
    pub admitted_total: u64,
    /// Calls whose wait passed the bound.
    pub expired_total: u64,
    /// Retries of failed attempts (the entry's retry policy).
    pub retries_total: u64,
    /// Requests and input tokens left in the buckets now.
    pub requests_available: Option<u64>,
    pub tokens_available: Option<u64>,
}

#[derive(Debug)]
enum Stage {
    Sleeping(MonoMs),
    Queued { since: MonoMs },
    InFlight,
}

#[derive(Debug)]
struct Ticket {
    session: SessionId,
    entry: String,
    tokens: u64,
    stage: Stage,
}

#[derive(Debug)]
struct Entry {
    limits: EntryLimits,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    in_flight: u32,
    queue: VecDeque<CallId>,
    /// When the head of the queue is next worth a look.
    wake: Option<MonoMs>,
    admitted_total: u64,
    expired_total: u64,
}

/// Every entry's limits, queues and the retry timers.
#[derive(Debug, Default)]
pub struct ProviderLimits {
    entries: BTreeMap<String, Entry>,
    /// Every entry name, limited or not, for the status listing, with its
    /// retries so far.
    names: Vec<(String, u64)>,
    tickets: IdMap<CallId, Ticket>,
    sleeping: BTreeSet<(MonoMs, CallId)>,
    notices: VecDeque<Notice>,
    /// A simulator's planted bug, if any (none in production builds).
    faults: Faults,
}

impl ProviderLimits {
    /// The limits of each entry (`None`: unlimited) at `now`.
    pub fn new<'a>(
        entries: impl IntoIterator<Item = (&'a str, Option<EntryLimits>)>,
        now: MonoMs,
    ) -> Self {
        let mut me = ProviderLimits::default();
        for (name, limits) in entries {
            me.names.push((name.to_string(), 0));
            let Some(limits) = limits else { continue };
            let bucket = |n: Option<u64>| n.map(|n| Bucket::new(n, now));
            me.entries.insert(
                name.to_string(),
                Entry {
                    limits,
                    requests: bucket(limits.requests_per_minute),
                    tokens: bucket(limits.input_tokens_per_minute),
                    in_flight: 0,
                    queue: VecDeque::new(),
                    wake: None,
                    admitted_total: 0,
                    expired_total: 0,
                },
            );
        }
        me
    }

    /// The same, with `faults` planted (the simulator's self-test).
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Whether `entry` has limits (its calls must ask for a slot).
    pub fn limits(&self, entry: &str) -> bool {
        self.entries.contains_key(entry)
    }

    /// Whether anything at all is tracked (a cheap test on hot paths).
    pub fn is_idle(&self) -> bool {
        self.tickets.is_empty()
    }

    /// A call asks to leave.
    pub fn ask(&mut self, now: MonoMs, ask: Ask<'_>) -> Verdict {
        let ticket = Ticket {
            session: ask.session,
            entry: ask.entry.to_string(),
            tokens: ask.tokens,
            stage: Stage::InFlight,
        };
        if let Some(at) = ask.not_before.filter(|at| *at > now) {
            self.sleeping.insert((at, ask.call));
            let stage = Stage::Sleeping(at);
            self.tickets.insert(ask.call, Ticket { stage, ..ticket });
            return Verdict::Wait;
        }
        self.enter(now, ask.call, ticket)
    }

    /// A call is over: answered, aborted, abandoned, or its wait cancelled.
    /// `input_tokens` is the usage its reply reported. Unknown calls (an
    /// unlimited entry's, or one already done) are ignored.
    pub fn done(&mut self, now: MonoMs, call: CallId, input_tokens: Option<u64>) {
        let Some(t) = self.tickets.remove(&call) else {
            return;
        };
        match t.stage {
            Stage::Sleeping(at) => {
                self.sleeping.remove(&(at, call));
                return;
            }
            Stage::Queued { .. } => {
                if let Some(e) = self.entries.get_mut(&t.entry) {
                    e.queue.retain(|c| *c != call);
                }
            }
            Stage::InFlight => {
                if let Some(e) = self.entries.get_mut(&t.entry) {
                    e.in_flight = e.in_flight.saturating_sub(1);
                    if let (Some(b), Some(actual)) = (e.tokens.as_mut(), input_tokens) {
                        b.settle(now, t.tokens, actual);
                    }
                }
            }
        }
        self.pump(now, &t.entry);
    }

    /// The waiting calls of `session` leave (its turn was cancelled, or
    /// it closed), in call order. Calls in flight keep their slot until
    /// they are [`ProviderLimits::done`]: the provider is still serving
    /// them.
    pub fn leave(&mut self, now: MonoMs, session: &str) {
        let mut calls: Vec<CallId> = (self.tickets.iter())
            .filter(|(_, t)| t.session.as_str() == session)
            .filter(|(_, t)| !matches!(t.stage, Stage::InFlight))
            .map(|(c, _)| *c)
            .collect();
        calls.sort();
        for c in calls {
            self.done(now, c, None);
        }
    }

    /// Wakes retries whose time came, admits what the limits allow now,
    /// and expires calls that waited too long.
    pub fn tick(&mut self, now: MonoMs) {
        while let Some(&(at, call)) = self.sleeping.first() {
            if at > now {
                break;
            }
            self.sleeping.pop_first();
            let Some(t) = self.tickets.remove(&call) else {
                continue;
            };
            let session = t.session.clone();
            if self.enter(now, call, t) == Verdict::Go {
                self.notices.push_back(Notice::Go { call, session });
            }
        }
        let due: Vec<String> = (self.entries.iter())
            .filter(|(_, e)| e.wake.is_some_and(|w| w <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.pump(now, &name);
        }
    }

    /// The next time [`ProviderLimits::tick`] has something to do.
    pub fn poll_timeout(&self) -> Option<MonoMs> {
        let sleeping = self.sleeping.first().map(|(at, _)| *at);
        let entries = self.entries.values().filter_map(|e| e.wake);
        sleeping.into_iter().chain(entries).min()
    }

    /// The next waiting call's fate, in the order they were decided.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    /// A failed attempt on `entry` is tried again.
    pub fn note_retry(&mut self, entry: &str) {
        if let Some((_, n)) = self.names.iter_mut().find(|(name, _)| name == entry) {
            *n += 1;
        }
    }

    /// Every entry's figures, in registry order.
    pub fn status(&mut self, now: MonoMs) -> Vec<EntryStatus> {
        let mut sleeping: BTreeMap<&str, usize> = BTreeMap::new();
        for t in self.tickets.values() {
            if matches!(t.stage, Stage::Sleeping(_)) {
                *sleeping.entry(t.entry.as_str()).or_default() += 1;
            }
        }
        let mut out = Vec::with_capacity(self.names.len());
        for (name, retries) in &self.names {
            let retries_total = *retries;
            let asleep = sleeping.get(name.as_str()).copied().unwrap_or(0);
            let Some(e) = self.entries.get_mut(name) else {
                out.push(EntryStatus {
                    name: name.clone(),
                    limits: None,
                    in_flight: 0,
                    queued: 0,
                    sleeping: asleep,
                    oldest_wait_ms: 0,
                    admitted_total: 0,
                    expired_total: 0,
                    retries_total,
                    requests_available: None,
                    tokens_available: None,
                });
                continue;
            };
            let oldest = (e.queue.front())
                .and_then(|c| self.tickets.get(c))
                .and_then(|t| match t.stage {
                    Stage::Queued { since } => Some(now - since),
                    _ => None,
                })
                .unwrap_or(0);
            out.push(EntryStatus {
                name: name.clone(),
                limits: Some(e.limits),
                in_flight: e.in_flight,
                queued: e.queue.len(),
                sleeping: asleep,
                oldest_wait_ms: oldest,
                admitted_total: e.admitted_total,
                expired_total: e.expired_total,
                retries_total,
                requests_available: e.requests.as_mut().map(|b| b.available(now)),
                tokens_available: e.tokens.as_mut().map(|b| b.available(now)),
            });
        }
        out
    }

    /// `call` is ready to leave: straight away for an unlimited entry,
    /// else through its entry's queue. A `Go` answered here is the
    /// caller's to announce.
    fn enter(&mut self, now: MonoMs, call: CallId, mut t: Ticket) -> Verdict {
        let Some(e) = self.entries.get_mut(&t.entry) else {
            return Verdict::Go;
        };
        // The queue is pumped after every change, so a non-empty queue
        // means its head is blocked: a newcomer goes behind it.
        let one_over = self.faults.limiter_one_over();
        if e.queue.is_empty() && e.can_admit(now, t.tokens, one_over) {
            e.admit(now, t.tokens);
            t.stage = Stage::InFlight;
            self.tickets.insert(call, t);
            return Verdict::Go;
        }
        let name = t.entry.clone();
        e.queue.push_back(call);
        t.stage = Stage::Queued { since: now };
        self.tickets.insert(call, t);
        self.pump(now, &name);
        Verdict::Wait
    }

    /// Admits from the head of `name`'s queue while its limits allow, and
    /// expires what waited too long; then sets when to look again.
    fn pump(&mut self, now: MonoMs, name: &str) {
        let Some(e) = self.entries.get_mut(name) else {
            return;
        };
        let max_wait = e.limits.max_wait_ms;
        // Expire first (the queue is in arrival order, so from the front;
        // a call woken from a retry joins at the back with its own time).
        let mut i = 0;
        while let Some(call) = e.queue.get(i).copied() {
            let Some(t) = self.tickets.get(&call) else {
                e.queue.remove(i);
                continue;
            };
            let Stage::Queued { since } = t.stage else {
                e.queue.remove(i);
                continue;
            };
            if now.0.saturating_sub(since.0) < max_wait {
                i += 1;
                continue;
            }
            e.queue.remove(i);
            e.expired_total += 1;
            if let Some(t) = self.tickets.remove(&call) {
                self.notices.push_back(Notice::Expired {
                    call,
                    session: t.session,
                    waited_ms: now - since,
                });
            }
        }
        e.wake = None;
        let one_over = self.faults.limiter_one_over();
        let newest_first = self.faults.slot_queue_newest_first();
        while let Some(&call) = e.queue.front() {
            let Some(t) = self.tickets.get(&call) else {
                e.queue.pop_front();
                continue;
            };
            let since = match t.stage {
                Stage::Queued { since } => since,
                _ => MonoMs(now.0),
            };
            let expiry = MonoMs(since.0.saturating_add(max_wait));
            if e.max_in_flight(one_over) {
                // A slot frees only when a call is done (which pumps).
                e.wake = Some(expiry);
                break;
            }
            let wait = e.wait_ms(now, t.tokens);
            if wait > 0 {
                e.wake = Some(expiry.min(MonoMs(now.0.saturating_add(wait))));
                break;
            }
            let call = match e.queue.back() {
                Some(&newest) if newest_first => newest,
                _ => call,
            };
            let Some(t) = self.tickets.get_mut(&call) else {
                e.queue.retain(|c| *c != call);
                continue;
            };
            e.admit(now, t.tokens);
            t.stage = Stage::InFlight;
            if newest_first {
                e.queue.retain(|c| *c != call);
            } else {
                e.queue.pop_front();
            }
            let session = t.session.clone();
            self.notices.push_back(Notice::Go { call, session });
        }
    }
}

impl Entry {
    /// `one_over`: the planted `LimiterAdmitsOneOver`.
    fn max_in_flight(&self, one_over: bool) -> bool {
        let room = u32::from(one_over);
        self.limits
            .max_concurrent
            .is_some_and(|m| self.in_flight >= m.saturating_add(room))
    }

    /// Ms until the buckets allow one request of `tokens` (0: now).
    fn wait_ms(&mut self, now: MonoMs, tokens: u64) -> u64 {
        let r = self.requests.as_mut().map_or(0, |b| b.wait_ms(now, 1));
        let t = self.tokens.as_mut().map_or(0, |b| b.wait_ms(now, tokens));
        r.max(t)
    }

    fn can_admit(&mut self, now: MonoMs, tokens: u64, one_over: bool) -> bool {
        !self.max_in_flight(one_over) && self.wait_ms(now, tokens) == 0
    }

    fn admit(&mut self, now: MonoMs, tokens: u64) {
        if let Some(b) = self.requests.as_mut() {
            b.take(now, 1);
        }
        if let Some(b) = self.tokens.as_mut() {
            b.take(now, tokens);
        }
        self.in_flight += 1;
        self.admitted_total += 1;
    }
}
