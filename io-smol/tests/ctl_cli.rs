//! The command-line surface `clap` gives `baectl` and `baesrv` (issue 39):
//! help for every command, `--version`, unknown flags and commands with
//! suggestions, and shell completions checked in the real shells (bash and
//! fish run the completion; zsh, which needs a terminal to complete,
//! parses the script). No server: these never reach the network.

use std::io::Write;
use std::process::{Command, Stdio};

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(bin: &str, args: &[&str]) -> Out {
    let mut cmd = Command::new(bin);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(&k);
        }
    }
    let out = cmd.args(args).output().expect("run");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn baectl(args: &[&str]) -> Out {
    run(env!("CARGO_BIN_EXE_baectl"), args)
}

fn baesrv(args: &[&str]) -> Out {
    run(env!("CARGO_BIN_EXE_baesrv"), args)
}

/// Runs `shell` with `script` on stdin; returns stdout. Fails loudly when
/// the shell is missing (testkit/scripts/install-test-deps.sh installs it).
fn shell(shell: &str, args: &[&str], script: &str) -> String {
    let mut child = Command::new(shell)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{shell} is needed for this test ({e})"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{shell}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn completion_script(name: &str) -> std::path::PathBuf {
    let out = baectl(&["completions", name]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let path =
        std::env::temp_dir().join(format!("baectl-completion-{}-{name}", std::process::id()));
    std::fs::write(&path, out.stdout).unwrap();
    path
}

#[test]
fn help_of_every_command_goes_to_stdout() {
    for args in [
        &["--help"][..],
        &["help"],
        &["help", "keys"],
        &["keys", "--help"],
        &["keys", "create", "-h"],
        &["create", "profile", "--help"],
        &["completions", "--help"],
    ] {
        let out = baectl(args);
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        assert!(
            out.stdout.contains("Usage: baectl"),
            "{args:?}: {}",
            out.stdout
        );
        assert!(out.stderr.is_empty(), "{args:?}: {}", out.stderr);
    }
    // A command's own help shows its own options, globals under their own
    // heading.
    let help = baectl(&["profiles", "update", "--help"]).stdout;
    for needle in [
        "Usage: baectl profiles update [OPTIONS] <ID> [PRIMARY_PROVIDER]",
        "--clear-available-sandboxes",
        "--fallback-provider <NAME>",
        "[alias: --fallback]",
        "Global options:",
        "--admin-addr <HOST:PORT|URL>",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let keys = baectl(&["help", "keys"]).stdout;
    for verb in ["list", "create", "revoke"] {
        assert!(keys.contains(&format!("  {verb} ")), "{verb}: {keys}");
    }
}

#[test]
fn version_flag_and_command() {
    let want = format!("baectl {}\n", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["-V"], &["version"]] {
        let out = baectl(args);
        assert_eq!(out.code, Some(0));
        assert_eq!(out.stdout, want, "{args:?}");
    }
}

#[test]
fn unknown_commands_and_options_are_usage_errors_with_suggestions() {
    let out = baectl(&["profils", "list"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stdout.is_empty());
    let mut lines = out.stderr.lines();
    assert_eq!(
        lines.next(),
        Some("error: usage: unknown command \"profils\"")
    );
    let hint = lines.next().unwrap();
    assert!(
        hint.starts_with("hint: did you mean ") && hint.contains("\"profiles\""),
        "{hint}"
    );

    let out = baectl(&["profiles", "list", "--limt", "3"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "error: usage: unknown option \"--limt\" for \"profiles list\"\n\
         hint: did you mean \"--limit\"? run \"baectl --help\" for the command list\n"
    );

    let out = baectl(&["keys", "lst"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.starts_with(
            "error: usage: unknown command \"keys lst\" \
             (expected keys list, keys create or keys revoke)\n"
        ),
        "{}",
        out.stderr
    );

    let out = baectl(&["sessions"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .starts_with("error: usage: \"sessions\" needs a subcommand: list, events, fork, rewind, export, import or lineage\n"),
        "{}",
        out.stderr
    );

    let out = baectl(&["completions", "tcsh"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .starts_with("error: usage: invalid value \"tcsh\" for SHELL"),
        "{}",
        out.stderr
    );
}

#[test]
fn bash_completion_completes_commands_and_options() {
    let script = completion_script("bash");
    let complete = |words: &[&str]| {
        let line = words.join(" ");
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        shell(
            "bash",
            &[],
            &format!(
                "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{line}'\n\
                 COMP_POINT=${{#COMP_LINE}}\n_baectl baectl '{}' '{}'\n\
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
                script.display(),
                quoted.join(" "),
                words.len() - 1,
                words[words.len() - 1],
                words[words.len().saturating_sub(2)],
            ),
        )
    };
    let top: Vec<String> = complete(&["baectl", "pro"])
        .lines()
        .map(str::to_string)
        .collect();
    assert!(top.contains(&"profiles".to_string()), "{top:?}");
    assert!(top.contains(&"providers".to_string()), "{top:?}");
    assert!(!top.contains(&"keys".to_string()), "{top:?}");
    let keys = complete(&["baectl", "keys", ""]);
    for w in ["list", "create", "revoke", "--json"] {
        assert!(keys.lines().any(|l| l == w), "{w}: {keys}");
    }
    let _ = std::fs::remove_file(script);
}

#[test]
fn fish_completion_completes_commands() {
    let script = completion_script("fish");
    let out = shell(
        "fish",
        &["--no-config"],
        &format!(
            "source '{}'\ncomplete -C 'baectl pro'\necho ===\ncomplete -C 'baectl keys '\n",
            script.display()
        ),
    );
    let (top, keys) = out.split_once("===\n").unwrap();
    let first = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect()
    };
    let top = first(top);
    assert!(top.contains(&"profiles".to_string()), "{top:?}");
    assert!(top.contains(&"providers".to_string()), "{top:?}");
    let keys = first(keys);
    for w in ["list", "create", "revoke"] {
        assert!(keys.contains(&w.to_string()), "{w}: {keys:?}");
    }
    let _ = std::fs::remove_file(script);
}

#[test]
fn zsh_completion_is_a_valid_compdef() {
    let script = completion_script("zsh");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.starts_with("#compdef baectl\n"), "{}", &text[..40]);
    for w in ["profiles", "sandbox-status", "--admin-token"] {
        assert!(text.contains(w), "{w}");
    }
    // `zsh -n`: the script parses.
    shell("zsh", &["-n", &script.display().to_string()], "");
    let _ = std::fs::remove_file(script);
}

#[test]
fn baesrv_help_version_and_unknown_flags() {
    // Spec 04 §2: help on stderr, version's two lines on stdout.
    for args in [&["help"][..], &["--help"], &["-h"]] {
        let out = baesrv(args);
        assert_eq!(out.code, Some(0), "{args:?}");
        assert!(out.stdout.is_empty());
        for needle in [
            "baesrv version | --version | -V",
            "--config <path>",
            "--dangerously-disable-admin-auth",
            "BAE_SANDBOX_DRIVER",
        ] {
            assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
        }
    }
    let out = baesrv(&["--verbose"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr
            .starts_with("baesrv: unknown command \"--verbose\"\n"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("Usage: baesrv"), "usage follows");
    let out = baesrv(&["--rotate-admin-key=yes"]);
    assert_eq!(out.code, Some(2));
    assert!(out
        .stderr
        .starts_with("baesrv: unknown command \"--rotate-admin-key=yes\"\n"));
    let out = baesrv(&["serve", "--admin-key-file"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "baesrv: --admin-key-file requires a path argument\n"
    );
}
