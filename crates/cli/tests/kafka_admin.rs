//! The Kafka listener's metadata, administration and SASL APIs against a real `tinymq server
//! --kafka-listen`, spoken with kafka-protocol's client-side encoders over a TcpStream:
//! Metadata (all, none, named, unknown, auto-created), CreateTopics, CreatePartitions,
//! DeleteTopics, DescribeConfigs, DescribeCluster, and SCRAM logins against users made with
//! `tinymq user create` (a wrong password refused, requests before logging in closed), in
//! SaslAuthenticate requests and as the raw tokens that follow a SaslHandshake v0.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use common::kafka::{topic_config_sources, topic_configs, Kafka, KafkaServer, Launch};

fn name(text: &str) -> TopicName {
    TopicName(StrBytes::from_string(text.to_string()))
}

/// Metadata of the topics named (`None`: every topic).
fn metadata_request(topics: Option<&[&str]>) -> MetadataRequest {
    let topics = topics.map(|names| {
        names
            .iter()
            .map(|n| MetadataRequestTopic::default().with_name(Some(name(n))))
            .collect()
    });
    MetadataRequest::default().with_topics(topics)
}

fn metadata_of(k: &mut Kafka, version: i16, topics: Option<&[&str]>) -> MetadataResponse {
    k.call(version, &metadata_request(topics))
}

fn topic<'a>(
    response: &'a MetadataResponse,
    wanted: &str,
) -> &'a metadata_response::MetadataResponseTopic {
    response
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == wanted))
        .unwrap_or_else(|| panic!("{wanted} not in {response:?}"))
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;

#[test]
fn metadata_names_the_kafka_listener_and_every_partition() {
    let server = KafkaServer::start();
    server.run_tool(&["topic", "create", "orders", "--partitions", "3"], b"");
    let (host, port) = server.kafka.rsplit_once(':').expect("host:port");
    let mut k = server.connect();
    for version in [1, 4, 9, 12] {
        let all = metadata_of(&mut k, version, None);
        assert_eq!(all.brokers.len(), 1, "v{version}: {all:?}");
        let broker = &all.brokers[0];
        assert_eq!(broker.host.as_str(), host);
        assert_eq!(broker.port.to_string(), port);
        assert_eq!(all.controller_id, broker.node_id);
        let orders = topic(&all, "orders");
        assert_eq!(orders.error_code, 0);
        assert!(!orders.is_internal);
        let mut indexes: Vec<i32> = orders
            .partitions
            .iter()
            .map(|p| p.partition_index)
            .collect();
        indexes.sort();
        assert_eq!(indexes, [0, 1, 2]);
        for p in &orders.partitions {
            assert_eq!(
                (p.error_code, p.leader_id),
                (0, broker.node_id),
                "v{version}"
            );
            assert_eq!(p.replica_nodes, [broker.node_id]);
            assert_eq!(p.isr_nodes, [broker.node_id]);
        }
        if version >= 2 {
            assert!(all.cluster_id.as_ref().is_some_and(|c| !c.is_empty()));
        }
    }
    // An empty list asks for no topic at all (null is every topic).
    let none = metadata_of(&mut k, 12, Some(&[]));
    assert!(none.topics.is_empty(), "{none:?}");
    assert_eq!(none.brokers.len(), 1);
    // Unknown topics are not created unless the listener is told to.
    let request = metadata_request(Some(&["nope"])).with_allow_auto_topic_creation(true);
    let unknown = k.call(12, &request);
    assert_eq!(
        topic(&unknown, "nope").error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert!(!server.run_tool(&["topic", "list"], b"").contains("nope"));
    // By id (v10+): topics have no ids here. Decoded from the wire form (the id, a null
    // name, no tagged fields), as kafka-protocol's Uuid type is not a dependency here.
    let mut wire = vec![9u8; 16];
    wire.extend([0, 0]);
    let by_id = MetadataRequestTopic::decode(&mut bytes::Bytes::from(wire), 12).expect("by id");
    let response = k.call(
        12,
        &MetadataRequest::default().with_topics(Some(vec![by_id])),
    );
    assert_eq!(response.topics.len(), 1);
    assert_eq!(response.topics[0].error_code, UNKNOWN_TOPIC_ID);
    assert!(response.topics[0].name.is_none());
}

#[test]
fn metadata_creates_topics_when_auto_creation_is_on() {
    let server = KafkaServer::start_with(&["--kafka-auto-create-topics"]);
    let mut k = server.connect();
    // A client that does not ask for creation does not get it.
    let asked_not = metadata_request(Some(&["fresh"])).with_allow_auto_topic_creation(false);
    let response = k.call(9, &asked_not);
    assert_eq!(
        topic(&response, "fresh").error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    let asked = asked_not.with_allow_auto_topic_creation(true);
    let response = k.call(9, &asked);
    let fresh = topic(&response, "fresh");
    assert_eq!(fresh.error_code, 0, "{response:?}");
    assert_eq!(fresh.partitions.len(), 1);
    assert!(server.run_tool(&["topic", "list"], b"").contains("fresh"));
}

const INVALID_CONFIG: i16 = 40;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const UNKNOWN_TOPIC_ID: i16 = 100;

fn creatable(
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> create_topics_request::CreatableTopic {
    create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(-1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        )
}

fn create_topics(
    k: &mut Kafka,
    topics: Vec<create_topics_request::CreatableTopic>,
    validate_only: bool,
) -> CreateTopicsResponse {
    let request = CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only);
    k.call(7, &request)
}

fn result<'a>(
    response: &'a CreateTopicsResponse,
    topic: &str,
) -> &'a create_topics_response::CreatableTopicResult {
    response
        .topics
        .iter()
        .find(|t| t.name.0.as_str() == topic)
        .unwrap_or_else(|| panic!("{topic} not in {response:?}"))
}

