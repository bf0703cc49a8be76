//! Admin-key bootstrap at `serve` start (spec 03 §5.1).
//!
//! Decision order, first match wins:
//!
//! 1. auth disabled → touch nothing (warn on every boot);
//! 2. rotate → soft-delete every active admin row, delete the key file,
//!    self-generate (the hash file is ignored);
//! 3. an active admin row exists → nothing (the key file is left alone);
//! 4. the hash file exists → ingest it (the key file is not written);
//! 5. otherwise → self-generate (a stale key file is overwritten).
//!
//! The plaintext key is never logged; it only ever reaches the key file.

use std::fmt;
use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use proto::wire::hex::encode as hex;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::pg::PgStore;
use super::{Backend, Store, StoreError};

/// Plaintext prefix of admin keys.
pub const ADMIN_KEY_PREFIX: &str = "bae_admin_";
/// `keys.name` of a self-generated admin key.
pub const BOOTSTRAP_ADMIN_NAME: &str = "bootstrap-admin";
/// `keys.name` of an ingested admin key whose hash file has no `name`.
pub const PROVISIONED_ADMIN_NAME: &str = "provisioned-admin";

const NOW_SQL: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// Inputs of the bootstrap (already merged flag > env > default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapSettings {
    /// `--dangerously-disable-admin-auth` or the env equivalent.
    pub disabled: bool,
    /// `--rotate-admin-key`.
    pub rotate: bool,
    /// Plaintext key file (written when self-generating).
    pub key_file: PathBuf,
    /// Pre-provisioned hash file (read-only input).
    pub hash_file: PathBuf,
}

/// Which row of the decision table applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapOutcome {
    /// Row 1: admin auth is disabled; nothing was touched.
    Disabled,
    /// Row 2: old admin keys revoked, a new key written to the key file.
    Rotated,
    /// Row 3: an active admin key already exists.
    Existing,
    /// Row 4: the hash file was ingested under this row name.
    Ingested { name: String },
    /// Row 5: a new key was generated and written to the key file.
    Generated,
}

/// A bootstrap failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapError {
    /// Malformed or unreadable hash file: a usage error (exit 2).
    HashFile { path: PathBuf, detail: String },
    /// The key file could not be written or removed (exit 1).
    KeyFile { path: PathBuf, detail: String },
    /// Database failure (exit 1).
    Store(StoreError),
}

impl BootstrapError {
    /// Process exit code (spec 04 §4).
    pub fn exit_code(&self) -> i32 {
        match self {
            BootstrapError::HashFile { .. } => 2,
            BootstrapError::KeyFile { .. } | BootstrapError::Store(_) => 1,
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::HashFile { path, detail } => {
                write!(
                    f,
                    "invalid admin key hash file \"{}\": {detail}",
                    path.display()
                )
            }
            BootstrapError::KeyFile { path, detail } => {
                write!(
                    f,
                    "cannot write admin key file \"{}\": {detail}",
                    path.display()
                )
            }
            BootstrapError::Store(e) => write!(f, "admin key bootstrap failed: {e}"),
        }
    }
}

impl std::error::Error for BootstrapError {}

impl From<StoreError> for BootstrapError {
    fn from(e: StoreError) -> Self {
        BootstrapError::Store(e)
    }
}

impl From<sqlite::Error> for BootstrapError {
    fn from(e: sqlite::Error) -> Self {
        BootstrapError::Store(e.into())
    }
}

/// What the bootstrap needs of a database (each backend implements it).
pub trait AdminKeyDb {
    /// Active (not revoked) admin rows.
    fn active_admin_rows(&mut self) -> Result<i64, StoreError>;
    /// Runs `f` in one transaction, rolled back when `f` or the commit
    /// fails.
    fn admin_transaction(
        &mut self,
        f: &mut dyn FnMut(&mut dyn AdminKeyTx) -> Result<(), BootstrapError>,
    ) -> Result<(), BootstrapError>;
}

/// The bootstrap's writes inside [`AdminKeyDb::admin_transaction`].
pub trait AdminKeyTx {
    /// Soft-deletes every active admin row (now).
    fn revoke_admin_keys(&mut self) -> Result<(), StoreError>;
    /// Inserts an admin row created now.
    fn insert_admin_key(
        &mut self,
        id: &str,
        name: &str,
        key_hash: &str,
        prefix: &str,
    ) -> Result<(), StoreError>;
}

