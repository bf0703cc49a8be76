//! How a driver may order one burst of inputs it has already received.
//!
//! The engine handles inputs one at a time, so a `/healthz` probe that
//! arrives behind a few dozen other clients' requests waits for all of
//! them. Inputs of different connections are concurrent by nature (nothing
//! the engine promises depends on their order), so a driver may hand a
//! probe's bytes to the engine first, as long as every connection's own
//! inputs keep their order. [`probes_first`] does that reordering.

use crate::ConnId;

/// Request lines the engine answers from no stored state.
const PROBES: [&[u8]; 2] = [b"GET /healthz", b"GET /api/v1/meta"];

/// Whether `bytes` start a probe request (`/healthz`, `/api/v1/meta`).
pub fn is_probe(bytes: &[u8]) -> bool {
    PROBES
        .iter()
        .any(|p| bytes.starts_with(p) && matches!(bytes.get(p.len()), Some(b' ' | b'?')))
}

/// What [`probes_first`] needs to know of a driver's event.
pub enum Seen<'a> {
    /// Bytes received on a connection.
    Received(ConnId, &'a [u8]),
    /// Any other input of a connection (flushed, closed, accepted).
    Conn(ConnId),
    /// An input of no connection (store, provider, timer, signal).
    Other,
}

/// Moves the events that carry a probe to the front of `burst`, keeping
/// the order among them and among the rest. A probe moves only when no
/// earlier event of the burst belongs to its connection, so no
/// connection's inputs are ever reordered.
pub fn probes_first<E>(burst: &mut Vec<E>, seen: impl Fn(&E) -> Seen<'_>) {
    let conn_of = |s: &Seen<'_>| match s {
        Seen::Received(c, _) | Seen::Conn(c) => Some(*c),
        Seen::Other => None,
    };
    let moves: Vec<bool> = (burst.iter().enumerate())
        .map(|(i, e)| match seen(e) {
            Seen::Received(conn, bytes) if is_probe(bytes) => {
                (burst.iter().take(i)).all(|earlier| conn_of(&seen(earlier)) != Some(conn))
            }
            _ => false,
        })
        .collect();
    if !moves.contains(&true) {
        return;
    }
    let mut probes = Vec::new();
    let mut rest = Vec::with_capacity(burst.len());
    for (e, probe) in burst.drain(..).zip(moves) {
        if probe {
            probes.push(e);
        } else {
            rest.push(e);
        }
    }
    probes.append(&mut rest);
    *burst = probes;
}

#[cfg(test)]
mod tests {
    use super::*;

    enum Ev {
        Bytes(u64, &'static [u8]),
        Close(u64),
        Store,
    }

    fn seen(e: &Ev) -> Seen<'_> {
        match e {
            Ev::Bytes(c, b) => Seen::Received(ConnId(*c), b),
            Ev::Close(c) => Seen::Conn(ConnId(*c)),
            Ev::Store => Seen::Other,
        }
    }

    fn order(burst: &[Ev]) -> Vec<String> {
        burst
            .iter()
            .map(|e| match e {
                Ev::Bytes(c, b) => format!("{c}:{}", String::from_utf8_lossy(&b[..5.min(b.len())])),
                Ev::Close(c) => format!("{c}:close"),
                Ev::Store => "store".into(),
            })
            .collect()
    }

    #[test]
    fn probes_move_ahead_of_other_connections_only() {
        let mut burst = vec![
            Ev::Bytes(1, b"POST /api/v1/sessions HTTP/1.1\r\n"),
            Ev::Store,
            Ev::Bytes(2, b"GET /healthz HTTP/1.1\r\n\r\n"),
            // Behind its own connection's earlier input: stays.
            Ev::Close(3),
            Ev::Bytes(3, b"GET /healthz HTTP/1.1\r\n\r\n"),
            Ev::Bytes(4, b"GET /api/v1/meta?x HTTP/1.1\r\n\r\n"),
            Ev::Bytes(5, b"GET /healthzz HTTP/1.1\r\n\r\n"),
        ];
        probes_first(&mut burst, seen);
        assert_eq!(
            order(&burst),
            ["2:GET /", "4:GET /", "1:POST ", "store", "3:close", "3:GET /", "5:GET /"]
        );
    }

    #[test]
    fn a_burst_without_probes_is_left_alone() {
        let mut burst = vec![Ev::Store, Ev::Bytes(1, b"GET /api/v1/sessions/x/events")];
        probes_first(&mut burst, seen);
        assert_eq!(order(&burst), ["store", "1:GET /"]);
        assert!(!is_probe(b"GET /healthz"), "needs the rest of the line");
        assert!(is_probe(b"GET /healthz HTTP/1.1"));
    }
}
