//! The driver core against a recording runtime and host on a virtual
//! clock: the rules every runtime shares, in process (a real engine, no
//! sockets, no threads, no clock).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::mcp::McpCommand;
use crate::sandbox::SandboxCommand;
use crate::{AuthPlacement, Config, Entropy, Now, Snapshot, UnixMs};

use super::*;

/// What the core asked of the runtime and the host, in order.
#[derive(Default)]
struct Log {
    opened: Vec<ConnId>,
    refused: Vec<u32>,
    stopped_accepting: usize,
    calls: Vec<CallId>,
    aborted: Vec<CallId>,
    submitted: Vec<Vec<Job>>,
    busy: usize,
    closed_mcp: usize,
    finished: Option<Duration>,
}

/// The runtime and the host in one: a log and a virtual clock.
#[derive(Clone, Default)]
struct Fake {
    log: Rc<RefCell<Log>>,
    /// Virtual milliseconds.
    ms: Rc<Cell<u64>>,
    /// MCP children the host has not reaped yet.
    children: Rc<Cell<usize>>,
}

impl Fake {
    fn advance(&self, ms: u64) {
        self.ms.set(self.ms.get() + ms);
    }
}

/// A connection's writer: every message it was handed.
#[derive(Clone, Default)]
struct Wire(Rc<RefCell<Vec<WriterMsg>>>);

impl Writer for Wire {
    fn put(&self, msg: WriterMsg) {
        self.0.borrow_mut().push(msg);
    }
}

struct Call(CallId, Fake);

impl CallHandle for Call {
    fn abort(&mut self) {
        self.1.log.borrow_mut().aborted.push(self.0);
    }
}

impl Runtime for Fake {
    /// Accepted "sockets" are numbered, and each carries the wire it gets.
    type Stream = (u32, Wire);
    type Writer = Wire;
    type Call = Call;
    type Relay = ();

    fn now(&self) -> Now {
        let ms = self.ms.get();
        Now {
            mono: MonoMs(ms),
            unix: UnixMs(1_780_000_000_000 + ms),
        }
    }
    fn micros(&self) -> u64 {
        0
    }
    fn open(&mut self, conn: ConnId, stream: (u32, Wire)) -> Option<Wire> {
        self.log.borrow_mut().opened.push(conn);
        Some(stream.1)
    }
    fn refuse(&mut self, stream: (u32, Wire)) {
        self.log.borrow_mut().refused.push(stream.0);
    }
    fn stop_accepting(&mut self) {
        self.log.borrow_mut().stopped_accepting += 1;
    }
    fn call_provider(&mut self, call: ProviderCall) -> Option<Call> {
        self.log.borrow_mut().calls.push(call.id);
        call.stream.then(|| Call(call.id, self.clone()))
    }
    fn submit_store(&mut self, jobs: Vec<Job>) -> bool {
        self.log.borrow_mut().submitted.push(jobs);
        true
    }
    fn store_lost(&mut self) -> ! {
        panic!("the fake store worker never goes away")
    }
    fn forward(&mut self, _: Forward, _: &Wire) -> Option<()> {
        None
    }
}

/// A host whose upkeep is due one second after the last burst began.
impl Host for Fake {
    fn mcp(&mut self, _: McpCommand) {}
    fn sandbox(&mut self, _: SandboxCommand) {}
    fn busy(&mut self) {
        self.log.borrow_mut().busy += 1;
    }
    fn next_due(&self) -> Option<MonoMs> {
        (self.log.borrow().busy > 0).then(|| MonoMs(self.ms.get() + 1_000))
    }
    fn close_mcp(&mut self) {
        self.log.borrow_mut().closed_mcp += 1;
    }
    fn mcp_children(&self) -> usize {
        self.children.get()
    }
    fn finish(&mut self, _: &mut Engine, budget: Duration) {
        self.log.borrow_mut().finished = Some(budget);
    }
}

struct Zeros;

impl Entropy for Zeros {
    fn fill(&mut self, buf: &mut [u8]) {
        buf.fill(7);
    }
}

type TestCore = Core<Fake, Fake>;

const ADMIN_KEY: &str = "bae_admin_000000000000000000000000000000000000000000000000";

/// A store holding the bootstrap admin key.
fn snapshot() -> Snapshot {
    crate::mem_store::MemStore::with_admin_key("key_admin", ADMIN_KEY).snapshot()
}

