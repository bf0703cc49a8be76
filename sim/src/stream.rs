//! Streamed provider calls in the simulation (`stream = true` entries,
//! docs/extensions.md): the simulated provider's reply rendered as its
//! event stream (proto's encoder), cut into random chunks delivered as
//! `Input::ProviderChunk`s with random gaps, sometimes stalled past the
//! idle timeout (pings only, or silence), cut before its last event, or
//! broken by an error event. The oracle is the unstreamed reply: a stream
//! delivered whole must log exactly its body, a broken one a failed attempt.
//! Deltas on the wire are checked against the planned reply (only to
//! opted-in streams, a prefix of each block's final text, never after the
//! request's terminal frame), and a cancel must close the call in flight.

use std::collections::BTreeMap;
use std::fmt;

use engine::{CallId, Output, ProviderCall, ProviderReply, StreamSettings};
use proto::provider::stream::encode;
use proto::provider::Kind;
use serde_json::Value;

use crate::rng::Rng;

/// Streaming options of a seed (drawn after everything else, so the older
/// options keep their per-seed values; every decision they drive comes
/// from the stream generator of its own).
#[derive(Debug, Clone, Default)]
pub struct StreamSwarm {
    /// The primary / fallback entry has `stream = true`.
    pub primary: bool,
    pub fallback: bool,
    pub settings: Option<StreamSettings>,
    /// Per streamed reply: a gap past the idle timeout after some events.
    pub stall: f64,
    /// Per streamed reply: the body ends (or the connection fails) early.
    pub cut: f64,
    /// Per streamed reply: an error event mid-stream.
    pub error: f64,
    /// Per opted-in registration or subscription plan: `turn.deltas`.
    pub deltas: f64,
    /// Largest chunk of the body.
    pub chunk_max: u64,
    /// Between two chunks.
    pub gap_ms: (u64, u64),
}

impl StreamSwarm {
    pub fn draw(rng: &mut Rng) -> StreamSwarm {
        if !rng.chance(0.5) {
            return StreamSwarm::default();
        }
        let idle = *rng.pick(&[150, 600, 3_000]);
        StreamSwarm {
            primary: rng.chance(0.8),
            fallback: rng.chance(0.5),
            settings: Some(StreamSettings {
                first_byte_timeout_ms: idle * 2,
                idle_timeout_ms: idle,
                max_bytes: *rng.pick(&[2_000, 1 << 20]),
            }),
            stall: rng.rate(0.4, 0.3),
            cut: rng.rate(0.4, 0.3),
            error: rng.rate(0.5, 0.2),
            deltas: *rng.pick(&[0.0, 0.5, 1.0]),
            chunk_max: *rng.pick(&[1, 7, 64, 4_096]),
            gap_ms: (0, *rng.pick(&[0, 5, 40])),
        }
    }

    pub fn on(&self) -> bool {
        self.settings.is_some()
    }

    /// No more stream faults (the liveness phase).
    pub fn calm(&mut self) {
        self.stall = 0.0;
        self.cut = 0.0;
        self.error = 0.0;
    }
}

impl fmt::Display for StreamSwarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.settings {
            None => write!(f, "stream[off]"),
            Some(s) => write!(
                f,
                "stream[primary={} fallback={} first_byte={} idle={} max={} stall={} cut={} error={} deltas={} chunk<={} gap={}..{}]",
                self.primary, self.fallback, s.first_byte_timeout_ms, s.idle_timeout_ms,
                s.max_bytes, self.stall, self.cut, self.error, self.deltas, self.chunk_max,
                self.gap_ms.0, self.gap_ms.1,
            ),
        }
    }
}

/// What a streamed call's logged `provider.response` must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// The stream was delivered whole: exactly this body, `ok: true`.
    Body(Value),
    /// A fault of the stream: `ok: false`, `status: null`.
    Failed,
    /// Read as unstreamed (an error status, a transport failure, a body
    /// that is no event stream): whatever the unstreamed reply logs.
    Unstreamed,
}

