//! Per-turn engine cost against history length (perf requirement of the
//! compaction issue): one session, client-mode compaction, N sequential text
//! turns, so the provider-facing history grows by two messages per turn.
//!
//! For every turn it records:
//! - **engine**: time inside `Engine::handle_input` plus draining
//!   `poll_output`, for the turn's request, its provider reply and the
//!   `Flushed` acknowledgements of its sends (the provider itself answers
//!   at once and is not timed);
//! - **store**: `MemStore` commit of the turn's writes (and reads, if any),
//!   timed apart because the real store runs on its own thread;
//! - **prepare**: `proto::provider::prepare_request` on the same history the
//!   engine sent this turn (the serialisation the spec allows to grow),
//!   timed in a second phase on a fresh copy of that history, and checked to
//!   produce a body of the same length as the engine's provider call;
//! - the size of the `provider.request` event payload.
//!
//! Run: `cargo bench -p engine --bench history_growth`.
//! Environment: `HISTORY_TURNS` (default 2000), `HISTORY_CSV=path` writes
//! every turn's samples, `HISTORY_TELEMETRY=1` records telemetry facts
//! (spec 04 §7.1) and drains them after every input, inside the timed
//! engine work, as the smol driver does.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use engine::mem_store::MemStore;
use engine::{
    Config, ConnId, Engine, Entropy, Input, Listener, Now, Output, ProviderEntry, ProviderReply,
    StoreWrite,
};
use proto::provider::{self, Kind};
use serde_json::{json, Value};

const ADMIN_KEY: &str = "bae_admin_000000000000000000000000000000000000000000000000";
const BASE_URL: &str = "http://127.0.0.1:9";
const MODEL: &str = "claude-bench";
const MAX_TOKENS: u32 = 1024;
/// Turn indexes reported in the table (1-based).
const MARKS: [usize; 10] = [1, 10, 50, 100, 250, 500, 750, 1000, 1500, 2000];
/// Samples either side of a mark that enter its median.
const HALF_WINDOW: usize = 10;

/// Deterministic entropy (a 64-bit LCG): ids only need to be unique.
struct Lcg(u64);

impl Entropy for Lcg {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            self.0 = self
                .0
                .wrapping_mul(0x5851_f42d_4c95_7f2d)
                .wrapping_add(0x1405_7b7e_f767_814f);
            *b = (self.0 >> 40) as u8;
        }
    }
}

/// What one driven exchange cost and produced.
#[derive(Default)]
struct Cost {
    engine_ns: u64,
    store_ns: u64,
    provider_request_bytes: usize,
    provider_calls: usize,
    reads: usize,
}

/// Minimal synchronous driver: commits writes, answers reads from the
/// store, acknowledges every send as flushed and answers each provider call
/// at once with `reply`.
struct Driver {
    engine: Engine,
    store: MemStore,
    now: Now,
    next_conn: ConnId,
    /// Bytes sent, concatenated (setup requests, while `keep_sends`).
    sent: Vec<u8>,
    keep_sends: bool,
    /// Each `Send` of the current turn, kept whole (the last is checked).
    sends_in_turn: Vec<Vec<u8>>,
    /// Body length of the last provider call (checked against `prepare_request`).
    last_call_body_len: usize,
    /// Telemetry facts of one input (`HISTORY_TELEMETRY=1`).
    facts: Vec<engine::telemetry::Fact>,
}

impl Driver {
    fn new() -> Self {
        let store = MemStore::with_admin_key("key_admin", ADMIN_KEY);
        let now = Now {
            mono: engine::MonoMs(1_000),
            unix: engine::UnixMs(1_780_000_000_000),
        };
        let config = Config {
            providers: vec![ProviderEntry {
                name: "main".into(),
                kind: proto::provider::Kind::Anthropic,
                base_url: BASE_URL.into(),
                model: MODEL.into(),
                auth_template: "${TOKEN}".into(),
                max_tokens: MAX_TOKENS,
                retry: None,
                limits: None,
                cache: None,
                prices: None,
                stream: None,
            }],
            telemetry: std::env::var("HISTORY_TELEMETRY").is_ok_and(|v| v == "1"),
            ..Config::default()
        };
        let engine = Engine::new(config, Box::new(Lcg(11)), store.snapshot(), now);
        Driver {
            engine,
            store,
            now,
            next_conn: ConnId(1),
            sent: Vec::new(),
            keep_sends: true,
            sends_in_turn: Vec::new(),
            last_call_body_len: 0,
            facts: Vec::new(),
        }
    }

