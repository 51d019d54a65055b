//! A route's progress on one source partition, kept like a consumer group's offsets: the
//! group [`progress_group`] commits, for the source partition, the next source offset to read
//! and, in the commit's metadata ([`Checkpoint`]), where in the target a copy made after that
//! commit can be found. After a crash, [`scan_copies`] reads the target from there for the
//! route's origin headers, so what was copied but not yet committed is skipped, not copied
//! again (docs/queues.md, "Routes", the exactly-once argument).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinymq_client::{ClientConfig, ClientError, Consumer, ConsumerConfig, StartFrom};
use tinymq_protocol::names::GROUP_ID_BYTES_MAX;

use crate::route::registry::RouteError;

/// Origin header: the route's name.
pub const ORIGIN_NAME: &str = "tinymq.route.name";
/// Origin header: the source partition (decimal).
pub const ORIGIN_PARTITION: &str = "tinymq.route.partition";
/// Origin header: the source offset (decimal).
pub const ORIGIN_OFFSET: &str = "tinymq.route.offset";
/// Origin header: `<route id>.<run>`, the runner attempt that made the copy. The recovery
/// scan trusts only copies of the run its checkpoint names, so a record written to the
/// target by anything else (a client faking the other headers, a replayed copy, a route of
/// the same name created earlier) does not move the route's position.
pub const ORIGIN_RUN: &str = "tinymq.route.run";

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
    /// high watermark when the runner started, then one past the last acknowledged copy (or
    /// the target's high watermark at a periodic refresh).
    pub scan_from: i64,
    /// The broker whose runner committed; another broker's runner may still have copies in
    /// flight when leadership moves, so its successor waits before scanning.
    pub broker: u32,
    /// The run (a random number drawn by each runner attempt) whose copies follow this
    /// commit; 0 in checkpoints written before runs existed (any copy of the route counts).
    #[serde(default)]
    pub run: u64,
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
pub fn origin_headers(
    (name, route_id, run): (&str, u64, u64),
    partition: u32,
    offset: i64,
) -> [(String, String); 4] {
    [
        (ORIGIN_NAME.to_string(), name.to_string()),
        (ORIGIN_PARTITION.to_string(), partition.to_string()),
        (ORIGIN_OFFSET.to_string(), offset.to_string()),
        (ORIGIN_RUN.to_string(), format!("{route_id}.{run}")),
    ]
}

/// Which copies the recovery scan counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Only those of this run of this route (a checkpoint names the run).
    Run { route_id: u64, run: u64 },
    /// Those of any run of this route id (no progress is committed).
    Route { route_id: u64 },
    /// Any copy naming the route (a checkpoint from before runs existed).
    Any,
}

impl Trust {
    fn accepts(self, run_header: Option<&str>) -> bool {
        match self {
            Trust::Run { route_id, run } => run_header == Some(&format!("{route_id}.{run}")),
            Trust::Route { route_id } => run_header
                .and_then(|r| r.split_once('.'))
                .is_some_and(|(id, _)| id == route_id.to_string()),
            Trust::Any => true,
        }
    }
}

/// The source offset a record is a copy of, if it is a copy by route `name` of source
/// partition `partition` that `trust` accepts. The last origin headers count: a copy of a
/// copy (routes chained through topics) carries the earlier route's headers before its own.
pub fn copied_offset(
    headers: &[(String, Option<bytes::Bytes>)],
    (name, partition): (&str, u32),
    trust: Trust,
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
    if !trust.accepts(last(ORIGIN_RUN)) {
        return None;
    }
    last(ORIGIN_OFFSET)?.parse().ok()
}

/// How long one poll of the recovery scan waits.
const SCAN_POLL: Duration = Duration::from_millis(500);
/// Polls in a row that return nothing before a scan that has not reached its end gives up
/// (the target's leader is unreachable): the runner retries later.
const SCAN_EMPTY_POLLS_MAX: u32 = 20;

/// What a recovery scan looks for: copies by route `name` of `source_partition` that
/// `trust` accepts, of source offsets below `source_end` (the source's high watermark: a
/// copy claiming a later offset cannot be genuine and is ignored).
#[derive(Debug, Clone, Copy)]
pub struct ScanFor<'a> {
    pub name: &'a str,
    pub source_partition: u32,
    pub trust: Trust,
    pub source_end: i64,
}

/// Reads target partition `target_partition` of `to` from `from_offset` up to `end` and
/// returns the highest source offset copied there that `wanted` describes.
pub async fn scan_copies(
    client: ClientConfig,
    to: &str,
    target_partition: u32,
    (from_offset, end): (i64, i64),
    wanted: ScanFor<'_>,
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
            let copied = copied_offset(
                &record.headers,
                (wanted.name, wanted.source_partition),
                wanted.trust,
            );
            if let Some(offset) = copied.filter(|o| (0..wanted.source_end).contains(o)) {
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
        let own = origin_headers(("eu", 5, 77), 3, 42);
        let own: Vec<(&str, &str)> = own.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let run = Trust::Run {
            route_id: 5,
            run: 77,
        };
        assert_eq!(copied_offset(&headers(&own), ("eu", 3), run), Some(42));
        assert_eq!(copied_offset(&headers(&own), ("us", 3), run), None);
        assert_eq!(copied_offset(&headers(&own), ("eu", 4), run), None);
        assert_eq!(
            copied_offset(&headers(&[("tag", "red")]), ("eu", 3), run),
            None
        );
        let bad = [
            (ORIGIN_NAME, "eu"),
            (ORIGIN_PARTITION, "3"),
            (ORIGIN_OFFSET, "x"),
        ];
        assert_eq!(copied_offset(&headers(&bad), ("eu", 3), Trust::Any), None);
    }

    #[test]
    fn only_copies_of_the_trusted_run_or_route_count() {
        let own = origin_headers(("eu", 5, 77), 3, 42);
        let own: Vec<(&str, &str)> = own.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let other_run = Trust::Run {
            route_id: 5,
            run: 78,
        };
        assert_eq!(copied_offset(&headers(&own), ("eu", 3), other_run), None);
        let other_route = Trust::Route { route_id: 6 };
        assert_eq!(copied_offset(&headers(&own), ("eu", 3), other_route), None);
        let route = Trust::Route { route_id: 5 };
        assert_eq!(copied_offset(&headers(&own), ("eu", 3), route), Some(42));
        // A record faking the first three headers (no run) counts only for old checkpoints.
        let fake = [
            (ORIGIN_NAME, "eu"),
            (ORIGIN_PARTITION, "3"),
            (ORIGIN_OFFSET, "999999999"),
        ];
        assert_eq!(copied_offset(&headers(&fake), ("eu", 3), route), None);
        assert_eq!(
            copied_offset(&headers(&fake), ("eu", 3), Trust::Any),
            Some(999999999)
        );
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
        assert_eq!(
            copied_offset(&headers(&chained), ("second", 1), Trust::Any),
            Some(9)
        );
        assert_eq!(
            copied_offset(&headers(&chained), ("first", 0), Trust::Any),
            None
        );
    }

    #[test]
    fn checkpoints_round_trip_and_foreign_metadata_is_none() {
        let c = Checkpoint {
            target_partition: 2,
            scan_from: 1234,
            broker: 7,
            run: 99,
        };
        assert_eq!(Checkpoint::from_metadata(&c.to_metadata()), Some(c));
        let old = r#"{"target_partition":2,"scan_from":1234,"broker":7}"#;
        assert_eq!(Checkpoint::from_metadata(old).map(|c| c.run), Some(0));
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
