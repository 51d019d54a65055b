//! The checker: reads every partition from its first offset to its end and compares with the
//! ledger. Violations: an acknowledged value missing (lost) or found at another offset than
//! acknowledged (moved), a value stored twice (duplicate), a value never sent (unexpected),
//! and a producer's values out of sequence order on a partition (order).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use tinymq_client::{ClientConfig, Cluster, Consumer, ConsumerConfig, Isolation, StartFrom};

use crate::workload::{parse_value, value_of, Ledger, Outcome};

/// One stored record: partition, offset, value.
pub struct Stored {
    pub partition: u32,
    pub offset: i64,
    pub value: Vec<u8>,
}

/// Reads `topic` from the beginning to each partition's end offset under `isolation` (the
/// high watermark, or the last stable offset under read committed; taken when the read
/// starts, after the producers stopped), within `limit`.
pub async fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    isolation: Isolation,
    limit: Duration,
) -> Result<Vec<Stored>> {
    let mut config = ConsumerConfig::new(bootstrap);
    config.start_from = StartFrom::Earliest;
    config.auto_commit_interval = None;
    config.isolation = isolation;
    let mut consumer = Consumer::new(config)?;
    consumer.assign(topic, None).await?;
    let deadline = Instant::now() + limit;
    let cluster = Cluster::new(ClientConfig::new(bootstrap))?;
    let mut ends = Vec::new();
    for p in 0..partitions {
        ends.push(end_offset(&cluster, topic, p, isolation, deadline).await?);
    }
    let mut out = Vec::new();
    loop {
        let done = (0..partitions).all(|p| {
            consumer
                .position(topic, p)
                .is_some_and(|pos| pos >= ends[p as usize])
        });
        if done {
            return Ok(out);
        }
        if Instant::now() > deadline {
            let at: Vec<_> = (0..partitions)
                .map(|p| consumer.position(topic, p))
                .collect();
            bail!("read back incomplete after {limit:?}: positions {at:?}, ends {ends:?}");
        }
        for r in consumer.poll(Duration::from_millis(500)).await? {
            if r.offset < ends[r.partition as usize] {
                out.push(Stored {
                    partition: r.partition,
                    offset: r.offset,
                    value: r.value.map(|v| v.to_vec()).unwrap_or_default(),
                });
            }
        }
    }
}

