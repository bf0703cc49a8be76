//! Output sequencing: group commit and durability gating, without I/O. Every
//! driver (the smol one, the std-threads one, the simulator) runs the engine
//! through this one implementation of the durability rule.
//!
//! The engine emits [`StoreWrite`]s, [`StoreRead`]s and deliveries (sends and
//! closes) in one ordered stream. This module decides, purely, when each
//! piece may happen:
//!
//! * writes accumulate in a *pending* batch; whenever the store worker is
//!   idle, everything pending is sealed into one commit job (group commit);
//! * a read is queued after every write emitted before it (the pending batch
//!   is sealed first), so it observes the engine's own writes;
//! * a delivery emitted after a gating write ([`StoreWrite::gates_output`])
//!   is held until the batch containing that write has committed; held
//!   deliveries are released in emission order, so a `Close` never overtakes
//!   the sends before it;
//! * a provider call is a delivery too: its `provider.request` event (and,
//!   for an idempotent send, the key) is committed before the call leaves,
//!   so a crash can never have called a provider for a turn the log and the
//!   key table do not know about;
//! * a key's `last_used_at` stamp ([`StoreWrite::TouchKey`]) written again
//!   while the batch is still pending replaces the earlier stamp in place
//!   instead of adding a statement: every authentication stamps its key, and
//!   concurrent clients share keys. The committed state is the same, since
//!   nothing else reads or writes that column;
//! * a send that reveals no stored state (`/healthz`, `/api/v1/meta`:
//!   [`Pipeline::deliver_ungated`]) waits only for held output to its own
//!   connection, so a liveness probe never waits behind other clients'
//!   commits.

use std::collections::{HashMap, VecDeque};

use crate::store::{ReadId, StoreRead, StoreWrite};
use crate::{ConnId, Output};

/// Bytes or a close for one connection, or a provider call to perform.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Send {
        conn: ConnId,
        bytes: crate::bytes::Bytes,
    },
    Close {
        conn: ConnId,
    },
    Call(crate::ProviderCall),
    /// Replica mode: a request relayed to its session's owner.
    Forward(crate::replicas::Forward),
}

impl Delivery {
    /// The connection it goes to (a relay's client connection); `None` for
    /// a provider call.
    pub fn conn(&self) -> Option<ConnId> {
        match self {
            Delivery::Send { conn, .. } | Delivery::Close { conn } => Some(*conn),
            Delivery::Forward(f) => Some(f.conn),
            Delivery::Call(_) => None,
        }
    }
}

/// What a driver still has to do with an [`Output`] after
/// [`Pipeline::route`] took its part.
#[derive(Debug)]
pub enum Routed {
    /// Dispatch now (write to the socket, start the provider call, relay).
    Dispatch(Delivery),
    /// Perform an MCP transport command.
    Mcp(crate::mcp::McpCommand),
    /// Run a container engine command.
    Sandbox(crate::sandbox::SandboxCommand),
    /// Stop a provider call that was dispatched: close its connection.
    Abort(crate::CallId),
}

/// A unit of work for the store worker, processed in FIFO order.
#[derive(Debug, Clone, PartialEq)]
pub enum Job {
    /// Commit `writes` atomically; completion releases deliveries gated on
    /// batch ids up to `batch`. In replica mode `fence` is what the
    /// transaction must check before it writes (`None`: a lone server).
    Commit {
        batch: u64,
        writes: Vec<StoreWrite>,
        fence: Option<crate::replicas::Fence>,
    },
    /// Answer a read.
    Read { id: ReadId, read: StoreRead },
    /// Log the periodic activity summary (driver maintenance; reports no
    /// completion and is never produced by the pipeline itself).
    Activity,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Pipeline {
    pending: Vec<StoreWrite>,
    /// Where in `pending` each key's `TouchKey` is.
    touches: HashMap<String, usize>,
    /// Batch id of the newest gating write (0 = none yet).
    last_gating: u64,
    /// Id the pending batch will get when sealed.
    next_batch: u64,
    /// Highest committed batch id.
    committed: u64,
    held: VecDeque<(u64, Delivery)>,
    queued: VecDeque<Job>,
    /// Replica mode: every commit job carries its [`crate::replicas::Fence`].
    fenced: bool,
    /// Jobs handed to the worker and not yet completed.
    outstanding: usize,
    /// Writes emitted and not yet committed, and the size of each sealed
    /// batch not yet committed (the store backlog, for overload control).
    uncommitted: usize,
    sealed: VecDeque<(u64, usize)>,
    /// Empty unless the simulator planted a pipeline bug.
    pub faults: crate::faults::Faults,
}

impl Pipeline {
    pub fn new() -> Self {
        Pipeline {
            next_batch: 1,
            ..Default::default()
        }
    }

