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
}

impl Extension {
    pub const ALL: [Extension; 6] = [
        Extension::TurnCancel,
        Extension::TurnQueue,
        Extension::TurnSteer,
        Extension::SendIdempotent,
        Extension::SubscribeGapless,
        Extension::ReplayComplete,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Extension::TurnCancel => "turn.cancel",
            Extension::TurnQueue => "turn.queue",
            Extension::ReplayComplete => "subscribe.replay_complete",
            Extension::SubscribeGapless => "subscribe.gapless",
            Extension::TurnSteer => "turn.steer",
            Extension::SendIdempotent => "send.idempotent",
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
        assert_eq!(
            queue_frame(3),
            "{\"jsonrpc\":\"2.0\",\"method\":\"session.queue\",\"params\":{\"position\":3,\"ahead\":2}}\n"
        );
    }
}
