//! Replica mode (docs/scaling.md): several servers on one PostgreSQL
//! database, each session served by the one replica holding its lease.
//!
//! This component owns what the engine needs to route: which sessions this
//! replica has claimed, and the event `seq` lane it writes in. Leases are
//! taken through the store ([`crate::StoreRead::ClaimLease`], answered by the
//! PostgreSQL backend with the database's clock) and renewed by the driver;
//! a replica that cannot renew exits, so a session claimed here stays ours
//! for the life of the process and the set only grows.
//!
//! Event seqs stay globally unique without coordination per event: replica
//! `slot` of `lanes` only assigns seqs `≡ slot (mod lanes)`, and a claim
//! moves the counter past the session's last seq so that a session's log
//! stays ordered when it changes owner.

use std::collections::BTreeSet;

use proto::http::Request;

use crate::store::StoreWrite;
use crate::ConnId;

/// Request header a replica adds when it forwards a request: the owner
/// never forwards such a request again (no loops while a lease moves).
pub const FORWARDED_HEADER: &str = "bae-forwarded";

/// The fixed part of replica mode, chosen by the driver at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaSettings {
    /// This replica's seq lane, `0..lanes`.
    pub slot: u64,
    /// Number of lanes (the most replicas one database serves at once).
    pub lanes: u64,
}

/// A request handed to the session's owner: the driver connects to `to`,
/// writes `request`, relays the response bytes as they arrive and closes
/// the client connection when the owner closes (the request asks for
/// `Connection: close`). The engine has forgotten `conn` by then.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward {
    pub conn: ConnId,
    /// `host:port` of the owner's client listener.
    pub to: String,
    /// The request re-encoded for the owner.
    pub request: Vec<u8>,
    /// Sent to the client instead when the owner cannot be reached or
    /// closes before any response byte (a `503` problem).
    pub unreachable: Vec<u8>,
}

/// What a commit batch of a replica must prove inside its own transaction
/// before anything of it is stored (docs/scaling.md, "Fencing"): that this
/// replica still holds its seq lane and the lease of every session in
/// `sessions`, by the fencing token the database holds for them, not by
/// what this process remembers. The store rolls the batch back, and the
/// process exits, when either was lost (a replica that slept through its
/// lease and woke up). Computed from the batch by [`Fence::of`] when the
/// pipeline seals it (`crate::pipeline::Pipeline::fenced`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    /// The sessions the batch appends to or changes, sorted, each once.
    pub sessions: Vec<String>,
}

impl Fence {
    /// The fence of `batch`: every session whose log, state or tools it
    /// writes (a session it creates included: its first event is in the
    /// batch, and [`StoreWrite::LeaseNewSession`] takes its lease first).
    pub fn of(batch: &[StoreWrite]) -> Fence {
        let mut sessions: Vec<&str> = batch
            .iter()
            .filter_map(|w| match w {
                StoreWrite::InsertEvent(e) => Some(e.session_id.as_str()),
                StoreWrite::SetSessionState { id, .. } | StoreWrite::SetSessionTools { id, .. } => {
                    Some(id.as_str())
                }
                StoreWrite::LeaseNewSession { session_id } => Some(session_id.as_str()),
                _ => None,
            })
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        Fence {
            sessions: sessions.into_iter().map(String::from).collect(),
        }
    }
}

/// What a lease claim was made for.
pub enum ClaimFor {
    /// A client request that runs once the session's owner is known.
    Request { conn: ConnId, req: Box<Request> },
    /// A revocation cascade that may have to close the session; `by` is
    /// the revoked client key.
    Cascade { by: String },
}

/// See the module docs.
#[derive(Debug)]
pub struct Replicas {
    settings: ReplicaSettings,
    owned: BTreeSet<String>,
}

impl Replicas {
    pub fn new(settings: ReplicaSettings) -> Self {
        Replicas {
            settings: ReplicaSettings {
                lanes: settings.lanes.max(1),
                slot: settings.slot % settings.lanes.max(1),
            },
            owned: BTreeSet::new(),
        }
    }

    pub fn owns(&self, session_id: &str) -> bool {
        self.owned.contains(session_id)
    }

    /// The lease of `session_id` is ours from now on.
    pub fn adopt(&mut self, session_id: &str) {
        self.owned.insert(session_id.to_string());
    }

    /// Distance between two seqs this replica assigns.
    pub fn step(&self) -> u64 {
        self.settings.lanes
    }

    /// The smallest seq of our lane that is `>= at_least` (and `>= 1`).
    pub fn align(&self, at_least: u64) -> u64 {
        let lanes = self.settings.lanes;
        let at_least = at_least.max(1);
        let base = at_least - at_least % lanes + self.settings.slot;
        if base >= at_least {
            base
        } else {
            base.saturating_add(lanes)
        }
    }
}

/// Headers that describe one connection, not the request (RFC 9110
/// §7.6.1): never passed on. `content-length` and `transfer-encoding` are
/// replaced because the body is sent de-framed.
fn hop_by_hop(name: &str, listed: &[String]) -> bool {
    const HOP: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "expect",
        FORWARDED_HEADER,
    ];
    let lower = name.to_ascii_lowercase();
    HOP.contains(&lower.as_str()) || listed.contains(&lower)
}

