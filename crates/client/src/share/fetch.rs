//! The member's requests: one long-polling `ShareFetch` per partition leader at a time,
//! carrying the acknowledgements queued for that leader's partitions; a `ShareAcknowledge`
//! for acknowledgements queued while that leader's fetch is in flight; and route refreshes.
//! All run as background tasks that outlive a `poll`, so one leader that hangs holds up only
//! its own partitions and a cancelled `poll` loses no answer.
//!
//! A partition whose leader cannot be reached, has none, or says it is not the leader waits
//! out a growing backoff (and its topic's routes are fetched again); routes are also fetched
//! every [`ROUTE_REFRESH_INTERVAL`](super::ROUTE_REFRESH_INTERVAL), so new partitions and
//! moved leaders are followed. Acknowledgements lost with a connection are reported as
//! failures (their records come back when their locks expire, if they were not applied).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_protocol::{messages as m, ErrorCode};

use super::ack_requests::{ack_outcomes, server_error, wire_acks};
use super::acks::{AckKind, AckRange, PartitionKey};
use super::decode::decode_acquired;
use super::{AckFailure, Backoff, Buffered, ShareConsumer, ROUTE_REFRESH_INTERVAL};
use crate::error::{check, ClientError};
use crate::retry::{RETRY_BACKOFF, RETRY_BACKOFF_MAX};

/// How long past its long-poll wait a fetch may stay unanswered before the route is checked
/// (and the fetch given up if another node names a new leader).
pub const SHARE_FETCH_CHECK_MARGIN: Duration = Duration::from_secs(2);

/// The leader address of each partition of a topic (`None`: offline), from its route.
pub(super) type Leaders = Vec<Option<String>>;

/// A finished background request.
pub(super) enum Answer {
    Fetched {
        leader: String,
        sent_at: Instant,
        asked: Vec<PartitionKey>,
        acks: Vec<AckRange>,
        result: Result<m::ShareFetchResponse, ClientError>,
    },
    Acknowledged {
        acks: Vec<AckRange>,
        result: Result<m::ShareAcknowledgeResponse, ClientError>,
    },
    Routes {
        topic: String,
        result: Result<Arc<crate::cluster::TopicRoute>, ClientError>,
    },
}

/// The partitions of `topics` to fetch now, grouped by leader address, and those without a
/// leader in their route (a refresh is due for their topics). Partitions in `backoff` until
/// after `now` are left out.
pub(super) fn plan_by_leader(
    topics: &[String],
    routes: &HashMap<String, Leaders>,
    backoff: &HashMap<PartitionKey, Backoff>,
    now: Instant,
) -> (BTreeMap<String, Vec<PartitionKey>>, Vec<PartitionKey>) {
    let mut by_leader: BTreeMap<String, Vec<PartitionKey>> = BTreeMap::new();
    let mut leaderless = Vec::new();
    for topic in topics {
        let Some(route) = routes.get(topic) else {
            continue;
        };
        for (partition, leader) in route.iter().enumerate() {
            let key = (topic.clone(), partition as u32);
            if backoff.get(&key).is_some_and(|b| b.retry_at > now) {
                continue;
            }
            match leader {
                Some(addr) => by_leader.entry(addr.clone()).or_default().push(key),
                None => leaderless.push(key),
            }
        }
    }
    (by_leader, leaderless)
}

/// The leader address of a partition by `routes`, if known.
pub(super) fn leader_of<'a>(
    routes: &'a HashMap<String, Leaders>,
    key: &PartitionKey,
) -> Option<&'a str> {
    routes.get(&key.0)?.get(key.1 as usize)?.as_deref()
}

impl ShareConsumer {
    /// Starts what is due: route refreshes, a fetch per idle leader (with its queued acks),
    /// and an acknowledgement request per busy leader with acks queued.
    pub(super) fn start_due(&mut self, wait: Duration) {
        let now = Instant::now();
        if self.routes_fetched.elapsed() >= ROUTE_REFRESH_INTERVAL {
            self.routes_fetched = now;
            self.stale.extend(self.topics.iter().cloned());
        }
        for topic in std::mem::take(&mut self.stale) {
            self.start_refresh(topic);
        }
        let (by_leader, leaderless) =
            plan_by_leader(&self.topics, &self.routes, &self.backoff, now);
        for key in leaderless {
            let e = ClientError::Server {
                code: ErrorCode::LEADER_NOT_AVAILABLE,
                message: format!("{}/{} has no live leader", key.0, key.1),
            };
            self.partition_failed(&key, &e);
        }
        for (leader, asked) in by_leader {
            if !self.fetching.contains(&leader) {
                self.start_fetch(leader, asked, wait);
            }
        }
        // Acks for leaders busy with a fetch go now rather than after its long poll.
        if !self.acks.is_empty() {
            let routes = &self.routes;
            let fetching = &self.fetching;
            let acks = self
                .acks
                .take(|k| leader_of(routes, k).is_some_and(|l| fetching.contains(l)));
            self.start_acknowledge(acks);
        }
    }

