//! Flags over the file: each replaces the value its key has, a list's flags replace the list,
//! a boolean flag turns an option off as well as on.

use std::time::Duration;

use clap::Parser;

use super::*;

#[test]
fn the_cluster_secret_comes_from_a_file_or_one_other_way() {
    let path = std::env::temp_dir().join(format!("mcp-cluster-secret-{}", std::process::id()));
    let secret = "0123456789abcdef0123456789abcdef";
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    let file = path.to_str().unwrap();
    let cli = Cli::parse_from(["mcp-session-proxy", "--cluster-secret-file", file]);
    assert_eq!(Config::load(&cli).unwrap().cluster.secret, secret);
    let cli = Cli::parse_from([
        "mcp-session-proxy",
        "--cluster-secret-file",
        file,
        "--cluster-secret",
        secret,
    ]);
    let error = format!("{:#}", Config::load(&cli).unwrap_err());
    assert!(error.contains("cluster.secret_file"), "{error}");
    std::fs::remove_file(&path).unwrap();
    let cli = Cli::parse_from(["mcp-session-proxy", "--cluster-secret-file", file]);
    let error = format!("{:#}", Config::load(&cli).unwrap_err());
    assert!(error.contains("cannot read"), "{error}");
}

#[test]
fn secrets_given_on_the_command_line_are_named_and_those_by_environment_are_not() {
    use clap::CommandFactory;
    let exposed = |args: &[&str]| {
        let matches = Cli::command().get_matches_from(args);
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        let options: Vec<&str> = cli
            .exposed_secrets(&matches)
            .iter()
            .map(|e| e.option)
            .collect();
        options
    };
    assert_eq!(
        exposed(&[
            "x",
            "--cluster-secret",
            "s",
            "--store",
            "redis://:pw@h:6379/0",
            "--http",
            "http://u:p@h/mcp",
        ]),
        ["--cluster-secret", "--store", "--http"]
    );
    assert!(exposed(&["x", "--store", "redis://h:6379/0", "--sse", "http://h/sse"]).is_empty());
}

#[test]
fn command_line_overrides_the_file() {
    let cli = Cli::parse_from([
        "mcp-session-proxy",
        "--window-events",
        "8",
        "--listen",
        "127.0.0.1:1",
    ]);
    let mut config = Config::from_toml("[session]\nwindow_events = 99\n").unwrap();
    config.apply(&cli);
    assert_eq!(config.session.window_events, 8);
    assert_eq!(config.listen.port(), 1);
}

#[test]
fn the_subscription_limit_comes_from_the_file_or_the_command_line() {
    let config = Config::from_toml("[session]\nmax_subscriptions = 5\n").unwrap();
    assert_eq!(config.session_settings().max_subscriptions, 5);
    let mut config = Config::default();
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--max-subscriptions",
        "7",
    ]));
    assert_eq!(config.session_settings().max_subscriptions, 7);
    let error = Config::from_toml("[session]\nmax_subscriptions = 0\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("session.max_subscriptions"), "{error}");
}

#[test]
fn boolean_flags_turn_options_off_as_well_as_on() {
    let file = "[upstream]\nhttp = \"http://127.0.0.1:1/mcp\"\nforward_authorization = true\n\
                trace_headers = true\n\
                [session]\nrequire_session = true\ncoalesce_progress = true\n";
    let mut config = Config::from_toml(file).unwrap();
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--forward-authorization=false",
        "--trace-headers=false",
        "--require-session=false",
        "--coalesce-progress=false",
        "--cache-lists=false",
    ]));
    assert!(!config.upstream.forward_authorization);
    assert!(!config.upstream.trace_headers);
    assert!(!config.session.require_session);
    assert!(!config.session.coalesce_progress);
    assert_eq!(config.upstream.cache_lists, Some(false));
    let mut config = Config::default();
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--forward-authorization",
        "--coalesce-progress",
        "--cache-lists",
        "--listen",
        "127.0.0.1:1",
    ]));
    assert!(config.upstream.forward_authorization);
    assert!(config.session.coalesce_progress);
    assert_eq!(config.upstream.cache_lists, Some(true));
}

#[test]
fn tools_are_exposed_as_the_file_and_the_flags_say() {
    let file = "[tools]\nallow = [\"*\"]\ndeny = [\"debug_*\"]\nprefix = \"a_\"\n\
                rename = { echo = \"say\" }\ndescriptions = { add = \"Adds.\" }\n\
                [servers.b.tools]\ndeny = [\"sleep\"]\n";
    let mut config = Config::from_toml(file).unwrap();
    let exposure = config.tools.exposure();
    assert_eq!(exposure.server_name("a_say").as_deref(), Some("echo"));
    assert_eq!(exposure.server_name("a_debug_x"), None);
    assert_eq!(exposure.descriptions["add"], "Adds.");
    assert_eq!(config.servers["b"].tools.deny, ["sleep"]);
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--allow-tool",
        "echo",
        "--allow-tool",
        "add*",
        "--deny-tool",
        "sleep",
    ]));
    assert_eq!(config.tools.allow, ["echo", "add*"]);
    assert_eq!(
        config.tools.deny,
        ["sleep"],
        "a flag replaces the file's list"
    );
    let mut config =
        Config::from_toml("[limits]\nrequests_per_second = 5\n[limits.tools]\nadd = 0.5\n")
            .unwrap();
    assert_eq!(config.limits.tools["add"], 0.5);
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--rate-limit",
        "20",
    ]));
    assert_eq!(config.limits.requests_per_second, 20.0);
    for rate in ["-1", "1e-9", "nan", "inf"] {
        let file = format!("[limits.tools]\nadd = {rate}\n");
        let error = Config::from_toml(&file).unwrap_err().to_string();
        assert!(error.contains("limits.tools.add"), "{rate}: {error}");
    }
    assert!(
        Config::from_toml("[tools]\nhide = []\n").is_err(),
        "unknown keys refused"
    );
}

