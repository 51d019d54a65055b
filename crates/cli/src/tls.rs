//! TLS settings of the server roles (`server`, `broker`, `meta`) and of the client tools, and
//! certificate reload on SIGHUP.
//!
//! A node with `--tls-cert`/`--tls-key` serves TLS on its native port; `--tls-ca` is the CA
//! its peers' certificates are checked against: the node's outgoing links (to MetaServer
//! nodes, Raft peers, partition leaders, its own port for the REST API) trust only it and
//! present the node's own certificate to peers that require client certificates, and
//! `--tls-client-auth` checks client certificates against it too.

use std::path::PathBuf;

use anyhow::Context;
use tinymq_client::{ClientTls, Security};
use tinymq_net::{ClientAuth, ServerTls};

/// The server roles' TLS flags (also `TINYMQ_TLS_*` variables and `tls_*` keys of the TOML file).
#[derive(clap::Args, Debug, Default)]
pub struct ServerTlsArgs {
    /// This node's certificate chain (PEM), leaf first: turns TLS on for the native port.
    /// Needs --tls-key and --tls-ca.
    #[arg(long, env = "TINYMQ_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "TINYMQ_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that sign the nodes' and clients' certificates: peers are
    /// verified against it on every outgoing link, and client certificates too.
    #[arg(long, env = "TINYMQ_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificates: required (mutual TLS), optional, or none [default: none].
    #[arg(long, env = "TINYMQ_TLS_CLIENT_AUTH")]
    pub tls_client_auth: Option<ClientAuth>,
}

/// A node's loaded TLS: its listener's, and its outgoing links'.
#[derive(Clone, Default)]
pub struct NodeTls {
    pub server: Option<ServerTls>,
    pub links: Option<ClientTls>,
}

impl NodeTls {
    /// The security of the node's own connections (TLS only; logins are added beside).
    pub fn links(&self) -> Security {
        Security {
            tls: self.links.clone(),
            login: None,
        }
    }

    pub fn listener(&self) -> tinymq_net::ListenerSecurity {
        tinymq_net::ListenerSecurity {
            tls: self.server.clone(),
            ..Default::default()
        }
    }

    /// Reloads every certificate on each SIGHUP, logging the outcome; the listener keeps its
    /// connections (only new ones get the new configuration), and a failed reload keeps the
    /// old one. The handler is installed before this returns.
    pub fn reload_on_sighup(&self) -> anyhow::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        let tls = self.clone();
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tls.reload();
            }
        });
        Ok(())
    }

    fn reload(&self) {
        if self.server.is_none() && self.links.is_none() {
            tracing::info!("SIGHUP: no TLS configured, nothing to reload");
            return;
        }
        if let Some(server) = &self.server {
            match server.reload() {
                Ok(()) => {
                    tracing::info!(cert = %server.cert_path().display(), "SIGHUP: TLS certificates reloaded; new connections use them, open ones keep theirs")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "SIGHUP: TLS reload failed; the previous certificates stay in use")
                }
            }
        }
        if let Some(links) = &self.links {
            if let Err(e) = links.reload() {
                tracing::warn!(error = %e, "SIGHUP: reloading the CA and certificate of outgoing links failed; the previous ones stay in use");
            }
        }
    }
}

impl ServerTlsArgs {
    /// The settings of a TOML file's `tls_*` keys.
    pub fn from_file(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
        client_auth: Option<String>,
    ) -> anyhow::Result<ServerTlsArgs> {
        let tls_client_auth = client_auth
            .map(|a| a.parse().map_err(anyhow::Error::msg))
            .transpose()
            .context("tls_client_auth in the config file")?;
        Ok(ServerTlsArgs {
            tls_cert: cert,
            tls_key: key,
            tls_ca: ca,
            tls_client_auth,
        })
    }

    /// These flags over the file's settings, loaded and checked.
    pub fn load(self, file: ServerTlsArgs) -> anyhow::Result<NodeTls> {
        let cert = self.tls_cert.or(file.tls_cert);
        let key = self.tls_key.or(file.tls_key);
        let ca = self.tls_ca.or(file.tls_ca);
        let auth = self.tls_client_auth.or(file.tls_client_auth);
        let server = match (&cert, &key) {
            (Some(cert), Some(key)) => {
                let ca = ca.as_deref().context(
                    "--tls-cert needs --tls-ca: the CA that peers' certificates are checked against",
                )?;
                let auth = auth.unwrap_or_default();
                Some(ServerTls::load(cert, key, Some(ca), auth)?)
            }
            (None, None) => {
                anyhow::ensure!(
                    auth.is_none_or(|a| a == ClientAuth::None),
                    "--tls-client-auth needs TLS: give --tls-cert and --tls-key"
                );
                None
            }
            _ => anyhow::bail!("TLS needs both --tls-cert and --tls-key"),
        };
        let links = match &ca {
            Some(ca) => Some(ClientTls::load(ca, cert.as_deref(), key.as_deref())?),
            None => None,
        };
        Ok(NodeTls { server, links })
    }
}

/// The client tools' security flags (TLS here; the login beside them).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientSecurityArgs {
    /// CA certificates (PEM) to trust: connect with TLS, checking the server's certificate
    /// against them.
    #[arg(long, env = "TINYMQ_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that require one (mutual TLS).
    #[arg(long, env = "TINYMQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "TINYMQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub login: crate::client_security::LoginArgs,
}

impl ClientSecurityArgs {
    /// The security of the tool's connections.
    pub fn security(&self) -> anyhow::Result<Security> {
        let tls = match &self.tls_ca {
            Some(ca) => Some(ClientTls::load(
                ca,
                self.tls_cert.as_deref(),
                self.tls_key.as_deref(),
            )?),
            None => {
                anyhow::ensure!(
                    self.tls_cert.is_none(),
                    "--tls-cert needs --tls-ca (the CA the server's certificate is checked against)"
                );
                None
            }
        };
        Ok(Security {
            tls,
            login: self.login.login()?,
        })
    }
}
