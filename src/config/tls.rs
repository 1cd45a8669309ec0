//! `[upstream.tls]` (and `[servers.<name>.upstream.tls]`): how an https:// server is verified
//! and what the proxy shows it.

use std::path::PathBuf;

use super::keys::settings;
use crate::tls::ClientTls;

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