impl AdminKeyTx for &sqlite::Connection {
    fn revoke_admin_keys(&mut self) -> Result<(), StoreError> {
        Ok(self.execute(format!(
            "UPDATE keys SET deleted_at = {NOW_SQL} WHERE role = 'admin' AND deleted_at IS NULL"
        ))?)
    }

    fn insert_admin_key(
        &mut self,
        id: &str,
        name: &str,
        key_hash: &str,
        prefix: &str,
    ) -> Result<(), StoreError> {
        let mut st = self.prepare(format!(
            "INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, client_id, \
             created_at) VALUES (?1, ?2, ?3, ?4, 'admin', NULL, NULL, {NOW_SQL})"
        ))?;
        st.bind((1, id))?;
        st.bind((2, name))?;
        st.bind((3, key_hash))?;
        st.bind((4, prefix))?;
        while st.next()? == sqlite::State::Row {}
        Ok(())
    }
}

impl AdminKeyDb for &Store {
    fn active_admin_rows(&mut self) -> Result<i64, StoreError> {
        let mut st = self
            .raw()
            .prepare("SELECT COUNT(*) FROM keys WHERE role = 'admin' AND deleted_at IS NULL")?;
        st.next()?;
        Ok(st.read::<i64, _>(0)?)
    }

    fn admin_transaction(
        &mut self,
        f: &mut dyn FnMut(&mut dyn AdminKeyTx) -> Result<(), BootstrapError>,
    ) -> Result<(), BootstrapError> {
        self.with_transaction(|conn| {
            let mut tx = conn;
            f(&mut tx)
        })
    }
}

struct PgTx<'a, 'b>(
    &'a mut postgres::Transaction<'b>,
    crate::config::DatabaseUrl,
);

impl PgTx<'_, '_> {
    fn err(&self, e: postgres::Error) -> StoreError {
        StoreError::Postgres(super::pg::pg_text(&self.1, &e))
    }
}

impl AdminKeyTx for PgTx<'_, '_> {
    fn revoke_admin_keys(&mut self) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE keys SET deleted_at = {} WHERE role = 'admin' AND deleted_at IS NULL",
            super::pg::NOW_SQL
        );
        self.0.execute(&sql, &[]).map_err(|e| self.err(e))?;
        Ok(())
    }

    fn insert_admin_key(
        &mut self,
        id: &str,
        name: &str,
        key_hash: &str,
        prefix: &str,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT INTO keys (id, name, key_hash, key_prefix, role, created_at) \
             VALUES ($1, $2, $3, $4, 'admin', {})",
            super::pg::NOW_SQL
        );
        self.0
            .execute(&sql, &[&id, &name.as_bytes(), &key_hash, &prefix])
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

impl AdminKeyDb for &mut PgStore {
    fn active_admin_rows(&mut self) -> Result<i64, StoreError> {
        let url = self.url().clone();
        self.client()
            .query_one(
                "SELECT COUNT(*) FROM keys WHERE role = 'admin' AND deleted_at IS NULL",
                &[],
            )
            .and_then(|r| r.try_get(0))
            .map_err(|e| StoreError::Postgres(super::pg::pg_text(&url, &e)))
    }

    fn admin_transaction(
        &mut self,
        f: &mut dyn FnMut(&mut dyn AdminKeyTx) -> Result<(), BootstrapError>,
    ) -> Result<(), BootstrapError> {
        let url = self.url().clone();
        self.with_transaction(|tx| f(&mut PgTx(tx, url)))
    }
}

impl AdminKeyDb for &mut Backend {
    fn active_admin_rows(&mut self) -> Result<i64, StoreError> {
        match &mut **self {
            Backend::Sqlite(s) => (&*s).active_admin_rows(),
            Backend::Postgres(p) => {
                let mut p: &mut PgStore = p.as_mut();
                p.active_admin_rows()
            }
        }
    }

