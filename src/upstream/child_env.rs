//! The environment a stdio child starts with: the proxy's own, less its secrets, or only the
//! variables configuration lets through (`env_clear` + `env_pass`); then the variables
//! configuration sets (`env`). A child never inherits the proxy's secrets, however they were
//! given: by name (`MCP_PROXY_*`, the OTLP headers) or by value (any variable holding one).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;

use tokio::process::Command;

/// Variables that are the proxy's own, by name.
const WITHHELD_PREFIX: &str = "MCP_PROXY_";
const WITHHELD_NAMES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];
/// A secret shorter than this is matched whole; a longer one anywhere in a value.
const MIN_CONTAINED: usize = 8;

/// The proxy's secrets, as values: a variable holding one is never passed on.
#[derive(Debug, Default)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        Secrets {
            values: values.into_iter().filter(|v| !v.is_empty()).collect(),
        }
    }

    /// Whether the variable `name=value` is the proxy's own.
    fn withholds(&self, name: &OsStr, value: &OsStr) -> bool {
        let name = name.to_string_lossy();
        if name.starts_with(WITHHELD_PREFIX) || WITHHELD_NAMES.contains(&name.as_ref()) {
            return true;
        }
        let value = value.to_string_lossy();
        self.values.iter().any(|secret| match secret.len() {
            n if n >= MIN_CONTAINED => value.contains(secret.as_str()),
            _ => value == secret.as_str(),
        })
    }
}

/// What configuration says of a child's environment.
#[derive(Debug, Clone, Default)]
pub struct ChildEnv {
    /// Start from nothing but `pass` (else from the proxy's environment).
    pub clear: bool,
    /// With `clear`: the proxy's variables that go through.
    pub pass: Vec<String>,
    /// Set for the child, over whatever it inherits.
    pub set: BTreeMap<String, String>,
    pub secrets: Arc<Secrets>,
}

impl ChildEnv {
    /// Whether the configuration sets variable `name`.
    pub fn sets(&self, name: &str) -> bool {
        self.set.contains_key(name)
    }

    /// Gives `command` the child's environment, read from the proxy's own now.
    pub fn apply(&self, command: &mut Command) {
        let inherited = self.inherited(std::env::vars_os());
        command.env_clear().envs(inherited).envs(&self.set);
    }

    /// What the child inherits of `proxy`'s environment.
    fn inherited(
        &self,
        proxy: impl Iterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        proxy
            .filter(|(name, _)| !self.clear || self.pass.iter().any(|pass| name == pass.as_str()))
            .filter(|(name, value)| !self.secrets.withholds(name, value))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    fn names(env: &ChildEnv, proxy: &[(&str, &str)]) -> Vec<String> {
        env.inherited(vars(proxy).into_iter())
            .into_iter()
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect()
    }

    const PROXY: [(&str, &str); 6] = [
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
        (
            "MCP_PROXY_CLUSTER_SECRET",
            "0123456789abcdef0123456789abcdef",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=k"),
        ("COPY", "prefix-0123456789abcdef0123456789abcdef"),
        ("SHORT", "k"),
    ];

    #[test]
    fn the_proxys_secrets_stay_home_by_name_and_by_value() {
        let env = ChildEnv {
            secrets: Arc::new(Secrets::new([
                "0123456789abcdef0123456789abcdef".to_owned(),
                "k".to_owned(),
            ])),
            ..ChildEnv::default()
        };
        assert_eq!(names(&env, &PROXY), ["PATH", "HOME"]);
    }

    #[test]
    fn an_allow_list_passes_only_what_it_names_and_never_a_secret() {
        let env = ChildEnv {
            clear: true,
            pass: vec!["PATH".into(), "MCP_PROXY_CLUSTER_SECRET".into()],
            ..ChildEnv::default()
        };
        assert_eq!(names(&env, &PROXY), ["PATH"]);
    }
}
