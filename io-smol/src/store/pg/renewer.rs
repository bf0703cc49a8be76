//! Replica mode: keeping this replica's lane and leases alive, and knowing
//! when they may no longer be (docs/scaling.md, "Fencing").
//!
//! The renewer thread extends the lane and every lease carrying our token
//! every `lease / 3`, on its own connection, in one transaction. It exits
//! the process (crash-only) when the lane no longer carries our token (a
//! takeover) or when no renewal has succeeded for 3/4 of the lease. The
//! time of the last success is a [`LeaseWatch`] that the store thread
//! checks before every commit and lease claim, and the driver thread
//! before it reveals anything (a send, a provider call, a relay): so a
//! process that wakes up from a freeze (`SIGSTOP`, a VM pause, a swap
//! storm) longer than that exits before it writes or reveals anything,
//! whichever of its threads runs first. The database's fence (see
//! `replica.rs`) holds even when this clock is wrong.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postgres::Client;

use super::pg_text;
use super::replica::{connect, ReplicaIdentity};
use crate::config::DatabaseUrl;
use crate::store::StoreError;

/// Milliseconds on a clock that never goes back and keeps counting while
/// the process is stopped or the machine suspended (`CLOCK_BOOTTIME` on
/// Linux; elsewhere the monotonic clock).
pub fn clock_ms() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let id = rustix::time::ClockId::Boottime;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let id = rustix::time::ClockId::Monotonic;
    let t = rustix::time::clock_gettime(id);
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1000)
        .saturating_add((t.tv_nsec.max(0) as u64) / 1_000_000)
}

/// When this replica's leases were last renewed, shared by the renewer,
/// the store thread and the driver (see the module docs).
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    inner: Arc<Watch>,
}

#[derive(Debug)]
struct Watch {
    /// [`clock_ms`] at which the last successful renewal (or the lane
    /// claim at start) was sent.
    last_ok: AtomicU64,
    /// 3/4 of the lease.
    limit_ms: u64,
}

impl LeaseWatch {
    /// A watch whose last success is now (the lane is about to be claimed).
    pub fn new(lease_ms: u64) -> LeaseWatch {
        LeaseWatch {
            inner: Arc::new(Watch {
                last_ok: AtomicU64::new(clock_ms()),
                limit_ms: lease_ms.saturating_mul(3) / 4,
            }),
        }
    }

    /// A renewal sent at `sent` (a [`clock_ms`] reading) succeeded.
    pub fn renewed(&self, sent: u64) {
        self.inner.last_ok.fetch_max(sent, Ordering::AcqRel);
    }

    /// `Some(ms since the last success)` once that is 3/4 of the lease or
    /// more: a lease of ours may have expired (and been taken) by now.
    pub fn stale(&self) -> Option<u64> {
        let since = clock_ms().saturating_sub(self.inner.last_ok.load(Ordering::Acquire));
        (since >= self.inner.limit_ms).then_some(since)
    }

    /// Exits the process (crash-only) when [`LeaseWatch::stale`]; `before`
    /// names what was about to happen.
    pub fn exit_if_stale(&self, before: &str) {
        if let Some(ms) = self.stale() {
            tracing::error!(
                since_renewal_ms = ms,
                before,
                "session leases could not be renewed in time; exiting (crash-only: another \
                 replica takes the sessions over once the leases expire)"
            );
            std::process::exit(1);
        }
    }
}

/// Extends the lane and every lease with our token, in one transaction:
/// `Ok(false)` when the lane no longer carries our token or has expired
/// (another replica took it, or may take it at any moment).
fn renew(c: &mut Client, me: &ReplicaIdentity, lane: i32) -> Result<bool, postgres::Error> {
    let mut tx = c.transaction()?;
    // The lane first, then the leases: the order of a fenced commit.
    let lane_rows = tx.execute(
        "UPDATE replica_lanes SET expires_at = now() + $3 * interval '1 millisecond' \
         WHERE lane = $1 AND token = $2 AND expires_at > clock_timestamp()",
        &[&lane, &me.token, &me.lease()],
    )?;
    if lane_rows == 0 {
        return Ok(false);
    }
    tx.execute(
        "UPDATE session_leases SET expires_at = now() + $2 * interval '1 millisecond' \
         WHERE token = $1 AND expires_at > clock_timestamp()",
        &[&me.token, &me.lease()],
    )?;
    tx.commit()?;
    Ok(true)
}

/// Starts the renewer thread (see the module docs) for `lane`.
pub fn start_renewer(
    url: DatabaseUrl,
    me: ReplicaIdentity,
    lane: u64,
    watch: LeaseWatch,
) -> std::io::Result<()> {
    let lease = Duration::from_millis(me.lease_ms.max(0) as u64);
    let lane = lane as i32;
    std::thread::Builder::new()
        .name("bae-lease".into())
        .spawn(move || {
            let mut client: Option<Client> = None;
            loop {
                // After a gap (this process was stopped or starved), renew
                // nothing: a lease may have been taken meanwhile.
                watch.exit_if_stale("renewing the leases");
                let sent = clock_ms();
                if client.as_ref().is_none_or(|c| c.is_closed()) {
                    client = connect(&url, "baesrv-lease").ok();
                }
                let renewed = client.as_mut().map(|c| renew(c, &me, lane));
                let ok = matches!(renewed, Some(Ok(true)));
                match renewed {
                    Some(Ok(true)) => watch.renewed(sent),
                    Some(Ok(false)) => {
                        tracing::error!(
                            lane,
                            "this replica's seq lane was taken over or expired; exiting \
                             (crash-only: fenced, it can no longer write)"
                        );
                        std::process::exit(1);
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %pg_text(&url, &e), "lease renewal failed");
                        client = None;
                    }
                    None => tracing::warn!("lease renewal: cannot connect to PostgreSQL"),
                }
                let pause = if ok { lease / 3 } else { lease / 10 };
                let spent = Duration::from_millis(clock_ms().saturating_sub(sent));
                std::thread::sleep(pause.saturating_sub(spent));
            }
        })
        .map(|_| ())
}

/// After a graceful stop: gives this replica's session leases and lane
/// back, so other replicas take its sessions at once (best effort: what is
/// not released expires). Only rows carrying our token: a newer process
/// with the same `BAE_REPLICA_ID` keeps what it took.
pub fn release(url: &DatabaseUrl, me: &ReplicaIdentity) {
    let released = connect(url, "baesrv-release").and_then(|mut c| {
        c.execute("DELETE FROM session_leases WHERE token = $1", &[&me.token])
            .and_then(|n| {
                c.execute("DELETE FROM replica_lanes WHERE token = $1", &[&me.token])
                    .map(|_| n)
            })
            .map_err(|e| StoreError::Postgres(pg_text(url, &e)))
    });
    match released {
        Ok(n) => tracing::info!(sessions = n, "session leases released"),
        Err(e) => tracing::warn!(error = %e, "session leases not released; they expire"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_goes_stale_past_three_quarters_of_the_lease_and_renewals_refresh_it() {
        let w = LeaseWatch::new(40);
        assert_eq!(w.stale(), None);
        std::thread::sleep(Duration::from_millis(35));
        assert!(w.stale().is_some_and(|ms| ms >= 30), "{:?}", w.stale());
        w.renewed(clock_ms());
        assert_eq!(w.stale(), None);
        // An older renewal reported late never moves the watch back.
        w.renewed(0);
        assert_eq!(w.stale(), None);
    }
}
