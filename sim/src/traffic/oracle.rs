//! The provider-traffic oracle: what the engine's retries and shared
//! limits must look like from the provider's side and in the log.
//!
//! It follows each session's attempts in the emitted log (a retry is a
//! `provider.request` with the same `attempt`, `kind`, `base_url` and
//! purpose right after that attempt's failed `provider.response`), the
//! calls the engine admits (`Output::CallProvider`), what the simulated
//! provider answered and when the engine read it. The retry decisions are
//! recomputed here from the policy and from what the provider *meant* to
//! advise (not from the driver's header parser), so a parser bug shows too.

use std::collections::{BTreeMap, BTreeSet};

use engine::store::EventRow;
use engine::{CallId, ProviderCall, ProviderReply, RetryPolicy};
use serde_json::Value;

use super::{draw_limited, EntryTraffic, Meant, TrafficSwarm};
use crate::check::{
    Checker, INV_PROVIDER_CONCURRENCY, INV_PROVIDER_RPM, INV_RETRY_NOT_EARLY, INV_RETRY_POLICY,
    INV_SLOT_FIFO, INV_SLOT_WAIT_BOUNDED,
};
use crate::rng::Rng;

/// A bucket unit in unit-ms (one request refills in `60_000 / rpm` ms).
const SCALE: i128 = 60_000;
const EXPIRED: &str = "provider limit: no call slot within ";

/// Which attempt a `provider.request` / `provider.response` is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    attempt: u64,
    kind: String,
    base_url: String,
    compaction: bool,
}

impl Key {
    fn of(p: &Value) -> Key {
        Key {
            attempt: p["attempt"].as_u64().unwrap_or(u64::MAX),
            kind: p["kind"].as_str().unwrap_or("").to_string(),
            base_url: p["base_url"].as_str().unwrap_or("").to_string(),
            compaction: p["purpose"] == "compaction",
        }
    }

    fn entry(&self) -> Option<usize> {
        super::ENTRY_URLS.iter().position(|u| *u == self.base_url)
    }
}

/// How an attempt failed, as the provider meant it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A status, with the advised wait in ms from when the engine read it.
    Status(u16, Option<u64>),
    Transport,
    /// A usable-looking status with an unusable body, a credential error.
    Other,
    /// A streamed reply (its fault, if any, is the stream model's).
    Unknown,
}

/// What the policy makes of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Walk(&'static str),
    Retry {
        earliest: u64,
        advised: bool,
    },
    /// If retried, not before this.
    Unknown {
        earliest: u64,
    },
}

#[derive(Debug, Clone)]
struct Fail {
    at: u64,
    key: Key,
    expect: Expect,
}

#[derive(Debug, Default)]
struct Sess {
    /// Its last `provider.request` (a response names no base URL).
    last_key: Option<Key>,
    fail: Option<Fail>,
    retries: u32,
    /// The call in flight for it, and what its reply meant (set when the
    /// engine reads it, consumed by the `provider.response` of that step).
    current: Option<CallId>,
    judged: Option<(u64, Class)>,
    /// No call of this session asked for a slot before this time (its
    /// last event of a turn, or its retry's wait).
    lower: u64,
    /// An advised retry on a limited entry: it joins the entry's queue
    /// at exactly this time.
    waiting: Option<(usize, u64)>,
}

#[derive(Debug)]
struct Call {
    entry: usize,
    session: String,
    streamed: bool,
    /// A rate-limit answer the provider chose.
    limited: Option<(u16, Meant)>,
}

#[derive(Debug, Default)]
struct Entry {
    t: EntryTraffic,
    /// Admitted by the engine (emitted) and not over, as the engine must
    /// count them: until the reply is read, or the call is closed.
    admitted: BTreeSet<CallId>,
    /// Sent to the provider and not answered or closed.
    at_provider: BTreeSet<CallId>,
    level: i128,
    level_at: u64,
    /// The last time `admitted` fell below `max_concurrent`.
    freed_at: u64,
    /// Recent admissions: (time, session, no ask before this time).
    recent: Vec<(u64, String, u64)>,
}

impl Entry {
    fn refill(&mut self, now: u64) {
        let Some(rpm) = self.t.limits.and_then(|l| l.requests_per_minute) else {
            return;
        };
        let cap = i128::from(rpm) * SCALE;
        self.level = (self.level + i128::from(now - self.level_at) * i128::from(rpm)).min(cap);
        self.level_at = now;
    }