fn config<'a>(configs: &'a [(String, String)], key: &str) -> &'a str {
    configs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{key} not in {configs:?}"))
}

#[test]
fn topics_are_created_described_grown_and_deleted_the_kafka_way() {
    let server = KafkaServer::start();
    let mut k = server.connect();

    // Validation only: checked, not created.
    let checked = create_topics(&mut k, vec![creatable("events", 2, &[])], true);
    assert_eq!(result(&checked, "events").error_code, 0, "{checked:?}");
    assert!(!server.run_tool(&["topic", "list"], b"").contains("events"));

    let created = create_topics(
        &mut k,
        vec![
            creatable(
                "events",
                2,
                &[
                    ("retention.ms", "60000"),
                    ("max.message.bytes", "4096"),
                    ("cleanup.policy", "delete"),
                ],
            ),
            creatable("defaults", -1, &[]),
            creatable(
                "compacted",
                1,
                &[
                    ("cleanup.policy", "compact"),
                    ("min.cleanable.dirty.ratio", "0.1"),
                    ("delete.retention.ms", "0"),
                ],
            ),
            creatable(
                "odd",
                1,
                &[("cleanup.policy", "shred"), ("flux.capacitor", "1.21")],
            ),
        ],
        false,
    );
    let events = result(&created, "events");
    assert_eq!(events.error_code, 0, "{created:?}");
    assert_eq!((events.num_partitions, events.replication_factor), (2, 1));
    let returned = events.configs.as_ref().expect("configs (v5+)");
    assert!(returned
        .iter()
        .any(|c| c.name.as_str() == "retention.ms" && c.value.as_deref() == Some("60000")));
    assert_eq!(result(&created, "defaults").error_code, 0);
    let compacted = result(&created, "compacted");
    assert_eq!(compacted.error_code, 0, "{created:?}");
    let returned = compacted.configs.as_ref().expect("configs (v5+)");
    assert!(returned
        .iter()
        .any(|c| c.name.as_str() == "cleanup.policy" && c.value.as_deref() == Some("compact")));
    let odd = result(&created, "odd");
    assert_eq!(odd.error_code, INVALID_CONFIG);
    let why = odd.error_message.as_deref().unwrap_or_default();
    assert!(
        why.contains("flux.capacitor") && why.contains("cleanup.policy=shred"),
        "{why}"
    );
    let listed = server.run_tool(&["topic", "list"], b"");
    assert!(
        listed.contains("events") && listed.contains("defaults") && !listed.contains("odd"),
        "{listed}"
    );

    // Again: already there. Manual assignments: refused, saying so.
    let again = create_topics(&mut k, vec![creatable("events", 2, &[])], false);
    assert_eq!(result(&again, "events").error_code, TOPIC_ALREADY_EXISTS);
    let assigned = creatable("placed", -1, &[]).with_assignments(vec![
        create_topics_request::CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1)]),
    ]);
    let refused = create_topics(&mut k, vec![assigned], false);
    assert_eq!(
        result(&refused, "placed").error_code,
        INVALID_REPLICA_ASSIGNMENT
    );

    // Described under Kafka's names, as the native tool shows them.
    for version in [1, 4] {
        let (code, configs) = topic_configs(&mut k, version, "events");
        assert_eq!(code, 0);
        assert_eq!(config(&configs, "retention.ms"), "60000");
        assert_eq!(config(&configs, "max.message.bytes"), "4096");
        assert_eq!(config(&configs, "cleanup.policy"), "delete");
        assert!(configs.iter().any(|(k, _)| k == "tinymq.flush"));
    }
    // What the topic set is an override (DYNAMIC_TOPIC_CONFIG, 1); the rest reads as the
    // broker's default (DEFAULT_CONFIG, 5), so tools that copy overrides copy only those.
    let described = topic_config_sources(&mut k, 4, "events");
    let source = |key: &str| described.get(key).copied();
    assert_eq!(source("retention.ms"), Some(1), "{described:?}");
    assert_eq!(source("segment.bytes"), Some(5), "{described:?}");
    assert_eq!(source("cleanup.policy"), Some(5), "{described:?}");
    assert_eq!(
        source("min.cleanable.dirty.ratio"),
        Some(5),
        "{described:?}"
    );
    // A compacted topic: its compaction settings are overrides, the rest defaults.
    let (code, configs) = topic_configs(&mut k, 4, "compacted");
    assert_eq!(code, 0);
    for (key, value) in [
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0.1"),
        ("delete.retention.ms", "0"),
        ("min.compaction.lag.ms", "0"),
        ("max.compaction.lag.ms", "9223372036854775807"),
    ] {
        assert_eq!(config(&configs, key), value, "{configs:?}");
    }
    let described = topic_config_sources(&mut k, 4, "compacted");
    let source = |key: &str| described.get(key).copied();
    assert_eq!(source("cleanup.policy"), Some(1), "{described:?}");
    assert_eq!(source("delete.retention.ms"), Some(1), "{described:?}");
    assert_eq!(source("max.compaction.lag.ms"), Some(5), "{described:?}");
    let (missing, _) = topic_configs(&mut k, 4, "missing");
    assert_eq!(missing, UNKNOWN_TOPIC_OR_PARTITION);
    let broker = describe_configs_request::DescribeConfigsResource::default()
        .with_resource_type(4)
        .with_resource_name(StrBytes::from_static_str("1"))
        .with_configuration_keys(Some(vec![StrBytes::from_static_str("message.max.bytes")]));
    let described = k.call(
        4,
        &DescribeConfigsRequest::default().with_resources(vec![broker]),
    );
    let broker = &described.results[0];
    assert_eq!(broker.error_code, 0, "{described:?}");
    assert_eq!(broker.configs.len(), 1);
    assert_eq!(broker.configs[0].name.as_str(), "message.max.bytes");

    // Grown: validation only first, then for real; never shrunk.
    let grow = |count: i32, validate_only: bool| {
        CreatePartitionsRequest::default()
            .with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(name("events"))
                    .with_count(count)
                    .with_assignments(None),
            ])
            .with_timeout_ms(30_000)
            .with_validate_only(validate_only)
    };
    for (count, validate_only, expected) in [
        (5, true, 0),
        (5, false, 0),
        (3, false, INVALID_PARTITIONS),
        (5, true, INVALID_PARTITIONS),
    ] {
        let response = k.call(3, &grow(count, validate_only));
        assert_eq!(
            response.results[0].error_code, expected,
            "{count} {validate_only}: {response:?}"
        );
    }
    let meta = metadata_of(&mut k, 12, Some(&["events"]));
    assert_eq!(topic(&meta, "events").partitions.len(), 5);

    // Deleted by name (v1 and v6); by id: refused, naming why.
    let v1 = DeleteTopicsRequest::default()
        .with_topic_names(vec![name("defaults"), name("never")])
        .with_timeout_ms(30_000);
    let deleted = k.call(1, &v1);
    let code_of = |n: &str| {
        deleted
            .responses
            .iter()
            .find(|r| r.name.as_ref().is_some_and(|x| x.0.as_str() == n))
            .map(|r| r.error_code)
    };
    assert_eq!(code_of("defaults"), Some(0), "{deleted:?}");
    assert_eq!(code_of("never"), Some(UNKNOWN_TOPIC_OR_PARTITION));
    let v6 = DeleteTopicsRequest::default()
        .with_topics(vec![
            delete_topics_request::DeleteTopicState::default().with_name(Some(name("events"))),
            by_id_only(7),
        ])
        .with_timeout_ms(30_000);
    let deleted = k.call(6, &v6);
    assert_eq!(deleted.responses.len(), 2);
    assert_eq!(deleted.responses[0].error_code, 0, "{deleted:?}");
    assert_eq!(deleted.responses[1].error_code, UNKNOWN_TOPIC_ID);
    let listed = server.run_tool(&["topic", "list"], b"");
    assert!(
        !listed.contains("events") && !listed.contains("defaults"),
        "{listed}"
    );
}

