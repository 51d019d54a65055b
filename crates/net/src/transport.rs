//! The byte stream under a connection: plain TCP, or TLS when the listener has a
//! [`ServerTls`]. The first bytes tell the two apart (a TLS ClientHello starts with record
//! type 0x16, a tinymq frame with `T`), so a peer of the wrong kind is told so in words it
//! can read and closed: a plain client on a TLS port gets one tinymq error frame, a TLS
//! client on a plain port a TLS alert record.

use std::net::SocketAddr;
use std::time::Duration;

use tinymq_protocol::ErrorCode;
use tinymq_tls::{
    peer_principal, ClientAuth, ServerTlsStream, TLS_HANDSHAKE_RECORD_TYPE,
    TLS_RECORD_VERSION_MAJOR,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::{error_frame, ListenerSecurity};

/// What a plain client on a TLS port is told.
pub const PLAIN_ON_TLS_PORT: &str = "this port requires TLS; connect with TLS (--tls-ca)";
/// A fatal `unexpected_message` alert (TLS 1.2 record framing, which every TLS client reads
/// before the handshake): the answer to a ClientHello on a plain port.
const ALERT_UNEXPECTED_MESSAGE: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0A];
/// Bytes of a refused peer's first message read and dropped before answering it, so that
/// closing the socket sends a FIN the peer reads our answer before, not a reset.
const REFUSED_DRAIN_BYTES_MAX: usize = 64 * 1024;
/// How long a refused peer is given to read the answer and close its end.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<ServerTlsStream<TcpStream>>),
}

/// The connection's transport, once the TLS handshake (if any) is done within `deadline`;
/// `Err` says why the connection is closed instead.
pub(crate) async fn open(
    stream: TcpStream,
    addr: SocketAddr,
    security: &ListenerSecurity,
    deadline: Instant,
) -> Result<(Transport, Option<String>), String> {
    let mut first = [0u8; 2];
    let peeked = match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
        Err(_) => return Err("handshake timed out (nothing received)".into()),
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok(0)) => return Err("closed before sending anything".into()),
        Ok(Ok(n)) => n,
    };
    let looks_tls = first[0] == TLS_HANDSHAKE_RECORD_TYPE
        && (peeked < 2 || first[1] == TLS_RECORD_VERSION_MAJOR);
    let Some(tls) = &security.tls else {
        if looks_tls {
            tracing::info!(peer = %addr, "TLS handshake on a plain port: answered with a TLS alert and closed (this listener has no --tls-cert)");
            refuse(stream, &ALERT_UNEXPECTED_MESSAGE, deadline).await;
            return Err("TLS client on a plain port".into());
        }
        return Ok((Transport::Plain(stream), None));
    };
    if first[0] != TLS_HANDSHAKE_RECORD_TYPE {
        tracing::info!(peer = %addr, "plain connection on a TLS port: told it needs TLS and closed");
        let frame = error_frame(0, 0, ErrorCode::INVALID_FRAME, PLAIN_ON_TLS_PORT.into());
        refuse(stream, &frame, deadline).await;
        return Err("plain client on a TLS port".into());
    }
    let accepted = tokio::time::timeout_at(deadline, tls.acceptor().accept(stream)).await;
    let stream = match accepted {
        Err(_) => return Err("TLS handshake timed out".into()),
        Ok(Err(e)) => {
            tracing::info!(peer = %addr, error = %e, "TLS handshake failed");
            return Err(format!("TLS handshake failed: {e}"));
        }
        Ok(Ok(s)) => s,
    };
    let principal = match tls.client_auth() {
        ClientAuth::None => None,
        _ => stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(peer_principal),
    };
    if let Some(name) = &principal {
        tracing::info!(peer = %addr, tls_principal = %name, "TLS client certificate verified");
    }
    Ok((Transport::Tls(Box::new(stream)), principal))
}

/// Reads what the peer already sent (bounded), writes `answer`, closes our side, and gives
/// the peer a moment to read it and close its own.
async fn refuse(mut stream: TcpStream, answer: &[u8], deadline: Instant) {
    let mut drained = 0;
    let mut scratch = [0u8; 4096];
    while drained < REFUSED_DRAIN_BYTES_MAX {
        match stream.try_read(&mut scratch) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    let linger = deadline.min(Instant::now() + REFUSED_LINGER);
    let _ = tokio::time::timeout_at(linger, async {
        stream.write_all(answer).await?;
        stream.shutdown().await?;
        let mut rest = 0;
        while rest < REFUSED_DRAIN_BYTES_MAX {
            match stream.read(&mut scratch).await? {
                0 => break,
                n => rest += n,
            }
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
}
