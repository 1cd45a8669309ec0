//! The configuration as operators write it: files, their defaults, and the messages of a
//! mistake.

use std::time::Duration;

use clap::Parser;

use super::*;
use crate::front::settings::PostResponse;

#[test]
fn parses_durations() {
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
    assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
    assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
    assert!(parse_duration("5 parsecs").is_err());
    assert!(
        parse_duration("307445734561825861m").is_err(),
        "no overflow"
    );
    assert!(parse_duration("s").is_err());
}

#[test]
fn reads_a_full_file() {
    let config = Config::from_toml(
        r#"
        listen = "127.0.0.1:9000"
        [upstream]
        stdio = "my-server --flag 'two words'"
        [session]
        idle_ttl = "30s"
        window_events = 16
        [http]
        post_response = "sse"
        "#,
    )
    .unwrap();
    assert_eq!(config.listen.port(), 9000);
    assert_eq!(config.session.idle_ttl, Duration::from_secs(30));
    assert_eq!(config.session.window_events, 16);
    assert_eq!(config.http.post_response, PostResponse::Sse);
    let spec = config.upstream.stdio_spec(&Default::default()).unwrap();
    assert_eq!(spec.program, "my-server");
    assert_eq!(spec.args, ["--flag", "two words"]);
}

#[test]
fn names_the_key_and_line_of_a_mistake() {
    let error = Config::from_toml("listen = \"127.0.0.1:1\"\n[session]\nidle_tll = \"1s\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("idle_tll") && error.contains("line 3"),
        "{error}"
    );
    let error = Config::from_toml("[session]\nwindow_events = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("window_events") && error.contains("line 2"),
        "{error}"
    );
    let error = Config::from_toml("[session]\nwindow_events = 0\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("session.window_events"), "{error}");
    let error = Config::from_toml("[session]\nidle_ttl = \"soon\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("idle_ttl"), "{error}");
}

#[test]
fn a_write_delay_as_long_as_the_heartbeat_is_refused() {
    let redis = "store = \"redis://127.0.0.1:6379/0\"\n[cluster]\nsecret = \"0123456789abcdef0123456789abcdef\"\n";
    let config = Config::from_toml(&format!("{redis}write_delay = \"5ms\"\n")).unwrap();
    assert_eq!(config.cluster.write_delay, Duration::from_millis(5));
    let error = Config::from_toml(&format!("{redis}write_delay = \"1s\"\n"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("cluster.write_delay"), "{error}");
}

#[test]
fn the_write_queue_bound_comes_from_the_file_or_the_command_line_and_is_never_zero() {
    let redis = "store = \"redis://127.0.0.1:6379/0\"\n[cluster]\nsecret = \"0123456789abcdef0123456789abcdef\"\n";
    let mut config = Config::from_toml(&format!("{redis}max_write_queue = 10\n")).unwrap();
    assert_eq!(config.cluster.max_write_queue, 10);
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--max-write-queue",
        "20",
    ]));
    assert_eq!(config.cluster.max_write_queue, 20);
    let error = Config::from_toml(&format!("{redis}max_write_queue = 0\n"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("cluster.max_write_queue"), "{error}");
}

#[test]
fn the_hop_nonce_bound_comes_from_the_file_or_the_command_line_and_is_never_zero() {
    let redis = "store = \"redis://127.0.0.1:6379/0\"\n[cluster]\nsecret = \"0123456789abcdef0123456789abcdef\"\n";
    let mut config = Config::from_toml(&format!("{redis}max_hop_nonces = 10\n")).unwrap();
    assert_eq!(config.cluster.max_hop_nonces, 10);
    config.apply(&Cli::parse_from([
        "mcp-session-proxy",
        "--max-hop-nonces",
        "20",
    ]));
    assert_eq!(config.cluster.max_hop_nonces, 20);
    let error = Config::from_toml(&format!("{redis}max_hop_nonces = 0\n"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("cluster.max_hop_nonces"), "{error}");
}

#[test]
fn the_shipped_example_is_valid_and_states_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/proxy.toml");
    let example = Config::from_file(&path).unwrap();
    let defaults = Config::default();
    assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
}

#[test]
fn every_shipped_example_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let mut config = Config::parse_file(&path).unwrap();
            // Replicas take their secret from the environment, as the example says.
            config.cluster.secret = "0".repeat(64);
            let valid = config.validate();
            valid.unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        }
    }
}

