//! Raw-protocol helpers of the share-group process tests (`share_protocol.rs`,
//! `share_durability.rs`): topics, produce, ShareFetch and ShareAcknowledge calls, decoding
//! what a member was handed.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_filter::decode_sparse;
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::common::RawClient;

pub const ACCEPT: u32 = 1;
pub const RELEASE: u32 = 2;
pub const REJECT: u32 = 3;

pub fn code(e: ErrorCode) -> u32 {
    u32::from(e.code())
}

pub fn error_of(e: &Option<m::Error>) -> u32 {
    e.as_ref().map_or(0, |e| e.code)
}

pub fn create(c: &mut RawClient, name: &str, partitions: u32) {
    let r = c.call(&m::CreateTopicRequest {
        name: name.into(),
        config: Some(m::TopicConfig {
            partitions,
            ..Default::default()
        }),
        validate_only: false,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
}

pub fn set_config(c: &mut RawClient, topic: &str, key: &str, value: &str) {
    let r = c.call(&m::AlterTopicConfigRequest {
        name: topic.into(),
        set: vec![m::TopicSetting {
            key: key.into(),
            value: value.into(),
        }],
        unset: vec![],
        validate_only: false,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
}

/// Produces values `v{first}..v{first+count}` in batches of `per_batch`, each with header
/// `h: x`.
pub fn produce(c: &mut RawClient, topic: &str, first: usize, count: usize, per_batch: usize) {
    produce_tagged(c, topic, first, count, per_batch, |_| "none");
}

/// [`produce`] with a `tag` header chosen by the record's number.
pub fn produce_tagged(
    c: &mut RawClient,
    topic: &str,
    first: usize,
    count: usize,
    per_batch: usize,
    tag: impl Fn(usize) -> &'static str,
) {
    let numbers: Vec<usize> = (first..first + count).collect();
    for chunk in numbers.chunks(per_batch) {
        let mut b = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        for &i in chunk {
            let value = format!("v{i}");
            b.push(&RecordInput {
                timestamp_ms: 1_700_000_000_000,
                key: Some(b"k"),
                value: Some(value.as_bytes()),
                headers: &[("h", Some(b"x")), ("tag", Some(tag(i).as_bytes()))],
            });
        }
        let r = c.call(&m::ProduceRequest {
            acks: -1,
            timeout_ms: 10_000,
            partitions: vec![m::ProducePartition {
                topic: topic.into(),
                partition: 0,
                records: b.build().unwrap(),
            }],
            transactional_id: String::new(),
        });
        assert_eq!(
            error_of(&r.partitions[0].error),
            0,
            "{:?}",
            r.partitions[0].error
        );
    }
}

pub fn ack(topic: &str, first: i64, last: i64, kind: u32) -> m::ShareAcknowledgement {
    m::ShareAcknowledgement {
        topic: topic.into(),
        partition: 0,
        first_offset: first,
        last_offset: last,
        kind,
    }
}

pub struct Fetch<'a> {
    pub group: &'a str,
    pub member: &'a str,
    pub topic: &'a str,
    pub max_records: u32,
    pub lock_ms: u32,
    pub wait_ms: u32,
}

impl Fetch<'_> {
    pub fn request(&self, acks: Vec<m::ShareAcknowledgement>) -> m::ShareFetchRequest {
        m::ShareFetchRequest {
            group_id: self.group.into(),
            member_id: self.member.into(),
            partitions: vec![m::ShareFetchPartition {
                topic: self.topic.into(),
                partition: 0,
            }],
            max_wait_ms: self.wait_ms,
            max_records: self.max_records,
            lock_ms: self.lock_ms,
            acknowledgements: acks,
            ..Default::default()
        }
    }

    /// The delivered records: (offset, value, delivery count).
    pub fn call(
        &self,
        c: &mut RawClient,
        acks: Vec<m::ShareAcknowledgement>,
    ) -> Vec<(i64, String, u32)> {
        let r = c.call(&self.request(acks));
        assert!(r.error.is_none(), "{:?}", r.error);
        let p = &r.partitions[0];
        assert_eq!(error_of(&p.error), 0, "{:?}", p.error);
        assert_eq!(
            error_of(&p.acknowledge_error),
            0,
            "{:?}",
            p.acknowledge_error
        );
        delivered(p)
    }
}

/// The acquired records of a result, decoded from its batches.
pub fn delivered(p: &m::ShareFetchPartitionResult) -> Vec<(i64, String, u32)> {
    let count_of = |offset: i64| {
        p.acquired
            .iter()
            .find(|r| (r.first_offset..=r.last_offset).contains(&offset))
            .map(|r| r.delivery_count)
    };
    let mut out = Vec::new();
    for batch in BatchIter::new(p.records.clone()) {
        // Filtered answers hold batches with offset gaps.
        for record in decode_sparse(&batch.unwrap(), 1 << 20).unwrap() {
            if let Some(count) = count_of(record.offset) {
                let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
                out.push((record.offset, value, count));
            }
        }
    }
    let acquired: i64 = p
        .acquired
        .iter()
        .map(|r| r.last_offset - r.first_offset + 1)
        .sum();
    assert_eq!(
        out.len() as i64,
        acquired,
        "every acquired record is in the batches"
    );
    out
}

pub fn acknowledge(
    c: &mut RawClient,
    group: &str,
    member: &str,
    acks: Vec<m::ShareAcknowledgement>,
) -> Vec<u32> {
    let r = c.call(&m::ShareAcknowledgeRequest {
        group_id: group.into(),
        member_id: member.into(),
        acknowledgements: acks,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
    r.results.iter().map(|r| error_of(&r.error)).collect()
}

pub fn offsets(records: &[(i64, String, u32)]) -> Vec<i64> {
    records.iter().map(|r| r.0).collect()
}

/// The records of `topic`/0 from offset 0 (plain fetch), with their headers.
pub fn read_topic(c: &mut RawClient, topic: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let r = c.call(&m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![m::FetchPartition {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            ..Default::default()
        }],
        ..Default::default()
    });
    let records: Bytes = r
        .partitions
        .first()
        .map(|p| p.records.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    for batch in BatchIter::new(records) {
        for record in batch.unwrap().records(1 << 20).unwrap() {
            let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
            let headers = record
                .headers
                .into_iter()
                .map(|h| (h.key, String::from_utf8(h.value.unwrap().to_vec()).unwrap()))
                .collect();
            out.push((value, headers));
        }
    }
    out
}

/// Waits (up to 20 s) until `topic` holds `count` records, and returns them.
pub fn await_records(
    c: &mut RawClient,
    topic: &str,
    count: usize,
) -> Vec<(String, BTreeMap<String, String>)> {
    let start = Instant::now();
    loop {
        let got = read_topic(c, topic);
        if got.len() >= count || start.elapsed() > Duration::from_secs(20) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
