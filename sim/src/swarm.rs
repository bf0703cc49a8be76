//! Swarm testing: every seed first draws its own fault mix and workload
//! shape, so different seeds explore very different corners (few sessions
//! with heavy contention, many crashes, slow readers, flaky providers…).

use std::fmt;

use crate::rng::Rng;

#[derive(Debug, Clone)]
pub struct Swarm {
    pub sessions: usize,
    /// Drivers per session.
    pub drivers: Vec<usize>,
    /// Observers per session.
    pub observers: Vec<usize>,
    /// Steps of the main (faulty) phase.
    pub steps: u64,

    // Provider.
    pub provider_latency_ms: (u64, u64),
    pub provider_timeout_ms: u64,
    pub provider_http500: f64,
    pub provider_malformed: f64,
    pub provider_transport: f64,
    pub tool_use: f64,
    /// Of tool_use replies: fraction of blocks naming an undeclared (MCP) tool.
    pub mcp_tool: f64,
    pub has_fallback: bool,
    /// Usage numbers large enough to cross auto-compaction thresholds.
    pub big_usage: f64,

    // Clients.
    pub malformed_body: f64,
    pub disconnect_streaming: f64,
    pub disconnect_queued: f64,
    pub never_return: f64,
    pub think_ms: (u64, u64),
    /// Answers to a paused turn.
    pub answer_missing: f64,
    pub answer_duplicate: f64,
    pub answer_wrong_id: f64,
    pub answer_plain: f64,
    pub answer_late: f64,
    pub compact: f64,
    pub update_tools: f64,
    pub auto_compaction: f64,
    pub slow_reader: f64,
    pub unsubscribe: f64,
    pub since_bogus: f64,
    pub events_page: f64,

    // Network and store.
    pub split_bytes: f64,
    /// Requests sent keep-alive (reusing an idle connection when possible).
    pub keep_alive: f64,
    /// registerDriver + sendMessage pipelined on one connection.
    pub pipeline: f64,
    /// Engine idle timeout for keep-alive connections.
    pub idle_timeout_ms: u64,
    pub net_delay_ms: (u64, u64),
    pub flush_delay_ms: (u64, u64),
    pub sockbuf: usize,
    pub commit_ms: (u64, u64),
    /// Store reads answered with an error.
    pub read_error: f64,
    pub read_ms: (u64, u64),

    // Engine config.
    pub turn_timeout_ms: u64,
    pub lag_limit: usize,
    /// NDJSON keepalive interval (0 = off).
    pub keepalive_ms: u64,
    /// `(budget_bytes, idle_ms)` of the history cache: idle sessions' cached
    /// histories dropped and rebuilt from the log (0 = at once).
    pub history_cache: (usize, u64),
    /// Idle sessions kept in memory (`None`: all): the rest are evicted and
    /// loaded back from the store on use; restarts restore lazily then.
    pub resident_sessions: Option<usize>,

    // Operator.
    /// Per admin action: revoke a random participant's client key.
    pub revoke: f64,
    /// Per admin action: point the profile at a missing primary provider
    /// (repaired by the next admin action).
    pub break_profile: f64,
    /// Engine request timeout (slowloris guard).
    pub request_timeout_ms: u64,

    // Crashes.
    pub crash: f64,
    /// Per step: begin a graceful shutdown (`Input::Shutdown`) and restart.
    pub shutdown: f64,

    // MCP servers (simulated by `sim/src/mcp.rs`).
    pub mcp: McpSwarm,
    // Container engine (simulated by `sim/src/sandbox.rs`).
    pub sandbox: SandboxSwarm,
    // Opt-in extensions (docs/extensions.md; `sim/src/ext.rs`).
    pub ext: ExtSwarm,
    // Forks, exports and imports by the operator (`world/transfer.rs`).
    pub transfer: TransferSwarm,
    /// Streamed provider calls (`sim/src/stream.rs`).
    pub stream: crate::stream::StreamSwarm,
    /// Retry policies, provider limits and rate-limit answers
    /// (`sim/src/traffic/`).
    pub traffic: crate::traffic::TrafficSwarm,
}

