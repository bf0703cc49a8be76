//! `baectl auth create key` (spec 03 §5.5, checklist C-236): offline
//! pre-provisioning of one admin credential for several replicas, verified
//! against fresh real servers that ingest the hash file (C-212: no key file
//! is written on that path).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use testkit::{HttpClient, Server, ServerOptions, TestDir};

fn baectl(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baectl"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(&k);
        }
    }
    let out = cmd.args(args).output().expect("run baectl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Runs `auth create key` into a fresh directory: (dir, plaintext, hash doc).
fn create_pair(name: Option<&str>) -> (TestDir, String, Value) {
    let dir = TestDir::new("baectl-keygen").unwrap();
    let out = dir.join("out");
    let out_s = out.display().to_string();
    let mut args = vec!["auth", "create", "key", "--out-dir", out_s.as_str()];
    if let Some(n) = name {
        args.extend(["--name", n]);
    }
    let (code, stdout, stderr) = baectl(&args);
    assert_eq!(code, Some(0), "stdout {stdout:?} stderr {stderr:?}");
    let key_path = out.join("admin-key.pem");
    let hash_path = out.join("admin-key-hash.pem");
    assert_eq!(
        stdout,
        format!("{}\n{}\n", key_path.display(), hash_path.display())
    );
    assert!(stderr.contains("BAE_ADMIN_KEY_HASH_FILE"), "{stderr}");
    let raw = std::fs::read_to_string(&key_path).unwrap();
    let plaintext = raw
        .strip_suffix('\n')
        .expect("trailing newline")
        .to_string();
    assert!(!stderr.contains(&plaintext), "plaintext on stderr");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&hash_path).unwrap()).unwrap();
    assert_eq!(mode(&key_path), 0o600);
    assert_eq!(mode(&hash_path), 0o600);
    (dir, plaintext, doc)
}

/// A fresh server (own directory, kept until the caller removes it) whose
/// `BAE_ADMIN_KEY_HASH_FILE` is a copy of `hash_doc_path`.
fn server_with_hash_file(hash_doc_path: &std::path::Path) -> Server {
    let mut dir = TestDir::new("baesrv-replica").unwrap();
    dir.keep();
    let replica = dir.path().to_path_buf();
    std::fs::copy(hash_doc_path, replica.join("admin-key-hash.pem")).unwrap();
    Server::start(
        ServerOptions::new()
            .bin(env!("CARGO_BIN_EXE_baesrv"))
            .db_dir(&replica),
    )
}

#[test]
fn c236_generated_pair_has_the_documented_format() {
    let (_dir, plaintext, doc) = create_pair(Some("shared-admin"));
    assert_eq!(plaintext.len(), "bae_admin_".len() + 48);
    assert!(plaintext.starts_with("bae_admin_"));
    assert!(plaintext[10..]
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(
        doc,
        json!({"key_hash": sha256_hex(&plaintext), "prefix": &plaintext[..14], "name": "shared-admin"})
    );
    // Default name, and each run mints a different key.
    let (_dir2, other, doc2) = create_pair(None);
    assert_eq!(doc2["name"], "provisioned-admin");
    assert_ne!(other, plaintext);
}

#[test]
fn c236_c212_one_plaintext_authenticates_on_every_replica() {
    let (dir, plaintext, doc) = create_pair(Some("fleet-admin"));
    let hash_path = dir.join("out").join("admin-key-hash.pem");
    let key_path = dir.join("out").join("admin-key.pem");
    let replicas: Vec<Server> = (0..2).map(|_| server_with_hash_file(&hash_path)).collect();
    for s in &replicas {
        // C-212: the ingest path never writes a key file.
        assert!(!s.admin_key_file().exists(), "key file written");
        assert!(s.admin_key.is_empty());
        // The paired plaintext authenticates, through baectl's key file…
        let addr = s.admin_addr.to_string();
        let key_arg = key_path.display().to_string();
        let (code, stdout, stderr) = baectl(&[
            "--admin-addr",
            &addr,
            "--admin-key-file",
            &key_arg,
            "profiles",
            "list",
        ]);
        assert_eq!(code, Some(0), "stdout {stdout:?} stderr {stderr:?}");
        assert_eq!(stdout, "no profiles found\n");
        // …and directly as a bearer token; another token does not.
        HttpClient::new(s.admin_addr)
            .bearer(plaintext.as_str())
            .get("/admin/v1/keys")
            .assert_status(200);
        let r = HttpClient::new(s.admin_addr)
            .bearer(format!("bae_admin_{}", "0".repeat(48)))
            .get("/admin/v1/keys");
        r.assert_status(401);
        // The stored row is the file's name, prefix and digest.
        let db = sqlite::Connection::open_with_flags(
            s.db_path(),
            sqlite::OpenFlags::new().with_read_only(),
        )
        .unwrap();
        let mut st = db
            .prepare(
                "SELECT name, key_prefix, key_hash FROM keys \
                 WHERE role = 'admin' AND deleted_at IS NULL",
            )
            .unwrap();
        let mut rows = Vec::new();
        while let Ok(sqlite::State::Row) = st.next() {
            rows.push((
                st.read::<String, _>(0).unwrap(),
                st.read::<String, _>(1).unwrap(),
                st.read::<String, _>(2).unwrap(),
            ));
        }
        assert_eq!(
            rows,
            [(
                "fleet-admin".to_string(),
                doc["prefix"].as_str().unwrap().to_string(),
                sha256_hex(&plaintext)
            )]
        );
    }
    for s in replicas {
        let d = s.dir.path().to_path_buf();
        drop(s);
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn existing_files_are_not_overwritten_without_force() {
    let (dir, plaintext, _) = create_pair(None);
    let out = dir.join("out").display().to_string();
    let (code, stdout, stderr) = baectl(&["auth", "create", "key", "--out-dir", &out]);
    assert_eq!(code, Some(1), "{stdout} {stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("baectl: ") && stderr.contains("--force"),
        "{stderr}"
    );
    let key_path = dir.join("out").join("admin-key.pem");
    assert_eq!(
        std::fs::read_to_string(&key_path).unwrap(),
        format!("{plaintext}\n"),
        "untouched"
    );
    // --force replaces both files (and tightens a loosened mode).
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, stderr) = baectl(&[
        "auth",
        "create",
        "key",
        "--out-dir",
        &out,
        "--force",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let new = std::fs::read_to_string(&key_path).unwrap();
    assert_ne!(new.trim(), plaintext);
    assert_eq!(mode(&key_path), 0o600);
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out").join("admin-key-hash.pem")).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["key_hash"], sha256_hex(new.trim()).as_str());
}

#[test]
fn auth_create_key_needs_no_server_and_rejects_bad_arguments() {
    // No BAE_ADMIN_* at all and nothing listening: still works (offline).
    let (_dir, _plain, _doc) = create_pair(Some("x"));
    let (code, _, stderr) = baectl(&["auth", "create", "key", "--name", " "]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr.lines().next().unwrap(),
        "error: usage: --name must not be blank"
    );
    let (code, _, stderr) = baectl(&["auth", "create", "secret"]);
    assert_eq!(code, Some(2), "{stderr}");
}
