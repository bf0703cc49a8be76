//! The one value through which a simulator's planted bug reaches a
//! component. Production builds carry an empty value: no component reads
//! the configuration's planted bug on its own.

/// The fault (if any) planted in this engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    #[cfg(feature = "planted-bugs")]
    bug: Option<crate::planted::Bug>,
}

impl Faults {
    #[cfg(feature = "planted-bugs")]
    pub fn planted(bug: Option<crate::planted::Bug>) -> Self {
        Faults { bug }
    }

    /// Whether `bug` is planted.
    #[cfg(feature = "planted-bugs")]
    pub fn has(self, bug: crate::planted::Bug) -> bool {
        self.bug == Some(bug)
    }
}
