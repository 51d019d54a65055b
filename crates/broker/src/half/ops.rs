//! The half-message requests (HalfSend, HalfEnd, HalfCheckPoll, HalfList), taking over the
//! partitions of `__half_messages` as leadership moves ([`sync`]), and the timer ([`tick`])
//! that rolls back halves nobody resolved and finishes commits left half done.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};

use super::durable::{
    finished, persist_or_written, resolved_other, roll_back_decided, roll_back_refused,
};
use super::store::{CheckRules, Half, HalfPhase, Outcome};
use super::{deliver, log, partition_for_group, HALF_PARTITIONS, HALF_TOPIC};
use crate::partition::now_ms;
use crate::state::BrokerState;

/// Default wait before a half's first check (RocketMQ's transaction check immunity).
pub const CHECK_AFTER_DEFAULT_MS: u32 = 6_000;
/// Longest wait before a half's first check (`half_check_after_ms_max`).
pub const CHECK_AFTER_MAX_MS: u32 = 3_600_000;
/// Most bytes of one half's batch (`half_batch_bytes_max`), within the topic's
/// `message_bytes_max`.
pub const HALF_BATCH_BYTES_MAX: usize = 4 << 20;
/// Longest HalfCheckPoll wait (`half_poll_wait_max`).
pub const POLL_WAIT_MAX: Duration = Duration::from_secs(30);
/// Most checks one poll returns (`half_poll_checks_max`), and the default.
pub const POLL_CHECKS_MAX: u32 = 1_000;
const POLL_CHECKS_DEFAULT: u32 = 100;
/// Most halves one HalfList answers (`half_list_max`).
pub const HALF_LIST_MAX: usize = 10_000;
/// How often a waiting poll or HalfEnd looks again without a wake-up.
const RECHECK: Duration = Duration::from_millis(100);
/// How long a HalfEnd waits for another resolution of the same half to finish.
const END_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long HalfSend waits for a new `__half_messages` to appear.
const HALF_TOPIC_WAIT: Duration = Duration::from_secs(10);

fn bad(message: impl Into<String>) -> m::Error {
    ErrorCode::INVALID_REQUEST.with_message(message)
}

/// The check rules of this broker's configuration.
pub fn rules(state: &BrokerState) -> CheckRules {
    CheckRules {
        interval_ms: state.config.half_check_interval.as_millis() as i64,
        checks_max: state.config.half_checks_max,
    }
}

/// The broker coordinating `group`'s halves, creating `__half_messages` on first use.
pub async fn coordinator_of(
    state: &Arc<BrokerState>,
    group: &str,
) -> Result<tinymq_meta::image::BrokerRecord, m::Error> {
    check_group(group)?;
    let ensure = tinymq_meta::Command::EnsureHalfTopic {
        partitions: HALF_PARTITIONS,
    };
    crate::offsets_partitions::coordinator_in(
        state,
        (HALF_TOPIC, ensure, HALF_TOPIC_WAIT),
        partition_for_group(group),
        &format!("producer group {group}"),
    )
    .await
}

fn check_group(group: &str) -> Result<(), m::Error> {
    crate::group::validate_group_id(group).map_err(|(code, why)| code.with_message(why))
}

/// The leader epoch of `group`'s partition, led here with its session confirmed.
fn led(state: &BrokerState, group: &str) -> Result<(u32, u32), m::Error> {
    let index = partition_for_group(group);
    let (_, epoch) = crate::offsets_partitions::led_for_coordination(state, HALF_TOPIC, index)?;
    Ok((index, epoch))
}

/// What HalfSend stores, checked against the topic it names.
struct Checked {
    partition: u32,
    topic_id: u64,
}

/// Longest HalfSend request id (`half_request_id_bytes_max`).
pub const REQUEST_ID_BYTES_MAX: usize = 64;

