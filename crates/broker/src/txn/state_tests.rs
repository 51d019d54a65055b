use super::*;

fn ready(step: InitStep) -> TxnMetadata {
    match step {
        InitStep::Ready(m) => m,
        other => panic!("expected Ready, got {other:?}"),
    }
}

fn tp(topic: &str, p: u32) -> TxnPartition {
    (topic.to_string(), p)
}

fn ongoing() -> TxnMetadata {
    let m = ready(init_producer_id(None, 1000, None, Some(7), 10).unwrap());
    add_partitions(&m, 7, 0, &[tp("a", 0)], 20)
        .unwrap()
        .unwrap()
}

#[test]
fn a_new_id_needs_a_producer_id_then_starts_empty_at_epoch_0() {
    assert_eq!(
        init_producer_id(None, 0, None, None, 1).unwrap(),
        InitStep::NeedProducerId
    );
    let m = ready(init_producer_id(None, 0, None, Some(5), 1).unwrap());
    assert_eq!((m.producer_id, m.producer_epoch), (5, 0));
    assert_eq!(m.state, TxnState::Empty);
    assert_eq!(m.timeout_ms, TRANSACTION_TIMEOUT_MS_DEFAULT);
}

#[test]
fn init_again_bumps_the_epoch_and_an_exhausted_epoch_takes_a_new_id() {
    let m = ready(init_producer_id(None, 1000, None, Some(5), 1).unwrap());
    let again = ready(init_producer_id(Some(&m), 1000, None, None, 2).unwrap());
    assert_eq!((again.producer_id, again.producer_epoch), (5, 1));
    let worn = TxnMetadata {
        producer_epoch: i16::MAX - 1,
        ..m
    };
    assert_eq!(
        init_producer_id(Some(&worn), 1000, None, None, 3).unwrap(),
        InitStep::NeedProducerId
    );
    let fresh = ready(init_producer_id(Some(&worn), 1000, None, Some(9), 3).unwrap());
    assert_eq!((fresh.producer_id, fresh.producer_epoch), (9, 0));
}

#[test]
fn init_with_a_transaction_open_aborts_it_with_a_bumped_epoch() {
    let m = ongoing();
    let InitStep::AbortFirst(next) = init_producer_id(Some(&m), 1000, None, None, 30).unwrap()
    else {
        panic!("expected AbortFirst")
    };
    assert_eq!(next.state, TxnState::PrepareAbort);
    assert_eq!(next.producer_epoch, 1);
    assert_eq!(next.partitions, m.partitions);
    let err = init_producer_id(Some(&next), 1000, None, None, 31).unwrap_err();
    assert_eq!(err.code, ErrorCode::CONCURRENT_TRANSACTIONS);
    let done = complete(&next, 32).unwrap();
    assert_eq!(done.state, TxnState::CompleteAbort);
    assert!(done.partitions.is_empty());
    let again = ready(init_producer_id(Some(&done), 1000, None, None, 33).unwrap());
    assert_eq!(again.producer_epoch, 2);
}

#[test]
fn a_wrong_expected_epoch_is_fenced_and_a_timeout_out_of_bounds_is_refused() {
    let m = ready(init_producer_id(None, 1000, None, Some(5), 1).unwrap());
    let err = init_producer_id(Some(&m), 1000, Some((5, 3)), None, 2).unwrap_err();
    assert_eq!(err.code, ErrorCode::PRODUCER_FENCED);
    assert!(init_producer_id(Some(&m), 1000, Some((5, 0)), None, 2).is_ok());
    let err = init_producer_id(None, TRANSACTION_TIMEOUT_MS_MAX + 1, None, Some(1), 1);
    assert_eq!(
        err.unwrap_err().code,
        ErrorCode::INVALID_TRANSACTION_TIMEOUT
    );
}

