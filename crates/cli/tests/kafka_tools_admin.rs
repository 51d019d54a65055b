//! Apache Kafka's own administration tools (the released jars in `.tools/apache-kafka/libs`,
//! installed by `scripts/install-kafka-tools.sh`), unchanged, against real tinymq processes,
//! for the APIs that have no native request of the same shape: `kafka-configs` on users (SCRAM
//! credentials and quotas, over a SASL/SCRAM login), `kafka-log-dirs`, `kafka-reassign-
//! partitions` and `kafka-leader-election` (on three brokers). Each test checks what the tool
//! printed and what tinymq's own CLI then sees.

mod common;
mod kafka_clients;

use std::path::Path;
use std::time::Duration;

use common::cluster::describe;
use common::kafka::{KafkaServer, Launch};
use kafka_clients::{kafka_tool_at, run, run_ok, CONFIGS, PRODUCER, TOPICS};
use serde_json::Value;

const LOG_DIRS: &str = "org.apache.kafka.tools.LogDirsCommand";
const REASSIGN: &str = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
const ELECTION: &str = "org.apache.kafka.tools.LeaderElectionCommand";

const ADMIN_PASSWORD: &str = "admin-secret-1";

/// A client properties file that logs in with SCRAM as `user`.
fn login_config(dir: &Path, user: &str, password: &str, mechanism: &str) -> String {
    let path = dir.join(format!("{user}-{mechanism}.properties"));
    let text = format!(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"{user}\" password=\"{password}\";\n"
    );
    std::fs::write(&path, text).expect("write a client config");
    path.display().to_string()
}

/// `kafka-configs` with a login.
fn configs_command(server: &KafkaServer, login: &str, args: &[&str]) -> std::process::Command {
    let mut command = kafka_tool_at(&server.kafka, CONFIGS, &["--command-config", login]);
    command.args(args);
    command
}

/// `kafka-configs` with a login: its output, or a failure with what it printed.
fn configs(server: &KafkaServer, login: &str, args: &[&str]) -> String {
    run_ok(configs_command(server, login, args), b"")
}

/// `kafka-configs --alter` with a login that must fail, printing `why`.
fn configs_refused(server: &KafkaServer, login: &str, args: &[&str], why: &str) {
    let refused = run(configs_command(server, login, args), b"");
    assert!(
        !refused.status.success() && refused.printed().contains(why),
        "{}",
        refused.printed()
    );
}

/// `kafka-configs --describe` of user `name` (`None`: the default user).
fn describe_user(server: &KafkaServer, login: &str, name: Option<&str>) -> String {
    let mut args = vec!["--describe", "--entity-type", "users"];
    match name {
        Some(name) => args.extend(["--entity-name", name]),
        None => args.push("--entity-default"),
    }
    configs(server, login, &args)
}

