//! The flags every client command shares to secure its connections: the login (`--user`,
//! `--password`, `--sasl-mechanism`, or `TINYMQ_USER`/`TINYMQ_PASSWORD`) and TLS.

use std::path::PathBuf;

use anyhow::Context;
use tinymq_client::{ClientTls, Login, Security};

/// Security flags of a client command (flattened into [`crate::Bootstrap`]).
#[derive(clap::Args, Debug, Clone)]
pub struct ClientSecurityArgs {
    /// Log in as this user (SCRAM) after the handshake.
    #[arg(long, env = "TINYMQ_USER")]
    pub user: Option<String>,
    /// The user's password; prefer TINYMQ_PASSWORD (a flag shows in the process list).
    #[arg(long, env = "TINYMQ_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The SASL mechanism of the login.
    #[arg(long, default_value = "SCRAM-SHA-256", value_parser = ["SCRAM-SHA-256", "SCRAM-SHA-512"])]
    pub sasl_mechanism: String,
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
}

impl ClientSecurityArgs {
    /// The login the flags ask for, if any.
    pub fn login(&self) -> anyhow::Result<Option<Login>> {
        let Some(user) = &self.user else {
            anyhow::ensure!(
                self.password.is_none(),
                "--password (or TINYMQ_PASSWORD) is set but --user (or TINYMQ_USER) is not"
            );
            return Ok(None);
        };
        let password = self
            .password
            .clone()
            .with_context(|| format!("--user {user} needs --password or TINYMQ_PASSWORD"))?;
        let mechanism = tinymq_client::ScramMechanism::from_name(&self.sasl_mechanism)
            .with_context(|| format!("--sasl-mechanism {}", self.sasl_mechanism))?;
        Ok(Some(Login {
            mechanism,
            user: user.clone(),
            password,
            authzid: None,
        }))
    }

    /// The TLS the flags ask for, if any.
    pub fn tls(&self) -> anyhow::Result<Option<ClientTls>> {
        let Some(ca) = &self.tls_ca else {
            anyhow::ensure!(
                self.tls_cert.is_none(),
                "--tls-cert needs --tls-ca (the CA the server's certificate is checked against)"
            );
            return Ok(None);
        };
        let (cert, key) = (self.tls_cert.as_deref(), self.tls_key.as_deref());
        Ok(Some(ClientTls::load(ca, cert, key)?))
    }

    /// The security of every connection the command opens.
    pub fn security(&self) -> anyhow::Result<Security> {
        Ok(Security {
            tls: self.tls()?,
            login: self.login()?,
        })
    }
}