#[test]
fn partitions_are_added_once_and_checked_against_the_producer() {
    let m = ongoing();
    assert_eq!(m.start_ms, 20);
    assert_eq!(add_partitions(&m, 7, 0, &[tp("a", 0)], 25).unwrap(), None);
    let more = add_partitions(&m, 7, 0, &[tp("b", 1)], 25)
        .unwrap()
        .unwrap();
    assert_eq!(more.partitions.len(), 2);
    assert_eq!(
        more.start_ms, 20,
        "the transaction began at its first partition"
    );
    let wrong_id = add_partitions(&m, 8, 0, &[tp("b", 1)], 25).unwrap_err();
    assert_eq!(wrong_id.code, ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    let old_epoch = TxnMetadata {
        producer_epoch: 3,
        ..m.clone()
    };
    let fenced = add_partitions(&old_epoch, 7, 2, &[tp("b", 1)], 25).unwrap_err();
    assert_eq!(fenced.code, ErrorCode::PRODUCER_FENCED);
}

#[test]
fn a_transaction_touches_at_most_txn_partitions_max_partitions() {
    let m = ongoing();
    let many: Vec<_> = (0..TXN_PARTITIONS_MAX as u32).map(|p| tp("b", p)).collect();
    let err = add_partitions(&m, 7, 0, &many, 25).unwrap_err();
    assert_eq!(err.code, ErrorCode::LIMIT_EXCEEDED);
}

#[test]
fn end_txn_prepares_once_and_a_retry_after_completion_succeeds() {
    let m = ongoing();
    let EndStep::Prepare(prepared) = end_txn(&m, 7, 0, true, 40).unwrap() else {
        panic!("expected Prepare")
    };
    assert_eq!(prepared.state, TxnState::PrepareCommit);
    let retry = end_txn(&prepared, 7, 0, true, 41).unwrap_err();
    assert_eq!(retry.code, ErrorCode::CONCURRENT_TRANSACTIONS);
    let other = end_txn(&prepared, 7, 0, false, 41).unwrap_err();
    assert_eq!(other.code, ErrorCode::INVALID_TXN_STATE);
    let done = complete(&prepared, 42).unwrap();
    assert_eq!(done.state, TxnState::CompleteCommit);
    assert_eq!(end_txn(&done, 7, 0, true, 43).unwrap(), EndStep::Done);
    assert_eq!(
        end_txn(&done, 7, 0, false, 43).unwrap_err().code,
        ErrorCode::INVALID_TXN_STATE
    );
    let next = add_partitions(&done, 7, 0, &[tp("c", 0)], 50)
        .unwrap()
        .unwrap();
    assert_eq!(next.state, TxnState::Ongoing);
    assert_eq!(
        next.partitions.len(),
        1,
        "the last transaction's partitions are gone"
    );
    assert_eq!(next.start_ms, 50);
}

#[test]
fn end_txn_without_a_transaction_is_an_invalid_state() {
    let m = ready(init_producer_id(None, 1000, None, Some(7), 10).unwrap());
    assert_eq!(
        end_txn(&m, 7, 0, true, 11).unwrap_err().code,
        ErrorCode::INVALID_TXN_STATE
    );
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_with_the_epoch_bumped() {
    let m = ongoing();
    assert_eq!(timed_out(&m, 20 + 1000), None);
    let aborted = timed_out(&m, 20 + 1001).unwrap();
    assert_eq!(aborted.state, TxnState::PrepareAbort);
    assert_eq!(aborted.producer_epoch, 1);
    let zombie = end_txn(&aborted, 7, 0, true, 2000).unwrap_err();
    assert_eq!(zombie.code, ErrorCode::PRODUCER_FENCED);
    assert_eq!(timed_out(&aborted, 1_000_000), None);
}

#[test]
fn the_metadata_round_trips_through_json() {
    let m = ongoing();
    let json = serde_json::to_vec(&m).unwrap();
    assert_eq!(serde_json::from_slice::<TxnMetadata>(&json).unwrap(), m);
}
