//! Messages: read a page of records from a partition (at an offset or a timestamp) through
//! the consumer fetch path, and produce one record for testing through the producer.
//! Keys, values and header values are rendered as UTF-8 where they are valid UTF-8, else as
//! base64, each with a field saying which.

use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tinymq_client::{ClientError, ErrorCode, Producer, ProducerConfig, ProducerRecord};
use tinymq_protocol::batch::{BatchIter, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::messages as m;
use utoipa::{IntoParams, ToSchema};

use super::problem::{check_topic_name, ApiJson, ApiPath, ApiQuery};
use super::topics::TopicPath;
use super::{ApiState, Problem, HTTP_MESSAGES_PAGE_BYTES_MAX, HTTP_MESSAGES_PAGE_MAX};

/// Records a page holds when `limit` is absent.
const PAGE_DEFAULT: u32 = 100;
/// Attempts at a fetch whose leader moved meanwhile.
const FETCH_ATTEMPTS: usize = 3;

/// How bytes are rendered as a JSON string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Utf8,
    Base64,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PartitionPath {
    /// The topic's name.
    #[param(pattern = "^[A-Za-z0-9._-]{1,249}$", example = "orders")]
    pub name: String,
    /// The partition's index.
    #[param(example = 0)]
    pub partition: u32,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// First offset to read; neither this nor `timestamp_ms`: the log's start.
    #[param(minimum = 0)]
    pub offset: Option<i64>,
    /// Read from the first record at or after this time (ms since the Unix epoch).
    #[param(minimum = 0)]
    pub timestamp_ms: Option<i64>,
    /// Most records to return, 1 to `http_messages_page_max` (1000); default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `utf8`: every field as UTF-8 (invalid bytes replaced by U+FFFD); `base64`: every field
    /// as base64; absent: UTF-8 where valid, else base64.
    pub encoding: Option<Encoding>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessagePage {
    pub messages: Vec<Message>,
    /// The offset to ask for the next page.
    pub next_offset: i64,
    /// The partition's high watermark: records below it are readable.
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Message {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<String>,
    pub key_encoding: Encoding,
    /// Null for a record without a value (a tombstone).
    pub value: Option<String>,
    pub value_encoding: Encoding,
    pub headers: Vec<Header>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Header {
    pub key: String,
    pub value: Option<String>,
    pub value_encoding: Encoding,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProduceMessage {
    pub key: Option<String>,
    /// How `key` is written; default `utf8`.
    pub key_encoding: Option<Encoding>,
    pub value: String,
    /// How `value` is written; default `utf8`.
    pub value_encoding: Option<Encoding>,
    pub headers: Option<Vec<HeaderInput>>,
    /// Absent: chosen by the key's hash (or in turn without a key), as the producer does.
    pub partition: Option<u32>,
    /// Milliseconds since the Unix epoch; absent: now.
    #[schema(minimum = 0)]
    pub timestamp_ms: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeaderInput {
    pub key: String,
    pub value: Option<String>,
    /// How `value` is written; default `utf8`.
    pub value_encoding: Option<Encoding>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Produced {
    pub partition: u32,
    pub offset: i64,
}

/// A page of records of one partition, from an offset or a time.
#[utoipa::path(
    get,
    path = "/topics/{name}/partitions/{partition}/messages",
    tag = "messages",
    params(PartitionPath, ReadQuery),
    responses(
        (status = 200, description = "A page of records", body = MessagePage),
        (status = 400, description = "Bad query, or an offset outside the log (OFFSET_OUT_OF_RANGE)",
         body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such topic or partition", body = Problem,
         content_type = "application/problem+json"),
        (status = "4XX", description = "Other bad input", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn read_messages(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<PartitionPath>,
    ApiQuery(query): ApiQuery<ReadQuery>,
) -> Result<Json<MessagePage>, Problem> {
    check_topic_name(&path.name)?;
    let limit = query.limit.unwrap_or(PAGE_DEFAULT);
    if limit == 0 || limit > HTTP_MESSAGES_PAGE_MAX {
        return Err(Problem::invalid(format!(
            "limit must be 1 to http_messages_page_max ({HTTP_MESSAGES_PAGE_MAX})"
        )));
    }
    let api = state.client().await?;
    let (topic, partition) = (path.name.as_str(), path.partition);
    let start = match (query.offset, query.timestamp_ms) {
        (Some(_), Some(_)) => {
            return Err(Problem::invalid("give offset or timestamp_ms, not both"));
        }
        (Some(o), None) if o < 0 => return Err(Problem::invalid("offset must be 0 or more")),
        (Some(o), None) => o,
        (None, Some(t)) if t < 0 => {
            return Err(Problem::invalid("timestamp_ms must be 0 or more"));
        }
        (None, Some(t)) => match api.admin.list_offset(topic, partition, t).await? {
            // No record at or after that time: the page starts at the end.
            -1 => api.admin.list_offset(topic, partition, -1).await?,
            found => found,
        },
        (None, None) => api.admin.list_offset(topic, partition, -2).await?,
    };
    let fetched = fetch(&api, topic, partition, start).await?;
    Ok(Json(page(fetched, start, limit as usize, query.encoding)?))
}

/// One fetch of the partition at `start`, from its leader, without long polling.
async fn fetch(
    api: &super::ApiClient,
    topic: &str,
    partition: u32,
    start: i64,
) -> Result<m::FetchPartitionResult, Problem> {
    let request = m::FetchRequest {
        filter: String::new(),
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: HTTP_MESSAGES_PAGE_BYTES_MAX,
        partitions: vec![m::FetchPartition {
            topic: topic.into(),
            partition,
            offset: start,
            partition_bytes_max: HTTP_MESSAGES_PAGE_BYTES_MAX,
            ..Default::default()
        }],
        replica_id: 0,
        isolation_level: 0,
    };
    let mut last = None;
    for _ in 0..FETCH_ATTEMPTS {
        let answer = async {
            let connection = api.cluster.leader(topic, partition).await?;
            let response = connection
                .request(&request, api.config.request_timeout)
                .await?;
            wire_error(response.error.as_ref())?;
            let p = response
                .partitions
                .into_iter()
                .next()
                .ok_or_else(|| ClientError::Protocol("empty fetch response".into()))?;
            wire_error(p.error.as_ref())?;
            Ok::<_, ClientError>(p)
        }
        .await;
        match answer {
            Ok(p) => return Ok(p),
            Err(e) if e.needs_metadata_refresh() && e.is_retriable() => {
                api.cluster.invalidate(topic);
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last
        .map(Problem::from)
        .unwrap_or_else(|| Problem::unavailable("the fetch was not tried")))
}

/// Bytes of a record's key, value and headers before rendering.
fn decoded_bytes(r: &tinymq_protocol::batch::Record) -> usize {
    let optional = |b: Option<&bytes::Bytes>| b.map_or(0, |b| b.len());
    r.headers.iter().fold(
        optional(r.key.as_ref()).saturating_add(optional(r.value.as_ref())),
        |sum, h| {
            sum.saturating_add(h.key.len())
                .saturating_add(optional(h.value.as_ref()))
        },
    )
}

/// A wire error field as a result (absent or code 0: success), as the client reads it.
fn wire_error(error: Option<&m::Error>) -> Result<(), ClientError> {
    match error {
        Some(e) if e.code != 0 => Err(ClientError::Server {
            code: e.error_code(),
            message: e.message.clone(),
        }),
        _ => Ok(()),
    }
}

/// The records at or after `start`, at most `limit`, rendered.
fn page(
    p: m::FetchPartitionResult,
    start: i64,
    limit: usize,
    encoding: Option<Encoding>,
) -> Result<MessagePage, Problem> {
    let bad_batch = |e: tinymq_protocol::batch::BatchError| {
        Problem::new(
            axum::http::StatusCode::BAD_GATEWAY,
            ErrorCode::CORRUPT_MESSAGE.name(),
            format!("the leader sent a batch that does not parse: {e}"),
        )
    };
    let mut messages = Vec::new();
    let mut next = start;
    let page_bytes_max = HTTP_MESSAGES_PAGE_BYTES_MAX as usize;
    let mut rendered_bytes = 0usize;
    'batches: for batch in BatchIter::new(p.records) {
        let batch = batch.map_err(bad_batch)?;
        if !batch.is_control() {
            for r in batch
                .records(BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)
                .map_err(bad_batch)?
            {
                if r.offset < start {
                    continue;
                }
                // The page is bounded in decoded bytes too: a small compressed batch may hold
                // many large records, which JSON would render several times over.
                let record_bytes = decoded_bytes(&r);
                if messages.len() == limit
                    || (!messages.is_empty()
                        && rendered_bytes.saturating_add(record_bytes) > page_bytes_max)
                {
                    break 'batches;
                }
                rendered_bytes = rendered_bytes.saturating_add(record_bytes);
                next = r.offset.saturating_add(1);
                let (key, key_encoding) = render_opt(r.key.as_ref(), encoding);
                let (value, value_encoding) = render_opt(r.value.as_ref(), encoding);
                let headers = r
                    .headers
                    .into_iter()
                    .map(|h| {
                        let (value, value_encoding) = render_opt(h.value.as_ref(), encoding);
                        Header {
                            key: h.key,
                            value,
                            value_encoding,
                        }
                    })
                    .collect();
                messages.push(Message {
                    offset: r.offset,
                    timestamp_ms: r.timestamp_ms,
                    key,
                    key_encoding,
                    value,
                    value_encoding,
                    headers,
                });
            }
        }
        next = next.max(batch.next_offset());
    }
    Ok(MessagePage {
        messages,
        next_offset: next,
        high_watermark: p.high_watermark,
        log_start_offset: p.log_start_offset,
    })
}

fn render_opt(bytes: Option<&Bytes>, encoding: Option<Encoding>) -> (Option<String>, Encoding) {
    match bytes {
        Some(b) => {
            let (text, used) = render(b, encoding);
            (Some(text), used)
        }
        None => (None, encoding.unwrap_or(Encoding::Utf8)),
    }
}

fn render(bytes: &[u8], encoding: Option<Encoding>) -> (String, Encoding) {
    let base64 = || base64::engine::general_purpose::STANDARD.encode(bytes);
    match encoding {
        Some(Encoding::Base64) => (base64(), Encoding::Base64),
        Some(Encoding::Utf8) => (String::from_utf8_lossy(bytes).into_owned(), Encoding::Utf8),
        None => match std::str::from_utf8(bytes) {
            Ok(text) => (text.to_string(), Encoding::Utf8),
            Err(_) => (base64(), Encoding::Base64),
        },
    }
}

fn decode(field: &str, text: &str, encoding: Option<Encoding>) -> Result<Bytes, Problem> {
    match encoding.unwrap_or(Encoding::Utf8) {
        Encoding::Utf8 => Ok(Bytes::copy_from_slice(text.as_bytes())),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(|e| Problem::invalid(format!("{field} is not valid base64: {e}"))),
    }
}

/// Produces one record (for testing) and answers where it landed.
#[utoipa::path(
    post,
    path = "/topics/{name}/messages",
    tag = "messages",
    params(TopicPath),
    request_body = ProduceMessage,
    responses(
        (status = 200, description = "Stored", body = Produced),
        (status = 400, description = "Bad body (bad base64, bad timestamp, ...)", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "No such topic or partition", body = Problem,
         content_type = "application/problem+json"),
        (status = 413, description = "The record is larger than the topic takes", body = Problem,
         content_type = "application/problem+json"),
        (status = "4XX", description = "Other bad input", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn produce_message(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<TopicPath>,
    ApiJson(body): ApiJson<ProduceMessage>,
) -> Result<Json<Produced>, Problem> {
    check_topic_name(&path.name)?;
    let mut record = ProducerRecord {
        value: Some(decode("value", &body.value, body.value_encoding)?),
        partition: body.partition,
        timestamp_ms: body.timestamp_ms,
        ..ProducerRecord::default()
    };
    if let Some(key) = &body.key {
        record.key = Some(decode("key", key, body.key_encoding)?);
    }
    for h in body.headers.unwrap_or_default() {
        let value = match &h.value {
            Some(v) => Some(decode("a header value", v, h.value_encoding)?),
            None => None,
        };
        record.headers.push((h.key, value));
    }
    if body.timestamp_ms.is_some_and(|t| t < 0) {
        return Err(Problem::from_code(
            ErrorCode::INVALID_TIMESTAMP,
            "timestamp_ms must be 0 or more",
        ));
    }
    let api = state.client().await?;
    // A fresh route: an unknown topic or partition is a 404 now, not a delivery timeout.
    let route = api.cluster.refresh(&path.name).await?;
    if let Some(p) = body.partition {
        if p >= route.partition_count() {
            return Err(Problem::from_code(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {} has no partition {p}", path.name),
            ));
        }
    }
    // A producer of its own per record: nothing is cached across requests (a topic deleted and
    // created again), and the record is sent at once.
    let mut config = ProducerConfig::new(&api.config.bootstrap.join(","));
    config.client = api.config.clone();
    config.linger = std::time::Duration::ZERO;
    config.idempotence = false;
    config.delivery_timeout = api.config.api_timeout;
    let producer = Producer::new(config)?;
    let delivered = async { producer.send(&path.name, record).await?.await }.await;
    producer.close().await;
    let meta = delivered?;
    Ok(Json(Produced {
        partition: meta.partition,
        offset: meta.offset,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_render_as_utf8_where_valid_else_base64() {
        assert_eq!(
            render(b"caf\xc3\xa9", None),
            ("café".into(), Encoding::Utf8)
        );
        assert_eq!(render(b"\xff\x00", None), ("/wA=".into(), Encoding::Base64));
        assert_eq!(
            render(b"ab", Some(Encoding::Base64)),
            ("YWI=".into(), Encoding::Base64)
        );
        assert_eq!(
            render(b"a\xff", Some(Encoding::Utf8)),
            ("a\u{fffd}".into(), Encoding::Utf8)
        );
        assert_eq!(render_opt(None, None), (None, Encoding::Utf8));
    }

    #[test]
    fn produce_input_decodes_by_its_encoding() {
        assert_eq!(
            decode("v", "/wA=", Some(Encoding::Base64)).unwrap(),
            &b"\xff\x00"[..]
        );
        assert_eq!(decode("v", "/wA=", None).unwrap(), &b"/wA="[..]);
        let refused = decode("value", "***", Some(Encoding::Base64)).unwrap_err();
        assert_eq!(
            (refused.status, refused.code.as_str()),
            (400, "INVALID_REQUEST")
        );
    }
}