    fn full(&self) -> bool {
        let max = self.t.limits.and_then(|l| l.max_concurrent);
        max.is_some_and(|m| self.admitted.len() >= m as usize)
    }

    fn over(&mut self, call: CallId, now: u64) {
        let was = self.full();
        self.admitted.remove(&call);
        self.at_provider.remove(&call);
        if was && !self.full() {
            self.freed_at = now;
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct TrafficStats {
    /// Rate-limit answers, of which for the provider's own concurrency.
    pub limited: u64,
    pub overloaded: u64,
    pub retries: u64,
    pub expired: u64,
    pub limited_calls: u64,
}

impl TrafficStats {
    pub fn add(&mut self, o: &TrafficStats) {
        self.limited += o.limited;
        self.overloaded += o.overloaded;
        self.retries += o.retries;
        self.expired += o.expired;
        self.limited_calls += o.limited_calls;
    }
}

impl std::fmt::Display for TrafficStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rate-limited answers {} (over concurrency {}), retries {}, slot waits expired {}, calls through limits {}",
            self.limited, self.overloaded, self.retries, self.expired, self.limited_calls
        )
    }
}

pub struct TrafficSim {
    rng: Rng,
    unix0: u64,
    entries: [Entry; 2],
    calls: BTreeMap<CallId, Call>,
    sessions: BTreeMap<String, Sess>,
    last_request: Option<String>,
    pub stats: TrafficStats,
}

impl TrafficSim {
    pub fn new(rng: Rng, sw: &TrafficSwarm, unix0: u64, now: u64) -> TrafficSim {
        let mut me = TrafficSim {
            rng,
            unix0,
            entries: Default::default(),
            calls: BTreeMap::new(),
            sessions: BTreeMap::new(),
            last_request: None,
            stats: TrafficStats::default(),
        };
        for (e, t) in me.entries.iter_mut().zip(&sw.entries) {
            e.t = t.clone();
        }
        me.restart(now);
        me
    }

    /// A new engine: its limits start afresh (full buckets, nothing in
    /// flight); the old incarnation's calls are gone.
    pub fn restart(&mut self, now: u64) {
        self.calls.clear();
        self.sessions.clear();
        self.last_request = None;
        for e in &mut self.entries {
            e.admitted.clear();
            e.at_provider.clear();
            e.recent.clear();
            let rpm = e.t.limits.and_then(|l| l.requests_per_minute).unwrap_or(0);
            e.level = i128::from(rpm) * SCALE;
            e.level_at = now;
            e.freed_at = now;
        }
    }

    fn policy(&self, entry: Option<usize>) -> Option<&RetryPolicy> {
        self.entries.get(entry?)?.t.retry.as_ref()
    }

