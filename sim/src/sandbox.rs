//! A simulated container engine behind `Output::Sandbox` (spec 06 §5–§6)
//! and the remote sandbox / subagent invariants.
//!
//! The world hands every [`SandboxCommand`] to [`SandboxSim::on_command`],
//! which plays the driver: it answers `EnsureImage` / `Start` / `Exec` /
//! `Stop` after a seeded latency with the seed's faults (pull failures,
//! run/exec/stop errors, non-zero exits, execs that hang until killed,
//! containers that die so later execs fail) and returns the replies to
//! schedule. [`SandboxSim::deliver`] is asked before each reply reaches the
//! engine (a killed exec reports nothing).
//!
//! Invariants come from two vantage points: the driver (what the engine
//! asked of which container, and when) and the emitted event log
//! (`session.sandbox.*`, `session.subagent.*`). Engine op ids restart after
//! a restart, so everything is keyed by the engine incarnation (`epoch`);
//! a killed server leaks its containers, which are then forgotten.
//!
//! Everything is drawn from the seed's own forked generator and kept in
//! ordered maps, so it is deterministic.

use std::collections::{BTreeMap, BTreeSet};

use engine::sandbox::{DriverError, ExecOutput, OpId, SandboxCommand, SandboxReply};
use engine::store::EventRow;
use serde_json::{json, Value};

use crate::check::{self, Checker};
use crate::rng::Rng;
use crate::swarm::SandboxSwarm;

/// The Auto sandbox tool drivers may declare (input: string `command`).
pub const SANDBOX_TOOL: &str = "sbx_shell";
/// The remote subagent launch tool drivers may declare.
pub const SUBAGENT_TOOL: &str = "sub_launch";
/// The synthesized status tool.
pub const STATUS_TOOL: &str = "remote_subagent_status";

/// `(virtual time, op, reply)` for the world to schedule.
pub type Scheduled = (u64, OpId, SandboxReply);

/// Slack for timers (the engine's timer fires at its deadline exactly).
const SLACK_MS: u64 = 1;

/// Adds `available_sandboxes` to an admin profile body.
pub fn profile_fields(sw: &SandboxSwarm, body: &mut Value) {
    if !sw.images.is_empty() {
        body["available_sandboxes"] = json!(sw.images);
    }
}

/// The image subagents declare: the second listed image when there are
/// two good ones (so a sandbox started on the first mismatches).
pub fn subagent_image(sw: &SandboxSwarm) -> &str {
    sw.images
        .iter()
        .find(|i| i.as_str() == "sim-sub:1")
        .or(sw.images.first())
        .map(String::as_str)
        .unwrap_or("sim-box:1")
}

/// Adds `sandbox_tools` / `subagent_tools` to an open/join body.
pub fn declare(sw: &SandboxSwarm, body: &mut Value) {
    if sw.images.is_empty() {
        return;
    }
    if sw.auto_tools {
        body["sandbox_tools"] = json!([{
            "name": SANDBOX_TOOL,
            "description": "run a shell command in the remote sandbox",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        }]);
    }
    if sw.subagent_tools {
        body["subagent_tools"] = json!([{
            "name": SUBAGENT_TOOL,
            "description": "launch a CLI subagent",
            "input_schema": {"type": "object", "properties": {"harness": {"type": "string"}, "model": {"type": "string"}, "prompt": {"type": "string"}}},
            "image": subagent_image(sw),
            "subagents": [
                {"harness": "simcli", "command_template": "simcli --model {model}", "prompt_via": "stdin"},
            ],
        }]);
    }
}

/// The `input` the simulated provider gives a tool it calls (`None`: the
/// generic `{"n": …}` of client and MCP tools).
pub fn tool_input(name: &str, n: u64) -> Option<Value> {
    match name {
        SANDBOX_TOOL => Some(json!({"command": format!("echo {n}")})),
        SUBAGENT_TOOL => {
            Some(json!({"harness": "simcli", "model": "m1", "prompt": format!("task {n}")}))
        }
        STATUS_TOOL => Some(json!({})),
        _ => None,
    }
}