async fn check_send(state: &BrokerState, r: &m::HalfSendRequest) -> Result<Checked, m::Error> {
    if tinymq_protocol::names::is_internal_topic(&r.topic) {
        return Err(ErrorCode::INVALID_TOPIC
            .with_message(format!("{}: half messages go to user topics only", r.topic)));
    }
    if r.request_id.len() > REQUEST_ID_BYTES_MAX {
        return Err(bad(format!(
            "request_id of {} bytes; at most {REQUEST_ID_BYTES_MAX}",
            r.request_id.len()
        )));
    }
    let image = state.cluster.image();
    let topic = image.topics.get(&r.topic).ok_or_else(|| {
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.with_message(format!("no topic {}", r.topic))
    })?;
    let (count, topic_id) = (topic.partitions.len() as u32, topic.id);
    let settings = state.settings_of(&r.topic, topic);
    drop(image);
    let message_max = settings.message_bytes_max as usize;
    if r.records.len() > message_max.min(HALF_BATCH_BYTES_MAX) {
        return Err(ErrorCode::MESSAGE_TOO_LARGE.with_message(format!(
            "a half of {} bytes; at most {} (the topic's message_bytes_max, and 4 MiB)",
            r.records.len(),
            message_max.min(HALF_BATCH_BYTES_MAX)
        )));
    }
    let records = r.records.clone();
    let records = tokio::task::spawn_blocking(move || {
        let records = super::records::decode_half(records)?;
        let committed = super::records::committed_batch_bytes(&records);
        Ok::<_, m::Error>((records, committed))
    })
    .await
    .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))??;
    let (records, committed) = records;
    if committed > message_max {
        return Err(ErrorCode::MESSAGE_TOO_LARGE.with_message(format!(
            "the batch a commit appends (uncompressed, a tinymq.half-id header on each record) \
             would be {committed} bytes; the topic's message_bytes_max is {message_max}"
        )));
    }
    check_timestamps(&records, &settings)?;
    let Some(first) = records.first() else {
        return Err(ErrorCode::INVALID_RECORD.with_message("a half holds at least one record"));
    };
    let partition = match r.partition {
        -1 => match first.key.as_deref() {
            Some(key) => tinymq_protocol::hash::murmur2_positive(key) % count,
            None => {
                let next = state.halves.next_partition.fetch_add(1, Ordering::Relaxed);
                next % count
            }
        },
        p if p >= 0 && (p as u32) < count => p as u32,
        p => {
            return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.with_message(format!(
                "{} has {count} partitions; no partition {p}",
                r.topic
            )))
        }
    };
    Ok(Checked {
        partition,
        topic_id,
    })
}

/// The topic's bounds on record timestamps, against the broker's clock now (a commit later
/// may still be refused by `message_timestamp_before_max_ms`: then it is rolled back).
fn check_timestamps(
    records: &[tinymq_protocol::batch::Record],
    settings: &crate::topic::TopicSettings,
) -> Result<(), m::Error> {
    let now = now_ms();
    for r in records {
        let ahead = settings.message_timestamp_after_max_ms;
        let behind = settings.message_timestamp_before_max_ms;
        let too_late = ahead >= 0 && r.timestamp_ms > now.saturating_add(ahead);
        let too_early = behind >= 0 && r.timestamp_ms < now.saturating_sub(behind);
        if too_late || too_early {
            return Err(ErrorCode::INVALID_TIMESTAMP.with_message(format!(
                "record timestamp {} is outside the topic's bounds ({ahead} ms ahead, {behind} ms behind the broker's clock {now})",
                r.timestamp_ms
            )));
        }
    }
    Ok(())
}

/// HalfSend: once the half is held by every in-sync replica.
pub async fn send(state: &Arc<BrokerState>, r: m::HalfSendRequest) -> m::HalfSendResponse {
    match store_half(state, r).await {
        Ok((half_id, partition)) => m::HalfSendResponse {
            error: None,
            half_id,
            partition,
        },
        Err(e) => m::HalfSendResponse {
            error: Some(e),
            half_id: -1,
            partition: 0,
        },
    }
}

