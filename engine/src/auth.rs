//! Key digests, constant-time comparison, bearer-header parsing, and the
//! one-time upgrade of legacy Argon2id digests.
//!
//! Keys are uniformly random 192-bit tokens, so an unsalted SHA-256 digest is
//! as strong as a slow KDF here and lets independently written hash files
//! (baectl) verify identically (spec 08 §4.2).

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use sha2::{Digest, Sha256};

use crate::store::StoreWrite;
use crate::time::MonoMs;

/// SHA-256 of the token bytes.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Lowercase hex SHA-256 of the token, as stored in `keys.key_hash`.
pub fn digest_hex(token: &str) -> String {
    hex(&digest(token))
}

pub use proto::wire::hex::encode as hex;

/// Parses a stored `key_hash`: exactly 64 lowercase hex characters. Anything
/// else is a non-match (one corrupt row must not lock others out).
pub fn parse_digest(stored: &str) -> Option<[u8; 32]> {
    proto::wire::hex::decode_lower(stored.as_bytes())
}

/// Compares two digests without data-dependent early exit.
pub fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keep the optimiser from turning the fold into an early-exit compare.
    std::hint::black_box(diff) == 0
}

/// Why a request failed authentication (reference detail strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BearerError {
    Missing,
    NotBearer,
    Empty,
}

impl BearerError {
    pub fn detail(self) -> &'static str {
        match self {
            BearerError::Missing => "missing Authorization header",
            BearerError::NotBearer => "Authorization header must be a Bearer token",
            BearerError::Empty => "empty bearer token",
        }
    }
}

/// Extracts the token of `Authorization: Bearer <token>` (`Bearer ` or
/// `bearer `, exactly one space).
pub fn bearer(header: Option<&[u8]>) -> Result<&str, BearerError> {
    let raw = header.ok_or(BearerError::Missing)?;
    let value = std::str::from_utf8(raw).map_err(|_| BearerError::NotBearer)?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or(BearerError::NotBearer)?;
    if token.is_empty() {
        return Err(BearerError::Empty);
    }
    Ok(token)
}

/// After a failed Argon2id verification, further ones are refused for this
/// long: the memory-hard check runs on the engine thread, so it must not be
/// an amplification lever.
const LEGACY_FAILURE_PAUSE_MS: u64 = 1_000;

/// Verifies tokens against legacy Argon2id digests (older baectl hash
/// files and older databases; spec 08 §4.2, 03 §5.1), at most one failing
/// attempt per [`LEGACY_FAILURE_PAUSE_MS`]. The catalogue owns it and
/// replaces a verified row's digest by SHA-256.
#[derive(Debug, Default)]
pub struct LegacyUpgrade {
    /// When the last verification failed.
    last_failure: Option<MonoMs>,
}

/// A legacy row a token verified against: its new digest, to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgraded {
    pub key_id: String,
    pub digest: [u8; 32],
}

impl Upgraded {
    /// The write that makes the upgrade durable.
    pub fn write(&self) -> StoreWrite {
        StoreWrite::SetKeyHash {
            id: self.key_id.clone(),
            key_hash: hex(&self.digest),
        }
    }
}

impl LegacyUpgrade {
    /// The row among `candidates` (key id, PHC string) that `token`
    /// verifies against; `None` when none does, or while paused after a
    /// failure.
    pub fn verify(
        &mut self,
        candidates: &[(String, Box<str>)],
        token: &str,
        now: MonoMs,
    ) -> Option<Upgraded> {
        if candidates.is_empty() {
            return None;
        }
        if (self.last_failure).is_some_and(|t| now < t + LEGACY_FAILURE_PAUSE_MS) {
            return None;
        }
        for (id, phc) in candidates {
            let verified = PasswordHash::new(phc)
                .map(|h| {
                    argon2::Argon2::default()
                        .verify_password(token.as_bytes(), &h)
                        .is_ok()
                })
                .unwrap_or(false);
            if verified {
                tracing::info!(key_id = %id, "legacy Argon2id key digest upgraded to SHA-256");
                return Some(Upgraded {
                    key_id: id.clone(),
                    digest: digest(token),
                });
            }
        }
        self.last_failure = Some(now);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_lowercase_sha256_hex_c231() {
        assert_eq!(
            digest_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(parse_digest(&digest_hex("abc")), Some(digest("abc")));
    }

    #[test]
    fn malformed_stored_digests_never_match() {
        assert_eq!(parse_digest("ABC"), None);
        let upper = digest_hex("abc").to_uppercase();
        assert_eq!(parse_digest(&upper), None);
        assert_eq!(parse_digest("$argon2id$v=19$m=1,t=1,p=1$x$y"), None);
    }

    #[test]
    fn ct_eq_compares_whole_digest() {
        let a = digest("a");
        let mut b = a;
        assert!(ct_eq(&a, &b));
        b[31] ^= 1;
        assert!(!ct_eq(&a, &b));
    }

    /// A PHC string for `token` with small parameters (fast in tests).
    fn legacy_phc(token: &str) -> Box<str> {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let params = argon2::Params::new(64, 1, 1, None).unwrap();
        let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let salt = SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
        a.hash_password(token.as_bytes(), &salt)
            .unwrap()
            .to_string()
            .into()
    }

    /// C-236: a legacy row verifies once and yields its SHA-256 upgrade; a
    /// failure pauses further verifications for a second.
    #[test]
    fn legacy_upgrade_verifies_and_pauses_after_a_failure_c236() {
        let rows = vec![("key_1".to_string(), legacy_phc("bae_admin_right"))];
        let mut legacy = LegacyUpgrade::default();
        assert_eq!(legacy.verify(&[], "bae_admin_right", MonoMs(0)), None);
        assert_eq!(legacy.verify(&rows, "bae_admin_wrong", MonoMs(10)), None);
        // Paused: even the right token is not checked.
        assert_eq!(legacy.verify(&rows, "bae_admin_right", MonoMs(1009)), None);
        let up = legacy
            .verify(&rows, "bae_admin_right", MonoMs(1010))
            .unwrap();
        assert_eq!(up.key_id, "key_1");
        assert_eq!(up.digest, digest("bae_admin_right"));
        assert_eq!(
            up.write(),
            StoreWrite::SetKeyHash {
                id: "key_1".into(),
                key_hash: digest_hex("bae_admin_right"),
            }
        );
    }

    #[test]
    fn bearer_parsing_c003_c006() {
        assert_eq!(bearer(None), Err(BearerError::Missing));
        assert_eq!(bearer(Some(b"Bearer abc")), Ok("abc"));
        assert_eq!(bearer(Some(b"bearer abc")), Ok("abc"));
        assert_eq!(bearer(Some(b"Bearer ")), Err(BearerError::Empty));
        assert_eq!(bearer(Some(b"Basic abc")), Err(BearerError::NotBearer));
        assert_eq!(bearer(Some(b"BEARER abc")), Err(BearerError::NotBearer));
    }
}
