use super::*;

fn p(args: &[&str]) -> Result<Invocation, CtlError> {
    parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

fn cmd(args: &[&str]) -> Command {
    p(args)
        .unwrap_or_else(|e| panic!("{args:?}: {e:?}"))
        .command
}

fn usage_err(args: &[&str]) -> String {
    match p(args) {
        Ok(i) => panic!("{args:?} parsed as {i:?}"),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{args:?}");
            e.detail().to_string()
        }
    }
}

#[test]
fn resource_first_profile_create() {
    let c = cmd(&[
        "profiles",
        "create",
        "--name",
        "main",
        "--primary-provider=anthropic",
        "--fallback-provider",
        "a",
        "--fallback",
        "b",
        "--mcp-server",
        "fs",
        "--allowed-tool",
        "t1",
        "--allowed-tool",
        "t2",
        "--available-sandbox",
        "python:3.12",
    ]);
    assert_eq!(
        c,
        Command::ProfilesCreate {
            name: "main".into(),
            primary_provider: "anthropic".into(),
            lists: ProfileLists {
                fallback_providers: vec!["a".into(), "b".into()],
                mcp_servers: vec!["fs".into()],
                allowed_tools: vec!["t1".into(), "t2".into()],
                available_sandboxes: vec!["python:3.12".into()],
            },
        }
    );
}

#[test]
fn verb_first_matches_the_reference_surface() {
    assert_eq!(
        cmd(&["create", "profile", "main", "anthropic", "--fallback", "b"]),
        Command::ProfilesCreate {
            name: "main".into(),
            primary_provider: "anthropic".into(),
            lists: ProfileLists {
                fallback_providers: vec!["b".into()],
                ..Default::default()
            },
        }
    );
    assert_eq!(
        cmd(&["create", "key", "agent", "pro_1"]),
        Command::KeysCreate {
            name: "agent".into(),
            profile_id: "pro_1".into()
        }
    );
    assert_eq!(
        cmd(&["list", "profiles", "--limit", "5"]),
        Command::ProfilesList(Page {
            limit: Some(5),
            cursor: None
        })
    );
    assert_eq!(cmd(&["list", "keys"]), Command::KeysList(Page::default()));
    assert_eq!(
        cmd(&["get", "profile", "pro_1"]),
        Command::ProfilesGet { id: "pro_1".into() }
    );
    assert_eq!(
        cmd(&["delete", "profile", "pro_1"]),
        Command::ProfilesDelete { id: "pro_1".into() }
    );
    assert_eq!(
        cmd(&["delete", "key", "key_1"]),
        Command::KeysRevoke { id: "key_1".into() }
    );
    // Reference update: the three known lists are replaced, sandboxes kept.
    assert_eq!(
        cmd(&[
            "update",
            "profile",
            "pro_1",
            "openai",
            "--allowed-tool",
            "x"
        ]),
        Command::ProfilesUpdate {
            id: "pro_1".into(),
            update: ProfileUpdate {
                name: None,
                primary_provider: Some("openai".into()),
                fallback_providers: Some(vec![]),
                mcp_servers: Some(vec![]),
                allowed_tools: Some(vec!["x".into()]),
                available_sandboxes: None,
            },
        }
    );
    assert!(usage_err(&["update", "profile", "pro_1"]).contains("PRIMARY_PROVIDER"));
}

#[test]
fn resource_first_update_only_changes_what_is_given() {
    assert_eq!(
        cmd(&[
            "profiles",
            "update",
            "pro_1",
            "--name",
            "renamed",
            "--clear-mcp-servers",
            "--available-sandbox",
            "node:22"
        ]),
        Command::ProfilesUpdate {
            id: "pro_1".into(),
            update: ProfileUpdate {
                name: Some("renamed".into()),
                primary_provider: None,
                fallback_providers: None,
                mcp_servers: Some(vec![]),
                allowed_tools: None,
                available_sandboxes: Some(vec!["node:22".into()]),
            },
        }
    );
}

