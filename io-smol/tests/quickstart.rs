//! docs/quickstart.md stays true.
//!
//! - Its mock-provider path runs as written: `testkit/scripts/quickstart-check.sh`
//!   executes the page's marked shell blocks against the built `baesrv`,
//!   `baectl` and `bae-mock-provider`, on free ports in a temp dir, and checks
//!   that the first turn's reply arrives over curl and over the Python example.
//! - Its Anthropic, OpenAI and local-server snippets parse and validate with
//!   the config loader, and, with `base_url` pointed at testkit's in-process
//!   mock provider, the same commands produce a turn in the snippet's wire
//!   format, model and credential header.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use io_smol::config::{parse_file_str, substitute, FileConfig, ProviderKind};
use testkit::{MockProvider, Reply};

const DOC: &str = include_str!("../../docs/quickstart.md");
const DOC_PATH: &str = "docs/quickstart.md";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The page's marked blocks, `(tag, body)` in order: a `<!-- qs:TAG -->`
/// line followed by a fenced block (the same rule as the check script).
fn blocks() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        let Some(tag) = line
            .trim_end()
            .strip_prefix("<!-- qs:")
            .and_then(|t| t.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or("");
        assert!(
            fence.starts_with("```"),
            "{DOC_PATH}: marker qs:{tag} is not followed by a code fence"
        );
        let mut body = String::new();
        for l in lines.by_ref() {
            if l.trim_end() == "```" {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        out.push((tag.split_whitespace().collect::<Vec<_>>().join(" "), body));
    }
    out
}

fn block(tag: &str) -> String {
    let found: Vec<String> = blocks()
        .into_iter()
        .filter(|(t, _)| t == tag)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(found.len(), 1, "{DOC_PATH}: want one qs:{tag} block");
    found.into_iter().next().unwrap()
}

fn config_of(tag: &str) -> FileConfig {
    let text = block(tag);
    parse_file_str(&text, Path::new("bae-config.toml"))
        .unwrap_or_else(|e| panic!("{DOC_PATH}: the qs:{tag} snippet does not validate: {e}"))
}

/// The single provider entry of a snippet, which the profile step names.
fn main_entry(cfg: &FileConfig) -> &io_smol::config::ProviderEntry {
    assert_eq!(cfg.providers.len(), 1, "one provider entry per snippet");
    cfg.provider("main")
        .expect("the snippet's entry is named \"main\" (the profile step uses it)")
}

#[test]
fn every_block_has_a_known_marker() {
    let tags: Vec<String> = blocks().into_iter().map(|(t, _)| t).collect();
    for t in &tags {
        let known = ["build", "env", "run", "mock"].contains(&t.as_str())
            || t.starts_with("config ")
            || t.starts_with("file ");
        assert!(known, "{DOC_PATH}: unknown marker qs:{t}");
    }
    for want in ["config anthropic", "config openai", "config local", "mock"] {
        assert!(
            tags.iter().any(|t| t == want),
            "{DOC_PATH}: no qs:{want} block"
        );
    }
    let runs: String = blocks()
        .into_iter()
        .filter(|(t, _)| t == "run")
        .map(|(_, b)| b)
        .collect();
    assert!(
        runs.contains("--primary-provider main"),
        "the profile step must name the snippets' provider entry"
    );
}

#[test]
fn config_snippets_parse_and_validate() {
    let get = |name: &str| Some(format!("value-of-{name}"));

    let cfg = config_of("config anthropic");
    let p = main_entry(&cfg);
    assert_eq!(p.kind, ProviderKind::Anthropic);
    assert_eq!(p.base_url, None);
    assert_eq!(p.effective_base_url(), "https://api.anthropic.com");
    assert_eq!(
        substitute(&p.auth_token, get).unwrap(),
        "value-of-ANTHROPIC_API_KEY"
    );

    let cfg = config_of("config openai");
    let p = main_entry(&cfg);
    assert_eq!(p.kind, ProviderKind::Openai);
    assert_eq!(p.base_url, None);
    assert_eq!(p.effective_base_url(), "https://api.openai.com");
    assert_eq!(
        substitute(&p.auth_token, get).unwrap(),
        "value-of-OPENAI_API_KEY"
    );

    let cfg = config_of("config local");
    let p = main_entry(&cfg);
    assert_eq!(p.kind, ProviderKind::Openai);
    assert_eq!(p.api_base_url(), "http://127.0.0.1:11434");
    assert_eq!(
        format!("{}{}", p.api_base_url(), p.kind.path()),
        "http://127.0.0.1:11434/v1/chat/completions",
        "Ollama's OpenAI-compatible endpoint"
    );
    assert_eq!(substitute(&p.auth_token, get).unwrap(), "unused");

    // The mock path writes its config with a heredoc; its body must be a
    // valid file too once the shell expands the address.
    let mock = blocks()
        .into_iter()
        .find(|(t, b)| t == "mock" && b.contains("<<EOF\n"))
        .map(|(_, b)| b)
        .expect("a qs:mock block writes the config with a heredoc");
    let (_, rest) = mock.split_once("<<EOF\n").expect("heredoc start");
    let (toml, _) = rest.split_once("\nEOF\n").expect("heredoc end");
    let toml = toml.replace("$BAE_MOCK_ADDR", "127.0.0.1:9090");
    let cfg = parse_file_str(&toml, Path::new("bae-config.toml"))
        .unwrap_or_else(|e| panic!("the mock config does not validate: {e}"));
    let p = main_entry(&cfg);
    assert_eq!(p.api_base_url(), "http://127.0.0.1:9090");
}

/// The folder with `baesrv`, `baectl` and a fresh `bae-mock-provider`.
/// `bae-mock-provider` is a testkit binary, which cargo does not build for
/// io-smol's tests, so it is built here, next to `baesrv`.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let baesrv = Path::new(env!("CARGO_BIN_EXE_baesrv"));
        let dir = baesrv.parent().expect("bin dir").to_path_buf();
        let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
        let target_dir = dir.parent().expect("target dir");
        let cargo = std::env::var("CARGO")
            .ok()
            .or(option_env!("CARGO").map(str::to_string))
            .unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.args([
            "build",
            "-j",
            "2",
            "-p",
            "testkit",
            "--bin",
            "bae-mock-provider",
        ])
        .current_dir(repo_root())
        .env("CARGO_TARGET_DIR", target_dir);
        match profile {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("cannot run {cargo} to build bae-mock-provider: {e}"));
        assert!(status.success(), "building bae-mock-provider failed");
        for b in ["baesrv", "baectl", "bae-mock-provider"] {
            assert!(
                dir.join(b).is_file(),
                "{} is missing after the build",
                dir.join(b).display()
            );
        }
        dir
    })
}

