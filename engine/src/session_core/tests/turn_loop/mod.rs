//! In-process tests of the session core's turn loop: a [`SessionCore`]
//! driven by hand, a fake [`World`], virtual time and no engine. The
//! harness performs effects the way `turn/exec.rs` does (events get seqs
//! and ids, calls get ids, answers go back into the core), records what
//! happened in order, and lets each test read as a timeline.

mod chat;
mod compaction;
mod steer;
mod stream;
mod tools;
mod traffic;

use std::collections::BTreeMap;
use std::sync::Arc;

use proto::wire::content::Dispatch;
use proto::wire::EventType;
use serde_json::{json, Value};

use crate::session_core::{
    ChainError, Effect, Ending, Fact, Holder, Idem, SessionCore, SubagentAnswer, Takeover,
    TurnLoop, UserMessage, World,
};
use crate::streams::Appended;
use crate::{CallId, ConnId, MonoMs, ProviderEntry, ProviderReply};

/// `BAE_TURN_TIMEOUT` of the fake world.
const TIMEOUT: u64 = 5_000;

struct FakeWorld {
    open_error: Option<String>,
    chain: Result<Vec<ProviderEntry>, ChainError>,
    profile_live: bool,
    /// The driver's tools by dispatch (names).
    client: Vec<&'static str>,
    sandbox_tools: Vec<&'static str>,
    subagent_tools: Vec<&'static str>,
    /// MCP tool → server.
    mcp: BTreeMap<&'static str, &'static str>,
    sandbox: Option<(String, String)>,
    auto_size: Option<u64>,
    prompt: Option<String>,
}

fn entry(name: &str) -> ProviderEntry {
    ProviderEntry {
        name: name.into(),
        kind: proto::provider::Kind::Anthropic,
        base_url: format!("http://{name}.test"),
        model: "m".into(),
        auth_template: "${TOKEN}".into(),
        max_tokens: 1024,
        retry: None,
        limits: None,
        cache: None,
        prices: None,
        stream: None,
    }
}

impl FakeWorld {
    fn new() -> Self {
        FakeWorld {
            open_error: None,
            chain: Ok(vec![entry("primary")]),
            profile_live: true,
            client: vec!["client_tool"],
            sandbox_tools: vec!["bash"],
            subagent_tools: vec!["launch_subagent"],
            mcp: BTreeMap::from([("get_time", "clock")]),
            sandbox: None,
            auto_size: None,
            prompt: None,
        }
    }
}

impl World for FakeWorld {
    fn open_error(&self) -> Option<String> {
        self.open_error.clone()
    }
    fn chain(&self) -> Result<Vec<ProviderEntry>, ChainError> {
        self.chain.clone()
    }
    fn profile_live(&self) -> bool {
        self.profile_live
    }
    fn tools(&self, _key_id: &str) -> Vec<Value> {
        let own = self.client.iter().chain(&self.sandbox_tools);
        let mcp = self.mcp.keys();
        own.chain(mcp)
            .map(|n| json!({"name": n, "description": "", "input_schema": {}}))
            .collect()
    }
    fn classify(&self, _key_id: &str, tool: &str) -> Dispatch {
        if self.client.contains(&tool) {
            Dispatch::Client
        } else if self.sandbox_tools.contains(&tool) {
            Dispatch::Sandbox
        } else if self.subagent_tools.contains(&tool) {
            Dispatch::Subagent
        } else {
            Dispatch::Mcp
        }
    }
    fn mcp_server(&self, tool: &str) -> Option<String> {
        self.mcp.get(tool).map(|s| s.to_string())
    }
    fn sandbox(&self) -> Option<(String, String)> {
        self.sandbox.clone()
    }
    fn auto_compaction_size(&self) -> Option<u64> {
        self.auto_size
    }
    fn compaction_prompt(&self) -> Option<String> {
        self.prompt.clone()
    }
    fn turn_timeout_ms(&self) -> u64 {
        TIMEOUT
    }
    fn max_output(&self) -> usize {
        64
    }
    fn prompt_cache_key(&self) -> String {
        crate::usage::prompt_cache_key("s1")
    }
}

/// Something the harness saw the core ask for, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// An event, with whether it was its request's own (unechoed) input.
    Event(EventType, Value, bool),
    SessionError,
    LoadHistory,
    RestoreMcp,
    /// A provider call: (call id, attempt, request body).
    Call(CallId, usize, Value),
    /// An attempt asked for its slot, and got this id.
    Admit(CallId, crate::session_core::Admission),
    CallMcp(String, String),
    Exec(usize, String),
    Subagent(String),
    SteerApplied(ConnId, String),
    SteerRetired(ConnId, &'static str),
    HistoryRebuilt,
    Fact(Fact),
    Deltas(crate::streams::DeltaBatch),
    DeltasEnded(Arc<str>, Option<proto::jsonrpc::DiscardReason>),
    Abort(CallId),
    End(Ending),
}

