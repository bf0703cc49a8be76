//! Provider calls in flight: which session's turn made each, and when a
//! streamed one is next looked at by its watchdog (first-byte and idle
//! timeouts, judged by the session core that owns the attempt). The
//! deadlines are armed lazily: a check that finds the stream alive arms
//! the next one, so a chunk costs no timer update.

use std::collections::BTreeSet;

use crate::ids::{IdMap, SessionId};
use crate::{CallId, MonoMs};

#[derive(Debug, Default)]
pub struct Calls {
    routes: IdMap<CallId, Route>,
    /// Watchdog checks of streamed calls, earliest first.
    checks: BTreeSet<(MonoMs, CallId)>,
}

#[derive(Debug)]
struct Route {
    session: SessionId,
    check: Option<MonoMs>,
    /// A streamed call: an abort closes it, and the driver reports nothing
    /// more of it.
    streamed: bool,
}

impl Calls {
    /// A call of `session` left; a streamed one is first checked at `check`.
    pub fn insert(&mut self, call: CallId, session: SessionId, check: Option<MonoMs>) {
        if let Some(at) = check {
            self.checks.insert((at, call));
        }
        let streamed = check.is_some();
        let route = Route {
            session,
            check,
            streamed,
        };
        self.routes.insert(call, route);
    }

    /// The session whose turn made `call`.
    pub fn session(&self, call: CallId) -> Option<&SessionId> {
        self.routes.get(&call).map(|r| &r.session)
    }

    /// The call is over (answered, failed or abandoned).
    pub fn remove(&mut self, call: CallId) -> Option<SessionId> {
        let route = self.routes.remove(&call)?;
        if let Some(at) = route.check {
            self.checks.remove(&(at, call));
        }
        Some(route.session)
    }

    /// Every call of `session` leaves (its turn was cancelled or the
    /// session closed), in call order, each with whether it streams.
    pub fn remove_session(&mut self, session: &str) -> Vec<(CallId, bool)> {
        let mut calls: Vec<(CallId, bool)> = (self.routes.iter())
            .filter(|(_, r)| r.session.as_str() == session)
            .map(|(c, r)| (*c, r.streamed))
            .collect();
        calls.sort();
        for (c, _) in &calls {
            self.remove(*c);
        }
        calls
    }

    /// The earliest watchdog check.
    pub fn next_deadline(&self) -> Option<MonoMs> {
        self.checks.first().map(|(at, _)| *at)
    }

    /// The calls whose check is due at `now`, in deadline order; each is
    /// unarmed until [`Calls::rearm`].
    pub fn due(&mut self, now: MonoMs) -> Vec<CallId> {
        let mut due = Vec::new();
        while let Some(&(at, call)) = self.checks.first() {
            if at > now {
                break;
            }
            self.checks.pop_first();
            if let Some(r) = self.routes.get_mut(&call) {
                r.check = None;
            }
            due.push(call);
        }
        due
    }

    /// The next check of `call`, still in flight.
    pub fn rearm(&mut self, call: CallId, at: MonoMs) {
        let Some(r) = self.routes.get_mut(&call) else {
            return;
        };
        if let Some(old) = r.check.replace(at) {
            self.checks.remove(&(old, call));
        }
        self.checks.insert((at, call));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId::from(s)
    }

    #[test]
    fn checks_fire_in_order_and_leave_with_their_call() {
        let mut c = Calls::default();
        c.insert(CallId(1), sid("a"), Some(MonoMs(50)));
        c.insert(CallId(2), sid("b"), None);
        c.insert(CallId(3), sid("a"), Some(MonoMs(20)));
        assert_eq!(c.next_deadline(), Some(MonoMs(20)));
        assert_eq!(c.due(MonoMs(19)), vec![]);
        assert_eq!(c.due(MonoMs(50)), vec![CallId(3), CallId(1)]);
        assert_eq!(c.next_deadline(), None);
        c.rearm(CallId(1), MonoMs(90));
        c.rearm(CallId(1), MonoMs(70));
        assert_eq!(c.next_deadline(), Some(MonoMs(70)));
        let gone = c.remove_session("a");
        assert_eq!(gone, vec![(CallId(1), true), (CallId(3), true)]);
        assert_eq!(c.next_deadline(), None);
        assert_eq!(c.session(CallId(2)).map(|s| s.as_str()), Some("b"));
        c.rearm(CallId(9), MonoMs(1));
        assert_eq!(c.next_deadline(), None, "an unknown call is not armed");
    }
}
