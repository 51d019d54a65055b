//! TLS end to end with real processes: the CLI over TLS, wrong-kind peers refused with words
//! that say why (a server still serving the others), untrusted and expired certificates,
//! mutual TLS and the client certificate's principal, a certificate reload on SIGHUP that keeps
//! open connections, and a MetaServer group with brokers where every link is mutual TLS.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::tls::{args, client_flags, node_flags, tool_err, tool_ok, Ca, Node};
use tinymq_client::{ClientTls, Connection, NodeRole, Security};
use tinymq_protocol::messages as m;

fn lines(n: usize, prefix: &str) -> String {
    (0..n).map(|i| format!("{prefix}-{i}\n")).collect()
}

fn sorted(text: &str) -> BTreeSet<String> {
    text.lines().map(str::to_string).collect()
}

#[test]
fn the_cli_works_over_tls_and_peers_of_the_wrong_kind_are_told_why() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "ca");
    let id = ca.leaf("server-1");
    // The TLS settings from the TOML file, as an operator would keep them.
    let config = tmp.path().join("tls.toml");
    let toml = format!(
        "tls_cert = {:?}\ntls_key = {:?}\ntls_ca = {:?}\ntls_client_auth = \"none\"\n",
        id.cert, id.key, ca.cert
    );
    std::fs::write(&config, toml).unwrap();
    let from_file = ["--config".to_string(), config.to_str().unwrap().to_string()];
    let tls = Node::server(&tmp.path().join("tls"), &from_file);
    let plain = Node::server(&tmp.path().join("plain"), &[]);
    let trust = client_flags(&ca.cert, None);

    let create = args(&["topic", "create", "t", "--partitions", "2"], &trust);
    tool_ok(&tls.addr, &create, b"");
    let input = lines(2000, "tls");
    tool_ok(
        &tls.addr,
        &args(&["produce", "t"], &trust),
        input.as_bytes(),
    );
    let consume = args(
        &["consume", "t", "--from-beginning", "--count", "2000"],
        &trust,
    );
    let out = tool_ok(&tls.addr, &consume, b"");
    assert_eq!(sorted(&out), sorted(&input), "every record back over TLS");

    // A plain client on the TLS port is told to use TLS, in a frame it can read.
    let err = tool_err(&tls.addr, &args(&["topic", "list"], &[]));
    assert!(err.contains("this port requires TLS"), "{err}");
    // A TLS client on a plain port is told the server does not speak TLS there.
    let err = tool_err(&plain.addr, &args(&["topic", "list"], &trust));
    assert!(err.contains("does not speak TLS on this port"), "{err}");

    // Both servers still serve their own kind of client.
    let listed = tool_ok(&tls.addr, &args(&["topic", "list"], &trust), b"");
    assert!(listed.lines().any(|l| l == "t"), "{listed}");
    tool_ok(&plain.addr, &args(&["topic", "create", "p"], &[]), b"");
    assert!(tls.log_text().contains("plain connection on a TLS port"));
    assert!(plain.log_text().contains("TLS handshake on a plain port"));
}

#[test]
fn untrusted_and_expired_server_certificates_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "ca");
    let other = Ca::new(tmp.path(), "other-ca");
    let good = Node::server(
        &tmp.path().join("good"),
        &node_flags(&ca.cert, &ca.leaf("good"), "none"),
    );
    let expired = Node::server(
        &tmp.path().join("expired"),
        &node_flags(&ca.cert, &ca.expired_leaf("expired"), "none"),
    );
    let list = |trust: &Path| args(&["topic", "list"], &client_flags(trust, None));

    let err = tool_err(&good.addr, &list(&other.cert));
    assert!(err.contains("not trusted"), "{err}");
    let err = tool_err(&expired.addr, &list(&ca.cert));
    assert!(err.contains("expired"), "{err}");
    tool_ok(&good.addr, &list(&ca.cert), b"");
}

#[test]
fn mutual_tls_needs_a_client_certificate_and_names_its_subject() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "ca");
    let other = Ca::new(tmp.path(), "other-ca");
    let server = Node::server(
        &tmp.path().join("mtls"),
        &node_flags(&ca.cert, &ca.leaf("server-1"), "required"),
    );
    let list =
        |id: Option<&common::tls::Identity>| args(&["topic", "list"], &client_flags(&ca.cert, id));
    let (mallory, alice) = (other.leaf("mallory"), ca.leaf("alice"));

    let err = tool_err(&server.addr, &list(None));
    assert!(err.contains("client certificate"), "{err}");
    // A certificate from another CA is refused too.
    let err = tool_err(&server.addr, &list(Some(&mallory)));
    assert!(err.contains("refused"), "{err}");
    tool_ok(&server.addr, &list(Some(&alice)), b"");
    let log = server.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("tls_principal") && l.contains("alice")),
        "the verified subject is logged:\n{log}"
    );
    assert!(
        !log.contains("mallory"),
        "an unverified subject is never taken"
    );
}