/// One streamed call.
#[derive(Debug, Clone)]
struct Call {
    session: String,
    /// The reply as planned, whole (deltas are prefixes of its blocks).
    planned: Option<Value>,
    expect: Expect,
    aborted: bool,
    /// Its reply was delivered, or its attempt logged.
    over: bool,
}

/// Bytes and their delays (ms after the previous), then the end.
pub struct Plan {
    pub chunks: Vec<(u64, Vec<u8>)>,
    /// The reply after the last chunk (a stall's: the transport failure
    /// at the call's timeout, which the engine's watchdog must come before).
    pub end: Option<(u64, ProviderReply)>,
}

/// The simulation's streamed calls.
pub struct StreamSim {
    rng: Rng,
    /// Engine incarnations so far (call ids start over at each).
    epoch: u64,
    calls: BTreeMap<(u64, CallId), Call>,
    /// The session and id of the last `provider.request` emitted.
    last_request: Option<(String, String)>,
    /// `provider.request` event id → its call (kept across restarts: a
    /// client may read deltas an earlier incarnation wrote).
    by_request: BTreeMap<String, (u64, CallId)>,
    /// Each session's newest call (this incarnation).
    latest: BTreeMap<String, CallId>,
    /// Delta text received per (request, stream id, block, kind).
    seen: BTreeMap<(String, usize, u64, String), String>,
    pub stats: StreamStats,
}

#[derive(Debug, Default, Clone)]
pub struct StreamStats {
    pub streamed: u64,
    pub faulted: u64,
    pub deltas: u64,
    pub discards: u64,
    pub aborts: u64,
}

impl StreamStats {
    pub fn add(&mut self, o: &StreamStats) {
        self.streamed += o.streamed;
        self.faulted += o.faulted;
        self.deltas += o.deltas;
        self.discards += o.discards;
        self.aborts += o.aborts;
    }
}

impl fmt::Display for StreamStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "streamed={} faulted={} deltas={} discards={} aborts={}",
            self.streamed, self.faulted, self.deltas, self.discards, self.aborts
        )
    }
}

impl StreamSim {
    pub fn new(rng: Rng) -> Self {
        StreamSim {
            rng,
            epoch: 0,
            calls: BTreeMap::new(),
            last_request: None,
            by_request: BTreeMap::new(),
            latest: BTreeMap::new(),
            seen: BTreeMap::new(),
            stats: StreamStats::default(),
        }
    }

    /// A registration or subscription plan opts into `turn.deltas`.
    pub fn opt_in(&mut self, sw: &StreamSwarm) -> bool {
        sw.on() && self.rng.chance(sw.deltas)
    }