#[test]
fn globals_anywhere_and_last_wins() {
    let i = p(&[
        "--admin-addr",
        "127.0.0.1:1",
        "keys",
        "--json",
        "list",
        "--admin-addr=127.0.0.1:2",
        "--admin-token",
        "t",
        "--admin-key-file",
        "/k",
    ])
    .unwrap();
    assert_eq!(
        i.globals,
        Globals {
            admin_addr: Some("127.0.0.1:2".into()),
            admin_token: Some("t".into()),
            admin_key_file: Some(PathBuf::from("/k")),
            json: true,
        }
    );
    assert_eq!(i.command, Command::KeysList(Page::default()));
}

#[test]
fn sessions_and_registries() {
    assert_eq!(
        cmd(&["sessions", "list", "--state", "open"]),
        Command::SessionsList {
            page: Page::default(),
            state: Some("open".into())
        }
    );
    assert_eq!(
        cmd(&["sessions", "events", "ses_1", "--cursor", "7"]),
        Command::SessionsEvents {
            id: "ses_1".into(),
            page: Page {
                limit: None,
                cursor: Some("7".into())
            }
        }
    );
    assert_eq!(cmd(&["providers", "list"]), Command::ProvidersList);
    assert_eq!(cmd(&["providers"]), Command::ProvidersList);
    assert_eq!(cmd(&["mcp-servers", "list"]), Command::McpServersList);
    assert_eq!(cmd(&["config", "show"]), Command::ConfigShow);
    assert_eq!(cmd(&["sandbox-status"]), Command::SandboxStatus);
}

#[test]
fn auth_create_key_defaults() {
    assert_eq!(
        cmd(&["auth", "create", "key"]),
        Command::AuthCreateKey {
            name: "provisioned-admin".into(),
            out_dir: PathBuf::from("."),
            force: false
        }
    );
    assert_eq!(
        cmd(&[
            "auth",
            "create",
            "key",
            "--name",
            "n",
            "--out-dir",
            "/d",
            "--force"
        ]),
        Command::AuthCreateKey {
            name: "n".into(),
            out_dir: PathBuf::from("/d"),
            force: true
        }
    );
    assert!(cmd(&["auth", "create", "key"]).is_offline());
}

#[test]
fn usage_errors() {
    assert!(usage_err(&[]).contains("no command"));
    assert!(usage_err(&["frobnicate"]).contains("unknown command"));
    assert!(usage_err(&["profiles", "get"]).contains("requires ID"));
    assert!(usage_err(&["profiles", "get", "a", "b"]).contains("unexpected argument"));
    assert!(usage_err(&["profiles", "create", "--name", "x"]).contains("--primary-provider"));
    assert!(usage_err(&[
        "profiles",
        "create",
        "--name",
        " ",
        "--primary-provider",
        "p"
    ])
    .contains("blank"));
    assert!(usage_err(&["keys", "list", "--bogus", "1"]).contains("unknown option"));
    assert!(usage_err(&["keys", "list", "--limit", "0"]).contains("--limit"));
    assert!(usage_err(&["keys", "list", "--limit"]).contains("requires a value"));
    assert!(usage_err(&["keys", "list", "--json=1"]).contains("does not take a value"));
    assert!(usage_err(&["keys", "list", "--admin-token", ""]).contains("non-empty"));
    assert!(usage_err(&["keys", "list", "-x"]).contains("unknown option"));
    assert!(usage_err(&["auth", "create", "token"]).contains("auth create key"));
    assert!(usage_err(&["create", "widget", "x"]).contains("unknown command"));
}

#[test]
fn help_and_version_win() {
    assert_eq!(cmd(&["--help"]), Command::Help);
    assert_eq!(cmd(&["keys", "list", "-h"]), Command::Help);
    assert_eq!(cmd(&["help"]), Command::Help);
    assert_eq!(cmd(&["-V"]), Command::Version);
    assert_eq!(cmd(&["version"]), Command::Version);
}

#[test]
fn double_dash_ends_options() {
    assert_eq!(
        cmd(&["profiles", "get", "--", "--odd-id"]),
        Command::ProfilesGet {
            id: "--odd-id".into()
        }
    );
}

