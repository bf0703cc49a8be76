//! The sessions' sandbox boxes: the table holds each [`SessionSandbox`] in
//! its session's entry and is where the [`crate::sandbox::SandboxHub`]
//! finds it ([`Boxes`]) when a driver reply or a deadline comes back.

use super::Sessions;
use crate::ids::SessionId;
use crate::sandbox::{Boxes, SessionSandbox};

impl Boxes for Sessions {
    fn sandbox(&mut self, session_id: &SessionId) -> Option<&mut SessionSandbox> {
        self.sandbox_mut(session_id)
    }
}

impl Sessions {
    /// `id`'s box (`None`: no sandbox was ever started, or it closed).
    pub(crate) fn sandbox(&self, id: &str) -> Option<&SessionSandbox> {
        self.table.get(id)?.sandbox.as_ref()
    }

    pub(crate) fn sandbox_mut(&mut self, id: &str) -> Option<&mut SessionSandbox> {
        self.table.get_mut(id)?.sandbox.as_mut()
    }

    /// `id`'s box, made on its first start.
    pub(crate) fn sandbox_or_new(&mut self, id: &SessionId) -> &mut SessionSandbox {
        (self.table.entry(id.clone()).or_default().sandbox)
            .get_or_insert_with(|| SessionSandbox::new(id.clone()))
    }

    /// Takes `id`'s box out (the session closes).
    pub(crate) fn take_sandbox(&mut self, id: &str) -> Option<SessionSandbox> {
        let b = self.table.get_mut(id)?.sandbox.take();
        self.prune(id);
        b
    }

    /// Remote sandboxes running (gauge `bae.sandboxes.live`).
    pub(crate) fn live_sandboxes(&self) -> usize {
        let boxes = self.table.values().filter_map(|s| s.sandbox.as_ref());
        boxes.filter(|b| b.handle().is_some()).count()
    }

    /// Remote subagents still running (gauge `bae.subagents.active`).
    pub(crate) fn active_subagents(&self) -> usize {
        let boxes = self.table.values().filter_map(|s| s.sandbox.as_ref());
        boxes.map(SessionSandbox::running_subagents).sum()
    }
}
