//! Acknowledgement requests: `ShareAcknowledge` sent in the background for a leader whose
//! fetch is in flight (so acknowledgements do not wait out its long poll), or now and awaited
//! (`flush_acknowledgements`, `close`), and the ranges each answer says were not applied.

use std::collections::BTreeMap;

use tinymq_protocol::messages as m;

use super::acks::AckRange;
use super::fetch::{leader_of, Answer};
use super::{AckFailure, ShareConsumer};
use crate::error::ClientError;

pub(super) fn wire_acks(acks: &[AckRange]) -> Vec<m::ShareAcknowledgement> {
    acks.iter()
        .map(|a| m::ShareAcknowledgement {
            topic: a.topic.clone(),
            partition: a.partition,
            first_offset: a.first_offset,
            last_offset: a.last_offset,
            kind: a.kind.wire(),
        })
        .collect()
}

pub(super) fn server_error(e: &m::Error) -> ClientError {
    ClientError::Server {
        code: e.error_code(),
        message: e.message.clone(),
    }
}

impl ShareConsumer {
    /// Sends every queued acknowledgement whose partition's leader is known, in the
    /// background (for a `poll` that returns records without fetching).
    pub(super) fn send_queued_acks(&mut self) {
        if self.acks.is_empty() {
            return;
        }
        let routes = &self.routes;
        let acks = self.acks.take(|k| leader_of(routes, k).is_some());
        self.start_acknowledge(acks);
    }

    pub(super) fn start_acknowledge(&mut self, acks: Vec<AckRange>) {
        let mut by_leader: BTreeMap<String, Vec<AckRange>> = BTreeMap::new();
        for ack in acks {
            match leader_of(&self.routes, &ack.key()) {
                Some(leader) => by_leader.entry(leader.to_string()).or_default().push(ack),
                // Not expected (taken because their leader is known), but never dropped.
                None => {
                    for offset in ack.first_offset..=ack.last_offset {
                        self.acks.push(&ack.key(), offset, ack.kind);
                    }
                }
            }
        }
        for (leader, acks) in by_leader {
            let request = m::ShareAcknowledgeRequest {
                group_id: self.config.group.clone(),
                member_id: self.config.member_id.clone(),
                acknowledgements: wire_acks(&acks),
            };
            let cluster = self.cluster.clone();
            let timeout = self.config.client.request_timeout;
            self.in_flight.spawn(async move {
                let result = match cluster.connection(&leader).await {
                    Ok(connection) => connection.request(&request, timeout).await,
                    Err(e) => Err(e),
                };
                Answer::Acknowledged { acks, result }
            });
        }
    }

    /// Sends `acks` to their leaders now (routes looked up, fetched if missing) and waits for
    /// the answers; returns those not applied.
    pub(super) async fn acknowledge_now(&mut self, acks: Vec<AckRange>) -> Vec<AckFailure> {
        let mut failures = Vec::new();
        let mut by_leader: BTreeMap<String, Vec<AckRange>> = BTreeMap::new();
        for ack in acks {
            let leader = match self.cluster.route(&ack.topic).await {
                Ok(route) => route.leader(ack.partition).map(str::to_string),
                Err(e) => Err(e),
            };
            match leader {
                Ok(leader) => by_leader.entry(leader).or_default().push(ack),
                Err(error) => failures.push(AckFailure { range: ack, error }),
            }
        }
        let mut requests = tokio::task::JoinSet::new();
        for (leader, acks) in by_leader {
            let request = m::ShareAcknowledgeRequest {
                group_id: self.config.group.clone(),
                member_id: self.config.member_id.clone(),
                acknowledgements: wire_acks(&acks),
            };
            let cluster = self.cluster.clone();
            let timeout = self.config.client.request_timeout;
            requests.spawn(async move {
                let result = match cluster.connection(&leader).await {
                    Ok(connection) => connection.request(&request, timeout).await,
                    Err(e) => Err(e),
                };
                (acks, result)
            });
        }
        while let Some(joined) = requests.join_next().await {
            match joined {
                Ok((acks, result)) => failures.extend(ack_outcomes(acks, result)),
                Err(e) => tracing::warn!(error = %e, "an acknowledgement task failed"),
            }
        }
        failures
    }
}

/// The acknowledgements of a `ShareAcknowledge` request not applied: all of them when the
/// request failed, else those whose result carries an error.
pub(super) fn ack_outcomes(
    acks: Vec<AckRange>,
    result: Result<m::ShareAcknowledgeResponse, ClientError>,
) -> Vec<AckFailure> {
    match result {
        Err(error) => acks
            .into_iter()
            .map(|range| AckFailure {
                range,
                error: error.clone(),
            })
            .collect(),
        Ok(response) => response
            .results
            .iter()
            .filter_map(|r| {
                let e = r.error.as_ref().filter(|e| e.code != 0)?;
                let range = acks
                    .iter()
                    .find(|a| {
                        a.topic == r.topic
                            && a.partition == r.partition
                            && a.first_offset == r.first_offset
                            && a.last_offset == r.last_offset
                    })?
                    .clone();
                Some(AckFailure {
                    range,
                    error: server_error(e),
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::AckKind;
    use tinymq_protocol::ErrorCode;

    #[test]
    fn acknowledge_results_name_the_ranges_not_applied() {
        let ack = |first, last| AckRange {
            topic: "t".into(),
            partition: 0,
            first_offset: first,
            last_offset: last,
            kind: AckKind::Accept,
        };
        let response = m::ShareAcknowledgeResponse {
            error: None,
            results: vec![
                m::ShareAcknowledgeResult {
                    topic: "t".into(),
                    partition: 0,
                    first_offset: 0,
                    last_offset: 4,
                    error: None,
                    current_leader: 0,
                },
                m::ShareAcknowledgeResult {
                    topic: "t".into(),
                    partition: 0,
                    first_offset: 7,
                    last_offset: 7,
                    error: Some(m::Error {
                        code: u32::from(ErrorCode::INVALID_RECORD_STATE.code()),
                        message: "lock expired".into(),
                    }),
                    current_leader: 0,
                },
            ],
        };
        let failures = ack_outcomes(vec![ack(0, 4), ack(7, 7)], Ok(response));
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].range, ack(7, 7));
        assert_eq!(
            failures[0].error.code(),
            Some(ErrorCode::INVALID_RECORD_STATE)
        );
        let lost = ack_outcomes(
            vec![ack(0, 4), ack(7, 7)],
            Err(ClientError::ConnectionClosed("h:1".into())),
        );
        assert_eq!(lost.len(), 2, "a lost request loses every range");
    }
}
