//! Users, ACLs and quotas as cluster metadata, through the real `tinymq` tools: a standalone
//! server and a cluster broker that forwards to a MetaServer node answer `tinymq user|acl|quota`
//! with the documented errors; everything survives `kill -9`; the first `admin` is created
//! once from `TINYMQ_ADMIN_PASSWORD` / `--admin-password-file` and never replaced by a later
//! start; no answer carries a password, and `ListUsers` carries no key.

mod common;

use std::process::Output;
use std::time::Duration;

use common::cluster::{wait_for, Cluster};
use common::{RawClient, Server};
use prost::Message;
use tinymq_auth::{CredentialLookup, ScramMechanism};
use tinymq_meta::MetadataImage;
use tinymq_protocol::messages as m;

fn run(server_addr: &str, args: &[&str]) -> Output {
    std::process::Command::new(common::BIN)
        .args(args)
        .env("TINYMQ_BOOTSTRAP", server_addr)
        .output()
        .expect("run tinymq")
}

fn ok(addr: &str, args: &[&str]) -> String {
    let out = run(addr, args);
    assert!(
        out.status.success(),
        "tinymq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must fail; returns its stderr.
fn fails(addr: &str, args: &[&str]) -> String {
    let out = run(addr, args);
    assert!(!out.status.success(), "tinymq {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The image as `MetaRead` gives it to a connection of `role`, as text and parsed (only a
/// node gets the users' verifiers).
fn meta_read_as(addr: &str, role: m::NodeRole) -> (String, MetadataImage) {
    let read = RawClient::handshaken_as(addr, role).call(&m::MetaReadRequest {
        since_version: 0,
        wait_ms: 0,
    });
    assert!(read.error.is_none(), "{:?}", read.error);
    let text = String::from_utf8(read.image.to_vec()).expect("JSON");
    let image = serde_json::from_str(&text).expect("image");
    (text, image)
}

/// What a tool sees: never a password.
fn meta_read(addr: &str) -> (String, MetadataImage) {
    meta_read_as(addr, m::NodeRole::Client)
}

/// What a connection claiming to be a broker sees: the verifiers too, unless nodes must
/// authenticate to get them (then none, which is also checked).
fn node_image(addr: &str) -> MetadataImage {
    meta_read_as(addr, m::NodeRole::Broker).1
}

/// Whether `user`'s `mechanism` verifier takes `password`; `None` when this node hands the
/// verifiers only to authenticated nodes (then the image it gave has no user at all).
fn verifies(addr: &str, user: &str, mechanism: ScramMechanism, password: &str) -> Option<bool> {
    let image = node_image(addr);
    if image.users.is_empty() {
        return None;
    }
    Some(
        image
            .credential(user, mechanism)
            .is_some_and(|c| c.verify_password(password)),
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// ListUsers, raw: its body is exactly the documented fields (names, mechanisms, counts:
/// nothing a decoder would skip), and holds no salt or key of a verifier `image` shows.
fn assert_list_users_has_no_keys(addr: &str, image: &MetadataImage) {
    let mut c = RawClient::handshaken(addr);
    let id = c.send_frame(common::op(tinymq_protocol::OpCode::ListUsers), &[]);
    let frame = c.read_frame().expect("ListUsers answer");
    assert_eq!(frame.header.message_id, id);
    let body = frame.body.to_vec();
    let decoded = m::ListUsersResponse::decode(&body[..]).expect("ListUsersResponse");
    assert!(!decoded.users.is_empty());
    assert_eq!(
        decoded.encode_to_vec(),
        body,
        "ListUsers carries fields beyond UserInfo's"
    );
    for c in image.users.values().flatten() {
        for secret in [&c.salt, &c.stored_key, &c.server_key] {
            assert!(
                !contains(&body, secret),
                "ListUsers carries a verifier's bytes"
            );
        }
    }
}

/// user create/list/passwd/delete with their errors, against `addr`.
fn users(addr: &str, dir: &std::path::Path) {
    let created = ok(
        addr,
        &[
            "user",
            "create",
            "alice",
            "--new-password",
            "alice-secret-1",
        ],
    );
    assert!(created.contains("created user alice"), "{created}");
    let again = fails(addr, &["user", "create", "alice", "--new-password", "x"]);
    assert!(again.contains("USER_ALREADY_EXISTS"), "{again}");
    let missing = fails(addr, &["user", "passwd", "bob", "--new-password", "x"]);
    assert!(missing.contains("USER_NOT_FOUND"), "{missing}");
    let bad = fails(
        addr,
        &["user", "create", "not valid", "--new-password", "x"],
    );
    assert!(bad.contains("INVALID_REQUEST"), "{bad}");
    let weak = fails(
        addr,
        &[
            "user",
            "create",
            "carol",
            "--new-password",
            "x",
            "--iterations",
            "10",
        ],
    );
    assert!(weak.contains("4096"), "{weak}");

    let file = dir.join("bob.pw");
    std::fs::write(&file, "bob-secret\n").unwrap();
    let file = file.to_str().unwrap();
    let args = [
        "user",
        "create",
        "bob",
        "--new-password-file",
        file,
        "--mechanism",
        "scram-sha-512",
    ];
    ok(addr, &args);
    ok(
        addr,
        &[
            "user",
            "passwd",
            "alice",
            "--new-password",
            "alice-secret-2",
            "--iterations",
            "5000",
        ],
    );

    let list = ok(addr, &["user", "list"]);
    assert!(
        list.contains("alice SCRAM-SHA-256 (5000 iterations), SCRAM-SHA-512 (5000 iterations)"),
        "{list}"
    );
    assert!(
        list.contains("bob SCRAM-SHA-512 (8192 iterations)"),
        "{list}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(addr, &["user", "list", "--json"])).expect("JSON");
    assert_eq!(json[0]["name"], "alice");
    assert_eq!(json[1]["credentials"][0]["mechanism"], "SCRAM-SHA-512");

    let (text, _) = meta_read(addr);
    let image = node_image(addr);
    for password in ["alice-secret-1", "alice-secret-2", "bob-secret"] {
        assert!(!text.contains(password), "MetaRead shows a password");
        assert!(!list.contains(password) && !json.to_string().contains(password));
    }
    assert!(!json.to_string().contains("stored_key") && !json.to_string().contains("salt"));
    let sha256 = ScramMechanism::Sha256;
    if let Some(new) = verifies(addr, "alice", sha256, "alice-secret-2") {
        assert!(new, "alice's new password");
        assert_eq!(
            verifies(addr, "alice", sha256, "alice-secret-1"),
            Some(false)
        );
        let bob = verifies(addr, "bob", ScramMechanism::Sha512, "bob-secret");
        assert_eq!(bob, Some(true), "the file's newline is not the password's");
    } else {
        assert!(
            !text.contains("stored_key"),
            "verifiers are hidden from tools too"
        );
    }
    assert_list_users_has_no_keys(addr, &image);

    ok(addr, &["user", "create", "dave", "--new-password", "d"]);
    assert!(ok(addr, &["user", "delete", "dave"]).contains("deleted user dave"));
    let gone = fails(addr, &["user", "delete", "dave"]);
    assert!(gone.contains("USER_NOT_FOUND"), "{gone}");
}

/// acl add/list/remove with filters, against `addr`.
fn acls(addr: &str) {
    let add = |args: &[&str]| {
        let mut all = vec!["acl", "add"];
        all.extend_from_slice(args);
        ok(addr, &all)
    };
    let out = add(&[
        "--principal",
        "User:alice",
        "--topic",
        "orders",
        "--operation",
        "read",
    ]);
    assert_eq!(
        out.trim(),
        "added ALLOW User:alice READ topic orders (literal)"
    );
    add(&[
        "--principal",
        "User:alice",
        "--topic",
        "orders",
        "--operation",
        "read",
    ]);
    add(&[
        "--principal",
        "User:alice",
        "--topic",
        "pay.",
        "--prefixed",
        "--operation",
        "write",
    ]);
    add(&[
        "--principal",
        "User:bob",
        "--group",
        "g1",
        "--operation",
        "read",
    ]);
    add(&[
        "--principal",
        "User:bob",
        "--cluster",
        "--operation",
        "alter",
        "--deny",
    ]);
    let refused = fails(
        addr,
        &[
            "acl",
            "add",
            "--principal",
            "alice",
            "--topic",
            "t",
            "--operation",
            "read",
        ],
    );
    assert!(refused.contains("INVALID_REQUEST"), "{refused}");
    let both = fails(
        addr,
        &[
            "acl",
            "add",
            "--principal",
            "User:a",
            "--topic",
            "t",
            "--group",
            "g",
            "--operation",
            "read",
        ],
    );
    assert!(both.contains("cannot be used with"), "{both}");

    let all = ok(addr, &["acl", "list"]);
    assert_eq!(all.lines().count(), 4, "a duplicate is stored once: {all}");
    let alice = ok(addr, &["acl", "list", "--principal", "User:alice"]);
    assert_eq!(alice.lines().count(), 2, "{alice}");
    let prefixed = ok(addr, &["acl", "list", "--prefixed"]);
    assert_eq!(
        prefixed.trim(),
        "ALLOW User:alice WRITE topic pay. (prefixed)"
    );
    let deny = ok(addr, &["acl", "list", "--deny", "--json"]);
    let deny: serde_json::Value = serde_json::from_str(&deny).unwrap();
    assert_eq!(deny[0]["resource_type"], "cluster");
    assert_eq!(deny[0]["operation"], "ALTER");

    let nothing = fails(addr, &["acl", "remove"]);
    assert!(nothing.contains("at least one"), "{nothing}");
    let removed = ok(
        addr,
        &["acl", "remove", "--principal", "User:bob", "--group", "g1"],
    );
    assert_eq!(
        removed.trim(),
        "removed ALLOW User:bob READ group g1 (literal)"
    );
    let none = ok(
        addr,
        &["acl", "remove", "--principal", "User:bob", "--group", "g1"],
    );
    assert_eq!(none.trim(), "no ACL matched");
    assert_eq!(ok(addr, &["acl", "list"]).lines().count(), 3);
}

/// quota set/list/remove, against `addr`.
fn quotas(addr: &str) {
    let set = ok(
        addr,
        &[
            "quota",
            "set",
            "--principal",
            "User:alice",
            "--produce-bytes-per-sec",
            "1048576",
            "--requests-per-sec",
            "100",
        ],
    );
    assert!(set.contains("produce 1048576/s bytes"), "{set}");
    ok(
        addr,
        &["quota", "set", "--default", "--fetch-bytes-per-sec", "5000"],
    );
    ok(
        addr,
        &[
            "quota",
            "set",
            "--principal",
            "User:bob",
            "--requests-per-sec",
            "7",
        ],
    );
    let bad = fails(
        addr,
        &[
            "quota",
            "set",
            "--principal",
            "bob",
            "--requests-per-sec",
            "7",
        ],
    );
    assert!(bad.contains("INVALID_REQUEST"), "{bad}");
    let no_rate = fails(addr, &["quota", "set", "--principal", "User:bob"]);
    assert!(no_rate.contains("required"), "{no_rate}");

    let list = ok(addr, &["quota", "list"]);
    assert!(
        list.contains("<default> produce unlimited bytes, fetch 5000/s bytes, unlimited requests"),
        "{list}"
    );
    assert!(
        list.contains("User:alice produce 1048576/s bytes, fetch unlimited bytes, 100/s requests"),
        "{list}"
    );
    ok(addr, &["quota", "remove", "--principal", "User:bob"]);
    let json: serde_json::Value =
        serde_json::from_str(&ok(addr, &["quota", "list", "--json"])).unwrap();
    let principals: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["principal"].as_str().unwrap())
        .collect();
    assert_eq!(principals, ["<default>", "User:alice"]);
}

/// What `users`, `acls` and `quotas` left, as the lists show it.
fn state(addr: &str) -> (String, String, String) {
    (
        ok(addr, &["user", "list"]),
        ok(addr, &["acl", "list"]),
        ok(addr, &["quota", "list"]),
    )
}

#[test]
fn a_standalone_server_keeps_users_acls_and_quotas_across_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = Server::start(&data);
    users(&server.addr, tmp.path());
    acls(&server.addr);
    quotas(&server.addr);
    let before = state(&server.addr);
    assert!(
        before.0.contains("alice") && before.1.contains("pay.") && before.2.contains("User:alice")
    );

    server.kill9();
    let server = Server::start(&data);
    assert_eq!(state(&server.addr), before);
    let alice = verifies(
        &server.addr,
        "alice",
        ScramMechanism::Sha512,
        "alice-secret-2",
    );
    assert_ne!(alice, Some(false), "alice's verifier survives");
}

#[test]
fn a_cluster_broker_forwards_to_the_meta_node_and_both_answer() {
    let cluster = Cluster::start(1);
    let (broker, meta) = (cluster.addr(1).to_string(), cluster.meta.clone());
    let tmp = tempfile::tempdir().unwrap();
    users(&broker, tmp.path());
    acls(&broker);
    quotas(&broker);
    // The MetaServer node holds what the broker forwarded, and takes changes itself.
    assert_eq!(state(&meta), state(&broker));
    ok(&meta, &["user", "create", "erin", "--new-password", "e"]);
    ok(
        &meta,
        &[
            "acl",
            "add",
            "--principal",
            "User:erin",
            "--topic",
            "t",
            "--operation",
            "describe",
        ],
    );
    let again = fails(&meta, &["user", "create", "erin", "--new-password", "e"]);
    assert!(again.contains("USER_ALREADY_EXISTS"), "{again}");
    wait_for("the broker's image to show erin", || {
        ok(&broker, &["user", "list"]).contains("erin")
            && ok(&broker, &["acl", "list", "--principal", "User:erin"]).contains("DESCRIBE")
    });
    let (text, _) = meta_read(&meta);
    assert!(!text.contains("alice-secret"), "MetaRead shows a password");
    assert_list_users_has_no_keys(&meta, &node_image(&meta));
}

/// Whether admin's verifiers (both mechanisms) take `password` (`None`: hidden, see
/// [`verifies`]).
fn admin_verifies(addr: &str, password: &str) -> Option<bool> {
    let sha256 = verifies(addr, "admin", ScramMechanism::Sha256, password)?;
    Some(sha256 && verifies(addr, "admin", ScramMechanism::Sha512, password)?)
}

/// Whether user `admin` is listed with both mechanisms.
fn admin_listed(addr: &str) -> bool {
    run(addr, &["user", "list"]).status.success()
        && ok(addr, &["user", "list"])
            .contains("admin SCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512")
}

#[test]
fn admin_is_bootstrapped_once_and_a_later_password_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let first = [("TINYMQ_ADMIN_PASSWORD", "first-admin-pw")];
    let mut server = Server::start_with_env(&data, &[], &first);
    wait_for("admin to be created", || admin_listed(&server.addr));
    assert_ne!(admin_verifies(&server.addr, "first-admin-pw"), Some(false));
    server.terminate();

    let file = tmp.path().join("admin.pw");
    std::fs::write(&file, "second-admin-pw\n").unwrap();
    let flags = ["--admin-password-file", file.to_str().unwrap()];
    let second = [("TINYMQ_ADMIN_PASSWORD", "third-admin-pw")];
    let server = Server::start_with_env(&data, &flags, &second);
    // The node decides at its first look at the image (every 100 ms); give it ample time.
    // Where verifiers are hidden, the login test below checks the same by logging in.
    for _ in 0..20 {
        // Not a wait: the admin must stay the same for the whole period, not just once.
        std::thread::sleep(Duration::from_millis(100));
        let first = admin_verifies(&server.addr, "first-admin-pw");
        assert_ne!(first, Some(false), "admin was replaced");
    }
    assert_eq!(ok(&server.addr, &["user", "list"]).lines().count(), 1);
}

#[test]
fn a_meta_node_bootstraps_admin_from_its_password_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("admin.pw");
    std::fs::write(&file, "meta-admin-pw").unwrap();
    let addrs = vec![format!("127.0.0.1:{}", common::free_port())];
    let _meta = common::start_with(
        1,
        &addrs,
        tmp.path(),
        &["--admin-password-file", file.to_str().unwrap()],
    );
    wait_for("admin on the MetaServer node", || admin_listed(&addrs[0]));
    assert_ne!(admin_verifies(&addrs[0], "meta-admin-pw"), Some(false));
    let broker_flag = fails(
        &addrs[0],
        &[
            "broker",
            "--id",
            "1",
            "--meta",
            &addrs[0],
            "--admin-password-file",
            "x",
        ],
    );
    assert!(
        broker_flag.contains("brokers keep no users"),
        "{broker_flag}"
    );
}

#[test]
fn the_documented_create_acls_bytes_are_what_the_protocol_encodes() {
    let request = m::CreateAclsRequest {
        acls: vec![m::Acl {
            principal: "User:a".into(),
            resource_type: m::ResourceType::Topic.into(),
            resource_name: "t".into(),
            pattern_type: m::PatternType::Literal.into(),
            operation: m::AclOperation::Read.into(),
            permission: m::AclPermission::Allow.into(),
        }],
    };
    let doc = "0a 0f 0a 06 55 73 65 72 3a 61 10 01 1a 01 74 28 01";
    let bytes: Vec<u8> = doc
        .split(' ')
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    assert_eq!(request.encode_to_vec(), bytes);
    let delete = m::DeleteUserRequest { name: "bob".into() };
    assert_eq!(delete.encode_to_vec(), [0x0a, 0x03, 0x62, 0x6f, 0x62]);
    assert_eq!(tinymq_protocol::OpCode::CreateAcls.code(), 0x1d);
    assert_eq!(tinymq_protocol::OpCode::DeleteUser.code(), 0x1b);
}

#[test]
fn a_meta_follower_forwards_changes_and_lists_them_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", common::free_port()))
        .collect();
    let _nodes: Vec<_> = (1..=3)
        .map(|id| common::start(id, &addrs, tmp.path()))
        .collect();
    let leader = common::leader(&addrs[0], None);
    let follower = &addrs[if leader == 1 { 1 } else { 0 }];
    ok(
        follower,
        &["user", "create", "frank", "--new-password", "f"],
    );
    assert!(
        ok(follower, &["user", "list"]).contains("frank"),
        "the follower lists what it forwarded"
    );
    ok(
        follower,
        &[
            "quota",
            "set",
            "--principal",
            "User:frank",
            "--requests-per-sec",
            "3",
        ],
    );
    assert!(ok(follower, &["quota", "list"]).contains("User:frank"));
    let removed = ok(follower, &["acl", "remove", "--principal", "User:frank"]);
    assert_eq!(removed.trim(), "no ACL matched");
}

/// Runs a tool as `user` (SCRAM login) against `addr`.
fn as_user(addr: &str, user: &str, password: &str, args: &[&str]) -> Output {
    std::process::Command::new(common::BIN)
        .args(args)
        .env("TINYMQ_BOOTSTRAP", addr)
        .env("TINYMQ_USER", user)
        .env("TINYMQ_PASSWORD", password)
        .output()
        .expect("run tinymq")
}

/// Whether `user` can log in with `password` (`topic list` needs no permission but login).
fn logs_in(addr: &str, user: &str, password: &str) -> bool {
    as_user(addr, user, password, &["topic", "list"])
        .status
        .success()
}

#[test]
fn the_bootstrapped_admin_logs_in_and_manages_users_with_authentication_on() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let env = [("TINYMQ_ADMIN_PASSWORD", "first-admin-pw")];
    let mut server = Server::start_with_env(&data, &["--auth", "scram"], &env);
    let addr = server.addr.clone();
    wait_for("admin to log in", || {
        logs_in(&addr, "admin", "first-admin-pw")
    });
    assert!(!logs_in(&addr, "admin", "wrong"));
    let anonymous = run(&addr, &["user", "list"]);
    assert!(
        !anonymous.status.success(),
        "a tool without a login is refused"
    );

    let admin = |args: &[&str]| {
        let out = as_user(&addr, "admin", "first-admin-pw", args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    admin(&["user", "create", "alice", "--new-password", "alice-1"]);
    assert!(logs_in(&addr, "alice", "alice-1"));
    admin(&[
        "user",
        "passwd",
        "alice",
        "--new-password",
        "alice-2",
        "--mechanism",
        "scram-sha-256",
    ]);
    assert!(logs_in(&addr, "alice", "alice-2") && !logs_in(&addr, "alice", "alice-1"));
    let denied = as_user(
        &addr,
        "alice",
        "alice-2",
        &["user", "create", "mallory", "--new-password", "m"],
    );
    assert!(String::from_utf8_lossy(&denied.stderr).contains("AUTHORIZATION_FAILED"));
    assert!(admin(&["user", "list"]).contains("alice SCRAM-SHA-256 (8192 iterations)"));
    server.terminate();

    // Another password at the next start changes nothing.
    let env = [("TINYMQ_ADMIN_PASSWORD", "second-admin-pw")];
    let server = Server::start_with_env(&data, &["--auth", "scram"], &env);
    let addr = server.addr.clone();
    wait_for("admin to log in again", || {
        logs_in(&addr, "admin", "first-admin-pw")
    });
    // A few tries only: past `login_failures_per_ip_max` (10 a minute) failed logins, this
    // address would be locked out and alice's good login below refused too.
    for _ in 0..3 {
        // Not a wait: the password must stay the same over the period, not just once.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !logs_in(&addr, "admin", "second-admin-pw"),
            "admin's password was replaced"
        );
    }
    assert!(logs_in(&addr, "alice", "alice-2"));
}
