//! Retrying an operation through a leader change: attempts that fail with a retriable error
//! (no connection, `NOT_LEADER`, `LEADER_NOT_AVAILABLE`, a timeout, …) are repeated with a
//! growing pause until the operation's deadline, then fail with an error naming what was
//! waited for and the last error seen.

use std::future::Future;
use std::time::Duration;

use tinymq_protocol::ErrorCode;

use crate::error::ClientError;

/// First pause between attempts; it doubles up to [`RETRY_BACKOFF_MAX`].
pub const RETRY_BACKOFF: Duration = Duration::from_millis(100);
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Whether an administrative operation should be tried again after `error`. Some codes that
/// are worth retrying for data (an unknown topic may be being created; a partition short of
/// replicas may regain them) are answers to an administrative request: an unknown topic, more
/// replicas than live brokers, a disk that failed.
pub fn admin_retriable(error: &ClientError) -> bool {
    error.is_retriable()
        && !matches!(
            error.code(),
            Some(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                    | ErrorCode::NOT_ENOUGH_REPLICAS
                    | ErrorCode::STORAGE_ERROR
            )
        )
}

/// Whether an attempt that failed with `error` may have been applied all the same (its answer
/// was lost, or the server says it does not know): a retry may then find the change done.
pub fn is_ambiguous(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Timeout(_) | ClientError::ConnectionClosed(_)
    ) || error.code() == Some(ErrorCode::REQUEST_TIMED_OUT)
}

/// Runs `attempt` until it succeeds, fails with an error `retriable` refuses, or `timeout`
/// has passed; `operation` names it in the final error. `attempt` is told whether an earlier
/// attempt's outcome is unknown ([`is_ambiguous`]), so that it can take "already done" for
/// success.
pub async fn retrying<T, F, Fut>(
    operation: &str,
    timeout: Duration,
    retriable: impl Fn(&ClientError) -> bool,
    mut attempt: F,
) -> Result<T, ClientError>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let mut backoff = RETRY_BACKOFF;
    let mut after_ambiguous = false;
    loop {
        let error = match attempt(after_ambiguous).await {
            Ok(value) => return Ok(value),
            Err(e) if !retriable(&e) => return Err(e),
            Err(e) => e,
        };
        after_ambiguous |= is_ambiguous(&error);
        if tokio::time::Instant::now() + backoff > deadline {
            return Err(ClientError::GaveUp {
                operation: operation.to_string(),
                waited_ms: started.elapsed().as_millis() as u64,
                last_error: Box::new(error),
            });
        }
        tracing::debug!(operation, %error, "retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn server(code: ErrorCode) -> ClientError {
        ClientError::Server {
            code,
            message: "m".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retriable_errors_are_retried_until_success_or_the_deadline() {
        let calls = AtomicU32::new(0);
        let got = retrying("op", Duration::from_secs(5), admin_retriable, |_| async {
            match calls.fetch_add(1, Ordering::Relaxed) {
                0 => Err(server(ErrorCode::NOT_LEADER)),
                1 => Err(ClientError::Connect {
                    addr: "a".into(),
                    reason: "refused".into(),
                }),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(calls.load(Ordering::Relaxed), 3);

        let never = retrying(
            "create topic t",
            Duration::from_secs(5),
            admin_retriable,
            |_| async { Err::<(), _>(server(ErrorCode::LEADER_NOT_AVAILABLE)) },
        )
        .await
        .unwrap_err();
        assert!(matches!(never, ClientError::GaveUp { .. }));
        assert!(never.to_string().contains("create topic t"), "{never}");
        assert!(
            never.to_string().contains("LEADER_NOT_AVAILABLE"),
            "{never}"
        );

        let answer = retrying("op", Duration::from_secs(5), admin_retriable, |_| async {
            Err::<(), _>(server(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION))
        })
        .await
        .unwrap_err();
        assert_eq!(answer.code(), Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_learns_that_an_earlier_one_may_have_been_applied() {
        let calls = AtomicU32::new(0);
        let seen = retrying("op", Duration::from_secs(5), admin_retriable, |ambiguous| {
            let n = calls.fetch_add(1, Ordering::Relaxed);
            async move {
                match n {
                    0 => Err(server(ErrorCode::NOT_LEADER)),
                    1 => {
                        assert!(!ambiguous, "NOT_LEADER is not ambiguous");
                        Err(server(ErrorCode::REQUEST_TIMED_OUT))
                    }
                    _ => Ok(ambiguous),
                }
            }
        })
        .await;
        assert!(
            seen.unwrap(),
            "the third attempt knows the second may have been applied"
        );
    }
}
