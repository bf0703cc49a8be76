//! The driver core against a recording runtime: the rules both runtimes
//! share, in process (a real engine, no sockets, no threads).

use std::cell::RefCell;
use std::rc::Rc;

use engine::{AuthPlacement, Config, Snapshot};

use super::*;
use crate::config::SandboxDriver;

/// What the core asked of the runtime, in order.
#[derive(Default)]
struct Log {
    opened: Vec<ConnId>,
    refused: Vec<u32>,
    stopped_accepting: usize,
    calls: Vec<CallId>,
    aborted: Vec<CallId>,
    submitted: usize,
}

#[derive(Clone, Default)]
struct Fake(Rc<RefCell<Log>>);

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
        self.1 .0.borrow_mut().aborted.push(self.0);
    }
}

impl Runtime for Fake {
    /// Accepted "sockets" are numbered, and each carries the wire it gets.
    type Stream = (u32, Wire);
    type Writer = Wire;
    type Call = Call;
    type Relay = ();

    fn open(&mut self, conn: ConnId, stream: (u32, Wire)) -> Option<Wire> {
        self.0.borrow_mut().opened.push(conn);
        Some(stream.1)
    }
    fn refuse(&mut self, stream: (u32, Wire)) {
        self.0.borrow_mut().refused.push(stream.0);
    }
    fn stop_accepting(&mut self) {
        self.0.borrow_mut().stopped_accepting += 1;
    }
    fn call_provider(&mut self, call: ProviderCall) -> Option<Call> {
        self.0.borrow_mut().calls.push(call.id);
        call.stream.then(|| Call(call.id, self.clone()))
    }
    fn submit_store(&mut self, _: Vec<Job>) -> bool {
        self.0.borrow_mut().submitted += 1;
        true
    }
    fn forward(&mut self, _: Forward, _: &Wire) -> Option<()> {
        None
    }
}

/// The transports report to a queue nobody reads (no test opens one).
type TestCore = Core<Fake, smol::channel::Sender<Event<()>>>;

fn new_core(max_connections: usize) -> (TestCore, Fake) {
    let clock = Clock::new();
    let engine = Engine::new(
        Config::default(),
        Box::new(super::super::OsEntropy::new()),
        Snapshot::default(),
        clock.now(),
    );
    let settings = DriverSettings {
        shutdown_timeout: Duration::from_secs(3600),
        max_connections,
        sandbox_driver: SandboxDriver::Docker,
        sandbox_run_args: Vec::new(),
        forward_timeout: Duration::from_secs(1),
    };
    let boot = CoreBoot {
        engine,
        clock,
        settings,
        telemetry: None,
        lease_watch: None,
    };
    let fake = Fake::default();
    let (tx, _rx) = smol::channel::bounded(1);
    (Core::new(boot, fake.clone(), tx), fake)
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
    assert_eq!(fake.0.borrow().opened, [ConnId(1)]);
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
    assert_eq!(fake.0.borrow().refused, [2], "over BAE_MAX_CONNECTIONS");
    one(&mut core, Event::Net(Input::Closed { conn: ConnId(1) }));
    one(&mut core, Event::Signal);
    assert_eq!(fake.0.borrow().stopped_accepting, 1);
    one(
        &mut core,
        Event::Accepted(Listener::Client, (3, Wire::default())),
    );
    assert_eq!(fake.0.borrow().refused, [2, 3], "shutting down");
    assert_eq!(fake.0.borrow().opened, [ConnId(1)]);
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
    assert_eq!(fake.0.borrow().calls, [CallId(1), CallId(2)]);
    assert_eq!(core.provider_inflight, 2);
    assert!(core.streaming.contains_key(&CallId(1)));
    assert!(
        !core.streaming.contains_key(&CallId(2)),
        "only streamed calls"
    );

    core.abort_provider(CallId(1));
    // An unstreamed call has no handle: it is left to finish.
    core.abort_provider(CallId(2));
    assert_eq!(fake.0.borrow().aborted, [CallId(1)]);
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
fn activity_arms_the_heap_trim_in_the_next_wake() {
    let (mut core, _) = new_core(8);
    let idle = core.next_wake();
    assert!(idle >= Instant::now() + ACTIVITY_PERIOD - Duration::from_secs(60));
    one(
        &mut core,
        Event::Accepted(Listener::Client, (1, Wire::default())),
    );
    let wake = core.next_wake();
    assert!(
        wake <= Instant::now() + crate::heap_trim::QUIET,
        "the trim after a quiet second is the next wake"
    );
}
