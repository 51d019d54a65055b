//! `tinymq user create|passwd|delete|list`: the users that authenticate with SCRAM. The
//! password is read from a flag or a file and turned into salted, iterated verifiers here;
//! only those reach the cluster. `list` shows names, mechanisms and iteration counts.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use tinymq_auth::{
    ScramMechanism, SCRAM_ITERATIONS_DEFAULT, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN,
};
use tinymq_client::{Admin, PutUserMode};

use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a user (fails if it exists).
    Create(PutUserArgs),
    /// Change a user's password (fails if there is no such user).
    Passwd(PutUserArgs),
    /// Delete a user.
    Delete {
        /// The user's name.
        name: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// List users with their SCRAM mechanisms and iteration counts.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("secret").required(true).args(["new_password", "new_password_file"])))]
pub struct PutUserArgs {
    /// The user's name: 1 to 255 characters of [A-Za-z0-9._@-].
    name: String,
    /// The user's new password (visible to other local users in the process list: prefer
    /// --new-password-file). Not `--password`, which is the password this tool logs in with.
    #[arg(long)]
    new_password: Option<String>,
    /// A file holding the user's new password (one trailing newline is ignored).
    #[arg(long)]
    new_password_file: Option<PathBuf>,
    /// Which SCRAM verifiers to store.
    #[arg(long, value_enum, default_value = "both")]
    mechanism: Mechanism,
    /// PBKDF2 rounds of each verifier (4096 to 1000000).
    #[arg(long, default_value_t = SCRAM_ITERATIONS_DEFAULT, value_parser = iterations)]
    iterations: u32,
    #[command(flatten)]
    bootstrap: Bootstrap,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Mechanism {
    #[value(name = "scram-sha-256")]
    ScramSha256,
    #[value(name = "scram-sha-512")]
    ScramSha512,
    Both,
}

impl Mechanism {
    fn list(self) -> Vec<ScramMechanism> {
        match self {
            Mechanism::ScramSha256 => vec![ScramMechanism::Sha256],
            Mechanism::ScramSha512 => vec![ScramMechanism::Sha512],
            Mechanism::Both => vec![ScramMechanism::Sha256, ScramMechanism::Sha512],
        }
    }
}

fn iterations(text: &str) -> Result<u32, String> {
    let n: u32 = text.parse().map_err(|e| format!("{e}"))?;
    if (SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "must be {SCRAM_ITERATIONS_MIN} to {SCRAM_ITERATIONS_MAX}"
        ))
    }
}

/// The password given, or the content of `file` (without one trailing newline).
pub fn read_password(
    password: Option<String>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let password = match (password, file) {
        (Some(p), _) => p,
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the password file {}", path.display()))?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            text.strip_suffix('\r').unwrap_or(text).to_string()
        }
        (None, None) => anyhow::bail!("no password given"),
    };
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    Ok(password)
}

async fn put(args: PutUserArgs, mode: PutUserMode) -> anyhow::Result<()> {
    let password = read_password(args.new_password, args.new_password_file.as_deref())?;
    let admin = Admin::new(args.bootstrap.client_config()?)?;
    let mechanisms = args.mechanism.list();
    admin
        .put_user(&args.name, &password, mode, &mechanisms, args.iterations)
        .await?;
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    let done = match mode {
        PutUserMode::Create => "created user",
        PutUserMode::Update => "changed the password of user",
    };
    outln!("{done} {} ({})", args.name, names.join(", "))
}

pub async fn run(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Create(args) => put(args, PutUserMode::Create).await,
        UserCommand::Passwd(args) => put(args, PutUserMode::Update).await,
        UserCommand::Delete { name, bootstrap } => {
            Admin::new(bootstrap.client_config()?)?
                .delete_user(&name)
                .await?;
            outln!("deleted user {name}")
        }
        UserCommand::List { json, bootstrap } => {
            let users = Admin::new(bootstrap.client_config()?)?.list_users().await?;
            if json {
                let out: Vec<_> = users
                    .iter()
                    .map(|u| {
                        let credentials: Vec<_> = u
                            .mechanisms
                            .iter()
                            .zip(&u.iterations)
                            .map(|(m, i)| serde_json::json!({"mechanism": m, "iterations": i}))
                            .collect();
                        serde_json::json!({"name": u.name, "credentials": credentials})
                    })
                    .collect();
                return outln!("{}", serde_json::to_string_pretty(&out)?);
            }
            for u in users {
                let credentials: Vec<String> = u
                    .mechanisms
                    .iter()
                    .zip(&u.iterations)
                    .map(|(m, i)| format!("{m} ({i} iterations)"))
                    .collect();
                outln!("{} {}", u.name, credentials.join(", "))?;
            }
            Ok(())
        }
    }
}

/// The verifiers of user `admin` for a cluster's first start: from `TINYMQ_ADMIN_PASSWORD`, or
/// the file of `--admin-password-file` (which wins); none when neither is given.
pub fn admin_credentials(
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<Vec<tinymq_auth::StoredCredential>>> {
    let from_env = std::env::var("TINYMQ_ADMIN_PASSWORD")
        .ok()
        .filter(|p| !p.is_empty());
    if file.is_none() && from_env.is_none() {
        return Ok(None);
    }
    let password = read_password(from_env.filter(|_| file.is_none()), file)?;
    Ok(Some(
        Mechanism::Both
            .list()
            .into_iter()
            .map(|m| tinymq_auth::StoredCredential::derive(m, &password, SCRAM_ITERATIONS_DEFAULT))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[test]
    fn the_new_password_flags_do_not_clash_with_the_login_flags() {
        crate::Cli::command().debug_assert();
        let args = [
            "tinymq",
            "user",
            "create",
            "alice",
            "--new-password",
            "new",
            "--user",
            "admin",
            "--password",
            "login",
        ];
        let cli = crate::Cli::try_parse_from(args).expect("parses");
        let crate::Command::User(super::UserCommand::Create(put)) = cli.command else {
            panic!("not user create");
        };
        assert_eq!(put.new_password.as_deref(), Some("new"));
        let both = [
            "tinymq",
            "user",
            "passwd",
            "alice",
            "--new-password",
            "a",
            "--new-password-file",
            "f",
        ];
        assert!(
            crate::Cli::try_parse_from(both).is_err(),
            "one password source only"
        );
    }
}
