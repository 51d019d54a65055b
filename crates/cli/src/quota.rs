//! `tinymq quota set|list|remove`: produce and fetch byte rates and request rates per
//! principal (or the default for every user without its own); brokers hold a principal to
//! them by delaying its responses. 0 (or a rate left out of `set`) is unlimited.

use clap::Subcommand;
use tinymq_auth::{QuotaConfig, QUOTA_DEFAULT_PRINCIPAL};
use tinymq_client::Admin;

use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set the rates of a principal or the default (replacing any it had).
    #[command(group(clap::ArgGroup::new("rate").required(true).multiple(true).args(["produce_bytes_per_sec", "fetch_bytes_per_sec", "requests_per_sec"])))]
    Set {
        #[command(flatten)]
        whom: WhomArgs,
        /// Bytes of records per second the principal may produce, per broker.
        #[arg(long)]
        produce_bytes_per_sec: Option<u64>,
        /// Bytes of records per second the principal may fetch, per broker.
        #[arg(long)]
        fetch_bytes_per_sec: Option<u64>,
        /// Requests per second the principal may send, per broker.
        #[arg(long)]
        requests_per_sec: Option<u64>,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// List the quotas.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Remove the quota of a principal or the default.
    Remove {
        #[command(flatten)]
        whom: WhomArgs,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

/// Whose quota: exactly one of these.
#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
pub struct WhomArgs {
    /// The principal, User:NAME.
    #[arg(long)]
    principal: Option<String>,
    /// The default quota: every user without one of its own.
    #[arg(long)]
    default: bool,
}

impl WhomArgs {
    fn principal(&self) -> String {
        self.principal
            .clone()
            .unwrap_or_else(|| QUOTA_DEFAULT_PRINCIPAL.to_string())
    }
}

/// `12345/s`, or `unlimited` for 0.
fn rate(n: u64) -> String {
    if n == 0 {
        "unlimited".into()
    } else {
        format!("{n}/s")
    }
}

pub async fn run(command: QuotaCommand) -> anyhow::Result<()> {
    match command {
        QuotaCommand::Set {
            whom,
            produce_bytes_per_sec,
            fetch_bytes_per_sec,
            requests_per_sec,
            bootstrap,
        } => {
            let principal = whom.principal();
            let quota = QuotaConfig {
                produce_bytes_per_sec: produce_bytes_per_sec.unwrap_or(0),
                fetch_bytes_per_sec: fetch_bytes_per_sec.unwrap_or(0),
                requests_per_sec: requests_per_sec.unwrap_or(0),
            };
            Admin::new(bootstrap.client_config()?)?
                .set_quota(&principal, &quota)
                .await?;
            outln!(
                "quota of {principal}: produce {} bytes, fetch {} bytes, {} requests",
                rate(quota.produce_bytes_per_sec),
                rate(quota.fetch_bytes_per_sec),
                rate(quota.requests_per_sec)
            )
        }
        QuotaCommand::List { json, bootstrap } => {
            let quotas = Admin::new(bootstrap.client_config()?)?
                .list_quotas()
                .await?;
            if json {
                let out: Vec<_> = quotas
                    .iter()
                    .map(|q| {
                        serde_json::json!({
                            "principal": q.principal,
                            "produce_bytes_per_sec": q.produce_bytes_per_sec,
                            "fetch_bytes_per_sec": q.fetch_bytes_per_sec,
                            "requests_per_sec": q.requests_per_sec,
                        })
                    })
                    .collect();
                return outln!("{}", serde_json::to_string_pretty(&out)?);
            }
            for q in &quotas {
                outln!(
                    "{} produce {} bytes, fetch {} bytes, {} requests",
                    q.principal,
                    rate(q.produce_bytes_per_sec),
                    rate(q.fetch_bytes_per_sec),
                    rate(q.requests_per_sec)
                )?;
            }
            Ok(())
        }
        QuotaCommand::Remove { whom, bootstrap } => {
            let principal = whom.principal();
            Admin::new(bootstrap.client_config()?)?
                .remove_quota(&principal)
                .await?;
            outln!("removed the quota of {principal}")
        }
    }
}