async fn store_half(
    state: &Arc<BrokerState>,
    r: m::HalfSendRequest,
) -> Result<(i64, u32), m::Error> {
    check_group(&r.group)?;
    let check_after = match r.check_after_ms {
        0 => CHECK_AFTER_DEFAULT_MS,
        ms if ms <= CHECK_AFTER_MAX_MS => ms,
        ms => {
            return Err(bad(format!(
                "check_after_ms {ms}: at most {CHECK_AFTER_MAX_MS} (one hour)"
            )))
        }
    };
    // Leadership first: a broker that does not coordinate the group decodes nothing.
    let at = led(state, &r.group)?;
    if let Some(stored) = retried(state, at, &r).await? {
        return Ok(stored);
    }
    let checked = check_send(state, &r).await?;
    check_room(state, at, &r)?;
    let stored_ms = now_ms();
    let stored = m::HalfStored {
        group: r.group.clone(),
        topic: r.topic.clone(),
        partition: checked.partition,
        records: r.records.clone(),
        stored_ms,
        first_check_ms: stored_ms + i64::from(check_after),
        request_id: r.request_id.clone(),
        topic_id: checked.topic_id,
    };
    let entry = m::half_log_record::Entry::Stored(stored.clone());
    let (id, unconfirmed) = match persist_or_written(state, at, &r.group, entry).await {
        Ok(id) => (id, None),
        Err((e, Some(id))) => (id, Some(e)),
        Err((e, None)) => return Err(e),
    };
    // In this leader's log either way: tracked from now on (a retry with the same request id
    // is answered with it once it is replicated).
    let half = Half::stored(r.group, stored);
    state
        .halves
        .with(at.0, Some(at.1), |p| p.insert(id, half))?;
    state.halves.changed.notify_waiters();
    match unconfirmed {
        None => Ok((id, checked.partition)),
        Some(e) => Err(e),
    }
}

/// A HalfSend retried with the request id of one that stored a half: that half (once every
/// in-sync replica holds it).
async fn retried(
    state: &Arc<BrokerState>,
    at: (u32, u32),
    r: &m::HalfSendRequest,
) -> Result<Option<(i64, u32)>, m::Error> {
    let found = state.halves.with(at.0, Some(at.1), |p| {
        let id = p.request(&r.group, &r.request_id)?;
        Some((id, p.get(id).map(|h| (h.topic.clone(), h.partition))))
    })?;
    let Some((id, half)) = found else {
        return Ok(None);
    };
    let Some((topic, partition)) = half else {
        return Err(ErrorCode::HALF_MESSAGE_RESOLVED.with_message(format!(
            "this HalfSend stored half {id}, which is resolved already"
        )));
    };
    if topic != r.topic {
        return Err(bad(format!(
            "request id {} of group {} stored a half for topic {topic}, not {}",
            r.request_id, r.group, r.topic
        )));
    }
    let (partition_log, epoch) =
        crate::offsets_partitions::led_for_coordination(state, HALF_TOPIC, at.0)?;
    if epoch != at.1 {
        return Err(ErrorCode::NOT_COORDINATOR.with_message("led in a new epoch; retry"));
    }
    crate::offsets_partitions::await_coordination_replicas(&partition_log, id + 1, epoch).await?;
    Ok(Some((id, partition)))
}

/// LIMIT_EXCEEDED when one more half of `r.records.len()` bytes would pass the broker's or
/// the group's bounds.
fn check_room(state: &BrokerState, at: (u32, u32), r: &m::HalfSendRequest) -> Result<(), m::Error> {
    use super::store::{
        HALF_GROUP_PENDING_BYTES_MAX, HALF_GROUP_PENDING_MAX, HALF_PENDING_BYTES_MAX,
        HALF_PENDING_MAX,
    };
    let limit = |what: String| Err(ErrorCode::LIMIT_EXCEEDED.with_message(what));
    let (count, bytes) = state.halves.usage();
    let size = r.records.len();
    if count >= HALF_PENDING_MAX || bytes + size > HALF_PENDING_BYTES_MAX {
        return limit(format!(
            "this broker coordinates {count} unresolved halves of {bytes} bytes \
             (half_pending_max {HALF_PENDING_MAX}, half_pending_bytes_max {HALF_PENDING_BYTES_MAX}); resolve some first"
        ));
    }
    let (count, bytes) = state
        .halves
        .with(at.0, Some(at.1), |p| p.group_usage(&r.group))?;
    if count >= HALF_GROUP_PENDING_MAX || bytes + size > HALF_GROUP_PENDING_BYTES_MAX {
        return limit(format!(
            "group {} has {count} unresolved halves of {bytes} bytes (half_group_pending_max \
             {HALF_GROUP_PENDING_MAX}, half_group_pending_bytes_max {HALF_GROUP_PENDING_BYTES_MAX}); resolve some first",
            r.group
        ));
    }
    Ok(())
}

/// What HalfEnd found.
enum Found {
    /// Marked busy: this request resolves it.
    Resolve(Half),
    /// Being resolved by someone else: wait and look again.
    Wait,
    Answer(Result<i64, m::Error>),
}