fn new_core(max_connections: usize) -> (TestCore, Fake) {
    let fake = Fake::default();
    let engine = Engine::new(Config::default(), Box::new(Zeros), snapshot(), fake.now());
    let limits = Limits {
        shutdown_timeout: Duration::from_secs(3600),
        max_connections,
    };
    let boot = CoreBoot {
        engine,
        limits,
        fenced: false,
        faults: Default::default(),
    };
    (Core::new(boot, fake.clone(), fake.clone()), fake)
}

const PROBE: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";

fn received(conn: u64, bytes: &[u8]) -> Event<(u32, Wire)> {
    let bytes = bytes.to_vec();
    Event::Net(Input::Received {
        conn: ConnId(conn),
        bytes,
    })
}

/// Everything written to `wire`, as text, and whether it was closed.
fn written(wire: &Wire) -> (String, bool) {
    let mut text = String::new();
    let mut closed = false;
    for m in wire.0.borrow().iter() {
        match m {
            WriterMsg::Data(b) => text.push_str(&String::from_utf8_lossy(b)),
            WriterMsg::Close => closed = true,
        }
    }
    (text, closed)
}

fn one(core: &mut TestCore, ev: Event<(u32, Wire)>) {
    core.handle_burst(ev, || None);
    core.flush();
}

#[test]
fn an_accepted_connection_is_answered_and_nothing_after_its_close_reaches_the_engine() {
    let (mut core, fake) = new_core(8);
    let wire = Wire::default();
    one(
        &mut core,
        Event::Accepted(Listener::Client, (1, wire.clone())),
    );
    assert_eq!(fake.log.borrow().opened, [ConnId(1)]);
    one(&mut core, received(1, PROBE));
    let (text, _) = written(&wire);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let before = wire.0.borrow().len();
    one(&mut core, Event::Net(Input::Closed { conn: ConnId(1) }));
    // Stale: the reader's last bytes, a writer's flush, a second close.
    one(&mut core, received(1, PROBE));
    one(
        &mut core,
        Event::Net(Input::Flushed {
            conn: ConnId(1),
            bytes: 10,
        }),
    );
    one(&mut core, Event::Net(Input::Closed { conn: ConnId(1) }));
    // Never accepted at all.
    one(&mut core, received(9, PROBE));
    assert_eq!(wire.0.borrow().len(), before, "nothing more was written");
    assert!(core.conns.is_empty());
}

#[test]
fn connections_beyond_the_limit_and_during_the_shutdown_are_refused() {
    let (mut core, fake) = new_core(1);
    let first = Wire::default();
    one(
        &mut core,
        Event::Accepted(Listener::Client, (1, first.clone())),
    );
    one(
        &mut core,
        Event::Accepted(Listener::Admin, (2, Wire::default())),
    );
    assert_eq!(fake.log.borrow().refused, [2], "over BAE_MAX_CONNECTIONS");
    one(&mut core, Event::Net(Input::Closed { conn: ConnId(1) }));
    one(&mut core, Event::Signal);
    assert_eq!(fake.log.borrow().stopped_accepting, 1);
    one(
        &mut core,
        Event::Accepted(Listener::Client, (3, Wire::default())),
    );
    assert_eq!(fake.log.borrow().refused, [2, 3], "shutting down");
    assert_eq!(fake.log.borrow().opened, [ConnId(1)]);
}

#[test]
fn the_shutdown_waits_for_open_connections_and_a_second_signal_ends_it() {
    let (mut core, _) = new_core(8);
    assert!(!core.stopped(), "no shutdown yet");
    let wire = Wire::default();
    one(
        &mut core,
        Event::Accepted(Listener::Client, (1, wire.clone())),
    );
    one(&mut core, Event::Signal);
    assert!(!core.stopped(), "a connection is still open");
    one(&mut core, Event::Net(Input::Closed { conn: ConnId(1) }));
    assert!(core.stopped(), "idle: nothing open, nothing in flight");

    let (mut core, _) = new_core(8);
    one(
        &mut core,
        Event::Accepted(Listener::Client, (1, Wire::default())),
    );
    one(&mut core, Event::Signal);
    assert!(!core.stopped());
    one(&mut core, Event::Signal);
    assert!(core.stopped(), "the second signal spends the budget");
}

fn call(id: u64, stream: bool) -> ProviderCall {
    ProviderCall {
        id: CallId(id),
        url: "http://127.0.0.1:9/v1/messages".into(),
        headers: Vec::new(),
        auth_template: String::new(),
        auth: AuthPlacement::XApiKey,
        body: Vec::new(),
        timeout_ms: 1000,
        stream,
    }
}