#[derive(Debug, Clone)]
struct Container {
    session: String,
    /// The engine sent `Stop` for it.
    stopped: bool,
    dead: bool,
}

#[derive(Debug, Clone)]
struct PendingExec {
    container: String,
    deadline: u64,
    subagent: bool,
}

#[derive(Debug, Clone, Default)]
struct Sub {
    terminals: u32,
    started_at: u64,
    epoch: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub starts: u64,
    pub execs: u64,
    pub hangs: u64,
    pub kills: u64,
    pub stops: u64,
    pub subagents: u64,
}

pub struct SandboxSim {
    rng: Rng,
    epoch: u32,
    next_container: u64,
    /// This incarnation's containers (the driver's view).
    containers: BTreeMap<String, Container>,
    /// Start commands in flight: op -> session.
    starting: BTreeMap<OpId, String>,
    execs: BTreeMap<OpId, PendingExec>,
    /// Ops the engine killed (their replies are dropped).
    killed: BTreeSet<OpId>,
    /// The log's view: sessions with a `running` not yet followed by a
    /// `stop` (or a stop outcome) (this incarnation).
    log_running: BTreeMap<String, u64>,
    /// Remote subagents by id.
    subs: BTreeMap<String, Sub>,
    /// Subagent ids per session (for `cancelSubagent`).
    pub session_subs: BTreeMap<String, Vec<String>>,
    pub stats: Stats,
}

impl SandboxSim {
    pub fn new(rng: Rng) -> SandboxSim {
        SandboxSim {
            rng,
            epoch: 0,
            next_container: 0,
            containers: BTreeMap::new(),
            starting: BTreeMap::new(),
            execs: BTreeMap::new(),
            killed: BTreeSet::new(),
            log_running: BTreeMap::new(),
            subs: BTreeMap::new(),
            session_subs: BTreeMap::new(),
            stats: Stats::default(),
        }
    }

    fn latency(&mut self, sw: &SandboxSwarm) -> u64 {
        self.rng.range(sw.latency_ms.0, sw.latency_ms.1)
    }

