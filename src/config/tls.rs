//! `[upstream.tls]` (and `[servers.<name>.upstream.tls]`): how an https:// server is verified
//! and what the proxy shows it.

use std::path::PathBuf;

use super::keys::settings;
use crate::tls::{ClientTls, ServerTls};

settings! {
    /// How https:// servers are verified, and the certificate the proxy shows them.
    pub struct UpstreamTlsConfig, flags UpstreamTlsFlags {
        /// A PEM file of CA certificates trusted for https:// servers besides the platform's
        /// roots: a private CA [default: none].
        #[arg(long = "upstream-ca-file", value_name = "PATH")]
        pub ca_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// Trust the platform's roots as well as ca_file (true/false); false trusts ca_file
        /// alone [default: true].
        #[arg(long = "upstream-platform-roots", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub platform_roots: bool = true, set;

        /// A PEM certificate (or chain, the leaf first) shown to an https:// server that asks
        /// for one: mutual TLS [default: none].
        #[arg(long = "upstream-client-cert", value_name = "PATH")]
        pub client_cert_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// The PEM private key of the client certificate [default: none].
        #[arg(long = "upstream-client-key", value_name = "PATH")]
        pub client_key_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// The name sent to an https:// server (SNI) and its certificate is verified against,
        /// instead of the URL's host: for a URL that holds an address [default: the URL's
        /// host].
        #[arg(long = "upstream-server-name", value_name = "NAME")]
        pub server_name: Option<String> = None, some(Option<String>);
    }
}

impl UpstreamTlsConfig {
    /// The settings as the TLS layer takes them.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca_file: self.ca_file.clone(),
            platform_roots: self.platform_roots,
            client_cert_file: self.client_cert_file.clone(),
            client_key_file: self.client_key_file.clone(),
            server_name: self.server_name.clone(),
        }
    }
}

settings! {
    /// The listener over TLS: its certificate, and the CA clients' certificates must come
    /// from (mutual TLS).
    pub struct ListenerTlsConfig, flags ListenerTlsFlags {
        /// The listener's certificate chain, the leaf first (PEM): with it the listener speaks
        /// TLS only (https://, wss://) [default: none: plain HTTP].
        #[arg(long = "tls-cert", value_name = "PATH")]
        pub cert_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// The private key of the listener's certificate (PEM) [default: none].
        #[arg(long = "tls-key", value_name = "PATH")]
        pub key_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// A CA (PEM): clients without a certificate it signed are refused at the handshake
        /// (mutual TLS) [default: none: no client certificate asked for].
        #[arg(long = "tls-client-ca", value_name = "PATH")]
        pub client_ca_file: Option<PathBuf> = None, some(Option<PathBuf>);

        /// With client_ca_file: the subject of a client's certificate (RFC 4514, `CN=…,O=…`)
        /// is the principal its requests act for, as a mesh that authenticates by certificate
        /// has it (true/false); not with [auth] or http.principal_header [default: false].
        #[arg(long = "tls-principal-from-client-cert", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
        pub principal_from_client_cert: bool = false, set;
    }
}

impl ListenerTlsConfig {
    /// The settings as the TLS layer takes them: none for plain HTTP; a certificate without
    /// its key (or the other way round), or a client CA without either, is refused.
    pub fn server_tls(&self) -> anyhow::Result<Option<ServerTls>> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert_file), Some(key_file)) => Ok(Some(ServerTls {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
                client_ca_file: self.client_ca_file.clone(),
            })),
            (None, None) if self.client_ca_file.is_none() => Ok(None),
            _ => anyhow::bail!(
                "tls: cert_file and key_file go together (--tls-cert, --tls-key), and \
                 client_ca_file needs them"
            ),
        }
    }
}