    /// Feeds `first` and everything it leads to until the engine is idle.
    /// Provider calls are answered with `reply` (a clone per call).
    fn run(&mut self, first: Input, reply: Option<&ProviderReply>) -> Cost {
        let mut cost = Cost::default();
        let mut inputs = VecDeque::from([first]);
        let mut outs: Vec<Output> = Vec::new();
        while let Some(input) = inputs.pop_front() {
            let t = Instant::now();
            self.engine.handle_input(self.now, input);
            while let Some(o) = self.engine.poll_output() {
                outs.push(o);
            }
            self.engine.drain_telemetry(&mut self.facts);
            black_box(&self.facts);
            self.facts.clear();
            cost.engine_ns += t.elapsed().as_nanos() as u64;

            // Bench bookkeeping (untimed).
            for o in &outs {
                if let Output::Write(StoreWrite::InsertEvent(e)) = o {
                    if e.event_type == "provider.request" {
                        cost.provider_request_bytes += e.payload.len();
                    }
                }
            }

            // Group commit of this batch (the store thread's work), and the
            // store thread freeing the rows afterwards.
            let (writes, rest): (Vec<Output>, Vec<Output>) =
                outs.drain(..).partition(|o| matches!(o, Output::Write(_)));
            let t = Instant::now();
            for w in &writes {
                if let Output::Write(w) = w {
                    self.store.apply(w);
                }
            }
            drop(writes);
            cost.store_ns += t.elapsed().as_nanos() as u64;

            for o in rest {
                match o {
                    Output::Send { conn, bytes } | Output::SendUngated { conn, bytes } => {
                        inputs.push_back(Input::Flushed {
                            conn,
                            bytes: bytes.len(),
                        });
                        if self.keep_sends {
                            self.sent.extend_from_slice(&bytes);
                        } else {
                            self.sends_in_turn.push(bytes.into_vec());
                        }
                    }
                    Output::Close { conn } => inputs.push_back(Input::Closed { conn }),
                    Output::Read { id, read } => {
                        let t = Instant::now();
                        let result = Ok(self.store.read(&read));
                        cost.store_ns += t.elapsed().as_nanos() as u64;
                        cost.reads += 1;
                        inputs.push_back(Input::ReadDone { id, result });
                    }
                    Output::CallProvider(call) => {
                        cost.provider_calls += 1;
                        let reply = reply.expect("no provider reply scripted").clone();
                        self.last_call_body_len = call.body.len();
                        inputs.push_back(Input::ProviderDone {
                            call: call.id,
                            reply,
                        });
                    }
                    Output::Write(_) => unreachable!(),
                    Output::Mcp(_) => unreachable!("the bench configures no MCP server"),
                    Output::Sandbox(_) => unreachable!("the bench uses no sandbox"),
                    Output::Forward(_) => unreachable!("the bench runs one server"),
                    Output::AbortProvider(_) => unreachable!("the bench's calls are answered"),
                }
            }
        }
        cost
    }

    fn connect(&mut self, listener: Listener) -> ConnId {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.run(Input::Accepted { conn, listener }, None);
        conn
    }

    /// One request on a fresh `Connection: close` connection (setup only).
    fn request(&mut self, listener: Listener, path: &str, token: &str, body: &Value) -> Value {
        let conn = self.connect(listener);
        self.sent.clear();
        let bytes = http_post(path, token, &body.to_string(), false);
        self.run(Input::Received { conn, bytes }, None);
        let (status, body) = split_response(&self.sent);
        assert!((200..300).contains(&status), "{path}: {status}");
        serde_json::from_slice(&body).expect("JSON response")
    }
}

