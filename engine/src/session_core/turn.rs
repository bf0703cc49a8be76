//! The chat turn loop (spec 05 §5, §9): the user message a request records
//! when it takes the gate, the provider attempt walk, and up to
//! [`MAX_ITERATIONS`] round trips, each ending in an answer, a tool round
//! (`tools.rs`) or a failure. A turn runs to completion even when its
//! consumer disconnects (only frames are lost).

use proto::jsonrpc::codes;
use proto::provider::{self, HistoryText, Message};
use proto::wire::EventType;
use serde_json::{json, Value};

use super::compaction::{self, Run};
use super::effect::{Call, ChainError, Effect, Ending, Fact, LogTag, World};
use super::request::RequestPayload;
use super::retry::Failure;
use super::round::Round;
use super::walk::{self, Next};
use super::{merge, steer, Idem, SessionCore, Takeover, UserMessage};
use crate::ids::{KeyId, TurnId};
use crate::{CallId, ConnId, MonoMs, ProviderEntry, ProviderReply};

/// A rebuilt provider-facing history and the usage of its newest
/// successful call (`Err`: the log could not be read).
pub type Loaded = Result<(HistoryText, Option<(u64, u64)>), crate::store::ReadError>;

/// Round trips per turn before `loop_limit` (spec 05 §9).
pub const MAX_ITERATIONS: u32 = 8;

/// What the provider calls of a [`TurnLoop`] are for.
pub enum Mode {
    Chat,
    Compaction(Box<Run>),
}

/// A steer waiting for its turn's next provider call (extension
/// `turn.steer`).
pub struct Steer {
    /// The `session.steerTurn` stream, answered when the steer is applied.
    pub conn: ConnId,
    pub content: Value,
}

/// The turn (or compaction) that holds a session's gate.
pub struct TurnLoop {
    pub id: TurnId,
    pub key_id: KeyId,
    /// The request's stream (`None` once the consumer is gone).
    pub conn: Option<ConnId>,
    /// The request's idempotency key and the retries attached to it.
    pub idem: Option<Idem>,
    /// EventView JSON of every event this request appended
    /// (`result.events`), shared with the events' live frames.
    pub events: Vec<crate::streams::EventJson>,
    /// Seqs of `events` (what an idempotent retry replays).
    pub event_seqs: Vec<u64>,
    /// The id of the first of them (usage accounting names the turn by it).
    pub first_event_id: Option<String>,
    pub mode: Mode,
    /// Steers waiting for the next provider call.
    pub steers: Vec<Steer>,
    /// Applied steers at the end of the session's cached history: this
    /// turn's requests send them from `tail` instead (see `steer.rs`).
    pub(super) steers_in_cache: usize,
    /// All-server tool rounds of this turn, kept after the session's cached
    /// history (never copied per turn).
    pub(super) tail: Vec<Message>,
    pub(super) tools: Vec<Value>,
    /// `tools` as compact JSON, rendered once per round trip for the
    /// logged request and the request body of every attempt.
    pub(super) tools_json: String,
    pub(super) chain: Vec<ProviderEntry>,
    pub(super) attempt: usize,
    pub(super) iteration: u32,
    /// Retries made of the current attempt (its entry's retry policy).
    pub(super) retries: u32,
    /// What the turn waits on now.
    pub(super) phase: Phase,
    /// Event id of the turn's `client.message.send` (deltas name it).
    pub(super) input_event: Option<std::sync::Arc<str>>,
    /// Event id of the current attempt's `provider.request`.
    pub(super) request_event: Option<std::sync::Arc<str>>,
    /// `(input, output)` usage of this request's newest successful call.
    pub(super) last_usage: Option<(u64, u64)>,
    /// Tokens of every successful call this request made, by kind.
    pub tokens: provider::Tokens,
    /// Auto-compaction trigger carried from a resumed or retired pause.
    pub(super) carried_trigger: Option<u64>,
    /// Ids of the compaction preamble and summary, once logged.
    pub(super) compaction_ids: Vec<String>,
}