/// A topic named by id only (v6): decoded from its wire form, as kafka-protocol's Uuid type
/// is not a dependency here. Null name (compact string length 0), the id, no tagged fields.
fn by_id_only(id_byte: u8) -> delete_topics_request::DeleteTopicState {
    let mut wire = vec![0u8];
    wire.extend_from_slice(&[id_byte; 16]);
    wire.push(0);
    let mut wire = bytes::Bytes::from(wire);
    delete_topics_request::DeleteTopicState::decode(&mut wire, 6).expect("a topic by id")
}

const ADMIN_PASSWORD: &str = "admin-secret-1";
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// A server with `--auth scram`, once its first super user can log in, and user `alice`.
fn scram_server() -> KafkaServer {
    let server = Launch::server()
        .args(&["--auth", "scram"])
        .admin_password(ADMIN_PASSWORD)
        .start();
    let ready = common::retry(100, Duration::from_millis(100), || {
        let out = server
            .tool(&[
                "user",
                "create",
                "alice",
                "--new-password",
                "alice-secret-1",
            ])
            .output()
            .expect("run tinymq");
        out.status.success().then_some(())
    });
    assert!(ready.is_some(), "user alice never created");
    server
}

/// SaslHandshake v1 and the SCRAM exchange in SaslAuthenticate; the error code of the
/// exchange's last answer (0: logged in, and the server's signature checked).
fn login(k: &mut Kafka, mechanism: tinymq_auth::ScramMechanism, user: &str, password: &str) -> i16 {
    let handshake = k.call(
        1,
        &SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism.name())),
    );
    assert_eq!(handshake.error_code, 0, "{handshake:?}");
    let mut scram = tinymq_auth::ScramClient::new(mechanism, user, password, None);
    let step = |k: &mut Kafka, bytes: Vec<u8>| {
        k.call(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(bytes.into()),
        )
    };
    let first = step(k, scram.first());
    assert_eq!(first.error_code, 0, "{first:?}");
    let client_final = scram.second(&first.auth_bytes).expect("server-first");
    let last = step(k, client_final);
    if last.error_code == 0 {
        scram
            .finish(&last.auth_bytes)
            .expect("the server proved it knows the verifier");
    }
    last.error_code
}

