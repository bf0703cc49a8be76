//! In-process tests of the session core: no HTTP bytes, no engine, a
//! virtual clock. [`Harness`] plays the engine's part the way `turn/gate.rs`
//! does (a started request runs until the test ends or pauses it, a retired
//! pause logs its abandonment), so each test reads as a timeline.

mod cancel;
mod compaction;
mod fifo;
mod pause;
mod recovery;
mod turn_loop;

use std::collections::BTreeSet;

use super::{Arrival, Gate, Holder, Idem, Limits, Op, Pause, Refusal, Start, Takeover, Waiter};
use crate::ConnId;
use crate::MonoMs;
use serde_json::json;

/// The pause timeout the harness parks turns with (`BAE_TURN_TIMEOUT`).
const TIMEOUT: u64 = 1_000;

/// How a request came to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Fresh,
    Resume,
    Retire,
}

/// Something the harness observed, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Started(ConnId, How),
    Queued(ConnId),
    Refused(ConnId, Refusal),
    /// A retired pause's abandonment was logged for this owner.
    Abandoned(String),
}

struct Running {
    conn: ConnId,
    key: String,
    compaction: bool,
    /// The pause it took over, if any (what it continues or retires).
    took: Option<Pause>,
}

struct Harness {
    gate: Gate,
    now: MonoMs,
    limits: Limits,
    next_conn: ConnId,
    closed: BTreeSet<ConnId>,
    running: Option<Running>,
    seen: Vec<Seen>,
    /// Whether history is loaded (false after a restart until recovery).
    loaded: bool,
}

impl Harness {
    fn new() -> Self {
        Harness {
            gate: Gate::default(),
            now: MonoMs(10_000),
            limits: Limits {
                max_queued: 256,
                shutting_down: false,
            },
            next_conn: ConnId(1),
            closed: BTreeSet::new(),
            running: None,
            seen: Vec::new(),
            loaded: true,
        }
    }

    /// A harness whose gate is fresh after a process restart.
    fn restarted() -> Self {
        Harness {
            loaded: false,
            ..Harness::new()
        }
    }

    fn conn(&mut self) -> ConnId {
        let c = self.next_conn;
        self.next_conn += 1;
        c
    }

    fn send(&mut self, key: &str) -> ConnId {
        let op = Op::Send(message(None));
        self.arrive(key, op)
    }

    fn send_idem(&mut self, key: &str, idem_key: &str) -> ConnId {
        let idem = Idem {
            key: idem_key.into(),
            watchers: Vec::new(),
        };
        self.arrive(key, Op::Send(message(Some(idem))))
    }

    fn compact(&mut self, key: &str) -> ConnId {
        self.arrive(key, Op::Compact(None))
    }

    fn arrive(&mut self, key: &str, op: Op) -> ConnId {
        let conn = self.conn();
        self.arrive_waiter(Waiter::new(conn, key.into(), op));
        conn
    }

    /// What the engine's `arrive` does with a waiter.
    fn arrive_waiter(&mut self, w: Waiter) {
        let conn = w.conn;
        if !self.loaded {
            self.gate.begin_recovery();
            let a = self.gate.enqueue(self.limits, w);
            return self.route(conn, a);
        }
        let a = self.gate.arrive(self.now, self.limits, w);
        self.route(conn, a);
    }

    fn route(&mut self, conn: ConnId, a: Arrival) {
        match a {
            Arrival::Start(s) => self.started(s),
            Arrival::Queued => self.seen.push(Seen::Queued(conn)),
            Arrival::Refused(w, why) => self.seen.push(Seen::Refused(w.conn, why)),
        }
    }

