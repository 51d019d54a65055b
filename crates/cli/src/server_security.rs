//! The security flags of the server roles (`server`, `broker`, `meta`): how peers
//! authenticate (`--auth`), the cluster secret nodes prove themselves with, the super users,
//! and the rule that a listener reachable from other machines needs TLS and authentication
//! unless `--insecure` says otherwise.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tinymq_auth::{ClusterSecret, NodeKind, Principal};
use tinymq_client::Login;
use tinymq_meta::authorize::AuthorizationConfig;
use tinymq_net::{AuthMode, ListenerSecurity};

/// The file the standalone server keeps its generated cluster secret in, under its data
/// directory.
pub const CLUSTER_SECRET_FILE: &str = "cluster.secret";

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServerSecurityArgs {
    /// How peers authenticate: none, scram (SCRAM-SHA-256/512 users) or mtls (the client
    /// certificate names the principal) [default: none].
    #[arg(long, env = "TINYMQ_AUTH", value_parser = ["none", "scram", "mtls"])]
    pub auth: Option<String>,
    /// File with the secret every node of the cluster shares (hex); nodes log in to each
    /// other with it. `tinymq server` with --auth creates `<data>/cluster.secret` if not given.
    #[arg(long, env = "TINYMQ_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Principals allowed everything, comma-separated [default: User:admin].
    #[arg(long, env = "TINYMQ_SUPER_USERS")]
    pub super_users: Option<String>,
    /// Allow a listener on a non-loopback address without TLS and authentication.
    #[arg(long, env = "TINYMQ_INSECURE")]
    pub insecure: bool,
}

/// The security of a node, resolved from its flags.
#[derive(Clone)]
pub struct NodeSecurity {
    pub listener: ListenerSecurity,
    /// ACL checks: on with authentication, with the super users.
    pub authorization: AuthorizationConfig,
    pub insecure: bool,
}

impl NodeSecurity {
    /// The login of this node's outgoing links (as `node_user(kind, id)` with the cluster
    /// secret), when it has a secret.
    pub fn node_login(&self, kind: NodeKind, id: u64) -> Option<Login> {
        let secret = self.listener.cluster_secret.as_ref()?;
        Some(Login {
            mechanism: tinymq_auth::ScramMechanism::Sha256,
            user: tinymq_auth::node_user(kind, id),
            password: secret.password(),
            authzid: None,
        })
    }

    /// Refuses a listener on a non-loopback address without TLS and authentication, unless
    /// `--insecure`: `what` names the listener for the error.
    pub fn check_exposure(&self, what: &str, addr: SocketAddr, tls: bool) -> anyhow::Result<()> {
        if self.insecure || addr.ip().is_loopback() {
            return Ok(());
        }
        let auth = self.listener.auth != AuthMode::None;
        anyhow::ensure!(
            tls && auth,
            "the {what} listener {addr} is reachable from other machines but has {}: give {}, or --insecure to run it so anyway (docs/security.md)",
            match (tls, auth) {
                (false, false) => "neither TLS nor authentication",
                (false, true) => "no TLS",
                _ => "no authentication",
            },
            match (tls, auth) {
                (false, false) => "--tls-cert/--tls-key/--tls-ca and --auth scram|mtls",
                (false, true) => "--tls-cert, --tls-key and --tls-ca",
                _ => "--auth scram|mtls",
            },
        );
        Ok(())
    }
}

impl ServerSecurityArgs {
    /// The security keys of a node's TOML file (`auth`, `cluster_secret_file`, `super_users`,
    /// `insecure`: the flags' names with `_`).
    pub fn from_file(
        auth: Option<String>,
        cluster_secret_file: Option<PathBuf>,
        super_users: Option<String>,
        insecure: Option<bool>,
    ) -> ServerSecurityArgs {
        ServerSecurityArgs {
            auth,
            cluster_secret_file,
            super_users,
            insecure: insecure.unwrap_or(false),
        }
    }

    /// These flags (and `TINYMQ_*` variables) over the file's settings: a flag given wins.
    pub fn over(self, file: ServerSecurityArgs) -> ServerSecurityArgs {
        ServerSecurityArgs {
            auth: self.auth.or(file.auth),
            cluster_secret_file: self.cluster_secret_file.or(file.cluster_secret_file),
            super_users: self.super_users.or(file.super_users),
            insecure: self.insecure || file.insecure,
        }
    }

