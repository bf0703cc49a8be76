//! The BAE protocol engine: a single-threaded, sans-IO state machine.
//!
//! Shape (after quinn-proto / str0m): the driver feeds everything that
//! happens through [`Engine::handle_input`] and [`Engine::handle_timeout`],
//! then drains [`Engine::poll_output`] for everything that must happen and
//! sleeps until [`Engine::poll_timeout`]. The engine never reads a socket, a
//! file, a clock or the OS RNG: time arrives as [`Now`], entropy through the
//! injected [`Entropy`] source.
//!
//! Durability rule: every [`StoreWrite`] an input causes is emitted *before*
//! any output that reveals it. The driver commits writes (group commit, one
//! transaction per batch) before it hands later [`Output::Send`]s to sockets.
#![forbid(unsafe_code)]
// No input may panic the server (it runs with `panic = "abort"`): lookups
// that can miss answer with an error instead. Tests may index freely.
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable
    )
)]

mod admin_api;
mod admin_ui;
mod auth;
pub mod burst;
pub mod bytes;
mod calls;
mod client_api;
mod config;
mod conn;
mod connections;
mod decls;
pub mod faults;
pub mod history_cache;
pub mod history_load;
mod idempotency;
pub mod ids;
mod io;
mod log;
pub mod mcp;
pub mod mem_store;
pub mod metrics;
mod model;
pub mod overload;
pub mod pipeline;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod provider_limits;
mod replica_route;
pub mod replicas;
pub mod residency;
mod respond;
mod rpc;
pub mod sandbox;
mod session_core;
mod session_load;
mod session_mcp;
mod session_sandbox;
mod sessions;
pub mod store;
mod streams;
mod subscribe;
pub mod telemetry;
pub mod time;
pub mod transfer;
mod turn;
pub mod usage;

use std::collections::{BTreeMap, VecDeque};

use model::Catalog;
use proto::jsonrpc::codes;

/// Provider-facing history rebuilt from the log with plain store reads.
pub use ids::{CallId, ConnId};
pub use session_core::retry::RetryPolicy;
pub use store::{ReadId, ReadResult, Snapshot, StoreRead, StoreWrite};
pub use time::{MonoMs, UnixMs};

pub use config::{
    Config, ProviderEntry, StreamSettings, DEFAULT_MAX_IMPORT_BYTES, DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_RESIDENT_SESSIONS,
};
pub use io::{AuthPlacement, Entropy, Input, Listener, Now, Output, ProviderCall, ProviderReply};

/// The protocol engine. See the crate docs for the driving contract.
pub struct Engine {
    config: Config,
    entropy: Box<dyn Entropy>,
    outputs: VecDeque<Output>,
    /// Time of the input being handled.
    now: Now,
    catalog: Catalog,
    // Ordered maps wherever iteration order reaches the outputs: the same
    // inputs must give the same outputs (the simulator depends on it).
    conns: connections::Table,
    /// Event seq assignment and the number of events stored.
    log: log::EventLog,
    /// Store reads in flight and what each answer is for.
    reads: ids::InFlight<ReadId, conn::PendingRead>,
    /// Every session's runtime parts (core, pending create, drivers'
    /// extensions, MCP restore) and the indices over them.
    sessions: sessions::Sessions,
    /// Connections with an open NDJSON stream, per session (fan-out index).
    streams: streams::Hub,
    /// The session each running turn (or compaction) belongs to; the turn
    /// itself lives in the session's core.
    running: BTreeMap<turn::TurnId, ids::SessionId>,
    next_turn: turn::TurnId,
    /// Provider calls in flight, by the session whose turn made them, and
    /// the watchdog deadlines of streamed ones.
    calls: calls::Calls,
    /// Every provider entry's shared limits, queues and retry timers.
    provider_limits: provider_limits::ProviderLimits,
    next_call: CallId,
    /// Every session's MCP connection set.
    mcp: mcp::McpHub,
    /// Every session's remote sandbox and subagents; image status.
    sandbox: sandbox::SandboxHub,
    /// MCP calls in flight, by the session and turn that made them.
    mcp_calls: crate::ids::IdMap<mcp::CallToken, (ids::SessionId, turn::TurnId)>,
    next_mcp_call: mcp::CallToken,
    /// While set, events are not echoed on these connections' streams (a
    /// request's own recorded input, spec 01 §7).
    quiet: Vec<ConnId>,
    /// `sendMessage` idempotency keys (extension `send.idempotent`).
    idem: idempotency::Keys,
    /// The planted bug (if any), handed to the components that host one.
    faults: faults::Faults,
    /// Counters and histograms of `GET /metrics`.
    metrics: metrics::Metrics,
    /// Span facts for the driver's exporter (spec 04 §7.1).
    telemetry: telemetry::Telemetry,
    /// Replica mode: claimed sessions and the seq lane (`None`: alone).
    replicas: Option<replicas::Replicas>,
    /// Which sessions the catalogue holds, and counts of the others.
    residency: residency::Residency,
    /// Exports, imports, forks and lineage answers in progress.
    transfers: transfer::Transfers,
    /// Overload bounds and refusals (`BAE_OVERLOAD_*`).
    overload: overload::Overload,
    shutting_down: bool,
}