fn client_tls(ca: &Path) -> Security {
    Security {
        tls: Some(ClientTls::load(ca, None, None).unwrap()),
        login: None,
    }
}

async fn connect(
    addr: &str,
    security: &Security,
) -> Result<Connection, tinymq_client::ClientError> {
    Connection::connect_secure(addr, "tls-test", "", NodeRole::Client, 0, security).await
}

#[test]
fn sighup_reloads_certificates_for_new_connections_and_keeps_open_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let old_ca = Ca::new(tmp.path(), "old-ca");
    let new_ca = Ca::new(tmp.path(), "new-ca");
    let old_id = old_ca.leaf("server-old");
    let new_id = new_ca.leaf("server-new");
    // The server reads these paths; rotation replaces their contents.
    let (cert, key, ca) = (
        tmp.path().join("server.crt"),
        tmp.path().join("server.key"),
        tmp.path().join("ca.pem"),
    );
    std::fs::copy(&old_id.cert, &cert).unwrap();
    std::fs::copy(&old_id.key, &key).unwrap();
    std::fs::copy(&old_ca.cert, &ca).unwrap();
    let live = common::tls::Identity {
        cert: cert.clone(),
        key: key.clone(),
    };
    let server = Node::server(&tmp.path().join("data"), &node_flags(&ca, &live, "none"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (old_trust, new_trust) = (client_tls(&old_ca.cert), client_tls(&new_ca.cert));
        let open = connect(&server.addr, &old_trust).await.unwrap();
        let wait = Duration::from_secs(10);
        open.request(&m::ListTopicsRequest {}, wait).await.unwrap();

        // A reload that fails (a key that does not match) keeps the old certificates.
        std::fs::copy(&new_id.cert, &cert).unwrap();
        server.hangup();
        let logged = common::retry(100, Duration::from_millis(100), || {
            server
                .log_text()
                .contains("TLS reload failed")
                .then_some(())
        });
        assert!(logged.is_some(), "the failed reload is logged");
        connect(&server.addr, &old_trust).await.unwrap();

        std::fs::copy(&new_id.key, &key).unwrap();
        std::fs::copy(&new_ca.cert, &ca).unwrap();
        server.hangup();
        let mut reloaded = false;
        for _ in 0..100 {
            if connect(&server.addr, &new_trust).await.is_ok() {
                reloaded = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(reloaded, "new connections get the new certificate");
        let err = connect(&server.addr, &old_trust).await.unwrap_err();
        assert!(err.to_string().contains("not trusted"), "{err}");
        // The connection opened before the reload keeps its session.
        let topics = open.request(&m::ListTopicsRequest {}, wait).await;
        assert!(topics.is_ok(), "{topics:?}");
    });
    assert!(server.log_text().contains("TLS certificates reloaded"));
}

#[test]
fn a_cluster_with_mutual_tls_on_every_link_replicates_and_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "ca");
    let meta_addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", common::free_port()))
        .collect();
    let peers: Vec<String> = meta_addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect();
    let mut nodes = Vec::new();
    for (i, addr) in meta_addrs.iter().enumerate() {
        let id = (i + 1).to_string();
        let flags = node_flags(&ca.cert, &ca.leaf(&format!("meta-{id}")), "required");
        let dir = tmp.path().join(format!("meta-{id}"));
        let mut a = vec!["meta", "--id", &id, "--listen", addr, "--http", "off"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        a.extend(["--peers".into(), peers.join(",")]);
        a.extend(["--data".into(), dir.to_str().unwrap().into()]);
        a.extend(flags);
        nodes.push(Node::spawn(&a, &dir.with_extension("log")));
    }
    let meta = meta_addrs.join(",");
    let mut brokers = Vec::new();
    for id in 1..=3 {
        let id = id.to_string();
        let flags = node_flags(&ca.cert, &ca.leaf(&format!("broker-{id}")), "required");
        let dir = tmp.path().join(format!("broker-{id}"));
        let mut a = vec![
            "broker",
            "--id",
            &id,
            "--listen",
            "127.0.0.1:0",
            "--meta",
            &meta,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        a.extend(["--http".into(), "off".into()]);
        a.extend(["--data".into(), dir.to_str().unwrap().into()]);
        a.extend(flags);
        brokers.push(Node::spawn(&a, &dir.with_extension("log")));
    }
    let bootstrap = brokers
        .iter()
        .map(|b| b.addr.clone())
        .collect::<Vec<_>>()
        .join(",");
    let me = client_flags(&ca.cert, Some(&ca.leaf("operator")));
    let create = args(
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--replicas",
            "3",
        ],
        &me,
    );
    let created = common::retry(120, Duration::from_millis(500), || {
        common::tls::tool(&bootstrap, &create, b"")
            .status
            .success()
            .then_some(())
    });
    assert!(
        created.is_some(),
        "the topic is created once three brokers registered"
    );
    let input = lines(3000, "order");
    tool_ok(
        &bootstrap,
        &args(&["produce", "orders", "--acks", "all"], &me),
        input.as_bytes(),
    );
    let consume = args(
        &["consume", "orders", "--from-beginning", "--count", "3000"],
        &me,
    );
    let out = tool_ok(&bootstrap, &consume, b"");
    assert_eq!(
        sorted(&out),
        sorted(&input),
        "every acknowledged record back"
    );

    // Every replica caught up over the followers' TLS links: all three in sync everywhere.
    let describe = args(&["topic", "describe", "orders", "--json"], &me);
    let in_sync = common::retry(120, Duration::from_millis(500), || {
        let json: serde_json::Value =
            serde_json::from_str(&tool_ok(&bootstrap, &describe, b"")).ok()?;
        let partitions = json["partitions"].as_array()?;
        partitions
            .iter()
            .all(|p| p["isr"].as_array().is_some_and(|isr| isr.len() == 3))
            .then_some(())
    });
    assert!(
        in_sync.is_some(),
        "every replica in sync over the followers' TLS links"
    );
    let status = tool_ok(&meta, &args(&["cluster", "status", "--json"], &me), b"");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let up = status.to_string().matches("\"up\":true").count();
    assert_eq!(up, 3, "every MetaServer node answers over TLS: {status}");
    // A refused certificate shows as a failed handshake. One the connecting peer gave up on
    // midway (its RPC's timeout passed on a loaded machine, and it dropped the connection)
    // ends in `tls handshake eof`: not a refusal, so not counted.
    for node in nodes.iter().chain(&brokers) {
        let log = node.log_text();
        let refused = log
            .lines()
            .any(|l| l.contains("TLS handshake failed") && !l.contains("error=tls handshake eof"));
        assert!(!refused, "{}:\n{log}", node.addr);
    }
}

