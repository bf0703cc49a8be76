//! `baectl auth create key`: offline admin-key pre-provisioning (spec 03
//! §5.5).
//!
//! Writes two files, both mode 0600:
//!
//! - `admin-key.pem`: the plaintext `bae_admin_` + 48 lowercase hex
//!   characters (24 bytes from the OS CSPRNG), then `\n`, the same format
//!   as the key file baesrv writes itself;
//! - `admin-key-hash.pem`: `{"key_hash", "prefix", "name"}` where
//!   `key_hash` is the lowercase hex SHA-256 of the plaintext bytes (no
//!   newline) and `prefix` its first 14 characters; this is what baesrv
//!   ingests from `BAE_ADMIN_KEY_HASH_FILE` on a first boot.
//!
//! The digest is computed here, independently of the server's code: any
//! replica verifies the plaintext with plain SHA-256 and no shared
//! parameters.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use proto::wire::hex::encode as hex;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::CtlError;

/// Plaintext prefix of admin keys.
pub const ADMIN_KEY_PREFIX: &str = "bae_admin_";
/// Random bytes per key (192 bits).
pub const KEY_BYTES: usize = 24;
/// Length of the display prefix written to the hash file.
pub const PREFIX_LEN: usize = 14;
/// File names inside `--out-dir`.
pub const KEY_FILE: &str = "admin-key.pem";
pub const HASH_FILE: &str = "admin-key-hash.pem";

/// A generated admin credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminKey {
    pub plaintext: String,
    pub prefix: String,
    pub key_hash: String,
}

/// Lowercase hex SHA-256 of the token's UTF-8 bytes.
pub fn digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Builds the key from 24 random bytes.
pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> AdminKey {
    let plaintext = format!("{ADMIN_KEY_PREFIX}{}", hex(bytes));
    AdminKey {
        prefix: plaintext[..PREFIX_LEN].to_string(),
        key_hash: digest(&plaintext),
        plaintext,
    }
}

/// A fresh key from the OS CSPRNG.
pub fn generate() -> Result<AdminKey, CtlError> {
    let mut bytes = [0u8; KEY_BYTES];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| CtlError::runtime("io", format!("the OS random generator failed: {e}")))?;
    Ok(from_bytes(&bytes))
}

/// The hash-file document.
pub fn hash_document(key: &AdminKey, name: &str) -> Value {
    json!({"key_hash": key.key_hash, "prefix": key.prefix, "name": name})
}

fn io_err(path: &Path, e: io::Error) -> CtlError {
    CtlError::runtime("io", format!("cannot write {}: {e}", path.display()))
}

/// Writes `contents` with mode 0600; `force` truncates an existing file
/// (tightening its mode), otherwise an existing file is an error.
fn write_secret(path: &Path, contents: &str, force: bool) -> Result<(), CtlError> {
    let mut opts = OpenOptions::new();
    opts.write(true).mode(0o600);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(path).map_err(|e| io_err(path, e))?;
    f.set_permissions(Permissions::from_mode(0o600))
        .map_err(|e| io_err(path, e))?;
    f.write_all(contents.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err(path, e))
}

/// Writes the key pair into `out_dir` (created with mode 0700 when
/// missing). Returns (key file, hash file).
pub fn write_pair(
    out_dir: &Path,
    key: &AdminKey,
    name: &str,
    force: bool,
) -> Result<(PathBuf, PathBuf), CtlError> {
    if !out_dir.is_dir() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(out_dir)
            .map_err(|e| {
                CtlError::runtime(
                    "io",
                    format!("cannot create directory {}: {e}", out_dir.display()),
                )
            })?;
    }
    let key_path = out_dir.join(KEY_FILE);
    let hash_path = out_dir.join(HASH_FILE);
    if !force {
        for p in [&key_path, &hash_path] {
            if p.exists() {
                return Err(CtlError::runtime(
                    "io",
                    format!(
                        "{} already exists; refusing to overwrite an admin credential (pass --force to replace it)",
                        p.display()
                    ),
                ));
            }
        }
    }
    write_secret(&key_path, &format!("{}\n", key.plaintext), force)?;
    let mut doc = serde_json::to_string_pretty(&hash_document(key, name))
        .map_err(|e| CtlError::runtime("io", format!("serialising the hash file: {e}")))?;
    doc.push('\n');
    if let Err(e) = write_secret(&hash_path, &doc, force) {
        // Never leave a plaintext without its hash file.
        let _ = std::fs::remove_file(&key_path);
        return Err(e);
    }
    Ok((key_path, hash_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn key_shape() {
        let k = from_bytes(&[0xab; KEY_BYTES]);
        assert_eq!(k.plaintext, format!("bae_admin_{}", "ab".repeat(24)));
        assert_eq!(k.plaintext.len(), 58);
        assert_eq!(k.prefix, "bae_admin_abab");
        assert_eq!(k.key_hash, digest(&k.plaintext));
        assert_eq!(k.key_hash.len(), 64);
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a.plaintext, b.plaintext);
        assert!(a.plaintext[10..]
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    }

    #[test]
    fn document_members() {
        let k = from_bytes(&[1; KEY_BYTES]);
        let d = hash_document(&k, "shared");
        assert_eq!(
            d,
            json!({"key_hash": k.key_hash, "prefix": "bae_admin_0101", "name": "shared"})
        );
    }
}
