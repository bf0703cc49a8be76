//! Admin-key bootstrap decision table (spec 03 §5.1; C-208–C-215).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use io_smol::store::{
    bootstrap_admin_key, BootstrapError, BootstrapOutcome, BootstrapSettings, Store, Synchronous,
};
use sha2::{Digest, Sha256};
use testkit::TestDir;

/// Removed when the test is done (testkit::TestDir).
fn temp_dir(tag: &str) -> TestDir {
    TestDir::new(&format!("baesrv-{tag}")).unwrap()
}

struct Fixture {
    // The store closes before its directory goes.
    store: Store,
    dir: TestDir,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let dir = temp_dir(tag);
        let store = Store::open(dir.join("bae.db"), Synchronous::Normal).unwrap();
        store.migrate().unwrap();
        Fixture { store, dir }
    }

    fn settings(&self) -> BootstrapSettings {
        BootstrapSettings {
            disabled: false,
            rotate: false,
            key_file: self.dir.join("admin-key.pem"),
            hash_file: self.dir.join("admin-key-hash.pem"),
        }
    }

    fn run(&self, s: &BootstrapSettings) -> Result<BootstrapOutcome, BootstrapError> {
        let mut entropy = |buf: &mut [u8]| getrandom::getrandom(buf).unwrap();
        bootstrap_admin_key(&self.store, s, &mut entropy)
    }

    /// Active admin rows as (name, key_hash, key_prefix).
    fn admin_rows(&self) -> Vec<(String, String, String)> {
        self.store
            .load_snapshot()
            .unwrap()
            .keys
            .into_iter()
            .filter(|k| k.role == engine::store::KeyRole::Admin)
            .map(|k| {
                assert!(k.profile_id.is_none() && k.client_id.is_none());
                assert!(k.id.starts_with("key_") && k.id.len() == 36, "{}", k.id);
                (k.name, k.key_hash, k.key_prefix)
            })
            .collect()
    }
}

fn sha_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn read_key(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let key = text
        .strip_suffix('\n')
        .expect("trailing newline")
        .to_string();
    assert!(!key.contains('\n'));
    assert!(key.starts_with("bae_admin_"));
    let hex = &key["bae_admin_".len()..];
    assert_eq!(hex.len(), 48);
    assert!(hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    key
}

#[test]
fn first_boot_generates_key_file_0600() {
    let f = Fixture::new("boot-gen");
    let s = f.settings();
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Generated);
    let key = read_key(&s.key_file);
    let mode = std::fs::metadata(&s.key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let rows = f.admin_rows();
    assert_eq!(
        rows,
        vec![(
            "bootstrap-admin".into(),
            sha_hex(&key),
            key[..8].to_string()
        )]
    );
    assert_eq!(&rows[0].2, "bae_admi");

    // Restart: row 3, key file untouched (C-209).
    let before = std::fs::metadata(&s.key_file).unwrap().modified().unwrap();
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Existing);
    assert_eq!(read_key(&s.key_file), key);
    assert_eq!(
        std::fs::metadata(&s.key_file).unwrap().modified().unwrap(),
        before
    );
    assert_eq!(f.admin_rows().len(), 1);
}

#[test]
fn rotation_revokes_and_rewrites() {
    let f = Fixture::new("boot-rot");
    let mut s = f.settings();
    f.run(&s).unwrap();
    let old = read_key(&s.key_file);
    // A hash file is ignored on rotation.
    std::fs::write(&s.hash_file, "garbage").unwrap();
    s.rotate = true;
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Rotated);
    let new = read_key(&s.key_file);
    assert_ne!(old, new);
    let rows = f.admin_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1, sha_hex(&new));
    assert_eq!(
        std::fs::metadata(&s.key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn rotation_without_key_file_is_fine() {
    let f = Fixture::new("boot-rot2");
    let mut s = f.settings();
    s.rotate = true;
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Rotated);
    read_key(&s.key_file);
}

#[test]
fn disabled_touches_nothing() {
    let f = Fixture::new("boot-dis");
    let mut s = f.settings();
    s.disabled = true;
    s.rotate = true;
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Disabled);
    assert!(!s.key_file.exists());
    assert!(f.admin_rows().is_empty());
}

