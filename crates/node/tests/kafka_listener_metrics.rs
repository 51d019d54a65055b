//! The Kafka port is served by the same accept loop as the native port
//! (`tinymq_net::accept_connections`): its connections and the native operations its requests
//! become are counted, and `/metrics` shows them as `tinymq_kafka_*` series. A node started in
//! this process, real sockets on loopback.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tinymq_broker::BrokerConfig;
use tinymq_node::{BrokerNodeConfig, HttpListenerConfig, KafkaListenerConfig, Node, NodeConfig};

/// A Kafka request with a version-1 header: size, API key, version, correlation id, client id.
fn kafka_request(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let client_id = b"metrics-test";
    let mut frame = Vec::new();
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    frame.extend_from_slice(client_id);
    frame.extend_from_slice(body);
    let mut sized = (frame.len() as u32).to_be_bytes().to_vec();
    sized.extend_from_slice(&frame);
    sized
}

/// The next response's correlation id.
fn read_answer(stream: &mut TcpStream) -> i32 {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("a response size");
    let mut body = vec![0u8; u32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).expect("a response body");
    i32::from_be_bytes(body[..4].try_into().expect("a correlation id"))
}

fn scrape(http: SocketAddr) -> String {
    let mut stream = TcpStream::connect(http).expect("connect to HTTP");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("send the scrape");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the scrape");
    answer
}

/// The value of the sample `series` (labels included) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn any_address() -> SocketAddr {
    "127.0.0.1:0".parse().expect("an address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_connections_and_requests_are_counted_like_the_native_ports() {
    let data = tempfile::tempdir().expect("a temporary directory");
    let config = BrokerNodeConfig {
        broker: BrokerConfig {
            listen: any_address(),
            data_dir: data.path().to_path_buf(),
            ..BrokerConfig::default()
        },
        http: Some(HttpListenerConfig {
            addr: any_address(),
            optional: false,
            limits: Default::default(),
            security: Default::default(),
            api_links: Default::default(),
        }),
        kafka: Some(KafkaListenerConfig {
            listen: Some(any_address()),
            ..KafkaListenerConfig::default()
        }),
    };
    let node = Node::start(NodeConfig::Standalone(config))
        .await
        .expect("the node starts");
    let kafka = node.kafka_addr().expect("a Kafka listener");
    let http = node.http_addr().expect("an HTTP listener");
    let answered = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(kafka).expect("connect to the Kafka port");
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
        // Metadata v1 with a null topic array (all topics): answered through the native
        // Metadata operation.
        let request = kafka_request(3, 1, 7, &(-1i32).to_be_bytes());
        stream.write_all(&request).expect("send Metadata");
        read_answer(&mut stream)
    })
    .await
    .expect("the client thread");
    assert_eq!(answered, 7);
    // The client has closed; poll until the listener has seen it go.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = tokio::task::spawn_blocking(move || scrape(http))
            .await
            .expect("the scrape thread");
        let closed = sample(&text, "tinymq_kafka_connections_open") == Some(0.0);
        if closed || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let value = |series: &str| sample(&text, series);
    assert_eq!(value("tinymq_kafka_connections_open"), Some(0.0), "{text}");
    assert_eq!(
        value("tinymq_kafka_connections_accepted_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value("tinymq_kafka_connections_refused_total"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value("tinymq_kafka_requests_total{op=\"metadata\"}"),
        Some(1.0),
        "{text}"
    );
    node.shutdown().await;
}
