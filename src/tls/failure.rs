//! What a failed TLS handshake with a server was, in words an operator can act on: found in
//! the chain of causes of whatever error carried it.

use std::error::Error;

use rustls::{AlertDescription, CertificateError};

/// Why a TLS handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsFailure {
    #[error("the server's certificate is signed by an issuer this proxy does not trust (a private CA goes in tls.ca_file)")]
    UntrustedIssuer,
    #[error("the server's certificate is not valid for the name dialed (tls.server_name names another): {0}")]
    NameMismatch(String),
    #[error("the server's certificate has expired")]
    Expired,
    #[error("the server's certificate is not valid yet")]
    NotYetValid,
    #[error("the server wants a client certificate this proxy did not give or it did not accept (tls.client_cert_file): {0}")]
    ClientCertificate(String),
    #[error("{0}")]
    Other(String),
}

impl TlsFailure {
    /// A short name for the kind, as a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            TlsFailure::UntrustedIssuer => "untrusted_issuer",
            TlsFailure::NameMismatch(_) => "name_mismatch",
            TlsFailure::Expired => "expired",
            TlsFailure::NotYetValid => "not_yet_valid",
            TlsFailure::ClientCertificate(_) => "client_certificate",
            TlsFailure::Other(_) => "other",
        }
    }
}

/// The TLS failure among `error`'s causes, if one is.
pub fn failure_in(error: &(dyn Error + 'static)) -> Option<TlsFailure> {
    let mut cause: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(error) = cause {
        let tls = error.downcast_ref::<rustls::Error>().or_else(|| {
            error
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(classify(tls));
        }
        cause = error.source();
    }
    None
}

fn classify(error: &rustls::Error) -> TlsFailure {
    match error {
        rustls::Error::InvalidCertificate(certificate) => match certificate {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                TlsFailure::UntrustedIssuer
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsFailure::NameMismatch(error.to_string())
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsFailure::Expired
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                TlsFailure::NotYetValid
            }
            _ => TlsFailure::Other(error.to_string()),
        },
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::CertificateRequired
            | AlertDescription::HandshakeFailure
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA),
        ) => TlsFailure::ClientCertificate(format!("the server sent {alert:?}")),
        other => TlsFailure::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_problem_is_named_however_deep_it_is_carried() {
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let carried = std::io::Error::new(std::io::ErrorKind::InvalidData, unknown);
        assert_eq!(failure_in(&carried), Some(TlsFailure::UntrustedIssuer));
        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert_eq!(failure_in(&expired), Some(TlsFailure::Expired));
        let asked = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        assert_eq!(
            failure_in(&asked).map(|f| f.reason()),
            Some("client_certificate")
        );
        let plain = std::io::Error::other("connection refused");
        assert_eq!(failure_in(&plain), None);
    }
}
