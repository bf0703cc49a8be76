//! The driver core every runtime shares (issue 42): everything between the engine and
//! the outside world that does not depend on how a runtime waits, spawns,
//! moves bytes or reads a clock.
//!
//! [`Core`] owns the [`Engine`], its [`Pipeline`], the connection table and
//! the in-flight bookkeeping. A runtime hands it typed [`Event`]s (a burst
//! at a time), asks it when to wake ([`Core::next_wake`]) and whether the
//! graceful shutdown is over ([`Core::stopped`]), then drains the store
//! ([`Core::drain`]); the core feeds the engine, routes every output and
//! calls back through [`Runtime`] (sockets, provider calls, the store
//! worker, the clock) and [`Host`] (MCP and sandbox transports, upkeep that
//! never changes what the engine does). It reads no clock and performs no
//! I/O itself. Rules that used to be written twice live here once: stale
//! connection reports, the abort rule of streamed provider calls, the
//! shutdown-idle test, the lease check before an answer is revealed, engine
//! step timing and the activity summary.

use std::time::Duration;

use crate::bytes::Bytes;
use crate::mcp::{McpCommand, McpConnId, McpEvent};
use crate::pipeline::Job;
use crate::replicas::Forward;
use crate::sandbox::{OpId, SandboxCommand, SandboxReply};
use crate::store::{ReadError, ReadId, ReadResult};
use crate::{
    CallId, ConnId, Engine, Input, Listener, MonoMs, Now, Output, ProviderCall, ProviderReply,
};

mod core;

pub use self::core::Core;

/// What the store worker reports back.
pub enum StoreDone {
    Committed(u64),
    Read(ReadId, Result<ReadResult, ReadError>),
}

/// Everything a driver loop reacts to; `S` is the runtime's accepted
/// socket.
pub enum Event<S> {
    Accepted(Listener, S),
    /// `Received`, `Flushed` or `Closed` from a connection's reader or
    /// writer.
    Net(Input),
    Provider(CallId, ProviderReply),
    /// Body bytes of a streamed call's 2xx response.
    ProviderChunk(CallId, Vec<u8>),
    Mcp(McpConnId, McpEvent),
    Sandbox(OpId, SandboxReply),
    Store(StoreDone),
    /// Replica mode: catalogue rows other replicas committed.
    Catalog(Box<crate::store::CatalogUpdate>),
    /// SIGTERM or SIGINT.
    Signal,
}

impl<S> Event<S> {
    /// What [`crate::burst::probes_first`] needs to know.
    fn seen(&self) -> crate::burst::Seen<'_> {
        use crate::burst::Seen;
        match self {
            Event::Net(Input::Received { conn, bytes }) => Seen::Received(*conn, bytes),
            Event::Net(input) => input.conn().map_or(Seen::Other, Seen::Conn),
            _ => Seen::Other,
        }
    }
}

/// What a connection's writer is told, in order.
pub enum WriterMsg {
    Data(Bytes),
    /// Write what is queued, then shut the socket down.
    Close,
}

/// A connection's writer as the core sees it: a queue that never blocks.
pub trait Writer {
    /// Queues `msg`; a writer that is gone drops it (its connection is
    /// already going away).
    fn put(&self, msg: WriterMsg);
}

/// The handle of a streamed provider call in flight.
pub trait CallHandle {
    /// Closes the call's connection now (the engine gave up on it).
    fn abort(&mut self);
}

/// What a runtime performs for the core: its sockets, tasks, store worker
/// and clock.
pub trait Runtime {
    /// An accepted socket the core has not admitted yet.
    type Stream;
    /// A connection's writer.
    type Writer: Writer;
    /// A streamed provider call's abort handle.
    type Call: CallHandle;
    /// Replica mode: a relay in progress; dropping it ends the relay.
    type Relay;

