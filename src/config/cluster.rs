//! `[cluster]`: replicas sharing sessions through a Redis store; and `[tracing]`: spans
//! exported over OTLP/HTTP.

use std::path::PathBuf;
use std::time::Duration;

use super::auth::SecretSource;
use super::duration::parse_duration;
use super::file::duration;
use super::keys::merge::SecretFlags;
use super::keys::settings;

settings! {
    /// Replicas sharing sessions through a Redis store.
    pub struct ClusterConfig, flags ClusterFlags {
        /// With a Redis store: this replica's name, 1 to 32 letters, digits, '-' and '_' (it
        /// becomes part of session ids) [default: a random one].
        #[arg(long, value_name = "NAME")]
        pub node_id: String = String::new(), set;

        /// With a Redis store: the base URL the other replicas reach this one at; https:// with
        /// the listener over TLS ([tls]) [default: http://<listen>, https://<listen> with [tls]].
        #[arg(long, value_name = "URL")]
        pub advertise: String = String::new(), set;

        /// With a Redis store and replicas reached over https://: the CA (PEM) their certificates
        /// come from, trusted alone for the hop; the replica shows its own listener's certificate
        /// to one that asks [default: none: the platform's roots].
        #[arg(id = "cluster_ca_file", long = "cluster-ca-file", value_name = "PATH")]
        #[flag_id = "cluster_ca_file"]
        pub ca_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With replicas reached over https://: the name their certificates are verified
        /// against (and sent as SNI) instead of the advertised URL's host, for replicas that
        /// advertise their pods' addresses and share one certificate naming their Service
        /// [default: the advertised URL's host].
        #[arg(id = "cluster_server_name", long = "cluster-server-name", value_name = "NAME")]
        #[flag_id = "cluster_server_name"]
        pub server_name: Option<String> = None, some(Option<String>);

        /// With a Redis store: the secret the replicas share to authenticate their internal requests.
        /// Give it in MCP_PROXY_CLUSTER_SECRET or --cluster-secret-file: on the command line every
        /// local user can read it [default: none].
        #[arg(
            long = "cluster-secret",
            value_name = "SECRET",
            env = "MCP_PROXY_CLUSTER_SECRET",
            hide_env_values = true
        )]
        pub secret: String = String::new(), set;

        /// With a Redis store: the file holding that secret (its first line), e.g. a mounted
        /// Kubernetes or Docker secret [default: none].
        #[arg(long = "cluster-secret-file", value_name = "PATH")]
        pub secret_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With a Redis store: the user it authenticates as (an ACL user; the book lists the
        /// commands and keys to grant it) [default: none: the default user].
        #[arg(long = "store-username", value_name = "NAME")]
        pub store_username: String = String::new(), set;

        /// With a Redis store: its password, by where it is: `{ env = "NAME" }` or
        /// `{ file = "/path" }` (--store-password-env NAME or --store-password-file PATH), never in
        /// a URL anything prints [default: none].
        #[command(flatten)]
        pub store_password: Option<SecretSource> = None, secret(StorePasswordFlags);

        /// With a redis+sentinel:// store: the Sentinels' own password, when they ask for one:
        /// `{ env = "NAME" }` or `{ file = "/path" }` (--store-sentinel-password-env NAME or
        /// --store-sentinel-password-file PATH) [default: none].
        #[command(flatten)]
        pub store_sentinel_password: Option<SecretSource> = None, secret(SentinelPasswordFlags);

        /// With a rediss:// store: a PEM file of CA certificates trusted for it besides the
        /// platform's roots: a private CA [default: none].
        #[arg(long = "store-ca-file", value_name = "PATH")]
        pub store_ca_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With a rediss:// store: trust the platform's roots as well as store_ca_file
        /// (true/false); false trusts store_ca_file alone [default: true].
        #[arg(long = "store-platform-roots", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub store_platform_roots: bool = true, set;

        /// With a rediss:// store: a PEM certificate (or chain, the leaf first) shown to Redis
        /// when it asks for one: mutual TLS [default: none].
        #[arg(long = "store-client-cert", value_name = "PATH")]
        pub store_client_cert_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With a rediss:// store: the PEM private key of that certificate [default: none].
        #[arg(long = "store-client-key", value_name = "PATH")]
        pub store_client_key_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With a Redis store: the prefix of every key, so that deployments can share one Redis
        /// [default: mcp-proxy].
        #[arg(long, value_name = "PREFIX")]
        pub namespace: String = "mcp-proxy".into(), set;

        /// With a Redis store: how often this replica tells the others it is alive [default: 1s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub heartbeat: Duration = Duration::from_secs(1), set;

        /// With a Redis store: how long a silent replica has until its sessions are taken over
        /// [default: 3s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub owner_timeout: Duration = Duration::from_secs(3), set;

        /// With a Redis store: how long a request for a session whose owner cannot be reached is
        /// held while the owner is found dead and the session taken over, instead of a 503
        /// [default: 5s].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub takeover_wait: Duration = Duration::from_secs(5), set;

        /// With a Redis store: how long this replica's writes wait to go to Redis together; what a
        /// later write undoes within it is never sent (0: each write at once) [default: 1ms].
        #[serde(deserialize_with = "duration")]
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        #[check(bounded)]
        pub write_delay: Duration = Duration::from_millis(1), set;

        /// With a Redis store: writes queued for Redis at most; past it, new sessions and requests
        /// wait, and the servers whose messages are queued are not read until there is room
        /// [default: 50000].
        #[arg(long, value_name = "N")]
        pub max_write_queue: usize = 50_000, set;

        /// With a Redis store: nonces of the hops taken from other replicas kept at most, for the
        /// 30 s a hop's signature is valid, so that none is taken twice; past it, hops are refused
        /// (503) until older ones expire [default: 1000000].
        #[arg(long, value_name = "N")]
        pub max_hop_nonces: usize = crate::hop::DEFAULT_MAX_NONCES, set;
    }
}

