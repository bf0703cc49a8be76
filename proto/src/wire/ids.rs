//! Identifier and secret-key formats (spec 02 §2).
//!
//! Ids are `<prefix>` + 32 lowercase hex characters built from 16 bytes;
//! secrets are `<prefix>` + 48 lowercase hex characters built from 24 bytes
//! the caller draws from its CSPRNG.
//!
//! An id's 16 bytes are either all drawn from the CSPRNG
//! ([`IdOrder::Random`], spec 02 §2 as written) or begin with the creation
//! time ([`IdOrder::Time`], the default): 6 bytes of Unix milliseconds,
//! big-endian, then 10 bytes (80 bits) from the CSPRNG, the layout of a
//! UUIDv7. The format is the same either way. Time-ordered ids land at the
//! right edge of every B-tree that indexes them (the events' and sessions'
//! primary keys, the per-session event indexes, the session-key lookup), so
//! a commit dirties a few index pages instead of one random page per row.

/// Entity kinds that carry a generated id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// `ses_…`
    Session,
    /// `evt_…`
    Event,
    /// `key_…` (client, session and admin key rows alike)
    Key,
    /// `pro_…`
    Profile,
    /// `sba_…` (remote subagent tasks)
    Subagent,
}

impl IdKind {
    /// Every id kind.
    pub const ALL: [IdKind; 5] = [
        IdKind::Session,
        IdKind::Event,
        IdKind::Key,
        IdKind::Profile,
        IdKind::Subagent,
    ];

    /// The prefix including the trailing underscore, e.g. `"ses_"`.
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Session => "ses_",
            IdKind::Event => "evt_",
            IdKind::Key => "key_",
            IdKind::Profile => "pro_",
            IdKind::Subagent => "sba_",
        }
    }
}

/// Secret key kinds (plaintext formats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// `bae_` + 48 hex
    Client,
    /// `bae_ses_` + 48 hex
    Session,
    /// `bae_admin_` + 48 hex
    Admin,
}

impl SecretKind {
    /// Every secret kind.
    pub const ALL: [SecretKind; 3] = [SecretKind::Client, SecretKind::Session, SecretKind::Admin];

    /// The plaintext prefix, e.g. `"bae_ses_"`.
    pub const fn prefix(self) -> &'static str {
        match self {
            SecretKind::Client => "bae_",
            SecretKind::Session => "bae_ses_",
            SecretKind::Admin => "bae_admin_",
        }
    }

    /// The `keys.role` column value for this kind.
    pub const fn role(self) -> &'static str {
        match self {
            SecretKind::Client => "client",
            SecretKind::Session => "session",
            SecretKind::Admin => "admin",
        }
    }
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    super::hex::encode(bytes)
}

/// How the 16 bytes of a generated id are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdOrder {
    /// 6 bytes of Unix milliseconds (big-endian), then 10 random bytes.
    #[default]
    Time,
    /// 16 random bytes.
    Random,
}

impl IdOrder {
    /// The id bytes for a creation at `unix_ms` from 16 CSPRNG bytes
    /// (`Time` keeps the last 10 of them).
    pub fn bytes(self, unix_ms: u64, mut random: [u8; 16]) -> [u8; 16] {
        if self == IdOrder::Time {
            let t = unix_ms.to_be_bytes();
            for (dst, src) in random.iter_mut().zip(t.iter().skip(2)) {
                *dst = *src;
            }
        }
        random
    }
}

/// `<prefix>` + 32 lowercase hex of `bytes`.
pub fn make_id(kind: IdKind, bytes: [u8; 16]) -> String {
    let mut out = String::with_capacity(4 + 32);
    out.push_str(kind.prefix());
    super::hex::push(&mut out, &bytes);
    out
}

/// Whether `s` is exactly `<prefix>` + 32 lowercase hex.
pub fn is_id(kind: IdKind, s: &str) -> bool {
    s.strip_prefix(kind.prefix())
        .is_some_and(|rest| super::hex::is_lower(rest, 32))
}

/// `<prefix>` + 48 lowercase hex of `bytes`.
pub fn make_secret(kind: SecretKind, bytes: [u8; 24]) -> String {
    let mut out = String::with_capacity(kind.prefix().len() + 48);
    out.push_str(kind.prefix());
    super::hex::push(&mut out, &bytes);
    out
}

/// Whether `s` is exactly `<prefix>` + 48 lowercase hex for `kind`.
///
/// The formats are disjoint: a session or admin secret is never a valid
/// client secret (`ses_…`/`admin_…` is not 48 hex).
pub fn is_secret(kind: SecretKind, s: &str) -> bool {
    s.strip_prefix(kind.prefix())
        .is_some_and(|rest| super::hex::is_lower(rest, 48))
}

/// Which secret format `s` has, if any.
pub fn secret_kind(s: &str) -> Option<SecretKind> {
    SecretKind::ALL.into_iter().find(|&k| is_secret(k, s))
}

/// The display prefix stored for a key: its first 8 characters
/// (e.g. `bae_1a2b`). Shorter inputs are returned whole.
pub fn key_prefix(plaintext: &str) -> &str {
    match plaintext.char_indices().nth(8) {
        Some((i, _)) => &plaintext[..i],
        None => plaintext,
    }
}
