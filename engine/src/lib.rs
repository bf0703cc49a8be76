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
pub mod driver;
pub mod faults;
pub mod history_cache;
pub mod history_load;
mod idempotency;
pub mod ids;
mod io;
mod live;
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
pub mod quotas;

mod placement;
pub mod replicas;
pub mod residency;
mod respond;
mod routes;
mod rpc;
pub mod sandbox;
mod services;
mod session_core;
mod session_sandbox;
mod sessions;
pub mod store;
mod streams;
mod subscribe;
pub mod telemetry;
pub mod time;
mod token_bucket;
pub mod transfer;
mod turn;
pub mod usage;

use std::collections::VecDeque;

use conn::{AdminRead, PendingRead, PlaceRead};
use connections::Polled;
use mcp::McpNotice;
use model::Catalog;
use proto::jsonrpc::codes;
use sandbox::{Requester, SandboxNotice};
use services::Services;

/// Provider-facing history rebuilt from the log with plain store reads.
/// How a key is stored (`keys.key_hash`): for harnesses that seed a store.
pub use auth::digest_hex as key_digest_hex;
pub use ids::{CallId, ConnId};
pub use session_core::retry::RetryPolicy;
pub use store::{ReadError, ReadId, ReadResult, Snapshot, StoreRead, StoreWrite};
pub use time::{MonoMs, UnixMs};

pub use config::{
    Config, ProviderEntry, StreamSettings, DEFAULT_MAX_IMPORT_BYTES, DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_RESIDENT_SESSIONS,
};
pub use io::{AuthPlacement, Entropy, Input, Listener, Now, Output, ProviderCall, ProviderReply};