    fn start_refresh(&mut self, topic: String) {
        if !self.refreshing.insert(topic.clone()) {
            return;
        }
        let cluster = self.cluster.clone();
        self.in_flight.spawn(async move {
            let result = cluster.refresh(&topic).await;
            Answer::Routes { topic, result }
        });
    }

    fn start_fetch(&mut self, leader: String, asked: Vec<PartitionKey>, wait: Duration) {
        let routes = &self.routes;
        let acks = self
            .acks
            .take(|k| leader_of(routes, k) == Some(leader.as_str()));
        let request = m::ShareFetchRequest {
            group_id: self.config.group.clone(),
            member_id: self.config.member_id.clone(),
            partitions: asked
                .iter()
                .map(|(topic, partition)| m::ShareFetchPartition {
                    topic: topic.clone(),
                    partition: *partition,
                })
                .collect(),
            max_wait_ms: wait.as_millis().min(u128::from(u32::MAX)) as u32,
            max_records: self.config.max_records,
            max_bytes: self.config.max_bytes,
            lock_ms: self.config.lock_ms,
            filter: self.config.filter.clone().unwrap_or_default(),
            acknowledgements: wire_acks(&acks),
        };
        self.fetching.insert(leader.clone());
        let cluster = self.cluster.clone();
        let timeout = wait + self.config.client.request_timeout;
        let first_check = wait + SHARE_FETCH_CHECK_MARGIN;
        let sent_at = Instant::now();
        self.in_flight.spawn(async move {
            let result = match cluster.connection(&leader).await {
                // Giving a fetch up when the leader moved is safe: what it acquired comes back
                // when the locks expire. Its acks are then reported as not known to apply.
                Ok(connection) => tokio::select! {
                    r = connection.request(&request, timeout) => r,
                    moved = cluster.leader_moved(&asked, &leader, first_check) => Err(moved),
                },
                Err(e) => Err(e),
            };
            Answer::Fetched {
                leader,
                sent_at,
                asked,
                acks,
                result,
            }
        });
    }

    pub(super) fn apply_joined(
        &mut self,
        joined: Result<Answer, tokio::task::JoinError>,
    ) -> Result<(), ClientError> {
        let answer = joined.map_err(|e| ClientError::Protocol(e.to_string()))?;
        match answer {
            Answer::Routes { topic, result } => {
                self.refreshing.remove(&topic);
                match result {
                    Ok(route) => {
                        self.routes.insert(topic, route.leaders.clone());
                    }
                    Err(e) if e.is_retriable() => {
                        tracing::debug!(%topic, error = %e, "route refresh failed; keeping the old routes")
                    }
                    Err(e) => return Err(e),
                }
                Ok(())
            }
            Answer::Acknowledged { acks, result } => {
                let failures = ack_outcomes(acks, result);
                self.note_ack_failures(failures);
                Ok(())
            }
            Answer::Fetched {
                leader,
                sent_at,
                asked,
                acks,
                result,
            } => {
                self.fetching.remove(&leader);
                self.apply_fetch(sent_at, asked, acks, result)
            }
        }
    }

    fn note_ack_failures(&mut self, failures: Vec<AckFailure>) {
        for f in &failures {
            if f.error.needs_metadata_refresh() {
                self.stale.insert(f.range.topic.clone());
            }
            tracing::warn!(topic = %f.range.topic, partition = f.range.partition,
                first = f.range.first_offset, last = f.range.last_offset,
                kind = f.range.kind.name(), error = %f.error, "acknowledgement not applied");
        }
        self.record_failures(failures);
    }

