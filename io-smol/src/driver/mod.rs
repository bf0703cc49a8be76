//! The runtimes around the sans-IO engine, and what they share.
//!
//! [`engine::driver`] is the driver core: the engine, its pipeline, the
//! connection table and the in-flight bookkeeping, with every routing rule
//! (docs/porting.md); it reads no clock and performs no I/O. A runtime is
//! the core plus its own wait loop, clock, sockets and task spawning behind
//! [`engine::driver::Runtime`]: `baesrv` on smol ([`smol_rt`], with
//! `calls.rs` and the replica relay `forward.rs`) and `baesrv-threads` on
//! std threads (`crate::threads`). [`host::ProcessHost`] is the rest of the
//! process the core calls through [`engine::driver::Host`], the same in
//! both: the MCP and sandbox transports (`mcp.rs`, `sandbox.rs`), the heap
//! trim, the telemetry exporter and the replica lease watch. The provider
//! HTTP clients and the store thread's job loop (`store_jobs.rs`) are
//! shared too; so is a writer's batching (`writes.rs`), for any runtime
//! with async sockets (`baesrv-threads` writes each buffer as it comes).
//!
//! The driver contains no protocol logic: it never looks inside bytes,
//! writes or reads.
//!
//! Commit failures are fatal (crash-only): the store thread logs the error
//! and exits the process with code 1 before any output held behind the
//! failed batch is released, so nothing unacknowledged was ever revealed and
//! a restart rebuilds the state from the database.

mod calls;
mod deadlines;
mod entropy;
mod forward;
pub mod host;
pub mod mcp;
mod outbox;
pub mod provider;
pub mod provider_http;
pub mod provider_stream;
pub mod reports;
pub mod sandbox;
mod smol_rt;
mod store_jobs;
pub(crate) mod writes;

pub use engine::driver::StoreDone;
pub use entropy::OsEntropy;
pub use smol_rt::run;
pub use store_jobs::{serve_store_jobs, spawn_store_thread};

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engine::driver::{CoreBoot, Limits};
use engine::{Engine, MonoMs, Now, UnixMs};

use crate::store::Backend;

/// Monotonic + wall clock in the engine's [`Now`] representation.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    pub fn now(&self) -> Now {
        Now {
            mono: MonoMs(self.origin.elapsed().as_millis() as u64),
            unix: UnixMs(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
            ),
        }
    }

    /// The [`Instant`] of a monotonic engine deadline.
    pub fn instant_at(&self, at: MonoMs) -> Instant {
        self.origin + Duration::from_millis(at.0)
    }

    /// The monotonic engine time of `at`, rounded up to the millisecond.
    pub fn mono_at(&self, at: Instant) -> MonoMs {
        let d = at.saturating_duration_since(self.origin);
        let ms = d.as_millis() as u64;
        MonoMs(ms + u64::from(d > Duration::from_millis(ms)))
    }

    /// Microseconds since the origin (engine step timing).
    pub fn micros(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }
}

/// Bound listeners, in the order they were bound (client, then admin), and
/// the shutdown signals.
pub struct Listeners {
    pub client: std::net::TcpListener,
    pub admin: std::net::TcpListener,
    /// SIGTERM and SIGINT, caught from before the first socket is bound: a
    /// signal sent as soon as the server accepts connections starts the
    /// graceful shutdown instead of killing the process.
    pub signals: async_signal::Signals,
}

/// Catches the shutdown signals, then binds the client listener and the
/// admin listener (spec 04 §5 step 13). The error names what failed.
pub fn bind_listeners(client: SocketAddr, admin: SocketAddr) -> Result<Listeners, String> {
    use async_signal::{Signal, Signals};
    let signals = Signals::new([Signal::Term, Signal::Int])
        .map_err(|e| format!("cannot catch SIGTERM/SIGINT: {e}"))?;
    let client =
        listen(client).map_err(|e| format!("cannot bind client listener on {client}: {e}"))?;
    let admin = listen(admin).map_err(|e| format!("cannot bind admin listener on {admin}: {e}"))?;
    Ok(Listeners {
        client,
        admin,
        signals,
    })
}

/// Accept-queue length. std's default of 128 makes connection bursts
/// overflow the queue: the kernel drops SYNs and clients stall ~1 s.
const LISTEN_BACKLOG: i32 = 1024;

fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Runtime settings of the driver.
#[derive(Debug, Clone)]
pub struct DriverSettings {
    /// `BAE_SHUTDOWN_TIMEOUT`: budget for the graceful drain.
    pub shutdown_timeout: Duration,
    /// `BAE_MAX_CONNECTIONS`: connections beyond it are closed on accept.
    pub max_connections: usize,
    /// `BAE_SANDBOX_DRIVER`: the container engine CLI for remote sandboxes.
    pub sandbox_driver: crate::config::SandboxDriver,
    /// Resource-limit flags for sandbox containers (`run` arguments).
    pub sandbox_run_args: Vec<String>,
    /// `BAE_FORWARD_TIMEOUT_MS`: how long a relayed request waits for the
    /// owner's response head (replica mode).
    pub forward_timeout: Duration,
}

/// Everything a runtime is started with: the engine restored from the
/// store, its clock, the store, the bound listeners and the settings.
pub struct Boot {
    pub engine: Engine,
    pub clock: Clock,
    pub store: Backend,
    pub listeners: Listeners,
    pub settings: DriverSettings,
    /// The OpenTelemetry exporter, when `[telemetry]` is enabled.
    pub telemetry: Option<crate::otel::Exporter>,
    /// Replica mode: the database whose catalogue notices to follow.
    pub replica_notices: Option<crate::config::DatabaseUrl>,
    /// Replica mode: when the leases were last renewed; nothing is
    /// revealed once that is 3/4 of the lease ago (docs/scaling.md).
    pub lease_watch: Option<crate::store::pg::renewer::LeaseWatch>,
}

impl Boot {
    /// The core's part, the host's part, and what the runtime keeps: the
    /// clock, the store (for its store thread), the listeners and the
    /// replica notices to follow.
    pub fn split(self) -> (CoreBoot, HostBoot, RuntimeBoot) {
        let core = CoreBoot {
            engine: self.engine,
            limits: Limits {
                shutdown_timeout: self.settings.shutdown_timeout,
                max_connections: self.settings.max_connections,
            },
            // Replica mode: every commit checks its lane and leases.
            fenced: self.lease_watch.is_some(),
            faults: Default::default(),
        };
        let host = HostBoot {
            clock: self.clock,
            settings: self.settings,
            telemetry: self.telemetry,
            lease_watch: self.lease_watch,
        };
        let rt = RuntimeBoot {
            clock: self.clock,
            store: self.store,
            listeners: self.listeners,
            replica_notices: self.replica_notices,
        };
        (core, host, rt)
    }
}

/// What [`host::ProcessHost`] is built from.
pub struct HostBoot {
    pub clock: Clock,
    pub settings: DriverSettings,
    pub telemetry: Option<crate::otel::Exporter>,
    pub lease_watch: Option<crate::store::pg::renewer::LeaseWatch>,
}

impl HostBoot {
    /// The host, its transports reporting to `reports`.
    pub fn build<Q: reports::Reports>(self, reports: Q) -> host::ProcessHost<Q> {
        host::ProcessHost::new(
            self.clock,
            &self.settings,
            self.telemetry,
            self.lease_watch,
            reports,
        )
    }
}

/// What a runtime keeps for itself.
pub struct RuntimeBoot {
    pub clock: Clock,
    pub store: Backend,
    pub listeners: Listeners,
    pub replica_notices: Option<crate::config::DatabaseUrl>,
}
