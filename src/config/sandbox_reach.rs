//! The proxy's own files out of a confined child's reach: a sandbox that grants a directory
//! holding the configuration file, a file a secret is read from or a private key is refused at
//! start (Landlock would let the child read it), whether configuration grants it or the proxy
//! does by itself (the command's own directories). A hard link to such a file elsewhere is not
//! found: the book says so.

use std::path::{Path, PathBuf};

use super::{Config, SecretSource, UpstreamConfig};
use crate::upstream::sandbox::{default_cache_root, private_dirs_base, SYSTEM_READABLE};
use crate::upstream::stdio::{own_directories, StdioSpec};

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
                &self.http.trusted_proxy_token_file,
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
    /// one was read) or a secret or key file: beneath a directory configuration grants
    /// (`readable`, `writable`, `cache_dir`) or one the proxy grants by itself (the system's,
    /// the command's own: its program's, its script's, their `node_modules`, a virtual
    /// environment), each canonicalised.
    pub(super) fn validate_sandbox_reach(&self, config: Option<&Path>) -> anyhow::Result<()> {
        let mut own = self.secret_files();
        own.extend(config.map(Path::to_path_buf));
        let own: Vec<(PathBuf, PathBuf)> =
            own.into_iter().map(|file| (real(&file), file)).collect();
        for (key, upstream) in self.upstreams() {
            shared_places_out_of_reach(&key, upstream)?;
            for (grant, beneath) in granted(&key, upstream)? {
                let beneath = real(&beneath);
                if let Some((_, file)) = own.iter().find(|(real, _)| real.starts_with(&beneath)) {
                    anyhow::bail!(
                        "{grant}: {} holds {}, a file of the proxy's own (its configuration, a \
                         secret or a key): a confined server could read it; move the file out \
                         of it, or narrow the grant",
                        beneath.display(),
                        file.display()
                    );
                }
            }
        }
        Ok(())
    }
}

/// Refuses a grant of the server at `key` that holds (or is beneath) what children share: the
/// package caches, which only the warming child writes (a `writable` one would let a session's
/// child change what another's runs), and the children's private directories (a `readable`
/// or `writable` one would open another session's to it).
fn shared_places_out_of_reach(key: &str, upstream: &UpstreamConfig) -> anyhow::Result<()> {
    let sandbox = &upstream.sandbox;
    if !sandbox.enabled || upstream.http.is_some() || upstream.sse.is_some() {
        return Ok(());
    }
    let cache = real(&sandbox.cache_dir.clone().unwrap_or_else(default_cache_root));
    let private = real(&private_dirs_base());
    let overlap = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
    let grants = [
        ("writable", &sandbox.writable),
        ("readable", &sandbox.readable),
    ];
    for (list, paths) in grants {
        for path in paths.iter().map(|path| real(path)) {
            let shared = match (list, overlap(&path, &cache), overlap(&path, &private)) {
                ("writable", true, _) => {
                    format!(
                        "{}, the package caches (sandbox.cache_dir)",
                        cache.display()
                    )
                }
                (_, _, true) => format!(
                    "{}, the children's private directories (in the temporary directory, TMPDIR)",
                    private.display()
                ),
                _ => continue,
            };
            anyhow::bail!(
                "{key}.sandbox.{list}: {} overlaps {shared}: a confined server could reach what \
                 another session's child runs or keeps; grant a folder of its own (each child \
                 has a private TMPDIR already), or move those out of it",
                path.display()
            );
        }
    }
    // The directories the proxy grants the command by itself are read by every child too.
    for (grant, dir) in own_grants(key, upstream)? {
        let dir = real(&dir);
        if overlap(&dir, &private) {
            anyhow::bail!(
                "{grant}: {} holds {}, the children's private directories (in the temporary \
                 directory, TMPDIR): a confined server could read another session's; put the \
                 server's files in a folder of their own, or set TMPDIR elsewhere",
                dir.display(),
                private.display()
            );
        }
    }
    Ok(())
}

/// The directories the proxy grants the command of the server at `key` by itself (its
/// program's, its files', their `node_modules`, a virtual environment, a Python's `lib`), as
/// the stdio spec finds them at start.
fn own_grants(key: &str, upstream: &UpstreamConfig) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let command = match &upstream.stdio {
        Some(command) => {
            StdioSpec::parse(command).map_err(|e| anyhow::anyhow!("{key}.stdio: {e}"))?
        }
        None => StdioSpec {
            program: std::env::current_exe()?.to_string_lossy().into_owned(),
            ..StdioSpec::parse("demo-server").map_err(|e| anyhow::anyhow!(e))?
        },
    };
    let Ok(program) = command.locate() else {
        return Ok(Vec::new());
    };
    let own = format!(
        "{key}.stdio (the command's own directories, granted to its children: its program's, \
         its files', their node_modules, a virtual environment, a Python's lib)"
    );
    Ok(own_directories(&program, &command.args)
        .into_iter()
        .map(|dir| (own.clone(), dir))
        .collect())
}

/// A path with its links resolved, as the kernel reaches it (as given where it does not exist).
fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Every directory a confined child of the server at `key` may read beneath, with what grants
/// it (a key, or what the proxy grants by itself).
fn granted(key: &str, upstream: &UpstreamConfig) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let sandbox = &upstream.sandbox;
    if !sandbox.enabled || upstream.http.is_some() || upstream.sse.is_some() {
        return Ok(Vec::new());
    }
    let mut grants: Vec<(String, PathBuf)> = Vec::new();
    for (list, paths) in [
        ("readable", &sandbox.readable),
        ("writable", &sandbox.writable),
    ] {
        let grant = format!("{key}.sandbox.{list}");
        grants.extend(paths.iter().map(|path| (grant.clone(), path.clone())));
    }
    let cache = sandbox.cache_dir.clone().unwrap_or_else(default_cache_root);
    grants.push((format!("{key}.sandbox.cache_dir"), cache));
    let system = format!("{key}.sandbox (the system's directories, granted to every child)");
    grants.extend(
        SYSTEM_READABLE
            .iter()
            .map(|path| (system.clone(), PathBuf::from(path))),
    );
    grants.extend(own_grants(key, upstream)?);
    Ok(grants)
}
