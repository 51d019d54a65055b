//! The client's TLS configuration: trusts only the CA it is given (never the system's roots,
//! so a node talks only to nodes of its own PKI), with an optional client certificate for
//! servers that require one.

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::{pem, ring, roots, TlsError};

#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    has_client_cert: bool,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("has_client_cert", &self.has_client_cert)
            .finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of `ca`; presents `cert` (with `key`) when a server asks.
    pub fn load(ca: &Path, cert: Option<&Path>, key: Option<&Path>) -> Result<ClientTls, TlsError> {
        let builder = ClientConfig::builder_with_provider(ring())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config {
                what: "TLS protocol versions".into(),
                reason: e.to_string(),
            })?
            .with_root_certificates(roots(ca)?);
        let config = match (cert, key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(pem::certificates(cert)?, pem::private_key(key)?)
                .map_err(|e| TlsError::Config {
                    what: format!(
                        "client certificate {} with key {}",
                        cert.display(),
                        key.display()
                    ),
                    reason: e.to_string(),
                })?,
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(TlsError::HalfClientIdentity),
        };
        Ok(ClientTls {
            config: Arc::new(config),
            has_client_cert: cert.is_some(),
        })
    }

    pub fn has_client_cert(&self) -> bool {
        self.has_client_cert
    }

    pub fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.config.clone())
    }

    /// Runs the TLS handshake on `stream` with the server named `host` (a DNS name, or an IP
    /// address checked against the certificate's IP SANs).
    pub async fn connect(
        &self,
        host: &str,
        stream: TcpStream,
    ) -> Result<TlsStream<TcpStream>, ConnectError> {
        let name = server_name(host).map_err(ConnectError::Name)?;
        self.connector()
            .connect(name, stream)
            .await
            .map_err(ConnectError::Io)
    }
}

/// Why a TLS connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Name(TlsError),
    #[error("{}", crate::explain(.0))]
    Io(std::io::Error),
}

/// The TLS server name of a host (`[::1]` brackets removed).
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string()).map_err(|_| TlsError::ServerName(host.to_string()))
}
