//! How the proxy verifies a server over TLS and shows itself to it: the platform's roots, a
//! private CA besides or instead of them, a client certificate for mutual TLS, and the name a
//! server's certificate is checked against when the URL holds an address.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::pem::{self, PemError};

/// A client's TLS settings (`[upstream.tls]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// A CA whose certificates are trusted too (a private CA).
    pub ca_file: Option<PathBuf>,
    /// Trust the platform's roots as well; off, only `ca_file` is trusted.
    pub platform_roots: bool,
    /// The certificate (a chain) shown to a server that asks for one (mutual TLS).
    pub client_cert_file: Option<PathBuf>,
    /// Its private key.
    pub client_key_file: Option<PathBuf>,
    /// The name sent (SNI) and the server's certificate is verified against, instead of the
    /// URL's host.
    pub server_name: Option<String>,
}

impl Default for ClientTls {
    fn default() -> ClientTls {
        ClientTls {
            ca_file: None,
            platform_roots: true,
            client_cert_file: None,
            client_key_file: None,
            server_name: None,
        }
    }
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("a client certificate needs its key and a key its certificate (client_cert_file and client_key_file)")]
    HalfAnIdentity,
    #[error("the client certificate and its key do not go together: {0}")]
    Identity(rustls::Error),
    #[error("no CA to trust: platform_roots is off and no ca_file is given")]
    NothingTrusted,
    #[error("{0:?} is not a DNS name or an IP address (server_name)")]
    ServerName(String),
}

impl ClientTls {
    /// The rustls configuration these settings describe (no ALPN: each transport sets its
    /// own); every file is read now.
    pub fn config(&self) -> Result<Arc<ClientConfig>, ClientTlsError> {
        let builder = ClientConfig::builder().with_root_certificates(self.roots()?);
        let config = match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(certificate), Some(key)) => builder
                .with_client_auth_cert(pem::certificates(certificate)?, pem::private_key(key)?)
                .map_err(ClientTlsError::Identity)?,
            _ => return Err(ClientTlsError::HalfAnIdentity),
        };
        Ok(Arc::new(config))
    }

    /// The name servers are verified against instead of the URL's host, checked.
    pub fn server_name(&self) -> Result<Option<ServerName<'static>>, ClientTlsError> {
        self.server_name
            .as_ref()
            .map(|name| {
                ServerName::try_from(name.clone())
                    .map_err(|_| ClientTlsError::ServerName(name.clone()))
            })
            .transpose()
    }

    /// The certificates trusted, as one PEM bundle: for a client that takes them so (the Redis
    /// client), the same as [`Self::config`] trusts, certificates it could not use dropped.
    pub fn trusted_pem(&self) -> Result<Vec<u8>, ClientTlsError> {
        let platform = match self.platform_roots {
            true => platform_certificates(),
            false => &[],
        };
        let own = match &self.ca_file {
            Some(file) => pem::certificates(file)?,
            None => Vec::new(),
        };
        let mut bundle = Vec::new();
        for certificate in platform.iter().chain(&own) {
            let mut one = RootCertStore::empty();
            if one.add(certificate.clone()).is_ok() {
                bundle.extend_from_slice(&pem::encode_certificate(certificate));
            }
        }
        if bundle.is_empty() && !self.platform_roots {
            return Err(ClientTlsError::NothingTrusted);
        }
        Ok(bundle)
    }

    fn roots(&self) -> Result<RootCertStore, ClientTlsError> {
        let mut roots = match self.platform_roots {
            true => platform_roots(),
            false => RootCertStore::empty(),
        };
        if let Some(file) = &self.ca_file {
            roots.add_parsable_certificates(pem::certificates(file)?);
        }
        if roots.is_empty() && !self.platform_roots {
            return Err(ClientTlsError::NothingTrusted);
        }
        Ok(roots)
    }
}

/// The platform's root certificates, read from the system once for every client the process
/// makes.
fn platform_certificates() -> &'static [CertificateDer<'static>] {
    static CERTIFICATES: std::sync::LazyLock<Vec<CertificateDer<'static>>> =
        std::sync::LazyLock::new(|| rustls_native_certs::load_native_certs().certs);
    &CERTIFICATES
}

/// The platform's roots (certificates rustls cannot parse are skipped, as browsers do).
fn platform_roots() -> RootCertStore {
    static ROOTS: std::sync::LazyLock<RootCertStore> = std::sync::LazyLock::new(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(platform_certificates().iter().cloned());
        roots
    });
    ROOTS.clone()
}

/// A client that trusts the platform's roots and shows no certificate.
pub fn platform_config() -> Arc<ClientConfig> {
    Arc::new(
        ClientConfig::builder()
            .with_root_certificates(platform_roots())
            .with_no_client_auth(),
    )
}

/// A client that trusts no server: what stands in for settings that cannot be used, so that
/// every https:// connection fails (and says so) rather than trusting more than configured.
pub fn trusting_nothing() -> Arc<ClientConfig> {
    Arc::new(
        ClientConfig::builder()
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth(),
    )
}