struct Harness {
    core: SessionCore,
    world: FakeWorld,
    now: MonoMs,
    next_seq: u64,
    next_call: CallId,
    seen: Vec<Seen>,
    /// Event ids by seq.
    ids: BTreeMap<u64, String>,
    /// The turn taken at its end.
    ended: Option<Box<TurnLoop>>,
    /// What a `LoadHistory` is answered with.
    stored_history: Result<Vec<Value>, crate::store::ReadError>,
    /// Whether `RestoreMcp` is answered at once.
    mcp_at_once: bool,
    /// What a `Subagent` is answered with.
    subagent: SubagentAnswer,
    /// Whether an `Admit` is granted at once (else the test admits).
    admit_at_once: bool,
    /// The watchdog check the last streamed call asked for.
    check: Option<MonoMs>,
}

impl Harness {
    fn new() -> Self {
        let mut core = SessionCore::default();
        core.history = Some(proto::provider::HistoryText::new());
        Harness {
            core,
            world: FakeWorld::new(),
            now: MonoMs(1_000),
            next_seq: 1,
            next_call: CallId(1),
            seen: Vec::new(),
            ids: BTreeMap::new(),
            ended: None,
            stored_history: Ok(Vec::new()),
            mcp_at_once: true,
            subagent: SubagentAnswer::Done {
                text: "{}".into(),
                is_error: false,
            },
            admit_at_once: true,
            check: None,
        }
    }

    /// A turn for driver `key` on stream 1 holds the gate.
    fn hold(&mut self, key: &str, compaction: bool) {
        let w = crate::session_core::Waiter::new(ConnId(1), key.into(), op(compaction));
        let limits = crate::session_core::Limits {
            max_queued: 8,
            shutting_down: false,
        };
        match self.core.gate.arrive(self.now, limits, w) {
            crate::session_core::Arrival::Start(_) => {}
            other => panic!("not admitted: {other:?}"),
        }
        let mode = match compaction {
            true => crate::session_core::Mode::Compaction(Box::default()),
            false => crate::session_core::Mode::Chat,
        };
        let turn = TurnLoop::new(crate::ids::TurnId(1), key.into(), Some(ConnId(1)), mode);
        self.core.begin(turn);
    }

    /// Driver `key` sends `content` on a free gate.
    fn send(&mut self, key: &str, content: Value) {
        self.send_after(key, content, Takeover::Fresh);
    }

    fn send_after(&mut self, key: &str, content: Value, takeover: Takeover) {
        self.hold(key, false);
        let message = UserMessage {
            role: "user".into(),
            content,
            idem: None,
        };
        self.core.start_chat(&message, &takeover, &self.world);
        self.drive();
    }

    fn compact(&mut self, key: &str, prompt: Option<&str>) {
        self.hold(key, true);
        let prompt = prompt.map(str::to_string);
        self.core.start_compaction(prompt, None, &self.world);
        self.drive();
    }

    /// Performs every queued effect the way the engine does.
    fn drive(&mut self) {
        while let Some(effect) = self.core.poll_effect() {
            self.perform(effect);
        }
    }

    fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::Log(log) => {
                let payload: Value = serde_json::from_str(&log.payload).unwrap();
                let seq = self.next_seq;
                self.next_seq += 1;
                let id = format!("evt_{seq:032x}");
                self.ids.insert(seq, id.clone());
                let json = Arc::new(
                    json!({"id": id, "event_type": log.event.as_str(), "payload": payload})
                        .to_string(),
                );
                self.seen.push(Seen::Event(log.event, payload, log.quiet));
                let ev = Appended { seq, id, json };
                self.core.logged(log.tag, &ev);
            }
            Effect::SessionError => self.seen.push(Seen::SessionError),
            Effect::LoadHistory => {
                self.seen.push(Seen::LoadHistory);
                let loaded =
                    (self.stored_history.clone()).map(|h| (h.into_iter().collect(), Some((10, 5))));
                self.core.history_loaded(loaded, &self.world);
            }
            Effect::RestoreMcp => {
                self.seen.push(Seen::RestoreMcp);
                if self.mcp_at_once {
                    self.core.mcp_ready(&self.world);
                }
            }
            Effect::Call(call) => {
                let id = call.ticket.unwrap_or_else(|| {
                    let id = self.next_call;
                    self.next_call += 1;
                    id
                });
                let body: Value = serde_json::from_slice(&call.body).unwrap();
                self.seen.push(Seen::Call(id, call.attempt, body));
                self.check = self.core.call_sent(id, self.now);
            }
            Effect::Admit(a) => {
                let id = self.next_call;
                self.next_call += 1;
                self.seen.push(Seen::Admit(id, a));
                self.core.admission(id, self.admit_at_once);
            }
            Effect::CallMcp { tool, input, .. } => {
                self.seen.push(Seen::CallMcp(tool, input.to_string()))
            }
            Effect::Exec { index, command, .. } => self.seen.push(Seen::Exec(index, command)),
            Effect::Subagent { name, .. } => {
                self.seen.push(Seen::Subagent(name));
                let answer = self.subagent.clone();
                self.core.subagent_answered(answer, &self.world, self.now);
            }
            Effect::SteerApplied { conn, event_id } => {
                self.seen.push(Seen::SteerApplied(conn, event_id))
            }
            Effect::SteerRetired { conn, why } => self.seen.push(Seen::SteerRetired(conn, why)),
            Effect::HistoryRebuilt => self.seen.push(Seen::HistoryRebuilt),
            Effect::Fact(f) => self.seen.push(Seen::Fact(f)),
            Effect::Deltas(b) => self.seen.push(Seen::Deltas(b)),
            Effect::DeltasEnded { request, reason } => {
                self.seen.push(Seen::DeltasEnded(request, reason))
            }
            Effect::AbortCall(call) => self.seen.push(Seen::Abort(call)),
            Effect::End(ending) => {
                self.seen.push(Seen::End(ending.clone()));
                self.ended = self.core.take_turn();
                let pause = match ending {
                    Ending::Paused(_, p) => Some(p),
                    _ => None,
                };
                match pause {
                    Some(p) => {
                        assert!(self.core.gate.park(p).is_empty());
                    }
                    None => {
                        self.core.gate.release(self.now, |_| true);
                    }
                }
            }
        }
    }

    /// The provider call in flight answers `reply` after `ms`.
    fn reply(&mut self, ms: u64, reply: ProviderReply) {
        self.now += ms;
        let call = self.last_call().expect("no call was made");
        assert!(self.core.on_reply(call, reply, &self.world, self.now));
        self.drive();
    }

    fn answer(&mut self, content: Value) {
        self.reply(10, ok(content));
    }

    fn last_call(&self) -> Option<CallId> {
        self.seen.iter().rev().find_map(|s| match s {
            Seen::Call(id, _, _) => Some(*id),
            _ => None,
        })
    }

    /// The body of the newest provider call.
    fn last_body(&self) -> Value {
        self.seen
            .iter()
            .rev()
            .find_map(|s| match s {
                Seen::Call(_, _, body) => Some(body.clone()),
                _ => None,
            })
            .expect("no call was made")
    }

    fn events(&self) -> Vec<EventType> {
        self.seen
            .iter()
            .filter_map(|s| match s {
                Seen::Event(t, _, _) => Some(*t),
                _ => None,
            })
            .collect()
    }

    fn payloads(&self, of: EventType) -> Vec<Value> {
        self.seen
            .iter()
            .filter_map(|s| match s {
                Seen::Event(t, p, _) if *t == of => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    fn ending(&self) -> Option<&Ending> {
        self.seen.iter().rev().find_map(|s| match s {
            Seen::End(e) => Some(e),
            _ => None,
        })
    }

    fn count(&self, pred: impl Fn(&Seen) -> bool) -> usize {
        self.seen.iter().filter(|s| pred(s)).count()
    }

    fn facts(&self) -> Vec<&Fact> {
        self.seen
            .iter()
            .filter_map(|s| match s {
                Seen::Fact(f) => Some(f),
                _ => None,
            })
            .collect()
    }
}

fn op(compaction: bool) -> crate::session_core::Op {
    match compaction {
        true => crate::session_core::Op::Compact(None),
        false => crate::session_core::Op::Send(UserMessage {
            role: "user".into(),
            content: json!("x"),
            idem: None::<Idem>,
        }),
    }
}

/// A 200 Anthropic reply with `content` and usage 30 in, 12 out.
fn ok(content: Value) -> ProviderReply {
    ok_usage(content, 30, 12)
}

fn ok_usage(content: Value, input: u64, output: u64) -> ProviderReply {
    let stop = match content
        .as_array()
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
    {
        true => "tool_use",
        false => "end_turn",
    };
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": input, "output_tokens": output},
    });
    ProviderReply::Http {
        status: 200,
        body: body.to_string().into_bytes(),
        advice: Default::default(),
    }
}

fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

fn failed(status: u16) -> ProviderReply {
    ProviderReply::Http {
        status,
        body: b"{\"error\":\"boom\"}".to_vec(),
        advice: Default::default(),
    }
}

fn holder_is_free(core: &SessionCore) -> bool {
    matches!(core.gate.holder(), Holder::Free)
}

/// An MCP `tools/call` that returned `t` as text.
fn mcp_text(t: &str) -> proto::mcp::CallOutcome {
    proto::mcp::CallOutcome::Returned {
        result: json!({"content": [{"type": "text", "text": t}], "isError": false}),
        is_error: false,
    }
}