/// What a turn waits on. One at a time: an attempt is admitted, then sent,
/// then answered; a tool round runs between two round trips.
#[derive(Default)]
pub(super) enum Phase {
    /// Nothing in flight: between two steps of the loop (or before the
    /// session's history is ready).
    #[default]
    Idle,
    /// Waiting for the session's MCP servers to be reconnected.
    RestoringMcp,
    /// A prepared attempt waiting for its slot or its retry time.
    Admitting(Box<super::traffic::Pending>),
    /// The provider call in flight, when it left, and its streamed reply
    /// when its entry streams.
    Calling {
        call: CallId,
        sent_at: MonoMs,
        stream: Option<Box<super::stream::AttemptStream>>,
    },
    /// The tool round in progress (server tools may be asynchronous).
    Tools(Box<Round>),
}

impl TurnLoop {
    /// The provider call in flight.
    pub(super) fn call(&self) -> Option<CallId> {
        match self.phase {
            Phase::Calling { call, .. } => Some(call),
            _ => None,
        }
    }

    /// The call in flight is over: its id and when it left.
    pub(super) fn end_call(&mut self) -> Option<(CallId, MonoMs)> {
        let Phase::Calling { call, sent_at, .. } = self.phase else {
            return None;
        };
        self.phase = Phase::Idle;
        Some((call, sent_at))
    }

    /// The streamed reply of the call in flight.
    pub(super) fn stream(&self) -> Option<&super::stream::AttemptStream> {
        match &self.phase {
            Phase::Calling { stream, .. } => stream.as_deref(),
            _ => None,
        }
    }

    pub(super) fn stream_mut(&mut self) -> Option<&mut super::stream::AttemptStream> {
        match &mut self.phase {
            Phase::Calling { stream, .. } => stream.as_deref_mut(),
            _ => None,
        }
    }

    /// Takes the streamed reply; the call stays in flight until
    /// [`TurnLoop::end_call`].
    pub(super) fn take_stream(&mut self) -> Option<Box<super::stream::AttemptStream>> {
        match &mut self.phase {
            Phase::Calling { stream, .. } => stream.take(),
            _ => None,
        }
    }

    /// The attempt waiting for admission.
    pub(super) fn pending_mut(&mut self) -> Option<&mut super::traffic::Pending> {
        match &mut self.phase {
            Phase::Admitting(p) => Some(p),
            _ => None,
        }
    }

    pub(super) fn pending(&self) -> Option<&super::traffic::Pending> {
        match &self.phase {
            Phase::Admitting(p) => Some(p),
            _ => None,
        }
    }

    /// The attempt waiting for admission leaves that phase.
    pub(super) fn take_pending(&mut self) -> Option<Box<super::traffic::Pending>> {
        if !matches!(self.phase, Phase::Admitting(_)) {
            return None;
        }
        match std::mem::take(&mut self.phase) {
            Phase::Admitting(p) => Some(p),
            _ => None,
        }
    }

    /// The tool round in progress.
    pub(super) fn round(&self) -> Option<&Round> {
        match &self.phase {
            Phase::Tools(r) => Some(r),
            _ => None,
        }
    }

    pub(super) fn round_mut(&mut self) -> Option<&mut Round> {
        match &mut self.phase {
            Phase::Tools(r) => Some(r),
            _ => None,
        }
    }

    /// The tool round is over.
    pub(super) fn take_round(&mut self) -> Option<Box<Round>> {
        if !matches!(self.phase, Phase::Tools(_)) {
            return None;
        }
        match std::mem::take(&mut self.phase) {
            Phase::Tools(r) => Some(r),
            _ => None,
        }
    }
}

