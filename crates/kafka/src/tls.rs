//! Telling a plain Kafka client on a TLS Kafka port from a TLS one before the TLS handshake:
//! a TLS connection starts with a handshake record (type 22), a Kafka request with its
//! 4-byte big-endian size, whose first byte is 0 for any request the listener accepts. A
//! plain client is logged clearly and closed, instead of failing deep inside the TLS
//! library with a message that names no cause. Kafka's protocol has nothing to say before a
//! request is read, so the client only sees the close (its own log says the broker
//! disconnected; librdkafka adds "is the broker expecting TLS?").

use std::net::SocketAddr;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE_RECORD_TYPE: u8 = 0x16;

/// Waits (until `deadline`) for the connection's first byte, without consuming it: `Ok` when
/// it starts a TLS handshake, `Err` with the reason to close it otherwise (a plain Kafka
/// client is logged here).
pub(crate) async fn expect_tls(
    stream: &TcpStream,
    addr: SocketAddr,
    deadline: Instant,
) -> Result<(), String> {
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Err(_) => Err("TLS handshake timed out (nothing received)".into()),
        Ok(Err(e)) => Err(format!("read failed: {e}")),
        Ok(Ok(0)) => Err("closed before sending anything".into()),
        Ok(Ok(_)) if first[0] == TLS_HANDSHAKE_RECORD_TYPE => Ok(()),
        Ok(Ok(_)) => {
            let why = looks_like(first[0]);
            tracing::warn!(peer = %addr, first_byte = first[0], "Kafka port requires TLS: {why} connected without TLS; closed (set security.protocol=SSL or SASL_SSL)");
            Err(format!("plain client on a TLS port ({why})"))
        }
    }
}

/// What a connection starting with `byte` (not TLS) probably is, for the log.
fn looks_like(byte: u8) -> &'static str {
    if byte == 0 {
        "a plain Kafka client"
    } else {
        "a client speaking neither TLS nor Kafka"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn first_bytes(bytes: &'static [u8]) -> Result<(), String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            c.write_all(bytes).await.expect("write");
            c
        });
        let (server, peer) = listener.accept().await.expect("accept");
        let _client = client.await.expect("client");
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        expect_tls(&server, peer, deadline).await
    }

    #[tokio::test]
    async fn a_tls_client_hello_passes_and_a_kafka_request_does_not() {
        assert!(first_bytes(&[0x16, 0x03, 0x01, 0x00, 0x2a]).await.is_ok());
        let kafka = first_bytes(&[0x00, 0x00, 0x00, 0x15, 0x00, 0x12]).await;
        assert!(kafka.is_err_and(|why| why.contains("plain Kafka client")));
        let http = first_bytes(b"GET / HTTP/1.1\r\n").await;
        assert!(http.is_err_and(|why| why.contains("neither TLS nor Kafka")));
    }
}
