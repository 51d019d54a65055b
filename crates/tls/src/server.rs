//! The server's TLS configuration, reloadable: [`ServerTls::reload`] re-reads the files and
//! swaps the configuration that *new* connections get; connections already established keep
//! the session they negotiated. A reload that fails keeps the configuration in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::{pem, ring, roots, ClientAuth, TlsError};

/// A reloadable server configuration; clones share it (a reload through one is seen by all).
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Inner>,
}

struct Inner {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
    client_auth: ClientAuth,
    config: RwLock<Arc<ServerConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.inner.cert)
            .field("key", &self.inner.key)
            .field("ca", &self.inner.ca)
            .field("client_auth", &self.inner.client_auth)
            .finish()
    }
}

impl ServerTls {
    /// Loads the certificate chain and key (PEM) and, for client certificates, the CA that
    /// signs them. `ClientAuth::Required` and `Optional` need `ca`.
    pub fn load(
        cert: &Path,
        key: &Path,
        ca: Option<&Path>,
        client_auth: ClientAuth,
    ) -> Result<ServerTls, TlsError> {
        let config = build(cert, key, ca, client_auth)?;
        Ok(ServerTls {
            inner: Arc::new(Inner {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
                ca: ca.map(Path::to_path_buf),
                client_auth,
                config: RwLock::new(config),
            }),
        })
    }

    /// Re-reads the files given to [`ServerTls::load`] and, if they make a configuration, uses
    /// it for connections accepted from now on. On error the old configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let inner = &self.inner;
        let config = build(
            &inner.cert,
            &inner.key,
            inner.ca.as_deref(),
            inner.client_auth,
        )?;
        *inner.config.write() = config;
        Ok(())
    }

    /// An acceptor for one new connection (a cheap clone of the current configuration).
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config())
    }

    /// The configuration in force (for listeners that drive rustls themselves, e.g. HTTP,
    /// which may clone it to set ALPN).
    pub fn config(&self) -> Arc<ServerConfig> {
        self.inner.config.read().clone()
    }

    pub fn client_auth(&self) -> ClientAuth {
        self.inner.client_auth
    }

    /// The certificate file, for log lines.
    pub fn cert_path(&self) -> &Path {
        &self.inner.cert
    }
}

fn build(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
    client_auth: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = pem::certificates(cert)?;
    let key_der = pem::private_key(key)?;
    let provider = ring();
    let verifier = match (client_auth, ca) {
        (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
        (auth, None) => return Err(TlsError::ClientAuthWithoutCa(auth)),
        (auth, Some(ca)) => {
            let builder = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider.clone());
            let builder = match auth {
                ClientAuth::Optional => builder.allow_unauthenticated(),
                _ => builder,
            };
            builder.build().map_err(|e| TlsError::Config {
                what: format!("client certificate verifier from {}", ca.display()),
                reason: e.to_string(),
            })?
        }
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config {
            what: "TLS protocol versions".into(),
            reason: e.to_string(),
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::Config {
            what: format!("certificate {} with key {}", cert.display(), key.display()),
            reason: e.to_string(),
        })?;
    Ok(Arc::new(config))
}
