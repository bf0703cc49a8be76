//! The sessions table: every session's own runtime parts, by id, and the
//! indices over them (which gates may have waiters, which cached histories
//! may go). One [`Session`] holds everything the engine keeps for one
//! session outside the catalogue and the hubs: its [`SessionCore`] (gate,
//! cached history, turn loop), a create waiting for its MCP connects, the
//! extensions its drivers opted into, its MCP connection set
//! ([`SessionMcp`]), its sandbox and subagents ([`SessionSandbox`]), the
//! turn waiting for its MCP servers to be restored, its idempotency keys
//! ([`SessionKeys`]) and its part of its streams ([`SessionStreams`]: the
//! fan-out list and subscriptions). The table answers with typed results
//! (the sessions whose histories were dropped, the gates that are due…)
//! that the engine acts on; it emits output only through the parts it
//! routes to (each given the services).

use std::collections::{BTreeMap, BTreeSet};

use proto::jsonrpc::{Extension, Extensions};

use crate::faults::Faults;
use crate::history_cache::HistoryCache;
use crate::idempotency::{KeyExpiry, SessionKeys};
use crate::ids::{KeyId, SessionId, TurnId};
use crate::mcp::SessionMcp;
use crate::model::Catalog;
use crate::routes::Routes;
use crate::sandbox::SessionSandbox;
use crate::services::Services;
use crate::session_core::{Holder, SessionCore, TurnLoop};
use crate::streams::SessionStreams;
use crate::{ConnId, MonoMs};

mod idem;
mod mcp;
mod sandbox;
mod streams;

/// A create answered once its profile's MCP servers are connected.
#[derive(Debug)]
pub(crate) struct PendingCreate {
    pub conn: ConnId,
    /// The `201` body.
    pub body: Vec<u8>,
}

/// One session's runtime parts. An entry lives while any part is set.
#[derive(Default)]
pub(crate) struct Session {
    /// Gate, cached history and turn: only while the session has runtime
    /// state (an idle one with its history dropped has none; the next
    /// arrival makes a fresh one).
    core: Option<SessionCore>,
    create: Option<PendingCreate>,
    /// Extensions each driver opted into at registration, by its key.
    driver_ext: BTreeMap<KeyId, Extensions>,
    /// The turn waiting for the session's MCP servers to be restored.
    mcp_restoring: Option<TurnId>,
    /// The session's MCP connection set (its connections, tools, routes).
    mcp: Option<SessionMcp>,
    /// The session's remote sandbox and subagents, from its first start
    /// until the session closes.
    sandbox: Option<SessionSandbox>,
    /// Its `sendMessage` idempotency keys, until they expire (they outlive
    /// its core, its residency and its close; they never hold it resident).
    idem: SessionKeys,
    /// Its fan-out list: the streams its events go to.
    streams: SessionStreams,
}

impl Session {
    pub(super) fn is_empty(&self) -> bool {
        self.core.is_none()
            && self.create.is_none()
            && self.driver_ext.is_empty()
            && self.mcp_restoring.is_none()
            && self.mcp.is_none()
            && self.sandbox.is_none()
            && self.idem.is_empty()
            && self.streams.is_empty()
    }
}

/// Whether a core's gate is in use (held, waited on, or a compaction
/// backoff armed): such a session must stay resident.
fn core_busy(core: &SessionCore) -> bool {
    !matches!(core.gate.holder(), Holder::Free) || core.gate.has_waiters() || core.backoff.is_some()
}

/// Every session's runtime parts (see the module docs), and the indices over
/// them: gates with waiters, the history cache, idempotency key expiry.
pub(crate) struct Sessions {
    // Ordered maps: iteration order reaches the outputs, and the same
    // inputs must give the same outputs (the simulator depends on it).
    table: BTreeMap<SessionId, Session>,
    /// Sessions whose gate may have queued waiters: a superset, pruned
    /// when a gate is seen without any. The gate timer, and a closing
    /// connection's queue exit, look only here instead of at every
    /// session (a long-running server keeps many).
    waiting: BTreeSet<SessionId>,
    /// Which of the cores' cached histories to drop when idle.
    histories: HistoryCache,
    /// Every session's idempotency keys, oldest first, for expiry.
    keys: KeyExpiry,
    faults: Faults,
}