    /// An event was emitted (in order, before the outputs after it).
    pub fn on_emit(&mut self, row: &engine::store::EventRow) -> Result<(), String> {
        match row.event_type.as_str() {
            "provider.request" => {
                self.last_request = Some((row.session_id.clone(), row.id.clone()));
                Ok(())
            }
            "provider.response" => {
                let Some(call) = self.latest.get(&row.session_id).copied() else {
                    return Ok(());
                };
                let Some(c) = (self.calls.get_mut(&(self.epoch, call))).filter(|c| !c.over) else {
                    return Ok(());
                };
                c.over = true;
                let p: Value = serde_json::from_str(&row.payload).unwrap_or(Value::Null);
                match &c.expect {
                    Expect::Body(body)
                        if !c.aborted
                            && (p["ok"] != true || p["status"] != 200 || &p["body"] != body) =>
                    {
                        return Err(format!(
                            "call {call} was streamed whole, but its provider.response is {p} (want body {body})"
                        ));
                    }
                    Expect::Failed if p["ok"] == true || !p["status"].is_null() => {
                        return Err(format!("call {call}'s stream broke, but {p} was logged"));
                    }
                    _ => {}
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The engine asked for `call` (after its `provider.request`).
    pub fn on_call(&mut self, call: &ProviderCall) {
        let Some((session, request)) = self.last_request.clone() else {
            return;
        };
        self.latest.insert(session.clone(), call.id);
        self.by_request.insert(request, (self.epoch, call.id));
        if call.stream {
            self.calls.insert(
                (self.epoch, call.id),
                Call {
                    session,
                    planned: None,
                    expect: Expect::Unstreamed,
                    aborted: false,
                    over: false,
                },
            );
        }
    }

    /// The engine closed `call`.
    pub fn abort(&mut self, call: CallId) {
        if let Some(c) = self.calls.get_mut(&(self.epoch, call)) {
            c.aborted = true;
            self.stats.aborts += 1;
        }
    }

    /// Whether the engine closed `call` (nothing more of it is delivered).
    pub fn aborted(&self, call: CallId) -> bool {
        self.calls
            .get(&(self.epoch, call))
            .is_some_and(|c| c.aborted)
    }

    /// A restart: calls in flight are gone with their connections (their
    /// queued events vanish), and call ids start over.
    pub fn restart(&mut self) {
        for c in self.calls.values_mut() {
            c.aborted = true;
            c.over = true;
        }
        self.epoch += 1;
        self.latest.clear();
        self.last_request = None;
    }

    /// How the streamed `call` answers, given the unstreamed `reply` the
    /// simulated provider chose after `latency` ms.
    pub fn plan(
        &mut self,
        call: &ProviderCall,
        reply: ProviderReply,
        latency: u64,
        sw: &StreamSwarm,
    ) -> Plan {
        let timeout = call.timeout_ms;
        let call = call.id;
        let rng = &mut self.rng;
        let body = match &reply {
            ProviderReply::Http {
                status: 200, body, ..
            } => serde_json::from_slice::<Value>(body).ok(),
            _ => None,
        };
        let Some(body) = body else {
            // Not a usable 2xx reply: delivered as the unstreamed path would
            // see it (an error status or a transport failure whole; a
            // malformed 2xx body as body bytes, which the engine reads as a
            // plain JSON body).
            return match reply {
                ProviderReply::Http {
                    status: 200, body, ..
                } => Plan {
                    chunks: split(rng, &body, sw, latency),
                    end: Some((1, ProviderReply::Streamed)),
                },
                other => Plan {
                    chunks: Vec::new(),
                    end: Some((latency, other)),
                },
            };
        };
        self.stats.streamed += 1;
        let events = encode::events(Kind::Anthropic, &body, 1 + rng.below(12) as usize);
        let c = self.calls.get_mut(&(self.epoch, call));
        let roll = rng.unit();
        let (text, expect, end) = if roll < sw.stall {
            let upto = rng.below(events.len() as u64) as usize;
            let mut text = events[..upto].concat();
            if rng.chance(0.5) {
                // Pings, each well inside the idle timeout, past it in all.
                let idle = sw.settings.map_or(100, |s| s.idle_timeout_ms);
                let n = 2 + idle / 20;
                for _ in 0..n {
                    text.push_str(&encode::ping(Kind::Anthropic));
                }
            }
            (text, Expect::Failed, None)
        } else if roll < sw.stall + sw.cut {
            let all = events.concat();
            let last = events.last().map_or(0, String::len);
            let at = rng.below((all.len() - last.min(all.len())) as u64 + 1) as usize;
            let end = match rng.chance(0.5) {
                true => ProviderReply::Streamed,
                false => ProviderReply::Transport("connection reset by peer".into()),
            };
            (all[..at].to_string(), Expect::Failed, Some(end))
        } else if roll < sw.stall + sw.cut + sw.error {
            let upto = rng.below(events.len() as u64) as usize;
            let mut text = events[..upto].concat();
            text.push_str(&encode::error(
                Kind::Anthropic,
                "overloaded_error",
                "Overloaded",
            ));
            (text, Expect::Failed, Some(ProviderReply::Streamed))
        } else {
            let text = events.concat();
            let max = sw.settings.map_or(usize::MAX, |s| s.max_bytes);
            let expect = match text.len() > max {
                true => Expect::Failed,
                false => Expect::Body(body.clone()),
            };
            (text, expect, Some(ProviderReply::Streamed))
        };
        if expect == Expect::Failed {
            self.stats.faulted += 1;
        }
        if let Some(c) = c {
            c.planned = Some(body);
            c.expect = expect;
        }
        let chunks = split(rng, text.as_bytes(), sw, latency);
        // A stall ends only at the call's whole timeout, as a driver's
        // timer would end it (the engine's watchdog comes first).
        let spent: u64 = chunks.iter().map(|(d, _)| d).sum();
        let end = match end {
            Some(e) => (1, e),
            None => {
                let left = timeout.saturating_sub(spent) + 1;
                (left, ProviderReply::Transport("request timed out".into()))
            }
        };
        Plan {
            chunks,
            end: Some(end),
        }
    }

    /// A `session.delta` on stream `stream` (a request of the world):
    /// its text must extend a prefix of the planned block.
    pub fn on_delta(&mut self, stream: usize, p: &Value) -> Result<(), String> {
        self.stats.deltas += 1;
        let request = p["request"].as_str().unwrap_or("").to_string();
        let (index, kind) = (
            p["index"].as_u64().unwrap_or(u64::MAX),
            p["kind"].as_str().unwrap_or(""),
        );
        let planned = (self.by_request.get(&request))
            .and_then(|c| self.calls.get(c))
            .and_then(|c| c.planned.as_ref());
        let Some(planned) = planned else {
            return Err(format!(
                "a delta of {request}, which no streamed call of this run answered"
            ));
        };
        let block = &planned["content"][index as usize];
        let whole = match (kind, block["type"].as_str()) {
            ("text", Some("text")) => block["text"].as_str().unwrap_or("").to_string(),
            ("input_json", Some("tool_use")) => block["input"].to_string(),
            _ => return Err(format!("a {kind} delta for block {index} of {planned}")),
        };
        let key = (request, stream, index, kind.to_string());
        let got = self.seen.entry(key).or_default();
        got.push_str(p["text"].as_str().unwrap_or(""));
        match whole.starts_with(got.as_str()) {
            true => Ok(()),
            false => Err(format!(
                "deltas {got:?} are no prefix of block {index}: {whole:?}"
            )),
        }
    }

    /// The answer to a cancel of `session`'s running turn went out with
    /// `outputs`: a streamed call still in flight must be closed among them.
    pub fn on_cancel(&self, session: &str, outputs: &[Output]) -> Result<(), String> {
        let Some(call) = self.latest.get(session) else {
            return Ok(());
        };
        let Some(c) = (self.calls.get(&(self.epoch, *call))).filter(|c| !c.over && !c.aborted)
        else {
            return Ok(());
        };
        let closed = outputs
            .iter()
            .any(|o| matches!(o, Output::AbortProvider(x) if x == call));
        match closed {
            true => Ok(()),
            false => Err(format!(
                "the streamed call {call} of {} was left open",
                c.session
            )),
        }
    }
}

/// Random chunks of `bytes`, the first after `latency`, the rest after the
/// seed's gaps.
fn split(rng: &mut Rng, bytes: &[u8], sw: &StreamSwarm, latency: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut delay = latency;
    while !rest.is_empty() {
        let n = (1 + rng.below(sw.chunk_max.max(1)) as usize).min(rest.len());
        let (now, later) = rest.split_at(n);
        out.push((delay, now.to_vec()));
        rest = later;
        delay = rng.range(sw.gap_ms.0, sw.gap_ms.1);
    }
    out
}