/// The operator's forks and exports (each export is imported back), per
/// transfer action (every 300–3,000 ms). Drawn after everything else.
#[derive(Debug, Clone, Default)]
pub struct TransferSwarm {
    pub fork: f64,
    pub export: f64,
}

impl TransferSwarm {
    pub fn draw(rng: &mut Rng) -> TransferSwarm {
        if !rng.chance(0.5) {
            return TransferSwarm::default();
        }
        TransferSwarm {
            fork: *rng.pick(&[0.3, 0.6, 0.9]),
            export: *rng.pick(&[0.2, 0.5, 0.9]),
        }
    }

    pub fn any(&self) -> bool {
        self.fork > 0.0 || self.export > 0.0
    }
}

/// Opt-in extension options of a seed (drawn after everything else, so
/// older options keep their per-seed values). Every decision they drive
/// comes from the world's own extension generator, so a seed with the
/// extensions off draws exactly what it drew before they existed.
#[derive(Debug, Clone, Default)]
pub struct ExtSwarm {
    /// Per driver and session: registers with `{"extensions": [...]}`.
    pub opt_in: f64,
    /// Per send of an opted-in driver: a `session.cancelTurn` from the side
    /// while the send runs or waits.
    pub cancel: f64,
    /// Per paused turn: cancel it instead of answering.
    pub cancel_pause: f64,
    /// Per send: a `session.steerTurn` from the side while it runs.
    pub steer: f64,
    /// Per send: carries an `idempotency_key`.
    pub idem: f64,
    /// Per keyed send: a concurrent retry, a retry after the answer, and a
    /// retry after the request was lost (connection reset, crash).
    pub retry: f64,
    /// Per keyed send: the key again with a different message.
    pub reuse: f64,
    /// Per observer subscription: `subscribe.gapless`.
    pub gapless: f64,
    /// Per observer action: its subscription stops reading for a while.
    pub stall: f64,
    pub stall_ms: (u64, u64),
    /// `Config::subscriber_window_bytes` (the gapless window; 0 = the
    /// engine's default).
    pub window_bytes: usize,
}

impl ExtSwarm {
    pub fn draw(rng: &mut Rng) -> ExtSwarm {
        if !rng.chance(0.7) {
            return ExtSwarm::default();
        }
        let hi = *rng.pick(&[300, 2_000, 8_000]);
        ExtSwarm {
            opt_in: *rng.pick(&[0.5, 0.8, 1.0]),
            cancel: rng.rate(0.3, 0.3),
            cancel_pause: rng.rate(0.4, 0.5),
            steer: rng.rate(0.3, 0.4),
            idem: rng.rate(0.2, 0.9),
            retry: rng.rate(0.2, 0.6),
            reuse: rng.rate(0.4, 0.2),
            gapless: rng.rate(0.2, 1.0),
            stall: rng.rate(0.3, 0.3),
            stall_ms: (50, hi),
            window_bytes: *rng.pick(&[512, 2_048, 16_384, 65_536]),
        }
    }

    /// No more side requests or stalls (the liveness phase).
    pub fn calm(&mut self) {
        self.cancel = 0.0;
        self.cancel_pause = 0.0;
        self.steer = 0.0;
        self.retry = 0.0;
        self.reuse = 0.0;
        self.stall = 0.0;
    }
}

impl fmt::Display for ExtSwarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ext[opt_in={} cancel={} cancel_pause={} steer={} idem={} retry={} reuse={} gapless={} stall={} stall_ms={}..{} window={}]",
            self.opt_in, self.cancel, self.cancel_pause, self.steer, self.idem, self.retry,
            self.reuse, self.gapless, self.stall, self.stall_ms.0, self.stall_ms.1,
            self.window_bytes,
        )
    }
}