#[test]
fn session_transfer_commands() {
    assert_eq!(
        cmd(&[
            "sessions",
            "fork",
            "ses_1",
            "--after-turn",
            "2",
            "--client-key-id",
            "key_2"
        ]),
        Command::SessionsFork {
            id: "ses_1".into(),
            rewind: false,
            at: ForkOpts {
                after_turn: Some(2),
                client_key_id: Some("key_2".into()),
                ..ForkOpts::default()
            },
        }
    );
    assert_eq!(
        cmd(&["sessions", "rewind", "ses_1", "--before-message", "evt_3"]),
        Command::SessionsFork {
            id: "ses_1".into(),
            rewind: true,
            at: ForkOpts {
                before_message: Some("evt_3".into()),
                ..ForkOpts::default()
            },
        }
    );
    assert!(usage_err(&["sessions", "rewind", "ses_1"]).contains("--after-turn"));
    assert!(usage_err(&[
        "sessions",
        "fork",
        "ses_1",
        "--event-id",
        "evt_1",
        "--after-turn",
        "1"
    ])
    .contains("cannot be used with"));
    usage_err(&["sessions", "fork", "ses_1", "--after-turn", "-1"]);
    assert_eq!(
        cmd(&["sessions", "export", "ses_1", "-o", "out.jsonl"]),
        Command::SessionsExport {
            id: "ses_1".into(),
            output: Some(PathBuf::from("out.jsonl")),
        }
    );
    assert_eq!(
        cmd(&[
            "sessions",
            "import",
            "-",
            "--client-key-id",
            "key_1",
            "--keep-id"
        ]),
        Command::SessionsImport {
            file: "-".into(),
            client_key_id: "key_1".into(),
            profile_id: None,
            keep_id: true,
        }
    );
    assert!(usage_err(&["sessions", "import", "doc.jsonl"]).contains("--client-key-id"));
    assert_eq!(
        cmd(&["sessions", "lineage", "ses_1"]),
        Command::SessionsLineage { id: "ses_1".into() }
    );
}

#[test]
fn usage_of_a_session_key_or_profile() {
    assert_eq!(
        cmd(&["usage", "session", "ses_1"]),
        Command::Usage {
            of: UsageOf::Session,
            id: "ses_1".into(),
            since: None,
            until: None,
        }
    );
    assert_eq!(
        cmd(&[
            "usage",
            "keys",
            "key_1",
            "--since",
            "2026-01-02",
            "--until=2026-02-01"
        ]),
        Command::Usage {
            of: UsageOf::Key,
            id: "key_1".into(),
            since: Some("2026-01-02".into()),
            until: Some("2026-02-01".into()),
        }
    );
    assert!(matches!(
        cmd(&["usage", "profile", "pro_1"]),
        Command::Usage {
            of: UsageOf::Profile,
            ..
        }
    ));
    assert!(usage_err(&["usage", "session", " "]).contains("must not be blank"));
    usage_err(&["usage", "session"]);
    usage_err(&["usage", "client", "x"]);
}

#[test]
fn quotas_commands() {
    assert_eq!(cmd(&["quotas", "list"]), Command::QuotasList);
    assert_eq!(
        cmd(&["quota", "get", "profile", "pro_1"]),
        Command::QuotasGet {
            of: QuotaOf::Profile,
            id: "pro_1".into()
        }
    );
    assert_eq!(
        cmd(&[
            "quotas",
            "set",
            "key",
            "key_1",
            "--requests-per-second",
            "5",
            "--token-budget=1000",
            "--window",
            "1d",
        ]),
        Command::QuotasSet {
            of: QuotaOf::Key,
            id: "key_1".into(),
            body: serde_json::json!({
                "max_open_sessions": null,
                "requests_per_second": 5,
                "burst": null,
                "token_budget": 1000,
                "window": "1d",
            }),
        }
    );
    assert_eq!(
        cmd(&["quotas", "delete", "key", "key_1"]),
        Command::QuotasDelete {
            of: QuotaOf::Key,
            id: "key_1".into()
        }
    );
    assert!(usage_err(&["quotas", "get", "session", "s"]).contains("session"));
    assert!(usage_err(&["quotas", "set", "key", " "]).contains("blank"));
    let e = usage_err(&["quotas", "set", "key", "k", "--burst", "x"]);
    assert!(e.contains("burst"), "{e}");
}