#[test]
fn scram_logins_on_the_kafka_port() {
    use tinymq_auth::ScramMechanism::{Sha256, Sha512};
    let server = scram_server();

    // Nothing but ApiVersions and SASL before logging in: Metadata closes the connection.
    let mut k = server.connect();
    let versions = k.call(3, &ApiVersionsRequest::default());
    assert_eq!(versions.error_code, 0);
    k.send(12, &MetadataRequest::default().with_topics(None));
    assert!(k.closed(), "Metadata before authenticating was answered");

    // The mechanisms offered: SCRAM only (PLAIN is not, tinymq keeps no passwords).
    let mut k = server.connect();
    let plain = k.call(
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    assert_eq!(plain.error_code, UNSUPPORTED_SASL_MECHANISM);
    let offered: Vec<String> = plain.mechanisms.iter().map(|m| m.to_string()).collect();
    assert_eq!(offered, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);

    // A user made with `tinymq user create`, both mechanisms; then requests are served.
    for mechanism in [Sha256, Sha512] {
        let mut k = server.connect();
        assert_eq!(
            login(&mut k, mechanism, "alice", "alice-secret-1"),
            0,
            "{mechanism:?}"
        );
        let metadata = metadata_of(&mut k, 12, None);
        assert_eq!(metadata.brokers.len(), 1, "{metadata:?}");
    }
    // The super user may create topics over Kafka.
    let mut k = server.connect();
    assert_eq!(login(&mut k, Sha512, "admin", ADMIN_PASSWORD), 0);
    let created = create_topics(&mut k, vec![creatable("secured", 1, &[])], false);
    assert_eq!(result(&created, "secured").error_code, 0, "{created:?}");

    // A wrong password and an unknown user: refused alike, and nothing else is served.
    for (user, password) in [("alice", "not-her-password"), ("nobody", "whatever")] {
        let mut k = server.connect();
        assert_eq!(
            login(&mut k, Sha256, user, password),
            SASL_AUTHENTICATION_FAILED
        );
        k.send(12, &MetadataRequest::default().with_topics(None));
        assert!(
            k.closed(),
            "{user}: Metadata after a failed login was answered"
        );
    }
}

/// One Kafka request framed by hand on a raw socket (the raw SASL tokens after SaslHandshake
/// v0 need the socket itself, which [`Kafka`] keeps to itself).
fn raw_request<R: Request>(stream: &mut TcpStream, version: i16, correlation_id: i32, request: &R) {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("raw-sasl")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, R::header_version(version))
        .expect("request header");
    request.encode(&mut body, version).expect("request body");
    write_raw_token(stream, &body);
}