    /// Resolves the flags. `standalone_data`: the standalone server's data directory, where a
    /// cluster secret is created (or found) when authentication is on and none is given.
    /// Reads or writes a small file: called before the runtime's hot paths.
    pub fn resolve(&self, standalone_data: Option<&Path>) -> anyhow::Result<NodeSecurity> {
        let auth = match self.auth.as_deref() {
            None => AuthMode::None,
            Some(text) => AuthMode::parse(text).with_context(|| {
                format!(
                    "auth {text:?} (--auth or `auth` in --config): expected none, scram or mtls"
                )
            })?,
        };
        let secret = match (&self.cluster_secret_file, standalone_data) {
            (Some(path), _) => Some(
                ClusterSecret::load(path)
                    .with_context(|| format!("--cluster-secret-file {}", path.display()))?,
            ),
            (None, Some(data)) if auth != AuthMode::None => Some(standalone_secret(data)?),
            (None, _) => None,
        };
        anyhow::ensure!(
            auth != AuthMode::Scram || secret.is_some(),
            "--auth scram in a cluster needs --cluster-secret-file: the nodes log in to each other with it"
        );
        let super_users = parse_super_users(self.super_users.as_deref().unwrap_or("User:admin"))?;
        Ok(NodeSecurity {
            listener: ListenerSecurity {
                auth,
                cluster_secret: secret.map(Arc::new),
                ..ListenerSecurity::default()
            },
            authorization: AuthorizationConfig {
                enabled: auth != AuthMode::None,
                super_users,
            },
            insecure: self.insecure,
        })
    }
}

/// `<data>/cluster.secret`, created (mode 0600) at the first start with authentication on.
fn standalone_secret(data: &Path) -> anyhow::Result<ClusterSecret> {
    let path = data.join(CLUSTER_SECRET_FILE);
    if path.exists() {
        return ClusterSecret::load(&path).with_context(|| format!("reading {}", path.display()));
    }
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    let secret = ClusterSecret::generate_into(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    tracing::info!(path = %path.display(), "created the cluster secret");
    Ok(secret)
}

fn parse_super_users(text: &str) -> anyhow::Result<Vec<Principal>> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            Principal::parse(p)
                .with_context(|| format!("--super-users {p:?}: expected User:NAME or Node:NAME"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(auth: AuthMode, insecure: bool) -> NodeSecurity {
        NodeSecurity {
            listener: ListenerSecurity {
                auth,
                ..ListenerSecurity::default()
            },
            authorization: AuthorizationConfig::default(),
            insecure,
        }
    }

    #[test]
    fn exposed_listeners_need_tls_and_auth_or_insecure() {
        let public: SocketAddr = "0.0.0.0:1".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(node(AuthMode::None, false)
            .check_exposure("client", local, false)
            .is_ok());
        let refused = node(AuthMode::None, false).check_exposure("client", public, false);
        assert!(refused.unwrap_err().to_string().contains("--insecure"));
        assert!(node(AuthMode::Scram, false)
            .check_exposure("client", public, false)
            .is_err());
        assert!(node(AuthMode::None, false)
            .check_exposure("client", public, true)
            .is_err());
        assert!(node(AuthMode::Scram, false)
            .check_exposure("client", public, true)
            .is_ok());
        assert!(node(AuthMode::None, true)
            .check_exposure("client", public, false)
            .is_ok());
    }

    #[test]
    fn flags_win_over_the_file() {
        let file = ServerSecurityArgs::from_file(
            Some("scram".into()),
            Some("/file/secret".into()),
            Some("User:ops".into()),
            Some(true),
        );
        let none = ServerSecurityArgs::default().over(file.clone());
        assert_eq!(none.auth.as_deref(), Some("scram"));
        assert_eq!(none.super_users.as_deref(), Some("User:ops"));
        assert!(none.insecure);
        let flags = ServerSecurityArgs {
            auth: Some("mtls".into()),
            cluster_secret_file: Some("/flag/secret".into()),
            super_users: None,
            insecure: false,
        };
        let merged = flags.over(file);
        assert_eq!(merged.auth.as_deref(), Some("mtls"));
        assert_eq!(
            merged.cluster_secret_file,
            Some(PathBuf::from("/flag/secret"))
        );
        assert_eq!(merged.super_users.as_deref(), Some("User:ops"));
        assert!(
            merged.insecure,
            "insecure = true in the file holds without the flag"
        );
    }

    #[test]
    fn the_standalone_server_creates_its_secret_once() {
        let dir = tempfile::tempdir().unwrap();
        let args = ServerSecurityArgs {
            auth: Some("scram".into()),
            ..ServerSecurityArgs::default()
        };
        let first = args.resolve(Some(dir.path())).unwrap();
        let again = args.resolve(Some(dir.path())).unwrap();
        let password = |n: &NodeSecurity| n.listener.cluster_secret.as_ref().unwrap().password();
        assert_eq!(password(&first), password(&again));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(CLUSTER_SECRET_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            first.authorization.super_users,
            vec![Principal::user("admin")]
        );
        assert!(first.authorization.enabled);
    }
}
