//! Fetch: a Kafka FetchRequest (v4..=16) as one native FetchRequest, long poll included
//! (`max_wait_ms`, `min_bytes`), and its records returned verbatim: whole batches as the log
//! holds them, the first of which may start before the requested offset (clients skip the
//! records below it, as they do with Kafka).
//!
//! Fetch sessions (KIP-227, v7+) are kept in [`session`]: a full fetch may make one, and a
//! session's incremental fetches read all its partitions but answer only those with news.
//! From v13 topics are named by topic id ([`crate::topic_id`]); an id no topic has is
//! answered UNKNOWN_TOPIC_ID. Kafka's byte bounds are applied to the native answer (see
//! [`bounds`]). Transactions (KIP-98): `isolation_level` is passed through (1, read
//! committed, reads below the last stable offset), and the native answer's last stable
//! offset and aborted transactions are Kafka's (aborted transactions from v4, the oldest
//! version served).

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::ProducerId;
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tinymq_meta::MetadataImage;
use tinymq_protocol::{messages as m, OpCode};
use uuid::Uuid;

use crate::answers::Answers;
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};
use crate::{leader, topic_id};
use bounds::Budget;
pub(crate) use session::FetchSessions;
use session::{Key, Opened, Outcome, SessionRequest, Told, TopicRef, Wanted};
pub use session::{
    FETCH_SESSIONS_MAX, FETCH_SESSION_EVICTABLE_AFTER, FETCH_SESSION_PARTITIONS_MAX,
    FETCH_SESSION_PARTITIONS_TOTAL_MAX,
};

mod bounds;
mod session;

pub(crate) async fn handle(ctx: Arc<Ctx>, version: i16, request: FetchRequest) -> FetchResponse {
    let sessions = &ctx.shared.fetch_sessions;
    let principal = &ctx.peer.principal;
    let asked = session_request(version, &request);
    let opened = match sessions.open(principal, asked, Instant::now()) {
        Ok(opened) => opened,
        Err(code) => return FetchResponse::default().with_error_code(code),
    };
    let image = ctx.state().cluster.image();
    let names = topic_names(&image, &opened);
    let every: Vec<usize> = (0..opened.partitions.len()).collect();
    let (read, answer) = match with_news(&ctx, &opened, &names, request.isolation_level) {
        // Read those at once; if they hold less than `min_bytes`, read them all with the
        // request's wait, since records may come to any of them.
        Some(news) => {
            let mut native = plan(&request, &opened.partitions, &names, &news);
            native.max_wait_ms = 0;
            let answer = ctx
                .call::<_, m::FetchResponse>(OpCode::Fetch, &native)
                .await;
            match enough(&answer, request.min_bytes) {
                true => (news, answer),
                false => {
                    let native = plan(&request, &opened.partitions, &names, &every);
                    (every, ctx.call(OpCode::Fetch, &native).await)
                }
            }
        }
        None => {
            let native = plan(&request, &opened.partitions, &names, &every);
            (every, ctx.call(OpCode::Fetch, &native).await)
        }
    };
    let mut results = Results::new(answer);
    let mut budget = Budget::new(request.max_bytes);
    let mut answers = Vec::with_capacity(read.len());
    let mut outcomes = Vec::with_capacity(read.len());
    let mut endpoints = Vec::new();
    for &i in &read {
        let (wanted, name) = (&opened.partitions[i], &names[i]);
        let index = wanted.key.index;
        let result = match name {
            Some(name) => results.take(name, index).map(|mut r| {
                r.records = budget.take(r.records, wanted.partition_max_bytes);
                r
            }),
            None => Err((K::UnknownTopicId.code(), "no topic has this id".into())),
        };
        let topic = name.as_deref().unwrap_or("");
        let data = partition_data(&ctx, version, topic, index, result, &mut endpoints);
        outcomes.push(outcome(&data));
        answers.push(data);
    }
    let now = Instant::now();
    let (session_id, include) = sessions.finish(principal, &opened, &read, &outcomes, now);
    let listed = read.iter().zip(answers).zip(include);
    let listed = listed
        .filter_map(|((&i, data), include)| include.then_some((&opened.partitions[i].key, data)));
    let mut response = FetchResponse::default().with_responses(by_topic(&image, listed));
    if version >= 7 {
        response = response
            .with_error_code(results.top_level_code())
            .with_session_id(session_id);
    }
    if version >= 16 {
        response = response.with_node_endpoints(endpoints);
    }
    response
}

/// Bytes of records an answer carries.
pub(crate) fn records_bytes(response: &FetchResponse) -> usize {
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_ref())
        .map(|r| r.len())
        .sum()
}