#[test]
fn resources_are_shown_by_uri_globs_from_the_file_and_the_flags_and_never_renamed() {
    let file = "[resources]\ndeny = [\"internal://*\"]\n\
                [servers.b.resources]\nallow = [\"demo://*\"]\n";
    let mut config = Config::from_toml(file).unwrap();
    assert!(!config.resources.exposure().shows("internal://secret"));
    assert!(config.resources.exposure().shows("demo://greeting"));
    assert!(!config.servers["b"]
        .resources
        .exposure()
        .shows("test://static-text"));
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--allow-resource",
        "demo://*",
        "--deny-resource",
        "demo://counter",
    ]));
    assert_eq!(config.resources.allow, ["demo://*"]);
    assert_eq!(config.resources.deny, ["demo://counter"]);
    for key in ["rename = {}", "prefix = \"a_\"", "descriptions = {}"] {
        let error = Config::from_toml(&format!("[resources]\n{key}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("expected `allow` or `deny`"),
            "{key}: {error}"
        );
    }
}

#[test]
fn the_keys_that_had_no_flag_take_one() {
    let mut config = Config::default();
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--namespace",
        "team-a",
        "--service-name",
        "edge",
        "--cache-ttl",
        "30s",
        "--cache-scope",
        "public",
        "--anonymous",
        "shared",
        "--input-ttl",
        "2m",
        "--max-held-per-principal",
        "3",
        "--data-session-idle-ttl",
        "5m",
        "--data-session-lifetime",
        "1h",
        "--max-data-sessions-per-principal",
        "4",
        "--max-session-state-bytes",
        "512",
    ]));
    assert_eq!(config.cluster.namespace, "team-a");
    assert_eq!(config.tracing.service_name, "edge");
    assert_eq!(config.upstream.cache_ttl, Duration::from_secs(30));
    assert_eq!(
        config.upstream.cache_scope,
        crate::front::settings::CacheScope::Public
    );
    assert_eq!(
        config.session.anonymous,
        crate::session::settings::Anonymous::Shared
    );
    assert_eq!(config.session.input_ttl, Duration::from_secs(120));
    assert_eq!(config.session.max_held_per_principal, 3);
    assert_eq!(
        config.session.data_session_idle_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(
        config.session.data_session_lifetime,
        Duration::from_secs(3600)
    );
    assert_eq!(config.session.max_data_sessions_per_principal, 4);
    assert_eq!(config.session.max_session_state_bytes, 512);
    config.validate().unwrap();
}

#[test]
fn session_limits_have_defaults_and_come_from_the_file_or_the_command_line() {
    let settings = Config::default().session_settings();
    assert_eq!(settings.max_sessions_per_principal, 100);
    assert_eq!(settings.max_anonymous_sessions, 256);
    assert_eq!(Config::default().session.anonymous_pool, 4);
    assert!(!Config::default().session.anonymous_pool_reuse);
    let config = Config::from_toml(
        "[session]\nmax_sessions_per_principal = 3\nmax_anonymous_sessions = 4\n\
         anonymous_pool = 2\nanonymous_pool_wait = \"250ms\"\nanonymous_pool_reuse = true\n",
    )
    .unwrap();
    assert_eq!(config.session_settings().max_sessions_per_principal, 3);
    assert_eq!(config.session_settings().max_anonymous_sessions, 4);
    assert_eq!(config.session.anonymous_pool, 2);
    assert_eq!(
        config.session.anonymous_pool_wait,
        Duration::from_millis(250)
    );
    assert!(config.session.anonymous_pool_reuse);
    let mut config = Config::default();
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--max-sessions-per-principal",
        "7",
        "--max-anonymous-sessions",
        "9",
        "--anonymous-pool",
        "0",
        "--anonymous-pool-wait",
        "2s",
        "--anonymous-pool-reuse",
    ]));
    assert_eq!(config.session_settings().max_sessions_per_principal, 7);
    assert_eq!(config.session_settings().max_anonymous_sessions, 9);
    assert_eq!(config.session.anonymous_pool, 0);
    assert_eq!(config.session.anonymous_pool_wait, Duration::from_secs(2));
    assert!(config.session.anonymous_pool_reuse);
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--anonymous-pool-reuse=false",
    ]));
    assert!(!config.session.anonymous_pool_reuse);
    for (setting, key) in [
        (
            "max_anonymous_sessions = 0",
            "session.max_anonymous_sessions",
        ),
        (
            "max_sessions_per_principal = 0",
            "session.max_sessions_per_principal",
        ),
        (
            "anonymous_pool_wait = \"0s\"",
            "session.anonymous_pool_wait",
        ),
    ] {
        let error = Config::from_toml(&format!("[session]\n{setting}\n"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(key), "{setting}: {error}");
    }
}
