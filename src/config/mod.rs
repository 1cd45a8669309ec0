//! Configuration: every key declared once (`keys`), in the tables of the TOML file (`file`,
//! `cluster`, `upstream`, `session`, `http`, `auth`, `exposure`), each with its flag (`cli`);
//! validation whose messages name the offending key (`validate`), the settings each layer takes
//! from it (`settings`), and the reference rendered from the declarations (`reference`).

mod auth;
mod cli;
mod cluster;
mod duration;
mod exposure;
mod file;
mod for_layers;
mod http;
mod keys;
mod parsers;
mod paths;
mod reference;
mod sandbox;
mod sandbox_reach;
mod session;
pub use exposure::{exposure, LimitsConfig, PromptsConfig, ResourcesConfig, ToolsConfig};
pub use for_layers::ServedBy;
mod tls;
mod upstream;
mod upstream_auth;
mod validate;

use std::path::Path;

use anyhow::Context;

pub use auth::{AuthConfig, AuthFlags, ClientSecretFlags, SecretSource};
pub use cli::{Cli, Command, ExposedSecret};
pub use cluster::{ClusterConfig, ClusterFlags, TracingConfig, TracingFlags};
pub use duration::parse_duration;
pub use file::{Config, ConfigFlags, Isolation, LogFormat, ServerConfig, VirtualConfig};
pub use http::{HttpConfig, HttpFlags};
pub use reference::{entries, render_reference, Entry, REFERENCE_PATH};
pub use session::{Correlation, SessionConfig, SessionFlags};
pub use upstream::{UpstreamConfig, UpstreamFlags, UpstreamSecretFlags};
pub use upstream_auth::UpstreamAuth;

impl Config {
    /// Reads `--config` (if any), applies the other options over it, and validates.
    pub fn load(cli: &Cli) -> anyhow::Result<Config> {
        // Validated once the options are applied: the secret usually comes from the
        // environment, not from the file.
        let mut config = match &cli.config {
            Some(path) => {
                let mut config = Config::parse_file(path)?;
                config.resolve_paths(&paths::folder_of(path)?);
                config
            }
            None => Config::default(),
        };
        config.apply(cli);
        config.resolve_paths(&std::env::current_dir()?);
        config.read_secret_file()?;
        config.validate()?;
        config.validate_sandbox_reach(cli.config.as_deref())?;
        Ok(config)
    }

    /// The flags given over the file (or the defaults): each replaces the value it sets.
    pub(super) fn apply(&mut self, cli: &Cli) {
        cli.keys.upstream.replace_server(&mut self.upstream);
        cli.keys.apply(self);
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
        let mut config = Config::parse_file(path)?;
        config.resolve_paths(&paths::folder_of(path)?);
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
mod flag_tests;
#[cfg(test)]
mod tests;
