//! One client connection: a reader loop that decodes frames and starts a task per request, and
//! a writer task that sends responses as they complete (full duplex, matched by message id).
//!
//! Backpressure: at most `requests_in_flight_max` requests run at once; the reader waits for
//! one to finish before it reads further, so a flooding client fills its own socket buffer, not
//! the broker's memory. Responses go through a channel of the same bound.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prost::Message;
use tinymq_protocol::frame::{Decoded, FrameDecoder, FrameHeader};
use tinymq_protocol::{
    messages as m, ErrorCode, Frame, FrameError, OpCode, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use tinymq_meta::link::MetaLink;

use crate::state::BrokerState;
use crate::{group_handlers, handlers, topic_handlers};

/// Bytes read from the socket at a time at most.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Encodes a response frame: header and protobuf body in one buffer.
pub fn encode_response(op_code: u8, message_id: u32, body: &impl Message) -> Bytes {
    let len = body.encoded_len();
    let mut out = BytesMut::with_capacity(12 + len);
    FrameHeader::response(op_code, message_id, len as u32).encode(&mut out);
    body.encode(&mut out).expect("BytesMut grows");
    out.freeze()
}

fn error_frame(op_code: u8, message_id: u32, code: ErrorCode, message: String) -> Bytes {
    let body = m::ErrorResponse {
        error: Some(code.with_message(message)),
    };
    encode_response(op_code & 0x7F, message_id, &body)
}

pub struct Connection {
    state: Arc<BrokerState>,
    peer: String,
    shutdown: CancellationToken,
}

impl Connection {
    pub fn new(state: Arc<BrokerState>, peer: String, shutdown: CancellationToken) -> Connection {
        Connection {
            state,
            peer,
            shutdown,
        }
    }

    pub async fn run(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let (mut reader, mut writer) = stream.into_split();
        let in_flight_max = self.state.config.requests_in_flight_max;
        let (tx, mut rx) = mpsc::channel::<Bytes>(in_flight_max);
        let write_task = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if writer.write_all(&frame).await.is_err() {
                    break;
                }
            }
            let _ = writer.shutdown().await;
        });
        let permits = Arc::new(Semaphore::new(in_flight_max));
        let outcome = self.read_loop(&mut reader, &tx, &permits).await;
        if let Err(why) = &outcome {
            tracing::debug!(peer = %self.peer, %why, "closing connection");
        }
        // Let requests in flight finish (bounded by the shutdown grace), then flush responses.
        let all = u32::try_from(in_flight_max).unwrap_or(u32::MAX);
        let _ =
            tokio::time::timeout(self.state.config.shutdown_grace, permits.acquire_many(all)).await;
        drop(tx);
        let _ = write_task.await;
    }

    async fn read_loop(
        &self,
        reader: &mut tokio::net::tcp::OwnedReadHalf,
        tx: &mpsc::Sender<Bytes>,
        permits: &Arc<Semaphore>,
    ) -> Result<(), String> {
        let config = &self.state.config;
        let mut decoder = FrameDecoder::pre_handshake();
        let mut buf = BytesMut::with_capacity(4096);
        let mut handshaken = false;
        let handshake_deadline = tokio::time::Instant::now() + config.handshake_timeout;
        loop {
            // Serve every complete frame already buffered.
            loop {
                match decoder.peek(&buf) {
                    Ok(Decoded::Complete(_)) => {}
                    Ok(Decoded::NeedMore { total_bytes }) => {
                        // The total is known to be within the limit: reserving it is bounded.
                        buf.reserve(total_bytes.saturating_sub(buf.len()).min(READ_CHUNK_BYTES));
                        break;
                    }
                    Err(e) => return Err(self.reject_frame(&buf, e, tx).await),
                };
                let frame = decoder
                    .decode(&mut buf)
                    .map_err(|e| e.to_string())?
                    .expect("complete");
                if !handshaken {
                    handshaken = self.handshake(frame, tx).await?;
                    if handshaken {
                        decoder.set_body_bytes_max(config.frame_bytes_max);
                    }
                    continue;
                }
                let permit = tokio::select! {
                    p = permits.clone().acquire_owned() => p.map_err(|e| e.to_string())?,
                    _ = self.shutdown.cancelled() => return Err("shutting down".into()),
                };
                let (state, tx) = (self.state.clone(), tx.clone());
                if frame.header.op_code() == OpCode::Produce.code() && !frame.header.is_response() {
                    // Written before the next frame is read: produce keeps the connection's order.
                    let (op, id) = (frame.header.op_code(), frame.header.message_id);
                    let written = match m::ProduceRequest::decode(frame.body) {
                        Ok(request) => handlers::produce_write(state, request).await,
                        Err(e) => Err(m::ProduceResponse {
                            error: Some(
                                ErrorCode::MALFORMED_BODY
                                    .with_message(format!("cannot decode body: {e}")),
                            ),
                            partitions: vec![],
                        }),
                    };
                    tokio::spawn(async move {
                        // acks = 0 still waits for the flush policy (which raises the high
                        // watermark); it only sends no response.
                        let response = match written {
                            Ok(prepared) => {
                                let acks = prepared.acks();
                                let response = handlers::produce_finish(prepared).await;
                                (acks != 0).then_some(response)
                            }
                            Err(response) => Some(response),
                        };
                        if let Some(response) = response {
                            let _ = tx.send(encode_response(op, id, &response)).await;
                        }
                        drop(permit);
                    });
                    continue;
                }
                tokio::spawn(async move {
                    if let Some(response) = dispatch(state, frame).await {
                        let _ = tx.send(response).await;
                    }
                    drop(permit);
                });
            }
            let read = async {
                if handshaken {
                    tokio::time::timeout(config.idle_timeout, reader.read_buf(&mut buf)).await
                } else {
                    tokio::time::timeout_at(handshake_deadline, reader.read_buf(&mut buf)).await
                }
            };
            let n = tokio::select! {
                r = read => r,
                _ = self.shutdown.cancelled() => return Err("shutting down".into()),
            };
            match n {
                Ok(Ok(0)) if buf.is_empty() => return Ok(()),
                Ok(Ok(0)) => {
                    return Err(format!(
                        "connection closed in the middle of a frame ({} bytes)",
                        buf.len()
                    ))
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) if !handshaken => return Err("handshake timed out".into()),
                Err(_) if permits.available_permits() == config.requests_in_flight_max => {
                    return Err("idle timeout".into())
                }
                Err(_) => {}
            }
        }
    }

    /// Answers an invalid frame with an error frame where possible, before closing.
    async fn reject_frame(&self, buf: &[u8], e: FrameError, tx: &mpsc::Sender<Bytes>) -> String {
        let message_id = buf
            .get(4..8)
            .map_or(0, |b| u32::from_be_bytes(b.try_into().expect("4")));
        let code = match e {
            FrameError::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_VERSION,
            _ => ErrorCode::INVALID_FRAME,
        };
        let op = buf.get(3).copied().unwrap_or(0);
        let _ = tx
            .send(error_frame(
                op,
                message_id,
                code,
                format!("{e}; closing the connection"),
            ))
            .await;
        tracing::info!(peer = %self.peer, error = %e, "invalid frame");
        e.to_string()
    }

    /// Handles the first frame(s) of a connection; returns whether the handshake succeeded.
    async fn handshake(&self, frame: Frame, tx: &mpsc::Sender<Bytes>) -> Result<bool, String> {
        let (op, id) = (frame.header.op_code(), frame.header.message_id);
        let send = |bytes: Bytes| async move { tx.send(bytes).await.map_err(|e| e.to_string()) };
        if frame.header.is_response() || OpCode::from_code(op) != Some(OpCode::Handshake) {
            send(error_frame(
                op,
                id,
                ErrorCode::HANDSHAKE_REQUIRED,
                "send a Handshake request first".into(),
            ))
            .await?;
            return Ok(false);
        }
        let request = match m::HandshakeRequest::decode(frame.body) {
            Ok(r) => r,
            Err(e) => {
                send(error_frame(
                    op,
                    id,
                    ErrorCode::MALFORMED_BODY,
                    format!("handshake body: {e}"),
                ))
                .await?;
                return Ok(false);
            }
        };
        let cluster_id = self.state.cluster.cluster_id();
        let version = request.max_version.min(PROTOCOL_VERSION_MAX);
        let error = if request.min_version > PROTOCOL_VERSION_MAX
            || version < PROTOCOL_VERSION_MIN.max(request.min_version)
        {
            Some(ErrorCode::UNSUPPORTED_VERSION.with_message(format!(
                "client speaks {}..={}, server {PROTOCOL_VERSION_MIN}..={PROTOCOL_VERSION_MAX}",
                request.min_version, request.max_version
            )))
        } else if !request.cluster_id.is_empty() && request.cluster_id != cluster_id {
            Some(ErrorCode::CLUSTER_ID_MISMATCH.with_message(format!(
                "client expects cluster {}, this is {cluster_id}",
                request.cluster_id
            )))
        } else {
            None
        };
        let success = error.is_none();
        let response = m::HandshakeResponse {
            error,
            version,
            cluster_id,
            node_id: self.state.node_id(),
            frame_bytes_max: self.state.config.frame_bytes_max,
            requests_in_flight_max: self.state.config.requests_in_flight_max as u32,
        };
        send(encode_response(op, id, &response)).await?;
        if success {
            tracing::debug!(peer = %self.peer, client = %request.client_id, "handshake done");
        }
        Ok(success)
    }
}