/// Runs the check script; panics with its whole output on failure.
fn run_check(env: &[(&str, String)]) -> String {
    let script = repo_root().join("testkit/scripts/quickstart-check.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .env("QS_BIN_DIR", bin_dir())
        .env_remove("QS_KEEP");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "quickstart-check failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn mock_path_runs_as_written() {
    let out = run_check(&[("QS_PROVIDER", "mock".into())]);
    assert!(
        out.contains("quickstart-check: ok (provider mock)"),
        "{out}"
    );
    assert!(
        out.contains(
            "INFO io_smol::app: admin key written to ./bae-data/admin-key.pem; next: baectl"
        ),
        "the first-boot hint: {out}"
    );
}

/// Runs the page with the `qs:config NAME` snippet against an in-process
/// mock and checks what the provider received.
fn snippet_turn(name: &str, path: &str, header: (&str, &str)) {
    let model = main_entry(&config_of(&format!("config {name}")))
        .model
        .clone();
    let mock = MockProvider::start();
    let reply = format!("a reply in the {name} wire format");
    mock.set_default(Reply::text(reply.clone()));
    let out = run_check(&[
        ("QS_PROVIDER", name.into()),
        ("QS_EXTERNAL_MOCK", "1".into()),
        ("QS_EXPECT_REPLY", reply),
        ("BAE_MOCK_ADDR", mock.addr.to_string()),
    ]);
    assert!(
        out.contains(&format!("quickstart-check: ok (provider {name})")),
        "{out}"
    );
    let requests = mock.requests();
    // One turn over curl, one from the Python example.
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for r in &requests {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", path));
        assert_eq!(r.body["model"], model.as_str());
        assert_eq!(r.header(header.0), Some(header.1), "{:?}", r.headers);
    }
}

#[test]
fn anthropic_snippet_produces_a_turn() {
    snippet_turn(
        "anthropic",
        "/v1/messages",
        ("x-api-key", "qs-check-anthropic-key"),
    );
}

#[test]
fn openai_snippet_produces_a_turn() {
    snippet_turn(
        "openai",
        "/v1/chat/completions",
        ("authorization", "Bearer qs-check-openai-key"),
    );
}

#[test]
fn local_server_snippet_produces_a_turn() {
    snippet_turn(
        "local",
        "/v1/chat/completions",
        ("authorization", "Bearer unused"),
    );
}