fn find(p: &mut super::store::PartitionHalves, r: &m::HalfEndRequest) -> Found {
    let id = r.half_id;
    if let Some(half) = p.get_mut(id).filter(|h| h.group == r.group) {
        if half.topic != r.topic {
            return Found::Answer(Err(bad(format!(
                "half {id} of group {} goes to topic {}, not {}",
                r.group, half.topic, r.topic
            ))));
        }
        return match (&half.phase, half.busy) {
            (_, true) => Found::Wait,
            (HalfPhase::Pending, false) => {
                half.busy = true;
                Found::Resolve(half.clone())
            }
            (HalfPhase::Committing { .. }, false) if r.commit => Found::Wait,
            (HalfPhase::Committing { .. }, false) => Found::Answer(Err(resolved_other(
                id,
                &Outcome::Committed { base_offset: -1 },
            ))),
        };
    }
    Found::Answer(match p.outcome(id, &r.group, &r.topic) {
        Some(Outcome::Committed { base_offset }) if r.commit => Ok(*base_offset),
        Some(Outcome::RolledBack { .. }) if !r.commit => Ok(-1),
        Some(other) => Err(resolved_other(id, other)),
        None => Err(ErrorCode::HALF_MESSAGE_NOT_FOUND.with_message(format!(
            "no unresolved half {id} in group {} (never stored, or resolved long ago)",
            r.group
        ))),
    })
}

/// HalfEnd: commit (append the records) or roll back.
pub async fn end(state: &Arc<BrokerState>, r: m::HalfEndRequest) -> m::HalfEndResponse {
    let answer = match end_half(state, &r).await {
        Ok(base_offset) => m::HalfEndResponse {
            error: None,
            base_offset,
        },
        Err(e) => m::HalfEndResponse {
            error: Some(e),
            base_offset: -1,
        },
    };
    answer
}

async fn end_half(state: &Arc<BrokerState>, r: &m::HalfEndRequest) -> Result<i64, m::Error> {
    check_group(&r.group)?;
    let at = led(state, &r.group)?;
    let deadline = tokio::time::Instant::now() + END_WAIT_MAX;
    loop {
        let changed = state.halves.changed.notified();
        match state.halves.with(at.0, Some(at.1), |p| find(p, r))? {
            Found::Answer(answer) => return answer,
            Found::Resolve(half) => {
                let reason = if r.checked { "check" } else { "producer" };
                return resolve(state, at, r.half_id, half, r.commit, reason).await;
            }
            Found::Wait => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                        "half {} is still being resolved; retry",
                        r.half_id
                    )));
                }
                let _ = tokio::time::timeout(RECHECK, changed).await;
            }
        }
    }
}

/// Resolves half `id` (marked busy by the caller) durably: a rollback is one record; a
/// commit is decided, appended, then recorded delivered. Returns the commit's base offset.
pub(super) async fn resolve(
    state: &Arc<BrokerState>,
    at: (u32, u32),
    id: i64,
    half: Half,
    commit: bool,
    reason: &str,
) -> Result<i64, m::Error> {
    let release = |state: &BrokerState| {
        let _ = state.halves.with(at.0, Some(at.1), |p| {
            if let Some(h) = p.get_mut(id) {
                h.busy = false;
            }
        });
        state.halves.changed.notify_waiters();
    };
    let topic_now = state.cluster.image().topics.get(&half.topic).map(|t| t.id);
    if commit && topic_now != Some(half.topic_id) {
        // Deleted (or deleted and made again): nothing can be appended. Rolled back, and the
        // producer told why.
        return Err(roll_back_decided(state, at, id, &half, "topic deleted".into()).await);
    }
    if !commit {
        let entry = m::half_log_record::Entry::Resolved(m::HalfResolved {
            half_id: id,
            commit: false,
            reason: reason.to_string(),
            ..Default::default()
        });
        let outcome = Outcome::RolledBack {
            reason: reason.into(),
        };
        return match persist_or_written(state, at, &half.group, entry).await {
            Ok(_) => {
                finished(state, at, id, &half.group, outcome);
                Ok(-1)
            }
            // In this leader's log: the rollback counts in this epoch, whatever comes after.
            Err((e, Some(_))) => {
                finished(state, at, id, &half.group, outcome);
                Err(e)
            }
            Err((e, None)) => {
                release(state);
                Err(e)
            }
        };
    }
    let scan_from = match deliver::prepare(state, &half).await {
        Ok(end) => end,
        Err(e) => {
            release(state);
            return Err(e);
        }
    };
    let nonce = deliver::nonce();
    let entry = m::half_log_record::Entry::Resolved(m::HalfResolved {
        half_id: id,
        commit: true,
        reason: reason.to_string(),
        scan_from,
        topic_id: half.topic_id,
        nonce,
    });
    let decided = persist_or_written(state, at, &half.group, entry).await;
    if let Err((_, None)) = &decided {
        release(state);
    } else {
        let _ = state.halves.with(at.0, Some(at.1), |p| {
            if let Some(h) = p.get_mut(id) {
                h.phase = HalfPhase::Committing {
                    scan_from,
                    topic_id: half.topic_id,
                    nonce,
                };
            }
        });
    }
    if let Err((e, written)) = decided {
        if written.is_some() {
            // Decided in this leader's log but not confirmed: the timer's recovery appends it
            // once the log is replicated.
            release(state);
        }
        return Err(e);
    }
    let handed = deliver::append(state, at, id, &half, nonce).await;
    let base_offset = match handed.map(deliver::landed) {
        Ok(landing) => landing.await,
        Err(e) => Err(e),
    };
    let base_offset = match base_offset {
        Ok(offset) => offset,
        Err(e) if deliver::refused(&e) => {
            return Err(roll_back_refused(state, at, id, &half, &e).await)
        }
        Err(e) => {
            // In doubt: the timer's recovery looks for it before appending again.
            release(state);
            return Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                "half {id} is committed; appending it failed ({}), it is appended again shortly",
                e.message
            )));
        }
    };
    deliver::delivered(state, at, id, &half.group, base_offset).await;
    Ok(base_offset)
}

