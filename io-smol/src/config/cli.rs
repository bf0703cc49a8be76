//! Command-line parsing (spec 04 §2).

use std::path::PathBuf;

use super::UsageError;

/// The selected subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `serve` (also the default when no subcommand is given).
    Serve,
    /// `migrate`.
    Migrate,
    /// `version`, `--version`, `-V`.
    Version,
    /// `help`, `--help`, `-h`.
    Help,
}

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cli {
    pub command: Command,
    /// `--config <path>`; wins over `BAE_CONFIG`.
    pub config_path: Option<PathBuf>,
    /// `--admin-key-file <path>`; wins over `BAE_ADMIN_KEY_FILE`.
    pub admin_key_file: Option<PathBuf>,
    /// `--admin-key-hash-file <path>`; wins over `BAE_ADMIN_KEY_HASH_FILE`.
    pub admin_key_hash_file: Option<PathBuf>,
    /// `--rotate-admin-key`.
    pub rotate_admin_key: bool,
    /// `--dangerously-disable-admin-auth`.
    pub disable_admin_auth: bool,
}

const FLAG_CONFIG: &str = "--config";
const FLAG_KEY_FILE: &str = "--admin-key-file";
const FLAG_HASH_FILE: &str = "--admin-key-hash-file";
const FLAG_ROTATE: &str = "--rotate-admin-key";
const FLAG_DISABLE: &str = "--dangerously-disable-admin-auth";

/// Parses the command line. `args` excludes the program name
/// (`std::env::args().skip(1)`).
///
/// Rules (spec 04 §2): the path flags accept `--flag <v>` and `--flag=<v>`
/// anywhere on the line (a repeated flag: the last one wins); a missing or
/// empty value is an error. After removing the flags the first remaining
/// argument selects the subcommand (none → `serve`); anything unrecognised,
/// including an unknown `--flag` or a second positional argument, is
/// `unknown command "<arg>"`. Rotate + disable flags together are rejected
/// regardless of subcommand. Errors are reported in that order: flag values
/// first, then the subcommand, then rotate+disable.
pub fn parse_cli(args: &[String]) -> Result<Cli, UsageError> {
    let mut config_path = None;
    let mut admin_key_file = None;
    let mut admin_key_hash_file = None;
    let mut rotate_admin_key = false;
    let mut disable_admin_auth = false;
    let mut rest: Vec<&str> = Vec::new();

    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (arg, None),
        };
        let slot = match name {
            FLAG_CONFIG => Some((FLAG_CONFIG, &mut config_path)),
            FLAG_KEY_FILE => Some((FLAG_KEY_FILE, &mut admin_key_file)),
            FLAG_HASH_FILE => Some((FLAG_HASH_FILE, &mut admin_key_hash_file)),
            _ => None,
        };
        if let Some((flag, slot)) = slot {
            let value = match inline {
                Some(v) => Some(v),
                None => {
                    let v = args.get(i).map(String::as_str);
                    if v.is_some() {
                        i += 1;
                    }
                    v
                }
            };
            match value {
                Some(v) if !v.is_empty() => *slot = Some(PathBuf::from(v)),
                _ => return Err(UsageError::MissingValue { flag }),
            }
            continue;
        }
        match arg {
            FLAG_ROTATE => rotate_admin_key = true,
            FLAG_DISABLE => disable_admin_auth = true,
            _ => rest.push(arg),
        }
    }

    let command = match rest.first().copied() {
        None | Some("serve") => Command::Serve,
        Some("migrate") => Command::Migrate,
        Some("version" | "--version" | "-V") => Command::Version,
        Some("help" | "--help" | "-h") => Command::Help,
        Some(other) => {
            return Err(UsageError::UnknownCommand {
                arg: other.to_string(),
            })
        }
    };
    if let Some(extra) = rest.get(1) {
        return Err(UsageError::UnknownCommand {
            arg: (*extra).to_string(),
        });
    }
    if rotate_admin_key && disable_admin_auth {
        return Err(UsageError::RotateWithDisableFlag);
    }
    Ok(Cli {
        command,
        config_path,
        admin_key_file,
        admin_key_hash_file,
        rotate_admin_key,
        disable_admin_auth,
    })
}

/// Usage text printed by `help` (stderr) and after an unknown command.
pub fn usage_text() -> &'static str {
    "\
Usage:
  baesrv [--config <path>] [serve] [SERVE OPTIONS]   run the server (default)
  baesrv [--config <path>] migrate                   apply database migrations and exit
  baesrv version | --version | -V                    print the version
  baesrv help | --help | -h                          print this help

Options:
  --config <path>                     bae-config.toml location (overrides BAE_CONFIG)

SERVE OPTIONS:
  --admin-key-file <path>             plaintext admin key file (overrides BAE_ADMIN_KEY_FILE)
  --admin-key-hash-file <path>        pre-provisioned admin key hash file
                                      (overrides BAE_ADMIN_KEY_HASH_FILE)
  --rotate-admin-key                  revoke current admin keys and mint a fresh one
  --dangerously-disable-admin-auth    serve the admin port without authentication