impl Engine {
    /// Builds an engine restored from `snapshot` (everything but events).
    pub fn new(config: Config, entropy: Box<dyn Entropy>, snapshot: Snapshot, now: Now) -> Self {
        #[cfg(feature = "planted-bugs")]
        let faults = faults::Faults::planted(config.planted);
        #[cfg(not(feature = "planted-bugs"))]
        let faults = faults::Faults::default();
        let mut snapshot = snapshot;
        if faults.seq_reuse_after_restart() {
            snapshot.max_event_seq = snapshot.max_event_seq.saturating_sub(1);
        }
        let catalog = Catalog::restore(&mut snapshot, config.durable_drivers);
        // Replica mode holds every session it knows (leases move them).
        let budget = config
            .resident_sessions
            .filter(|_| config.replica.is_none());
        let mut residency = residency::Residency::new(budget);
        residency.stored = catalog.unheld(snapshot.stored_sessions, config.durable_drivers);
        let mcp = mcp::McpHub::new(mcp::McpSettings {
            server_version: config.version.clone(),
            timeout_ms: config.mcp_timeout_ms,
            max_message_bytes: config.mcp_max_message_bytes,
        });
        let sandbox = sandbox::SandboxHub::new(sandbox::SandboxSettings {
            exec_timeout_ms: config.sandbox_exec_timeout_ms,
            max_output: config.sandbox_max_output,
            subagent_timeout_ms: config.subagent_timeout_ms,
            labels: config.sandbox_labels.clone(),
        });
        let conns = connections::Table::new(connections::Settings {
            http: proto::http::Limits {
                max_head_bytes: config.max_head_bytes,
                max_headers: config.max_headers,
                max_body_bytes: config.max_body_bytes,
                ..Default::default()
            },
            idle_timeout_ms: config.idle_timeout_ms,
            request_timeout_ms: config.request_timeout_ms,
            max_import_bytes: config.max_import_bytes,
        });
        let metrics = metrics::Metrics::new(&config.metrics_disabled)
            .with_provider_entries(config.providers.iter().map(|p| p.name.as_str()));
        let replicas = config.replica.map(replicas::Replicas::new);
        let log = match &replicas {
            Some(r) => log::EventLog::new(
                r.align(snapshot.max_event_seq + 1),
                r.step(),
                snapshot.events_total,
            ),
            None => log::EventLog::new(snapshot.max_event_seq + 1, 1, snapshot.events_total),
        };
        let telemetry = telemetry::Telemetry::new(config.telemetry);
        let histories = history_cache::HistoryCache::new(config.history_cache);
        let overload = overload::Overload::new(config.overload);
        let limits = config.providers.iter().map(|p| (p.name.as_str(), p.limits));
        let provider_limits = provider_limits::ProviderLimits::new(limits, now.mono);
        let transfers = transfer::Transfers::new(config.max_import_bytes);
        let mut engine = Engine {
            sandbox,
            mcp,
            mcp_calls: Default::default(),
            next_mcp_call: mcp::CallToken(1),
            config,
            entropy,
            outputs: VecDeque::new(),
            now,
            catalog,
            conns,
            log,
            reads: ids::InFlight::starting_at(ReadId(1)),
            sessions: sessions::Sessions::new(histories, faults),
            streams: streams::Hub::default(),
            running: BTreeMap::new(),
            next_turn: turn::TurnId(1),
            calls: calls::Calls::default(),
            provider_limits,
            next_call: CallId(1),
            quiet: Vec::new(),
            idem: idempotency::Keys::restore(&snapshot.idempotency),
            faults,
            metrics,
            telemetry,
            replicas,
            residency,
            transfers,
            overload,
            shutting_down: false,
        };
        // Spec 04 §5 step 11: re-provision every active profile's images.
        let profiles: Vec<String> = engine
            .catalog
            .profiles
            .values()
            .filter(|p| p.is_live() && !p.row.available_sandboxes.is_empty())
            .map(|p| p.row.id.clone())
            .collect();
        for id in profiles {
            engine.provision_profile(&id);
        }
        engine.pump_mcp();
        engine
    }

