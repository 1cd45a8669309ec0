//! The command line: `--config`, a flag for every key of the file (declared with the key), the
//! demo server and health subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use super::duration::parse_duration;
use super::file::ConfigFlags;

/// A session-aware reverse proxy for MCP servers: it owns their sessions, keeps a replay window
/// per session and coalesces change notifications, so clients survive dropped streams.
#[derive(Debug, Parser)]
#[command(name = "mcp-session-proxy", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// TOML configuration file; options given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Every key of the file, each by its flag.
    #[command(flatten)]
    pub keys: ConfigFlags,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the bundled demo MCP server on stdio (protocol 2025-11-25).
    DemoServer {
        /// Serve it over Streamable HTTP on this address instead (prints its URL on stdout).
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
        /// `legacy` (2024-11-05 … 2025-11-25, initialized first) or `2026-07-28` (modern only:
        /// no initialize, per-request metadata, subscriptions/listen, input_required).
        #[arg(long, default_value = "legacy")]
        protocol: crate::wire::era::Era,
    },
    /// Ask a running proxy whether it is alive: GET its /healthz and exit 0 on a 2xx answer, 1
    /// on anything else or none within --timeout (a container's health check).
    Health {
        /// The endpoint asked (plain HTTP; /readyz asks whether it takes traffic).
        #[arg(
            long,
            value_name = "URL",
            default_value = "http://127.0.0.1:8787/healthz"
        )]
        url: String,
        /// The Host header sent: the proxy refuses names it does not allow, health checks
        /// included [default: the first of MCP_PROXY_ALLOWED_HOSTS, as the proxy reads it,
        /// unless `*`; else the URL's host and port].
        #[arg(long, value_name = "HOST")]
        host: Option<String>,
        /// The hosts the proxy allows, as it reads them (repeatable, or a comma-separated list
        /// in MCP_PROXY_ALLOWED_HOSTS): the default Host is the first.
        #[arg(
            long = "allowed-host",
            value_name = "HOST",
            env = "MCP_PROXY_ALLOWED_HOSTS",
            value_delimiter = ','
        )]
        allowed_hosts: Vec<String>,
        /// The longest wait for the whole answer.
        #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
        timeout: Duration,
    },
}

/// An option whose value held a secret on the command line, where every local user can read it
/// (`/proc/<pid>/cmdline`), and where the secret belongs instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExposedSecret {
    pub option: &'static str,
    pub instead: &'static str,
}

impl Cli {
    /// Parses the process's arguments as [`Parser::parse`] does (exiting on an error or
    /// `--help`), and names the options that gave a secret there.
    pub fn parse_noting_exposed_secrets() -> (Cli, Vec<ExposedSecret>) {
        let matches = Cli::grouped_command().get_matches();
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        let exposed = cli.exposed_secrets(&matches);
        (cli, exposed)
    }

    /// The command line as `--help` shows it: each key's flag under the heading of its table
    /// (`[session]`, `[upstream.sandbox]`), its help naming the key (`(session.idle_ttl)`);
    /// clap adds the environment variable.
    pub fn grouped_command() -> clap::Command {
        let mut command = Cli::command();
        let ids: Vec<(String, String)> = command
            .get_arguments()
            .filter_map(|arg| Some((arg.get_long()?.to_owned(), arg.get_id().to_string())))
            .collect();
        for entry in super::reference::entries() {
            let heading = match entry.path.rsplit_once('.') {
                Some((table, _)) => format!("[{table}]"),
                None => "Top-level keys".to_owned(),
            };
            for flag in &entry.flags {
                let long = flag.trim_start_matches("--");
                let Some((_, id)) = ids.iter().find(|(name, _)| name == long) else {
                    continue;
                };
                let key = format!("({})", entry.path);
                command = command.mut_arg(id, |arg| {
                    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                    // Named already (`(cluster.store_password = { env })`): once is enough.
                    let named = help.contains(&format!("({}", entry.path));
                    let help = match named {
                        true => help,
                        false => with_key(&help, &key),
                    };
                    arg.help(help).help_heading(heading.clone())
                });
            }
        }
        command
    }

    /// The options of `matches` given on the command line (not by environment) whose value is
    /// or holds a secret: the cluster secret, a password in a URL.
    pub fn exposed_secrets(&self, matches: &ArgMatches) -> Vec<ExposedSecret> {
        let typed = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        let with_password = |url: &Option<String>| {
            url.as_deref()
                .and_then(crate::telemetry::redact::url_password)
                .is_some()
        };
        let mut exposed = Vec::new();
        let keys = &self.keys;
        if typed("secret") {
            exposed.push(ExposedSecret {
                option: "--cluster-secret",
                instead: "MCP_PROXY_CLUSTER_SECRET or --cluster-secret-file",
            });
        }
        if typed("store") && with_password(&keys.store) {
            exposed.push(ExposedSecret {
                option: "--store",
                instead: "MCP_PROXY_STORE or `store` in the configuration file",
            });
        }
        let upstream = &keys.upstream;
        for (id, option, url) in [
            ("http", "--http", &upstream.http),
            ("sse", "--sse", &upstream.sse),
        ] {
            if typed(id) && with_password(url) {
                exposed.push(ExposedSecret {
                    option,
                    instead: "the configuration file's [upstream]",
                });
            }
        }
        exposed
    }
}

/// `help` with the key it sets before its `[default: …]` (or at its end).
fn with_key(help: &str, key: &str) -> String {
    match help.rfind(" [default: ") {
        Some(at) => format!("{} {key}{}", &help[..at], &help[at..]),
        None => format!("{help} {key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_groups_the_flags_by_table_and_names_each_key() {
        let help = Cli::grouped_command().render_long_help().to_string();
        for heading in [
            "[session]:",
            "[http]:",
            "[upstream]:",
            "[upstream.sandbox]:",
            "[tls]:",
        ] {
            assert!(help.contains(heading), "no {heading} in the help");
        }
        let flag = |name: &str| {
            let at = help.find(&format!("--{name} ")).unwrap();
            help[at..].split("\n\n").next().unwrap().to_owned()
        };
        assert!(flag("idle-ttl").contains("(session.idle_ttl) [default: 10m]"));
        assert!(flag("sandbox-memory").contains("(upstream.sandbox.memory)"));
        assert!(
            flag("store").contains("(store)") && flag("store").contains("[env: MCP_PROXY_STORE")
        );
        let password = flag("store-password-env");
        assert_eq!(
            password.matches("cluster.store_password").count(),
            1,
            "{password}"
        );
    }
}
