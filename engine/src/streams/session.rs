//! The session's part of its streams (owned by its `Session`, see
//! `sessions/streams.rs`): defined here, beside the hub, so that the
//! services can publish to it without importing the sessions.

use std::collections::{BTreeMap, BTreeSet};

use super::Subscription;
use crate::ConnId;

/// Who gets a session's events: every stream opened on it and not yet
/// seen to end (the hub filters out any that ended since), and what each
/// subscription among them has delivered.
#[derive(Default)]
pub(crate) struct SessionStreams {
    conns: BTreeSet<ConnId>,
    pub(crate) subs: BTreeMap<ConnId, Subscription>,
}

/// The part an append publishes to (`None`: the session has no stream).
pub(crate) type Fanout<'a> = Option<&'a mut SessionStreams>;

impl SessionStreams {
    pub(crate) fn is_empty(&self) -> bool {
        self.conns.is_empty() && self.subs.is_empty()
    }

    /// A stream opened on the session (a previous one of its connection
    /// here, ended this input, leaves its subscription behind).
    pub(crate) fn opened(&mut self, conn: ConnId) {
        self.conns.insert(conn);
        self.subs.remove(&conn);
    }

    pub(crate) fn ended(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
        self.subs.remove(&conn);
    }

    /// The fan-out list, in connection order.
    pub(crate) fn conns(&self) -> &BTreeSet<ConnId> {
        &self.conns
    }
}