#[test]
fn a_principal_header_beyond_loopback_needs_the_proxies_it_trusts() {
    let open = "listen = \"0.0.0.0:8787\"\n[http]\nprincipal_header = \"x-user\"\n";
    let error = Config::from_toml(open).unwrap_err().to_string();
    assert!(
        error.contains("http.principal_header") && error.contains("http.trusted_proxies"),
        "{error}"
    );
    let listed = format!("{open}trusted_proxies = [\"10.0.0.0/8\", \"::1/128\"]\n");
    let config = Config::from_toml(&listed).unwrap();
    assert_eq!(config.http_settings().unwrap().trusted_proxies.len(), 2);
    Config::from_toml("[http]\nprincipal_header = \"x-user\"\n").unwrap();
    let error = Config::from_toml("[http]\ntrusted_proxies = [\"10.0.0.1/8\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("write 10.0.0.0/8") && error.contains("line 2"),
        "{error}"
    );
    let cli = Cli::parse_from(["mcp-session-proxy", "--trusted-proxy", "10.0.0.0/8"]);
    let config = Config::load(&cli).unwrap();
    assert_eq!(
        config.http.trusted_proxies,
        vec!["10.0.0.0/8".parse().unwrap()]
    );
}

#[test]
fn with_auth_the_resource_is_configured_unless_only_loopback_names_reach_it() {
    let auth = "[auth]\nissuer = \"https://login.example\"\n";
    let refused = [
        format!("listen = \"0.0.0.0:8787\"\n{auth}"),
        format!("[http]\nallowed_hosts = [\"*\"]\n{auth}"),
        format!("listen = \"[::]:8787\"\n[http]\nallowed_hosts = [\"mcp.example\"]\n{auth}"),
    ];
    for text in &refused {
        let error = Config::from_toml(text).unwrap_err().to_string();
        assert!(error.contains("auth.public_url"), "{text}: {error}");
    }
    Config::from_toml(auth).unwrap();
    Config::from_toml(&format!("listen = \"[::1]:8787\"\n{auth}")).unwrap();
    for named in [
        "public_url = \"https://mcp.example\"\n",
        "audience = \"https://mcp.example/mcp\"\n",
    ] {
        Config::from_toml(&format!("listen = \"0.0.0.0:8787\"\n{auth}{named}")).unwrap();
    }
}

#[test]
fn gateway_servers_are_checked_and_named_in_messages() {
    let config = Config::from_toml(
        "[servers.a.upstream]\nhttp = \"http://127.0.0.1:1/mcp\"\n[servers.b.session]\nwindow_events = 3\n",
    )
    .unwrap();
    assert!(
        !config.serves_default(),
        "no top-level server: /mcp serves nothing"
    );
    assert_eq!(
        config.servers["b"].session.as_ref().unwrap().window_events,
        3
    );
    let error = Config::from_toml("[servers.a.upstream]\nhttp = \"ftp://x\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("servers.a.upstream"), "{error}");
    let error = Config::from_toml("[servers.a.session]\nmax_sessions = 0\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("servers.a.session.max_sessions"), "{error}");
    let error = Config::from_toml("[servers.\"a b\".upstream]\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("servers.a b"), "{error}");
    let error = Config::from_toml("[servers.a]\nstdio = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("stdio") && error.contains("line 2"),
        "{error}"
    );
}

#[test]
fn every_shipped_example_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut loaded = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            // As an operator runs it: the secret from the environment.
            let mut config = Config::parse_file(&path).unwrap();
            if config.store != "memory" {
                config.cluster.secret = "0123456789abcdef0123456789abcdef".into();
            }
            config
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            loaded += 1;
        }
    }
    assert!(loaded >= 4, "{loaded} examples");
}

/// The keys `config/proxy.toml` sets or shows commented out (`# key = value`), by TOML path.
fn keys_of_the_shipped_example() -> Vec<String> {
    let text = include_str!("../../config/proxy.toml");
    let mut table = String::new();
    let mut keys = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = format!("{name}.");
            continue;
        }
        let setting = line.strip_prefix("# ").unwrap_or(line);
        let Some((key, _)) = setting.split_once(" = ") else {
            continue;
        };
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            keys.push(format!("{table}{key}"));
        }
    }
    keys
}