fn http_post(path: &str, token: &str, body: &str, keep_alive: bool) -> Vec<u8> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    format!(
        "POST {path} HTTP/1.1\r\nHost: bench\r\nConnection: {connection}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Status and body (de-chunked) of one complete response.
fn split_response(raw: &[u8]) -> (u16, Vec<u8>) {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let rest = &raw[end + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (status, rest.to_vec());
    }
    (status, dechunk(rest))
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(le) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..le]).unwrap().trim(), 16)
            .expect("chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&rest[le + 2..le + 2 + size]);
        rest = &rest[le + 2 + size + 2..];
    }
    out
}

/// ~100 bytes of user text, distinct per turn.
fn user_text(turn: usize) -> String {
    format!(
        "Turn {turn}: please look at the next item on the list and tell me what changed since the previous one."
    )
}

/// An Anthropic Messages 200 reply with ~200 bytes of text and usage.
fn anthropic_reply(turn: usize, input_tokens: u64) -> ProviderReply {
    let text = format!(
        "Reply {turn:>4}: the item changed in three places. The header was renamed, two fields \
         moved to the footer, and the totals are now computed after tax rather than before it. \
         Nothing else differs from the previous item."
    );
    let body = json!({
        "id": format!("msg_{turn:08}"),
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 52},
    });
    ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

struct Sample {
    turn: usize,
    messages: usize,
    engine_ns: u64,
    prepare_ns: u64,
    store_ns: u64,
    request_bytes: usize,
    /// The thread waited on a run queue while the engine part was measured.
    engine_preempted: bool,
    prepare_preempted: bool,
}

/// Nanoseconds this thread has spent runnable but waiting for a CPU
/// (`/proc/thread-self/schedstat`, second field); `None` where unavailable.
/// On the shared cores a descheduled sample measures the neighbours.
fn run_queue_wait_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Whether the wait counter moved since `before` (unknown counts as no).
fn preempted_since(before: Option<u64>) -> bool {
    matches!((before, run_queue_wait_ns()), (Some(a), Some(b)) if b > a)
}

/// Which samples to leave out (descheduled while measured).
type SampleFlag = fn(&Sample) -> bool;

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Median (µs) of `f` over the window's samples that were not descheduled,
/// or over all of them when fewer than 3 are clean.
fn clean_median(w: &[Sample], f: fn(&Sample) -> u64, preempted: SampleFlag) -> f64 {
    let clean: Vec<u64> = w.iter().filter(|s| !preempted(s)).map(f).collect();
    let v = if clean.len() >= 3 {
        clean
    } else {
        w.iter().map(f).collect()
    };
    median(v) as f64 / 1000.0
}

/// Least-squares slope of `y` against turn index, for turns >= `from`
/// whose sample was not descheduled.
fn slope(
    samples: &[Sample],
    from: usize,
    preempted: SampleFlag,
    y: impl Fn(&Sample) -> f64,
) -> f64 {
    let pts: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.turn >= from && !preempted(s))
        .map(|s| (s.turn as f64, y(s)))
        .collect();
    let n = pts.len() as f64;
    let (mx, my) = pts
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (sxy, sxx) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    sxy / sxx
}