    /// Feeds one thing that happened.
    pub fn handle_input(&mut self, now: Now, input: Input) {
        self.now = now;
        match input {
            Input::Accepted { conn, listener } => self.on_accepted(conn, listener),
            Input::Received { conn, bytes } => self.on_received(conn, &bytes),
            Input::Flushed { conn, bytes } => self.on_flushed(conn, bytes),
            Input::Closed { conn } => self.on_closed(conn),
            Input::ReadDone { id, result } => self.on_read_done(id, result),
            Input::ProviderDone { call, reply } => self.on_provider_done(call, reply),
            Input::ProviderChunk { call, bytes } => self.on_provider_chunk(call, &bytes),
            Input::Mcp { conn, event } => self.mcp.handle(conn, event, now.mono),
            Input::Sandbox { op, reply } => self.sandbox.handle_reply(op, reply, now.mono),
            Input::Shutdown => self.on_shutdown(),
            Input::Catalog(update) => self.on_catalog(*update),
        }
        self.settle();
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        self.now = now;
        self.fire_gate_deadlines();
        self.drop_idle_histories();
        self.send_keepalives();
        self.expire_reads();
        self.check_provider_streams();
        self.mcp.handle_timeout(now.mono);
        self.sandbox.handle_timeout(now.mono);
        self.provider_limits.tick(now.mono);
        self.settle();
    }

    /// Works off what the input left for later until nothing is left:
    /// turn streams that ended, connections free for their next pipelined
    /// request, provider admissions, the hubs' notices and commands. The
    /// handlers only record these, so none of them re-enters another.
    fn settle(&mut self) {
        loop {
            for conn in self.streams.take_ended_turns() {
                // The turn runs on without a consumer.
                self.forget_conn_in_turns(conn);
            }
            if let Some(conn) = self.conns.take_ready() {
                self.pump(conn);
                continue;
            }
            self.route_limit_notices();
            self.pump_mcp();
            if !self.streams.has_ended_turns() && !self.conns.has_ready() {
                break;
            }
        }
        self.evict_idle_sessions();
    }