/// The protocol engine. See the crate docs for the driving contract.
pub struct Engine {
    /// What every part speaks through: configuration, time, ids, the
    /// connections and their streams, the event log, store reads and
    /// writes, the output queue, metrics and telemetry.
    svc: Services,
    catalog: Catalog,
    /// Every session's runtime parts (core, pending create, drivers'
    /// extensions, MCP restore) and the indices over them.
    sessions: sessions::Sessions,
    /// Turns, provider calls and MCP calls in flight, by session.
    routes: routes::Routes,
    /// Every provider entry's shared limits, queues and retry timers.
    provider_limits: provider_limits::ProviderLimits,
    /// Every session's MCP connection set.
    mcp: mcp::McpHub,
    /// Every session's remote sandbox and subagents; image status.
    sandbox: sandbox::SandboxHub,
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
        let mut catalog = Catalog::restore(&mut snapshot, config.durable_drivers);
        catalog.quotas =
            quotas::Quotas::restore(&snapshot.quotas, &snapshot.open_sessions, now.mono);
        if config.replica.is_some() {
            catalog.quotas.refresh_every(quotas::REFRESH_MS, now.mono);
        }
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
        let provider_limits =
            provider_limits::ProviderLimits::new(limits, now.mono).with_faults(faults);
        let transfers = transfer::Transfers::new(config.max_import_bytes);
        let svc = Services {
            config,
            entropy,
            outputs: VecDeque::new(),
            now,
            conns,
            log,
            reads: ids::InFlight::starting_at(ReadId(1)),
            streams: streams::Hub::default(),
            quiet: Vec::new(),
            faults,
            metrics,
            telemetry,
        };
        let mut engine = Engine {
            svc,
            sandbox,
            mcp,
            catalog,
            sessions: sessions::Sessions::new(histories, faults),
            routes: routes::Routes::default(),
            provider_limits,
            replicas,
            residency,
            transfers,
            overload,
            shutting_down: false,
        };
        (engine.sessions).restore_keys(&engine.catalog, &snapshot.idempotency);
        // Spec 04 §5 step 11: re-provision every active profile's images.
        let profiles: Vec<String> = engine
            .catalog
            .profiles
            .values()
            .filter(|p| p.is_live() && !p.row.available_sandboxes.is_empty())
            .map(|p| p.row.id.clone())
            .collect();
        for id in profiles {
            engine.sandbox_cx().provision_profile(&id);
        }
        engine.pump_mcp();
        // Token budgets count from the store's usage in their window.
        for scope in engine.catalog.quotas.budgeted() {
            (engine.catalog).seed_quota(&mut engine.svc, scope);
        }
        engine
    }

    /// Feeds one thing that happened.
    pub fn handle_input(&mut self, now: Now, input: Input) {
        self.svc.now = now;
        match input {
            Input::Accepted { conn, listener } => self.on_accepted(conn, listener),
            Input::Received { conn, bytes } => self.on_received(conn, &bytes),
            Input::Flushed { conn, bytes } => self.on_flushed(conn, bytes),
            Input::Closed { conn } => self.on_closed(conn),
            Input::ReadDone { id, result } => self.on_read_done(id, result),
            Input::ProviderDone { call, reply } => self.live().on_provider_done(call, reply),
            Input::ProviderChunk { call, bytes } => self.live().on_provider_chunk(call, &bytes),
            Input::Mcp { conn, event } => {
                (self.sessions).mcp_event(&mut self.mcp, conn, event, now.mono)
            }
            Input::Sandbox { op, reply } => {
                (self.sandbox).handle_reply(op, reply, now.mono, &mut self.sessions)
            }
            Input::Shutdown => self.on_shutdown(),
            Input::Catalog(update) => self.on_catalog(*update),
        }
        self.settle();
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        self.svc.now = now;
        self.live().fire_gate_deadlines();
        self.sessions
            .drop_idle(&mut self.catalog, self.svc.now.mono);
        self.svc.send_keepalives();
        self.svc.expire_reads();
        self.live().check_provider_streams();
        (self.sessions).mcp_timeout(&mut self.mcp, now.mono);
        (self.sandbox).handle_timeout(now.mono, &mut self.sessions);
        self.provider_limits.tick(now.mono);
        self.catalog.refresh_quotas(&mut self.svc);
        self.settle();
    }

    /// Works off what the input left for later until nothing is left:
    /// turn streams that ended, connections free for their next pipelined
    /// request, provider admissions, the hubs' notices and commands. The
    /// handlers only record these, so none of them re-enters another.
    fn settle(&mut self) {
        loop {
            self.sessions.unlist_ended(&mut self.svc.streams);
            for conn in self.svc.streams.take_ended_turns() {
                // The turn runs on without a consumer.
                self.sessions
                    .forget_conn_everywhere(&mut self.svc, &self.routes, conn);
            }
            if let Some(conn) = self.svc.conns.take_ready() {
                self.pump(conn);
                continue;
            }
            self.live().route_limit_notices();
            self.pump_mcp();
            if !self.svc.streams.has_ended_turns() && !self.svc.conns.has_ready() {
                break;
            }
        }
        self.sessions.unlist_ended(&mut self.svc.streams);
        self.evict_idle_sessions();
    }

    /// Next thing to do, in order. Drain it completely after every input.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.svc.outputs.pop_front()
    }

    /// Monotonic deadline of the next timer, if any.
    pub fn poll_timeout(&self) -> Option<MonoMs> {
        let mcp = self
            .mcp
            .poll_timeout()
            .filter(|_| !self.svc.faults.mcp_timer_not_armed());
        [
            self.sessions.next_gate_deadline(),
            self.sessions.next_history_deadline(),
            self.svc.next_keepalive(),
            self.svc.conns.next_deadline(),
            mcp,
            self.sandbox.poll_timeout(),
            self.residency.next_deadline(),
            self.provider_limits.poll_timeout(),
            self.routes.calls.next_deadline(),
            self.catalog.quotas.next_refresh(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the span facts queued since the last call to `out` (empty
    /// unless [`Config::telemetry`]); drain after every input.
    pub fn drain_telemetry(&mut self, out: &mut Vec<telemetry::Fact>) {
        self.svc.telemetry.drain_into(out);
    }

    /// The driver's store backlog (writes emitted and not yet committed,
    /// [`pipeline::Pipeline::backlog`]), for overload control; drivers
    /// report it after every input.
    pub fn note_store_backlog(&mut self, writes: usize) {
        self.overload.note_backlog(writes);
    }

    /// Number of connections the engine is tracking (for drivers' shutdown).
    pub fn connection_count(&self) -> usize {
        self.svc.conns.len()
    }

    /// Moves the sub-state machines' commands to the outputs and routes
    /// their notices until all are drained (a notice may make a turn start
    /// the next call).
    pub(crate) fn pump_mcp(&mut self) {
        loop {
            if let Some(notice) = self.mcp.poll_notice() {
                match notice {
                    McpNotice::SessionReady { session_id } => self.release_create(&session_id),
                    McpNotice::CallDone { token, outcome } => {
                        self.live().on_mcp_call_done(token, outcome)
                    }
                }
                continue;
            }
            if let Some(notice) = self.sandbox.poll_notice() {
                self.on_sandbox_notice(notice);
                continue;
            }
            if let Some(cmd) = self.mcp.poll_command() {
                self.svc.outputs.push_back(Output::Mcp(cmd));
                continue;
            }
            match self.sandbox.poll_command() {
                Some(cmd) => self.svc.outputs.push_back(Output::Sandbox(cmd)),
                None => return,
            }
        }
    }

    /// The live loop's view: what a JSON-RPC request, the turn gate and a
    /// turn may touch.
    fn live(&mut self) -> live::LiveCx<'_> {
        live::LiveCx {
            svc: &mut self.svc,
            catalog: &mut self.catalog,
            sessions: &mut self.sessions,
            routes: &mut self.routes,
            provider_limits: &mut self.provider_limits,
            mcp: &mut self.mcp,
            sandbox: &mut self.sandbox,
            shutting_down: self.shutting_down,
        }
    }

    /// The sandbox hub with what its RPCs and lifecycle read and write.
    fn sandbox_cx(&mut self) -> session_sandbox::SandboxCx<'_> {
        session_sandbox::SandboxCx {
            sandbox: &mut self.sandbox,
            sessions: &mut self.sessions,
            catalog: &self.catalog,
            svc: &mut self.svc,
        }
    }

    /// Routes one hub notice (called from the subsystem pump).
    pub(crate) fn on_sandbox_notice(&mut self, notice: SandboxNotice) {
        match notice {
            SandboxNotice::Started {
                session_id,
                requester,
                image,
                result,
            } => self
                .sandbox_cx()
                .sandbox_started(&session_id, requester, &image, result),
            SandboxNotice::Stopped {
                session_id,
                requester,
                handle,
                reason,
                result,
            } => {
                let fanout = self.sessions.streams_mut(&session_id);
                (self.svc).sandbox_stopped(fanout, &session_id, requester, &handle, reason, result)
            }
            SandboxNotice::Executed {
                session_id,
                requester,
                handle,
                result,
            } => match requester {
                Requester::Turn { turn, index } => {
                    self.live()
                        .on_sandbox_tool_done(turn, index, &session_id, &handle, result)
                }
                Requester::Rpc { conn, key_id } => {
                    self.sandbox_cx()
                        .manual_exec_done(conn, &key_id, &session_id, &handle, result)
                }
                Requester::Teardown { .. } => {}
            },
            SandboxNotice::SubagentEnded { session_id, status } => {
                self.svc.subagent_span_end(&status);
                if let Some((kind, payload)) = status.terminal_event() {
                    let fanout = self.sessions.streams_mut(&session_id);
                    let key = Some(status.key_id.as_str());
                    (self.svc).append_event(fanout, &session_id, key, kind, payload);
                }
            }
            SandboxNotice::Provisioned {
                profile_id,
                image,
                result,
            } => match result {
                Ok(()) => tracing::info!(profile = %profile_id, %image, "sandbox image available"),
                Err(e) => {
                    tracing::warn!(profile = %profile_id, %image, error = %e.detail(), "sandbox image provisioning failed")
                }
            },
        }
    }

    /// Graceful shutdown: no new requests or admissions; subscriptions end
    /// cleanly; queued requests are refused; running turns finish (the driver
    /// waits for them up to `BAE_SHUTDOWN_TIMEOUT`).
    fn on_shutdown(&mut self) {
        self.shutting_down = true;
        let ids: Vec<ConnId> = self.svc.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.svc.conns.get_mut(&id) {
                c.keep_alive = false;
            }
            let kind = self.svc.streams.get(id).map(|s| &s.kind);
            match kind {
                None if !self.svc.conns.get(&id).is_some_and(|c| c.busy) => self.svc.close_conn(id),
                Some(streams::StreamKind::Subscribe) => self.svc.end_stream(id),
                Some(streams::StreamKind::Queued) => {
                    self.svc
                        .terminal_error(id, codes::APPLICATION_ERROR, "server is shutting down")
                }
                _ => {}
            }
        }
        for live in self.sessions.cores_mut() {
            live.gate.drain();
        }
        self.svc.telemetry.shutdown();
    }
}