/// HalfCheckPoll: the due checks of `r.group` that `may` allows (the principal may write
/// their topic), waiting up to `max_wait_ms` for one.
pub async fn check_poll(
    state: &Arc<BrokerState>,
    r: m::HalfCheckPollRequest,
    may: impl Fn(&str) -> bool,
) -> m::HalfCheckPollResponse {
    match poll(state, &r, may).await {
        Ok(checks) => m::HalfCheckPollResponse {
            error: None,
            checks,
        },
        Err(e) => m::HalfCheckPollResponse {
            error: Some(e),
            checks: vec![],
        },
    }
}

async fn poll(
    state: &Arc<BrokerState>,
    r: &m::HalfCheckPollRequest,
    may: impl Fn(&str) -> bool,
) -> Result<Vec<m::HalfCheck>, m::Error> {
    check_group(&r.group)?;
    let wait = Duration::from_millis(u64::from(r.max_wait_ms));
    if wait > POLL_WAIT_MAX {
        return Err(bad(format!(
            "max_wait_ms {}: at most {}",
            r.max_wait_ms,
            POLL_WAIT_MAX.as_millis()
        )));
    }
    let max = match r.max_checks {
        0 => POLL_CHECKS_DEFAULT,
        n => n.min(POLL_CHECKS_MAX),
    } as usize;
    let at = led(state, &r.group)?;
    let _poll = PollSlot::take(&state.halves)?;
    let rules = rules(state);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let changed = state.halves.changed.notified();
        let now = now_ms();
        let (due, next) = state.halves.with(at.0, Some(at.1), |p| {
            let due = p.take_due(&r.group, now, max, &rules, |h| may(&h.topic));
            (due, p.next_due_ms(&r.group, &rules))
        })?;
        if !due.is_empty() {
            return Ok(due.into_iter().map(|(id, h)| to_check(id, h)).collect());
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(vec![]);
        }
        let until_due = next.map_or(RECHECK, |at| {
            Duration::from_millis((at - now).max(1) as u64).min(RECHECK)
        });
        let _ = tokio::time::timeout(left.min(until_due), changed).await;
    }
}

/// One of the [`HALF_POLLS_MAX`] polls that may wait at once, given back when dropped.
struct PollSlot<'a>(&'a super::store::HalfStore);

impl<'a> PollSlot<'a> {
    fn take(store: &'a super::store::HalfStore) -> Result<PollSlot<'a>, m::Error> {
        use super::store::HALF_POLLS_MAX;
        if store.polls.fetch_add(1, Ordering::AcqRel) >= HALF_POLLS_MAX {
            store.polls.fetch_sub(1, Ordering::AcqRel);
            return Err(ErrorCode::LIMIT_EXCEEDED.with_message(format!(
                "{HALF_POLLS_MAX} half check polls wait on this broker (half_polls_max); retry later"
            )));
        }
        Ok(PollSlot(store))
    }
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        self.0.polls.fetch_sub(1, Ordering::AcqRel);
    }
}

