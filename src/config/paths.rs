//! The paths the configuration names (certificates, keys, secrets, the sandbox's grants): one
//! written in the file resolves from the file's folder, one given by a flag or the environment
//! from the working directory; both are absolute once loaded, and the start lists them.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Config, SecretSource};

/// A value holding paths, each visited with the key it is set by.
pub trait VisitPaths {
    fn visit_paths(&mut self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf));
}

impl VisitPaths for PathBuf {
    fn visit_paths(&mut self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf)) {
        visit(key, self);
    }
}

impl<T: VisitPaths> VisitPaths for Option<T> {
    fn visit_paths(&mut self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf)) {
        if let Some(value) = self {
            value.visit_paths(key, visit);
        }
    }
}

impl<T: VisitPaths> VisitPaths for Vec<T> {
    fn visit_paths(&mut self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf)) {
        for value in self {
            value.visit_paths(key, visit);
        }
    }
}

/// Tables by a name of the operator's (`[servers.<name>]`).
impl<T: VisitPaths> VisitPaths for BTreeMap<String, T> {
    fn visit_paths(&mut self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf)) {
        for (name, value) in self {
            value.visit_paths(&format!("{key}.{name}"), visit);
        }
    }
}

impl VisitPaths for SecretSource {
    fn visit_paths(&mut self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf)) {
        if let SecretSource::File(path) = self {
            visit(key, path);
        }
    }
}

/// A declared key's value, visited when its type holds paths and passed over otherwise
/// (picked by method resolution on `&Probe`, as `keys::shown` picks how a default is written).
pub struct Probe<'a, T>(pub RefCell<&'a mut T>);

pub trait Visited {
    fn visit(&self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf));
}

impl<T: VisitPaths> Visited for Probe<'_, T> {
    fn visit(&self, key: &str, visit: &mut dyn FnMut(&str, &mut PathBuf)) {
        self.0.borrow_mut().visit_paths(key, visit);
    }
}

pub trait NotVisited {
    fn visit(&self, _: &str, _: &mut dyn FnMut(&str, &mut PathBuf)) {}
}

impl<T> NotVisited for &Probe<'_, T> {}

impl Config {
    /// Every relative path named made absolute from `base`.
    pub(super) fn resolve_paths(&mut self, base: &Path) {
        self.visit_paths("", &mut |_, path| {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        });
    }

    /// Every path the configuration names, with the key that names it.
    pub fn paths(&self) -> Vec<(String, PathBuf)> {
        let mut paths = Vec::new();
        self.clone().visit_paths("", &mut |key, path| {
            paths.push((key.to_owned(), path.clone()))
        });
        paths
    }
}

/// The folder the file at `path` is in, absolute: where the paths it names are read from.
pub(super) fn folder_of(path: &Path) -> std::io::Result<PathBuf> {
    let file = std::path::absolute(path)?;
    Ok(file.parent().map_or_else(PathBuf::new, Path::to_path_buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_relative_paths_are_its_folders_and_absolute_ones_stay() {
        let file = "[tls]\ncert_file = \"certs/proxy.pem\"\nkey_file = \"/etc/proxy/key.pem\"\n\
                    [upstream.sandbox]\nreadable = [\"data\"]\n\
                    [servers.notes.upstream]\nstdio = \"notes\"\nauth_secret = { file = \"s\" }\n";
        let mut config = Config::parse(file).unwrap();
        config.resolve_paths(Path::new("/srv/proxy"));
        let paths: BTreeMap<String, PathBuf> = config.paths().into_iter().collect();
        let at = |key: &str| paths[key].to_str().unwrap().to_owned();
        assert_eq!(at("tls.cert_file"), "/srv/proxy/certs/proxy.pem");
        assert_eq!(at("tls.key_file"), "/etc/proxy/key.pem");
        assert_eq!(at("upstream.sandbox.readable"), "/srv/proxy/data");
        assert_eq!(at("servers.notes.upstream.auth_secret"), "/srv/proxy/s");
        assert_eq!(paths.len(), 4, "{paths:?}");
    }
}