Environment: BAE_ADDR, BAE_ADMIN_ADDR, BAE_DB_PATH, BAE_LOG, BAE_OTEL_LOG,
BAE_SHUTDOWN_TIMEOUT, BAE_CONFIG, BAE_TURN_TIMEOUT, BAE_SUBAGENT_TIMEOUT,
BAE_MAX_SUBAGENTS_PER_SESSION, BAE_ADMIN_KEY_FILE, BAE_ADMIN_KEY_HASH_FILE,
BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH, BAE_SANDBOX_DRIVER, BAE_MAX_HEAD_BYTES,
BAE_MAX_HEADERS, BAE_MAX_BODY_BYTES, BAE_PROVIDER_TIMEOUT, BAE_SQLITE_SYNCHRONOUS
(see docs/configuration.md).
"
}

/// Output of `baesrv version` (stdout), newline-terminated:
/// `baesrv <version>` then `api versions: v1`.
pub fn version_text() -> String {
    format!("baesrv {}\napi versions: v1\n", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cli, UsageError> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_cli(&v)
    }

    #[test]
    fn default_is_serve() {
        let cli = p(&[]).unwrap();
        assert_eq!(cli.command, Command::Serve);
        assert_eq!(cli.config_path, None);
        assert!(!cli.rotate_admin_key && !cli.disable_admin_auth);
    }

    #[test]
    fn subcommands_and_aliases() {
        assert_eq!(p(&["serve"]).unwrap().command, Command::Serve);
        assert_eq!(p(&["migrate"]).unwrap().command, Command::Migrate);
        for a in ["version", "--version", "-V"] {
            assert_eq!(p(&[a]).unwrap().command, Command::Version);
        }
        for a in ["help", "--help", "-h"] {
            assert_eq!(p(&[a]).unwrap().command, Command::Help);
        }
    }

    #[test]
    fn path_flags_both_forms_anywhere() {
        let cli = p(&[
            "--config",
            "/a.toml",
            "serve",
            "--admin-key-file=/k.pem",
            "--admin-key-hash-file",
            "/h.pem",
        ])
        .unwrap();
        assert_eq!(cli.command, Command::Serve);
        assert_eq!(cli.config_path, Some(PathBuf::from("/a.toml")));
        assert_eq!(cli.admin_key_file, Some(PathBuf::from("/k.pem")));
        assert_eq!(cli.admin_key_hash_file, Some(PathBuf::from("/h.pem")));

        let cli = p(&["migrate", "--config=/b.toml"]).unwrap();
        assert_eq!(cli.command, Command::Migrate);
        assert_eq!(cli.config_path, Some(PathBuf::from("/b.toml")));

        // A value containing '=' is kept whole.
        let cli = p(&["--config=/x=y.toml"]).unwrap();
        assert_eq!(cli.config_path, Some(PathBuf::from("/x=y.toml")));
        // Last one wins.
        let cli = p(&["--config", "/1", "--config", "/2"]).unwrap();
        assert_eq!(cli.config_path, Some(PathBuf::from("/2")));
    }

    #[test]
    fn missing_or_empty_value() {
        for (args, flag) in [
            (&["--config"][..], "--config"),
            (&["serve", "--config="][..], "--config"),
            (&["--config", ""][..], "--config"),
            (&["--admin-key-file"][..], "--admin-key-file"),
            (&["--admin-key-hash-file="][..], "--admin-key-hash-file"),
        ] {
            let e = p(args).unwrap_err();
            assert_eq!(e, UsageError::MissingValue { flag });
            assert_eq!(e.to_string(), format!("{flag} requires a path argument"));
            assert_eq!(e.exit_code(), 2);
            assert!(!e.show_usage());
        }
    }

    #[test]
    fn admin_switches() {
        let cli = p(&["serve", "--rotate-admin-key"]).unwrap();
        assert!(cli.rotate_admin_key);
        let cli = p(&["--dangerously-disable-admin-auth"]).unwrap();
        assert!(cli.disable_admin_auth);
        // Accepted syntactically with every subcommand.
        assert_eq!(
            p(&["migrate", "--rotate-admin-key"]).unwrap().command,
            Command::Migrate
        );
    }

    #[test]
    fn unknown_commands_c226() {
        let e = p(&["frobnicate"]).unwrap_err();
        assert_eq!(e.to_string(), "unknown command \"frobnicate\"");
        assert_eq!(e.stderr_line(), "baesrv: unknown command \"frobnicate\"");
        assert!(e.show_usage());
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            p(&["--verbose"]).unwrap_err(),
            UsageError::UnknownCommand {
                arg: "--verbose".into()
            }
        );
        assert_eq!(
            p(&["serve", "extra"]).unwrap_err(),
            UsageError::UnknownCommand {
                arg: "extra".into()
            }
        );
        // Value-less switches do not take `=value`.
        assert_eq!(
            p(&["--rotate-admin-key=yes"]).unwrap_err(),
            UsageError::UnknownCommand {
                arg: "--rotate-admin-key=yes".into()
            }
        );
    }

    #[test]
    fn rotate_with_disable_flag() {
        let e = p(&[
            "--rotate-admin-key",
            "serve",
            "--dangerously-disable-admin-auth",
        ])
        .unwrap_err();
        assert_eq!(e, UsageError::RotateWithDisableFlag);
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn version_output() {
        let v = version_text();
        let mut lines = v.lines();
        assert!(lines.next().unwrap().starts_with("baesrv "));
        assert_eq!(lines.next(), Some("api versions: v1"));
        assert!(usage_text().contains("--dangerously-disable-admin-auth"));
    }
}
