//! A partition's part in replication on this broker, as the partition holds it: leader (with
//! [`leader::LeaderState`], the inputs of the high watermark and ISR rules) or follower. Pure
//! state under the partition's lock; what moves it is `crate::replica`, which uses the
//! partition, never the other way round.

pub mod leader;

use leader::LeaderState;

/// A partition's part in replication on this broker.
#[derive(Debug, Clone)]
pub enum Role {
    Leader(LeaderState),
    /// Following `leader` (none while the partition is offline) in `leader_epoch`.
    Follower {
        leader: Option<u32>,
        leader_epoch: u32,
    },
}

impl Default for Role {
    /// A partition on its own (no image yet, or a tool opening it): its own ISR.
    fn default() -> Role {
        Role::Leader(LeaderState::new(0, 0, 0, &[0], 0, 0))
    }
}