#[test]
fn an_aborted_streamed_call_is_closed_and_nothing_more_of_it_reaches_the_engine() {
    let (mut core, fake) = new_core(8);
    core.call_provider(call(1, true));
    core.call_provider(call(2, false));
    assert_eq!(fake.log.borrow().calls, [CallId(1), CallId(2)]);
    assert_eq!(core.provider_inflight, 2);
    assert!(core.streaming.contains_key(&CallId(1)));
    assert!(
        !core.streaming.contains_key(&CallId(2)),
        "only streamed calls"
    );

    core.abort_provider(CallId(1));
    // An unstreamed call has no handle: it is left to finish.
    core.abort_provider(CallId(2));
    assert_eq!(fake.log.borrow().aborted, [CallId(1)]);
    assert!(core.streaming.get(&CallId(1)).is_some_and(|s| s.aborted));

    one(
        &mut core,
        Event::ProviderChunk(CallId(1), b"data: x\n\n".to_vec()),
    );
    let reply = ProviderReply::Transport("closed".into());
    one(&mut core, Event::Provider(CallId(1), reply.clone()));
    assert!(
        core.streaming.is_empty(),
        "its entry is gone with its reply"
    );
    one(&mut core, Event::Provider(CallId(2), reply));
    assert_eq!(core.provider_inflight, 0, "both counted as finished");
}

#[test]
fn a_burst_tells_the_host_and_its_upkeep_is_in_the_next_wake() {
    let (mut core, fake) = new_core(8);
    assert_eq!(core.next_wake(), MonoMs(ACTIVITY_PERIOD_MS), "idle");
    one(
        &mut core,
        Event::Accepted(Listener::Client, (1, Wire::default())),
    );
    assert_eq!(fake.log.borrow().busy, 1);
    assert_eq!(core.next_wake(), MonoMs(1_000), "the host's upkeep");
}

#[test]
fn the_activity_summary_is_queued_once_an_hour() {
    let (mut core, fake) = new_core(8);
    core.fire_timers();
    assert!(fake.log.borrow().submitted.is_empty());
    fake.advance(ACTIVITY_PERIOD_MS);
    core.fire_timers();
    core.fire_timers();
    assert_eq!(fake.log.borrow().submitted, [vec![Job::Activity]]);
    assert_eq!(core.next_wake(), MonoMs(2 * ACTIVITY_PERIOD_MS));
}

#[test]
fn the_drain_waits_for_mcp_children_then_the_store_then_flushes_with_what_is_left() {
    let (mut core, fake) = new_core(8);
    let wire = Wire::default();
    one(
        &mut core,
        Event::Accepted(Listener::Admin, (1, wire.clone())),
    );
    // A write the answer reveals: it is committed before the answer leaves.
    let body = r#"{"name":"p","primary_provider":"main"}"#;
    let req = format!(
        "POST /admin/v1/profiles HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_KEY}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    core.handle_burst(received(1, req.as_bytes()), || None);
    core.handle_burst(Event::Signal, || None);
    fake.advance(1_000);
    fake.children.set(1);
    core.begin_drain();
    assert_eq!(fake.log.borrow().closed_mcp, 1);
    let submitted = fake.log.borrow().submitted.len();
    assert_eq!(core.drain(), Drain::Wait(Some(MonoMs(1_010))), "reaping");
    assert_eq!(fake.log.borrow().submitted.len(), submitted, "not yet");
    fake.children.set(0);
    assert_eq!(core.drain(), Drain::Wait(None), "the store is committing");
    let jobs = fake.log.borrow_mut().submitted.remove(0);
    assert!(
        matches!(jobs[..], [Job::Commit { batch: 1, .. }]),
        "{jobs:?}"
    );
    assert!(
        written(&wire).0.is_empty(),
        "the answer waits for its commit"
    );
    core.drain_event(Event::Store(StoreDone::Committed(1)));
    assert!(written(&wire).0.starts_with("HTTP/1.1 201"), "released");
    assert_eq!(core.drain(), Drain::Done);
    fake.advance(500);
    core.finish();
    let left = fake.log.borrow().finished;
    assert_eq!(left, Some(Duration::from_millis(3_600_000 - 1_500)));
}

#[test]
fn reaping_mcp_children_stops_at_its_budget() {
    let (mut core, fake) = new_core(8);
    fake.children.set(2);
    core.begin_drain();
    assert_eq!(core.drain(), Drain::Wait(Some(MonoMs(10))));
    fake.advance(MCP_REAP_BUDGET_MS - 5);
    assert_eq!(
        core.drain(),
        Drain::Wait(Some(MonoMs(MCP_REAP_BUDGET_MS))),
        "never past the budget"
    );
    fake.advance(5);
    assert_eq!(core.drain(), Drain::Done, "children left behind");
}