/// Remote sandbox / subagent options of a seed (drawn after everything
/// else, so older options keep their per-seed values).
#[derive(Debug, Clone, Default)]
pub struct SandboxSwarm {
    /// The profile's `available_sandboxes` (empty = no remote sandboxes).
    pub images: Vec<String>,
    /// Listed images whose pull always fails.
    pub broken: Vec<String>,
    pub latency_ms: (u64, u64),
    pub ensure_fail: f64,
    pub start_fail: f64,
    pub exec_fail: f64,
    pub stop_fail: f64,
    /// Of answered execs: a non-zero exit code.
    pub nonzero_exit: f64,
    /// An exec that never answers (until killed).
    pub hang: f64,
    /// Per exec: the container dies (later execs fail).
    pub death: f64,
    /// `Config::sandbox_exec_timeout_ms`.
    pub exec_timeout_ms: u64,
    /// `Config::subagent_timeout_ms`.
    pub subagent_timeout_ms: u64,
    /// `Config::max_subagents_per_session`.
    pub max_subagents: u64,
    /// Per driver action: a sandbox RPC (start/stop/exec/cancelSubagent).
    pub rpc: f64,
    /// Drivers declare the Auto sandbox tool `sbx_shell`.
    pub auto_tools: bool,
    /// Drivers declare the remote subagent tool `sub_launch`.
    pub subagent_tools: bool,
}

impl SandboxSwarm {
    pub fn draw(rng: &mut Rng) -> SandboxSwarm {
        if !rng.chance(0.6) {
            return SandboxSwarm {
                exec_timeout_ms: 600_000,
                subagent_timeout_ms: 600_000,
                max_subagents: 4,
                ..SandboxSwarm::default()
            };
        }
        let mut images = vec!["sim-box:1".to_string()];
        if rng.chance(0.5) {
            images.push("sim-sub:1".to_string());
        }
        let mut broken = Vec::new();
        if rng.chance(0.3) {
            images.push("sim-broken:1".to_string());
            broken.push("sim-broken:1".to_string());
        }
        let lo = rng.range(0, 20);
        let hi = lo + *rng.pick(&[0, 20, 300, 3_000]);
        SandboxSwarm {
            images,
            broken,
            latency_ms: (lo, hi),
            ensure_fail: rng.rate(0.5, 0.2),
            start_fail: rng.rate(0.5, 0.2),
            exec_fail: rng.rate(0.5, 0.2),
            stop_fail: rng.rate(0.5, 0.2),
            nonzero_exit: rng.rate(0.3, 0.5),
            hang: rng.rate(0.5, 0.15),
            death: rng.rate(0.7, 0.05),
            exec_timeout_ms: *rng.pick(&[100, 1_000, 5_000, 60_000]),
            subagent_timeout_ms: *rng.pick(&[200, 2_000, 20_000]),
            max_subagents: rng.range(1, 3),
            rpc: *rng.pick(&[0.1, 0.2, 0.3]),
            auto_tools: rng.chance(0.7),
            subagent_tools: rng.chance(0.5),
        }
    }

    /// Faults off, fast answers (the liveness phase).
    pub fn calm(&mut self) {
        self.ensure_fail = 0.0;
        self.start_fail = 0.0;
        self.exec_fail = 0.0;
        self.stop_fail = 0.0;
        self.hang = 0.0;
        self.death = 0.0;
        self.rpc = 0.0;
        self.latency_ms = (self.latency_ms.0.min(5), self.latency_ms.0.min(5) + 5);
    }
}