    fn admin_transaction(
        &mut self,
        f: &mut dyn FnMut(&mut dyn AdminKeyTx) -> Result<(), BootstrapError>,
    ) -> Result<(), BootstrapError> {
        match &mut **self {
            Backend::Sqlite(s) => (&*s).admin_transaction(f),
            Backend::Postgres(p) => {
                let mut p: &mut PgStore = p.as_mut();
                p.admin_transaction(f)
            }
        }
    }
}

/// Runs the startup decision table. `entropy` must fill its buffer from the
/// OS CSPRNG in production.
pub fn bootstrap_admin_key(
    mut store: impl AdminKeyDb,
    settings: &BootstrapSettings,
    entropy: &mut dyn FnMut(&mut [u8]),
) -> Result<BootstrapOutcome, BootstrapError> {
    if settings.disabled {
        tracing::warn!(
            "admin API authentication is DISABLED (--dangerously-disable-admin-auth) — anyone \
             able to reach the admin port has full control"
        );
        return Ok(BootstrapOutcome::Disabled);
    }
    if settings.rotate {
        store.admin_transaction(&mut |conn| -> Result<(), BootstrapError> {
            conn.revoke_admin_keys()?;
            match fs::remove_file(&settings.key_file) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(BootstrapError::KeyFile {
                        path: settings.key_file.clone(),
                        detail: format!("cannot remove old key file: {e}"),
                    })
                }
            }
            self_generate(conn, &settings.key_file, entropy)
        })?;
        tracing::info!(path = %settings.key_file.display(), "admin key rotated");
        return Ok(BootstrapOutcome::Rotated);
    }
    if store.active_admin_rows()? > 0 {
        return Ok(BootstrapOutcome::Existing);
    }
    match fs::metadata(&settings.hash_file) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        _ => {
            let parsed = parse_hash_file(&settings.hash_file)?;
            let name = parsed.name.clone();
            store.admin_transaction(&mut |conn| -> Result<(), BootstrapError> {
                insert_admin_row(conn, &new_key_id(entropy), &parsed)
            })?;
            tracing::info!(
                path = %settings.hash_file.display(),
                name = %name,
                "admin key hash loaded from pre-provisioned file"
            );
            return Ok(BootstrapOutcome::Ingested { name });
        }
    }
    store.admin_transaction(&mut |conn| self_generate(conn, &settings.key_file, entropy))?;
    tracing::info!(
        path = %settings.key_file.display(),
        "no admin key found; generated new admin key, written to file"
    );
    Ok(BootstrapOutcome::Generated)
}

/// A validated admin row to insert.
struct AdminRow {
    name: String,
    key_hash: String,
    prefix: String,
}

/// Mints a key, inserts its row and writes the key file, all inside the
/// caller's transaction: if the file cannot be written the row is rolled
/// back, so a failed boot never leaves an admin row nobody holds the key to.
fn self_generate(
    conn: &mut dyn AdminKeyTx,
    key_file: &Path,
    entropy: &mut dyn FnMut(&mut [u8]),
) -> Result<(), BootstrapError> {
    let mut secret = [0u8; 24];
    entropy(&mut secret);
    let key = format!("{ADMIN_KEY_PREFIX}{}", hex(&secret));
    let row = AdminRow {
        name: BOOTSTRAP_ADMIN_NAME.to_string(),
        key_hash: sha256_hex(&key),
        prefix: key[..8].to_string(),
    };
    insert_admin_row(conn, &new_key_id(entropy), &row)?;
    write_key_file(key_file, &key).map_err(|e| BootstrapError::KeyFile {
        path: key_file.to_path_buf(),
        detail: e.to_string(),
    })
}

fn insert_admin_row(
    conn: &mut dyn AdminKeyTx,
    id: &str,
    row: &AdminRow,
) -> Result<(), BootstrapError> {
    Ok(conn.insert_admin_key(id, &row.name, &row.key_hash, &row.prefix)?)
}

/// Creates or truncates `path` with mode 0600 and writes `key` + `\n`.
fn write_key_file(path: &Path, key: &str) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // `mode` only applies on creation: tighten a pre-existing file too,
    // before any key material is written into it.
    f.set_permissions(Permissions::from_mode(0o600))?;
    f.write_all(key.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()
}