    fn started(&mut self, s: Start) {
        assert!(self.running.is_none(), "two requests hold the gate");
        assert!(matches!(self.gate.holder(), Holder::Running));
        let (how, took) = match s.takeover {
            Takeover::Fresh => (How::Fresh, None),
            Takeover::Resume(p) => (How::Resume, Some(p)),
            Takeover::Retire(p) => {
                if !p.cancelled {
                    self.seen.push(Seen::Abandoned(p.owner.to_string()));
                }
                (How::Retire, Some(p))
            }
        };
        self.seen.push(Seen::Started(s.waiter.conn, how));
        self.running = Some(Running {
            conn: s.waiter.conn,
            key: s.waiter.key_id.to_string(),
            compaction: matches!(s.waiter.op, Op::Compact(_)),
            took,
        });
    }

    /// The running request ends without pausing.
    fn complete(&mut self) {
        assert!(self.running.take().is_some(), "nothing runs");
        let closed = self.closed.clone();
        if let Some(s) = self.gate.release(self.now, |c| !closed.contains(&c)) {
            self.started(s);
        }
    }

    /// The running chat turn pauses for client tools `ids`.
    fn pause(&mut self, ids: &[&str]) {
        let r = self.running.take().expect("nothing runs");
        assert!(!r.compaction, "a compaction never pauses");
        let p = pause_of(&r.key, self.now + TIMEOUT, ids);
        for w in self.gate.park(p) {
            self.seen
                .push(Seen::Refused(w.conn, Refusal::TurnInProgress));
        }
    }

    /// Virtual time passes and the engine's timer fires if it is due.
    fn advance(&mut self, ms: u64) {
        self.now += ms;
        if self.gate.deadline().is_some_and(|d| d <= self.now) {
            let closed = self.closed.clone();
            if let Some(s) = self.gate.tick(self.now, |c| !closed.contains(&c)) {
                self.started(s);
            }
        }
    }

    fn close(&mut self, conn: ConnId) -> bool {
        self.closed.insert(conn);
        self.gate.forget(conn)
    }

    /// History rebuilt: the waiters run through the arrival rules in order.
    fn recovered(&mut self, pause: Option<Pause>) {
        self.loaded = true;
        for w in self.gate.recovered(pause) {
            if !self.closed.contains(&w.conn) {
                self.arrive_waiter(Waiter::new(w.conn, w.key_id, w.op));
            }
        }
    }

    fn running_conn(&self) -> Option<ConnId> {
        self.running.as_ref().map(|r| r.conn)
    }

    fn started_order(&self) -> Vec<ConnId> {
        self.seen
            .iter()
            .filter_map(|s| match s {
                Seen::Started(c, _) => Some(*c),
                _ => None,
            })
            .collect()
    }

    fn how(&self, conn: ConnId) -> Option<How> {
        self.seen.iter().find_map(|s| match s {
            Seen::Started(c, h) if *c == conn => Some(*h),
            _ => None,
        })
    }

    fn refused(&self, conn: ConnId) -> Option<Refusal> {
        self.seen.iter().find_map(|s| match s {
            Seen::Refused(c, why) if *c == conn => Some(*why),
            _ => None,
        })
    }

    fn abandoned(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter_map(|s| match s {
                Seen::Abandoned(o) => Some(o.clone()),
                _ => None,
            })
            .collect()
    }

    fn queued(&self) -> Vec<ConnId> {
        self.gate.waiters().map(|w| w.conn).collect()
    }

    fn paused_owner(&self) -> Option<&str> {
        match self.gate.holder() {
            Holder::Paused(p) => Some(&p.owner),
            _ => None,
        }
    }
}

fn message(idem: Option<Idem>) -> super::UserMessage {
    super::UserMessage {
        role: "user".into(),
        content: json!("hi"),
        idem,
    }
}

fn pause_of(owner: &str, deadline: MonoMs, ids: &[&str]) -> Pause {
    Pause {
        owner: owner.into(),
        deadline,
        expected: ids.iter().map(|s| s.to_string()).collect(),
        server_results: Vec::new(),
        auto_trigger: None,
        cancelled: false,
    }
}