fn decode<T: Message + Default>(body: Bytes) -> Result<T, m::Error> {
    T::decode(body)
        .map_err(|e| ErrorCode::MALFORMED_BODY.with_message(format!("cannot decode body: {e}")))
}

/// Routes one request to its handler; returns the encoded response, or `None` when none is due
/// (produce with acks = 0).
async fn dispatch(state: Arc<BrokerState>, frame: Frame) -> Option<Bytes> {
    let (op_code, id) = (frame.header.op_code(), frame.header.message_id);
    let Some(op) = OpCode::from_code(op_code).filter(|_| !frame.header.is_response()) else {
        return Some(error_frame(
            op_code,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!("unknown operation {op_code}"),
        ));
    };
    macro_rules! handle {
        ($req:ty, |$r:ident| $body:expr) => {
            match decode::<$req>(frame.body) {
                Ok($r) => {
                    let response = $body;
                    Some(encode_response(op_code, id, &response))
                }
                Err(e) => Some(encode_response(
                    op_code,
                    id,
                    &m::ErrorResponse { error: Some(e) },
                )),
            }
        };
    }
    match op {
        OpCode::Handshake => Some(error_frame(
            op_code,
            id,
            ErrorCode::INVALID_REQUEST,
            "already handshaken".into(),
        )),
        OpCode::Metadata => handle!(m::MetadataRequest, |r| topic_handlers::metadata(&state, r)),
        OpCode::CreateTopic => handle!(m::CreateTopicRequest, |r| topic_handlers::create_topic(
            state, r
        )
        .await),
        OpCode::DeleteTopic => handle!(m::DeleteTopicRequest, |r| topic_handlers::delete_topic(
            state, r
        )
        .await),
        OpCode::ListTopics => handle!(m::ListTopicsRequest, |_r| topic_handlers::list_topics(
            &state
        )),
        OpCode::DescribeTopic => {
            handle!(m::DescribeTopicRequest, |r| topic_handlers::describe_topic(
                &state, r
            ))
        }
        // Handled in the read loop, which writes produce requests in the order received.
        OpCode::AlterPartitions => handle!(m::AlterPartitionsRequest, |r| {
            topic_handlers::alter_partitions(state, r).await
        }),
        OpCode::Produce => unreachable!("produce never reaches dispatch"),
        OpCode::FindCoordinator => handle!(m::FindCoordinatorRequest, |r| {
            group_handlers::find_coordinator(state, r).await
        }),
        OpCode::JoinGroup => handle!(m::JoinGroupRequest, |r| group_handlers::join(&state, r)),
        OpCode::Heartbeat => handle!(m::HeartbeatRequest, |r| group_handlers::heartbeat(
            &state, r
        )),
        OpCode::LeaveGroup => handle!(m::LeaveGroupRequest, |r| group_handlers::leave(&state, r)),
        OpCode::OffsetCommit => {
            handle!(m::OffsetCommitRequest, |r| group_handlers::commit(state, r)
                .await)
        }
        OpCode::OffsetFetch => handle!(m::OffsetFetchRequest, |r| group_handlers::fetch_offsets(
            &state, r
        )),
        OpCode::ListGroups => handle!(m::ListGroupsRequest, |_r| group_handlers::list(&state)),
        OpCode::DescribeGroup => handle!(m::DescribeGroupRequest, |r| group_handlers::describe(
            &state, r
        )),
        OpCode::DeleteGroup => handle!(m::DeleteGroupRequest, |r| group_handlers::delete(state, r)
            .await),
        // The standalone server is also a single-node MetaServer: brokers may join it.
        OpCode::RaftRpc | OpCode::MetaWrite | OpCode::MetaRead | OpCode::BrokerHeartbeat
            if matches!(state.cluster.link, MetaLink::Local(_)) =>
        {
            let MetaLink::Local(service) = &state.cluster.link else {
                unreachable!("matched above")
            };
            Some(tinymq_meta::server::handle(service, frame).await)
        }
        OpCode::MetaRead => handle!(m::MetaReadRequest, |_r| topic_handlers::meta_read(&state)),
        OpCode::RaftRpc | OpCode::MetaWrite | OpCode::BrokerHeartbeat => Some(error_frame(
            op_code,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!(
                "{} is served by MetaServer nodes (and the standalone server), not by a cluster broker",
                op.name()
            ),
        )),
        OpCode::Fetch => handle!(m::FetchRequest, |r| handlers::fetch(state, r).await),
        OpCode::ListOffsets => handle!(m::ListOffsetsRequest, |r| handlers::list_offsets(state, r)
            .await),
        OpCode::InitProducerId => {
            handle!(m::InitProducerIdRequest, |r| handlers::init_producer_id(
                state, r
            )
            .await)
        }
    }
}