/// The response to [`raw_request`], read whole.
fn raw_response<R: Request>(
    stream: &mut TcpStream,
    version: i16,
    correlation_id: i32,
) -> R::Response {
    let mut body = Bytes::from(read_raw_token(stream));
    let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
        .expect("response header");
    assert_eq!(header.correlation_id, correlation_id);
    let response = R::Response::decode(&mut body, version).expect("response body");
    assert!(body.is_empty(), "bytes left after the response");
    response
}

/// Kafka's framing with nothing inside but `bytes`: a 4-byte big-endian size, then the bytes.
fn write_raw_token(stream: &mut TcpStream, bytes: &[u8]) {
    let size = u32::try_from(bytes.len()).expect("small token");
    stream.write_all(&size.to_be_bytes()).expect("write size");
    stream.write_all(bytes).expect("write token");
}

fn read_raw_token(stream: &mut TcpStream) -> Vec<u8> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("token size");
    let size = u32::from_be_bytes(size) as usize;
    assert!(size <= 1 << 20, "a token of {size} bytes");
    let mut bytes = vec![0u8; size];
    stream.read_exact(&mut bytes).expect("token");
    bytes
}

/// SaslHandshake v0, as older clients send it: the SCRAM messages then travel as raw tokens,
/// without request headers, and a wrong password closes the connection (the raw form has no
/// error field).
#[test]
fn scram_with_raw_tokens_after_sasl_handshake_v0() {
    use tinymq_auth::ScramMechanism::{Sha256, Sha512};
    let mut server = scram_server();
    for mechanism in [Sha256, Sha512] {
        let mut stream = server.connect_raw();
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism.name()));
        raw_request(&mut stream, 0, 1, &handshake);
        let answer = raw_response::<SaslHandshakeRequest>(&mut stream, 0, 1);
        assert_eq!(answer.error_code, 0, "{mechanism:?}: {answer:?}");

        let mut scram = tinymq_auth::ScramClient::new(mechanism, "alice", "alice-secret-1", None);
        write_raw_token(&mut stream, &scram.first());
        let server_first = read_raw_token(&mut stream);
        let client_final = scram.second(&server_first).expect("server-first");
        write_raw_token(&mut stream, &client_final);
        let server_final = read_raw_token(&mut stream);
        scram
            .finish(&server_final)
            .expect("the server proved it knows the verifier");

        // Logged in: the same connection is served ordinary requests.
        let metadata = MetadataRequest::default().with_topics(None);
        raw_request(&mut stream, 12, 2, &metadata);
        let answer = raw_response::<MetadataRequest>(&mut stream, 12, 2);
        assert_eq!(answer.brokers.len(), 1, "{mechanism:?}: {answer:?}");
    }

    // A wrong password: no server-final, the connection is closed.
    let mut stream = server.connect_raw();
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(Sha256.name()));
    raw_request(&mut stream, 0, 1, &handshake);
    assert_eq!(
        raw_response::<SaslHandshakeRequest>(&mut stream, 0, 1).error_code,
        0
    );
    let mut scram = tinymq_auth::ScramClient::new(Sha256, "alice", "not-her-password", None);
    write_raw_token(&mut stream, &scram.first());
    let server_first = read_raw_token(&mut stream);
    write_raw_token(
        &mut stream,
        &scram.second(&server_first).expect("server-first"),
    );
    assert!(
        common::closed_by_server(&mut stream),
        "a raw login with a wrong password was answered"
    );
}

