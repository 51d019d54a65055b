//! The client's TLS configuration: trusts only the CA it is given (never the system's roots,
//! so a node talks only to nodes of its own PKI), with an optional client certificate for
//! servers that require one. Reloadable like the server's, so a node's outgoing links follow
//! a certificate rotation on SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::{pem, ring, roots, TlsError};

/// Clones share the configuration: a [`ClientTls::reload`] through one is seen by all, for
/// connections opened from then on.
#[derive(Clone)]
pub struct ClientTls {
    inner: Arc<Inner>,
}

struct Inner {
    ca: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
    config: RwLock<Arc<ClientConfig>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.inner.ca)
            .field("identity", &self.inner.identity)
            .finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of `ca`; presents `cert` (with `key`) when a server asks.
    pub fn load(ca: &Path, cert: Option<&Path>, key: Option<&Path>) -> Result<ClientTls, TlsError> {
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert.to_path_buf(), key.to_path_buf())),
            (None, None) => None,
            _ => return Err(TlsError::HalfClientIdentity),
        };
        let config = build(ca, identity.as_ref())?;
        Ok(ClientTls {
            inner: Arc::new(Inner {
                ca: ca.to_path_buf(),
                identity,
                config: RwLock::new(config),
            }),
        })
    }

    /// Re-reads the files given to [`ClientTls::load`]; on error the old configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = build(&self.inner.ca, self.inner.identity.as_ref())?;
        *self.inner.config.write() = config;
        Ok(())
    }

    pub fn has_client_cert(&self) -> bool {
        self.inner.identity.is_some()
    }

    pub fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.inner.config.read().clone())
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

fn build(ca: &Path, identity: Option<&(PathBuf, PathBuf)>) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config {
            what: "TLS protocol versions".into(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots(ca)?);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(pem::certificates(cert)?, pem::private_key(key)?)
            .map_err(|e| TlsError::Config {
                what: format!(
                    "client certificate {} with key {}",
                    cert.display(),
                    key.display()
                ),
                reason: e.to_string(),
            })?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Why a TLS connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Name(TlsError),
    #[error("{}", crate::explain(.0))]
    Io(std::io::Error),
}

impl ConnectError {
    /// Whether this is a TLS failure proper (see [`crate::tls_failure`]), not a network one.
    pub fn is_tls_failure(&self) -> bool {
        match self {
            ConnectError::Name(_) => true,
            ConnectError::Io(e) => crate::tls_failure(e).is_some(),
        }
    }
}

/// The TLS server name of a host (`[::1]` brackets removed).
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string()).map_err(|_| TlsError::ServerName(host.to_string()))
}