    /// An event the engine emitted (in order, before the outputs after it).
    pub fn on_emit(&mut self, row: &EventRow, now: u64, ck: &mut Checker) {
        let et = row.event_type.as_str();
        let sid = row.session_id.clone();
        let p: Value = if et.starts_with("provider.") || et == "session.error" {
            serde_json::from_str(&row.payload).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        match et {
            "provider.request" => self.on_request(&sid, Key::of(&p), now, ck),
            "provider.response" => self.on_response(&sid, &p, now, ck),
            _ => {
                let s = self.sessions.entry(sid.clone()).or_default();
                if let (Some(f), "session.error") = (&s.fail, et) {
                    let retry = matches!(f.expect, Expect::Retry { .. });
                    if retry && f.at == now && p["reason"] == "provider_call_failed" {
                        ck.fail(
                            INV_RETRY_POLICY,
                            format!(
                                "session {sid}: attempt {:?} failed retryably ({:?}) but the turn walked on: {}",
                                f.key, f.expect, row.payload
                            ),
                        );
                    }
                }

                // What happens to the session around its turn (joins,
                // registrations, sandbox news) leaves a retry wait alone;
                // anything of the turn itself (a cancel, a close, the
                // walk's own session.error, a new turn or steer, a
                // compaction) ends what the oracle expected of it.
                if !ambient(et) {
                    s.fail = None;
                    s.waiting = None;
                    // A turn logs everything of its own before its next
                    // call asks for a slot (steers too, at the round's
                    // start): none of it is logged while the call waits.
                    s.lower = now;
                }
            }
        }
    }

    /// A `cancelTurn` answered `running`: the turn ended without an event
    /// of its own, so its retry wait or slot wait is over.
    pub fn on_turn_cancelled(&mut self, sid: &str) {
        if let Some(s) = self.sessions.get_mut(sid) {
            s.fail = None;
            s.waiting = None;
        }
    }

    fn on_request(&mut self, sid: &str, key: Key, now: u64, ck: &mut Checker) {
        let entry = key.entry();
        let has_policy = self.policy(entry).is_some();
        let s = self.sessions.entry(sid.to_string()).or_default();
        match s.fail.take() {
            Some(f) if f.key == key => {
                self.stats.retries += 1;
                match f.expect {
                    Expect::Walk(why) => ck.fail(
                        INV_RETRY_POLICY,
                        format!("session {sid}: attempt {key:?} was retried although {why}"),
                    ),
                    Expect::Retry { earliest, .. } | Expect::Unknown { earliest }
                        if now < earliest =>
                    {
                        ck.fail(
                            INV_RETRY_NOT_EARLY,
                            format!(
                                "session {sid}: retry of {key:?} sent at {now} ms, before {earliest} ms (failed at {} ms, {:?})",
                                f.at, f.expect
                            ),
                        );
                    }
                    Expect::Unknown { .. } if !has_policy => ck.fail(
                        INV_RETRY_POLICY,
                        format!("session {sid}: attempt {key:?} was retried without a policy"),
                    ),
                    _ => {}
                }
                s.retries += 1;
            }
            _ => s.retries = 0,
        }
        s.last_key = Some(key);
        self.last_request = Some(sid.to_string());
    }

    fn on_response(&mut self, sid: &str, p: &Value, now: u64, ck: &mut Checker) {
        let Some(key) = self.sessions.get(sid).and_then(|s| s.last_key.clone()) else {
            return;
        };
        let entry = key.entry();
        let error = p["error"].as_str().unwrap_or("");
        let retries = self.sessions.get(sid).map_or(0, |s| s.retries);
        let expect = if let Some(n) = error.strip_prefix(EXPIRED) {
            let waited: u64 = n.trim_end_matches(" ms").parse().unwrap_or(u64::MAX);
            self.on_expired(sid, entry, waited, now, ck);
            Some(Expect::Walk(
                "a wait for a slot that expired is not retried",
            ))
        } else if p["ok"] == true {
            None
        } else {
            let judged = (self.sessions.get_mut(sid))
                .and_then(|s| s.judged.take())
                .filter(|(at, _)| *at == now)
                .map(|(_, c)| c);
            let class = judged.unwrap_or(Class::Unknown);
            if let Class::Status(status, _) = class {
                if p["status"].as_u64() != Some(u64::from(status)) {
                    ck.fail(
                        INV_RETRY_POLICY,
                        format!(
                            "session {sid}: the provider answered {status}, the attempt logged {p}"
                        ),
                    );
                }
            }
            let policy = self.policy(entry).cloned();
            Some(expect(policy.as_ref(), class, retries, now))
        };
        let s = self.sessions.entry(sid.to_string()).or_default();
        s.judged = None;
        s.waiting = None;
        s.lower = s.lower.max(now);
        let Some(expect) = expect else {
            s.fail = None;
            return;
        };
        match expect {
            Expect::Retry { earliest, advised } => {
                s.lower = earliest;
                let limited = entry.is_some_and(|e| self.entries[e].t.limits.is_some());
                if let (true, true, Some(e)) = (advised, limited, entry) {
                    s.waiting = Some((e, earliest));
                }
            }
            Expect::Unknown { earliest } => s.lower = earliest,
            Expect::Walk(_) => {}
        }
        s.fail = Some(Fail {
            at: now,
            key,
            expect,
        });
    }

    /// A call waited `waited` ms for a slot and failed: within the bound,
    /// as long as it really waited, and only while the entry was full.
    fn on_expired(
        &mut self,
        sid: &str,
        entry: Option<usize>,
        waited: u64,
        now: u64,
        ck: &mut Checker,
    ) {
        self.stats.expired += 1;
        let Some(e) = entry.and_then(|e| self.entries.get_mut(e)) else {
            return ck.fail(
                INV_SLOT_WAIT_BOUNDED,
                format!("session {sid}: a slot wait expired on an unknown entry"),
            );
        };
        let Some(limits) = e.t.limits else {
            return ck.fail(
                INV_SLOT_WAIT_BOUNDED,
                format!("session {sid}: a slot wait expired on an entry without limits"),
            );
        };
        if waited > limits.max_wait_ms {
            ck.fail(
                INV_SLOT_WAIT_BOUNDED,
                format!(
                    "session {sid}: waited {waited} ms for a slot, max_wait_ms is {}",
                    limits.max_wait_ms
                ),
            );
        }
        if let Some((_, ready)) = self.sessions.get(sid).and_then(|s| s.waiting) {
            if now - ready != waited {
                ck.fail(
                    INV_SLOT_WAIT_BOUNDED,
                    format!("session {sid}: joined the queue at {ready} ms, expired at {now} ms saying it waited {waited} ms"),
                );
            }
        }
        // It joined the queue `waited` ms ago: nobody who asked after
        // that may have been admitted meanwhile. Its wait is over at `now`
        // (it has waited the bound), so a slot freed in this millisecond is
        // no longer its own, whichever input came first: the engine
        // expires before it admits.
        let joined = now.saturating_sub(waited);
        for (at, other, lower) in &e.recent {
            if *other != sid && *lower > joined && *at >= joined && *at < now {
                ck.fail(
                    INV_SLOT_FIFO,
                    format!("session {sid} joined the queue at {joined} ms and expired at {now} ms; session {other} asked at {lower} ms or later and was admitted at {at} ms"),
                );
            }
        }
        e.refill(now);
        let bucket_empty = limits.requests_per_minute.is_some() && e.level < SCALE;
        let blocked = e.full() || e.freed_at == now || bucket_empty;
        if !blocked && limits.input_tokens_per_minute.is_none() {
            ck.fail(
                INV_SLOT_WAIT_BOUNDED,
                format!(
                    "session {sid}: a slot wait expired at {now} ms while the entry had room ({} of {:?} admitted, free since {} ms)",
                    e.admitted.len(),
                    limits.max_concurrent,
                    e.freed_at
                ),
            );
        }
    }

    /// The engine emitted a provider call (it was admitted).
    pub fn on_call_output(&mut self, call: &ProviderCall, now: u64, ck: &mut Checker) {
        let Some(entry) = TrafficSwarm::entry_of(&call.url) else {
            return;
        };
        let Some(sid) = self.last_request.take() else {
            return;
        };
        self.calls.insert(
            call.id,
            Call {
                entry,
                session: sid.clone(),
                streamed: call.stream,
                limited: None,
            },
        );
        let (mine, lower) = {
            let s = self.sessions.entry(sid.clone()).or_default();
            s.current = Some(call.id);
            let mine = s.waiting.take();
            (mine, mine.map_or(s.lower, |(_, r)| r))
        };
        let e = &mut self.entries[entry];
        let Some(limits) = e.t.limits else {
            return;
        };
        self.stats.limited_calls += 1;
        if let Some(max) = limits.max_concurrent {
            if e.admitted.len() >= max as usize {
                ck.fail(
                    INV_PROVIDER_CONCURRENCY,
                    format!(
                        "call {} admitted to entry {entry} with {} in flight, max_concurrent {max}",
                        call.id,
                        e.admitted.len()
                    ),
                );
            }
        }
        e.admitted.insert(call.id);
        e.recent.retain(|(at, _, _)| at + limits.max_wait_ms >= now);
        e.recent.push((now, sid.clone(), lower));
        if let Some(rpm) = limits.requests_per_minute {
            e.refill(now);
            e.level -= SCALE;
            if e.level < 0 {
                ck.fail(
                    INV_PROVIDER_RPM,
                    format!(
                        "call {} admitted to entry {entry} past its {rpm} requests per minute",
                        call.id
                    ),
                );
            }
        }
        if let Some((_, ready)) = mine {
            if now - ready >= limits.max_wait_ms {
                ck.fail(
                    INV_SLOT_WAIT_BOUNDED,
                    format!(
                        "session {sid}: joined the queue at {ready} ms, admitted at {now} ms, max_wait_ms {}",
                        limits.max_wait_ms
                    ),
                );
            }
        }
        // FIFO: nobody known to have joined the queue before this call
        // could have asked may still be waiting. A wait that has lasted
        // `max_wait_ms` is over (its expiry may be logged later in the
        // same millisecond's outputs).
        for (other, s) in &self.sessions {
            if let Some((e2, ready)) = s.waiting {
                let over = now.saturating_sub(ready) >= limits.max_wait_ms;
                if e2 == entry && *other != sid && ready < lower && ready <= now && !over {
                    ck.fail(
                        INV_SLOT_FIFO,
                        format!(
                            "session {sid}'s call {} (asked at {lower} ms or later) admitted at {now} ms before session {other}'s, queued since {ready} ms",
                            call.id
                        ),
                    );
                }
            }
        }
    }

    /// The provider got `call` (the driver sent it): it may answer with a
    /// rate limit instead of `reply`.
    pub fn on_dispatch(
        &mut self,
        call: &ProviderCall,
        unix_ms: u64,
        latency: &mut u64,
        reply: &mut ProviderReply,
        sw: &TrafficSwarm,
    ) {
        let Some(c) = self.calls.get_mut(&call.id) else {
            return;
        };
        let e = &mut self.entries[c.entry];
        e.at_provider.insert(call.id);
        if !sw.on {
            return;
        }
        let busy = sw.overload_at.is_some_and(|k| e.at_provider.len() > k);
        let status = if busy {
            self.stats.overloaded += 1;
            Some(429)
        } else {
            let r = self.rng.unit();
            if r < sw.r429 {
                Some(429)
            } else if r < sw.r429 + sw.r503 {
                Some(503)
            } else if r < sw.r429 + sw.r503 + sw.r529 {
                Some(529)
            } else {
                None
            }
        };
        let Some(status) = status else {
            return;
        };
        self.stats.limited += 1;
        *latency = (*latency).min(self.rng.range(1, 10));
        let l = draw_limited(&mut self.rng, status, sw, unix_ms + *latency);
        c.limited = Some((status, l.meant));
        *reply = l.reply();
    }

    /// The engine closed `call`. A streamed one is over (closed, or
    /// dropped unsent); an unstreamed one runs to its end, sent now or
    /// when its batch commits: its slot is the engine's until the reply.
    pub fn on_abort(&mut self, call: CallId, now: u64) {
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        if c.streamed {
            let entry = c.entry;
            self.entries[entry].over(call, now);
        }
    }

    /// The engine reads `call`'s reply now.
    pub fn on_reply(&mut self, call: CallId, reply: &ProviderReply, now: u64) {
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        let unix = self.unix0 + now;
        let class = match (c.limited, reply) {
            (Some((status, meant)), _) => Class::Status(
                status,
                match meant {
                    Meant::None => None,
                    Meant::After(ms) => Some(ms),
                    Meant::At(at) => Some(at.saturating_sub(unix)),
                },
            ),
            (None, ProviderReply::Http { status, .. }) if !(200..300).contains(status) => {
                Class::Status(*status, None)
            }
            (None, ProviderReply::Transport(_)) => Class::Transport,
            (None, ProviderReply::Streamed) => Class::Unknown,
            (None, _) => Class::Other,
        };
        let (entry, sid) = (c.entry, c.session.clone());
        self.entries[entry].over(call, now);
        if let Some(s) = self.sessions.get_mut(&sid) {
            if s.current == Some(call) {
                s.judged = Some((now, class));
            }
        }
    }
}

/// Events a session logs beside a turn without touching it.
fn ambient(event_type: &str) -> bool {
    event_type.starts_with("session.")
        && !matches!(event_type, "session.error" | "session.close")
        && !event_type.starts_with("session.compaction")
}

/// The retry policy's decision, recomputed (docs/extensions.md,
/// "Provider traffic" items 1–2).
fn expect(policy: Option<&RetryPolicy>, class: Class, retries: u32, now: u64) -> Expect {
    let Some(p) = policy else {
        return Expect::Walk("its entry has no retry policy");
    };
    let backoff = p
        .backoff_ms
        .saturating_mul(1u64 << retries.min(32))
        .min(p.max_wait_ms);
    let advised = match class {
        Class::Status(s, a) if p.statuses.contains(&s) => a,
        Class::Status(..) => return Expect::Walk("its status is not in `statuses`"),
        Class::Transport if p.transport => None,
        Class::Transport => return Expect::Walk("transport failures are not retried"),
        Class::Other => return Expect::Walk("an unusable reply is never retried"),
        Class::Unknown if retries >= p.max_retries => return Expect::Walk("max_retries were made"),
        Class::Unknown => {
            return Expect::Unknown {
                earliest: now + backoff / 2,
            }
        }
    };
    if retries >= p.max_retries {
        return Expect::Walk("max_retries were made");
    }
    match advised {
        Some(ms) if ms > p.max_wait_ms => Expect::Walk("the advised wait is past max_wait_ms"),
        Some(ms) => Expect::Retry {
            earliest: now + ms,
            advised: true,
        },
        // Equal jitter: at least half the ceiling.
        None => Expect::Retry {
            earliest: now + backoff / 2,
            advised: false,
        },
    }
}

#[cfg(test)]
#[path = "oracle_tests.rs"]
mod tests;