#[test]
fn the_shipped_example_shows_every_declared_key_and_each_has_a_flag() {
    let declared = super::reference::entries();
    let shown = keys_of_the_shipped_example();
    assert!(shown.len() >= 55, "{} keys", shown.len());
    for key in &shown {
        let entry = declared.iter().find(|e| &e.path == key);
        let entry = entry.unwrap_or_else(|| panic!("config/proxy.toml: {key} is not declared"));
        assert!(!entry.flags.is_empty(), "{key} has no flag");
    }
    // Described in the example's prose rather than shown as keys.
    let in_prose = |path: &str| {
        path.starts_with("servers.<name>.")
            || path.starts_with("virtual.<name>.")
            || path == "limits.tools"
            || path.starts_with("prompts.")
            || ["tools.prefix", "tools.rename", "tools.descriptions"].contains(&path)
    };
    for entry in declared.iter().filter(|e| !in_prose(&e.path)) {
        assert!(
            shown.contains(&entry.path),
            "{} is declared but config/proxy.toml does not show it",
            entry.path
        );
    }
}

#[test]
fn a_credential_for_an_https_resource_never_goes_over_plain_http_unless_said() {
    let clear = "[upstream]\nhttp = \"http://tickets.internal/mcp\"\nauth = \"static\"\n\
                 auth_secret = { env = \"TICKETS_KEY\" }\n\
                 auth_resource = \"https://tickets.example/mcp\"\n";
    let error = Config::from_toml(clear).unwrap_err().to_string();
    assert!(
        error.contains("clear text") && error.contains("upstream.credentials_over_http"),
        "{error}"
    );
    Config::from_toml(&format!("{clear}credentials_over_http = true\n")).unwrap();
    let secure = clear.replace("http://tickets.internal", "https://tickets.internal");
    Config::from_toml(&secure).unwrap();
    // A scheme's case changes nothing: both are read as URLs, not as text.
    let shouting = clear
        .replace("https://tickets.example", "HTTPS://tickets.example")
        .replace("http://tickets.internal", "HTTP://tickets.internal");
    let error = Config::from_toml(&shouting).unwrap_err().to_string();
    assert!(error.contains("clear text"), "{error}");
    let cli = Cli::parse_from([
        "mcp-session-proxy",
        "--http",
        "http://tickets.internal/mcp",
        "--forward-authorization",
        "--upstream-auth-resource",
        "https://tickets.example/mcp",
    ]);
    let error = Config::load(&cli).unwrap_err().to_string();
    assert!(error.contains("clear text"), "{error}");
}

#[test]
fn the_command_line_is_well_formed_every_flag_with_an_id_of_its_own() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn an_https_advertise_needs_the_listener_over_tls() {
    let replica = "store = \"redis://127.0.0.1:6379/0\"\n";
    let cluster = format!("[cluster]\nsecret = \"{}\"\n", "0".repeat(64));
    let plain = format!("{replica}{cluster}advertise = \"HTTPS://10.0.0.1:8787\"\n");
    let error = Config::from_toml(&plain).unwrap_err().to_string();
    assert!(error.contains("cluster.advertise is https://"), "{error}");
    let over_tls = format!(
        "{replica}[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n\
         {cluster}advertise = \"https://10.0.0.1:8787\"\n"
    );
    Config::from_toml(&over_tls).expect("https:// with the listener over TLS");
}

#[test]
fn a_client_certificate_names_principals_only_from_the_clients_ca_and_alone() {
    let listener = "[tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n\
                    principal_from_client_cert = true\n";
    let error = Config::from_toml(listener).unwrap_err().to_string();
    assert!(error.contains("needs tls.client_ca_file"), "{error}");
    let with_ca = format!("{listener}client_ca_file = \"/ca.pem\"\n");
    let config = Config::from_toml(&with_ca).expect("certificates of the clients' CA");
    assert!(config.tls.principal_from_client_cert);
    let two_sources = format!("{with_ca}[http]\nprincipal_header = \"x-user\"\n");
    let error = Config::from_toml(&two_sources).unwrap_err().to_string();
    assert!(
        error.contains("a principal comes from one place"),
        "{error}"
    );
}