#[test]
fn tls_with_scram_opens_a_listener_to_other_machines_and_serves_logged_in_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "ca");
    let port = common::free_port();
    let (listen, advertise) = (format!("0.0.0.0:{port}"), format!("127.0.0.1:{port}"));
    let data = tmp.path().join("data");
    // Authentication and the admin's password from the TOML file, as an operator keeps them:
    // the file's `auth = "scram"` turns authentication on.
    let password_file = tmp.path().join("admin.password");
    std::fs::write(&password_file, "admin-pw-1").unwrap();
    let config = tmp.path().join("server.toml");
    let toml = format!("auth = \"scram\"\nadmin_password_file = {password_file:?}\n");
    std::fs::write(&config, toml).unwrap();
    let base = args(
        &[
            "server",
            "--listen",
            &listen,
            "--advertise",
            &advertise,
            "--http",
            "off",
        ],
        &[
            "--config".into(),
            config.to_str().unwrap().into(),
            "--data".into(),
            data.to_str().unwrap().into(),
        ],
    );
    // Reachable from other machines with authentication but without TLS: refused at start.
    let refused = std::process::Command::new(common::BIN)
        .args(&base)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("no TLS"), "{why}");

    let with_tls = [base, node_flags(&ca.cert, &ca.leaf("server-1"), "none")].concat();
    let server = Node::spawn_with_env(&with_tls, &tmp.path().join("server.log"), &[]);
    let login = ["--user", "admin", "--password", "admin-pw-1"].map(String::from);
    let me = [client_flags(&ca.cert, None), login.to_vec()].concat();
    let created = common::retry(100, Duration::from_millis(100), || {
        let create = args(&["topic", "create", "t"], &me);
        common::tls::tool(&advertise, &create, b"")
            .status
            .success()
            .then_some(())
    });
    assert!(
        created.is_some(),
        "admin logs in over TLS once bootstrapped"
    );
    let input = lines(500, "secret");
    tool_ok(&advertise, &args(&["produce", "t"], &me), input.as_bytes());
    let consume = args(&["consume", "t", "--from-beginning", "--count", "500"], &me);
    assert_eq!(sorted(&tool_ok(&advertise, &consume, b"")), sorted(&input));
    // TLS alone is not a login.
    let err = tool_err(
        &advertise,
        &args(&["topic", "list"], &client_flags(&ca.cert, None)),
    );
    assert!(
        err.contains("AUTHENTICATION_REQUIRED") || err.contains("login"),
        "{err}"
    );
    drop(server);
}
