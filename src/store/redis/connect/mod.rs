//! How a replica reaches its Redis store: the URL (`redis://` or `rediss://`), the user and
//! password given apart from it (never in a URL anything prints), and TLS in the shape the rest
//! of the proxy speaks it (the platform's roots, a private CA besides or instead of them, a
//! client certificate for mutual TLS).

use std::borrow::Cow;
use std::fmt;

use redis::cluster::ClusterClient;
use redis::{ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, RedisResult, TlsMode};

use crate::tls::{ClientTls, ClientTlsError};

mod sentinels;

pub(super) use sentinels::{Announced, Sentinels};

/// Where the master is found.
pub(super) enum Source {
    /// One Redis, at its address.
    Direct(Box<redis::Client>),
    /// The master of a service, as its Sentinels name it.
    Sentinels(Box<Sentinels>),
    /// A Redis Cluster, found from any of its nodes; `connection` says how to reach one node
    /// (a log follower's blocking reads go to the node serving its key).
    Cluster {
        client: Box<ClusterClient>,
        connection: Box<StoreConnection>,
    },
}

impl Source {
    /// A client of the master as it stands (not of a cluster: its connection finds them).
    pub(super) async fn master(&self) -> RedisResult<redis::Client> {
        match self {
            Source::Direct(client) => Ok((**client).clone()),
            Source::Sentinels(sentinels) => sentinels.master().await,
            Source::Cluster { .. } => Err(RedisError::from((
                ErrorKind::Client,
                "a cluster has no one master",
            ))),
        }
    }
}

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
    #[error(
        "store {url}: a Cluster URL is redis+cluster://host:port,host:port (or rediss+cluster://), \
         without a database (a cluster has only 0)"
    )]
    Cluster { url: String },
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
    /// `rediss+sentinel`, `redis+cluster`, `rediss+cluster`.
    pub fn has_known_scheme(&self) -> bool {
        matches!(
            self.scheme().as_str(),
            "redis"
                | "rediss"
                | "redis+sentinel"
                | "rediss+sentinel"
                | "redis+cluster"
                | "rediss+cluster"
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

    /// Whether the store is a Redis Cluster (`redis+cluster://`).
    pub fn is_cluster(&self) -> bool {
        self.scheme().ends_with("+cluster")
    }

    /// Checks the URL's form and reads every file, as connecting does, without connecting.
    pub fn check(&self) -> Result<(), StoreConnectError> {
        self.source().map(drop)
    }

    /// Where the master is found: at the URL, or through the Sentinels it names.
    pub(super) fn source(&self) -> Result<Source, StoreConnectError> {
        if self.is_cluster() {
            return Ok(Source::Cluster {
                client: Box::new(self.cluster_client()?),
                connection: Box::new(self.clone()),
            });
        }
        match self.is_sentinel() {
            false => Ok(Source::Direct(Box::new(self.client()?))),
            true => Ok(Source::Sentinels(Box::new(self.sentinels()?))),
        }
    }

    /// The `host:port` of each node a `redis+cluster://host:port,host:port[/0]` URL names.
    fn cluster_nodes(&self) -> Result<Vec<String>, StoreConnectError> {
        let malformed = || StoreConnectError::Cluster {
            url: self.shown().into_owned(),
        };
        let (_, rest) = self.url.split_once("://").ok_or_else(malformed)?;
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        if hosts.contains('@') || !matches!(path.trim_end_matches('/'), "" | "0") {
            // Credentials go in cluster.store_username/store_password, never in this URL.
            return Err(malformed());
        }
        hosts
            .split(',')
            .map(|host| {
                let (name, port) = host.rsplit_once(':').ok_or_else(malformed)?;
                port.parse::<u16>().map_err(|_| malformed())?;
                match name.is_empty() {
                    true => Err(malformed()),
                    false => Ok(host.to_owned()),
                }
            })
            .collect()
    }

    /// The client of the cluster whose nodes the URL names (any of them: the others are
    /// found from it).
    fn cluster_client(&self) -> Result<ClusterClient, StoreConnectError> {
        let url = self.shown().into_owned();
        let failed = |e: redis::RedisError| StoreConnectError::Url {
            url: url.clone(),
            reason: e.to_string(),
        };
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        let nodes = self
            .cluster_nodes()?
            .into_iter()
            .map(|node| format!("{scheme}://{node}").into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(std::time::Duration::from_secs(2))
            .response_timeout(std::time::Duration::from_secs(2))
            .retries(3)
            .min_retry_wait(50)
            .max_retry_wait(500);
        if let Some(username) = &self.username {
            builder = builder.username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password);
        }
        if self.is_tls() {
            builder = builder.tls(TlsMode::Secure).certs(self.certificates(&url)?);
        }
        builder.build().map_err(failed)
    }

    /// A client of one node of the cluster, at `address` (`host:port`), with the same user,
    /// password and TLS.
    pub(super) fn node_client(&self, address: &str) -> Result<redis::Client, StoreConnectError> {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        StoreConnection {
            url: format!("{scheme}://{address}/0"),
            ..self.clone()
        }
        .client()
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

    /// Settings of a store at `url` with a user and password, no Sentinel password, no TLS.
    pub(super) fn plain(url: &str) -> StoreConnection {
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
    fn a_cluster_url_names_its_nodes_and_no_database() {
        for good in [
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
            "redis+cluster://redis.internal:6379/",
            "rediss+cluster://[::1]:7000/0",
        ] {
            let connection = plain(good);
            assert!(
                connection.is_cluster() && connection.has_known_scheme(),
                "{good}"
            );
            assert!(connection.cluster_client().is_ok(), "{good}");
        }
        assert!(plain("rediss+cluster://h:1").is_tls());
        for bad in [
            "redis+cluster://127.0.0.1",
            "redis+cluster://127.0.0.1:7000/3",
            "redis+cluster://:pw@127.0.0.1:7000",
            "redis+cluster://127.0.0.1:7000,:7001",
            "redis+cluster://127.0.0.1:x",
        ] {
            let error = plain(bad).cluster_client().expect_err(bad);
            assert!(
                matches!(error, StoreConnectError::Cluster { .. }),
                "{bad}: {error}"
            );
            assert!(!error.to_string().contains("pw@"), "{error}");
        }
    }
}
