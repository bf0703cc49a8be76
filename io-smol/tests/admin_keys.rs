//! Admin-key lifecycle over the real binary: self-generated key file,
//! restart, rotation, pre-provisioned hash files, disabled auth, stale
//! files (README checklist C-208–C-215; spec 03 §5).

mod rest_support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use rest_support::*;
use serde_json::json;
use testkit::{HttpClient, Server, TestDir};

const PLAIN: &str = "bae_admin_0123456789abcdef0123456789abcdef0123456789abcdef";

fn admin_as(s: &Server, token: &str) -> HttpClient {
    HttpClient::new(s.admin_addr).bearer(token)
}

fn assert_admin_ok(s: &Server, token: &str) {
    admin_as(s, token)
        .get("/admin/v1/profiles")
        .assert_status(200);
}

fn assert_admin_401(s: &Server, token: &str) {
    let r = admin_as(s, token).get("/admin/v1/profiles");
    assert_problem(&r, 401, "unauthorized");
}

fn active_admin_rows(s: &Server) -> Vec<Vec<Option<String>>> {
    query(
        &db(s),
        "SELECT name, key_prefix, key_hash FROM keys WHERE role = 'admin' AND deleted_at IS NULL",
    )
}

#[test]
fn c208_first_boot_writes_a_0600_key_file_that_authenticates() {
    let s = start();
    let path = s.admin_key_file();
    let raw = std::fs::read_to_string(&path).unwrap();
    let token = raw.strip_suffix('\n').expect("trailing newline");
    assert!(!token.contains('\n'), "single line: {raw:?}");
    assert!(is_prefixed_hex(token, "bae_admin_", 48), "{raw:?}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode {mode:o}");
    assert_admin_ok(&s, token);
    let rows = active_admin_rows(&s);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0].as_deref(), Some("bootstrap-admin"));
    assert_eq!(rows[0][1].as_deref(), Some(&token[..8]));
    assert_eq!(rows[0][2].as_deref(), Some(sha256_hex(token).as_str()));
    // The lower-case scheme works on the admin port too.
    let auth = format!("bearer {token}");
    HttpClient::new(s.admin_addr)
        .request(
            "GET",
            "/admin/v1/keys",
            &[("authorization", auth.as_str())],
            b"",
        )
        .assert_status(200);
}

#[test]
fn c209_restart_keeps_the_key_file_and_token() {
    let mut s = start();
    let path = s.admin_key_file();
    let before = std::fs::read(&path).unwrap();
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let token = s.admin_key.clone();
    std::thread::sleep(Duration::from_millis(20));
    s.restart();
    assert_eq!(std::fs::read(&path).unwrap(), before, "key file rewritten");
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    assert_eq!(s.admin_key, token);
    assert_admin_ok(&s, &token);
    assert_eq!(active_admin_rows(&s).len(), 1);
    // Also after a crash.
    s.kill9();
    s.restart();
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_admin_ok(&s, &token);
}

#[test]
fn c210_rotation_invalidates_the_old_token() {
    let mut s = start();
    let f = fix(&s, &[]);
    let old = s.admin_key.clone();
    s.restart_with(|o| o.args.push("--rotate-admin-key".into()));
    let new = s.admin_key.clone();
    assert!(is_prefixed_hex(&new, "bae_admin_", 48), "{new}");
    assert_ne!(new, old);
    assert_admin_401(&s, &old);
    assert_admin_ok(&s, &new);
    let raw = std::fs::read_to_string(s.admin_key_file()).unwrap();
    assert_eq!(raw, format!("{new}\n"));
    let mode = std::fs::metadata(s.admin_key_file())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let rows = active_admin_rows(&s);
    assert_eq!(rows.len(), 1, "old admin rows are soft-deleted");
    assert_eq!(rows[0][2].as_deref(), Some(sha256_hex(&new).as_str()));
    // Client data is untouched by rotation.
    s.client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
    // A plain restart afterwards keeps the rotated key.
    s.restart_with(|o| o.args.retain(|a| a != "--rotate-admin-key"));
    assert_eq!(s.admin_key, new);
    assert_admin_ok(&s, &new);
    assert_admin_401(&s, &old);
}