    /// A pipeline whose commit jobs carry their fence (replica mode,
    /// docs/scaling.md "Fencing").
    pub fn fenced() -> Self {
        Pipeline {
            fenced: true,
            ..Pipeline::new()
        }
    }

    /// Takes one engine output: writes and reads are queued, deliveries
    /// held or released, and what remains for the driver is returned. Every
    /// runtime routes outputs through here, so none can reorder them.
    pub fn route(&mut self, out: Output) -> Option<Routed> {
        let d = match out {
            Output::Write(w) => {
                self.write(w);
                return None;
            }
            Output::Read { id, read } => {
                self.read(id, read);
                return None;
            }
            Output::Mcp(cmd) => return Some(Routed::Mcp(cmd)),
            Output::Sandbox(cmd) => return Some(Routed::Sandbox(cmd)),
            Output::SendUngated { conn, bytes } => {
                return self.deliver_ungated(conn, bytes).map(Routed::Dispatch)
            }
            Output::Send { conn, bytes } => Delivery::Send { conn, bytes },
            Output::Close { conn } => Delivery::Close { conn },
            Output::CallProvider(call) => Delivery::Call(call),
            Output::Forward(f) => Delivery::Forward(f),
            Output::AbortProvider(call) => return self.abort(call).map(Routed::Abort),
        };
        self.deliver(d).map(Routed::Dispatch)
    }

    /// Appends a write to the pending batch.
    pub fn write(&mut self, w: StoreWrite) {
        if w.gates_output() {
            self.last_gating = self.next_batch;
        }
        if let StoreWrite::TouchKey { id, at } = w {
            let earlier = self.touches.get(&id).and_then(|&i| self.pending.get_mut(i));
            if let Some(StoreWrite::TouchKey { at: stamp, .. }) = earlier {
                *stamp = at;
                return;
            }
            self.touches.insert(id.clone(), self.pending.len());
            self.pending.push(StoreWrite::TouchKey { id, at });
            self.uncommitted += 1;
            return;
        }
        self.pending.push(w);
        self.uncommitted += 1;
    }

    /// A delivery: `Some` when it may be dispatched now, `None` when it was
    /// held behind an uncommitted batch.
    pub fn deliver(&mut self, d: Delivery) -> Option<Delivery> {
        if self.faults.pipeline_reveals_early() {
            return Some(d);
        }
        if self.last_gating <= self.committed {
            debug_assert!(self.held.is_empty());
            Some(d)
        } else {
            self.held.push_back((self.last_gating, d));
            None
        }
    }

    /// A provider call to stop: a streamed one still held behind a commit
    /// is dropped (never dispatched, nothing to close); `Some` when the
    /// driver must close a dispatched one. A held unstreamed call still
    /// leaves when its batch commits and runs to its end, as one already
    /// sent does: the engine keeps its provider-limit slot until the reply
    /// (dropping it here leaked that slot for good; sim seed 63,
    /// `inv_slot_wait_bounded`).
    pub fn abort(&mut self, call: crate::CallId) -> Option<crate::CallId> {
        let held =
            (self.held.iter()).position(|(_, d)| matches!(d, Delivery::Call(c) if c.id == call));
        let Some(i) = held else {
            return Some(call);
        };
        if matches!(self.held.get(i), Some((_, Delivery::Call(c))) if c.stream) {
            self.held.remove(i);
        }
        None
    }

    /// A send revealing nothing stored: held only while an earlier delivery
    /// to the same connection is held (bytes on one connection stay in
    /// order), dispatched now otherwise.
    pub fn deliver_ungated(
        &mut self,
        conn: ConnId,
        bytes: crate::bytes::Bytes,
    ) -> Option<Delivery> {
        let d = Delivery::Send { conn, bytes };
        if !self.held.iter().any(|(_, h)| h.conn() == Some(conn)) {
            return Some(d);
        }
        // Behind the newest entry, so the queue stays ordered by batch.
        let need = self.held.back().map_or(0, |(n, _)| *n);
        self.held.push_back((need, d));
        None
    }

