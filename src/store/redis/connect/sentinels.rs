//! The Sentinels a `redis+sentinel://host:port,…/<service>[/<db>]` URL names: asked for their
//! service's master, each heard on its own for its announcements of a new one, and a client of
//! a master they name, with the store's user, password, TLS and database.

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo, RedisResult, TlsMode};

use super::{StoreConnectError, StoreConnection};

/// The Sentinels watching the store's master.
pub(in crate::store::redis) struct Sentinels {
    /// Asks them, one after another, for the master.
    asked: tokio::sync::Mutex<SentinelClient>,
    /// The service whose master they name.
    service: String,
    /// A client of each, with the Sentinels' password and TLS.
    each: Vec<redis::Client>,
    /// The store's settings, for a client of a master they name.
    connection: StoreConnection,
    /// The store's database, on whichever master.
    db: i64,
}

/// A new master, as a Sentinel announced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::store::redis) struct Announced {
    pub host: String,
    pub port: u16,
}

impl Sentinels {
    /// A client of the master as the first Sentinel that answers names it.
    pub async fn master(&self) -> RedisResult<redis::Client> {
        self.asked.lock().await.async_get_client().await
    }

    /// The service whose master they name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// A client of each Sentinel.
    pub fn each(&self) -> &[redis::Client] {
        &self.each
    }

    /// A client of the master a Sentinel announced.
    pub fn master_at(&self, master: &Announced) -> Result<redis::Client, StoreConnectError> {
        StoreConnection {
            url: format!(
                "{}/{}",
                self.connection.url_of(&master.host, master.port),
                self.db
            ),
            ..self.connection.clone()
        }
        .client()
    }
}

/// What a `redis+sentinel://` URL names.
struct Named<'a> {
    /// Each Sentinel's host (without brackets) and port.
    hosts: Vec<(String, u16)>,
    service: &'a str,
    db: Option<i64>,
}

impl StoreConnection {
    /// The Sentinels the URL names; every file is read now.
    pub(super) fn sentinels(&self) -> Result<Sentinels, StoreConnectError> {
        let named = self.named_sentinels()?;
        Ok(Sentinels {
            asked: tokio::sync::Mutex::new(self.sentinel_client(&named)?),
            service: named.service.to_owned(),
            each: self.each_sentinel(&named)?,
            connection: self.clone(),
            db: named.db.unwrap_or(0),
        })
    }

    /// `redis://host:port` (or `rediss://`), a host with a colon in brackets.
    fn url_of(&self, host: &str, port: u16) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        match host.contains(':') {
            true => format!("{scheme}://[{host}]:{port}"),
            false => format!("{scheme}://{host}:{port}"),
        }
    }

    /// The Sentinels, service and database of `redis+sentinel://host:port,…/<service>[/<db>]`.
    fn named_sentinels(&self) -> Result<Named<'_>, StoreConnectError> {
        let malformed = || StoreConnectError::Sentinels {
            url: self.shown().into_owned(),
        };
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
        let hosts = hosts
            .split(',')
            .map(|host| {
                let (name, port) = host.rsplit_once(':').ok_or_else(malformed)?;
                let port = port.parse::<u16>().map_err(|_| malformed())?;
                let name = name.trim_start_matches('[').trim_end_matches(']');
                Ok((name.to_owned(), port))
            })
            .collect::<Result<_, _>>()?;
        Ok(Named { hosts, service, db })
    }

    /// The client asking the Sentinels `named` for the master.
    fn sentinel_client(&self, named: &Named) -> Result<SentinelClient, StoreConnectError> {
        let url = self.shown().into_owned();
        let tls = self.is_tls();
        let sentinels = named.hosts.iter().map(|(host, port)| match tls {
            true => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            },
            false => ConnectionAddr::Tcp(host.clone(), *port),
        });
        let mut builder =
            SentinelClientBuilder::new(sentinels, named.service, SentinelServerType::Master)
                .map_err(|e| StoreConnectError::Url {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
        if let Some(db) = named.db {
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

    /// A client of each of the Sentinels `named`, as the one asking them speaks to them (their
    /// password, TLS with the store's certificates).
    fn each_sentinel(&self, named: &Named) -> Result<Vec<redis::Client>, StoreConnectError> {
        let url = self.shown().into_owned();
        let failed = |e: redis::RedisError| StoreConnectError::Url {
            url: url.clone(),
            reason: e.to_string(),
        };
        let certificates = match self.is_tls() {
            true => Some(self.certificates(&url)?),
            false => None,
        };
        let mut clients = Vec::new();
        for (host, port) in &named.hosts {
            let info = self
                .url_of(host, *port)
                .into_connection_info()
                .map_err(failed)?;
            let mut settings = info.redis_settings().clone();
            if let Some(password) = &self.sentinel_password {
                settings = settings.set_password(password);
            }
            let info = info.set_redis_settings(settings);
            let client = match &certificates {
                Some(certificates) => redis::Client::build_with_tls(info, certificates.clone()),
                None => redis::Client::open(info),
            };
            clients.push(client.map_err(failed)?);
        }
        Ok(clients)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings of a store at `url` with a user and password, and a Sentinel password.
    fn plain(url: &str) -> StoreConnection {
        StoreConnection {
            sentinel_password: Some("sentinel-password".into()),
            ..super::super::tests::plain(url)
        }
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
            assert!(connection.sentinels().is_ok(), "{good}");
        }
        for bad in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1/mymaster",
            "redis+sentinel://:pw@127.0.0.1:26379/mymaster",
            "redis+sentinel://127.0.0.1:26379/mymaster/x",
            "redis+sentinel://127.0.0.1:26379/mymaster/0/more",
        ] {
            let error = plain(bad).sentinels().err().expect(bad);
            assert!(
                matches!(error, StoreConnectError::Sentinels { .. }),
                "{bad}: {error}"
            );
            assert!(!error.to_string().contains("pw@"), "{error}");
        }
    }

    #[test]
    fn each_sentinel_is_heard_with_the_sentinels_password() {
        let sentinels = plain("redis+sentinel://127.0.0.1:26379,[::1]:26380/mymaster")
            .sentinels()
            .unwrap();
        assert_eq!(sentinels.service(), "mymaster");
        let each: Vec<_> = sentinels
            .each()
            .iter()
            .map(|client| {
                let info = client.get_connection_info();
                (info.addr().to_string(), info.redis_settings().password())
            })
            .collect();
        assert_eq!(
            each,
            [
                ("127.0.0.1:26379".to_owned(), Some("sentinel-password")),
                ("::1:26380".to_owned(), Some("sentinel-password")),
            ]
        );
    }

    #[test]
    fn an_announced_master_is_reached_with_the_stores_user_password_and_database() {
        let sentinels = plain("redis+sentinel://127.0.0.1:26379/mymaster/3")
            .sentinels()
            .unwrap();
        for (host, shown) in [("10.0.0.7", "10.0.0.7:6380"), ("fd00::7", "fd00::7:6380")] {
            let master = sentinels
                .master_at(&Announced {
                    host: host.into(),
                    port: 6380,
                })
                .unwrap();
            let info = master.get_connection_info();
            assert_eq!(info.addr().to_string(), shown);
            let settings = info.redis_settings();
            assert_eq!(settings.username(), Some("proxy"));
            assert_eq!(settings.password(), Some("s3cret-password"));
            assert_eq!(settings.db(), 3);
        }
    }
}