/// kafka-configs on users: SCRAM credentials and quotas created, described, used to log in and
/// removed one mechanism at a time; the default user's quota; refusals for a user who is not a
/// super user and for a client-id quota.
#[test]
fn kafka_configs_manages_scram_credentials_and_user_quotas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Launch::server()
        .args(&["--auth", "scram"])
        .admin_password(ADMIN_PASSWORD)
        .start();
    let admin = login_config(dir.path(), "admin", ADMIN_PASSWORD, "SCRAM-SHA-256");
    // The first super user logs in once the server has created it.
    let ready = common::retry(100, Duration::from_millis(200), || {
        let mut command = kafka_tool_at(&server.kafka, TOPICS, &["--command-config", &admin]);
        command.arg("--list");
        run(command, b"").status.success().then_some(())
    });
    assert!(ready.is_some(), "the admin login never succeeded");
    // Kafka's tool sends credentials and quotas of users in separate requests, and refuses
    // to alter both at once.
    // `--add-config` or `--delete-config` of bob's `config`.
    let alter_bob = |action: &str, config: &str| {
        let args = [
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            action,
            config,
        ];
        configs(&server, &admin, &args)
    };
    let added = alter_bob(
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=bob-secret-1],SCRAM-SHA-512=[password=bob-secret-2]",
    );
    assert!(added.contains("Completed updating config"), "{added}");
    alter_bob(
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    );

    let described = describe_user(&server, &admin, Some("bob"));
    for expected in [
        "SCRAM-SHA-256=iterations=8192",
        "SCRAM-SHA-512=iterations=4096",
        "producer_byte_rate=1048576",
        "consumer_byte_rate=2097152",
    ] {
        assert!(described.contains(expected), "{expected} in {described}");
    }
    let users = server.run_tool(&["user", "list"], b"");
    let bob = users
        .lines()
        .find(|l| l.contains("bob"))
        .unwrap_or_default();
    assert!(
        bob.contains("SCRAM-SHA-256") && bob.contains("SCRAM-SHA-512"),
        "{users}"
    );
    let quotas = server.run_tool(&["quota", "list"], b"");
    assert!(
        quotas.contains("User:bob") && quotas.contains("1048576") && quotas.contains("2097152"),
        "{quotas}"
    );

    // Both credentials log in (a Kafka client salted the passwords; tinymq derived the keys).
    for (mechanism, password) in [
        ("SCRAM-SHA-256", "bob-secret-1"),
        ("SCRAM-SHA-512", "bob-secret-2"),
    ] {
        let bob = login_config(dir.path(), "bob", password, mechanism);
        let listed = kafka_tool_at(&server.kafka, TOPICS, &["--command-config", &bob, "--list"]);
        run_ok(listed, b"");
    }
    let wrong = login_config(dir.path(), "bob", "bob-secret-2", "SCRAM-SHA-256");
    let refused = run(
        kafka_tool_at(
            &server.kafka,
            TOPICS,
            &["--command-config", &wrong, "--list"],
        ),
        b"",
    );
    assert!(!refused.status.success(), "a wrong password logged in");

    // One mechanism and one rate removed; the others stay.
    alter_bob("--delete-config", "SCRAM-SHA-256");
    alter_bob("--delete-config", "producer_byte_rate");
    let described = describe_user(&server, &admin, Some("bob"));
    assert!(!described.contains("SCRAM-SHA-256"), "{described}");
    assert!(
        described.contains("SCRAM-SHA-512=iterations=4096"),
        "{described}"
    );
    assert!(!described.contains("producer_byte_rate"), "{described}");
    assert!(
        described.contains("consumer_byte_rate=2097152"),
        "{described}"
    );

    // The default user's quota.
    configs(
        &server,
        &admin,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-default",
            "--add-config",
            "consumer_byte_rate=4096",
        ],
    );
    let described = describe_user(&server, &admin, None);
    assert!(described.contains("consumer_byte_rate=4096"), "{described}");
    let quotas = server.run_tool(&["quota", "list"], b"");
    assert!(
        quotas.contains("<default>") && quotas.contains("4096"),
        "{quotas}"
    );

    // bob is no super user: he may not change users.
    let bob = login_config(dir.path(), "bob", "bob-secret-2", "SCRAM-SHA-512");
    let mallory = [
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "mallory",
        "--add-config",
        "SCRAM-SHA-256=[password=mallory-secret-1]",
    ];
    configs_refused(&server, &bob, &mallory, "ClusterAuthorizationException");
    assert!(
        !server.run_tool(&["user", "list"], b"").contains("mallory"),
        "a refused alteration created a user"
    );

    // tinymq's quotas are per user: a client-id quota is refused, saying so.
    let client = [
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--add-config",
        "producer_byte_rate=1024",
    ];
    configs_refused(&server, &admin, &client, "per user");

    // The last credential removed: the user is gone.
    alter_bob("--delete-config", "SCRAM-SHA-512");
    let users = server.run_tool(&["user", "list"], b"");
    assert!(!users.contains("bob"), "{users}");
}