fn parse_hash_file(path: &Path) -> Result<AdminRow, BootstrapError> {
    let bad = |detail: String| BootstrapError::HashFile {
        path: path.to_path_buf(),
        detail,
    };
    let text = fs::read_to_string(path).map_err(|e| bad(format!("cannot read file: {e}")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".to_string()))?;
    let required = |member: &str| -> Result<String, BootstrapError> {
        match obj.get(member) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(bad(format!("\"{member}\" must not be blank"))),
            Some(_) => Err(bad(format!("\"{member}\" must be a string"))),
            None => Err(bad(format!("missing required member \"{member}\""))),
        }
    };
    let key_hash = required("key_hash")?;
    let prefix = required("prefix")?;
    let name = match obj.get("name") {
        None | Some(Value::Null) => PROVISIONED_ADMIN_NAME.to_string(),
        Some(Value::String(s)) if s.trim().is_empty() => PROVISIONED_ADMIN_NAME.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("\"name\" must be a string".to_string())),
    };
    if !is_sha256_hex(&key_hash) && !is_valid_argon2id_phc(&key_hash) {
        return Err(bad(
            "\"key_hash\" must be 64 lowercase hexadecimal characters (SHA-256) or an \
             Argon2id PHC string"
                .to_string(),
        ));
    }
    Ok(AdminRow {
        name,
        key_hash,
        prefix,
    })
}

/// Exactly 64 lowercase hexadecimal characters.
pub fn is_sha256_hex(s: &str) -> bool {
    proto::wire::hex::is_lower(s, 64)
}

/// A structurally valid `$argon2id$[v=16|19$]m=<n>,t=<n>,p=<n>$<salt>$<hash>`
/// PHC string (salt ≥ 8 bytes, hash ≥ 4 bytes), read by the `argon2`
/// crate's own PHC parser, whose parameters the verifier would accept.
pub fn is_valid_argon2id_phc(s: &str) -> bool {
    use argon2::password_hash::PasswordHash;
    let Ok(phc) = PasswordHash::new(s) else {
        return false;
    };
    let mut salt = [0u8; 64];
    phc.algorithm == argon2::ARGON2ID_IDENT
        && phc.version.is_none_or(|v| argon2::Version::try_from(v).is_ok())
        // The PHC format fixes the order of Argon2's parameters.
        && phc.params.iter().map(|(k, _)| k.as_str()).eq(["m", "t", "p"])
        && argon2::Params::try_from(&phc).is_ok()
        && phc.salt.is_some_and(|v| v.decode_b64(&mut salt).is_ok_and(|b| b.len() >= 8))
        && phc.hash.is_some_and(|h| h.len() >= 4)
}

fn new_key_id(entropy: &mut dyn FnMut(&mut [u8])) -> String {
    let mut b = [0u8; 16];
    entropy(&mut b);
    format!("key_{}", hex(&b))
}

/// Lowercase hex SHA-256 of the token's UTF-8 bytes (spec 08 §4.2).
pub fn sha256_hex(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_known_vector() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&sha256_hex("x")));
        assert!(!is_sha256_hex(&sha256_hex("x").to_uppercase()));
        assert!(!is_sha256_hex("abc"));
    }

    #[test]
    fn phc_validation() {
        let ok = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$\
                  ZXhhbXBsZWhhc2hleGFtcGxlaGFzaGV4YW1wbGVoYXNo";
        assert!(is_valid_argon2id_phc(ok));
        assert!(is_valid_argon2id_phc(
            "$argon2id$m=65536,t=3,p=4$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g"
        ));
        for bad in [
            "$argon2i$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g",
            "$argon2id$v=20$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g",
            "$argon2id$v=19$t=2,m=19456,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g",
            "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA",
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$ZXhhbXBsZWhhc2g",
            "$argon2id$v=19$m=x,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g",
            "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRz!21lc2FsdA$ZXhhbXBsZWhhc2g",
            "argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g",
            // Parameters Argon2 itself refuses (memory below 8 KiB per lane)
            // could never verify.
            "$argon2id$v=19$m=1,t=1,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2g",
        ] {
            assert!(!is_valid_argon2id_phc(bad), "{bad}");
        }
    }
}