/// `req` as the owner receives it: the same method, target, headers and
/// body; hop-by-hop headers (and those `Connection` names) dropped;
/// `Content-Length`, `Connection: close` and [`FORWARDED_HEADER`] added.
pub fn forward_request(req: &Request, via: &str) -> Vec<u8> {
    let listed: Vec<String> = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| {
            let v = String::from_utf8_lossy(v).to_ascii_lowercase();
            v.split(',')
                .map(|t| t.trim().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::with_capacity(256 + req.body.len());
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in req.headers.iter() {
        if hop_by_hop(name, &listed) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    let tail = format!(
        "{FORWARDED_HEADER}: {via}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        req.body.len()
    );
    out.extend_from_slice(tail.as_bytes());
    out.extend_from_slice(&req.body);
    out
}

/// The `503` a client gets while a session cannot be served here: a
/// problem body of type `replica_unavailable`, `Retry-After: 1`.
pub fn unavailable(detail: &str, close: bool) -> Vec<u8> {
    let p = proto::wire::problem::Problem {
        type_: "replica_unavailable".into(),
        title: "Service Unavailable".into(),
        status: 503,
        detail: detail.into(),
    };
    let body = p.to_json();
    proto::http::encode_response(
        503,
        Some("application/json"),
        &[("retry-after", "1")],
        &body,
        close,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(slot: u64, lanes: u64) -> Replicas {
        Replicas::new(ReplicaSettings { slot, lanes })
    }

    #[test]
    fn seqs_stay_in_their_lane_and_past_the_bound() {
        let r = lanes(3, 8);
        assert_eq!(r.align(1), 3);
        assert_eq!(r.align(3), 3);
        assert_eq!(r.align(4), 11);
        assert_eq!(r.align(11), 11);
        assert_eq!(r.align(12), 19);
        let zero = lanes(0, 8);
        assert_eq!(zero.align(0), 8, "seq 0 means none");
        assert_eq!(zero.align(9), 16);
        let one = lanes(0, 1);
        assert_eq!(one.align(5), 5);
        // Two lanes never meet.
        let (a, b) = (lanes(1, 4), lanes(2, 4));
        let sa: Vec<u64> = (0..50).map(|i| a.align(1) + i * a.step()).collect();
        assert!((0..50).all(|i| !sa.contains(&(b.align(1) + i * b.step()))));
    }

    #[test]
    fn forwarded_requests_drop_hop_by_hop_headers() {
        let raw = b"POST /api/v1/sessions/s/rpc?x=1 HTTP/1.1\r\nHost: lb\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer k\r\nbae-forwarded: evil\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        let mut dec = proto::http::RequestDecoder::new(Default::default());
        dec.feed(raw);
        let req = match dec.poll() {
            Ok(Some(proto::http::Decoded::Request(r))) => r,
            other => panic!("{other:?}"),
        };
        let out = String::from_utf8(forward_request(&req, "r1")).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "abc");
        assert!(
            head.starts_with("POST /api/v1/sessions/s/rpc?x=1 HTTP/1.1\r\n"),
            "{head}"
        );
        let lower = head.to_ascii_lowercase();
        for gone in ["keep-alive", "x-hop", "transfer-encoding", "evil"] {
            assert!(!lower.contains(gone), "{gone} in {head}");
        }
        for kept in [
            "host: lb",
            "authorization: bearer k",
            "content-length: 3",
            "connection: close",
            "bae-forwarded: r1",
        ] {
            assert!(lower.contains(kept), "{kept} missing in {head}");
        }
    }

    #[test]
    fn a_fence_names_every_session_a_batch_writes_once_and_sorted() {
        let event = |sid: &str| {
            StoreWrite::InsertEvent(crate::store::EventRow {
                seq: 1,
                id: format!("e_{sid}"),
                session_id: sid.into(),
                client_key_id: None,
                event_type: "x".into(),
                payload: "{}".into(),
                created_at: "t".into(),
            })
        };
        let batch = vec![
            event("s_b"),
            StoreWrite::TouchKey {
                id: "k".into(),
                at: "t".into(),
            },
            event("s_a"),
            event("s_b"),
            StoreWrite::SetSessionState {
                id: "s_c".into(),
                state: crate::store::SessionState::Closed,
                closed_at: None,
            },
            StoreWrite::LeaseNewSession {
                session_id: "s_d".into(),
            },
        ];
        assert_eq!(Fence::of(&batch).sessions, ["s_a", "s_b", "s_c", "s_d"]);
        let keys_only = [StoreWrite::RevokeKey {
            id: "k".into(),
            at: "t".into(),
        }];
        assert!(Fence::of(&keys_only).sessions.is_empty());
    }

    #[test]
    fn the_unavailable_answer_is_a_503_problem() {
        let bytes = unavailable("owner unreachable", true);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
        assert!(text.to_ascii_lowercase().contains("retry-after: 1"));
        assert!(text.contains("\"type\":\"replica_unavailable\""), "{text}");
    }
}