impl fmt::Display for SandboxSwarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sandbox[images={:?} broken={:?} latency={}..{}ms ensure_fail={} start_fail={} exec_fail={} stop_fail={} nonzero={} hang={} death={} exec_timeout={}ms subagent_timeout={}ms max_subagents={} rpc={} auto_tools={} subagent_tools={}]",
            self.images, self.broken, self.latency_ms.0, self.latency_ms.1, self.ensure_fail,
            self.start_fail, self.exec_fail, self.stop_fail, self.nonzero_exit, self.hang,
            self.death, self.exec_timeout_ms, self.subagent_timeout_ms, self.max_subagents,
            self.rpc, self.auto_tools, self.subagent_tools,
        )
    }
}

/// One `[[mcp.servers]]` entry of the simulated registry.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerOpt {
    pub name: String,
    pub http: bool,
    pub reconnect: bool,
    /// HTTP: the server hands out an `mcp-session-id` at `initialize`.
    pub issues_session: bool,
    /// `tools/list` names, in order (deterministic per server).
    pub tools: Vec<String>,
    /// `tools/list` comes in two pages (`nextCursor`).
    pub paged: bool,
}

/// MCP options of a seed: the registry, what the profile lists, latency,
/// the engine's per-request timeout and the servers' fault rates.
#[derive(Debug, Clone, Default)]
pub struct McpSwarm {
    /// 0–3 servers.
    pub servers: Vec<McpServerOpt>,
    /// Names the profile's `mcp_servers` lists (possibly an unknown one).
    pub profile: Vec<String>,
    /// Undeclared tool names the provider may call: `mcp_lookup` (no
    /// server has it) and names the servers advertise. Empty = just
    /// `provider::MCP_TOOL`.
    pub undeclared: Vec<String>,
    pub latency_ms: (u64, u64),
    /// `Config::mcp_timeout_ms` (sometimes tiny, to race it).
    pub timeout_ms: u64,
    /// Spawn / endpoint preparation fails.
    pub open_fail: f64,
    /// A JSON-RPC `error` answer.
    pub error: f64,
    /// A `tools/call` result with `isError: true`.
    pub is_error: f64,
    /// stdio: garbage lines, notifications, wrong ids before the answer;
    /// HTTP: an unusable body (no matching answer, not JSON).
    pub noise: f64,
    /// The answer comes after the engine's timeout.
    pub slow: f64,
    /// The server exits mid-request (stdio `Closed`, HTTP connection refused
    /// from then on).
    pub exit: f64,
    /// HTTP non-2xx.
    pub http_status: f64,
    /// HTTP: the server forgets the `mcp-session-id` (404 from then on).
    pub expire: f64,
}

impl McpSwarm {
    pub fn draw(rng: &mut Rng) -> McpSwarm {
        const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
        let n = rng.range(0, 3) as usize;
        let shared = rng.chance(0.5);
        let mut servers = Vec::with_capacity(n);
        for name in NAMES.iter().take(n) {
            let http = rng.chance(0.5);
            let reconnect = rng.chance(0.4);
            let issues_session = http && rng.chance(0.7);
            let paged = rng.chance(0.3);
            let mut tools = vec![format!("{name}_search"), format!("{name}_fetch")];
            if shared {
                // Several servers export it: the later one in profile
                // order runs it.
                tools.insert(1, "mcp_shared".to_string());
            }
            if rng.chance(0.15) {
                // Collides with a client tool: MCP only for drivers that
                // did not declare it.
                tools.push("read_file".to_string());
            }
            servers.push(McpServerOpt {
                name: name.to_string(),
                http,
                reconnect,
                issues_session,
                tools,
                paged,
            });
        }
        let mut profile: Vec<String> = Vec::new();
        if n > 0 && rng.chance(0.85) {
            let mut names: Vec<String> = servers
                .iter()
                .filter(|_| rng.chance(0.8))
                .map(|s| s.name.clone())
                .collect();
            if names.is_empty() {
                names.push(servers[rng.index(n)].name.clone());
            }
            // Profile order decides routes: sometimes not registry order.
            if names.len() > 1 && rng.chance(0.5) {
                names.reverse();
            }
            profile = names;
        }
        if rng.chance(0.2) {
            let at = rng.index(profile.len() + 1);
            profile.insert(at, "ghost".to_string());
        }
        let mut undeclared: Vec<String> = Vec::new();
        if n > 0 {
            undeclared.push(crate::provider::MCP_TOOL.to_string());
            for s in &servers {
                for t in &s.tools {
                    if !undeclared.contains(t) {
                        undeclared.push(t.clone());
                    }
                }
            }
        }
        let lo = rng.range(1, 20);
        let hi = lo + *rng.pick(&[0, 10, 100, 1_000]);
        McpSwarm {
            servers,
            profile,
            undeclared,
            latency_ms: (lo, hi),
            timeout_ms: *rng.pick(&[50, 300, 2_000, 30_000, 30_000]),
            open_fail: rng.rate(0.6, 0.3),
            error: rng.rate(0.5, 0.2),
            is_error: rng.rate(0.5, 0.3),
            noise: rng.rate(0.4, 0.8),
            slow: rng.rate(0.5, 0.2),
            exit: rng.rate(0.6, 0.1),
            http_status: rng.rate(0.6, 0.15),
            expire: rng.rate(0.6, 0.15),
        }
    }

