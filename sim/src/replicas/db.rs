//! The simulated PostgreSQL of replica mode: the shared rows (a
//! [`MemStore`]), the lease and lane tables with their fencing tokens, and
//! the database's own clock (virtual time), with the semantics of
//! `io-smol/src/store/pg/replica.rs`: a lane or lease is taken when it is
//! free, expired or already ours; a commit first checks its fence (when
//! the job carries one); renewals extend only unexpired rows with our
//! token.
//!
//! It is also the oracle of the replica invariants: every batch that
//! reaches it is judged against the lease and lane tables at that
//! database instant, whether or not the batch carried a fence, so a
//! replica that skipped its fence is caught writing where it must not.

use std::collections::BTreeMap;

use engine::mem_store::MemStore;
use engine::replicas::Fence;
use engine::store::{Lease, ReadResult, StoreRead, StoreWrite};

use crate::check::Violation;

/// A session's lease or a lane: who holds it and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub token: u64,
    /// Replica index (its advertised address is `r<index>`).
    pub replica: usize,
    pub expires: u64,
}

/// Invariant names of the replica simulation.
pub const INV_SINGLE_WRITER: &str = "inv_replica_single_session_writer";
pub const INV_LANE_OWNER: &str = "inv_replica_single_lane_writer";
pub const INV_SEQ_UNIQUE: &str = "inv_replica_seq_unique";
pub const INV_SEQ_ORDER: &str = "inv_replica_seq_ordered";
pub const INV_ACKED_DURABLE: &str = "inv_replica_acked_durable";

/// Why a commit or a claim did not happen (the writer exits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Its fence failed: nothing was written.
    Fenced(String),
    /// A primary-key violation (a seq already stored): nothing written.
    Duplicate(u64),
}

#[derive(Debug, Default)]
pub struct SimDb {
    pub store: MemStore,
    pub leases: BTreeMap<String, Held>,
    pub lanes: BTreeMap<u64, Held>,
    pub lanes_total: u64,
    pub violations: Vec<Violation>,
    /// The largest seq stored per session.
    last_seq: BTreeMap<String, u64>,
    /// Events committed, for the report.
    pub committed_events: u64,
}

impl SimDb {
    pub fn new(store: MemStore, lanes_total: u64) -> SimDb {
        SimDb {
            store,
            lanes_total,
            ..SimDb::default()
        }
    }

    fn fail(&mut self, invariant: &'static str, now: u64, detail: String) {
        self.violations.push(Violation {
            invariant,
            step: 0,
            time_ms: now,
            detail,
        });
    }

    /// Whether `token` holds its lane, unexpired at `now`.
    fn lane_held(&self, token: u64, lane: u64, now: u64) -> bool {
        self.lanes
            .get(&lane)
            .is_some_and(|h| h.token == token && h.expires > now)
    }

    /// The first lane free or expired at `now`, taken for `token`.
    pub fn claim_lane(&mut self, token: u64, replica: usize, lease: u64, now: u64) -> Option<u64> {
        let lane =
            (0..self.lanes_total).find(|l| self.lanes.get(l).is_none_or(|h| h.expires <= now))?;
        let held = Held {
            token,
            replica,
            expires: now + lease,
        };
        self.lanes.insert(lane, held);
        Some(lane)
    }

    /// One renewal transaction: `false` when the lane no longer carries
    /// `token` or has expired (nothing is renewed then).
    pub fn renew(&mut self, token: u64, lane: u64, lease: u64, now: u64) -> bool {
        if !self.lane_held(token, lane, now) {
            return false;
        }
        for h in self.lanes.values_mut().chain(self.leases.values_mut()) {
            if h.token == token && h.expires > now {
                h.expires = now + lease;
            }
        }
        true
    }

    /// A graceful stop gives everything of `token` back.
    pub fn release(&mut self, token: u64) {
        self.leases.retain(|_, h| h.token != token);
        self.lanes.retain(|_, h| h.token != token);
    }

