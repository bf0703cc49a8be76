//! Authentication against stored key digests, including the one-time
//! upgrade of legacy Argon2id digests (older baectl hash files and older
//! databases; spec 08 §4.2, 03 §5.1).

use argon2::password_hash::{PasswordHash, PasswordVerifier};

use crate::model::{Key, KeyScope, StoredHash};
use crate::store::StoreWrite;
use crate::{auth, Engine};

/// After a failed Argon2id verification, further ones are refused for this
/// long: the memory-hard check runs on the engine thread, so it must not be
/// an amplification lever.
const LEGACY_FAILURE_PAUSE_MS: u64 = 1_000;

impl Engine {
    /// The key of `scope` that `token` authenticates as, if any.
    /// SHA-256 rows are compared in constant time; a matching legacy
    /// Argon2id row is verified once and its digest replaced by SHA-256.
    pub(crate) fn authenticate(&mut self, scope: KeyScope<'_>, token: &str) -> Option<Key> {
        let candidates = self.catalog.candidates(scope, token);
        if let Some(k) = self.catalog.match_digest(candidates, token) {
            return Some(k.clone());
        }
        let legacy = self.catalog.legacy_candidates(candidates, token);
        if legacy.is_empty() {
            return None;
        }
        if self
            .last_legacy_failure
            .is_some_and(|t| self.now.mono < t + LEGACY_FAILURE_PAUSE_MS)
        {
            return None;
        }
        for (id, phc) in legacy {
            let verified = PasswordHash::new(&phc)
                .map(|h| {
                    argon2::Argon2::default()
                        .verify_password(token.as_bytes(), &h)
                        .is_ok()
                })
                .unwrap_or(false);
            if verified {
                let digest = auth::digest(token);
                if let Some(k) = self.catalog.keys.get_mut(id.as_str()) {
                    k.hash = StoredHash::Sha256(digest);
                }
                self.write(StoreWrite::SetKeyHash {
                    id: id.clone(),
                    key_hash: auth::hex(&digest),
                });
                tracing::info!(key_id = %id, "legacy Argon2id key digest upgraded to SHA-256");
                return self.catalog.keys.get(id.as_str()).map(|k| (**k).clone());
            }
        }
        self.last_legacy_failure = Some(self.now.mono);
        None
    }
}