impl Sessions {
    pub(crate) fn new(histories: HistoryCache, faults: Faults) -> Self {
        Sessions {
            table: BTreeMap::new(),
            waiting: BTreeSet::new(),
            histories,
            keys: KeyExpiry::default(),
            faults,
        }
    }

    /// The table's own copy of `id` when it holds the session.
    pub(crate) fn known_id(&self, id: &str) -> Option<SessionId> {
        self.table.get_key_value(id).map(|(k, _)| k.clone())
    }

    /// Removes `id`'s entry when nothing of it is left.
    fn prune(&mut self, id: &str) {
        if self.table.get(id).is_some_and(Session::is_empty) {
            self.table.remove(id);
        }
    }

    // ---- the cores ---------------------------------------------------------

    pub(crate) fn core(&self, id: &str) -> Option<&SessionCore> {
        self.table.get(id)?.core.as_ref()
    }

    pub(crate) fn core_mut(&mut self, id: &str) -> Option<&mut SessionCore> {
        self.table.get_mut(id)?.core.as_mut()
    }

    /// `id`'s core, made fresh when it has none.
    pub(crate) fn core_or_new(&mut self, id: SessionId) -> &mut SessionCore {
        let faults = self.faults;
        (self.table.entry(id).or_default().core).get_or_insert_with(|| SessionCore::new(faults))
    }

    pub(crate) fn cores(&self) -> impl Iterator<Item = &SessionCore> {
        self.table.values().filter_map(|s| s.core.as_ref())
    }

    pub(crate) fn cores_mut(&mut self) -> impl Iterator<Item = &mut SessionCore> {
        self.table.values_mut().filter_map(|s| s.core.as_mut())
    }

    /// Drops `id`'s core (session closed, evicted, or moved to another
    /// replica), with its place in the gate and history indices.
    pub(crate) fn drop_core(&mut self, id: &str) -> Option<SessionCore> {
        self.waiting.remove(id);
        self.histories.forget(id);
        let core = self.table.get_mut(id)?.core.take();
        self.prune(id);
        core
    }

