//! The ids the coordinator gives new classic members: Kafka's shape (the client id, then a
//! unique suffix; clients never parse them), unique across this broker's restarts.

use std::sync::atomic::{AtomicU64, Ordering};

/// Most chars of a client id a fresh member id starts with: a member id handed out with
/// MEMBER_ID_REQUIRED is kept before the member is, so its length is bounded here.
pub const MEMBER_ID_CLIENT_ID_CHARS_MAX: usize = 128;

#[derive(Debug)]
pub struct MemberIds {
    next: AtomicU64,
    /// Makes member ids unique across restarts: a member of a previous incarnation cannot
    /// rejoin with its old id as if it were another member.
    incarnation: u128,
}

impl Default for MemberIds {
    fn default() -> MemberIds {
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        MemberIds {
            next: AtomicU64::new(1),
            incarnation,
        }
    }
}

impl MemberIds {
    /// A new member id for a member of client `client_id`.
    pub fn fresh(&self, client_id: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let prefix: String = client_id
            .chars()
            .take(MEMBER_ID_CLIENT_ID_CHARS_MAX)
            .collect();
        format!("{prefix}-{:x}-{n}", self.incarnation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_member_ids_start_with_a_bounded_part_of_the_client_id() {
        let ids = MemberIds::default();
        let id = ids.fresh(&"c".repeat(100_000));
        assert!(id.starts_with(&"c".repeat(MEMBER_ID_CLIENT_ID_CHARS_MAX)));
        assert!(id.len() < MEMBER_ID_CLIENT_ID_CHARS_MAX + 64);
        assert_ne!(ids.fresh("c"), ids.fresh("c"), "unique");
    }
}
