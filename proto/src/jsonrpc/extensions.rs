//! The opt-in extensions (docs/extensions.md) and their frames.

/// Opt-in protocol extensions (docs/extensions.md). A client names the
/// ones it wants in `session.registerDriver` (and `session.subscribe`)
/// params `{"extensions": [...]}`; nothing of them reaches a client that
/// did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// `session.cancelTurn`.
    TurnCancel,
    /// `session.queue` notifications for a queued request.
    TurnQueue,
    /// A `session.replay_complete` notification between replayed and live
    /// events of `session.subscribe`.
    ReplayComplete,
    /// A `session.subscribe` that is never dropped for lagging: it falls
    /// back to reading the store and returns to live delivery.
    SubscribeGapless,
    /// `session.steerTurn`.
    TurnSteer,
    /// `idempotency_key` on `session.sendMessage`.
    SendIdempotent,
    /// `session.delta` notifications while a provider reply streams.
    TurnDeltas,
}

impl Extension {
    pub const ALL: [Extension; 7] = [
        Extension::TurnCancel,
        Extension::TurnQueue,
        Extension::TurnSteer,
        Extension::SendIdempotent,
        Extension::SubscribeGapless,
        Extension::ReplayComplete,
        Extension::TurnDeltas,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Extension::TurnCancel => "turn.cancel",
            Extension::TurnQueue => "turn.queue",
            Extension::ReplayComplete => "subscribe.replay_complete",
            Extension::SubscribeGapless => "subscribe.gapless",
            Extension::TurnSteer => "turn.steer",
            Extension::SendIdempotent => "send.idempotent",
            Extension::TurnDeltas => "turn.deltas",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Extension::ALL.into_iter().find(|e| e.as_str() == s)
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`Extension`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extensions(u8);

impl Extensions {
    pub fn has(self, e: Extension) -> bool {
        self.0 & e.bit() != 0
    }

    pub fn with(self, e: Extension) -> Self {
        Extensions(self.0 | e.bit())
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: Extensions) -> Self {
        Extensions(self.0 | other.0)
    }

    /// The wire names, in [`Extension::ALL`] order.
    pub fn names(self) -> Vec<&'static str> {
        Extension::ALL
            .into_iter()
            .filter(|e| self.has(*e))
            .map(Extension::as_str)
            .collect()
    }
}

/// `{"jsonrpc":"2.0","method":"session.queue","params":{"position":p,"ahead":a}}\n`
/// (extension `turn.queue`; `position` is 1-based).
pub fn queue_frame(position: usize) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"session.queue\",\"params\":{{\"position\":{position},\"ahead\":{}}}}}\n",
        position.saturating_sub(1)
    )
}

/// `{"jsonrpc":"2.0","method":"session.replay_complete","params":{"last_event_id":…}}\n`
/// (extension `subscribe.replay_complete`).
pub fn replay_complete_frame(last_event_id: Option<&str>) -> String {
    let params = serde_json::json!({ "last_event_id": last_event_id });
    format!("{{\"jsonrpc\":\"2.0\",\"method\":\"session.replay_complete\",\"params\":{params}}}\n")
}

/// Why an attempt's deltas are to be thrown away (`session.delta_discard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardReason {
    /// The attempt failed; the fallback walk goes on.
    Failed,
    /// The turn was cancelled.
    Cancelled,
    /// This stream fell too far behind: it gets no more of the attempt's
    /// deltas (the final events carry the whole reply).
    Lagged,
}

impl DiscardReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DiscardReason::Failed => "failed",
            DiscardReason::Cancelled => "cancelled",
            DiscardReason::Lagged => "lagged",
        }
    }
}

/// Which attempt of which turn a delta belongs to.
#[derive(Debug, Clone, Copy)]
pub struct DeltaOf<'a> {
    /// Event id of the turn's `client.message.send`.
    pub turn: &'a str,
    /// Event id of the attempt's `provider.request`.
    pub request: &'a str,
    /// The attempt's position in the provider chain.
    pub attempt: usize,
}

impl DeltaOf<'_> {
    fn push_params(&self, out: &mut String) {
        out.push_str("{\"turn\":");
        crate::wire::json::push_str(out, self.turn);
        out.push_str(",\"request\":");
        crate::wire::json::push_str(out, self.request);
        out.push_str(",\"attempt\":");
        out.push_str(&self.attempt.to_string());
    }
}

/// `{"jsonrpc":"2.0","method":"session.delta","params":{"turn","request","attempt","index","kind","text"}}\n`
/// (extension `turn.deltas`).
pub fn delta_frame(of: DeltaOf<'_>, index: usize, kind: &str, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 180);
    out.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"session.delta\",\"params\":");
    of.push_params(&mut out);
    out.push_str(",\"index\":");
    out.push_str(&index.to_string());
    out.push_str(",\"kind\":");
    crate::wire::json::push_str(&mut out, kind);
    out.push_str(",\"text\":");
    crate::wire::json::push_str(&mut out, text);
    out.push_str("}}\n");
    out
}

/// `{"jsonrpc":"2.0","method":"session.delta_discard","params":{"turn","request","attempt","reason"}}\n`
/// (extension `turn.deltas`).
pub fn delta_discard_frame(of: DeltaOf<'_>, reason: DiscardReason) -> String {
    let mut out = String::with_capacity(200);
    out.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"session.delta_discard\",\"params\":");
    of.push_params(&mut out);
    out.push_str(",\"reason\":");
    crate::wire::json::push_str(&mut out, reason.as_str());
    out.push_str("}}\n");
    out
}

#[cfg(test)]
mod extension_tests {
    use super::*;

    #[test]
    fn extensions_parse_ignore_unknown_and_reject_bad_types() {
        let p = serde_json::json!({"extensions": ["turn.cancel", "future.thing", "turn.queue"]});
        let set = Extensions::from_params(&p).unwrap().unwrap();
        assert_eq!(set.names(), ["turn.cancel", "turn.queue"]);
        assert_eq!(
            Extensions::from_params(&serde_json::json!({})).unwrap(),
            None
        );
        assert!(
            Extensions::from_params(&serde_json::json!({"extensions": "turn.cancel"})).is_err()
        );
        assert!(Extensions::from_params(&serde_json::json!({"extensions": [1]})).is_err());
        let of = DeltaOf {
            turn: "evt_t",
            request: "evt_r",
            attempt: 1,
        };
        let frame: serde_json::Value =
            serde_json::from_str(&delta_frame(of, 2, "text", "a\"b\n")).unwrap();
        assert_eq!(
            frame,
            serde_json::json!({"jsonrpc": "2.0", "method": "session.delta", "params":
                {"turn": "evt_t", "request": "evt_r", "attempt": 1, "index": 2, "kind": "text", "text": "a\"b\n"}})
        );
        let frame: serde_json::Value =
            serde_json::from_str(&delta_discard_frame(of, DiscardReason::Lagged)).unwrap();
        assert_eq!(frame["params"]["reason"], "lagged");
        assert_eq!(
            queue_frame(3),
            "{\"jsonrpc\":\"2.0\",\"method\":\"session.queue\",\"params\":{\"position\":3,\"ahead\":2}}\n"
        );
    }
}
