use super::super::{parse_cli, Command};
use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> Result<Env, ConfigError> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse_env(|k| m.get(k).cloned())
}

fn cli(args: &[&str]) -> Cli {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse_cli(&v).unwrap()
}

#[test]
fn defaults() {
    let e = env_of(&[]).unwrap();
    assert_eq!(e.addr, "0.0.0.0:8080".parse().unwrap());
    assert_eq!(e.admin_addr, "127.0.0.1:8081".parse().unwrap());
    assert_eq!(e.db_path, PathBuf::from("/var/lib/bae/bae.db"));
    assert_eq!(e.log, "info");
    assert_eq!(e.otel_log, "info");
    assert_eq!(e.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(e.config_path, None);
    assert_eq!(e.turn_timeout, Duration::from_secs(120));
    assert_eq!(e.subagent_timeout, Duration::from_secs(600));
    assert_eq!(e.max_subagents_per_session, 8);
    assert_eq!(
        e.admin_key_file,
        PathBuf::from("/var/lib/bae/admin-key.pem")
    );
    assert_eq!(
        e.admin_key_hash_file,
        PathBuf::from("/var/lib/bae/admin-key-hash.pem")
    );
    assert!(!e.disable_admin_auth);
    assert_eq!(e.sandbox_driver, SandboxDriver::Docker);
    assert_eq!(e.max_head_bytes, 16384);
    assert_eq!(e.max_headers, 64);
    assert_eq!(e.max_body_bytes, 1_048_576);
    assert_eq!(e.max_import_bytes, 64 * 1024 * 1024);
    assert_eq!(e.provider_timeout, Duration::from_secs(300));
    assert_eq!(e.sqlite_synchronous, Synchronous::Normal);
    assert_eq!(e.sqlite_cache_kib, 512);
    assert_eq!(e.provider_idle_connections, 64);
    assert_eq!(e.max_page_bytes, 8 * 1024 * 1024);
    assert!(env_of(&[("BAE_MAX_PAGE_BYTES", "0")]).is_err());
    assert_eq!(e.history_cache_bytes, 1024 * 1024);
    assert_eq!(e.history_idle, Duration::from_secs(30));
}

#[test]
fn overload_bounds_are_off_unless_set_and_refuse_junk() {
    let off = env_of(&[]).unwrap().overload;
    assert!(!off.is_on());
    assert_eq!(off.retry_after_s, 1);
    let on = env_of(&[
        ("BAE_OVERLOAD_MAX_WAITING", "100"),
        ("BAE_OVERLOAD_MAX_STORE_BACKLOG", " 5000 "),
        ("BAE_OVERLOAD_RETRY_AFTER", "2"),
    ])
    .unwrap()
    .overload;
    assert_eq!(on.max_waiting, Some(100));
    assert_eq!(on.max_store_backlog, Some(5000));
    assert_eq!(on.retry_after_s, 2);
    for (var, bad) in [
        ("BAE_OVERLOAD_MAX_WAITING", "0"),
        ("BAE_OVERLOAD_MAX_STORE_BACKLOG", "-1"),
        ("BAE_OVERLOAD_RETRY_AFTER", "0"),
        ("BAE_OVERLOAD_MAX_WAITING", "lots"),
    ] {
        let e = env_of(&[(var, bad)]).unwrap_err().to_string();
        assert!(e.contains(var), "{e}");
    }
}

#[test]
fn sqlite_cache_kib() {
    let kib = |v: &str| env_of(&[("BAE_SQLITE_CACHE_KIB", v)]).map(|e| e.sqlite_cache_kib);
    assert_eq!(kib(" 4096 ").unwrap(), 4096);
    assert_eq!(kib("0").unwrap(), 0);
    assert_eq!(kib("2147483647").unwrap(), 2_147_483_647);
    for bad in ["", "-1", "1.5", "lots", "2147483648"] {
        let err = kib(bad).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{bad:?}");
        assert!(err.to_string().contains("BAE_SQLITE_CACHE_KIB"), "{err}");
    }
}

#[test]
fn id_order_is_time_unless_random_is_asked_for() {
    use proto::wire::ids::IdOrder;
    assert_eq!(env_of(&[]).unwrap().id_order, IdOrder::Time);
    let order = |v: &str| env_of(&[("BAE_ID_ORDER", v)]).map(|e| e.id_order);
    assert_eq!(order(" Random ").unwrap(), IdOrder::Random);
    assert_eq!(order("TIME").unwrap(), IdOrder::Time);
    for bad in ["", "sequential", "1"] {
        let err = order(bad).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{bad:?}");
        assert!(err.to_string().contains("BAE_ID_ORDER"), "{err}");
    }
}

#[test]
fn history_cache_limits_take_zero_and_refuse_junk() {
    let e = env_of(&[("BAE_HISTORY_CACHE_BYTES", "0"), ("BAE_HISTORY_IDLE", "0")]).unwrap();
    assert_eq!(e.history_cache_bytes, 0);
    assert_eq!(e.history_idle, Duration::ZERO);
    for (var, bad) in [
        ("BAE_HISTORY_CACHE_BYTES", "-1"),
        ("BAE_HISTORY_IDLE", "1.5"),
    ] {
        let err = env_of(&[(var, bad)]).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{var}={bad:?}");
        assert!(err.to_string().contains(var), "{err}");
    }
}

#[test]
fn provider_idle_connections() {
    let n = |v: &str| env_of(&[("BAE_PROVIDER_IDLE_CONNECTIONS", v)]);
    assert_eq!(n("0").unwrap().provider_idle_connections, 0);
    assert_eq!(n(" 8 ").unwrap().provider_idle_connections, 8);
    for bad in ["-1", "x", "", "1.5"] {
        let err = n(bad).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{bad:?}");
        assert!(
            err.to_string().contains("BAE_PROVIDER_IDLE_CONNECTIONS"),
            "{err}"
        );
    }
}

#[test]
fn explicit_values() {
    let e = env_of(&[
        ("BAE_ADDR", "[::]:9000"),
        ("BAE_ADMIN_ADDR", "[::1]:9001"),
        ("BAE_DB_PATH", "/tmp/x.db"),
        ("BAE_LOG", "baesrv=debug"),
        ("BAE_SHUTDOWN_TIMEOUT", " 5 "),
        ("BAE_CONFIG", "/etc/bae.toml"),
        ("BAE_TURN_TIMEOUT", "0"),
        ("BAE_SUBAGENT_TIMEOUT", "\t60\n"),
        ("BAE_MAX_SUBAGENTS_PER_SESSION", "0"),
        ("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", " TRUE "),
        ("BAE_SANDBOX_DRIVER", " apple-container "),
        ("BAE_MAX_BODY_BYTES", "10"),
        ("BAE_MAX_IMPORT_BYTES", "20"),
        ("BAE_PROVIDER_TIMEOUT", "7"),
        ("BAE_SQLITE_SYNCHRONOUS", "Full"),
    ])
    .unwrap();
    assert_eq!(e.addr, "[::]:9000".parse().unwrap());
    assert_eq!(e.admin_addr, "[::1]:9001".parse().unwrap());
    assert_eq!(e.db_path, PathBuf::from("/tmp/x.db"));
    assert_eq!(e.log, "baesrv=debug");
    assert_eq!(e.shutdown_timeout, Duration::from_secs(5));
    assert_eq!(e.config_path, Some(PathBuf::from("/etc/bae.toml")));
    assert_eq!(e.turn_timeout, Duration::ZERO);
    assert_eq!(e.subagent_timeout, Duration::from_secs(60));
    assert_eq!(e.max_subagents_per_session, 0);
    assert!(e.disable_admin_auth);
    assert_eq!(e.sandbox_driver, SandboxDriver::AppleContainer);
    assert_eq!(e.sandbox_driver.program(), "container");
    assert_eq!(e.max_body_bytes, 10);
    assert_eq!(e.max_import_bytes, 20);
    assert_eq!(e.provider_timeout, Duration::from_secs(7));
    assert_eq!(e.sqlite_synchronous, Synchronous::Full);
    assert_eq!(e.sqlite_synchronous.pragma_value(), "FULL");
}

#[test]
fn truthy_rule() {
    for (v, want) in [
        ("1", true),
        ("true", true),
        ("True", true),
        (" 1\n", true),
        ("yes", false),
        ("0", false),
        ("", false),
        ("false", false),
        ("11", false),
    ] {
        let e = env_of(&[("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", v)]).unwrap();
        assert_eq!(e.disable_admin_auth, want, "{v:?}");
    }
}

#[test]
fn admin_addr_must_be_loopback_c216() {
    let err = env_of(&[("BAE_ADMIN_ADDR", "0.0.0.0:8081")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "BAE_ADMIN_ADDR: 0.0.0.0:8081 is not a loopback address; \
         the admin port must bind to localhost only"
    );
    assert_eq!(err.exit_code(), 2);
    assert!(env_of(&[("BAE_ADMIN_ADDR", "[::]:8081")]).is_err());
    assert!(env_of(&[("BAE_ADMIN_ADDR", "10.0.0.1:8081")]).is_err());
    // All of 127.0.0.0/8 is loopback.
    assert!(env_of(&[("BAE_ADMIN_ADDR", "127.1.2.3:8081")]).is_ok());
    // The client listener may bind anywhere.
    assert!(env_of(&[("BAE_ADDR", "10.0.0.1:1")]).is_ok());
}

#[test]
fn bad_addresses() {
    let err = env_of(&[("BAE_ADMIN_ADDR", "localhost:8081")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "BAE_ADMIN_ADDR: \"localhost:8081\" is not a valid host:port address \
         (invalid socket address syntax)"
    );
    for bad in ["", "8080", "::1:80", "1.2.3.4", "0.0.0.0:99999"] {
        let err = env_of(&[("BAE_ADDR", bad)]).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::InvalidAddress {
                    var: "BAE_ADDR",
                    ..
                }
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn bad_seconds_c217() {
    let err = env_of(&[("BAE_TURN_TIMEOUT", "soon")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "BAE_TURN_TIMEOUT: \"soon\" is not a whole number of seconds"
    );
    for var in [
        "BAE_SHUTDOWN_TIMEOUT",
        "BAE_TURN_TIMEOUT",
        "BAE_SUBAGENT_TIMEOUT",
        "BAE_MAX_SUBAGENTS_PER_SESSION",
    ] {
        for bad in [
            "",
            "  ",
            "-1",
            "+1",
            "1.5",
            "1e3",
            "99999999999999999999999",
        ] {
            let err = env_of(&[(var, bad)]).unwrap_err();
            assert_eq!(
                err,
                ConfigError::NotWholeSeconds {
                    var,
                    value: bad.to_string()
                }
            );
        }
    }
}

#[test]
fn bad_sandbox_driver_c218() {
    let err = env_of(&[("BAE_SANDBOX_DRIVER", "podman")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "BAE_SANDBOX_DRIVER: \"podman\" is not a supported sandbox driver \
         (expected \"docker\" or \"apple-container\")"
    );
    assert!(env_of(&[("BAE_SANDBOX_DRIVER", "Docker")]).is_err());
    assert!(env_of(&[("BAE_SANDBOX_DRIVER", "")]).is_err());
}

#[test]
fn bad_extensions() {
    for (var, bad) in [
        ("BAE_MAX_HEAD_BYTES", "0"),
        ("BAE_MAX_HEADERS", "x"),
        ("BAE_MAX_BODY_BYTES", "-5"),
        ("BAE_PROVIDER_TIMEOUT", "0"),
        ("BAE_SQLITE_SYNCHRONOUS", "off"),
        ("BAE_SUBSCRIBER_LAG_LIMIT", "0"),
        ("BAE_SUBSCRIBER_WINDOW_BYTES", "lots"),
        ("BAE_IDEMPOTENCY_RETENTION", "0"),
    ] {
        let err = env_of(&[(var, bad)]).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { var: v, .. } if v == var),
            "{var}"
        );
        assert!(err.to_string().starts_with(&format!("{var}: \"{bad}\"")));
    }
}

#[test]
fn subscriber_and_idempotency_limits() {
    let env = env_of(&[]).unwrap();
    assert_eq!(
        (env.subscriber_lag_limit, env.subscriber_window_bytes),
        (256, 32 * 1024)
    );
    assert_eq!(env.idempotency_retention, Duration::from_secs(86_400));
    let env = env_of(&[
        ("BAE_SUBSCRIBER_LAG_LIMIT", "8"),
        ("BAE_SUBSCRIBER_WINDOW_BYTES", "4096"),
        ("BAE_IDEMPOTENCY_RETENTION", "60"),
    ])
    .unwrap();
    assert_eq!(
        (env.subscriber_lag_limit, env.subscriber_window_bytes),
        (8, 4096)
    );
    assert_eq!(env.idempotency_retention, Duration::from_secs(60));
}

#[test]
fn first_error_in_table_order() {
    let err = env_of(&[
        ("BAE_SANDBOX_DRIVER", "podman"),
        ("BAE_TURN_TIMEOUT", "soon"),
        ("BAE_ADDR", "nope"),
    ])
    .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidAddress { .. }));
}

#[test]
fn flags_beat_env_c225() {
    let mut e = env_of(&[
        ("BAE_CONFIG", "/env.toml"),
        ("BAE_ADMIN_KEY_FILE", "/env-key"),
        ("BAE_ADMIN_KEY_HASH_FILE", "/env-hash"),
    ])
    .unwrap();
    let c = cli(&[
        "--config=/flag.toml",
        "--admin-key-file",
        "/flag-key",
        "--admin-key-hash-file",
        "/flag-hash",
        "--dangerously-disable-admin-auth",
    ]);
    resolve_paths(&c, &mut e);
    assert_eq!(e.config_path, Some(PathBuf::from("/flag.toml")));
    assert_eq!(e.admin_key_file, PathBuf::from("/flag-key"));
    assert_eq!(e.admin_key_hash_file, PathBuf::from("/flag-hash"));
    assert!(e.disable_admin_auth);

    // Without flags the environment stays.
    let mut e = env_of(&[("BAE_CONFIG", "/env.toml")]).unwrap();
    resolve_paths(&cli(&[]), &mut e);
    assert_eq!(e.config_path, Some(PathBuf::from("/env.toml")));
    assert_eq!(e.admin_key_file, PathBuf::from(DEFAULT_ADMIN_KEY_FILE));
    assert!(!e.disable_admin_auth);
}

#[test]
fn rotate_with_env_disabled_auth() {
    let c = cli(&["serve", "--rotate-admin-key"]);
    assert_eq!(c.command, Command::Serve);
    let mut e = env_of(&[("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", "1")]).unwrap();
    resolve_paths(&c, &mut e);
    let err = check_rotate_with_disabled_auth(&c, &e).unwrap_err();
    assert_eq!(err, ConfigError::RotateWithDisabledAuth);
    assert_eq!(err.exit_code(), 2);

    let mut e = env_of(&[]).unwrap();
    resolve_paths(&c, &mut e);
    assert!(check_rotate_with_disabled_auth(&c, &e).is_ok());
}

#[test]
fn process_env_guards_bad_names() {
    assert_eq!(process_env(""), None);
    assert_eq!(process_env("A=B"), None);
}
