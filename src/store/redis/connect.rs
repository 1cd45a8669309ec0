//! How a replica reaches its Redis store: the URL (`redis://` or `rediss://`), the user and
//! password given apart from it (never in a URL anything prints), and TLS in the shape the rest
//! of the proxy speaks it (the platform's roots, a private CA besides or instead of them, a
//! client certificate for mutual TLS).

use std::borrow::Cow;
use std::fmt;

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo, TlsMode};

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
    /// The Sentinels' own password (`redis+sentinel://`), when they ask for one.
    pub sentinel_password: Option<String>,
    /// With `rediss://`: how the server is verified and what the proxy shows it.
    pub tls: ClientTls,
}

impl fmt::Debug for StoreConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConnection")
            .field("url", &self.shown())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
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
    #[error(
        "store {url}: a Sentinel URL is redis+sentinel://host:port,host:port/<service>[/<db>] \
         (or rediss+sentinel://)"
    )]
    Sentinels { url: String },
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

    /// The URL's scheme, in lower case.
    fn scheme(&self) -> String {
        self.url
            .split("://")
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase()
    }

    /// Whether the URL's scheme is one of a Redis store: `redis`, `rediss`, `redis+sentinel`,
    /// `rediss+sentinel`.
    pub fn has_known_scheme(&self) -> bool {
        matches!(
            self.scheme().as_str(),
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel"
        )
    }

    /// Whether the store is spoken to over TLS (`rediss://`, `rediss+sentinel://`).
    pub fn is_tls(&self) -> bool {
        self.scheme().starts_with("rediss")
    }

    /// Whether the master is found through Sentinels (`redis+sentinel://`).
    pub fn is_sentinel(&self) -> bool {
        self.scheme().ends_with("+sentinel")
    }

    /// Checks the URL's form and reads every file, as connecting does, without connecting.
    pub fn check(&self) -> Result<(), StoreConnectError> {
        self.source().map(drop)
    }

    /// Where the master is found: at the URL, or through the Sentinels it names.
    pub(super) fn source(&self) -> Result<super::link::Source, StoreConnectError> {
        use super::link::Source;
        match self.is_sentinel() {
            false => Ok(Source::Direct(self.client()?)),
            true => Ok(Source::Sentinels(tokio::sync::Mutex::new(
                self.sentinel_client()?,
            ))),
        }
    }

    /// The client of the Sentinels named by `redis+sentinel://host:port,…/<service>[/<db>]`.
    fn sentinel_client(&self) -> Result<SentinelClient, StoreConnectError> {
        let url = self.shown().into_owned();
        let malformed = || StoreConnectError::Sentinels { url: url.clone() };
        let (_, rest) = self.url.split_once("://").ok_or_else(malformed)?;
        let (hosts, path) = rest.split_once('/').ok_or_else(malformed)?;
        if hosts.contains('@') {
            // Credentials go in cluster.store_username/store_password, never in this URL.
            return Err(malformed());
        }
        let mut parts = path.trim_end_matches('/').split('/');
        let service = parts
            .next()
            .filter(|s| !s.is_empty())
            .ok_or_else(malformed)?;
        let db = match parts.next() {
            Some(db) => Some(db.parse::<i64>().map_err(|_| malformed())?),
            None => None,
        };
        if parts.next().is_some() {
            return Err(malformed());
        }
        let tls = self.is_tls();
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = host.rsplit_once(':').ok_or_else(malformed)?;
            let port = port.parse::<u16>().map_err(|_| malformed())?;
            let name = name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            sentinels.push(match tls {
                true => ConnectionAddr::TcpTls {
                    host: name,
                    port,
                    insecure: false,
                    tls_params: None,
                },
                false => ConnectionAddr::Tcp(name, port),
            });
        }
        let mut builder =
            SentinelClientBuilder::new(sentinels, service, SentinelServerType::Master).map_err(
                |e| StoreConnectError::Url {
                    url: url.clone(),
                    reason: e.to_string(),
                },
            )?;
        if let Some(db) = db {
            builder = builder.set_client_to_redis_db(db);
        }
        if let Some(username) = &self.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(password) = &self.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if tls {
            let certificates = self.certificates(&url)?;
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_redis_certificates(certificates.clone())
                .set_client_to_sentinel_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_certificates(certificates);
        }
        builder.build().map_err(|e| StoreConnectError::Url {
            url,
            reason: e.to_string(),
        })
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
            sentinel_password: None,
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

    #[test]
    fn a_sentinel_url_names_its_sentinels_and_service() {
        for good in [
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
            "redis+sentinel://[::1]:26379/mymaster/3",
            "rediss+sentinel://sentinel.internal:26379/mymaster",
        ] {
            let connection = plain(good);
            assert!(connection.is_sentinel(), "{good}");
            assert!(connection.sentinel_client().is_ok(), "{good}");
        }
        for bad in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1/mymaster",
            "redis+sentinel://:pw@127.0.0.1:26379/mymaster",
            "redis+sentinel://127.0.0.1:26379/mymaster/x",
            "redis+sentinel://127.0.0.1:26379/mymaster/0/more",
        ] {
            let error = plain(bad).sentinel_client().err().expect(bad);
            assert!(
                matches!(error, StoreConnectError::Sentinels { .. }),
                "{bad}: {error}"
            );
            assert!(!error.to_string().contains("pw@"), "{error}");
        }
    }
}
