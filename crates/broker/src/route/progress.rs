//! A route's progress on one source partition, kept like a consumer group's offsets: the
//! group [`progress_group`] commits, for the source partition, the next source offset to read
//! and, in the commit's metadata ([`Checkpoint`]), where in the target a copy made after that
//! commit can be found. After a crash, [`scan_copies`] reads the target from there for the
//! route's origin headers, so what was copied but not yet committed is skipped, not copied
//! again (docs/queues.md, "Routes", the exactly-once argument).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinymq_client::{ClientConfig, ClientError, Consumer, ConsumerConfig, StartFrom};

use crate::route::RouteError;

/// Origin header: the route's name.
pub const ORIGIN_NAME: &str = "tinymq.route.name";
/// Origin header: the source partition (decimal).
pub const ORIGIN_PARTITION: &str = "tinymq.route.partition";
/// Origin header: the source offset (decimal).
pub const ORIGIN_OFFSET: &str = "tinymq.route.offset";

/// Longest group id (the broker's `GROUP_ID_BYTES_MAX`).
const GROUP_ID_BYTES_MAX: usize = crate::group::GROUP_ID_BYTES_MAX;

/// The consumer group holding a route's progress: `__route.<id>.<name>`, cut to the longest
/// group id. The id comes first, so a cut name still names one route, and a route created
/// again under its name starts afresh.
pub fn progress_group(route_id: u64, name: &str) -> String {
    let mut group = format!("__route.{route_id}.{name}");
    // Route names are ASCII, so any byte index is a character boundary.
    group.truncate(GROUP_ID_BYTES_MAX);
    group
}

/// The metadata of a progress commit (JSON in the committed offset's metadata string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The target partition the runner copied into.
    pub target_partition: u32,
    /// Every copy made after this commit is at or after this target offset: the target's
    /// log end when the runner started, then one past the last acknowledged copy.
    pub scan_from: i64,
    /// The broker whose runner committed; another broker's runner may still have copies in
    /// flight when leadership moves, so its successor waits before scanning.
    pub broker: u32,
}

impl Checkpoint {
    pub fn to_metadata(self) -> String {
        serde_json::to_string(&self).unwrap_or_default()
    }

    /// `None` for metadata written by something else (`group reset-offsets` writes "reset"):
    /// the committed offset is then taken as it is, without a scan.
    pub fn from_metadata(metadata: &str) -> Option<Checkpoint> {
        serde_json::from_str(metadata).ok()
    }
}

/// The origin headers of a copy of `offset` of source partition `partition`.
pub fn origin_headers(name: &str, partition: u32, offset: i64) -> [(String, String); 3] {
    [
        (ORIGIN_NAME.to_string(), name.to_string()),
        (ORIGIN_PARTITION.to_string(), partition.to_string()),
        (ORIGIN_OFFSET.to_string(), offset.to_string()),
    ]
}