// ---- Connections and store reads ---------------------------------------

impl Engine {
    pub(crate) fn on_accepted(&mut self, conn: ConnId, listener: Listener) {
        self.svc.conns.accept(conn, listener);
        if self.shutting_down {
            self.svc.close_conn(conn);
        } else {
            self.svc.conns.arm_read_deadline(conn, self.svc.now.mono);
        }
    }

    pub(crate) fn on_received(&mut self, conn: ConnId, bytes: &[u8]) {
        if !self.svc.conns.receive(conn, bytes) {
            // A client that keeps pipelining while a request is answered
            // must not grow the buffer without bound.
            tracing::debug!(
                conn = conn.0,
                "pipelined input over the buffer cap; closing"
            );
            return self.svc.close_conn(conn);
        }
        self.pump(conn);
    }

    pub(crate) fn on_flushed(&mut self, conn: ConnId, bytes: usize) {
        self.svc.conns.flushed(conn, bytes);
        self.svc.stream_flushed(conn, bytes);
        self.sessions.stream_flushed(&mut self.svc, conn);
        self.svc.send_drained_deltas(conn);
        if self.transfers.has(conn) {
            let unflushed = self.svc.conns.get(&conn).map_or(0, |c| c.unflushed);
            let outs = self.transfers.flushed(conn, unflushed);
            self.run_transfer(conn, outs);
        }
    }