    /// Faults off, fast answers (the liveness phase).
    pub fn calm(&mut self) {
        self.open_fail = 0.0;
        self.error = 0.0;
        self.is_error = 0.0;
        self.noise = 0.0;
        self.slow = 0.0;
        self.exit = 0.0;
        self.http_status = 0.0;
        self.expire = 0.0;
        let hi = (self.timeout_ms / 2).clamp(1, 20);
        self.latency_ms = (1, hi);
    }
}

impl fmt::Display for McpSwarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self
            .servers
            .iter()
            .map(|s| {
                let mut d = format!("{}({}", s.name, if s.http { "http" } else { "stdio" });
                if s.issues_session {
                    d.push_str(",sid");
                }
                if s.reconnect {
                    d.push_str(",reconnect");
                }
                if s.paged {
                    d.push_str(",paged");
                }
                d.push_str(&format!(":{})", s.tools.join("|")));
                d
            })
            .collect();
        write!(
            f,
            "mcp[servers={servers:?} profile={:?} latency={}..{}ms timeout={}ms open_fail={} error={} is_error={} noise={} slow={} exit={} http_status={} expire={}]",
            self.profile,
            self.latency_ms.0,
            self.latency_ms.1,
            self.timeout_ms,
            self.open_fail,
            self.error,
            self.is_error,
            self.noise,
            self.slow,
            self.exit,
            self.http_status,
            self.expire,
        )
    }
}

