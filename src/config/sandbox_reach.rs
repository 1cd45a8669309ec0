//! The proxy's own files out of a confined child's reach: a sandbox whose `readable` or
//! `writable` holds the configuration file, a file a secret is read from or a private key is
//! refused at start (Landlock would let the child read it).

use std::path::{Path, PathBuf};

use super::{Config, SecretSource, UpstreamConfig};

impl Config {
    /// The files the proxy reads secrets and private keys from.
    fn secret_files(&self) -> Vec<PathBuf> {
        let sources = [
            &self.auth.client_secret,
            &self.cluster.store_password,
            &self.cluster.store_sentinel_password,
        ]
        .into_iter()
        .chain(self.upstreams().map(|(_, upstream)| &upstream.auth_secret));
        let mut files: Vec<PathBuf> = sources
            .flatten()
            .filter_map(|source| match source {
                SecretSource::File(path) => Some(path.clone()),
                _ => None,
            })
            .collect();
        files.extend(
            [
                &self.cluster.secret_file,
                &self.tls.key_file,
                &self.cluster.store_client_key_file,
            ]
            .into_iter()
            .flatten()
            .cloned(),
        );
        files.extend(
            self.upstreams()
                .filter_map(|(_, upstream)| upstream.tls.client_key_file.clone()),
        );
        files
    }

    /// Each upstream by its key (`upstream`, `servers.<name>.upstream`).
    fn upstreams(&self) -> impl Iterator<Item = (String, &UpstreamConfig)> {
        std::iter::once(("upstream".to_owned(), &self.upstream)).chain(
            self.servers
                .iter()
                .map(|(name, server)| (format!("servers.{name}.upstream"), &server.upstream)),
        )
    }

    /// Refuses a sandbox that would let a child read the configuration file (`config`, when
    /// one was read) or a secret or key file.
    pub(super) fn validate_sandbox_reach(&self, config: Option<&Path>) -> anyhow::Result<()> {
        let mut own = self.secret_files();
        own.extend(config.map(Path::to_path_buf));
        let own: Vec<(PathBuf, PathBuf)> = own
            .into_iter()
            .map(|file| {
                (
                    std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone()),
                    file,
                )
            })
            .collect();
        for (key, upstream) in self.upstreams() {
            let sandbox = &upstream.sandbox;
            if !sandbox.enabled {
                continue;
            }
            for (list, paths) in [
                ("readable", &sandbox.readable),
                ("writable", &sandbox.writable),
            ] {
                for path in paths {
                    let beneath = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                    if let Some((_, file)) = own.iter().find(|(real, _)| real.starts_with(&beneath))
                    {
                        anyhow::bail!(
                            "{key}.sandbox.{list}: {} holds {}, a file of the proxy's own \
                             (its configuration, a secret or a key): a confined server could \
                             read it",
                            path.display(),
                            file.display()
                        );
                    }
                }
            }
        }
        Ok(())
    }
}
