//! Certificates and private keys from PEM files, each failure naming the file and what was
//! wrong with it.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A PEM file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("{file}: {reason}")]
    Unreadable { file: PathBuf, reason: String },
    #[error("{file}: no certificate in it (a PEM \"BEGIN CERTIFICATE\" block)")]
    NoCertificate { file: PathBuf },
    #[error("{file}: no private key in it (a PEM \"BEGIN PRIVATE KEY\", RSA or EC block)")]
    NoKey { file: PathBuf },
}

/// Every certificate in `file`, in order (a chain: the leaf first).
pub fn certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let unreadable = |reason: String| PemError::Unreadable {
        file: file.to_owned(),
        reason,
    };
    let read = CertificateDer::pem_file_iter(file).map_err(|e| unreadable(e.to_string()))?;
    let certificates = read
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(e.to_string()))?;
    if certificates.is_empty() {
        return Err(PemError::NoCertificate {
            file: file.to_owned(),
        });
    }
    Ok(certificates)
}

/// The private key in `file` (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(file: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_file(file).map_err(|error| match error {
        rustls::pki_types::pem::Error::NoItemsFound => PemError::NoKey {
            file: file.to_owned(),
        },
        other => PemError::Unreadable {
            file: file.to_owned(),
            reason: other.to_string(),
        },
    })
}

/// A certificate as a PEM block.
pub fn encode_certificate(certificate: &CertificateDer) -> Vec<u8> {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
    let mut block = b"-----BEGIN CERTIFICATE-----\n".to_vec();
    for line in encoded.as_bytes().chunks(64) {
        block.extend_from_slice(line);
        block.push(b'\n');
    }
    block.extend_from_slice(b"-----END CERTIFICATE-----\n");
    block
}
