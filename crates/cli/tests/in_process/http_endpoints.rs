//! The HTTP listener of a node in this process: native and HTTP connections past their
//! limits or idle are closed and counted, per-partition series stop at their limit, the health
//! endpoints answer JSON, and bad requests get 4xx (the metrics of produced records, which are
//! the process's, and the listener across a follower's kill -9 are process tests).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::frames::create;
use crate::common::http::raw;
use crate::common::prometheus::{scrape_at, scrape_when_free, value};
use crate::common::RawClient;
use crate::node::HttpNode;

#[test]
fn idle_native_connections_are_closed_and_counted() {
    let server = HttpNode::start(|broker, _| {
        broker.listener.idle_timeout = Duration::from_millis(200);
    });
    let mut idle = RawClient::handshaken(&server.native);
    assert!(idle.closed_by_server());
    // Counted before the close reaches the client; no longer open soon after.
    let samples = scrape_at(&server.http);
    assert_eq!(value(&samples, "tinymq_connections_idle_closed_total"), 1.0);
    let open = (0..100).find_map(|_| {
        let open = value(&scrape_at(&server.http), "tinymq_connections_open");
        std::thread::sleep(Duration::from_millis(50));
        (open == 0.0).then_some(open)
    });
    assert_eq!(open, Some(0.0), "the idle connection still counted as open");
}

#[test]
fn an_http_client_that_sends_nothing_is_closed_and_frees_its_place() {
    let server = HttpNode::start(|_, http| {
        http.connections_max = 1;
        http.request_timeout = Duration::from_millis(200);
        http.idle_timeout = Duration::from_millis(300);
    });
    let scrape = || scrape_when_free(&server.http);
    let idle_closed = |samples: &BTreeMap<String, f64>| {
        value(samples, "tinymq_http_connections_idle_closed_total")
    };
    // Nothing at all, then half a request line: each is closed unanswered, and the scrape
    // after it gets the only place back. A silent connection that came while the previous
    // scrape still held the place was refused, not idle: it is tried again.
    let mut closed = 0.0;
    for sent in ["", "GET /metr"] {
        for attempt in 0.. {
            assert!(attempt < 50, "{sent:?}: never accepted");
            let mut silent = TcpStream::connect(&server.http).unwrap();
            silent
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            silent.write_all(sent.as_bytes()).unwrap();
            let mut rest = Vec::new();
            let read = silent.read_to_end(&mut rest);
            assert!(
                read.is_ok()
                    || read
                        .as_ref()
                        .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
                "not closed: {read:?}"
            );
            assert!(
                rest.is_empty(),
                "answered: {:?}",
                String::from_utf8_lossy(&rest)
            );
            let now = idle_closed(&scrape());
            if now > closed {
                assert_eq!(now, closed + 1.0);
                closed = now;
                break;
            }
        }
    }
    assert_eq!(closed, 2.0);
}

#[test]
fn native_connections_past_connections_max_are_counted() {
    let server = HttpNode::start(|broker, _| broker.listener.connections_max = 1);
    let held = TcpStream::connect(&server.native).unwrap();
    let mut refused = TcpStream::connect(&server.native).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The refused connection gets its LIMIT_EXCEEDED frame, then EOF.
    let mut rest = Vec::new();
    let _ = refused.read_to_end(&mut rest);
    let samples = scrape_at(&server.http);
    assert_eq!(value(&samples, "tinymq_connections_refused_total"), 1.0);
    assert_eq!(value(&samples, "tinymq_connections_open"), 1.0);
    drop(held);
}

#[test]
fn per_partition_series_stop_at_the_limit() {
    let server = HttpNode::start(|_, http| http.partition_series_max = 2);
    create(&mut RawClient::handshaken(&server.native), "wide", 5);
    let samples = scrape_at(&server.http);
    let held = value(&samples, "tinymq_partitions");
    assert!(
        held >= 5.0,
        "5 partitions of `wide` and the offsets topic's"
    );
    assert_eq!(
        value(&samples, "tinymq_partition_series_omitted"),
        held - 2.0
    );
    let shown = samples
        .keys()
        .filter(|k| k.starts_with("tinymq_partition_log_end_offset{"))
        .count();
    assert_eq!(shown, 2);
}

#[test]
fn health_endpoints_answer_json() {
    let server = HttpNode::start(|_, _| {});
    let live = server.get("/health/live").expect(200);
    assert_eq!(live["status"], "live");
    let ready = server.get("/health/ready").expect(200);
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["role"], "server");
    assert_eq!(ready["missing"], serde_json::json!([]));
    let names: Vec<&str> = ready["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["cluster_joined", "partitions_opened", "meta_leader_known"]
    );
}

#[test]
fn bad_requests_get_4xx() {
    let server = HttpNode::start(|_, http| http.body_bytes_max = 1024);
    let problem = server.get("/no/such/route").expect(404);
    assert_eq!(problem["status"], 404);
    let status = |request: &str| raw(&server.http, request).status;
    // Refused on the declared length, before the body is sent.
    let declared = "POST /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
                    Content-Length: 1073741824\r\n\r\n";
    assert_eq!(status(declared), 413);
    let delete = "DELETE /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_eq!(status(delete), 405);
    let status = status("NOT HTTP AT ALL\r\n\r\n");
    assert!((400..500).contains(&status), "{status}");
}

#[test]
fn connections_past_the_limit_are_closed_and_counted() {
    let server = HttpNode::start(|_, http| http.connections_max = 1);
    let mut held = TcpStream::connect(&server.http).unwrap();
    // A request answered on the held connection proves it was accepted (holds the one place).
    held.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    held.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let mut refused = TcpStream::connect(&server.http).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = refused.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut rest = Vec::new();
    // Closed without an answer (EOF or reset).
    let read = refused.read_to_end(&mut rest);
    assert!(read.is_err() || rest.is_empty(), "answered: {rest:?}");
    drop(held);
    // The held connection's place comes back once the server sees it closed.
    let samples = scrape_when_free(&server.http);
    assert!(value(&samples, "tinymq_http_connections_refused_total") >= 1.0);
}