    /// Next thing to do, in order. Drain it completely after every input.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Monotonic deadline of the next timer, if any.
    pub fn poll_timeout(&self) -> Option<MonoMs> {
        let mcp = self
            .mcp
            .poll_timeout()
            .filter(|_| !self.faults.mcp_timer_not_armed());
        [
            self.sessions.next_gate_deadline(),
            self.sessions.next_history_deadline(),
            self.next_keepalive(),
            self.conns.next_deadline(),
            mcp,
            self.sandbox.poll_timeout(),
            self.residency.next_deadline(),
            self.provider_limits.poll_timeout(),
            self.calls.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the span facts queued since the last call to `out` (empty
    /// unless [`Config::telemetry`]); drain after every input.
    pub fn drain_telemetry(&mut self, out: &mut Vec<telemetry::Fact>) {
        self.telemetry.drain_into(out);
    }

    /// The driver's store backlog (writes emitted and not yet committed,
    /// [`pipeline::Pipeline::backlog`]), for overload control; drivers
    /// report it after every input.
    pub fn note_store_backlog(&mut self, writes: usize) {
        self.overload.note_backlog(writes);
    }

    /// Number of connections the engine is tracking (for drivers' shutdown).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    fn random_bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.entropy.fill(&mut b);
        b
    }

    /// A fresh `<prefix>` + 32-hex id (time-ordered unless configured).
    fn new_id(&mut self, kind: proto::wire::ids::IdKind) -> String {
        let random = self.random_bytes::<16>();
        let bytes = self.config.id_order.bytes(self.now.unix.0, random);
        proto::wire::ids::make_id(kind, bytes)
    }

    /// A fresh secret token (192 bits of entropy).
    fn new_secret(&mut self, kind: proto::wire::ids::SecretKind) -> String {
        let bytes = self.random_bytes::<24>();
        proto::wire::ids::make_secret(kind, bytes)
    }

    /// `created_at` text for the current input.
    fn timestamp(&self) -> String {
        proto::wire::time::format_created_at(self.now.unix.0)
    }

    /// Appends one event to `session_id`'s log and publishes it. (Message
    /// events come only from session cores, which extend their cached
    /// history themselves.)
    pub(crate) fn append_event(
        &mut self,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: proto::wire::EventType,
        payload: serde_json::Value,
    ) -> log::Appended {
        let payload = proto::wire::json::text(&payload);
        self.append_event_text(session_id, client_key_id, event_type, payload)
    }

    /// [`Engine::append_event`] for a payload already rendered as compact
    /// JSON text (a large `provider.request` is built as text so that its
    /// history is never copied as a value tree). The write is emitted
    /// before the publication, so the driver commits before any stream
    /// sees the event.
    pub(crate) fn append_event_text(
        &mut self,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: proto::wire::EventType,
        payload: String,
    ) -> log::Appended {
        let id = self.new_id(proto::wire::ids::IdKind::Event);
        let created_at = self.timestamp();
        let row = (self.log).row(
            id,
            session_id,
            client_key_id,
            event_type,
            payload,
            created_at,
        );
        tracing::trace!(session_id, event_type = event_type.as_str(), payload = %row.payload, "event");
        let json = respond::escaped(respond::event_json(&row));
        let appended = log::Appended {
            seq: row.seq,
            id: row.id.clone(),
            json,
        };
        if self.faults.deliver_before_commit() {
            self.publish(session_id, &appended);
            self.write(StoreWrite::InsertEvent(row));
            return appended;
        }
        self.write(StoreWrite::InsertEvent(row));
        self.publish(session_id, &appended);
        appended
    }

    fn write(&mut self, w: StoreWrite) {
        self.outputs.push_back(Output::Write(w));
    }

    fn read(&mut self, read: StoreRead, then: conn::PendingRead) {
        let id = self.reads.issue(then);
        self.outputs.push_back(Output::Read { id, read });
    }

    /// Graceful shutdown: no new requests or admissions; subscriptions end
    /// cleanly; queued requests are refused; running turns finish (the driver
    /// waits for them up to `BAE_SHUTDOWN_TIMEOUT`).
    fn on_shutdown(&mut self) {
        self.shutting_down = true;
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.conns.get_mut(&id) {
                c.keep_alive = false;
            }
            let kind = self.streams.get(id).map(|s| &s.kind);
            match kind {
                None if !self.conns.get(&id).is_some_and(|c| c.busy) => self.close_conn(id),
                Some(rpc::StreamKind::Subscribe(_)) => self.end_stream(id),
                Some(rpc::StreamKind::Queued) => {
                    self.terminal_error(id, codes::APPLICATION_ERROR, "server is shutting down")
                }
                _ => {}
            }
        }
        for live in self.sessions.cores_mut() {
            live.gate.drain();
        }
        self.telemetry.shutdown();
    }
}