impl TurnLoop {
    pub fn new(id: TurnId, key_id: KeyId, conn: Option<ConnId>, mode: Mode) -> Self {
        TurnLoop {
            id,
            key_id,
            conn,
            idem: None,
            events: Vec::new(),
            event_seqs: Vec::new(),
            first_event_id: None,
            mode,
            steers: Vec::new(),
            steers_in_cache: 0,
            tail: Vec::new(),
            tools: Vec::new(),
            tools_json: "[]".to_string(),
            chain: Vec::new(),
            attempt: 0,
            iteration: 0,
            retries: 0,
            phase: Phase::Idle,
            input_event: None,
            request_event: None,
            last_usage: None,
            tokens: provider::Tokens::default(),
            carried_trigger: None,
            compaction_ids: Vec::new(),
        }
    }

    /// Every stream waiting for this turn's answer: the request's own and
    /// those of attached idempotent retries.
    pub fn streams(&self) -> Vec<ConnId> {
        let watchers = self.idem.iter().flat_map(|i| i.watchers.iter().copied());
        self.conn.into_iter().chain(watchers).collect()
    }

    /// `conn` went away: the turn runs on without it.
    pub fn forget_stream(&mut self, conn: ConnId) {
        if self.conn == Some(conn) {
            self.conn = None;
        }
        if let Some(idem) = self.idem.as_mut() {
            idem.watchers.retain(|w| *w != conn);
        }
    }

    pub fn is_compaction(&self) -> bool {
        matches!(self.mode, Mode::Compaction(_))
    }
}

impl SessionCore {
    /// A `sendMessage` took the gate (after `takeover`): check the session,
    /// record the single user message (spec 01 §8.4) and its client
    /// results, resolve the provider chain, and start the loop.
    pub fn start_chat(&mut self, message: &UserMessage, takeover: &Takeover, world: &dyn World) {
        self.step(|c| c.start_chat_inner(message, takeover, world));
    }

    fn start_chat_inner(&mut self, message: &UserMessage, takeover: &Takeover, world: &dyn World) {
        if let (Takeover::Resume(p) | Takeover::Retire(p), Some(t)) = (takeover, self.turn_mut()) {
            t.carried_trigger = p.auto_trigger;
        }
        if let Some(msg) = world.open_error() {
            return self.fail(codes::APPLICATION_ERROR, msg);
        }
        let merged = match merge::user_turn(takeover, &message.role, &message.content) {
            Ok(mut m) => {
                self.faults().merged_content(&mut m.content, &m.server_ids);
                m
            }
            Err(merge::Refused::NoPausedTurn) => {
                return self.fail(
                    codes::APPLICATION_ERROR,
                    "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
                );
            }
            Err(merge::Refused::Invalid(reason)) => {
                let payload =
                    json!({"reason": "tool_result_merge_invalid", "detail": reason.to_string()});
                self.log(EventType::SessionError, payload);
                self.emit(Effect::SessionError);
                return self.fail(
                    codes::APPLICATION_ERROR,
                    format!("tool result merge invalid: {reason}"),
                );
            }
        };
        // The request's own input is never echoed on its own stream (nor on
        // those of its attached retries).
        let payload = json!({"role": message.role, "content": merged.content});
        self.log_tagged(
            EventType::ClientMessageSend,
            payload,
            LogTag::TurnInput,
            true,
        );
        for payload in merge::client_tool_results(&merged) {
            self.log_tagged(EventType::ToolResult, payload, LogTag::Plain, true);
        }
        // The profile and the provider chain are re-read every turn.
        let chain = match world.chain() {
            Ok(chain) => chain,
            Err(ChainError::ProfileUnavailable { profile_id }) => {
                let payload = json!({"reason": "profile_unavailable", "profile_id": profile_id});
                self.log(EventType::SessionError, payload);
                self.emit(Effect::SessionError);
                return self.fail(
                    codes::APPLICATION_ERROR,
                    "profile_unavailable: the profile bound to this session is no longer available",
                );
            }
            Err(ChainError::PrimaryMissing { name }) => {
                let detail =
                    format!("primary provider \"{name}\" is not configured in bae-config.toml");
                self.log(
                    EventType::SessionError,
                    json!({"reason": "provider_config", "detail": detail}),
                );
                self.emit(Effect::SessionError);
                self.retire_steers(steer::WHY_FAILED);
                return self.end(Ending::ProvidersFailed);
            }
        };
        if let Some(t) = self.turn_mut() {
            t.chain = chain;
        }
        self.once_history_loaded(world);
    }

