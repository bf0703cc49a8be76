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

/// Environment variables, listed after the options in the help.
const ENVIRONMENT: &str = "\
Environment: BAE_ADDR, BAE_ADMIN_ADDR, BAE_DB_PATH, BAE_LOG, BAE_OTEL_LOG,
BAE_SHUTDOWN_TIMEOUT, BAE_CONFIG, BAE_TURN_TIMEOUT, BAE_SUBAGENT_TIMEOUT,
BAE_MAX_SUBAGENTS_PER_SESSION, BAE_ADMIN_KEY_FILE, BAE_ADMIN_KEY_HASH_FILE,
BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH, BAE_SANDBOX_DRIVER, BAE_MAX_HEAD_BYTES,
BAE_MAX_HEADERS, BAE_MAX_BODY_BYTES, BAE_PROVIDER_TIMEOUT, BAE_SQLITE_SYNCHRONOUS
(see docs/configuration.md).";

/// The command line as `clap` derives. Help and version are ours (spec
/// 04 §2: help goes to stderr, `version` prints two lines), so clap's
/// own flags and `help` subcommand are off.
#[derive(clap::Parser, Debug)]
#[command(
    name = "baesrv",
    about = "The BAE session server",
    disable_help_flag = true,
    disable_version_flag = true,
    disable_help_subcommand = true,
    args_override_self = true,
    override_usage = "baesrv [--config <path>] [serve] [SERVE OPTIONS]   (the default)\n       \
                      baesrv [--config <path>] migrate\n       \
                      baesrv version | --version | -V\n       \
                      baesrv help | --help | -h",
    after_help = ENVIRONMENT
)]
struct Args {
    /// bae-config.toml location (overrides BAE_CONFIG)
    #[arg(long, global = true, value_name = "path",
          value_parser = |v: &str| path_value(FLAG_CONFIG, v))]
    config: Option<PathBuf>,
    /// Plaintext admin key file (overrides BAE_ADMIN_KEY_FILE)
    #[arg(long, global = true, value_name = "path",
          value_parser = |v: &str| path_value(FLAG_KEY_FILE, v))]
    admin_key_file: Option<PathBuf>,
    /// Pre-provisioned admin key hash file (overrides BAE_ADMIN_KEY_HASH_FILE)
    #[arg(long, global = true, value_name = "path",
          value_parser = |v: &str| path_value(FLAG_HASH_FILE, v))]
    admin_key_hash_file: Option<PathBuf>,
    /// Revoke current admin keys and mint a fresh one
    #[arg(long, global = true)]
    rotate_admin_key: bool,
    /// Serve the admin port without authentication
    #[arg(long, global = true)]
    dangerously_disable_admin_auth: bool,
    /// Print the version
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// Print this help
    #[arg(short = 'h', long = "help")]
    help: bool,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(clap::Subcommand, Debug, Clone, Copy)]
enum Sub {
    /// Run the server (the default)
    Serve,
    /// Apply database migrations and exit
    Migrate,
    /// Print the version
    Version,
    /// Print this help
    Help,
}

fn path_value(flag: &'static str, v: &str) -> Result<PathBuf, UsageError> {
    if v.is_empty() {
        Err(UsageError::MissingValue { flag })
    } else {
        Ok(PathBuf::from(v))
    }
}

/// Parses the command line. `args` excludes the program name
/// (`std::env::args().skip(1)`).
///
/// Rules (spec 04 §2): the path flags accept `--flag <v>` and `--flag=<v>`
/// anywhere on the line (a repeated flag: the last one wins); a missing or
/// empty value is an error. The first positional argument selects the
/// subcommand (none → `serve`); anything unrecognised, including an unknown
/// `--flag` or a second positional argument, is `unknown command "<arg>"`.
/// Rotate + disable flags together are rejected regardless of subcommand,
/// after every other check; between the others, the first on the line wins.
pub fn parse_cli(args: &[String]) -> Result<Cli, UsageError> {
    use clap::Parser;
    let argv = std::iter::once("baesrv".to_string()).chain(args.iter().cloned());
    let parsed = Args::try_parse_from(argv).map_err(|e| usage_error(&e, args))?;
    // `version`/`help` may be spelled as a flag or a subcommand, once.
    let mut selectors: Vec<(usize, Command)> = Vec::new();
    let position = |names: &[&str]| args.iter().position(|a| names.contains(&a.as_str()));
    if parsed.version {
        selectors.push((
            position(&["--version", "-V"]).unwrap_or(0),
            Command::Version,
        ));
    }
    if parsed.help {
        selectors.push((position(&["--help", "-h"]).unwrap_or(0), Command::Help));
    }
    if let Some(sub) = parsed.command {
        let (name, command) = match sub {
            Sub::Serve => ("serve", Command::Serve),
            Sub::Migrate => ("migrate", Command::Migrate),
            Sub::Version => ("version", Command::Version),
            Sub::Help => ("help", Command::Help),
        };
        selectors.push((position(&[name]).unwrap_or(0), command));
    }
    selectors.sort_by_key(|(i, _)| *i);
    if let Some((i, _)) = selectors.get(1) {
        return Err(UsageError::UnknownCommand {
            arg: args.get(*i).cloned().unwrap_or_default(),
        });
    }
    let command = selectors.first().map_or(Command::Serve, |(_, c)| *c);
    if parsed.rotate_admin_key && parsed.dangerously_disable_admin_auth {
        return Err(UsageError::RotateWithDisableFlag);
    }
    Ok(Cli {
        command,
        config_path: parsed.config,
        admin_key_file: parsed.admin_key_file,
        admin_key_hash_file: parsed.admin_key_hash_file,
        rotate_admin_key: parsed.rotate_admin_key,
        disable_admin_auth: parsed.dangerously_disable_admin_auth,
    })
}

/// clap's error in spec 04's words: a path flag without a value, else
/// `unknown command "<arg>"` naming the argument as it was typed.
fn usage_error(e: &clap::Error, args: &[String]) -> UsageError {
    use clap::error::{ContextKind, ErrorKind};
    let ctx = |k| e.get(k).map(ToString::to_string).unwrap_or_default();
    if let Some(u) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<UsageError>()) {
        return u.clone();
    }
    // `--config <path>` → `--config`.
    let invalid = ctx(ContextKind::InvalidArg);
    let flag = invalid.split([' ', '=']).next().unwrap_or("");
    let path_flag = [FLAG_CONFIG, FLAG_KEY_FILE, FLAG_HASH_FILE]
        .into_iter()
        .find(|f| *f == flag);
    let arg = match e.kind() {
        ErrorKind::InvalidValue | ErrorKind::NoEquals if path_flag.is_some() => {
            return UsageError::MissingValue {
                flag: path_flag.unwrap_or(FLAG_CONFIG),
            }
        }
        ErrorKind::InvalidSubcommand => ctx(ContextKind::InvalidSubcommand),
        // A switch given a value: the argument as typed (`--rotate-admin-key=yes`).
        ErrorKind::TooManyValues | ErrorKind::NoEquals => args
            .iter()
            .find(|a| a.starts_with(&format!("{flag}=")))
            .cloned()
            .unwrap_or(invalid),
        _ => invalid,
    };
    UsageError::UnknownCommand { arg }
}

/// Usage text printed by `help` (stderr) and after an unknown command.
pub fn usage_text() -> String {
    use clap::CommandFactory;
    Args::command().render_help().to_string()
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

    /// clap's own consistency checks over the flag set.
    #[test]
    fn flag_set_is_consistent() {
        use clap::CommandFactory;
        Args::command().debug_assert();
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