/// `topic`/`p`'s end under `isolation`, retried until `deadline`.
pub async fn end_offset(
    c: &Cluster,
    topic: &str,
    p: u32,
    isolation: Isolation,
    deadline: Instant,
) -> Result<i64> {
    loop {
        match c
            .list_offset_isolated(topic, p, -1, isolation.level())
            .await
        {
            Ok(end) => return Ok(end),
            Err(e) if Instant::now() > deadline => bail!("end offset of {topic}/{p}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// What the checker found.
#[derive(Default)]
pub struct Verdict {
    pub sent: usize,
    pub acked: usize,
    pub failed: usize,
    pub unanswered: usize,
    /// The most common reasons sends failed, with counts.
    pub failure_reasons: Vec<(usize, String)>,
    pub read: usize,
    /// Values sent but not acknowledged that were stored anyway (allowed).
    pub unacked_stored: usize,
    pub lost: Vec<String>,
    pub moved: Vec<String>,
    pub duplicates: Vec<String>,
    pub unexpected: Vec<String>,
    pub order: Vec<String>,
}

impl Verdict {
    pub fn violations(&self) -> usize {
        self.lost.len()
            + self.moved.len()
            + self.duplicates.len()
            + self.unexpected.len()
            + self.order.len()
    }
}

pub fn check(ledger: &Ledger, stored: &[Stored]) -> Verdict {
    let values = ledger.values.lock();
    let mut v = Verdict {
        sent: values.len(),
        read: stored.len(),
        ..Verdict::default()
    };
    let mut reasons: HashMap<&str, usize> = HashMap::new();
    for o in values.values() {
        match o {
            Outcome::Acked { .. } => v.acked += 1,
            Outcome::Failed(why) => {
                v.failed += 1;
                *reasons.entry(why.as_str()).or_default() += 1;
            }
            Outcome::Pending => v.unanswered += 1,
        }
    }
    v.failure_reasons = reasons
        .into_iter()
        .map(|(r, n)| (n, r.to_string()))
        .collect();
    v.failure_reasons.sort_unstable_by(|a, b| b.cmp(a));
    v.failure_reasons.truncate(3);
    let mut by_partition: BTreeMap<u32, Vec<&Stored>> = BTreeMap::new();
    for s in stored {
        by_partition.entry(s.partition).or_default().push(s);
    }
    let mut seen: HashMap<(u32, u64), (u32, i64)> = HashMap::new();
    for (partition, mut records) in by_partition {
        records.sort_by_key(|s| s.offset);
        let mut last: HashMap<u32, u64> = HashMap::new();
        for s in records {
            let text = String::from_utf8_lossy(&s.value).into_owned();
            let where_ = format!("{text} at {partition}/{}", s.offset);
            let Some(key) = parse_value(&s.value).filter(|k| values.contains_key(k)) else {
                v.unexpected.push(where_);
                continue;
            };
            if let Some((p0, o0)) = seen.insert(key, (partition, s.offset)) {
                v.duplicates.push(format!("{where_}, also at {p0}/{o0}"));
                continue;
            }
            if let Some(prev) = last.insert(key.0, key.1) {
                if prev > key.1 {
                    let before = value_of(key.0, prev);
                    v.order.push(format!("{where_} after {before}"));
                }
            }
            match values.get(&key) {
                Some(Outcome::Acked {
                    partition: ap,
                    offset: ao,
                    ..
                }) if (*ap, *ao) != (partition, s.offset) => {
                    v.moved.push(format!("{where_}, acknowledged at {ap}/{ao}"))
                }
                Some(Outcome::Acked { .. }) => {}
                _ => v.unacked_stored += 1,
            }
        }
    }
    for (key, o) in values.iter() {
        if let Outcome::Acked {
            partition, offset, ..
        } = o
        {
            if !seen.contains_key(key) {
                let value = value_of(key.0, key.1);
                v.lost
                    .push(format!("{value} acknowledged at {partition}/{offset}"));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(partition: u32, offset: i64, value: &str) -> Stored {
        Stored {
            partition,
            offset,
            value: value.as_bytes().to_vec(),
        }
    }

    fn acked(ledger: &Ledger, key: (u32, u64), partition: u32, offset: i64) {
        let at = Instant::now();
        ledger.values.lock().insert(
            key,
            Outcome::Acked {
                partition,
                offset,
                at,
            },
        );
    }

    #[test]
    fn a_clean_log_has_no_violations_and_each_kind_is_caught() {
        let ledger = Ledger::default();
        acked(&ledger, (0, 0), 0, 0);
        acked(&ledger, (0, 2), 0, 1);
        acked(&ledger, (0, 4), 0, 2);
        ledger
            .values
            .lock()
            .insert((1, 0), Outcome::Failed("timeout".into()));
        let clean = [
            stored(0, 0, "p0-0"),
            stored(0, 1, "p0-2"),
            stored(0, 2, "p0-4"),
            stored(0, 3, "p1-0"),
        ];
        let v = check(&ledger, &clean);
        assert_eq!(v.violations(), 0);
        assert_eq!((v.acked, v.failed, v.unacked_stored), (3, 1, 1));

        let bad = [
            stored(0, 0, "p0-0"),
            stored(0, 1, "p0-4"),
            stored(0, 2, "p0-0"),
            stored(0, 3, "p9-1"),
            stored(0, 4, "p1-0"),
        ];
        let v = check(&ledger, &bad);
        assert_eq!(v.lost, vec!["p0-2 acknowledged at 0/1"]);
        assert_eq!(v.duplicates.len(), 1);
        assert_eq!(v.unexpected, vec!["p9-1 at 0/3"]);
        assert_eq!(v.moved, vec!["p0-4 at 0/1, acknowledged at 0/2"]);
        assert!(v.order.is_empty());

        let reordered = [stored(0, 0, "p0-2"), stored(0, 1, "p0-0")];
        let v = check(&ledger, &reordered);
        assert_eq!(v.order, vec!["p0-0 at 0/1 after p0-2"]);
    }
}