    /// Goes on once the provider-facing history is cached (normally it is:
    /// arrivals rebuild it first).
    pub(super) fn once_history_loaded(&mut self, world: &dyn World) {
        if self.history.is_none() {
            return self.emit(Effect::LoadHistory);
        }
        self.history_ready(world);
    }

    /// The engine rebuilt the history an [`Effect::LoadHistory`] asked for
    /// (`Err`: the read failed).
    pub fn history_loaded(&mut self, loaded: Loaded, world: &dyn World) {
        self.step(|c| match loaded {
            Ok((history, usage)) => {
                c.history = Some(history);
                c.newest_usage = usage;
                c.emit(Effect::HistoryRebuilt);
                c.history_ready(world);
            }
            Err(e) => {
                tracing::error!(error = %e, "history read failed");
                c.fail(codes::APPLICATION_ERROR, "session loop failed");
            }
        });
    }

    fn history_ready(&mut self, world: &dyn World) {
        match self.turn().map(|t| t.is_compaction()) {
            Some(true) => self.compaction_history_ready(world),
            Some(false) => {
                if let Some(t) = self.turn_mut() {
                    t.phase = Phase::RestoringMcp;
                }
                self.emit(Effect::RestoreMcp);
            }
            None => {}
        }
    }

    /// The session's MCP servers are as connected as they will be: the
    /// loop starts.
    pub fn mcp_ready(&mut self, world: &dyn World) {
        self.step(|c| {
            let Some(t) = (c.turn_mut()).filter(|t| matches!(t.phase, Phase::RestoringMcp)) else {
                return;
            };
            t.phase = Phase::Idle;
            t.tail.clear();
            t.iteration = 0;
            c.next_round(world);
        });
    }

