//! TLS in one shape for every connection the proxy makes or takes: certificates and keys read
//! from PEM files (`pem`), the configuration a client verifies a server with and shows itself
//! by (`client`), the listener's (`server`), a client certificate's subject as text
//! (`subject`), and what a failed handshake says in words an operator can act on (`failure`).
//! On rustls, with the platform's roots unless told otherwise.

pub mod client;
pub mod failure;
pub mod pem;
pub mod server;
pub mod subject;

pub use client::{ClientTls, ClientTlsError};
pub use failure::TlsFailure;
pub use server::{Reload, Rotating, ServerTls, ServerTlsError};
pub use subject::{subject_of, SubjectError};
