//! TLS test material and processes: a CA made with rcgen, leaf certificates for nodes and
//! clients (SANs 127.0.0.1 and localhost, usable as server and client certificates), an expired
//! one, and `tinymq` processes whose log goes to a file the test can read.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::BIN;

/// A certificate authority whose certificate is written to `<dir>/<name>.pem`.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub cert: PathBuf,
    dir: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Clone)]
pub struct Identity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, cert.pem()).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            cert: path,
            dir: dir.to_path_buf(),
        }
    }

    /// A certificate with subject CN `cn`, valid now, for 127.0.0.1 and localhost.
    pub fn leaf(&self, cn: &str) -> Identity {
        self.sign(cn, false)
    }

    /// Like [`Ca::leaf`], but it expired in 2021.
    pub fn expired_leaf(&self, cn: &str) -> Identity {
        self.sign(cn, true)
    }

    fn sign(&self, cn: &str, expired: bool) -> Identity {
        self.sign_naming(cn, &["127.0.0.1", "localhost"], expired)
    }

    /// A server and client certificate with subject CN `cn` naming `names`, valid now or
    /// (`expired`) only in 2020.
    fn sign_naming(&self, cn: &str, names: &[&str], expired: bool) -> Identity {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let identity = Identity {
            cert: self.dir.join(format!("{cn}.crt.pem")),
            key: self.dir.join(format!("{cn}.key.pem")),
        };
        std::fs::write(&identity.cert, cert.pem()).unwrap();
        std::fs::write(&identity.key, key.serialize_pem()).unwrap();
        identity
    }
}

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// The flags of a node serving TLS with `identity`, trusting `ca`.
pub fn node_flags(ca: &Path, identity: &Identity, client_auth: &str) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        s(&identity.cert),
        "--tls-key".into(),
        s(&identity.key),
        "--tls-ca".into(),
        s(ca),
        "--tls-client-auth".into(),
        client_auth.into(),
    ]
}

/// The flags of a client tool trusting `ca`, with a client certificate if given.
pub fn client_flags(ca: &Path, identity: Option<&Identity>) -> Vec<String> {
    let mut flags = vec!["--tls-ca".to_string(), s(ca)];
    if let Some(id) = identity {
        flags.extend([
            "--tls-cert".into(),
            s(&id.cert),
            "--tls-key".into(),
            s(&id.key),
        ]);
    }
    flags
}

/// A `tinymq` server role (server, broker or meta) whose stderr log goes to a file.
pub struct Node {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    pub addr: String,
    pub log: PathBuf,
}

impl Node {
    /// Runs `tinymq ARGS` at log level info and waits for its "listening on ADDR" line.
    pub fn spawn(args: &[String], log: &Path) -> Node {
        Node::spawn_with_env(args, log, &[])
    }

    /// [`Node::spawn`] with extra environment variables.
    pub fn spawn_with_env(args: &[String], log: &Path, env: &[(&str, &str)]) -> Node {
        let file = std::fs::File::create(log).unwrap();
        let mut child = Command::new(BIN)
            .args(args)
            .envs(env.iter().copied())
            .args(["--log-level", "info"])
            .stdout(Stdio::piped())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn tinymq");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let Some((_, addr)) = line.trim().split_once(" listening on ") else {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{args:?} did not start: {line:?}\n{text}");
        };
        Node {
            addr: addr.to_string(),
            child,
            _stdout: stdout,
            log: log.to_path_buf(),
        }
    }

    /// `tinymq server` on an ephemeral port with `extra` flags.
    pub fn server(data: &Path, extra: &[String]) -> Node {
        let mut args: Vec<String> = ["server", "--listen", "127.0.0.1:0", "--http", "off"]
            .map(String::from)
            .to_vec();
        args.extend(["--data".into(), s(data)]);
        args.extend_from_slice(extra);
        Node::spawn(&args, &data.with_extension("log"))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGHUP (reload certificates).
    pub fn hangup(&self) {
        // SAFETY: signalling our own child process.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGHUP) };
        assert_eq!(rc, 0, "kill -HUP");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `tinymq ARGS` against `bootstrap`, feeding `stdin`.
pub fn tool(bootstrap: &str, args: &[String], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env("TINYMQ_BOOTSTRAP", bootstrap);
    super::run_with_input(&mut cmd, stdin)
}

/// [`tool`] that must succeed; returns stdout.
pub fn tool_ok(bootstrap: &str, args: &[String], stdin: &[u8]) -> String {
    let out = tool(bootstrap, args, stdin);
    assert!(
        out.status.success(),
        "tinymq {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`tool`] that must fail; returns stderr.
pub fn tool_err(bootstrap: &str, args: &[String]) -> String {
    let out = tool(bootstrap, args, b"");
    assert!(
        !out.status.success(),
        "tinymq {args:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `words` followed by `flags`, as owned strings.
pub fn args(words: &[&str], flags: &[String]) -> Vec<String> {
    words
        .iter()
        .map(|w| w.to_string())
        .chain(flags.iter().cloned())
        .collect()
}

impl Ca {
    /// A server and client certificate with subject CN `cn` naming only `names` (DNS names or
    /// IP addresses), valid now: for tests of which names a certificate must cover.
    pub fn leaf_naming(&self, cn: &str, names: &[&str]) -> Identity {
        self.sign_naming(cn, names, false)
    }
}
