//! The HTTP listener under `--auth scram` (issue 16), against real `tinymq server` processes:
//! credentials asked of every route but the health checks (401 with the Basic challenge),
//! wrong passwords refused and logged, bearer tokens issued, used, expired and forged, the
//! REST API acting as the caller so the cluster's ACLs decide (403 naming the permission,
//! lists showing only what the caller may describe), and HTTPS with the test CA.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde_json::{json, Value};

const ADMIN_PASSWORD: &str = "admin-secret-1";

/// `tinymq server --auth scram` on ephemeral loopback ports, its log in `DATA/server.log`.
struct AuthServer {
    child: Child,
    native: String,
    http: String,
    log: std::path::PathBuf,
    _data: tempfile::TempDir,
}

impl AuthServer {
    /// Started, and answering the admin over plain HTTP.
    fn start(extra: &[&str]) -> AuthServer {
        let server = AuthServer::spawn(extra);
        let admin = basic("admin", ADMIN_PASSWORD);
        let ready = common::retry(150, Duration::from_millis(100), || {
            (call(&server.http, "GET", "/api/v1/topics", Some(&admin), None).status == 200)
                .then_some(())
        });
        assert!(ready.is_some(), "the API never answered the admin");
        server
    }

    /// Started (its addresses printed), perhaps not answering yet.
    fn spawn(extra: &[&str]) -> AuthServer {
        AuthServer::spawn_with(&["--auth", "scram"], "127.0.0.1:0", extra)
    }

