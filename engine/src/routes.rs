//! The routing table of everything in flight on behalf of a session: each
//! running turn (or compaction), each provider call and each MCP tool call
//! maps to the session it belongs to, so a completion that arrives by token
//! (`ProviderDone`, an MCP reply, a turn's store read) reaches that session
//! and nothing else. The tokens are issued here, in order.

use std::collections::BTreeMap;

use crate::calls::Calls;
use crate::ids::{IdMap, SessionId, TurnId};
use crate::mcp::CallToken;
use crate::CallId;

pub(crate) struct Routes {
    /// The session each running turn belongs to; the turn itself lives in
    /// the session's core.
    turns: BTreeMap<TurnId, SessionId>,
    next_turn: TurnId,
    /// Provider calls in flight and the watchdog deadlines of streamed ones.
    pub calls: Calls,
    next_call: CallId,
    /// MCP calls in flight, by the session and turn that made them.
    mcp: IdMap<CallToken, (SessionId, TurnId)>,
    next_mcp: CallToken,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            turns: BTreeMap::new(),
            next_turn: TurnId(1),
            calls: Calls::default(),
            next_call: CallId(1),
            mcp: IdMap::default(),
            next_mcp: CallToken(1),
        }
    }
}

impl Routes {
    /// A turn of `session` starts: its fresh id.
    pub fn start_turn(&mut self, session: SessionId) -> TurnId {
        let id = self.next_turn;
        self.next_turn += 1;
        self.turns.insert(id, session);
        id
    }

    pub fn end_turn(&mut self, turn: TurnId) {
        self.turns.remove(&turn);
    }

    /// The session whose turn `turn` is, while it runs.
    pub fn turn_session(&self, turn: TurnId) -> Option<&SessionId> {
        self.turns.get(&turn)
    }

    /// Every session with a running turn, in turn order.
    pub fn running_sessions(&self) -> impl Iterator<Item = &SessionId> {
        self.turns.values()
    }

    /// A fresh provider call id (the call is routed by [`Calls::insert`]
    /// once it leaves).
    pub fn new_call(&mut self) -> CallId {
        let id = self.next_call;
        self.next_call += 1;
        id
    }

    /// An MCP call of `session`'s turn `turn` leaves: its token.
    pub fn start_mcp_call(&mut self, session: SessionId, turn: TurnId) -> CallToken {
        let token = self.next_mcp;
        self.next_mcp += 1;
        self.mcp.insert(token, (session, turn));
        token
    }

    /// The MCP call is answered or abandoned: whose it was.
    pub fn end_mcp_call(&mut self, token: CallToken) -> Option<(SessionId, TurnId)> {
        self.mcp.remove(&token)
    }

    /// Turn `turn` was cancelled: its MCP calls leave, in token order.
    pub fn end_mcp_calls_of(&mut self, turn: TurnId) -> Vec<CallToken> {
        let mut tokens: Vec<CallToken> = (self.mcp.iter())
            .filter(|(_, (_, t))| *t == turn)
            .map(|(token, _)| *token)
            .collect();
        tokens.sort();
        for token in &tokens {
            self.mcp.remove(token);
        }
        tokens
    }

    /// `session`'s turn stopped: its MCP calls route nowhere any more.
    pub fn forget_mcp_calls(&mut self, session: &str) {
        self.mcp.retain(|_, (s, _)| s.as_str() != session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId::new(s)
    }

    #[test]
    fn tokens_are_issued_in_order_and_route_to_their_session() {
        let mut r = Routes::default();
        let (t1, t2) = (r.start_turn(sid("a")), r.start_turn(sid("b")));
        assert!(t1 < t2);
        assert_eq!(r.turn_session(t1).map(|s| s.as_str()), Some("a"));
        let running: Vec<&str> = r.running_sessions().map(|s| s.as_str()).collect();
        assert_eq!(running, ["a", "b"]);
        r.end_turn(t1);
        assert!(r.turn_session(t1).is_none());
        let (c1, c2) = (r.new_call(), r.new_call());
        assert!(c1 < c2);
        let m = r.start_mcp_call(sid("b"), t2);
        assert_eq!(
            r.end_mcp_call(m).map(|(s, t)| (s.to_string(), t)),
            Some(("b".into(), t2))
        );
        assert!(
            r.end_mcp_call(m).is_none(),
            "an answered call routes nowhere"
        );
    }

    #[test]
    fn a_cancelled_turns_mcp_calls_leave_in_token_order_and_only_its_own() {
        let mut r = Routes::default();
        let (t1, t2) = (r.start_turn(sid("a")), r.start_turn(sid("b")));
        let mine: Vec<CallToken> = (0..5).map(|_| r.start_mcp_call(sid("a"), t1)).collect();
        let other = r.start_mcp_call(sid("b"), t2);
        assert_eq!(r.end_mcp_calls_of(t1), mine);
        assert!(r.end_mcp_calls_of(t1).is_empty());
        r.forget_mcp_calls("a");
        assert!(
            r.end_mcp_call(other).is_some(),
            "another session's call stays"
        );
        let again = r.start_mcp_call(sid("a"), t1);
        r.forget_mcp_calls("a");
        assert!(r.end_mcp_call(again).is_none());
    }
}