#[test]
fn c211_rotate_with_disabled_auth_exits_2_before_opening_the_database() {
    let out = Server::run(
        opts()
            .arg("--rotate-admin-key")
            .env("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", "1"),
        Duration::from_secs(10),
    );
    assert_eq!(out.code(), Some(2), "stderr: {}", out.stderr);
    assert!(!out.dir.join("bae.db").exists(), "database was opened");
    assert!(!out.dir.join("admin-key.pem").exists());
    let out = Server::run(
        opts()
            .arg("--rotate-admin-key")
            .arg("--dangerously-disable-admin-auth"),
        Duration::from_secs(10),
    );
    assert_eq!(out.code(), Some(2), "stderr: {}", out.stderr);
    assert!(!out.dir.join("bae.db").exists());
}

#[test]
fn c212_pre_provisioned_hash_file_is_ingested_without_writing_a_key_file() {
    let dir = TestDir::new("baesrv-hash").unwrap();
    let hash =
        json!({"key_hash": sha256_hex(PLAIN), "prefix": "bae_admin_0123", "name": "shared-admin"});
    std::fs::write(dir.join("admin-key-hash.pem"), hash.to_string()).unwrap();
    let mut s = Server::start(opts().db_dir(dir.path()));
    assert!(!s.admin_key_file().exists(), "key file written");
    assert!(s.admin_key.is_empty());
    assert_admin_ok(&s, PLAIN);
    assert_admin_401(
        &s,
        "bae_admin_ffffffffffffffffffffffffffffffffffffffffffffffff",
    );
    let rows = active_admin_rows(&s);
    assert_eq!(
        rows,
        [vec![
            Some("shared-admin".to_string()),
            Some("bae_admin_0123".to_string()),
            Some(sha256_hex(PLAIN)),
        ]]
    );
    // The hash file is an input only: untouched, and not re-ingested.
    assert_eq!(
        std::fs::read_to_string(dir.join("admin-key-hash.pem")).unwrap(),
        hash.to_string()
    );
    s.restart();
    assert_admin_ok(&s, PLAIN);
    assert_eq!(active_admin_rows(&s).len(), 1);
    assert!(!s.admin_key_file().exists());
}

/// Older baectl releases write Argon2id PHC hashes (spec 03 §5.1, project
/// decision): the paired plaintext authenticates, and the row is upgraded to
/// the SHA-256 digest on that first use so Argon2 is never paid again.
#[test]
fn c236_legacy_argon2id_hash_file_verifies_and_is_upgraded_on_first_use() {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    let phc = argon2::Argon2::default()
        .hash_password(PLAIN.as_bytes(), &salt)
        .unwrap()
        .to_string();
    let dir = TestDir::new("baesrv-hash").unwrap();
    let hash = json!({"key_hash": phc, "prefix": "bae_admin_0123", "name": "legacy"});
    std::fs::write(dir.join("admin-key-hash.pem"), hash.to_string()).unwrap();
    let s = Server::start(opts().db_dir(dir.path()));
    assert!(!s.admin_key_file().exists());
    assert_eq!(active_admin_rows(&s)[0][2].as_deref(), Some(phc.as_str()));
    assert_admin_ok(&s, PLAIN);
    assert_eq!(active_admin_rows(&s)[0][2], Some(sha256_hex(PLAIN)));
    assert_admin_ok(&s, PLAIN);
}

#[test]
fn c212_hash_file_name_defaults_to_provisioned_admin() {
    let dir = TestDir::new("baesrv-hash").unwrap();
    let hash = json!({"key_hash": sha256_hex(PLAIN), "prefix": "bae_admin_0123"});
    std::fs::write(dir.join("admin-key-hash.pem"), hash.to_string()).unwrap();
    let s = Server::start(opts().db_dir(dir.path()));
    assert_admin_ok(&s, PLAIN);
    assert_eq!(
        active_admin_rows(&s)[0][0].as_deref(),
        Some("provisioned-admin")
    );
}