    /// Answers a read of replica `replica` (`token`, `lane`) at `now`;
    /// `Err` when a lease claim finds the lane lost (the replica exits).
    pub fn read(
        &mut self,
        read: &StoreRead,
        (token, replica, lane): (u64, usize, u64),
        lease: u64,
        now: u64,
    ) -> Result<ReadResult, Refused> {
        let StoreRead::ClaimLease {
            session_id,
            drivers_since,
        } = read
        else {
            return Ok(self.store.read(read));
        };
        if !self.lane_held(token, lane, now) {
            return Err(Refused::Fenced(format!("lane {lane}")));
        }
        let lease_row = self.leases.get(session_id).copied();
        let lease = match self.store.claim(session_id, *drivers_since) {
            Lease::NoSession => Lease::NoSession,
            Lease::Elsewhere { addr } => Lease::Elsewhere { addr },
            Lease::Mine(claimed) => match lease_row {
                Some(h) if h.token != token && h.expires > now => Lease::Elsewhere {
                    addr: format!("r{}", h.replica),
                },
                _ => {
                    let held = Held {
                        token,
                        replica,
                        expires: now + lease,
                    };
                    self.leases.insert(session_id.clone(), held);
                    Lease::Mine(claimed)
                }
            },
        };
        Ok(ReadResult::Lease(lease))
    }

    /// One commit job of `token` (lane `lane`) at `now`: the fence first
    /// when the job carries one (as `replica::fence` does), then the
    /// oracle's judgement, then the writes.
    pub fn commit(
        &mut self,
        writes: &[StoreWrite],
        fence: Option<&Fence>,
        (token, replica, lane): (u64, usize, u64),
        lease: u64,
        now: u64,
    ) -> Result<(), Refused> {
        if fence.is_some() && !self.lane_held(token, lane, now) {
            return Err(Refused::Fenced(format!("lane {lane}")));
        }
        for w in writes {
            if let StoreWrite::LeaseNewSession { session_id } = w {
                let held = Held {
                    token,
                    replica,
                    expires: now + lease,
                };
                self.leases.entry(session_id.clone()).or_insert(held);
            }
        }
        if let Some(f) = fence {
            let lost = (f.sessions.iter()).find(|s| {
                !self
                    .leases
                    .get(*s)
                    .is_some_and(|h| h.token == token && h.expires > now)
            });
            if let Some(s) = lost {
                return Err(Refused::Fenced(format!("session {s}")));
            }
        }
        self.judge(writes, token, lane, now)?;
        for w in writes {
            self.store.apply(w);
            if let StoreWrite::InsertEvent(e) = w {
                self.committed_events += 1;
                let last = self.last_seq.entry(e.session_id.clone()).or_default();
                *last = (*last).max(e.seq);
            }
        }
        Ok(())
    }

    /// The oracle: a batch that writes must hold its lane and the lease of
    /// every session it writes, at this database instant; its seqs must be
    /// new (a duplicate fails the commit, as the primary key would), in its
    /// lane, and after everything its sessions hold.
    fn judge(
        &mut self,
        writes: &[StoreWrite],
        token: u64,
        lane: u64,
        now: u64,
    ) -> Result<(), Refused> {
        let events: Vec<&engine::store::EventRow> = writes
            .iter()
            .filter_map(|w| match w {
                StoreWrite::InsertEvent(e) => Some(e),
                _ => None,
            })
            .collect();
        if !events.is_empty() && !self.lane_held(token, lane, now) {
            let by = self.lanes.get(&lane).map(|h| h.token);
            let detail = format!(
                "process {token} wrote seqs of lane {lane} at {now} ms while the lane is {by:?} \
                 (expired or taken over)"
            );
            self.fail(INV_LANE_OWNER, now, detail);
        }
        for s in &Fence::of(writes).sessions {
            let holder = self.leases.get(s).copied();
            if !holder.is_some_and(|h| h.token == token && h.expires > now) {
                let detail = format!(
                    "process {token} wrote into session {s} at {now} ms while its lease is \
                     {holder:?}"
                );
                self.fail(INV_SINGLE_WRITER, now, detail);
            }
        }
        let mut last_of: BTreeMap<&str, u64> = BTreeMap::new();
        for e in &events {
            if self.store.events.contains_key(&e.seq) {
                let detail = format!("seq {} written twice (by process {token})", e.seq);
                self.fail(INV_SEQ_UNIQUE, now, detail);
                return Err(Refused::Duplicate(e.seq));
            }
            let sid = e.session_id.as_str();
            let last = match last_of.get(sid) {
                Some(l) => Some(*l),
                None => self.last_seq.get(sid).copied(),
            };
            last_of.insert(sid, e.seq);
            if last.is_some_and(|l| l >= e.seq) {
                let detail = format!(
                    "seq {} of session {} after seq {last:?} (by process {token})",
                    e.seq, e.session_id
                );
                self.fail(INV_SEQ_ORDER, now, detail);
            }
        }
        Ok(())
    }
}