/// The source offset a record is a copy of, if it is a copy by route `name` of source
/// partition `partition`. The last origin headers count: a copy of a copy (routes chained
/// through topics) carries the earlier route's headers before its own.
pub fn copied_offset(
    headers: &[(String, Option<bytes::Bytes>)],
    name: &str,
    partition: u32,
) -> Option<i64> {
    let last = |key: &str| {
        headers
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    if last(ORIGIN_NAME)? != name || last(ORIGIN_PARTITION)?.parse::<u32>().ok()? != partition {
        return None;
    }
    last(ORIGIN_OFFSET)?.parse().ok()
}

/// How long one poll of the recovery scan waits.
const SCAN_POLL: Duration = Duration::from_millis(500);
/// Polls in a row that return nothing before a scan that has not reached its end gives up
/// (the target's leader is unreachable): the runner retries later.
const SCAN_EMPTY_POLLS_MAX: u32 = 20;

/// Reads target partition `target_partition` of `to` from `from_offset` up to `end` and
/// returns the highest source offset copied there by route `name` from `source_partition`.
pub async fn scan_copies(
    client: ClientConfig,
    to: &str,
    target_partition: u32,
    (from_offset, end): (i64, i64),
    (name, source_partition): (&str, u32),
) -> Result<Option<i64>, RouteError> {
    if from_offset >= end {
        return Ok(None);
    }
    let mut config = ConsumerConfig::new("");
    config.client = client;
    config.start_from = StartFrom::Earliest;
    config.auto_commit_interval = None;
    config.max_bytes = crate::route::runner::FETCH_BYTES_MAX;
    config.partition_bytes_max = crate::route::runner::FETCH_BYTES_MAX;
    let mut consumer = Consumer::new(config)?;
    consumer.assign(to, Some(vec![target_partition])).await?;
    consumer.seek(to, target_partition, from_offset)?;
    let mut highest = None;
    let mut empty_polls = 0;
    while consumer
        .position(to, target_partition)
        .unwrap_or(from_offset)
        < end
    {
        let records = consumer.poll(SCAN_POLL).await?;
        if records.is_empty() {
            empty_polls += 1;
            if empty_polls >= SCAN_EMPTY_POLLS_MAX {
                return Err(RouteError::Client(ClientError::Protocol(format!(
                    "the recovery scan of {to}/{target_partition} stopped short of offset {end}"
                ))));
            }
            continue;
        }
        empty_polls = 0;
        for record in records.iter().filter(|r| r.offset < end) {
            if let Some(offset) = copied_offset(&record.headers, name, source_partition) {
                highest = highest.max(Some(offset));
            }
        }
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, Option<bytes::Bytes>)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Some(bytes::Bytes::from(v.to_string()))))
            .collect()
    }

    #[test]
    fn a_copy_names_its_route_partition_and_offset() {
        let own = origin_headers("eu", 3, 42).map(|(k, v)| (k, v));
        let own: Vec<(&str, &str)> = own.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(copied_offset(&headers(&own), "eu", 3), Some(42));
        assert_eq!(copied_offset(&headers(&own), "us", 3), None);
        assert_eq!(copied_offset(&headers(&own), "eu", 4), None);
        assert_eq!(copied_offset(&headers(&[("tag", "red")]), "eu", 3), None);
        let bad = [
            (ORIGIN_NAME, "eu"),
            (ORIGIN_PARTITION, "3"),
            (ORIGIN_OFFSET, "x"),
        ];
        assert_eq!(copied_offset(&headers(&bad), "eu", 3), None);
    }

    #[test]
    fn the_last_origin_headers_count_for_a_copy_of_a_copy() {
        let chained = [
            (ORIGIN_NAME, "first"),
            (ORIGIN_PARTITION, "0"),
            (ORIGIN_OFFSET, "7"),
            (ORIGIN_NAME, "second"),
            (ORIGIN_PARTITION, "1"),
            (ORIGIN_OFFSET, "9"),
        ];
        assert_eq!(copied_offset(&headers(&chained), "second", 1), Some(9));
        assert_eq!(copied_offset(&headers(&chained), "first", 0), None);
    }

    #[test]
    fn checkpoints_round_trip_and_foreign_metadata_is_none() {
        let c = Checkpoint {
            target_partition: 2,
            scan_from: 1234,
            broker: 7,
        };
        assert_eq!(Checkpoint::from_metadata(&c.to_metadata()), Some(c));
        assert_eq!(Checkpoint::from_metadata("reset"), None);
        assert_eq!(Checkpoint::from_metadata(""), None);
    }

    #[test]
    fn progress_groups_are_valid_group_ids_naming_the_route_id_first() {
        assert_eq!(progress_group(5, "eu"), "__route.5.eu");
        let long = progress_group(u64::MAX, &"n".repeat(249));
        assert_eq!(long.len(), GROUP_ID_BYTES_MAX);
        assert!(long.starts_with(&format!("__route.{}.", u64::MAX)));
        crate::group::validate_group_id(&long).unwrap();
    }
}