/// kafka-log-dirs: the server's data directory and a size for every partition replica.
#[test]
fn kafka_log_dirs_describes_each_replica_in_the_data_directory() {
    let server = KafkaServer::start();
    server.create_topic("sized", 2);
    let lines: String = (0..500).map(|i| format!("line-{i:04}\n")).collect();
    let producer = kafka_tool_at(
        &server.kafka,
        PRODUCER,
        &["--topic", "sized", "--producer-property", "acks=all"],
    );
    run_ok(producer, lines.as_bytes());
    let printed = run_ok(
        kafka_tool_at(
            &server.kafka,
            LOG_DIRS,
            &["--describe", "--topic-list", "sized"],
        ),
        b"",
    );
    let json: Value = printed
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON in {printed}"));
    let dirs = &json["brokers"][0]["logDirs"];
    let dir = &dirs[0];
    let data = std::fs::canonicalize(server.data_dir()).expect("the data dir");
    assert_eq!(dir["logDir"], data.display().to_string(), "{json}");
    let partitions = dir["partitions"].as_array().expect("partitions");
    let mut names: Vec<&str> = partitions
        .iter()
        .map(|p| p["partition"].as_str().unwrap_or_default())
        .collect();
    names.sort();
    assert_eq!(names, ["sized-0", "sized-1"], "{json}");
    let total: u64 = partitions
        .iter()
        .map(|p| p["size"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(total, server.stored_log_bytes("sized"), "{json}");
    assert!(total > 500 * 9, "{json}");
}

/// Three brokers with Kafka listeners and one MetaServer.
struct ThreeBrokers {
    _meta_dir: tempfile::TempDir,
    _meta: common::MetaProc,
    brokers: Vec<KafkaServer>,
}

impl ThreeBrokers {
    fn start() -> ThreeBrokers {
        let meta_dir = tempfile::tempdir().expect("tempdir");
        let meta_addrs = vec![format!("127.0.0.1:{}", common::free_port())];
        let meta = common::start(1, &meta_addrs, meta_dir.path());
        let brokers = (1..=3)
            .map(|id| KafkaServer::broker(id, &meta_addrs[0]))
            .collect();
        ThreeBrokers {
            _meta_dir: meta_dir,
            _meta: meta,
            brokers,
        }
    }

    fn kafka(&self) -> &str {
        &self.brokers[0].kafka
    }

    fn native(&self) -> &str {
        &self.brokers[0].native
    }
}

/// kafka-reassign-partitions moves a partition's replicas (execute, list, verify; a cancel
/// with nothing moving finds nothing to cancel and moves nothing), and kafka-leader-election
/// hands leadership to the preferred (first) replica; bad requests are refused by name. (A
/// cancel of a move under way is the MetaServer's `CancelReassignment`, tested in
/// tinymq-meta.)
#[test]
fn kafka_reassign_partitions_and_leader_election_move_replicas_and_leaders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = ThreeBrokers::start();
    let created = common::retry(100, Duration::from_millis(200), || {
        let out = cluster.brokers[0]
            .tool(&[
                "topic",
                "create",
                "moved",
                "--partitions",
                "2",
                "--replicas",
                "2",
            ])
            .output()
            .expect("run tinymq");
        out.status.success().then_some(())
    });
    assert!(created.is_some(), "the topic was never created");
    common::cluster::wait_all_in_sync("moved", cluster.native());
    let lines: String = (0..200).map(|i| format!("rec-{i:03}\n")).collect();
    let producer = kafka_tool_at(
        cluster.kafka(),
        PRODUCER,
        &["--topic", "moved", "--producer-property", "acks=all"],
    );
    run_ok(producer, lines.as_bytes());

    // Partition 0 moves onto the broker that did not hold it, that broker first.
    let before = describe("moved", cluster.native());
    let held = &before[0].replicas;
    let newcomer = (1..=3).find(|b| !held.contains(b)).expect("a third broker");
    let kept = held[1];
    let target = [newcomer, kept];
    let plan = dir.path().join("plan.json");
    let plan_json = format!(
        r#"{{"version":1,"partitions":[{{"topic":"moved","partition":0,"replicas":[{newcomer},{kept}]}}]}}"#
    );
    std::fs::write(&plan, plan_json).expect("write the plan");
    let plan = plan.display().to_string();
    let reassign = |action: &str| {
        let args = ["--reassignment-json-file", plan.as_str(), action];
        run(kafka_tool_at(cluster.kafka(), REASSIGN, &args), b"")
    };
    let executed = reassign("--execute");
    assert!(executed.status.success(), "{}", executed.printed());
    let executed = executed.stdout;
    assert!(
        executed.contains("Successfully started partition reassignment"),
        "{executed}"
    );
    let verified = common::retry(300, Duration::from_millis(200), || {
        // Once complete, the tool also clears Kafka's throttles: it must succeed.
        let out = reassign("--verify");
        (out.status.success()
            && out
                .stdout
                .contains("Reassignment of partition moved-0 is completed"))
        .then_some(out.stdout)
    })
    .expect("the reassignment never completed");
    assert!(!verified.contains("still in progress"), "{verified}");
    let after = describe("moved", cluster.native());
    assert_eq!(after[0].replicas, target, "{after:?}");
    assert_eq!(after[1].replicas, before[1].replicas, "partition 1 moved");
    let listed = run_ok(kafka_tool_at(cluster.kafka(), REASSIGN, &["--list"]), b"");
    assert!(
        listed.contains("No partition reassignments found"),
        "{listed}"
    );
    // Nothing is moving now: the tool finds no active reassignment to cancel (from
    // ListPartitionReassignments), clears Kafka's throttles (deletions of configs tinymq does
    // not have: nothing changes) and succeeds; nothing moves.
    let cancel = reassign("--cancel");
    assert!(
        cancel.status.success()
            && cancel
                .stdout
                .contains("None of the specified partition reassignments are active"),
        "{}",
        cancel.printed()
    );
    assert_eq!(describe("moved", cluster.native())[0].replicas, target);

    // The preferred replica (the newcomer) leads after an election (the MetaServer may have
    // elected it on its own first: then the tool says no election was needed).
    // One partition's election with Kafka's tool.
    let elect = |kind: &str, topic: &str, partition: &str| {
        let args = [
            "--election-type",
            kind,
            "--topic",
            topic,
            "--partition",
            partition,
        ];
        run(kafka_tool_at(cluster.kafka(), ELECTION, &args), b"")
    };
    let elected = elect("preferred", "moved", "0");
    assert!(elected.status.success(), "{}", elected.printed());
    let elected = elected.stdout;
    // Every partition: those that need no election are left out of the answer, as in Kafka.
    run_ok(
        kafka_tool_at(
            cluster.kafka(),
            ELECTION,
            &["--election-type", "preferred", "--all-topic-partitions"],
        ),
        b"",
    );
    assert!(
        elected
            .contains("Successfully completed leader election (PREFERRED) for partitions moved-0")
            || elected.contains("Valid replica already elected for partitions"),
        "{elected}"
    );
    let led = common::retry(100, Duration::from_millis(200), || {
        let now = describe("moved", cluster.native());
        (now[0].leader == newcomer).then_some(())
    });
    assert!(
        led.is_some(),
        "the preferred replica does not lead: {elected}"
    );
    let unknown = elect("preferred", "nope", "0");
    assert!(
        !unknown.status.success() && unknown.printed().contains("nope-0"),
        "{}",
        unknown.printed()
    );
    let unclean = elect("unclean", "moved", "1");
    assert!(
        !unclean.status.success() && unclean.printed().contains("unclean_leader_election"),
        "{}",
        unclean.printed()
    );

    // A move to a broker that does not exist is refused, and nothing moves.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"version":1,"partitions":[{"topic":"moved","partition":1,"replicas":[1,9]}]}"#,
    )
    .expect("write the plan");
    let refused = run(
        kafka_tool_at(
            cluster.kafka(),
            REASSIGN,
            &[
                "--reassignment-json-file",
                &bad.display().to_string(),
                "--execute",
            ],
        ),
        b"",
    );
    assert!(!refused.status.success(), "{}", refused.printed());
    assert_eq!(
        describe("moved", cluster.native())[1].replicas,
        before[1].replicas
    );
}