impl Swarm {
    pub fn draw(rng: &mut Rng) -> Swarm {
        let sessions = rng.range(1, 3) as usize;
        let drivers = (0..sessions).map(|_| rng.range(1, 4) as usize).collect();
        let observers = (0..sessions).map(|_| rng.range(0, 3) as usize).collect();
        let lat_lo = rng.range(1, 50);
        let lat_hi = lat_lo + *rng.pick(&[0, 20, 200, 2_000, 10_000]);
        let turn_timeout_ms = *rng.pick(&[150, 600, 2_000, 10_000, 120_000]);
        let mut sw = Swarm {
            sessions,
            drivers,
            observers,
            steps: rng.range(1_500, 4_000),
            provider_latency_ms: (lat_lo, lat_hi),
            provider_timeout_ms: *rng.pick(&[500, 3_000, 30_000, 300_000]),
            provider_http500: rng.rate(0.5, 0.25),
            provider_malformed: rng.rate(0.6, 0.15),
            provider_transport: rng.rate(0.6, 0.15),
            tool_use: rng.rate(0.15, 0.8),
            mcp_tool: rng.rate(0.3, 0.6),
            has_fallback: rng.chance(0.4),
            big_usage: rng.rate(0.5, 0.5),
            malformed_body: rng.rate(0.5, 0.1),
            disconnect_streaming: rng.rate(0.4, 0.25),
            disconnect_queued: rng.rate(0.4, 0.25),
            never_return: rng.rate(0.6, 0.08),
            think_ms: (0, *rng.pick(&[5, 50, 500, 3_000])),
            answer_missing: rng.rate(0.5, 0.15),
            answer_duplicate: rng.rate(0.5, 0.15),
            answer_wrong_id: rng.rate(0.5, 0.15),
            answer_plain: rng.rate(0.4, 0.3),
            answer_late: rng.rate(0.4, 0.3),
            compact: rng.rate(0.5, 0.15),
            update_tools: rng.rate(0.5, 0.1),
            auto_compaction: rng.rate(0.5, 1.0),
            slow_reader: rng.rate(0.4, 1.0),
            unsubscribe: rng.rate(0.4, 0.2),
            since_bogus: rng.rate(0.6, 0.2),
            events_page: rng.rate(0.4, 0.3),
            split_bytes: rng.rate(0.3, 0.9),
            net_delay_ms: (0, *rng.pick(&[0, 2, 20])),
            flush_delay_ms: (0, *rng.pick(&[0, 3, 30])),
            sockbuf: *rng.pick(&[256, 4_096, 65_536]),
            commit_ms: (0, *rng.pick(&[0, 1, 5, 40])),
            read_ms: (0, *rng.pick(&[0, 2, 20])),
            turn_timeout_ms,
            lag_limit: *rng.pick(&[2, 4, 16, 256]),
            keepalive_ms: *rng.pick(&[0, 0, 0, 1_000, 5_000]),
            revoke: rng.rate(0.7, 0.3),
            break_profile: rng.rate(0.8, 0.2),
            request_timeout_ms: *rng.pick(&[30_000, 30_000, 30_000, 40]),
            read_error: rng.rate(0.7, 0.1),
            keep_alive: rng.rate(0.4, 0.8),
            pipeline: rng.rate(0.5, 0.5),
            idle_timeout_ms: *rng.pick(&[75_000, 75_000, 300]),
            crash: if rng.chance(0.5) {
                0.0
            } else {
                *rng.pick(&[0.0005, 0.002, 0.006])
            },
            shutdown: *rng.pick(&[0.0, 0.0, 0.0005, 0.002]),
            mcp: McpSwarm::default(),
            sandbox: SandboxSwarm::default(),
            ext: ExtSwarm::default(),
            transfer: TransferSwarm::default(),
            stream: crate::stream::StreamSwarm::default(),
            traffic: crate::traffic::TrafficSwarm::default(),
            history_cache: (usize::MAX, u64::MAX),
            resident_sessions: None,
        };
        // Drawn last so the options above stay what they were per seed.
        sw.mcp = McpSwarm::draw(rng);
        sw.sandbox = SandboxSwarm::draw(rng);
        sw.ext = ExtSwarm::draw(rng);
        sw.history_cache = (
            *rng.pick(&[0, 4_096, usize::MAX]),
            *rng.pick(&[0, 50, 1_000, 10_000, u64::MAX]),
        );
        sw.resident_sessions = *rng.pick(&[None, Some(0), Some(1), Some(3), Some(1024)]);
        sw.stream = crate::stream::StreamSwarm::draw(rng);
        sw.transfer = TransferSwarm::draw(rng);
        sw.traffic = crate::traffic::TrafficSwarm::draw(rng);
        if sw.traffic.on {
            // Shared limits need sessions competing for slots: up to four
            // more, one driver each.
            let extra = rng.range(0, 4) as usize;
            sw.sessions += extra;
            sw.drivers.extend(std::iter::repeat_n(1, extra));
            sw.observers.extend(std::iter::repeat_n(0, extra));
        }
        sw
    }