/// The request's session fields and partitions, named by topic id from v13 and by name before.
fn session_request(version: i16, request: &FetchRequest) -> SessionRequest {
    let topic_ids = version >= 13;
    let topic = |name: &TopicName, id: Uuid| match topic_ids {
        true => TopicRef::Id(id),
        false => TopicRef::Name(name.clone()),
    };
    let partitions = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Wanted {
                key: Key {
                    topic: topic(&t.topic, t.topic_id),
                    index: p.partition,
                },
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
            })
        })
        .collect();
    let forgotten = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|index| Key {
                topic: topic(&t.topic, t.topic_id),
                index: *index,
            })
        })
        .collect();
    SessionRequest {
        session_id: request.session_id,
        epoch: request.session_epoch,
        topic_ids,
        partitions,
        forgotten,
    }
}

/// Each partition's topic name; `None` for a topic id no topic has.
fn topic_names(image: &MetadataImage, opened: &Opened) -> Vec<Option<String>> {
    let by_id = opened.topic_ids.then(|| topic_id::Names::of(image));
    opened
        .partitions
        .iter()
        .map(|w| match (&w.key.topic, &by_id) {
            (TopicRef::Name(name), _) => Some(name.as_str().to_owned()),
            (TopicRef::Id(id), Some(names)) => {
                names.name(&image.cluster_id, *id).map(str::to_owned)
            }
            (TopicRef::Id(_), None) => None,
        })
        .collect()
}

/// In an incremental fetch, the indexes of the partitions of `opened` that may have something
/// to answer: all but the quiet ones, whose log is here, led here, and still says what the
/// session last told (high watermark, last stable offset, log start offset), and whose fetch
/// offset is at its end. `None` when every partition is to be read: not an incremental
/// fetch, or none or all of them quiet.
///
/// A quiet partition is not read, so not authorized again, but nothing is answered for it
/// either; its next read, once its log moves, is (an ACL removed meanwhile refuses it).
fn with_news(
    ctx: &Ctx,
    opened: &Opened,
    names: &[Option<String>],
    isolation: i8,
) -> Option<Vec<usize>> {
    if !matches!(opened.kind, session::Kind::Incremental { .. }) {
        return None;
    }
    let state = ctx.state();
    let unchanged = |i: usize| -> bool {
        let (Some(told), Some(name)) = (opened.last_told[i], names[i].as_deref()) else {
            return false;
        };
        let wanted = &opened.partitions[i];
        let Ok(index) = u32::try_from(wanted.key.index) else {
            return false;
        };
        let Ok((partition, _)) = state.led_partition(name, index) else {
            return false;
        };
        let high_watermark = partition.high_watermark();
        let now = Told {
            high_watermark,
            last_stable_offset: partition.last_stable_offset_at(high_watermark),
            log_start_offset: partition.log.log_start_offset(),
        };
        let end = match isolation {
            1 => now.last_stable_offset,
            _ => now.high_watermark,
        };
        now == told && wanted.fetch_offset == end
    };
    let news: Vec<usize> = (0..opened.partitions.len())
        .filter(|i| !unchanged(*i))
        .collect();
    (!news.is_empty() && news.len() < opened.partitions.len()).then_some(news)
}

/// Whether a native answer read at once is the answer: an error, or `min_bytes` of records.
fn enough(answer: &Result<m::FetchResponse, m::Error>, min_bytes: i32) -> bool {
    let Ok(response) = answer else {
        return true;
    };
    let min_bytes = usize::try_from(min_bytes).unwrap_or(0).max(1);
    let bytes: usize = response.partitions.iter().map(|p| p.records.len()).sum();
    response.error.is_some()
        || response.partitions.iter().any(|p| p.error.is_some())
        || bytes >= min_bytes
}

/// The native request reading the partitions of `partitions` at `read` (topics named by
/// `names`, in the same order as `partitions`).
fn plan(
    request: &FetchRequest,
    partitions: &[Wanted],
    names: &[Option<String>],
    read: &[usize],
) -> m::FetchRequest {
    // min_bytes 0 is Kafka's "answer at once"; the native fetch waits for at least one byte.
    let max_wait_ms = match request.min_bytes {
        ..=0 => 0,
        _ => u32::try_from(request.max_wait_ms).unwrap_or(0),
    };
    let mut native = m::FetchRequest {
        filter: String::new(),
        max_wait_ms,
        min_bytes: u32::try_from(request.min_bytes).unwrap_or(0),
        max_bytes: u32::try_from(request.max_bytes).unwrap_or(0),
        partitions: Vec::with_capacity(read.len()),
        replica_id: 0,
        // Kafka's 0 and 1 are the native ones; anything else the broker refuses.
        isolation_level: u32::try_from(request.isolation_level).unwrap_or(u32::MAX),
    };
    if read.iter().any(|&i| names[i].is_none()) {
        // An unknown topic id is answered UNKNOWN_TOPIC_ID at once, as Kafka does.
        native.max_wait_ms = 0;
    }
    for &i in read {
        let (wanted, name) = (&partitions[i], &names[i]);
        // A negative index, or a topic id no topic has, is answered here.
        let (Some(name), Ok(partition)) = (name, u32::try_from(wanted.key.index)) else {
            continue;
        };
        native.partitions.push(m::FetchPartition {
            topic: name.clone(),
            partition,
            offset: wanted.fetch_offset,
            // Kafka's 0 would mean "nothing"; the native 0 means "the fetch's budget".
            partition_bytes_max: u32::try_from(wanted.partition_max_bytes)
                .unwrap_or(0)
                .max(1),
            ..Default::default()
        });
    }
    native
}