#[test]
fn stale_key_file_is_overwritten() {
    let f = Fixture::new("boot-stale");
    let s = f.settings();
    let stale = format!("bae_admin_{}\n", "0".repeat(48));
    std::fs::write(&s.key_file, &stale).unwrap();
    std::fs::set_permissions(&s.key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Generated);
    let key = read_key(&s.key_file);
    assert_ne!(format!("{key}\n"), stale);
    assert_eq!(f.admin_rows()[0].1, sha_hex(&key));
    assert_eq!(
        std::fs::metadata(&s.key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn hash_file_is_ingested() {
    let f = Fixture::new("boot-hash");
    let s = f.settings();
    let plaintext = format!("bae_admin_{}", "ab".repeat(24));
    std::fs::write(
        &s.hash_file,
        format!(
            r#"{{"key_hash":"{}","prefix":"bae_admin_abab","name":"shared-admin"}}"#,
            sha_hex(&plaintext)
        ),
    )
    .unwrap();
    assert_eq!(
        f.run(&s).unwrap(),
        BootstrapOutcome::Ingested {
            name: "shared-admin".into()
        }
    );
    assert!(!s.key_file.exists(), "key file must not be written");
    assert_eq!(
        f.admin_rows(),
        vec![(
            "shared-admin".into(),
            sha_hex(&plaintext),
            "bae_admin_abab".into()
        )]
    );
    // Next boot: the row exists, nothing happens.
    assert_eq!(f.run(&s).unwrap(), BootstrapOutcome::Existing);
}

#[test]
fn hash_file_default_name_and_argon2() {
    let f = Fixture::new("boot-argon");
    let s = f.settings();
    let phc =
        "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$ZXhhbXBsZWhhc2hleGFtcGxlaGFzaA";
    std::fs::write(
        &s.hash_file,
        serde_json::json!({"key_hash": phc, "prefix": "bae_admin_1a2b"}).to_string(),
    )
    .unwrap();
    assert_eq!(
        f.run(&s).unwrap(),
        BootstrapOutcome::Ingested {
            name: "provisioned-admin".into()
        }
    );
    assert_eq!(f.admin_rows()[0].1, phc, "stored verbatim");
}

#[test]
fn bad_hash_files_are_usage_errors() {
    let cases = [
        (r#"{"key_hash":"ABCDEF","prefix":"p"}"#, "key_hash"),
        (
            &*format!(r#"{{"key_hash":"{}","prefix":"p"}}"#, "A".repeat(64)),
            "key_hash",
        ),
        (
            &*format!(r#"{{"key_hash":"{}","prefix":"p"}}"#, "a".repeat(63)),
            "key_hash",
        ),
        (
            r#"{"key_hash":"$argon2id$v=19$nonsense","prefix":"p"}"#,
            "key_hash",
        ),
        (
            &*format!(r#"{{"key_hash":"{}"}}"#, "a".repeat(64)),
            "prefix",
        ),
        (
            &*format!(r#"{{"key_hash":"{}","prefix":"  "}}"#, "a".repeat(64)),
            "prefix",
        ),
        ("not json", "JSON"),
        ("[1]", "object"),
    ];
    for (content, needle) in cases {
        let f = Fixture::new("boot-bad");
        let s = f.settings();
        std::fs::write(&s.hash_file, content).unwrap();
        let err = f.run(&s).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{content}");
        let text = err.to_string();
        assert!(
            text.contains(&*s.hash_file.display().to_string()),
            "names the file: {text}"
        );
        assert!(text.contains(needle), "{content}: {text}");
        assert!(f.admin_rows().is_empty());
        assert!(!s.key_file.exists());
    }
}

#[test]
fn unwritable_key_file_is_runtime_error_and_rolls_back() {
    let f = Fixture::new("boot-unwritable");
    let mut s = f.settings();
    s.key_file = f.dir.join("no-such-dir").join("admin-key.pem");
    let err = f.run(&s).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(matches!(err, BootstrapError::KeyFile { .. }), "{err:?}");
    assert!(f.admin_rows().is_empty(), "row rolled back");
}