    /// One provider round trip: attempt 0 of the chain.
    pub(super) fn next_round(&mut self, world: &dyn World) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        if t.iteration >= MAX_ITERATIONS {
            let payload = json!({"reason": "loop_limit", "max_iterations": MAX_ITERATIONS});
            self.log(EventType::SessionError, payload);
            self.emit(Effect::SessionError);
            self.retire_steers(steer::WHY_LOOP_LIMIT);
            return self.end(Ending::ProvidersFailed);
        }
        t.iteration += 1;
        t.attempt = 0;
        t.retries = 0;
        self.apply_steers();
        // The tool list is recomputed for every round trip (spec 05 §9 3a):
        // an `updateClientTools` applies to the next provider call, never to
        // one already sent.
        let Some(t) = self.turn_mut() else {
            return;
        };
        t.tools = world.tools(&t.key_id);
        // A list of JSON values always serialises.
        t.tools_json = serde_json::to_string(&t.tools).unwrap_or_default();
        self.send_attempt(world, None);
    }

    /// Logs `provider.request` for the current attempt and asks for the
    /// call.
    pub(super) fn send_attempt(&mut self, world: &dyn World, delay: Option<super::retry::Delay>) {
        let Some(t) = self.turn.as_deref() else {
            return;
        };
        let Some(entry) = t.chain.get(t.attempt).cloned() else {
            return self.fail(codes::INTERNAL_ERROR, "Internal error");
        };
        let compaction = t.is_compaction();
        if let Some(h) = self.history.as_mut() {
            h.prepare(entry.kind);
        }
        let empty = HistoryText::new();
        let history = self.history.as_ref().unwrap_or(&empty);
        // A chat round sends the session's history (less the steers this
        // turn applied, which it sends after its own tool rounds) and this
        // turn's in-memory rounds; a compaction the history and its
        // instruction. Both borrow the history's text: nothing is rendered
        // again.
        let (upto, tail): (usize, &[Message]) = match &t.mode {
            Mode::Chat => (history.len().saturating_sub(t.steers_in_cache), &t.tail),
            Mode::Compaction(run) => (run.upto, &run.tail),
        };
        // Compaction never advertises tools (it logs `tools: []`) and gets
        // at least 4096 tokens; with caching on it still sends the chat's
        // tools, unusable (`tool_choice` none), so that its prefix is the
        // one the chat calls cached.
        let (logged_tools, max_tokens) = match &t.mode {
            Mode::Chat => (t.tools_json.as_str(), entry.max_tokens),
            Mode::Compaction(_) => ("[]", entry.max_tokens.max(compaction::MIN_MAX_TOKENS)),
        };
        let sends_tools = !compaction || entry.cache.is_some();
        let tools: &[Value] = if sends_tools { &t.tools } else { &[] };
        let tools_json = if sends_tools {
            t.tools_json.as_str()
        } else {
            "[]"
        };
        let key = entry.cache.map(|_| world.prompt_cache_key());
        let cache = entry.cache.map(|settings| provider::Cache {
            settings,
            key: key.as_deref().unwrap_or_default(),
            tools_inert: compaction,
        });
        let built = provider::build_request(&provider::Spec {
            kind: entry.kind,
            base_url: &entry.base_url,
            model: &entry.model,
            max_tokens,
            history,
            upto,
            tail,
            tools,
            tools_json,
            cache,
        });
        let attempt = t.attempt;
        let payload = RequestPayload {
            attempt,
            kind: entry.kind,
            base_url: &entry.base_url,
            model: &entry.model,
            max_tokens,
            messages: &built,
            tools_json: logged_tools,
            normalized: built.normalized.as_ref(),
            compaction,
        }
        .render();
        let provider::Built {
            url,
            headers,
            auth,
            mut body,
            ..
        } = built;
        // The `provider.request` is logged when the call leaves (after its
        // admission, docs/extensions.md "Provider traffic"). After every
        // member the prompt cache reads: a streamed call keeps the
        // byte-stable prefix of an unstreamed one.
        if entry.stream.is_some() {
            provider::stream::with_stream(entry.kind, &mut body);
        }
        let auth = match auth {
            provider::AuthHeader::XApiKey => crate::AuthPlacement::XApiKey,
            provider::AuthHeader::Bearer => crate::AuthPlacement::Bearer,
        };
        let call = Call {
            entry,
            ticket: None,
            attempt,
            url,
            headers,
            auth,
            body,
        };
        self.dispatch_attempt(payload, call, delay);
    }

    /// The engine sent the call of an [`Effect::Call`] as `call` at `now`;
    /// a streamed one's first watchdog check is returned.
    pub fn call_sent(&mut self, call: CallId, now: MonoMs) -> Option<MonoMs> {
        let t = self.turn_mut()?;
        let stream = (t.chain.get(t.attempt)).and_then(|entry| {
            (entry.stream).map(|s| Box::new(super::stream::AttemptStream::new(entry.kind, s, now)))
        });
        let check = stream.as_ref().map(|s| s.next_check());
        t.phase = Phase::Calling {
            call,
            sent_at: now,
            stream,
        };
        check
    }

    /// The call the turn waits on.
    pub(super) fn waiting_call(&self) -> Option<CallId> {
        self.turn().and_then(TurnLoop::call)
    }

    /// A provider reply. `false`: no turn waits for `call` (it ended or was
    /// cancelled), and nothing happened.
    pub fn on_reply(
        &mut self,
        call: CallId,
        reply: ProviderReply,
        world: &dyn World,
        now: MonoMs,
    ) -> bool {
        if self.waiting_call() != Some(call) {
            return false;
        }
        self.step(|c| match c.turn_mut().and_then(TurnLoop::take_stream) {
            Some(stream) => c.stream_ended(*stream, reply, world, now),
            None => {
                let failure = Failure::of(&reply);
                c.walk(failure, |a| walk::on_reply(a, reply), world, now)
            }
        });
        true
    }

    /// The attempt in flight is over: `decide` tells what its end means
    /// (`failure`: how it failed, for its entry's retry policy), and the
    /// turn goes on accordingly: a retry of the same entry, or the walk.
    pub(super) fn walk(
        &mut self,
        failure: Failure,
        decide: impl FnOnce(walk::Attempt) -> walk::Walked,
        world: &dyn World,
        now: MonoMs,
    ) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        let Some((call, started)) = t.end_call() else {
            return;
        };
        let Some(attempt) = self.current_attempt() else {
            return self.fail(codes::INTERNAL_ERROR, "Internal error");
        };
        let mut walked = decide(attempt);
        let input_tokens = match &walked.next {
            Next::Answer(r) => r.usage.as_ref().map(|u| u.input_tokens),
            _ => None,
        };
        self.fact(Fact::ProviderReturned {
            call,
            kind: attempt.kind,
            ok: walked.ok,
            latency_ms: now - started,
            input_tokens,
        });
        if let Some(delay) = (!walked.ok)
            .then(|| self.retried(failure, &mut walked))
            .flatten()
        {
            for (event, payload) in walked.events {
                self.log_text(event, payload);
            }
            return self.send_attempt(world, Some(delay));
        }
        self.after_walk(attempt, walked, world, now);
    }

    /// The attempt now: its place in the chain, the entry's kind.
    pub(super) fn current_attempt(&self) -> Option<walk::Attempt> {
        let t = self.turn()?;
        Some(walk::Attempt {
            index: t.attempt,
            chain_len: t.chain.len(),
            kind: t.chain.get(t.attempt)?.kind,
            compaction: t.is_compaction(),
        })
    }

    /// Logs what an attempt's end means and goes on: the answer, the next
    /// entry of the chain, or the end of the round trip.
    pub(super) fn after_walk(
        &mut self,
        attempt: walk::Attempt,
        walked: walk::Walked,
        world: &dyn World,
        now: MonoMs,
    ) {
        for (event, payload) in walked.events {
            self.log_text(event, payload);
        }
        if walked.session_error {
            self.emit(Effect::SessionError);
        }
        if let (Next::Answer(resp), true) = (&walked.next, walked.ok) {
            if let Some(tokens) = resp.tokens {
                let mut named = None;
                if let Some(t) = self.turn_mut() {
                    t.tokens.add(&tokens);
                    named = (t.chain.get(t.attempt)).map(|e| (e.name.clone(), e.model.clone()));
                }
                if let Some((entry, model)) = named {
                    self.fact(Fact::Tokens {
                        entry,
                        model,
                        tokens,
                        compaction: attempt.compaction,
                    });
                }
            }
        }
        match walked.next {
            Next::Answer(resp) => {
                let usage = (resp.usage.as_ref()).map(|u| (u.input_tokens, u.output_tokens));
                if attempt.compaction {
                    return self.on_summary(resp, usage);
                }
                if let Some(t) = self.turn_mut() {
                    t.last_usage = usage;
                }
                self.newest_usage = usage;
                self.on_assistant(resp.content, world, now)
            }
            Next::Fallback => {
                if let Some(t) = self.turn_mut() {
                    t.attempt += 1;
                    t.retries = 0;
                }
                self.send_attempt(world, None)
            }
            Next::Exhausted if attempt.compaction => {
                let why = format!("all {} providers failed", attempt.chain_len);
                self.compaction_failed(&why)
            }
            Next::Exhausted => {
                self.retire_steers(steer::WHY_PROVIDERS_FAILED);
                self.end(Ending::ProvidersFailed)
            }
        }
    }
}