#[test]
fn a_plain_kafka_client_on_a_tls_port_is_logged_and_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = common::tls::Ca::new(dir.path(), "ca");
    let node = ca.leaf("node");
    let log = dir.path().join("server.log");
    let tls = [
        "--tls-cert",
        node.cert.to_str().expect("path"),
        "--tls-key",
        node.key.to_str().expect("path"),
        "--tls-ca",
        ca.cert.to_str().expect("path"),
    ];
    let server = Launch::server().args(&tls).log_to(&log).start();
    let mut k = server.connect();
    k.send(3, &ApiVersionsRequest::default());
    assert!(
        k.closed(),
        "a plain Kafka request on the TLS port was answered"
    );
    let logged = common::retry(100, Duration::from_millis(100), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("plain Kafka client").then_some(text)
    });
    assert!(logged.is_some(), "no log line names the plain Kafka client");
}

/// In a cluster, each broker registers its Kafka address: any broker's Metadata names every
/// broker with a Kafka listener, and a partition led by one without is not offered.
#[test]
fn every_broker_registers_its_kafka_address() {
    let meta_dir = tempfile::tempdir().expect("tempdir");
    let meta_addrs = vec![format!("127.0.0.1:{}", common::free_port())];
    let _meta = common::start(1, &meta_addrs, meta_dir.path());
    let brokers = [
        KafkaServer::broker(1, &meta_addrs[0]),
        KafkaServer::broker(2, &meta_addrs[0]),
        Launch::broker(3, &meta_addrs[0]).without_kafka().start(),
    ];
    brokers[0].run_tool(
        &[
            "topic",
            "create",
            "spread",
            "--partitions",
            "6",
            "--replicas",
            "1",
        ],
        b"",
    );
    let leaders: Vec<u64> = common::retry(100, Duration::from_millis(100), || {
        let described = common::cluster::describe("spread", &brokers[0].native);
        (described.len() == 6 && described.iter().all(|p| p.leader != 0))
            .then(|| described.iter().map(|p| p.leader).collect())
    })
    .expect("every partition led");
    assert!(leaders.contains(&3), "broker 3 leads none of {leaders:?}");

    for asked in &brokers[..2] {
        let metadata = common::retry(100, Duration::from_millis(100), || {
            let mut k = asked.connect();
            let m = metadata_of(&mut k, 12, Some(&["spread"]));
            (m.brokers.len() == 2).then_some(m)
        })
        .expect("both Kafka brokers listed");
        for (id, broker) in [(1, &brokers[0]), (2, &brokers[1])] {
            let listed = metadata
                .brokers
                .iter()
                .find(|b| b.node_id.0 == id)
                .unwrap_or_else(|| panic!("broker {id} not in {metadata:?}"));
            assert_eq!(
                format!("{}:{}", listed.host.as_str(), listed.port),
                broker.kafka
            );
        }
        let spread = topic(&metadata, "spread");
        for p in &spread.partitions {
            let native_leader = leaders[p.partition_index as usize];
            if native_leader == 3 {
                assert_eq!(
                    (p.error_code, p.leader_id.0),
                    (LEADER_NOT_AVAILABLE, -1),
                    "{p:?}"
                );
            } else {
                assert_eq!(
                    (p.error_code, p.leader_id.0 as u64),
                    (0, native_leader),
                    "{p:?}"
                );
            }
        }
        let cluster = asked.connect().call(1, &DescribeClusterRequest::default());
        let mut ids: Vec<i32> = cluster.brokers.iter().map(|b| b.broker_id.0).collect();
        ids.sort();
        assert_eq!(ids, [1, 2], "{cluster:?}");
    }
}
