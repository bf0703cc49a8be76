//! Key digests, constant-time comparison and bearer-header parsing.
//!
//! Keys are uniformly random 192-bit tokens, so an unsalted SHA-256 digest is
//! as strong as a slow KDF here and lets independently written hash files
//! (baectl) verify identically (spec 08 §4.2).

use sha2::{Digest, Sha256};

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