/// What a partition's answer tells its session.
fn outcome(data: &PartitionData) -> Outcome {
    let has_records = data.records.as_ref().is_some_and(|r| !r.is_empty());
    Outcome {
        told: Told {
            high_watermark: data.high_watermark,
            last_stable_offset: data.last_stable_offset,
            log_start_offset: data.log_start_offset,
        },
        error: data.error_code != 0,
        has_records,
    }
}

/// Answered partitions grouped by topic, in order: one entry per run of the same topic, named
/// both ways (the version answered encodes one).
fn by_topic<'a>(
    image: &MetadataImage,
    listed: impl Iterator<Item = (&'a Key, PartitionData)>,
) -> Vec<FetchableTopicResponse> {
    let mut out: Vec<(&'a TopicRef, FetchableTopicResponse)> = Vec::new();
    for (key, data) in listed {
        match out.last_mut() {
            Some((topic, entry)) if *topic == &key.topic => entry.partitions.push(data),
            _ => {
                let entry = match &key.topic {
                    TopicRef::Name(name) => FetchableTopicResponse::default()
                        .with_topic(name.clone())
                        .with_topic_id(topic_id::of_topic(image, name.as_str())),
                    TopicRef::Id(id) => FetchableTopicResponse::default().with_topic_id(*id),
                };
                out.push((&key.topic, entry.with_partitions(vec![data])));
            }
        }
    }
    out.into_iter().map(|(_, entry)| entry).collect()
}

/// The native results, each partition's or the error it gets instead.
struct Results(Answers<m::FetchPartitionResult>);

impl Results {
    fn new(answer: Result<m::FetchResponse, m::Error>) -> Results {
        Results(Answers::new(answer))
    }

    /// The native result for one requested partition, or the error it gets instead.
    fn take(&mut self, topic: &str, index: i32) -> Result<m::FetchPartitionResult, (i16, String)> {
        if let Some(error) = &self.0.failed {
            let code = kafka_code_for(Some(error), Resource::Topic);
            return Err((code, error.message.clone()));
        }
        let Ok(partition) = u32::try_from(index) else {
            let code = K::UnknownTopicOrPartition.code();
            return Err((code, "negative partition index".into()));
        };
        self.0.take(topic, partition).ok_or_else(|| {
            let code = K::UnknownServerError.code();
            (code, "the broker's answer left this partition out".into())
        })
    }

    /// The response-level error code (v7+): set only when the whole request failed.
    fn top_level_code(&self) -> i16 {
        kafka_code_for(self.0.failed.as_ref(), Resource::Topic)
    }
}

/// One partition's Kafka answer; a new leader it names goes to `endpoints` (v16+) with its
/// address, so the client need not refresh its metadata to go there.
fn partition_data(
    ctx: &Ctx,
    version: i16,
    topic: &str,
    index: i32,
    result: Result<m::FetchPartitionResult, (i16, String)>,
    endpoints: &mut Vec<NodeEndpoint>,
) -> PartitionData {
    let data = PartitionData::default()
        .with_partition_index(index)
        .with_aborted_transactions(Some(Vec::new()))
        .with_records(Some(bytes::Bytes::new()));
    let result = match result {
        Ok(result) => result,
        Err((code, _)) => {
            return data
                .with_error_code(code)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
        }
    };
    let code = kafka_code_for(result.error.as_ref(), Resource::Topic);
    let aborted = result
        .aborted_transactions
        .iter()
        .map(|a| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(a.producer_id))
                .with_first_offset(a.first_offset)
        })
        .collect();
    let mut data = data
        .with_error_code(code)
        .with_high_watermark(result.high_watermark)
        .with_last_stable_offset(result.last_stable_offset)
        .with_log_start_offset(result.log_start_offset)
        .with_aborted_transactions(Some(aborted))
        .with_records(Some(result.records));
    if version >= 12 && code == K::NotLeaderOrFollower.code() {
        let named = u32::try_from(index)
            .ok()
            .and_then(|p| leader::named(ctx, topic, p, result.current_leader));
        if let Some((leader, address)) = named {
            let node_id = crate::metadata::broker_id(leader.node_id);
            data = data.with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(node_id)
                    .with_leader_epoch(leader.epoch),
            );
            if let Some((host, port)) = address.filter(|_| version >= 16) {
                if !endpoints.iter().any(|e| e.node_id == node_id) {
                    endpoints.push(
                        NodeEndpoint::default()
                            .with_node_id(node_id)
                            .with_host(StrBytes::from_string(host))
                            .with_port(i32::from(port)),
                    );
                }
            }
        }
    }
    data
}

#[cfg(test)]
mod tests;
