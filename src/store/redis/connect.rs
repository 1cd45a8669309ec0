//! How a replica reaches its Redis store: the URL (`redis://` or `rediss://`), the user and
//! password given apart from it (never in a URL anything prints), and TLS in the shape the rest
//! of the proxy speaks it (the platform's roots, a private CA besides or instead of them, a
//! client certificate for mutual TLS).

use std::borrow::Cow;
use std::fmt;

use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::tls::{ClientTls, ClientTlsError};

/// Where the store is and how the proxy shows itself to it.
#[derive(Clone)]
pub struct StoreConnection {
    /// `redis://host:port/db` or `rediss://host:port/db`.
    pub url: String,
    /// An ACL user (else the default user).
    pub username: Option<String>,
    /// The password, read from where configuration says it is.
    pub password: Option<String>,
    /// With `rediss://`: how the server is verified and what the proxy shows it.
    pub tls: ClientTls,
}

impl fmt::Debug for StoreConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConnection")
            .field("url", &self.shown())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// A store the proxy cannot be a client of as configured.
#[derive(Debug, thiserror::Error)]
pub enum StoreConnectError {
    #[error("store {url}: {reason}")]
    Url { url: String, reason: String },
    #[error("store {url}: host verification cannot be turned off (#insecure)")]
    Insecure { url: String },
    #[error("store {url}: {source}")]
    Tls { url: String, source: ClientTlsError },
    #[error("store {url}: cannot read {file}: {reason}")]
    Unreadable {
        url: String,
        file: String,
        reason: String,
    },
}

impl StoreConnection {
    /// The URL as logs and errors show it: without a password it may hold.
    pub fn shown(&self) -> Cow<'_, str> {
        crate::telemetry::redact::url(&self.url)
    }

    /// Whether the store is spoken to over TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        self.url
            .split("://")
            .next()
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss"))
    }

    /// The Redis client these settings describe; every file is read now.
    pub fn client(&self) -> Result<redis::Client, StoreConnectError> {
        let url = self.shown().into_owned();
        let info =
            self.url
                .as_str()
                .into_connection_info()
                .map_err(|e| StoreConnectError::Url {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
        let mut settings = info.redis_settings().clone();
        if let Some(username) = &self.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        let info = info.set_redis_settings(settings);
        let client = match info.addr() {
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(StoreConnectError::Insecure { url })
            }
            ConnectionAddr::TcpTls { .. } => {
                redis::Client::build_with_tls(info, self.certificates(&url)?)
            }
            _ => redis::Client::open(info),
        };
        client.map_err(|e| StoreConnectError::Url {
            url,
            reason: e.to_string(),
        })
    }

    /// What the Redis client trusts and shows, checked as the rest of the proxy checks them.
    fn certificates(&self, url: &str) -> Result<redis::TlsCertificates, StoreConnectError> {
        let tls_error = |source| StoreConnectError::Tls {
            url: url.to_owned(),
            source,
        };
        self.tls.config().map_err(tls_error)?;
        let root_cert = self.tls.trusted_pem().map_err(tls_error)?;
        let read = |file: &std::path::Path| {
            std::fs::read(file).map_err(|e| StoreConnectError::Unreadable {
                url: url.to_owned(),
                file: file.display().to_string(),
                reason: e.to_string(),
            })
        };
        let client_tls = match (&self.tls.client_cert_file, &self.tls.client_key_file) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert: Some(root_cert),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(url: &str) -> StoreConnection {
        StoreConnection {
            url: url.into(),
            username: Some("proxy".into()),
            password: Some("s3cret-password".into()),
            tls: ClientTls::default(),
        }
    }

    #[test]
    fn the_password_is_never_shown() {
        let connection = plain("redis://:in-the-url@127.0.0.1:6379/0");
        let shown = format!("{connection:?} {}", connection.shown());
        assert!(!shown.contains("s3cret-password"), "{shown}");
        assert!(!shown.contains("in-the-url"), "{shown}");
    }

    #[test]
    fn the_user_and_password_given_apart_are_the_clients() {
        let client = plain("redis://127.0.0.1:6379/2").client().unwrap();
        let settings = client.get_connection_info().redis_settings();
        assert_eq!(settings.username(), Some("proxy"));
        assert_eq!(settings.password(), Some("s3cret-password"));
        assert_eq!(settings.db(), 2);
    }

    #[test]
    fn host_verification_cannot_be_turned_off() {
        let error = plain("rediss://127.0.0.1:6380/0#insecure")
            .client()
            .unwrap_err();
        assert!(
            matches!(error, StoreConnectError::Insecure { .. }),
            "{error}"
        );
        assert!(plain("rediss://127.0.0.1:6380/0").is_tls());
        assert!(!plain("redis://127.0.0.1:6380/0").is_tls());
    }
}