/// `cluster.store_password` by where it is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StorePasswordFlags {
    /// The environment variable holding the store's password (cluster.store_password = { env }).
    #[arg(long = "store-password-env", value_name = "NAME")]
    pub store_password_env: Option<String>,

    /// The file holding the store's password, its first line (cluster.store_password = { file }).
    #[arg(long = "store-password-file", value_name = "PATH")]
    pub store_password_file: Option<PathBuf>,
}

impl SecretFlags for StorePasswordFlags {
    fn source(&self) -> Option<SecretSource> {
        SecretSource::given(&self.store_password_env, &self.store_password_file)
    }
}

/// `cluster.store_sentinel_password` by where it is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SentinelPasswordFlags {
    /// The environment variable holding the Sentinels' password
    /// (cluster.store_sentinel_password = { env }).
    #[arg(long = "store-sentinel-password-env", value_name = "NAME")]
    pub store_sentinel_password_env: Option<String>,

    /// The file holding the Sentinels' password, its first line
    /// (cluster.store_sentinel_password = { file }).
    #[arg(long = "store-sentinel-password-file", value_name = "PATH")]
    pub store_sentinel_password_file: Option<PathBuf>,
}

impl SecretFlags for SentinelPasswordFlags {
    fn source(&self) -> Option<SecretSource> {
        SecretSource::given(
            &self.store_sentinel_password_env,
            &self.store_sentinel_password_file,
        )
    }
}

impl ClusterConfig {
    /// How the Redis store at `url` is reached: the password read (a variable that is not set,
    /// or a file that cannot be read, is an error naming the key) and the TLS settings.
    pub fn store_connection(
        &self,
        url: &str,
    ) -> anyhow::Result<crate::store::redis::StoreConnection> {
        Ok(crate::store::redis::StoreConnection {
            url: url.to_owned(),
            username: Some(self.store_username.clone()).filter(|name| !name.is_empty()),
            password: self
                .store_password
                .as_ref()
                .map(|source| source.read("cluster.store_password"))
                .transpose()?,
            sentinel_password: self
                .store_sentinel_password
                .as_ref()
                .map(|source| source.read("cluster.store_sentinel_password"))
                .transpose()?,
            tls: crate::tls::ClientTls {
                ca_file: self.store_ca_file.clone(),
                platform_roots: self.store_platform_roots,
                client_cert_file: self.store_client_cert_file.clone(),
                client_key_file: self.store_client_key_file.clone(),
                server_name: None,
            },
        })
    }
}

settings! {
    /// Spans exported over OTLP/HTTP (protobuf). Off unless a collector is named here or in
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
    pub struct TracingConfig, flags TracingFlags {
        /// The OTLP/HTTP collector spans are exported to (`http://host:4318`; `/v1/traces` is
        /// added) [default: none: tracing off].
        #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
        pub otlp_endpoint: String = String::new(), set;

        /// service.name of every span [default: OTEL_SERVICE_NAME, else mcp-session-proxy].
        #[arg(long, value_name = "NAME")]
        pub service_name: String = String::new(), set;
    }
}