fn main() {
    let turns: usize = std::env::var("HISTORY_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mut d = Driver::new();

    // Setup: profile, client key, session (client-mode compaction), driver.
    let profile = d.request(
        Listener::Admin,
        "/admin/v1/profiles",
        ADMIN_KEY,
        &json!({"name": "bench", "primary_provider": "main", "allowed_tools": []}),
    );
    let key = d.request(
        Listener::Admin,
        "/admin/v1/keys",
        ADMIN_KEY,
        &json!({"name": "bench", "profile_id": profile["id"]}),
    );
    let client_key = key["key"].as_str().expect("client key").to_string();
    let session = d.request(
        Listener::Client,
        "/api/v1/sessions",
        &client_key,
        &json!({"compaction": {"mode": "client"}}),
    );
    let sid = session["session_id"]
        .as_str()
        .expect("session id")
        .to_string();
    let skey = session["session_key"]
        .as_str()
        .expect("session key")
        .to_string();
    let rpc_path = format!("/api/v1/sessions/{sid}/rpc");

    // One keep-alive connection carries registerDriver and every turn.
    let conn = d.connect(Listener::Client);
    d.sent.clear();
    let register = json!({"jsonrpc": "2.0", "id": 0, "method": "session.registerDriver"});
    let bytes = http_post(&rpc_path, &skey, &register.to_string(), true);
    d.run(Input::Received { conn, bytes }, None);
    let (status, body) = split_response(&d.sent);
    assert_eq!(status, 200);
    assert!(
        String::from_utf8_lossy(&body).contains("\"registered\":true"),
        "registerDriver failed: {}",
        String::from_utf8_lossy(&body)
    );
    d.keep_sends = false;

    let mut samples = Vec::with_capacity(turns);
    let mut body_lens: Vec<usize> = Vec::with_capacity(turns);
    for turn in 1..=turns {
        d.now.mono += 1;
        d.now.unix += 1;
        // Untimed: building the request and the provider's reply.
        let call = json!({
            "jsonrpc": "2.0", "id": turn, "method": "session.sendMessage",
            "params": {"message": {"role": "user", "content": user_text(turn)}},
        });
        let bytes = http_post(&rpc_path, &skey, &call.to_string(), true);
        let input_tokens = body_lens.last().map_or(0, |b| b / 4) as u64;
        let reply = anthropic_reply(turn, input_tokens);
        d.sends_in_turn.clear();

        let wait = run_queue_wait_ns();
        let cost = d.run(Input::Received { conn, bytes }, Some(&reply));
        let engine_preempted = preempted_since(wait);
        assert_eq!(cost.provider_calls, 1, "turn {turn}: one provider call");
        assert_eq!(cost.reads, 0, "turn {turn}: history is served from memory");
        // The terminal frame is one chunk that may leave in several sends
        // (a large event in it is shared, not copied): from the send that
        // opens it to the end.
        let prefix = format!("{{\"jsonrpc\":\"2.0\",\"id\":{turn},\"result\"");
        let opens = |b: &Vec<u8>| {
            let le = b.windows(2).position(|w| w == b"\r\n");
            le.is_some_and(|le| b[le + 2..].starts_with(prefix.as_bytes()))
        };
        let start = d.sends_in_turn.iter().rposition(opens);
        let frame = start
            .map(|i| dechunk(&d.sends_in_turn[i..].concat()))
            .unwrap_or_default();
        assert!(
            frame.starts_with(prefix.as_bytes()) && frame.ends_with(b"}\n"),
            "turn {turn}: no terminal result: {}",
            String::from_utf8_lossy(&frame[..frame.len().min(300)])
        );

        body_lens.push(d.last_call_body_len);
        samples.push(Sample {
            turn,
            messages: 2 * turn - 1,
            engine_ns: cost.engine_ns,
            prepare_ns: 0,
            store_ns: cost.store_ns,
            request_bytes: cost.provider_request_bytes,
            engine_preempted,
            prepare_preempted: false,
        });
        // Keep the bench's memory flat: the store keeps every
        // provider.request row (the whole history each); nothing reads
        // them back here, so blank them once committed (untimed).
        for e in d.store.events.values_mut().rev().take(8) {
            if e.event_type == "provider.request" {
                e.payload = String::new();
            }
        }
    }

    // Phase 2: `prepare_request` on the history each turn sent, rebuilt
    // from the log the way the engine rebuilds it after a restart. Timed
    // apart from phase 1 so the bench's own copies never share the heap
    // with the engine's turns. Each turn gets a fresh copy (untimed), like
    // the per-turn copy the engine serialises; a long-lived, incrementally
    // built history is scattered in memory and walks about 2x slower.
    let load = engine::history_load::load(&sid, |read| Ok(d.store.read(read)))
        .unwrap_or_else(|e| panic!("history read: {e}"));
    let history: Vec<Value> = load
        .messages
        .iter()
        .map(|(_, event_type, payload)| provider::history_message(event_type, payload))
        .collect();
    drop(load);
    assert_eq!(history.len(), 2 * turns, "two messages per turn");
    for s in samples.iter_mut() {
        let sent = history[..s.messages].to_vec();
        let wait = run_queue_wait_ns();
        let t = Instant::now();
        let prepared = provider::prepare_request(
            Kind::Anthropic,
            BASE_URL,
            MODEL,
            MAX_TOKENS,
            black_box(&sent),
            &[],
        );
        black_box(&prepared);
        let body_len = prepared.body.len();
        drop(prepared);
        s.prepare_ns = t.elapsed().as_nanos() as u64;
        s.prepare_preempted = preempted_since(wait);
        assert_eq!(
            body_len,
            body_lens[s.turn - 1],
            "turn {}: the same request as the engine's",
            s.turn
        );
    }

    println!(
        "history_growth: {turns} text turns on one session (client-mode compaction), \
         median of the turns i-{HALF_WINDOW}..=i+{HALF_WINDOW} that were not descheduled"
    );
    println!(
        "| turn | history msgs | engine µs/turn | prepare_request µs | ratio | engine − prepare µs | store commit µs | provider.request bytes |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &mark in MARKS.iter().filter(|&&m| m <= turns) {
        let lo = mark.saturating_sub(HALF_WINDOW).max(1);
        let hi = (mark + HALF_WINDOW).min(turns);
        let w = &samples[lo - 1..hi];
        let engine = clean_median(w, |s| s.engine_ns, |s| s.engine_preempted);
        let prepare = clean_median(w, |s| s.prepare_ns, |s| s.prepare_preempted);
        let store = clean_median(w, |s| s.store_ns, |s| s.engine_preempted);
        let diff = engine - prepare;
        let s = &samples[mark - 1];
        println!(
            "| {mark} | {} | {engine:.1} | {prepare:.1} | {:.2} | {diff:.1} | {store:.1} | {} |",
            s.messages,
            engine / prepare,
            s.request_bytes
        );
    }
    let from = if turns >= 200 { 100 } else { 1 };
    let ep: SampleFlag = |s| s.engine_preempted;
    let pp: SampleFlag = |s| s.prepare_preempted;
    let se = slope(&samples, from, ep, |s| s.engine_ns as f64 / 1000.0);
    let sp = slope(&samples, from, pp, |s| s.prepare_ns as f64 / 1000.0);
    let ss = slope(&samples, from, ep, |s| s.store_ns as f64 / 1000.0);
    let sb = slope(&samples, from, |_| false, |s| s.request_bytes as f64);
    println!(
        "least-squares growth per added turn (turns {from}..={turns}): engine {se:.3} µs, \
         prepare_request {sp:.3} µs (ratio {:.2}), store commit {ss:.3} µs, \
         provider.request {sb:.0} bytes",
        se / sp
    );
    let total_engine: u64 = samples.iter().map(|s| s.engine_ns).sum();
    let total_prepare: u64 = samples.iter().map(|s| s.prepare_ns).sum();
    println!(
        "total: engine {:.1} ms, prepare_request {:.1} ms, over {turns} turns",
        total_engine as f64 / 1e6,
        total_prepare as f64 / 1e6
    );
    println!(
        "descheduled samples (left out of medians and slopes): engine {} of {turns}, \
         prepare_request {} of {turns}",
        samples.iter().filter(|s| s.engine_preempted).count(),
        samples.iter().filter(|s| s.prepare_preempted).count()
    );

    if let Ok(path) = std::env::var("HISTORY_CSV") {
        let mut csv = String::from(
            "turn,history_msgs,engine_ns,prepare_ns,store_ns,provider_request_bytes,\
             engine_preempted,prepare_preempted\n",
        );
        for s in &samples {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{}",
                s.turn,
                s.messages,
                s.engine_ns,
                s.prepare_ns,
                s.store_ns,
                s.request_bytes,
                s.engine_preempted,
                s.prepare_preempted
            );
        }
        std::fs::write(&path, csv).expect("write HISTORY_CSV");
        println!("per-turn samples written to {path}");
    }
}