    fn apply_fetch(
        &mut self,
        sent_at: Instant,
        asked: Vec<PartitionKey>,
        acks: Vec<AckRange>,
        result: Result<m::ShareFetchResponse, ClientError>,
    ) -> Result<(), ClientError> {
        let response = match result {
            Ok(response) => response,
            Err(e) => {
                let failures = acks
                    .into_iter()
                    .map(|range| AckFailure {
                        range,
                        error: e.clone(),
                    })
                    .collect();
                self.note_ack_failures(failures);
                for key in &asked {
                    self.partition_failed(key, &e);
                }
                return if e.is_retriable() { Ok(()) } else { Err(e) };
            }
        };
        let mut acks_by_partition: HashMap<PartitionKey, Vec<AckRange>> = HashMap::new();
        for ack in acks {
            acks_by_partition.entry(ack.key()).or_default().push(ack);
        }
        let lock_until = sent_at + self.config.lock();
        let mut first_error = None;
        for p in response.partitions {
            let key = (p.topic.clone(), p.partition);
            if let Some(e) = p.acknowledge_error.as_ref().filter(|e| e.code != 0) {
                let failed = acks_by_partition.remove(&key).unwrap_or_default();
                let failures = failed
                    .into_iter()
                    .map(|range| AckFailure {
                        range,
                        error: server_error(e),
                    })
                    .collect();
                self.note_ack_failures(failures);
            }
            if !asked.contains(&key) {
                continue;
            }
            if let Err(e) = self.take_partition_result(p, lock_until) {
                self.partition_failed(&key, &e);
                if !e.is_retriable() {
                    first_error.get_or_insert(e);
                }
            } else {
                self.backoff.remove(&key);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Buffers one partition's acquired records; acquired offsets with nothing to deliver are
    /// queued for acceptance, those the answer did not reach for release (unseen: the
    /// application never got them, so the delivery is not counted).
    fn take_partition_result(
        &mut self,
        p: m::ShareFetchPartitionResult,
        lock_until: Instant,
    ) -> Result<(), ClientError> {
        check(p.error.as_ref())?;
        let key = (p.topic.clone(), p.partition);
        let decoded = decode_acquired(&p.topic, p.partition, p.records, &p.acquired)?;
        for offset in decoded.nothing_to_deliver {
            self.acks.push(&key, offset, AckKind::Accept);
        }
        for offset in decoded.not_returned {
            self.acks.push(&key, offset, AckKind::ReleaseUnseen);
        }
        self.buffered.extend(
            decoded
                .records
                .into_iter()
                .map(|record| Buffered { record, lock_until }),
        );
        Ok(())
    }

    /// A partition's request failed: it waits out a growing backoff, and its routes are
    /// fetched again when the error says they may be wrong.
    pub(super) fn partition_failed(&mut self, key: &PartitionKey, error: &ClientError) {
        if error.needs_metadata_refresh() || matches!(error, ClientError::LeaderMoved { .. }) {
            self.stale.insert(key.0.clone());
        }
        let now = Instant::now();
        let backoff = self
            .backoff
            .get(key)
            .map_or(RETRY_BACKOFF, |b| (b.backoff * 2).min(RETRY_BACKOFF_MAX));
        if !self.backoff.contains_key(key) {
            tracing::warn!(topic = %key.0, partition = key.1, %error,
                "share partition unavailable; fetching the others and retrying it");
        }
        self.backoff.insert(
            key.clone(),
            Backoff {
                retry_at: now + backoff,
                backoff,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(leaders: &[Option<&str>]) -> Leaders {
        leaders.iter().map(|l| l.map(str::to_string)).collect()
    }

    #[test]
    fn partitions_are_grouped_by_leader_skipping_backoffs_and_listing_the_leaderless() {
        let mut routes = HashMap::new();
        routes.insert("a".into(), route(&[Some("h1:1"), Some("h2:2"), None]));
        routes.insert("b".into(), route(&[Some("h2:2")]));
        let now = Instant::now();
        let mut backoff = HashMap::new();
        backoff.insert(
            ("a".to_string(), 0),
            Backoff {
                retry_at: now + Duration::from_secs(1),
                backoff: RETRY_BACKOFF,
            },
        );
        let topics = vec!["a".to_string(), "b".to_string(), "unknown".to_string()];
        let (by_leader, leaderless) = plan_by_leader(&topics, &routes, &backoff, now);
        assert_eq!(by_leader.len(), 1, "{by_leader:?}");
        assert_eq!(
            by_leader["h2:2"],
            vec![("a".to_string(), 1), ("b".to_string(), 0)]
        );
        assert_eq!(leaderless, vec![("a".to_string(), 2)]);
        let later = now + Duration::from_secs(2);
        let (by_leader, _) = plan_by_leader(&topics, &routes, &backoff, later);
        assert_eq!(
            by_leader["h1:1"],
            vec![("a".to_string(), 0)],
            "backoff over"
        );
        assert_eq!(leader_of(&routes, &("b".into(), 0)), Some("h2:2"));
        assert_eq!(leader_of(&routes, &("b".into(), 1)), None);
    }
}
