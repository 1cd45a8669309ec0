//! How the proxy's listener shows itself to clients over TLS: its certificate chain and key,
//! and for mutual TLS the CA whose certificates clients must show (refused at the handshake
//! otherwise).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::pem::{self, PemError};

/// The listener's TLS settings (`[tls]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// The certificate chain, the leaf first (PEM).
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// Clients must show a certificate this CA signed (mutual TLS).
    pub client_ca_file: Option<PathBuf>,
}

/// Listener TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ServerTlsError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("the certificate and its key do not go together: {0}")]
    Identity(rustls::Error),
    #[error("the clients' CA cannot verify clients: {0}")]
    ClientCa(String),
}

impl ServerTls {
    /// The rustls configuration these settings describe (HTTP/1.1 offered by ALPN); every file
    /// is read now.
    pub fn config(&self) -> Result<Arc<ServerConfig>, ServerTlsError> {
        let chain = pem::certificates(&self.cert_file)?;
        let key = pem::private_key(&self.key_file)?;
        let builder = ServerConfig::builder();
        let builder = match &self.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(file) => {
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(pem::certificates(file)?);
                let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
                    .build()
                    .map_err(|e| ServerTlsError::ClientCa(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(ServerTlsError::Identity)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