    /// The engine's time now (monotonic and wall clock).
    fn now(&self) -> Now;
    /// A monotonic microsecond count, only to time engine steps
    /// (`bae_engine_step_microseconds`); a virtual clock may return 0.
    fn micros(&self) -> u64;
    /// Starts the connection's reader and writer. `None`: the socket
    /// could not be set up (it is dropped, and the engine never hears of
    /// it).
    fn open(&mut self, conn: ConnId, stream: Self::Stream) -> Option<Self::Writer>;
    /// Closes a socket the core refused (shutting down, or over
    /// `BAE_MAX_CONNECTIONS`).
    fn refuse(&mut self, stream: Self::Stream);
    /// Stops accepting (the graceful shutdown began).
    fn stop_accepting(&mut self);
    /// Starts a provider call off the engine thread; its reply comes back
    /// as [`Event::Provider`] (and [`Event::ProviderChunk`]s first when it
    /// streams). A streamed call returns its abort handle.
    fn call_provider(&mut self, call: ProviderCall) -> Option<Self::Call>;
    /// Hands jobs to the store worker; `false` when it is gone.
    fn submit_store(&mut self, jobs: Vec<Job>) -> bool;
    /// The store worker is gone. It only stops by exiting the process, so
    /// this is unreachable in practice; a runtime exits (crash-only).
    fn store_lost(&mut self) -> !;
    /// Replica mode: relays the connection to its session's owner through
    /// `writer`. `None` when this runtime cannot (it refuses replica mode
    /// at start, so the engine never asks it).
    fn forward(&mut self, f: Forward, writer: &Self::Writer) -> Option<Self::Relay>;
}

/// What the process around the engine provides besides the runtime: the
/// MCP and sandbox transports, and upkeep that never changes what the
/// engine does (heap trim, telemetry export, the replica lease watch).
/// Every upkeep method defaults to doing nothing.
pub trait Host {
    /// Performs an MCP transport command; what it does comes back as
    /// [`Event::Mcp`].
    fn mcp(&mut self, cmd: McpCommand);
    /// Runs a container engine command; its reply comes back as
    /// [`Event::Sandbox`].
    fn sandbox(&mut self, cmd: SandboxCommand);
    /// The reply of `op` reached the core: its kill switch is not needed.
    fn sandbox_done(&mut self, _op: OpId) {}
    /// A burst of events begins (the heap trim waits for a quiet spell).
    fn busy(&mut self) {}
    /// The engine's outputs were drained: what it recorded for telemetry
    /// leaves with them (only its telemetry may be drained here).
    fn drained(&mut self, _engine: &mut Engine) {}
    /// Sees every engine output before the core routes it (the
    /// simulator's invariant checks; a server has nothing to do here).
    fn observe(&mut self, _out: &Output) {}
    /// When the upkeep next needs the loop to wake.
    fn next_due(&self) -> Option<MonoMs> {
        None
    }
    /// Does the upkeep that is due (heap trim, telemetry export).
    fn fire(&mut self, _engine: &mut Engine) {}
    /// An answer is about to be revealed (replica mode: a replica frozen
    /// past its lease reveals nothing more).
    fn before_reveal(&mut self) {}
    /// The shutdown began draining: close every MCP transport (children
    /// are killed, then reaped).
    fn close_mcp(&mut self) {}
    /// MCP children not reaped yet.
    fn mcp_children(&self) -> usize {
        0
    }
    /// The last step of a shutdown: flush telemetry within `budget`.
    fn finish(&mut self, _engine: &mut Engine, _budget: Duration) {}
}

/// What the runtime does next while the shutdown drains the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Wait for the next event (at the latest until this instant, when
    /// set), hand it to [`Core::drain_event`], then ask again.
    Wait(Option<MonoMs>),
    /// Everything is committed: call [`Core::finish`].
    Done,
}

/// Limits the core enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `BAE_SHUTDOWN_TIMEOUT`: budget for the graceful drain.
    pub shutdown_timeout: Duration,
    /// `BAE_MAX_CONNECTIONS`: connections beyond it are refused on accept.
    pub max_connections: usize,
}

/// What the core is started with besides its runtime and host.
pub struct CoreBoot {
    pub engine: Engine,
    pub limits: Limits,
    /// Replica mode: every commit checks its lane and leases.
    pub fenced: bool,
    /// Empty unless the simulator planted a pipeline bug.
    pub faults: crate::faults::Faults,
}