    /// Whether `id` has runtime state that must keep it resident: a gate
    /// in use, a create waiting for its MCP servers, a turn waiting for
    /// their restore, MCP connections, a sandbox box. (An idle core holds only a cached
    /// history, which eviction may drop as the history cache would.)
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.table.get(id).is_some_and(|s| {
            s.core.as_ref().is_some_and(core_busy)
                || s.create.is_some()
                || s.mcp_restoring.is_some()
                || s.mcp.is_some()
                || s.sandbox.is_some()
        })
    }

    // ---- the gate index ----------------------------------------------------

    /// Records that `id`'s gate may now have waiters.
    pub(crate) fn note_waiting(&mut self, id: SessionId) {
        self.waiting.insert(id);
    }

    pub(crate) fn is_waiting(&self, id: &str) -> bool {
        self.waiting.contains(id)
    }

    /// `id`'s gate has no waiters any more.
    pub(crate) fn unwait(&mut self, id: &str) {
        self.waiting.remove(id);
    }

    /// Earliest pause deadline with someone waiting behind it.
    pub(crate) fn next_gate_deadline(&self) -> Option<MonoMs> {
        (self.waiting.iter())
            .filter_map(|id| self.core(id)?.gate.deadline())
            .min()
    }

    /// Requests queued on every session's gate (overload watch).
    pub(crate) fn queued_requests(&self) -> usize {
        (self.waiting.iter())
            .filter_map(|id| self.core(id))
            .map(|c| c.gate.waiting())
            .sum()
    }

    /// Sessions whose pause deadline has passed with someone waiting (the
    /// index is pruned of gates without waiters on the way).
    pub(crate) fn due_gates(&mut self, now: MonoMs) -> Vec<SessionId> {
        let table = &self.table;
        let core = |id: &str| table.get(id).and_then(|s| s.core.as_ref());
        self.waiting
            .retain(|id| core(id).is_some_and(|c| c.gate.has_waiters()));
        (self.waiting.iter())
            .filter(|id| {
                let deadline = core(id).and_then(|c| c.gate.deadline());
                deadline.is_some_and(|d| d <= now)
            })
            .cloned()
            .collect()
    }

    /// A connection went away: it leaves every queue. Returns the sessions
    /// whose queues it left (their positions changed).
    pub(crate) fn forget_conn(&mut self, conn: ConnId) -> Vec<SessionId> {
        let mut moved = Vec::new();
        let mut emptied = Vec::new();
        for id in &self.waiting {
            let Some(core) = self.table.get_mut(id).and_then(|s| s.core.as_mut()) else {
                emptied.push(id.clone());
                continue;
            };
            if core.gate.forget(conn) {
                moved.push(id.clone());
            }
            if !core.gate.has_waiters() {
                emptied.push(id.clone());
            }
        }
        for id in emptied {
            self.waiting.remove(&id);
        }
        moved
    }

    // ---- the history cache -------------------------------------------------

    /// `id`'s cached history was just (re)built: weigh it.
    pub(crate) fn history_built(&mut self, id: &str) {
        let Some((id, session)) = self.table.get_key_value(id) else {
            return;
        };
        let Some(core) = session.core.as_ref() else {
            return;
        };
        match core.history.as_ref() {
            Some(h) => self.histories.loaded(id, h.weight()),
            None => self.histories.forget(id),
        }
    }

    /// A message of this weight was appended to `id`'s cached history.
    pub(crate) fn history_grew(&mut self, id: &str, bytes: usize) {
        self.histories.grew(id, bytes);
    }

    /// `id` is in use (an arrival, a turn): its cached history must stay.
    pub(crate) fn history_busy(&mut self, id: &str) {
        self.histories.busy(id);
    }

    /// `id`'s cached history is gone (its load failed).
    pub(crate) fn history_forget(&mut self, id: &str) {
        self.histories.forget(id);
    }

    /// A gate's state changed: when nothing holds it or waits, the session
    /// is idle as of `now` and its history may be given up. Returns whether
    /// it went idle (the engine then drops what the cache gives up).
    pub(crate) fn gate_idle(&mut self, id: &str, now: MonoMs) -> bool {
        let Some(core) = self.core(id) else {
            return false;
        };
        if matches!(core.gate.holder(), Holder::Free) && !core.gate.has_waiters() {
            self.histories.idle(id, now);
            return true;
        }
        false
    }

    /// Drops the histories the cache gives up (too long idle, or over its
    /// budget), and the cores that held nothing else. Returns the sessions
    /// that lost their history: the next arrival must read the log, they
    /// are no longer known to be empty.
    pub(crate) fn drop_idle_histories(&mut self, now: MonoMs) -> Vec<SessionId> {
        let mut lost = Vec::new();
        for id in self.histories.evictions(now) {
            let Some(core) = self.core_mut(&id) else {
                continue;
            };
            if !matches!(core.gate.holder(), Holder::Free) || core.gate.has_waiters() {
                // Not idle after all: keep it, and weigh it again.
                self.history_built(&id);
                continue;
            }
            core.history = None;
            core.newest_usage = None;
            // Nothing else of the core is needed unless a compaction
            // backoff is armed: drop it too (its gate is free and empty).
            if core.backoff.is_none() {
                if let Some(s) = self.table.get_mut(id.as_str()) {
                    s.core = None;
                }
                self.prune(&id);
            }
            lost.push(id);
        }
        lost
    }

    /// When the oldest idle history expires.
    pub(crate) fn next_history_deadline(&self) -> Option<MonoMs> {
        self.histories.next_deadline()
    }

    // ---- creates waiting for their MCP servers -----------------------------

    pub(crate) fn park_create(&mut self, id: SessionId, create: PendingCreate) {
        self.table.entry(id).or_default().create = Some(create);
    }

    pub(crate) fn take_create(&mut self, id: &str) -> Option<PendingCreate> {
        let create = self.table.get_mut(id)?.create.take();
        self.prune(id);
        create
    }

    // ---- turns waiting for their MCP servers' restore ----------------------

    pub(crate) fn await_mcp(&mut self, id: SessionId, turn: TurnId) {
        self.table.entry(id).or_default().mcp_restoring = Some(turn);
    }

    pub(crate) fn take_mcp_wait(&mut self, id: &str) -> Option<TurnId> {
        let turn = self.table.get_mut(id)?.mcp_restoring.take();
        self.prune(id);
        turn
    }

    // ---- drivers' opted-in extensions --------------------------------------

    /// `key` registered as a driver of `id` opting into `ext`.
    pub(crate) fn register_driver(&mut self, id: SessionId, key: KeyId, ext: Extensions) {
        self.table
            .entry(id)
            .or_default()
            .driver_ext
            .insert(key, ext);
    }

    /// What `key` opted into when it registered on `id`.
    pub(crate) fn driver_extensions(&self, id: &str, key: &str) -> Extensions {
        (self.table.get(id))
            .and_then(|s| s.driver_ext.get(key))
            .copied()
            .unwrap_or_default()
    }

    /// `id`'s registrations are gone (closed, or moved to another replica).
    pub(crate) fn forget_drivers(&mut self, id: &str) {
        if let Some(s) = self.table.get_mut(id) {
            s.driver_ext.clear();
        }
        self.prune(id);
    }

    // ---- table operations the router asks for --------------------------

    /// `id`'s core, made fresh when it has none (the catalogue interns the
    /// id of a session the table does not hold yet).
    pub(crate) fn core_of(&mut self, catalog: &Catalog, id: &str) -> &mut SessionCore {
        let id = self.known_id(id).unwrap_or_else(|| catalog.session_id(id));
        self.core_or_new(id)
    }

    /// Records that `id`'s gate may now have waiters (see [`Sessions::note_waiting`]).
    pub(crate) fn mark_waiting(&mut self, catalog: &Catalog, id: &str) {
        if !self.is_waiting(id) {
            let id = self.known_id(id).unwrap_or_else(|| catalog.session_id(id));
            self.note_waiting(id);
        }
    }

    /// The id and owner of `id`'s running turn.
    pub(crate) fn running_turn(&self, id: &str) -> Option<(TurnId, KeyId)> {
        let t = self.core(id)?.turn()?;
        Some((t.id, t.key_id.clone()))
    }

    pub(crate) fn running_turn_id(&self, id: &str) -> Option<TurnId> {
        Some(self.core(id)?.turn()?.id)
    }

    /// Takes `id`'s turn out of its core; it routes nothing any more.
    pub(crate) fn take_turn(&mut self, routes: &mut Routes, id: &str) -> Option<Box<TurnLoop>> {
        let t = self.core_mut(id)?.take_turn()?;
        routes.end_turn(t.id);
        Some(t)
    }

    /// Tells the waiters of `id`'s gate that opted into `turn.queue` their
    /// new positions.
    pub(crate) fn tell_queue_positions(&mut self, svc: &mut Services, id: &str) {
        let Some(core) = self.core_mut(id) else {
            return;
        };
        for (conn, position) in core.gate.position_changes() {
            if svc.stream_has(conn, Extension::TurnQueue) {
                svc.frame(conn, &proto::jsonrpc::queue_frame(position));
            }
        }
    }

    /// A gate's state changed: when the session went idle, the history
    /// cache may give histories up; their sessions are no longer known to
    /// be empty (the next arrival reads the log).
    pub(crate) fn note_gate_idle(&mut self, catalog: &mut Catalog, id: &str, now: MonoMs) {
        if self.gate_idle(id, now) {
            self.drop_idle(catalog, now);
        }
    }

    /// Drops the histories the cache gives up (every timer tick, and
    /// whenever a session goes idle).
    pub(crate) fn drop_idle(&mut self, catalog: &mut Catalog, now: MonoMs) {
        for id in self.drop_idle_histories(now) {
            if let Some(s) = catalog.sessions.get_mut(&id) {
                s.fresh = false;
            }
        }
    }

    /// A connection went away or its turn stream ended: it leaves every
    /// queue (whose waiters hear their new positions), and running turns go
    /// on without it.
    pub(crate) fn forget_conn_everywhere(
        &mut self,
        svc: &mut Services,
        routes: &Routes,
        conn: ConnId,
    ) {
        for id in self.forget_conn(conn) {
            self.tell_queue_positions(svc, &id);
        }
        for id in routes.running_sessions() {
            if let Some(t) = self.core_mut(id).and_then(|c| c.turn_mut()) {
                t.forget_stream(conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_cache::Limits;
    use proto::jsonrpc::Extension;

    pub(super) fn table(idle_ms: u64) -> Sessions {
        let limits = Limits {
            budget_bytes: usize::MAX,
            idle_ms,
        };
        Sessions::new(HistoryCache::new(limits), Faults::default())
    }

    fn sid(s: &str) -> SessionId {
        SessionId::new(s)
    }

    #[test]
    fn a_drivers_extensions_outlive_its_sessions_dropped_core() {
        let mut t = table(1000);
        let ext = Extensions::default().with(Extension::TurnQueue);
        t.register_driver(sid("ses_a"), KeyId::new("key_a"), ext);
        t.core_or_new(sid("ses_a"));
        assert!(t.drop_core("ses_a").is_some());
        assert_eq!(t.driver_extensions("ses_a", "key_a"), ext);
        assert_eq!(t.driver_extensions("ses_a", "key_b"), Extensions::default());
        t.forget_drivers("ses_a");
        // Nothing of the session is left: its entry went with its parts.
        assert_eq!(t.known_id("ses_a"), None);
    }

    #[test]
    fn a_create_or_an_mcp_restore_waiting_holds_the_session() {
        let mut t = table(1000);
        let body = b"{}".to_vec();
        t.park_create(
            sid("ses_a"),
            PendingCreate {
                conn: ConnId(7),
                body,
            },
        );
        t.await_mcp(sid("ses_b"), TurnId(3));
        assert!(t.holds("ses_a") && t.holds("ses_b"));
        assert_eq!(t.take_create("ses_a").map(|c| c.conn), Some(ConnId(7)));
        assert_eq!(t.take_mcp_wait("ses_b"), Some(TurnId(3)));
        assert!(!t.holds("ses_a") && !t.holds("ses_b"));
        assert_eq!((t.known_id("ses_a"), t.known_id("ses_b")), (None, None));
    }

    #[test]
    fn an_idle_history_is_dropped_with_its_core_and_reported_lost() {
        let mut t = table(1000);
        let core = t.core_or_new(sid("ses_a"));
        core.history = Some(proto::provider::HistoryText::new());
        t.history_built("ses_a");
        // An idle core holds nothing the session needs to stay resident.
        assert!(!t.holds("ses_a"));
        assert!(t.gate_idle("ses_a", MonoMs(10)));
        assert_eq!(t.next_history_deadline(), Some(MonoMs(1010)));
        assert!(t.drop_idle_histories(MonoMs(1009)).is_empty());
        assert_eq!(t.drop_idle_histories(MonoMs(1010)), vec![sid("ses_a")]);
        assert!(t.core("ses_a").is_none());
        assert_eq!(t.known_id("ses_a"), None);
    }

    #[test]
    fn a_history_dropped_keeps_the_parts_a_driver_left() {
        let mut t = table(0);
        let ext = Extensions::default().with(Extension::TurnQueue);
        t.register_driver(sid("ses_a"), KeyId::new("key_a"), ext);
        let core = t.core_or_new(sid("ses_a"));
        core.history = Some(proto::provider::HistoryText::new());
        t.history_built("ses_a");
        assert!(t.gate_idle("ses_a", MonoMs(5)));
        assert_eq!(t.drop_idle_histories(MonoMs(5)), vec![sid("ses_a")]);
        assert!(t.core("ses_a").is_none());
        assert_eq!(t.driver_extensions("ses_a", "key_a"), ext);
    }

    /// Issue 42: the session's own MCP set and sandbox box keep it
    /// resident (placement evicts only what `holds` lets go), survive its
    /// core being dropped, and go with the entry once closed.
    #[test]
    fn an_mcp_set_or_a_sandbox_box_holds_the_session_until_closed() {
        use crate::mcp::{McpHub, McpServerSpec, McpSettings, McpTransport};
        let mut t = table(1000);
        let mut hub = McpHub::new(McpSettings {
            server_version: "1".into(),
            timeout_ms: 100,
            max_message_bytes: 1 << 10,
        });
        let server = McpServerSpec {
            name: "a".into(),
            transport: McpTransport::Stdio {
                command: "srv".into(),
                args: vec![],
            },
            reconnect: false,
        };
        t.connect_mcp(&mut hub, &sid("ses_a"), vec![server], MonoMs(0));
        t.sandbox_or_new(&sid("ses_b"));
        t.core_or_new(sid("ses_a"));
        assert!(t.drop_core("ses_a").is_some());
        assert!(t.holds("ses_a") && t.has_mcp("ses_a"));
        assert!(t.holds("ses_b") && t.sandbox("ses_b").is_some());
        assert_eq!(hub.live_sessions(), 1);
        t.close_mcp(&mut hub, "ses_a");
        assert!(t.take_sandbox("ses_b").is_some());
        assert!(!t.holds("ses_a") && !t.holds("ses_b"));
        assert_eq!((t.known_id("ses_a"), t.known_id("ses_b")), (None, None));
        // The hub routes nothing of the closed set any more.
        assert_eq!((hub.live_sessions(), hub.poll_timeout()), (0, None));
    }
}
