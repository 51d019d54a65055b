//! TLS for tinymq connections, on rustls with the ring provider: the server's reloadable
//! configuration ([`ServerTls`]), the client's configuration that trusts only the given CA
//! ([`ClientTls`]), PEM loading with errors that name the file, the principal a verified
//! client certificate carries ([`peer_principal`]), and plain-language explanations of TLS
//! failures ([`explain`]).
//!
//! Every configuration is built with an explicit crypto provider, so nothing depends on a
//! process-wide default being installed.

mod client;
mod explain;
mod pem;
mod principal;
mod server;

use std::path::PathBuf;
use std::sync::Arc;

pub use client::{server_name, ClientTls, ConnectError};
pub use explain::{explain, is_not_tls_answer, tls_failure};
pub use principal::{peer_principal, PRINCIPAL_BYTES_MAX};
pub use rustls;
pub use rustls_pki_types::{CertificateDer, ServerName};
pub use server::ServerTls;
pub use tokio_rustls::{
    client::TlsStream as ClientTlsStream, server::TlsStream as ServerTlsStream,
};
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The first byte of a TLS handshake record (a ClientHello starts with it): how a listener
/// tells a TLS client from a plain one (tinymq frames start with `T`, 0x54).
pub const TLS_HANDSHAKE_RECORD_TYPE: u8 = 0x16;
/// The first byte of a TLS record's version (0x03 for SSL 3.0 up to TLS 1.3).
pub const TLS_RECORD_VERSION_MAJOR: u8 = 0x03;
/// Largest PEM file read (certificate chains, keys, CA bundles); these are operator files,
/// but a wrong path (a log file, a device) must not make the process read without end.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;
/// Certificates in one chain or CA bundle at most.
pub const PEM_CERTIFICATES_MAX: usize = 256;

/// Whether a server asks for client certificates, verified against `--tls-ca`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// A client without a verified certificate is refused in the TLS handshake (mTLS).
    Required,
    /// A client may present one (then it must verify); one without is served too.
    Optional,
    /// No client certificate is asked for.
    #[default]
    None,
}

impl ClientAuth {
    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::Required => "required",
            ClientAuth::Optional => "optional",
            ClientAuth::None => "none",
        }
    }
}

impl std::fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<ClientAuth, String> {
        match s {
            "required" => Ok(ClientAuth::Required),
            "optional" => Ok(ClientAuth::Optional),
            "none" => Ok(ClientAuth::None),
            other => Err(format!(
                "unknown client auth {other:?}: expected required, optional or none"
            )),
        }
    }
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is larger than {PEM_FILE_BYTES_MAX} bytes; not a PEM file?", .path.display())]
    TooLarge { path: PathBuf },
    #[error("{}: {reason}", .path.display())]
    Pem { path: PathBuf, reason: String },
    #[error("{} holds no certificate (expected PEM \"BEGIN CERTIFICATE\" blocks)", .path.display())]
    NoCertificates { path: PathBuf },
    #[error("{} holds no private key (expected a PEM PKCS#8, PKCS#1 or SEC1 key)", .path.display())]
    NoKey { path: PathBuf },
    #[error("{} holds more than {PEM_CERTIFICATES_MAX} certificates", .path.display())]
    TooManyCertificates { path: PathBuf },
    #[error("{what}: {reason}")]
    Config { what: String, reason: String },
    #[error("--tls-client-auth {0} needs --tls-ca (the CA that signs client certificates)")]
    ClientAuthWithoutCa(ClientAuth),
    #[error("a client certificate needs both --tls-cert and --tls-key")]
    HalfClientIdentity,
    #[error("{0:?} is not a host name or IP address usable as a TLS server name")]
    ServerName(String),
}

fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A root store holding exactly the CA certificates of `path`.
fn roots(path: &std::path::Path) -> Result<Arc<rustls::RootCertStore>, TlsError> {
    let mut store = rustls::RootCertStore::empty();
    for cert in pem::certificates(path)? {
        store.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests;
