//! The login flags every client command shares (`--user`, `--password`, `--sasl-mechanism`,
//! or `TINYMQ_USER`/`TINYMQ_PASSWORD`), part of the tools' security flags beside TLS's
//! (`crate::tls::ClientSecurityArgs`).

use anyhow::Context;
use tinymq_client::{Login, ScramMechanism};

/// Login flags of a client command.
#[derive(clap::Args, Debug, Clone)]
pub struct LoginArgs {
    /// Log in as this user (SCRAM) after the handshake.
    #[arg(long, env = "TINYMQ_USER")]
    pub user: Option<String>,
    /// The user's password; prefer TINYMQ_PASSWORD (a flag shows in the process list).
    #[arg(long, env = "TINYMQ_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The SASL mechanism of the login.
    #[arg(long, default_value = "SCRAM-SHA-256", value_parser = ["SCRAM-SHA-256", "SCRAM-SHA-512"])]
    pub sasl_mechanism: String,
}

impl Default for LoginArgs {
    /// No login.
    fn default() -> LoginArgs {
        LoginArgs {
            user: None,
            password: None,
            sasl_mechanism: ScramMechanism::Sha256.name().to_string(),
        }
    }
}

impl LoginArgs {
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
        let mechanism = ScramMechanism::from_name(&self.sasl_mechanism)
            .with_context(|| format!("--sasl-mechanism {}", self.sasl_mechanism))?;
        Ok(Some(Login {
            mechanism,
            user: user.clone(),
            password,
            authzid: None,
        }))
    }
}