    /// The driver receives a command; returns the replies to schedule.
    pub fn on_command(
        &mut self,
        cmd: SandboxCommand,
        now: u64,
        sw: &SandboxSwarm,
        timeouts: (u64, u64),
        checker: &mut Checker,
    ) -> Vec<Scheduled> {
        let at = now + self.latency(sw);
        let rt = |m: &str| DriverError::Runtime(m.to_string());
        match cmd {
            SandboxCommand::EnsureImage { op, image } => {
                let r = if sw.broken.contains(&image) || !sw.images.contains(&image) {
                    Err(DriverError::Image(format!(
                        "pull access denied for {image}"
                    )))
                } else if self.rng.chance(sw.ensure_fail) {
                    Err(DriverError::Image("registry unreachable".into()))
                } else {
                    Ok(())
                };
                vec![(at, op, SandboxReply::Ensured(r))]
            }
            SandboxCommand::Start { op, labels, .. } => {
                let session = labels
                    .iter()
                    .find(|(k, _)| k == "bae.session")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                if let Some((id, _)) = self
                    .containers
                    .iter()
                    .find(|(_, c)| c.session == session && !c.stopped)
                {
                    checker.fail(
                        check::INV_SANDBOX_ONE_PER_SESSION,
                        format!("Start for session {session} while container {id} of it runs"),
                    );
                }
                if self.starting.values().any(|s| *s == session) {
                    checker.fail(
                        check::INV_SANDBOX_ONE_PER_SESSION,
                        format!("a second Start for session {session} while one is in flight"),
                    );
                }
                let r = if self.rng.chance(sw.start_fail) {
                    Err(rt("docker run: exit status 125"))
                } else {
                    self.starting.insert(op, session);
                    self.next_container += 1;
                    Ok(format!("ctr{}e{}", self.next_container, self.epoch))
                };
                vec![(at, op, SandboxReply::Started(r))]
            }
            SandboxCommand::Exec {
                op,
                container,
                stdin,
                ..
            } => {
                self.stats.execs += 1;
                let subagent = stdin.is_some();
                let timeout = if subagent { timeouts.1 } else { timeouts.0 };
                let state = self.containers.get(&container).cloned();
                match &state {
                    None => checker.fail(
                        check::INV_SANDBOX_NO_DISPATCH_AFTER_REMOVE,
                        format!("Exec op {op} to unknown container {container:?}"),
                    ),
                    Some(c) if c.stopped => checker.fail(
                        check::INV_SANDBOX_NO_DISPATCH_AFTER_REMOVE,
                        format!("Exec op {op} to container {container} after its Stop"),
                    ),
                    _ => {}
                }
                if timeout > 0 {
                    self.execs.insert(
                        op,
                        PendingExec {
                            container: container.clone(),
                            deadline: now + timeout,
                            subagent,
                        },
                    );
                }
                let dead = state.is_none_or(|c| c.dead || c.stopped);
                let r = if dead {
                    Err(rt(&format!("container {container} is not running")))
                } else if self.rng.chance(sw.hang) {
                    self.stats.hangs += 1;
                    return Vec::new();
                } else if self.rng.chance(sw.exec_fail) {
                    Err(rt("exec: connection reset"))
                } else {
                    if self.rng.chance(sw.death) {
                        if let Some(c) = self.containers.get_mut(&container) {
                            c.dead = true;
                        }
                    }
                    let exit_code = if self.rng.chance(sw.nonzero_exit) {
                        *self.rng.pick(&[1, 2, 127, -1])
                    } else {
                        0
                    };
                    Ok(ExecOutput {
                        stdout: format!("out {op}\n"),
                        stderr: if exit_code != 0 {
                            "boom".into()
                        } else {
                            String::new()
                        },
                        exit_code,
                        stdout_truncated: false,
                        stderr_truncated: false,
                    })
                };
                vec![(at, op, SandboxReply::Exec(r))]
            }
            SandboxCommand::Stop { op, container } => {
                self.stats.stops += 1;
                if let Some(c) = self.containers.get_mut(&container) {
                    c.stopped = true;
                }
                let r = if self.rng.chance(sw.stop_fail) {
                    Err(rt("docker stop: daemon busy"))
                } else {
                    Ok(())
                };
                vec![(at, op, SandboxReply::Stopped(r))]
            }
            SandboxCommand::Kill { op } => {
                self.stats.kills += 1;
                self.execs.remove(&op);
                self.killed.insert(op);
                Vec::new()
            }
        }
    }

    /// Whether a scheduled reply reaches the engine (killed execs report
    /// nothing); updates the driver's view.
    pub fn deliver(&mut self, op: OpId, reply: &SandboxReply) -> bool {
        if self.killed.contains(&op) {
            return false;
        }
        match reply {
            SandboxReply::Started(Ok(id)) => {
                if let Some(session) = self.starting.remove(&op) {
                    self.stats.starts += 1;
                    self.containers.insert(
                        id.clone(),
                        Container {
                            session,
                            stopped: false,
                            dead: false,
                        },
                    );
                }
            }
            SandboxReply::Exec(_) => {
                self.execs.remove(&op);
            }
            _ => {}
        }
        true
    }

    /// After each drain: every exec the engine sent ends within its
    /// timeout (a reply or a Kill).
    pub fn check_execs(&mut self, now: u64, checker: &mut Checker) {
        let late: Vec<OpId> = self
            .execs
            .iter()
            .filter(|(_, e)| now > e.deadline + SLACK_MS)
            .map(|(op, _)| *op)
            .collect();
        for op in late {
            let e = self.execs.remove(&op).expect("listed");
            checker.fail(
                check::INV_SANDBOX_EXEC_BOUNDED,
                format!(
                    "{} exec op {op} on {} still running at {now} ms (deadline {} ms)",
                    if e.subagent { "subagent" } else { "sandbox" },
                    e.container,
                    e.deadline
                ),
            );
        }
    }