    /// Queues a read after every write emitted so far.
    pub fn read(&mut self, id: ReadId, read: StoreRead) {
        self.seal();
        self.queued.push_back(Job::Read { id, read });
    }

    fn seal(&mut self) {
        self.touches.clear();
        if !self.pending.is_empty() {
            let batch = self.next_batch;
            self.next_batch += 1;
            self.sealed.push_back((batch, self.pending.len()));
            let writes = std::mem::take(&mut self.pending);
            let fenced = self.fenced && !self.faults.skip_fence();
            let fence = fenced.then(|| crate::replicas::Fence::of(&writes));
            self.queued.push_back(Job::Commit {
                batch,
                writes,
                fence,
            });
        }
    }

    /// When the worker is idle: everything queued plus all pending writes
    /// (sealed into one batch), in order. `None` when busy or nothing to do.
    pub fn take_submission(&mut self) -> Option<Vec<Job>> {
        if self.outstanding > 0 {
            return None;
        }
        self.seal();
        if self.queued.is_empty() {
            return None;
        }
        let jobs: Vec<Job> = self.queued.drain(..).collect();
        self.outstanding = jobs.len();
        Some(jobs)
    }

    /// A commit job finished: returns the deliveries it releases, in order.
    pub fn committed(&mut self, batch: u64) -> Vec<Delivery> {
        self.outstanding = self.outstanding.saturating_sub(1);
        self.committed = self.committed.max(batch);
        while let Some(&(_, n)) = self.sealed.front().filter(|(b, _)| *b <= batch) {
            self.sealed.pop_front();
            self.uncommitted = self.uncommitted.saturating_sub(n);
        }
        let mut out = Vec::new();
        while self
            .held
            .front()
            .is_some_and(|(need, _)| *need <= self.committed)
        {
            if let Some((_, d)) = self.held.pop_front() {
                out.push(d);
            }
        }
        out
    }