    /// Turns every fault off (the liveness phase).
    pub fn calm(&mut self) {
        self.provider_http500 = 0.0;
        self.provider_malformed = 0.0;
        self.provider_transport = 0.0;
        self.provider_latency_ms = (1, 20);
        self.provider_timeout_ms = 300_000;
        self.malformed_body = 0.0;
        self.disconnect_streaming = 0.0;
        self.disconnect_queued = 0.0;
        self.never_return = 0.0;
        self.answer_missing = 0.0;
        self.answer_duplicate = 0.0;
        self.answer_wrong_id = 0.0;
        self.answer_plain = 0.0;
        self.answer_late = 0.0;
        self.compact = 0.0;
        self.update_tools = 0.0;
        self.unsubscribe = 0.0;
        self.crash = 0.0;
        self.shutdown = 0.0;
        self.read_error = 0.0;
        self.revoke = 0.0;
        self.break_profile = 0.0;
        self.tool_use = self.tool_use.min(0.3);
        self.mcp.calm();
        self.sandbox.calm();
        self.ext.calm();
        self.stream.calm();
        self.traffic.calm();
    }
}

impl fmt::Display for Swarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sessions={} drivers={:?} observers={:?} steps={} \
             provider[latency={}..{}ms timeout={}ms http500={} malformed={} transport={} tool_use={} mcp={} fallback={} big_usage={}] \
             clients[malformed_body={} disc_stream={} disc_queued={} never_return={} think={}..{}ms \
             answer(missing={} dup={} wrong_id={} plain={} late={}) compact={} update_tools={} auto_compaction={} slow_reader={} unsubscribe={} since_bogus={} events_page={}] \
             net[split={} keep_alive={} pipeline={} idle_timeout={}ms delay={}..{}ms flush_delay={}..{}ms sockbuf={}] store[commit={}..{}ms read={}..{}ms read_error={}] \
             engine[turn_timeout={}ms lag_limit={} keepalive={}ms request_timeout={}ms] admin[revoke={} break_profile={}] crash={} shutdown={} {} {} {} history_cache={}/{}ms resident={:?} {} transfer[fork={} export={}] {}",
            self.sessions,
            self.drivers,
            self.observers,
            self.steps,
            self.provider_latency_ms.0,
            self.provider_latency_ms.1,
            self.provider_timeout_ms,
            self.provider_http500,
            self.provider_malformed,
            self.provider_transport,
            self.tool_use,
            self.mcp_tool,
            self.has_fallback,
            self.big_usage,
            self.malformed_body,
            self.disconnect_streaming,
            self.disconnect_queued,
            self.never_return,
            self.think_ms.0,
            self.think_ms.1,
            self.answer_missing,
            self.answer_duplicate,
            self.answer_wrong_id,
            self.answer_plain,
            self.answer_late,
            self.compact,
            self.update_tools,
            self.auto_compaction,
            self.slow_reader,
            self.unsubscribe,
            self.since_bogus,
            self.events_page,
            self.split_bytes,
            self.keep_alive,
            self.pipeline,
            self.idle_timeout_ms,
            self.net_delay_ms.0,
            self.net_delay_ms.1,
            self.flush_delay_ms.0,
            self.flush_delay_ms.1,
            self.sockbuf,
            self.commit_ms.0,
            self.commit_ms.1,
            self.read_ms.0,
            self.read_ms.1,
            self.read_error,
            self.turn_timeout_ms,
            self.lag_limit,
            self.keepalive_ms,
            self.request_timeout_ms,
            self.revoke,
            self.break_profile,
            self.crash,
            self.shutdown,
            self.mcp,
            self.sandbox,
            self.ext,
            self.history_cache.0,
            self.history_cache.1,
            self.resident_sessions,
            self.stream,
            self.transfer.fork,
            self.transfer.export,
            self.traffic,
        )
    }
}