    /// An emitted event (the log's view).
    pub fn on_event(&mut self, row: &EventRow, now: u64, checker: &mut Checker) {
        let t = row.event_type.as_str();
        if !t.starts_with("session.sandbox.") && !t.starts_with("session.subagent.") {
            return;
        }
        let p: Value = serde_json::from_str(&row.payload).unwrap_or(Value::Null);
        if p["dispatch"] == "local" {
            return;
        }
        let sid = row.session_id.clone();
        match t {
            "session.sandbox.running" => {
                if let Some(seq) = self.log_running.insert(sid.clone(), row.seq) {
                    checker.fail(
                        check::INV_SANDBOX_ONE_PER_SESSION,
                        format!(
                            "session {sid}: sandbox.running seq={} while the one of seq={seq} was never stopped",
                            row.seq
                        ),
                    );
                }
            }
            // `stop` marks the handle's removal (logged before the driver
            // is asked to stop): a new start may run while the old
            // container is still stopping.
            "session.sandbox.stop" | "session.sandbox.stopped" => {
                self.log_running.remove(&sid);
            }
            "session.sandbox.error" if p["phase"] == "stop" => {
                self.log_running.remove(&sid);
            }
            "session.subagent.start" => {
                let id = p["subagent_id"].as_str().unwrap_or("").to_string();
                self.stats.subagents += 1;
                self.subs.insert(
                    id.clone(),
                    Sub {
                        terminals: 0,
                        started_at: now,
                        epoch: self.epoch,
                    },
                );
                self.session_subs.entry(sid).or_default().push(id);
            }
            "session.subagent.completed"
            | "session.subagent.failed"
            | "session.subagent.cancelled" => {
                let id = p["subagent_id"].as_str().unwrap_or("");
                match self.subs.get_mut(id) {
                    Some(s) => {
                        s.terminals += 1;
                        if s.terminals > 1 {
                            checker.fail(
                                check::INV_SUBAGENT_ONE_TERMINAL,
                                format!("subagent {id}: a second terminal event ({t})"),
                            );
                        }
                    }
                    None => checker.fail(
                        check::INV_SUBAGENT_ONE_TERMINAL,
                        format!("{t} for subagent {id:?} that never started"),
                    ),
                }
            }
            _ => {}
        }
    }

    /// A crash or restart: the new engine has no handles (containers leak)
    /// and its op ids start over.
    pub fn on_restart(&mut self) {
        self.epoch += 1;
        self.containers.clear();
        self.starting.clear();
        self.execs.clear();
        self.killed.clear();
        self.log_running.clear();
        self.session_subs.clear();
    }

    /// End of run: subagents of this incarnation ended (once past their
    /// deadline), and closed sessions left no container running.
    pub fn finish(
        &mut self,
        now: u64,
        subagent_timeout_ms: u64,
        closed: &BTreeSet<String>,
        checker: &mut Checker,
    ) {
        self.check_execs(now, checker);
        for (id, s) in &self.subs {
            if s.epoch == self.epoch
                && s.terminals == 0
                && now > s.started_at + subagent_timeout_ms + 1_000
            {
                checker.fail(
                    check::INV_SUBAGENT_ONE_TERMINAL,
                    format!(
                        "subagent {id} started at {} ms never ended (now {now} ms)",
                        s.started_at
                    ),
                );
            }
        }
        for (id, c) in &self.containers {
            if !c.stopped && closed.contains(&c.session) {
                checker.fail(
                    check::INV_SANDBOX_STOPPED_AT_CLOSE,
                    format!(
                        "container {id} of closed session {} left running",
                        c.session
                    ),
                );
            }
        }
    }

    /// A subagent id of the session to cancel (sometimes a bogus one).
    pub fn pick_subagent(&mut self, sid: &str) -> String {
        match self.session_subs.get(sid) {
            Some(ids) if !ids.is_empty() && !self.rng.chance(0.1) => {
                ids[self.rng.index(ids.len())].clone()
            }
            _ => "sba_bogus".to_string(),
        }
    }
}