fn to_check(id: i64, h: Half) -> m::HalfCheck {
    m::HalfCheck {
        half_id: id,
        topic: h.topic,
        partition: h.partition,
        records: h.records,
        check_number: h.checks,
        stored_ms: h.stored_ms,
    }
}

/// HalfList: the unresolved halves coordinated here of the groups `may` allows.
pub fn list(
    state: &BrokerState,
    r: &m::HalfListRequest,
    may: impl Fn(&str) -> bool,
) -> m::HalfListResponse {
    let mut halves = Vec::new();
    state.halves.each(|_, _, p| {
        for (id, h) in p.iter() {
            if (!r.group.is_empty() && h.group != r.group) || !may(&h.group) {
                continue;
            }
            halves.push(m::HalfSummary {
                group: h.group.clone(),
                half_id: *id,
                topic: h.topic.clone(),
                partition: h.partition,
                records: h.record_count,
                stored_ms: h.stored_ms,
                checks: h.checks,
                next_check_ms: h.next_check_ms,
                state: match h.phase {
                    HalfPhase::Pending => "pending",
                    HalfPhase::Committing { .. } => "committing",
                }
                .into(),
            });
        }
    });
    halves.sort_by(|a, b| (&a.group, a.half_id).cmp(&(&b.group, b.half_id)));
    halves.truncate(HALF_LIST_MAX);
    m::HalfListResponse {
        error: None,
        halves,
    }
}

/// Brings the coordinated halves in line with the partitions of `__half_messages` led here:
/// drops those no longer led (or led in a new epoch) and loads those newly led, on the
/// blocking pool. Call after every reconciliation.
pub fn sync(state: &Arc<BrokerState>) {
    for index in 0..HALF_PARTITIONS {
        let led = state
            .led_partition_any(HALF_TOPIC, index)
            .ok()
            .filter(|(p, epoch)| p.leading_epoch() == Some(*epoch));
        let Some((partition, epoch)) = led else {
            if state.halves.led().contains_key(&index) {
                tracing::info!(
                    partition = index,
                    "no longer leading this half-message partition"
                );
                state.halves.drop_partition(index);
            }
            continue;
        };
        if !state.halves.begin_load(index, epoch) {
            continue;
        }
        let s = state.clone();
        tokio::task::spawn_blocking(move || match log::read_log(&partition.log) {
            Ok(loaded) => {
                let halves = loaded.len();
                if s.halves.finish_load(index, epoch, loaded) {
                    tracing::info!(
                        partition = index,
                        leader_epoch = epoch,
                        halves,
                        "loaded a half-message partition; coordinating its groups"
                    );
                }
            }
            Err(e) => {
                s.halves.fail_load(index, epoch);
                tracing::error!(partition = index, error = %e, "cannot read a half-message partition; its groups are unavailable here until a load succeeds (tried again shortly)")
            }
        });
    }
}

/// The timer (about every 250 ms): rolls back halves past their checks or deadline, and
/// finishes commits left in doubt (a coordinator that took over, an append that failed).
pub async fn tick(state: &Arc<BrokerState>) {
    // Also retries a load that failed.
    sync(state);
    let rules = rules(state);
    let now = now_ms();
    let mut expired = Vec::new();
    let mut in_doubt = Vec::new();
    state.halves.each(|index, epoch, p| {
        for (id, reason) in p.expired(now, &rules) {
            if let Some(h) = p.get_mut(id) {
                h.busy = true;
                expired.push(((index, epoch), id, h.clone(), reason));
            }
        }
        for (id, h) in p.iter_mut() {
            if matches!(h.phase, HalfPhase::Committing { .. }) && !h.busy {
                h.busy = true;
                in_doubt.push(((index, epoch), *id, h.clone()));
            }
        }
    });
    for (at, id, half, reason) in expired {
        let s = state.clone();
        tokio::spawn(async move {
            if let Err(e) = resolve(&s, at, id, half, false, reason).await {
                tracing::warn!(half_id = id, error = %e.message, "rolling back an expired half failed; retrying");
            }
        });
    }
    for (at, id, half) in in_doubt {
        tokio::spawn(deliver::recover(state.clone(), at, id, half));
    }
}
