//! Configuration: a TOML file (`file`), command-line options over it (`cli`, `overrides`),
//! validation whose messages name the offending key (`validate`), and the settings each layer
//! takes from it (`settings`).

mod auth;
mod auth_flags;
mod cli;
mod duration;
mod file;
mod overrides;
mod settings;
mod validate;

use std::path::Path;

use anyhow::Context;

pub use auth::{AuthConfig, SecretSource, UpstreamAuth};
pub use cli::{Cli, Command, ExposedSecret};
pub use duration::parse_duration;
pub use file::{
    ClusterConfig, Config, Correlation, HttpConfig, Isolation, LogFormat, ServerConfig,
    SessionConfig, TracingConfig, UpstreamConfig,
};

impl Config {
    /// Reads `--config` (if any), applies the other options over it, and validates.
    pub fn load(cli: &Cli) -> anyhow::Result<Config> {
        // Validated once the options are applied: the secret usually comes from the
        // environment, not from the file.
        let mut config = match &cli.config {
            Some(path) => Config::parse_file(path)?,
            None => Config::default(),
        };
        config.apply(cli);
        config.read_secret_file()?;
        config.validate()?;
        Ok(config)
    }

    /// `cluster.secret_file` read into `cluster.secret`; both given is an error.
    fn read_secret_file(&mut self) -> anyhow::Result<()> {
        let Some(path) = &self.cluster.secret_file else {
            return Ok(());
        };
        if !self.cluster.secret.is_empty() {
            anyhow::bail!(
                "cluster.secret_file and cluster.secret (--cluster-secret, \
                 MCP_PROXY_CLUSTER_SECRET) are both given: give the secret one way"
            );
        }
        self.cluster.secret = SecretSource::File(path.clone()).read("cluster.secret_file")?;
        Ok(())
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Config> {
        let config = Config::parse_file(path)?;
        config
            .validate()
            .with_context(|| format!("in {}", path.display()))?;
        Ok(config)
    }

    pub fn from_toml(text: &str) -> anyhow::Result<Config> {
        let config = Config::parse(text)?;
        config.validate()?;
        Ok(config)
    }

    /// The file as written, not validated.
    fn parse_file(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    fn parse(text: &str) -> anyhow::Result<Config> {
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::front::PostResponse;

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
        assert_eq!(config.http_settings().trusted_proxies.len(), 2);
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
    fn every_key_of_the_shipped_example_has_a_flag() {
        use clap::CommandFactory;
        let flags: Vec<String> = Cli::command()
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(str::to_owned))
            .collect();
        // Keys whose flag is not their last segment with `-` for `_`.
        let named = |key: &str| match key {
            "cluster.secret" => "cluster-secret".to_owned(),
            "cluster.secret_file" => "cluster-secret-file".to_owned(),
            "upstream.user" => "upstream-user".to_owned(),
            "upstream.group" => "upstream-group".to_owned(),
            "upstream.protocol" => "upstream-protocol".to_owned(),
            "http.allowed_origins" => "allowed-origin".to_owned(),
            "http.allowed_hosts" => "allowed-host".to_owned(),
            "http.trusted_proxies" => "trusted-proxy".to_owned(),
            "tools.allow" => "allow-tool".to_owned(),
            "tools.deny" => "deny-tool".to_owned(),
            "resources.allow" => "allow-resource".to_owned(),
            "resources.deny" => "deny-resource".to_owned(),
            "limits.requests_per_second" => "rate-limit".to_owned(),
            "auth.client_secret" => "auth-client-secret-env".to_owned(),
            "auth.required_scopes" => "auth-required-scope".to_owned(),
            "auth.algorithms" => "auth-algorithm".to_owned(),
            "upstream.auth_secret" => "upstream-auth-secret-env".to_owned(),
            key if key.starts_with("auth.") => key.replacen('.', "-", 1).replace('_', "-"),
            key if key.starts_with("upstream.auth") => key.replacen('.', "-", 1).replace('_', "-"),
            key => key.rsplit('.').next().unwrap().replace('_', "-"),
        };
        let text = include_str!("../../config/proxy.toml");
        let mut table = String::new();
        let mut checked = 0;
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                table = format!("{name}.");
                continue;
            }
            // Set keys, and those shown commented out (`# key = value`).
            let setting = line.strip_prefix("# ").unwrap_or(line);
            let Some((key, _)) = setting.split_once(" = ") else {
                continue;
            };
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                continue;
            }
            let key = format!("{table}{key}");
            let flag = named(&key);
            assert!(flags.contains(&flag), "{key} has no --{flag}");
            checked += 1;
        }
        assert!(checked >= 55, "{checked} keys");
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
        let exposure = &config.tools;
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
        assert!(!config.resources.shows("internal://secret"));
        assert!(config.resources.shows("demo://greeting"));
        assert!(!config.servers["b"].resources.shows("test://static-text"));
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
            crate::front::modern::envelope::CacheScope::Public
        );
        assert_eq!(
            config.session.anonymous,
            crate::session::correlate::Anonymous::Shared
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
}