    /// A read job finished.
    pub fn read_done(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// Whether the worker has nothing outstanding.
    pub fn worker_idle(&self) -> bool {
        self.outstanding == 0
    }

    /// Nothing pending, queued, outstanding or held.
    pub fn is_quiet(&self) -> bool {
        self.pending.is_empty()
            && self.queued.is_empty()
            && self.outstanding == 0
            && self.held.is_empty()
    }

    /// Writes emitted and not yet committed: the store's backlog.
    pub fn backlog(&self) -> usize {
        self.uncommitted
    }

    /// Number of held deliveries (diagnostics).
    pub fn held_len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch() -> StoreWrite {
        StoreWrite::TouchKey {
            id: "k".into(),
            at: "t".into(),
        }
    }

    fn revoke(id: &str) -> StoreWrite {
        StoreWrite::RevokeKey {
            id: id.into(),
            at: "t".into(),
        }
    }

    fn send(conn: ConnId, b: &str) -> Delivery {
        Delivery::Send {
            conn,
            bytes: b.as_bytes().to_vec().into(),
        }
    }

    fn call(id: u64) -> Delivery {
        Delivery::Call(crate::ProviderCall {
            id: crate::CallId(id),
            url: "http://127.0.0.1:9/v1/messages".into(),
            headers: Vec::new(),
            auth_template: String::new(),
            auth: crate::AuthPlacement::XApiKey,
            body: b"{}".to_vec(),
            timeout_ms: 1_000,
            stream: false,
        })
    }

    #[test]
    fn the_backlog_counts_writes_until_their_batch_commits() {
        let mut p = Pipeline::new();
        p.write(revoke("a"));
        p.write(touch());
        p.write(touch());
        assert_eq!(p.backlog(), 2, "a repeated stamp is one write");
        let _ = p.take_submission().unwrap();
        p.write(revoke("b"));
        assert_eq!(p.backlog(), 3);
        assert!(p.committed(1).is_empty());
        assert_eq!(p.backlog(), 1);
        let _ = p.take_submission().unwrap();
        p.committed(2);
        assert_eq!(p.backlog(), 0);
    }

    #[test]
    fn a_provider_call_leaves_only_once_its_request_event_is_committed() {
        let mut p = Pipeline::new();
        // The turn's `provider.request` (any gating write) then the call.
        p.write(revoke("provider.request"));
        assert_eq!(
            p.deliver(call(7)),
            None,
            "held behind the uncommitted event"
        );
        assert_eq!(p.deliver(send(ConnId(1), "frame")), None);
        let jobs = p.take_submission().unwrap();
        assert!(matches!(jobs[0], Job::Commit { batch: 1, .. }));
        assert_eq!(p.committed(1), vec![call(7), send(ConnId(1), "frame")]);
        // With nothing uncommitted before it, a call leaves at once.
        assert_eq!(p.deliver(call(8)), Some(call(8)));
    }

    #[test]
    fn a_held_unstreamed_call_still_leaves_when_aborted_a_streamed_one_is_dropped() {
        let mut p = Pipeline::new();
        p.write(revoke("provider.request"));
        assert_eq!(p.deliver(call(7)), None);
        let mut streamed = call(8);
        if let Delivery::Call(c) = &mut streamed {
            c.stream = true;
        }
        assert_eq!(p.deliver(streamed), None);
        assert_eq!(p.abort(crate::CallId(7)), None, "nothing to close yet");
        assert_eq!(p.abort(crate::CallId(8)), None, "dropped unsent");
        let _ = p.take_submission().unwrap();
        // The unstreamed call runs to its end: its reply frees the slot the
        // engine keeps for it.
        assert_eq!(p.committed(1), vec![call(7)]);
        assert_eq!(p.abort(crate::CallId(9)), Some(crate::CallId(9)));
    }

    #[test]
    fn an_ungated_send_passes_other_connections_held_output_but_not_its_own() {
        let mut p = Pipeline::new();
        p.write(revoke("a"));
        assert_eq!(p.deliver(send(ConnId(1), "x")), None);
        // A probe on another connection is not held behind the commit.
        assert_eq!(
            p.deliver_ungated(ConnId(2), b"ok".to_vec().into()),
            Some(send(ConnId(2), "ok"))
        );
        // One pipelined behind held output on its own connection waits.
        assert_eq!(p.deliver_ungated(ConnId(1), b"ok".to_vec().into()), None);
        p.take_submission().unwrap();
        assert_eq!(
            p.committed(1),
            vec![send(ConnId(1), "x"), send(ConnId(1), "ok")]
        );
        assert!(p.is_quiet());
    }

    #[test]
    fn sends_without_gating_writes_go_immediately() {
        let mut p = Pipeline::new();
        assert_eq!(p.deliver(send(ConnId(1), "a")), Some(send(ConnId(1), "a")));
        p.write(touch());
        assert_eq!(p.deliver(send(ConnId(1), "b")), Some(send(ConnId(1), "b")));
        // The touch is still committed eventually.
        let jobs = p.take_submission().unwrap();
        assert_eq!(jobs.len(), 1);
        assert!(p.committed(1).is_empty());
        assert!(p.is_quiet());
    }

    #[test]
    fn sends_after_gating_write_wait_for_commit_in_order() {
        let mut p = Pipeline::new();
        p.write(revoke("a"));
        assert_eq!(p.deliver(send(ConnId(1), "x")), None);
        assert_eq!(p.deliver(Delivery::Close { conn: ConnId(1) }), None);
        assert_eq!(p.deliver(send(ConnId(2), "y")), None);
        let jobs = p.take_submission().unwrap();
        assert_eq!(
            jobs,
            vec![Job::Commit {
                batch: 1,
                writes: vec![revoke("a")],
                fence: None
            }]
        );
        // While the worker is busy, new writes accumulate (group commit).
        p.write(revoke("b"));
        p.write(revoke("c"));
        assert_eq!(p.deliver(send(ConnId(3), "z")), None);
        assert!(p.take_submission().is_none());
        assert_eq!(
            p.committed(1),
            vec![
                send(ConnId(1), "x"),
                Delivery::Close { conn: ConnId(1) },
                send(ConnId(2), "y")
            ]
        );
        let jobs = p.take_submission().unwrap();
        assert_eq!(
            jobs,
            vec![Job::Commit {
                batch: 2,
                writes: vec![revoke("b"), revoke("c")],
                fence: None
            }]
        );
        assert_eq!(p.committed(2), vec![send(ConnId(3), "z")]);
        assert!(p.is_quiet());
    }

    fn touch_of(id: &str, at: &str) -> StoreWrite {
        StoreWrite::TouchKey {
            id: id.into(),
            at: at.into(),
        }
    }

    /// Repeated stamps of one key in a pending batch become one statement
    /// carrying the newest stamp, at the first one's place; a sealed batch
    /// is never changed.
    #[test]
    fn touches_of_one_key_in_a_pending_batch_collapse_to_the_newest() {
        let mut p = Pipeline::new();
        p.write(touch_of("k1", "t1"));
        p.write(revoke("k1"));
        p.write(touch_of("k2", "t2"));
        p.write(touch_of("k1", "t3"));
        p.write(touch_of("k2", "t4"));
        let jobs = p.take_submission().unwrap();
        let want = vec![touch_of("k1", "t3"), revoke("k1"), touch_of("k2", "t4")];
        assert_eq!(
            jobs,
            vec![Job::Commit {
                batch: 1,
                writes: want,
                fence: None
            }]
        );
        // The next batch starts afresh while the first is committing.
        p.write(touch_of("k1", "t5"));
        p.read(
            ReadId(1),
            StoreRead::EventById {
                session_id: "s".into(),
                event_id: "e".into(),
            },
        );
        p.write(touch_of("k1", "t6"));
        p.committed(1);
        let jobs = p.take_submission().unwrap();
        assert_eq!(jobs.len(), 3, "{jobs:?}");
        assert_eq!(
            jobs[0],
            Job::Commit {
                batch: 2,
                writes: vec![touch_of("k1", "t5")],
                fence: None
            }
        );
        assert_eq!(
            jobs[2],
            Job::Commit {
                batch: 3,
                writes: vec![touch_of("k1", "t6")],
                fence: None
            }
        );
    }

    #[test]
    fn reads_follow_earlier_writes() {
        let mut p = Pipeline::new();
        p.write(revoke("a"));
        p.read(
            ReadId(7),
            StoreRead::EventById {
                session_id: "s".into(),
                event_id: "evt_1".into(),
            },
        );
        p.write(revoke("b"));
        let jobs = p.take_submission().unwrap();
        assert!(matches!(jobs[0], Job::Commit { batch: 1, .. }));
        assert!(matches!(jobs[1], Job::Read { id: ReadId(7), .. }));
        assert!(matches!(jobs[2], Job::Commit { batch: 2, .. }));
        assert!(!p.worker_idle());
        p.committed(1);
        p.read_done();
        assert!(!p.worker_idle());
        p.committed(2);
        assert!(p.worker_idle());
        assert!(p.is_quiet());
    }

    /// Replica mode: every sealed batch carries the fence of its own writes
    /// (a batch of key writes only still carries one: the lane check).
    #[test]
    fn a_fenced_pipeline_seals_each_batch_with_its_fence() {
        let mut p = Pipeline::fenced();
        p.write(revoke("a"));
        p.write(StoreWrite::SetSessionState {
            id: "s_1".into(),
            state: crate::store::SessionState::Closed,
            closed_at: None,
        });
        p.read(ReadId(1), StoreRead::Runtime);
        p.write(revoke("b"));
        let jobs = p.take_submission().unwrap();
        let fence = |sessions: &[&str]| {
            Some(crate::replicas::Fence {
                sessions: sessions.iter().map(|s| s.to_string()).collect(),
            })
        };
        assert!(matches!(&jobs[0], Job::Commit { fence: f, .. } if *f == fence(&["s_1"])));
        assert!(matches!(&jobs[2], Job::Commit { fence: f, .. } if *f == fence(&[])));
    }

    #[test]
    fn send_after_commit_already_done_is_immediate() {
        let mut p = Pipeline::new();
        p.write(revoke("a"));
        p.take_submission().unwrap();
        p.committed(1);
        assert_eq!(p.deliver(send(ConnId(1), "x")), Some(send(ConnId(1), "x")));
    }
}