#[test]
fn the_hops_server_name_is_a_dns_name_or_an_address() {
    Config::from_toml("[cluster]\nserver_name = \"mcp-proxy\"\n").unwrap();
    let error = Config::from_toml("[cluster]\nserver_name = \"not a name\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("cluster.server_name"), "{error}");
}

#[test]
fn a_virtual_server_composes_named_servers_at_a_name_of_its_own() {
    let servers = "[servers.a.upstream]\nstdio = \"a\"\n[servers.b.upstream]\nstdio = \"b\"\n";
    let composed = format!("{servers}[virtual.v]\nservers = [\"a\", \"b\"]\n");
    let config = Config::from_toml(&composed).unwrap();
    assert_eq!(config.r#virtual["v"].separator, "__");
    assert!(
        config.servers["a"].serve,
        "served at its own path unless told"
    );
    let refused = |text: String, says: &str| {
        let error = Config::from_toml(&text).unwrap_err().to_string();
        assert!(error.contains(says), "{says:?} in {error}");
    };
    refused(
        format!("{servers}[virtual.v]\nservers = [\"a\", \"c\"]\n"),
        "\"c\" is not a [servers.<name>]",
    );
    refused(
        format!("{servers}[virtual.v]\nservers = []\n"),
        "virtual.v.servers",
    );
    refused(
        format!("{servers}[virtual.a]\nservers = [\"b\"]\n"),
        "[servers.a] has that name too",
    );
    refused(
        format!("{servers}[virtual.v]\nservers = [\"a\", \"a\"]\n"),
        "named twice",
    );
    refused(
        format!("{servers}[virtual.v]\nservers = [\"a\"]\nseparator = \"\"\n"),
        "virtual.v.separator",
    );
    let two_at_root = format!(
        "{servers}[virtual.v]\nservers = [\"a\"]\ndefault = true\n\
         [virtual.w]\nservers = [\"b\"]\ndefault = true\n"
    );
    refused(two_at_root, "one server at /mcp");
    let over_upstream = format!(
        "[upstream]\nstdio = \"x\"\n{servers}[virtual.v]\nservers = [\"a\"]\ndefault = true\n"
    );
    refused(
        over_upstream,
        "/mcp serves the top-level [upstream] already",
    );
    refused(
        format!("{servers}[virtual.v]\nservers = [\"a\"]\nmembers = []\n"),
        "unknown field",
    );
}

#[test]
fn the_stores_password_is_read_from_its_file_and_kept_from_children() {
    let file = std::env::temp_dir().join(format!("mcp-store-password-{}", std::process::id()));
    std::fs::write(&file, "store-pw-0c1d2e3f\nnot this line\n").unwrap();
    let config = Config::from_toml(&format!(
        "store = \"redis://127.0.0.1:6379/0\"\n[cluster]\nsecret = \"{}\"\nstore_username = \"mcp-proxy\"\n\
         store_password = {{ file = {:?} }}\n",
        "s".repeat(32),
        file.display().to_string()
    ))
    .unwrap();
    let connection = config.cluster.store_connection(&config.store).unwrap();
    assert_eq!(connection.password.as_deref(), Some("store-pw-0c1d2e3f"));
    assert_eq!(connection.username.as_deref(), Some("mcp-proxy"));
    let secrets = config.child_secrets();
    assert!(format!("{secrets:?}").contains("store-pw-0c1d2e3f"));
    let _ = std::fs::remove_file(file);
}

#[test]
fn tls_settings_for_a_plain_store_and_a_password_given_twice_are_refused() {
    let secret = "s".repeat(32);
    let tls_on_plain = Config::from_toml(&format!(
        "store = \"redis://127.0.0.1:6379/0\"\n[cluster]\nsecret = \"{secret}\"\nstore_platform_roots = false\n"
    ));
    assert!(format!("{:#}", tls_on_plain.unwrap_err()).contains("rediss://"));
    let twice = Config::from_toml(&format!(
        "store = \"redis://:pw@127.0.0.1:6379/0\"\n[cluster]\nsecret = \"{secret}\"\n\
         store_password = {{ env = \"PATH\" }}\n"
    ));
    assert!(format!("{:#}", twice.unwrap_err()).contains("give it one way"));
    let unknown_scheme = Config::from_toml(&format!(
        "store = \"valkey://127.0.0.1:6379/0\"\n[cluster]\nsecret = \"{secret}\"\n"
    ));
    assert!(format!("{:#}", unknown_scheme.unwrap_err()).contains("rediss://"));
}
