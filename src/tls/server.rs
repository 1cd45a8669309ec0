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

/// What a file looked like when read: a change of any of these is a new file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(file: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(file).ok()?;
    Some(Stamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        inode: metadata.ino(),
    })
}

/// How often at most the files are looked at for a change.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The listener's TLS, reloaded when its files change (a rotated Secret), without touching the
/// connections open: a new connection gets the newest certificate.
pub struct Rotating {
    settings: ServerTls,
    current: std::sync::RwLock<Current>,
}

struct Current {
    acceptor: tokio_rustls::TlsAcceptor,
    stamps: Vec<Option<Stamp>>,
    looked: std::time::Instant,
}

/// What looking at the files found.
#[derive(Debug)]
pub enum Reload {
    /// They changed and were read: new connections get the new certificate.
    Done,
    /// They changed and cannot be used (half written, say): the previous stays.
    Failed(ServerTlsError),
}

impl Rotating {
    pub fn new(settings: ServerTls) -> Result<Rotating, ServerTlsError> {
        let current = Current {
            acceptor: tokio_rustls::TlsAcceptor::from(settings.config()?),
            stamps: settings.stamps(),
            looked: std::time::Instant::now(),
        };
        Ok(Rotating {
            settings,
            current: std::sync::RwLock::new(current),
        })
    }

    /// The acceptor for a new connection; the files are looked at first (at most once in
    /// `LOOK_EVERY`) and read again when they changed, which the second value says.
    pub fn acceptor(&self) -> (tokio_rustls::TlsAcceptor, Option<Reload>) {
        {
            let current = self.current.read().unwrap_or_else(|e| e.into_inner());
            if current.looked.elapsed() < LOOK_EVERY {
                return (current.acceptor.clone(), None);
            }
        }
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        current.looked = std::time::Instant::now();
        let stamps = self.settings.stamps();
        if stamps == current.stamps {
            return (current.acceptor.clone(), None);
        }
        current.stamps = stamps;
        let reload = match self.settings.config() {
            Ok(config) => {
                current.acceptor = tokio_rustls::TlsAcceptor::from(config);
                Reload::Done
            }
            Err(error) => Reload::Failed(error),
        };
        (current.acceptor.clone(), Some(reload))
    }
}

impl ServerTls {
    fn stamps(&self) -> Vec<Option<Stamp>> {
        std::iter::once(&self.cert_file)
            .chain([&self.key_file])
            .chain(self.client_ca_file.as_ref())
            .map(|file| stamp(file))
            .collect()
    }
}
