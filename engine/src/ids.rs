//! Numeric handles that cross module or crate boundaries, each its own
//! type so a connection can never be passed where a provider call or a
//! store read is meant. Drivers choose connection ids; the engine chooses
//! the rest. None is ever reused within a process.

/// A hash map keyed by what this server mints (ids, connection, call and
/// read numbers). foldhash instead of std's SipHash: these maps are looked
/// up several times per request, and their keys are not chosen by clients
/// (maps keyed by client text, such as tool declarations, keep SipHash).
/// Seeded per process like std's, so iteration order is never relied on.
pub type IdMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The set form of [`IdMap`].
pub type IdSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

macro_rules! handle {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
            pub struct $name(pub u64);

            /// Counters that hand out ids: `let id = next; next += 1;`.
            impl std::ops::AddAssign<u64> for $name {
                fn add_assign(&mut self, n: u64) {
                    self.0 += n;
                }
            }

            impl std::fmt::Display for $name {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    self.0.fmt(f)
                }
            }
        )*
    };
}

/// Things in flight by the token their answer will carry (store reads
/// now): hands out the next token and gives the entry back once when the
/// answer arrives. An answer whose entry was forgotten finds nothing.
#[derive(Debug)]
pub struct InFlight<K, V> {
    next: K,
    pending: IdMap<K, V>,
}

impl<K, V> InFlight<K, V>
where
    K: Copy + Eq + std::hash::Hash + std::ops::AddAssign<u64>,
{
    /// An empty table whose first token is `first`.
    pub fn starting_at(first: K) -> Self {
        InFlight {
            next: first,
            pending: IdMap::default(),
        }
    }

    /// Registers `entry`; the token its answer carries.
    pub fn issue(&mut self, entry: V) -> K {
        let token = self.next;
        self.next += 1;
        self.pending.insert(token, entry);
        token
    }

    /// The entry of `token`, removed (`None`: forgotten or unknown).
    pub fn take(&mut self, token: K) -> Option<V> {
        self.pending.remove(&token)
    }

    /// Forgets the entries `keep` refuses (their answers will find nothing).
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.pending.retain(|_, v| keep(v));
    }
}

handle! {
    /// One accepted TCP connection (chosen by the driver).
    ConnId;
    /// One outstanding provider HTTP call.
    CallId;
    /// One store read, answered by `Input::ReadDone`.
    ReadId;
    /// One MCP transport opened by `Output::Mcp`.
    McpConnId;
    /// One MCP `tools/call` a turn waits on.
    CallToken;
    /// One container engine command.
    OpId;
    /// One turn (chat or compaction) holding a session's gate.
    TurnId;
}

macro_rules! shared_id {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            ///
            /// The id text is shared: cloning never allocates, and every
            /// index of the catalogue holding the id holds one allocation.
            /// It dereferences to `str` and looks up maps keyed by it.
            #[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
            pub struct $name(std::sync::Arc<str>);

            impl serde::Serialize for $name {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_str(&self.0)
                }
            }

            impl $name {
                pub fn new(id: &str) -> Self {
                    $name(std::sync::Arc::from(id))
                }

                /// An id whose text is already held elsewhere.
                pub fn from_shared(id: std::sync::Arc<str>) -> Self {
                    $name(id)
                }

                /// The id's text, shared.
                pub fn shared(&self) -> std::sync::Arc<str> {
                    self.0.clone()
                }

                pub fn as_str(&self) -> &str {
                    &self.0
                }
            }

            impl std::ops::Deref for $name {
                type Target = str;
                fn deref(&self) -> &str {
                    &self.0
                }
            }

            impl std::borrow::Borrow<str> for $name {
                fn borrow(&self) -> &str {
                    &self.0
                }
            }

            impl AsRef<str> for $name {
                fn as_ref(&self) -> &str {
                    &self.0
                }
            }

            impl std::fmt::Display for $name {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(&self.0)
                }
            }

            impl std::fmt::Debug for $name {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    std::fmt::Debug::fmt(&*self.0, f)
                }
            }

            impl From<&str> for $name {
                fn from(id: &str) -> Self {
                    $name::new(id)
                }
            }

            impl From<&String> for $name {
                fn from(id: &String) -> Self {
                    $name::new(id)
                }
            }

            impl From<String> for $name {
                fn from(id: String) -> Self {
                    $name(std::sync::Arc::from(id))
                }
            }

            impl PartialEq<str> for $name {
                fn eq(&self, other: &str) -> bool {
                    &*self.0 == other
                }
            }

            impl PartialEq<&str> for $name {
                fn eq(&self, other: &&str) -> bool {
                    &*self.0 == *other
                }
            }
        )*
    };
}

shared_id! {
    /// A session's id (`ses_…`).
    SessionId;
    /// A key row's id (`key_…`): a client, session or admin key.
    KeyId;
    /// A profile's id (`pro_…`).
    ProfileId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_tokens_are_fresh_and_each_answer_is_taken_once() {
        let mut reads: InFlight<ReadId, &str> = InFlight::starting_at(ReadId(1));
        let (a, b, c) = (reads.issue("a"), reads.issue("b"), reads.issue("c"));
        assert_eq!((a, b, c), (ReadId(1), ReadId(2), ReadId(3)));
        reads.retain(|v| *v != "b");
        assert_eq!(reads.take(b), None, "forgotten");
        assert_eq!(reads.take(a), Some("a"));
        assert_eq!(reads.take(a), None, "answered once");
        assert_eq!(reads.take(ReadId(9)), None, "never issued");
        assert_eq!(reads.issue("d"), ReadId(4));
    }
}