    pub(crate) fn on_closed(&mut self, conn: ConnId) {
        if self.svc.conns.remove(conn).is_none() {
            return;
        }
        self.svc.streams.end(conn);
        self.transfers.forget(conn);
        self.svc.telemetry.http_end(conn);
        self.sessions
            .forget_conn_everywhere(&mut self.svc, &self.routes, conn);
    }

    /// Dispatches requests until one goes asynchronous or the buffer runs
    /// dry.
    pub(crate) fn pump(&mut self, conn: ConnId) {
        let keep_alive = !self.shutting_down;
        while let Some(polled) = self.svc.conns.poll(conn, self.svc.now.mono, keep_alive) {
            match polled {
                Polled::Waiting => return,
                Polled::Continue => self.svc.send(conn, proto::http::CONTINUE_100.to_vec()),
                Polled::Request(req, listener) => {
                    if self.svc.telemetry.enabled() {
                        let method = req.method.as_str();
                        let traceparent = req.header("traceparent");
                        (self.svc.telemetry).http_begin(
                            conn,
                            listener,
                            method,
                            req.path(),
                            traceparent,
                        );
                    }
                    match listener {
                        Listener::Client => self.route_client(conn, *req),
                        Listener::Admin => self.route_admin(conn, *req),
                    }
                }
                Polled::Rejected(rejection) => {
                    tracing::debug!(
                        conn = conn.0,
                        status = rejection.status,
                        reason = rejection.reason,
                        "rejected request"
                    );
                    self.svc
                        .send(conn, proto::http::encode_rejection(&rejection));
                    return self.svc.close_conn(conn);
                }
            }
        }
    }

    pub(crate) fn on_read_done(
        &mut self,
        id: crate::ReadId,
        result: Result<ReadResult, crate::store::ReadError>,
    ) {
        let Some(pending) = self.svc.reads.take(id) else {
            return;
        };
        match pending {
            PendingRead::Answer(read) => self.svc.on_answer_read(read, result),
            PendingRead::Replay(read) => self.sessions.replay_read(&mut self.svc, read, result),
            PendingRead::Live(read) => self.live().on_read_done(read, result),
            PendingRead::Place(PlaceRead::Claim { session_id, then }) => {
                self.on_claim_done(&session_id, then, result)
            }
            PendingRead::Place(PlaceRead::LoadSession {
                session_id,
                conn,
                req,
                then,
            }) => self.on_session_loaded(&session_id, (conn, *req, then), result),
            PendingRead::Admin(AdminRead::Revoke { conn, key_id }) => {
                self.on_revoke_read(conn, &key_id, result)
            }
            PendingRead::Admin(AdminRead::Transfer { conn }) => {
                let unflushed = self.svc.conns.get(&conn).map_or(0, |c| c.unflushed);
                let outs = self.transfers.read_done(conn, result, unflushed);
                self.run_transfer(conn, outs);
            }
            PendingRead::Admin(AdminRead::QuotaUsage {
                scope,
                since_ms,
                conn,
            }) => (self.catalog).on_quota_usage(&mut self.svc, (scope, since_ms, conn), result),
            PendingRead::Admin(AdminRead::Metrics { conn }) => {
                let rt = match result {
                    Ok(ReadResult::Runtime(rt)) => rt,
                    _ => Default::default(),
                };
                self.answer_metrics(conn, &rt);
            }
        }
    }
}
