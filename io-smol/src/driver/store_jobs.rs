//! The store thread's loop, shared by every runtime: jobs from the
//! pipeline in FIFO order against one database connection, answers back
//! through a callback.

use std::time::Instant;

use engine::pipeline::Job;
use engine::store::{ReadId, ReadResult, StoreRead, StoreWrite};

use crate::store::Backend;
use engine::driver::StoreDone;

/// Starts the store thread ([`serve_store_jobs`]).
pub fn spawn_store_thread(
    store: Backend,
    next: impl FnMut() -> Option<Vec<Job>> + Send + 'static,
    done: impl FnMut(StoreDone) -> bool + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("bae-store".into())
        .spawn(move || {
            lower_priority();
            let mut done = done;
            serve_store_jobs(store, next, move |d| {
                let listening = done(d);
                yield_to_driver();
                listening
            })
        })
}

/// Called after each answer handed to the driver thread. The answer woke
/// that thread, often onto this thread's CPU when the box is busy, and the
/// kernel does not reliably preempt this thread for it (nice or not, even
/// `SCHED_IDLE`): the driver thread, and the liveness probe behind it,
/// waited 1–3 ms while this one rendered the next pages of a run of reads
/// (`perf sched`, docs/performance.md "The liveness probe"). Yielding hands
/// the CPU over at once; with nothing else runnable here it returns at once.
fn yield_to_driver() {
    std::thread::yield_now();
}

/// How much nicer than the process the store thread runs: under CPU
/// contention the driver thread gets the larger share. An operator can
/// still renice the thread (`bae-store`).
pub const STORE_NICE: i32 = 5;

/// Linux: `setpriority` on the calling thread alone.
#[cfg(target_os = "linux")]
fn lower_priority() {
    // `None`: this thread only, on Linux. Capped at 19, the weakest.
    let nice = rustix::process::getpriority_process(None).unwrap_or(0);
    if let Err(e) = rustix::process::setpriority_process(None, (nice + STORE_NICE).min(19)) {
        tracing::debug!(error = %e, "store thread priority unchanged");
    }
}

/// Elsewhere `setpriority` would renice the whole process: left alone.
#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

/// The store thread of every runtime: the database connection (SQLite:
/// with cached statements), jobs in FIFO order, until `next` has no more
/// or `done` reports that nobody listens. A failed commit, or a lost
/// database connection, exits the process (crash-only).
pub fn serve_store_jobs(
    mut store: Backend,
    mut next: impl FnMut() -> Option<Vec<Job>>,
    mut done: impl FnMut(StoreDone) -> bool,
) {
    let mut conn = store.worker();
    let mut stats = engine::metrics::RuntimeStats::default();
    while let Some(batch) = next() {
        let mut jobs = batch.into_iter().peekable();
        while let Some(job) = jobs.next() {
            match job {
                Job::Commit {
                    batch,
                    writes,
                    fence,
                } => {
                    let started = Instant::now();
                    let result = conn.commit_fenced(&writes, fence.as_ref());
                    stats.committed(writes.len(), started.elapsed().as_micros() as u64);
                    if let Err(e) = result {
                        tracing::error!(
                            error = %e,
                            writes = writes.len(),
                            "store commit failed; exiting (crash-only: nothing of this batch \
                             was revealed, restart rebuilds state from the database)"
                        );
                        std::process::exit(1);
                    }
                    if tracing::enabled!(tracing::Level::TRACE) {
                        trace_events(&writes);
                    }
                    if !done(StoreDone::Committed(batch)) {
                        return;
                    }
                }
                Job::Activity => match conn.activity() {
                    Ok(a) => a.log(),
                    Err(e) => tracing::warn!(error = %e, "activity summary query failed"),
                },
                Job::Read {
                    id,
                    read: StoreRead::Runtime,
                } => {
                    let figures = crate::proc_stats::read();
                    stats.rss_bytes = figures.rss_bytes;
                    stats.open_fds = figures.open_fds;
                    if !done(StoreDone::Read(id, Ok(ReadResult::Runtime(stats.clone())))) {
                        return;
                    }
                }
                Job::Read { id, read } => {
                    // This read and the plain reads right after it: no write
                    // lies between them, so they may be answered together.
                    let mut run = vec![(id, read)];
                    while let Some(Job::Read { read, .. }) = jobs.peek() {
                        if *read == StoreRead::Runtime {
                            break;
                        }
                        match jobs.next() {
                            Some(Job::Read { id, read }) => run.push((id, read)),
                            _ => unreachable!("peeked a read"),
                        }
                    }
                    let (ids, reads): (Vec<ReadId>, Vec<StoreRead>) = run.into_iter().unzip();
                    for (id, result) in ids.into_iter().zip(conn.read_many(reads)) {
                        let result = result.map_err(|e| {
                            if e.is_fatal() {
                                tracing::error!(
                                    error = %e,
                                    "store read failed; exiting (crash-only: restart \
                                     rebuilds state from the database)"
                                );
                                std::process::exit(1);
                            }
                            tracing::warn!(error = %e, "store read failed");
                            engine::ReadError::Store(e.to_string())
                        });
                        if !done(StoreDone::Read(id, result)) {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Spec 04 §6: every persisted event with its full payload at trace level.
fn trace_events(writes: &[StoreWrite]) {
    for w in writes {
        if let StoreWrite::InsertEvent(e) = w {
            tracing::trace!(
                seq = e.seq,
                id = %e.id,
                session = %e.session_id,
                event_type = %e.event_type,
                payload = %e.payload,
                "event persisted"
            );
        }
    }
}
