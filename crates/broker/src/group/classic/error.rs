//! Why the classic group protocol refused a request: one variant per answer a Kafka client
//! tells apart. The broker names none of Kafka's error codes; the Kafka listener maps each
//! variant to one (`tinymq_kafka`'s `errors::classic_code`).

/// A refusal of a classic group request, as the client must react to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ClassicError {
    /// The member offers no protocol the others share, another protocol type, or none; or
    /// the group has native members (one group id, one protocol at a time).
    #[error("no protocol in common with the group's members")]
    InconsistentGroupProtocol,
    /// A member's metadata or an assignment over its limit.
    #[error("the request is over a limit")]
    InvalidRequest,
    /// A session timeout outside the coordinator's bounds.
    #[error("the session timeout is out of bounds")]
    InvalidSessionTimeout,
    /// The group has as many members, or keeps as many bytes, as it may; or the coordinator
    /// has as many groups, or its classic groups as many bytes, as it may.
    #[error("the group, or the coordinator, is full")]
    GroupMaxSizeReached,
    /// A new member is told its id first (JoinGroup v4+) and must join again with it.
    #[error("join again with the member id given")]
    MemberIdRequired,
    /// The member is not (or no longer) in the group.
    #[error("unknown member")]
    UnknownMemberId,
    /// The group is rebalancing: the member must join again.
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    /// The member speaks of another generation than the group's.
    #[error("a stale generation")]
    IllegalGeneration,
    /// Another member holds the static member's instance id now.
    #[error("the instance id has a newer member")]
    FencedInstanceId,
    /// Not a valid group id.
    #[error("not a valid group id")]
    InvalidGroupId,
    /// This broker no longer coordinates the group (its offsets partition moved).
    #[error("this broker no longer coordinates the group")]
    NotCoordinator,
}

impl ClassicError {
    /// Every variant, for the listener's mapping test.
    pub const ALL: [ClassicError; 11] = [
        ClassicError::InconsistentGroupProtocol,
        ClassicError::InvalidRequest,
        ClassicError::InvalidSessionTimeout,
        ClassicError::GroupMaxSizeReached,
        ClassicError::MemberIdRequired,
        ClassicError::UnknownMemberId,
        ClassicError::RebalanceInProgress,
        ClassicError::IllegalGeneration,
        ClassicError::FencedInstanceId,
        ClassicError::InvalidGroupId,
        ClassicError::NotCoordinator,
    ];
}

#[cfg(test)]
mod tests {
    use super::ClassicError as E;

    #[test]
    fn all_lists_every_variant_once() {
        // Exhaustive: a new variant does not compile here until it has its place in ALL.
        let position = |e: E| match e {
            E::InconsistentGroupProtocol => 0,
            E::InvalidRequest => 1,
            E::InvalidSessionTimeout => 2,
            E::GroupMaxSizeReached => 3,
            E::MemberIdRequired => 4,
            E::UnknownMemberId => 5,
            E::RebalanceInProgress => 6,
            E::IllegalGeneration => 7,
            E::FencedInstanceId => 8,
            E::InvalidGroupId => 9,
            E::NotCoordinator => 10,
        };
        for (i, e) in E::ALL.into_iter().enumerate() {
            assert_eq!(position(e), i, "{e:?}");
        }
    }
}