#[test]
fn c213_malformed_hash_files_exit_2() {
    let good = sha256_hex(PLAIN);
    let cases = [
        json!({"key_hash": good.to_uppercase(), "prefix": "p"}).to_string(),
        json!({"key_hash": &good[..63], "prefix": "p"}).to_string(),
        json!({"key_hash": format!("{}g", &good[..63]), "prefix": "p"}).to_string(),
        json!({"key_hash": format!("{good}0"), "prefix": "p"}).to_string(),
        json!({"key_hash": "$argon2id$garbage", "prefix": "p"}).to_string(),
        json!({"key_hash": good, "prefix": " "}).to_string(),
        json!({"key_hash": good}).to_string(),
        json!({"prefix": "p"}).to_string(),
        "not json".to_string(),
        String::new(),
    ];
    for content in cases {
        let dir = TestDir::new("baesrv-badhash").unwrap();
        let path = dir.join("admin-key-hash.pem");
        std::fs::write(&path, &content).unwrap();
        let out = Server::run(opts().db_dir(dir.path()), Duration::from_secs(10));
        assert_eq!(out.code(), Some(2), "{content:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("admin-key-hash.pem"),
            "message names the file: {}",
            out.stderr
        );
        assert!(!dir.join("admin-key.pem").exists());
    }
}

#[test]
fn c214_disabled_auth_warns_on_every_boot() {
    let mut s = Server::start(opts().arg("--dangerously-disable-admin-auth"));
    const WARN: &str = "admin API authentication is DISABLED";
    assert_eq!(
        s.stderr_log().matches(WARN).count(),
        1,
        "{}",
        s.stderr_log()
    );
    HttpClient::new(s.admin_addr)
        .get("/admin/v1/profiles")
        .assert_status(200);
    s.restart();
    assert_eq!(
        s.stderr_log().matches(WARN).count(),
        2,
        "{}",
        s.stderr_log()
    );
    HttpClient::new(s.admin_addr)
        .get("/admin/v1/keys")
        .assert_status(200);
    assert!(!s.admin_key_file().exists());
    // The admin key is never logged.
    assert!(!s.stderr_log().contains("bae_admin_"));
}

#[test]
fn c214_disable_env_parsing() {
    // Only 1 / true (any case, trimmed) disable auth.
    for (value, disabled) in [("1", true), (" TRUE ", true), ("yes", false), ("0", false)] {
        let s = Server::start(opts().env("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", value));
        let r = HttpClient::new(s.admin_addr).get("/admin/v1/profiles");
        assert_eq!(r.status, if disabled { 200 } else { 401 }, "{value:?}");
    }
}

#[test]
fn c215_stale_key_file_is_overwritten() {
    let dir = TestDir::new("baesrv-stale").unwrap();
    let stale = "bae_admin_ffffffffffffffffffffffffffffffffffffffffffffffff";
    std::fs::write(dir.join("admin-key.pem"), format!("{stale}\n")).unwrap();
    let s = Server::start(opts().db_dir(dir.path()));
    assert_ne!(s.admin_key, stale);
    assert!(is_prefixed_hex(&s.admin_key, "bae_admin_", 48));
    assert_admin_401(&s, stale);
    assert_admin_ok(&s, &s.admin_key);
    assert_eq!(
        std::fs::read_to_string(s.admin_key_file()).unwrap(),
        format!("{}\n", s.admin_key)
    );
}

#[test]
fn admin_key_flags_override_env_paths() {
    let dir = TestDir::new("baesrv-flags").unwrap();
    let custom = dir.join("custom-admin.pem");
    let s = Server::start(opts().arg(format!("--admin-key-file={}", custom.display())));
    assert!(custom.exists(), "flag path not used");
    assert!(
        !s.admin_key_file().exists(),
        "env path used despite the flag"
    );
    let token = std::fs::read_to_string(&custom).unwrap();
    assert_admin_ok(&s, token.trim());
}