    fn spawn_with(auth: &[&str], http: &str, extra: &[&str]) -> AuthServer {
        let data = tempfile::tempdir().unwrap();
        let log = data.path().join("server.log");
        let mut child = Command::new(common::BIN)
            .args(["server", "--listen", "127.0.0.1:0", "--http", http])
            .args(auth)
            .args(extra)
            .arg("--data")
            .arg(data.path().join("node"))
            .env("TINYMQ_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = |prefix: &str| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| {
                    let log = std::fs::read_to_string(&log).unwrap_or_default();
                    panic!("expected {prefix:?}, got {line:?}; the log:\n{log}")
                })
                .to_string()
        };
        let native = line("tinymq listening on ");
        let http = line("tinymq http listening on ");
        AuthServer {
            child,
            native,
            http,
            log,
            _data: data,
        }
    }

    /// Runs `tinymq ARGS --bootstrap NATIVE` logged in as admin; asserts it succeeds.
    fn admin_tool(&self, args: &[&str]) {
        let out = Command::new(common::BIN)
            .args(args)
            .args(["--bootstrap", &self.native])
            .env("TINYMQ_USER", "admin")
            .env("TINYMQ_PASSWORD", ADMIN_PASSWORD)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tinymq {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn create_user(&self, name: &str, password: &str) {
        self.admin_tool(&["user", "create", name, "--new-password", password]);
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// Asserts a problem document with `status` and `code`; returns its detail.
    fn problem(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        let p = self.json();
        assert_eq!(p["code"], code, "{p}");
        p["detail"].as_str().unwrap().to_string()
    }

    /// Asserts a 401 that makes a browser prompt for a login.
    fn unauthorized(&self) -> String {
        let detail = self.problem(401, "AUTHENTICATION_FAILED");
        let challenge = self.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with("Basic realm=\"tinymq\""),
            "{challenge:?}"
        );
        detail
    }
}

fn basic(user: &str, password: &str) -> String {
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {pair}")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn request_text(method: &str, path: &str, auth: Option<&str>, body: Option<&Value>) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(auth) = auth {
        head.push_str(&format!("Authorization: {auth}\r\n"));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    if !body.is_empty() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    format!("{head}\r\n{body}")
}

fn parse_answer(bytes: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(bytes).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// One plain-HTTP request on its own connection.
fn call(http: &str, method: &str, path: &str, auth: Option<&str>, body: Option<&Value>) -> Answer {
    let mut stream = TcpStream::connect(http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream
        .write_all(request_text(method, path, auth, body).as_bytes())
        .unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    parse_answer(&bytes)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn every_route_but_health_needs_credentials_and_wrong_ones_are_refused_and_logged() {
    let server = AuthServer::start(&[]);
    let http = &server.http;
    // Open: the health checks, and /metrics on this loopback listener.
    assert_eq!(call(http, "GET", "/health/live", None, None).status, 200);
    assert_eq!(call(http, "GET", "/metrics", None, None).status, 200);
    // Everything else asks, with the challenge that makes a browser prompt.
    for path in ["/api/v1/topics", "/api/v1/cluster", "/", "/api/v1/nope"] {
        call(http, "GET", path, None, None).unauthorized();
    }
    call(
        http,
        "POST",
        "/api/v1/topics",
        None,
        Some(&json!({"name": "t"})),
    )
    .unauthorized();
    // Malformed credentials and an unknown scheme.
    call(http, "GET", "/api/v1/topics", Some("Basic !!!"), None).unauthorized();
    call(http, "GET", "/api/v1/topics", Some("Digest x"), None).unauthorized();
    // A wrong password and an unknown user: the same 401, each logged (never the password).
    let wrong = basic("admin", "not-the-password");
    call(http, "GET", "/api/v1/topics", Some(&wrong), None).unauthorized();
    let ghost = basic("ghost", "whatever-1");
    call(http, "GET", "/api/v1/topics", Some(&ghost), None).unauthorized();
    let log = server.log_text();
    assert!(
        log.contains("HTTP authentication failed") && log.contains("ghost"),
        "{log}"
    );
    assert!(!log.contains("not-the-password"), "{log}");
    let metrics = call(http, "GET", "/metrics", None, None).body;
    let failed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tinymq_http_auth_failed_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(failed.is_some_and(|n| n >= 2.0), "{failed:?}");
    // The right password, twice (the second from the remembered verification).
    let admin = basic("admin", ADMIN_PASSWORD);
    for _ in 0..2 {
        let r = call(http, "GET", "/api/v1/topics", Some(&admin), None);
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The OpenAPI document declares both ways in, and the 401 and 403 answers.
    let doc = call(http, "GET", "/api/v1/openapi.json", Some(&admin), None).json();
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["basic"]["scheme"], "basic", "{schemes}");
    assert_eq!(schemes["bearer"]["scheme"], "bearer", "{schemes}");
    let delete = &doc["paths"]["/api/v1/topics/{name}"]["delete"]["responses"];
    assert!(
        delete["401"].is_object() && delete["403"].is_object(),
        "{delete}"
    );
    // A password change takes effect at once, remembered verification or not.
    server.create_user("carol", "carol-pass-1");
    let carol = basic("carol", "carol-pass-1");
    assert_eq!(
        call(http, "GET", "/api/v1/topics", Some(&carol), None).status,
        200
    );
    server.admin_tool(&["user", "passwd", "carol", "--new-password", "carol-pass-2"]);
    call(http, "GET", "/api/v1/topics", Some(&carol), None).unauthorized();
}

#[test]
fn tokens_are_issued_for_basic_used_until_they_expire_and_forgeries_are_refused() {
    let server = AuthServer::start(&["--http-token-lifetime-ms", "5000"]);
    let http = &server.http;
    let admin = basic("admin", ADMIN_PASSWORD);
    let issued = call(http, "POST", "/api/v1/auth/token", Some(&admin), None);
    assert_eq!(issued.status, 200, "{}", issued.body);
    let issued = issued.json();
    let token = issued["token"].as_str().unwrap().to_string();
    assert_eq!(issued["principal"], "User:admin");
    let expires_at = issued["expires_at"].as_u64().unwrap();
    // The lifetime given (5 s), not the default hour.
    let now = now_ms();
    assert!(
        (now + 3_000..=now + 5_000).contains(&expires_at),
        "{issued}"
    );

    let r = call(http, "GET", "/api/v1/topics", Some(&bearer(&token)), None);
    assert_eq!(r.status, 200, "{}", r.body);
    // A token gets no other token.
    call(
        http,
        "POST",
        "/api/v1/auth/token",
        Some(&bearer(&token)),
        None,
    )
    .unauthorized();
    // Forged: one character of the signature changed, or a token made up.
    let mut forged = token.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    call(http, "GET", "/api/v1/topics", Some(&bearer(&forged)), None).unauthorized();
    call(
        http,
        "GET",
        "/api/v1/topics",
        Some(&bearer("made.up")),
        None,
    )
    .unauthorized();
    // Expired.
    while now_ms() <= expires_at + 200 {
        std::thread::sleep(Duration::from_millis(200));
    }
    call(http, "GET", "/api/v1/topics", Some(&bearer(&token)), None).unauthorized();
}

#[test]
fn a_token_dies_with_its_users_password_and_with_the_user() {
    let server = AuthServer::start(&[]);
    let http = &server.http;
    let token_of = |user: &str, password: &str| {
        let issued = call(
            http,
            "POST",
            "/api/v1/auth/token",
            Some(&basic(user, password)),
            None,
        );
        assert_eq!(issued.status, 200, "{}", issued.body);
        bearer(issued.json()["token"].as_str().unwrap())
    };
    let topics = |auth: &str| call(http, "GET", "/api/v1/topics", Some(auth), None);

    server.create_user("erin", "erin-pass-1");
    let before = token_of("erin", "erin-pass-1");
    assert_eq!(topics(&before).status, 200);
    server.admin_tool(&["user", "passwd", "erin", "--new-password", "erin-pass-2"]);
    topics(&before).unauthorized();
    let after = token_of("erin", "erin-pass-2");
    assert_eq!(topics(&after).status, 200);

    server.create_user("frank", "frank-pass-1");
    let frank = token_of("frank", "frank-pass-1");
    assert_eq!(topics(&frank).status, 200);
    server.admin_tool(&["user", "delete", "frank"]);
    topics(&frank).unauthorized();
    // Made again with the same password: a new credential (new salt), so still void.
    server.create_user("frank", "frank-pass-1");
    topics(&frank).unauthorized();
    assert!(
        server.log_text().contains("no longer exists"),
        "the refusal is logged with its reason"
    );
}

#[test]
fn an_address_over_its_failure_budget_gets_401_for_basic_but_tokens_still_work() {
    let server = AuthServer::start(&[]);
    let http = server.http.clone();
    let admin = basic("admin", ADMIN_PASSWORD);
    let issued = call(&http, "POST", "/api/v1/auth/token", Some(&admin), None);
    assert_eq!(issued.status, 200, "{}", issued.body);
    let token = bearer(issued.json()["token"].as_str().unwrap());
    // The budget (login_failures_per_ip_max, 10) spent at once, unknown users included.
    let guesses: Vec<_> = (0..10)
        .map(|i| {
            let http = http.clone();
            std::thread::spawn(move || {
                let guess = basic(&format!("guess{i}"), "nope");
                call(&http, "GET", "/api/v1/topics", Some(&guess), None).unauthorized()
            })
        })
        .collect();
    for g in guesses {
        g.join().unwrap();
    }
    let refused = call(&http, "GET", "/api/v1/topics", Some(&admin), None).unauthorized();
    assert!(refused.contains("too many failed logins"), "{refused}");
    let r = call(&http, "GET", "/api/v1/topics", Some(&token), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let log = server.log_text();
    assert_eq!(
        log.matches("too many failed logins from this address")
            .count(),
        1,
        "logged once a window: {log}"
    );
}

#[test]
fn failed_logins_on_the_http_listener_spend_the_addresss_budget_on_the_native_port_too() {
    // One limiter per node (issue 28): a guesser gets one budget per address, not one per port.
    let server = AuthServer::start(&[]);
    for i in 0..10 {
        let guess = basic(&format!("guess{i}"), "nope");
        call(&server.http, "GET", "/api/v1/topics", Some(&guess), None).unauthorized();
    }
    let out = Command::new(common::BIN)
        .args(["topic", "list", "--bootstrap", &server.native])
        .env("TINYMQ_USER", "admin")
        .env("TINYMQ_PASSWORD", ADMIN_PASSWORD)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the native login was let through");
    assert!(stderr.contains("too many failed logins"), "{stderr}");
}

#[test]
fn the_api_acts_as_the_caller_and_the_cluster_acls_decide() {
    let server = AuthServer::start(&[]);
    let http = &server.http;
    let admin = basic("admin", ADMIN_PASSWORD);
    // The super user does everything.
    for name in ["t", "visible-1", "hidden"] {
        let r = call(
            http,
            "POST",
            "/api/v1/topics",
            Some(&admin),
            Some(&json!({"name": name, "partitions": 1})),
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = call(
        http,
        "POST",
        "/api/v1/topics/t/messages",
        Some(&admin),
        Some(&json!({"key": "k", "value": "v"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    server.create_user("reader", "reader-pass-1");
    server.admin_tool(&[
        "acl",
        "add",
        "--principal",
        "User:reader",
        "--topic",
        "t",
        "--operation",
        "read",
    ]);
    server.create_user("looker", "looker-pass-1");
    server.admin_tool(&[
        "acl",
        "add",
        "--principal",
        "User:looker",
        "--topic",
        "visible-",
        "--prefixed",
        "--operation",
        "describe",
    ]);

    // READ on t: its messages, but neither producing nor deleting.
    let reader = basic("reader", "reader-pass-1");
    let page = call(
        http,
        "GET",
        "/api/v1/topics/t/partitions/0/messages?offset=0",
        Some(&reader),
        None,
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.json()["messages"][0]["value"], "v", "{}", page.body);
    let produced = call(
        http,
        "POST",
        "/api/v1/topics/t/messages",
        Some(&reader),
        Some(&json!({"value": "no"})),
    );
    let why = produced.problem(403, "AUTHORIZATION_FAILED");
    assert!(why.contains("WRITE"), "{why}");
    let deleted = call(http, "DELETE", "/api/v1/topics/t", Some(&reader), None);
    let why = deleted.problem(403, "AUTHORIZATION_FAILED");
    assert!(why.contains("DELETE"), "{why}");

    // DESCRIBE on visible-*: the list shows only those.
    let looker = basic("looker", "looker-pass-1");
    let list = call(http, "GET", "/api/v1/topics", Some(&looker), None);
    assert_eq!(list.status, 200, "{}", list.body);
    let names: Vec<String> = list.json()["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["visible-1"], "{}", list.body);
    // The share-group settings come from the metadata image, which needs DESCRIBE on the
    // cluster: null for the looker (the rest of the answer stands), set for the super user.
    assert_eq!(list.json()["topics"][0]["dead_letter_topic"], Value::Null);
    let looked = call(http, "GET", "/api/v1/topics/visible-1", Some(&looker), None);
    assert_eq!(looked.status, 200, "{}", looked.body);
    assert_eq!(
        looked.json()["config"]["max_delivery_attempts"],
        Value::Null
    );
    let full = call(http, "GET", "/api/v1/topics/visible-1", Some(&admin), None).json();
    assert_eq!(full["config"]["max_delivery_attempts"], 5, "{full}");
    assert_eq!(
        full["config"]["dead_letter_topic"], "visible-1.dlq",
        "{full}"
    );
    // /metrics off loopback needs DESCRIBE on the cluster; here it is open (loopback), and the
    // super user still sees every topic.
    let all = call(http, "GET", "/api/v1/topics", Some(&admin), None).json();
    assert_eq!(all["topics"].as_array().unwrap().len(), 3, "{all}");
    let r = call(http, "DELETE", "/api/v1/topics/hidden", Some(&admin), None);
    assert!(
        r.status == 200 || r.status == 204,
        "{} {}",
        r.status,
        r.body
    );
}

#[test]
fn https_with_the_test_ca_and_plain_http_is_told_to_use_https() {
    let dir = tempfile::tempdir().unwrap();
    let ca = common::tls::Ca::new(dir.path(), "test-ca");
    let flags = common::tls::node_flags(&ca.cert, &ca.leaf("node"), "none");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    for auth in [&[][..], &["--auth", "scram"][..]] {
        let server = AuthServer::spawn_with(auth, "127.0.0.1:0", &flags);
        let live = https(&ca.cert, &server.http, "GET", "/health/live", None);
        assert_eq!(live.status, 200, "{live:?}");
        let plain = call(&server.http, "GET", "/health/live", None, None);
        assert_eq!(plain.status, 400, "{plain:?}");
        assert!(plain.body.contains("HTTPS"), "{plain:?}");
        let credentials = if auth.is_empty() {
            None
        } else {
            https(&ca.cert, &server.http, "GET", "/api/v1/topics", None).unauthorized();
            Some(basic("admin", ADMIN_PASSWORD))
        };
        // The REST API reaches the node's TLS port trusting the same CA.
        let topics = common::retry(150, Duration::from_millis(100), || {
            let r = https(
                &ca.cert,
                &server.http,
                "GET",
                "/api/v1/topics",
                credentials.as_deref(),
            );
            (r.status == 200).then_some(r)
        });
        assert!(
            topics.is_some(),
            "the topics never came over HTTPS ({auth:?})"
        );
    }
}

#[test]
fn metrics_off_loopback_need_describe_on_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let ca = common::tls::Ca::new(dir.path(), "test-ca");
    let flags = common::tls::node_flags(&ca.cert, &ca.leaf("node"), "none");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // Every address: not loopback, so /metrics asks too.
    let server = AuthServer::spawn_with(&["--auth", "scram"], "0.0.0.0:0", &flags);
    let port = server.http.rsplit_once(':').unwrap().1;
    let http = format!("127.0.0.1:{port}");
    let admin = basic("admin", ADMIN_PASSWORD);
    let scraped = common::retry(150, Duration::from_millis(100), || {
        let r = https(&ca.cert, &http, "GET", "/metrics", Some(&admin));
        (r.status == 200).then_some(r)
    });
    assert!(scraped.is_some_and(|r| r.body.contains("# EOF")));
    https(&ca.cert, &http, "GET", "/metrics", None).unauthorized();
    assert_eq!(
        https(&ca.cert, &http, "GET", "/health/live", None).status,
        200
    );
    // A user without DESCRIBE on the cluster may not read them.
    let mut tool = vec!["user", "create", "plain", "--new-password", "plain-pass-1"];
    tool.extend(client_tls_flags(&flags));
    server.admin_tool(&tool);
    let plain = basic("plain", "plain-pass-1");
    let refused = https(&ca.cert, &http, "GET", "/metrics", Some(&plain));
    let why = refused.problem(403, "AUTHORIZATION_FAILED");
    assert!(why.contains("DESCRIBE"), "{why}");
}

/// The `--tls-ca` pair of a node's TLS flags, for a client tool.
fn client_tls_flags<'a>(node_flags: &[&'a str]) -> Vec<&'a str> {
    let at = node_flags.iter().position(|f| *f == "--tls-ca").unwrap();
    node_flags[at..at + 2].to_vec()
}

/// One HTTPS request trusting only `ca`.
fn https(ca: &Path, http: &str, method: &str, path: &str, auth: Option<&str>) -> Answer {
    let tls = tinymq_tls::ClientTls::load(ca, None, None).unwrap();
    let config = tls.connector().config().clone();
    let name = tinymq_tls::server_name("127.0.0.1").unwrap();
    let connection = tinymq_tls::rustls::ClientConnection::new(config, name).unwrap();
    let tcp = TcpStream::connect(http).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut stream = tinymq_tls::rustls::StreamOwned::new(connection, tcp);
    stream
        .write_all(request_text(method, path, auth, None).as_bytes())
        .unwrap();
    let mut bytes = Vec::new();
    // A server closing without close_notify ends the read with an error after the bytes.
    let _ = stream.read_to_end(&mut bytes);
    parse_answer(&bytes)
}

/// One REST route, the ACLs that allow it (`(--topic|--group|--cluster, name, operation)`),
/// and the request.
struct Row {
    route: &'static str,
    acls: &'static [(&'static str, &'static str, &'static str)],
    method: &'static str,
    path: &'static str,
    body: Option<Value>,
}

#[test]
fn each_rest_route_is_refused_without_its_permission_and_served_with_it() {
    let server = AuthServer::start(&[]);
    let http = &server.http;
    let admin = basic("admin", ADMIN_PASSWORD);
    let ok = |method: &str, path: &str, body: Option<Value>| {
        let r = call(http, method, path, Some(&admin), body.as_ref());
        assert!((200..300).contains(&r.status), "{method} {path}: {r:?}");
    };
    for name in ["m", "m-del"] {
        ok(
            "POST",
            "/api/v1/topics",
            Some(json!({"name": name, "partitions": 1})),
        );
    }
    ok(
        "POST",
        "/api/v1/topics/m/messages",
        Some(json!({"value": "v"})),
    );
    ok(
        "POST",
        "/api/v1/groups/g/offsets",
        Some(json!({"topic": "m", "to": "latest"})),
    );
    server.create_user("nobody", "nobody-pass-1");
    let nobody = basic("nobody", "nobody-pass-1");

    let rows = [
        Row {
            route: "describe topic",
            acls: &[("--topic", "m", "describe")],
            method: "GET",
            path: "/api/v1/topics/m",
            body: None,
        },
        Row {
            route: "create topic",
            acls: &[("--topic", "new-1", "create")],
            method: "POST",
            path: "/api/v1/topics",
            body: Some(json!({"name": "new-1", "partitions": 1})),
        },
        Row {
            route: "alter topic",
            acls: &[("--topic", "m", "alter")],
            method: "PATCH",
            path: "/api/v1/topics/m",
            body: Some(json!({"config": {"retention_ms": 600000}})),
        },
        Row {
            route: "read messages",
            acls: &[("--topic", "m", "read")],
            method: "GET",
            path: "/api/v1/topics/m/partitions/0/messages?offset=0",
            body: None,
        },
        Row {
            route: "produce",
            acls: &[("--topic", "m", "write")],
            method: "POST",
            path: "/api/v1/topics/m/messages",
            body: Some(json!({"value": "w"})),
        },
        Row {
            route: "reset offsets",
            acls: &[("--group", "g2", "read"), ("--topic", "m", "read")],
            method: "POST",
            path: "/api/v1/groups/g2/offsets",
            body: Some(json!({"topic": "m", "to": "earliest"})),
        },
        Row {
            route: "describe group",
            acls: &[("--group", "g", "describe"), ("--topic", "m", "describe")],
            method: "GET",
            path: "/api/v1/groups/g",
            body: None,
        },
        Row {
            route: "delete group",
            acls: &[("--group", "g", "delete")],
            method: "DELETE",
            path: "/api/v1/groups/g",
            body: None,
        },
        Row {
            route: "delete topic",
            acls: &[("--topic", "m-del", "delete")],
            method: "DELETE",
            path: "/api/v1/topics/m-del",
            body: None,
        },
        Row {
            route: "cluster",
            acls: &[("--cluster", "", "describe")],
            method: "GET",
            path: "/api/v1/cluster",
            body: None,
        },
    ];
    for (i, row) in rows.iter().enumerate() {
        let refused = call(http, row.method, row.path, Some(&nobody), row.body.as_ref());
        assert_eq!(
            refused.status, 403,
            "{} without permission: {refused:?}",
            row.route
        );
        let user = format!("user-{i}");
        server.create_user(&user, "user-pass-1");
        let principal = format!("User:{user}");
        for (kind, name, op) in row.acls {
            let mut args = vec!["acl", "add", "--principal", &principal, kind];
            if !name.is_empty() {
                args.push(name);
            }
            args.extend(["--operation", op]);
            server.admin_tool(&args);
        }
        let allowed = basic(&user, "user-pass-1");
        let served = call(
            http,
            row.method,
            row.path,
            Some(&allowed),
            row.body.as_ref(),
        );
        assert!(
            (200..300).contains(&served.status),
            "{} with {:?}: {served:?}",
            row.route,
            row.acls
        );
    }
}

/// A process whose first two stdout lines name its native and HTTP addresses.
fn spawn_node(args: &[&str], data: &Path, secret: &Path) -> (Child, String) {
    let mut child = Command::new(common::BIN)
        .args(args)
        .args([
            "--http",
            "127.0.0.1:0",
            "--auth",
            "scram",
            "--cluster-secret-file",
        ])
        .arg(secret)
        .arg("--data")
        .arg(data)
        .env("TINYMQ_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("TINYMQ_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    let http = line
        .trim()
        .strip_prefix("tinymq http listening on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    (child, http)
}

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_metaserver_node_and_a_broker_ask_credentials_and_act_for_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("cluster.secret");
    std::fs::write(&secret, "07".repeat(32)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let meta_addr = format!("127.0.0.1:{}", common::free_port());
    let peers = format!("1={meta_addr}");
    let meta_args = [
        "meta", "--id", "1", "--listen", &meta_addr, "--peers", &peers,
    ];
    let (meta, meta_http) = spawn_node(&meta_args, &dir.path().join("meta"), &secret);
    let mut nodes = Killed(vec![meta]);
    let broker_args = [
        "broker",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--meta",
        &meta_addr,
    ];
    let (broker, broker_http) = spawn_node(&broker_args, &dir.path().join("b1"), &secret);
    nodes.0.push(broker);

    let admin = basic("admin", ADMIN_PASSWORD);
    for http in [&meta_http, &broker_http] {
        call(http, "GET", "/api/v1/cluster", None, None).unauthorized();
        let wrong = basic("admin", "wrong-password");
        call(http, "GET", "/api/v1/topics", Some(&wrong), None).unauthorized();
    }
    // The broker's API, as the admin; then the MetaServer node's, through the live broker.
    let created = common::retry(150, Duration::from_millis(100), || {
        let body = json!({"name": "orders", "partitions": 1});
        let r = call(
            &broker_http,
            "POST",
            "/api/v1/topics",
            Some(&admin),
            Some(&body),
        );
        (r.status == 201).then_some(())
    });
    assert!(
        created.is_some(),
        "the admin never created a topic through the broker"
    );
    let listed = common::retry(150, Duration::from_millis(100), || {
        let r = call(&meta_http, "GET", "/api/v1/topics", Some(&admin), None);
        (r.status == 200 && r.body.contains("orders")).then_some(())
    });
    assert!(
        listed.is_some(),
        "the MetaServer node's API never listed the topic"
    );
    let cluster = call(&meta_http, "GET", "/api/v1/cluster", Some(&admin), None);
    assert_eq!(cluster.status, 200, "{cluster:?}");
    assert_eq!(cluster.json()["brokers"][0]["id"], 1, "{}", cluster.body);
    drop(nodes);
}
