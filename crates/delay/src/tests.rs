//! Property tests: due entries come out exactly once and in deliver-at order, and a state
//! rebuilt from its log (whole, or compacted) is the same state.

use bytes::Bytes;
use proptest::prelude::*;

use crate::entry::{decode, encode, Decoded, STORED_BATCH_OFFSET};
use crate::*;

#[derive(Debug, Clone)]
enum Op {
    /// Store a batch due this many ms after now (negative: in the past), from an idempotent
    /// producer or not, possibly as a retry of the batch stored `n` stores ago.
    Store {
        delay_ms: i64,
        idempotent: bool,
        retry_of: Option<usize>,
    },
    /// Let time pass, then deliver at most `max` due entries.
    Advance { ms: i64, max: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            -2000i64..6000,
            any::<bool>(),
            proptest::option::of(0usize..5)
        )
            .prop_map(|(delay_ms, idempotent, retry_of)| Op::Store {
                delay_ms,
                idempotent,
                retry_of
            }),
        (0i64..3000, 1usize..8).prop_map(|(ms, max)| Op::Advance { ms, max }),
    ]
}

/// A state with its log, driven as the broker drives it.
struct Harness {
    state: TimerState,
    log: Vec<u8>,
    now_ms: i64,
    next_sequence: i32,
    delivered: Vec<Waiting>,
    identities: Vec<ClientIdentity>,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            state: TimerState::new(Limits::default()),
            log: Vec::new(),
            now_ms: 1_000_000,
            next_sequence: 0,
            delivered: Vec::new(),
            identities: Vec::new(),
        }
    }

    fn write(&mut self, entry: Entry) {
        let position = (self.log.len() + STORED_BATCH_OFFSET) as u64;
        encode(&entry, &mut self.log);
        self.state.apply(&entry, position);
    }

    fn store(&mut self, client: ClientIdentity, delay_ms: i64) -> Admission {
        let batch = Bytes::from(format!("batch {}", self.identities.len()));
        let admission = self
            .state
            .admit(&client, batch.len(), self.now_ms + delay_ms, self.now_ms);
        let admission = admission.expect("within the limits");
        if let Admission::Store {
            entry_id,
            deliver_at_ms,
        } = admission
        {
            let stored_at_ms = self.now_ms;
            self.write(Entry::Stored {
                entry_id,
                deliver_at_ms,
                stored_at_ms,
                client,
                batch,
            });
        }
        admission
    }

    fn deliver(&mut self, max: usize) {
        for due in self.state.due(self.now_ms, max) {
            let stamp = SchedulerStamp {
                producer_id: 1,
                producer_epoch: 0,
                sequence: self.next_sequence,
            };
            self.next_sequence += 1;
            self.write(Entry::Assigned {
                entry_id: due.entry_id,
                stamp,
                scan_from_offset: 0,
            });
            self.write(Entry::Delivered {
                entry_id: due.entry_id,
                delivered_at_ms: self.now_ms,
            });
            assert!(due.deliver_at_ms <= self.now_ms, "delivered early");
            self.delivered.push(due);
        }
    }
}

/// Applies every entry of `log` to a fresh state.
fn rebuild(log: &[u8]) -> TimerState {
    let mut state = TimerState::new(Limits::default());
    let bytes = Bytes::copy_from_slice(log);
    let mut at = 0;
    while at < bytes.len() {
        match decode(&bytes.slice(at..)).expect("an intact log") {
            Decoded::Entry(entry, used) => {
                state.apply(&entry, (at + STORED_BATCH_OFFSET) as u64);
                at += used;
            }
            Decoded::Incomplete => panic!("an intact log ends on a frame boundary"),
        }
    }
    state
}

fn waiting(state: &TimerState) -> Vec<(u64, i64, Option<SchedulerStamp>, ClientIdentity)> {
    state
        .index()
        .iter()
        .map(|w| (w.entry_id, w.deliver_at_ms, w.slot.assigned, w.slot.client))
        .collect()
}

/// The compacted form of `h`'s log: the head, then each waiting batch (copied from the log at
/// its position) with its `Assigned` mark.
fn compact(h: &Harness) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in h.state.compacted_head() {
        encode(&entry, &mut out);
    }
    for w in h.state.index().iter() {
        let start = w.slot.position as usize;
        let batch = Bytes::copy_from_slice(&h.log[start..start + w.slot.length as usize]);
        let stored = Entry::Stored {
            entry_id: w.entry_id,
            deliver_at_ms: w.deliver_at_ms,
            stored_at_ms: w.slot.stored_at_ms,
            client: w.slot.client,
            batch,
        };
        encode(&stored, &mut out);
        if let Some(stamp) = w.slot.assigned {
            encode(
                &Entry::Assigned {
                    entry_id: w.entry_id,
                    stamp,
                    scan_from_offset: w.slot.scan_from_offset,
                },
                &mut out,
            );
        }
    }
    out
}

proptest! {
    #[test]
    fn due_entries_come_out_exactly_once_in_order_and_a_rebuild_is_the_same_state(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        let mut h = Harness::new();
        let mut stored = std::collections::BTreeSet::new();
        for op in ops {
            match op {
                Op::Store { delay_ms, idempotent, retry_of } => {
                    let known = retry_of.and_then(|n| h.identities.len().checked_sub(n + 1));
                    let client = match (idempotent, known) {
                        (true, Some(i)) if h.identities[i].is_idempotent() => h.identities[i],
                        (true, _) => {
                            let seq = h.identities.len() as i32;
                            ClientIdentity { producer_id: 3, producer_epoch: 0, first_sequence: seq, last_sequence: seq }
                        }
                        (false, _) => ClientIdentity { producer_id: -1, producer_epoch: -1, first_sequence: -1, last_sequence: -1 },
                    };
                    let retry = client.is_idempotent() && h.identities.contains(&client);
                    let admission = h.store(client, delay_ms);
                    match admission {
                        Admission::Store { entry_id, .. } => {
                            prop_assert!(!retry, "a retry was stored again");
                            prop_assert!(stored.insert(entry_id));
                            h.identities.push(client);
                        }
                        Admission::Duplicate { .. } => prop_assert!(retry),
                    }
                }
                Op::Advance { ms, max } => {
                    h.now_ms += ms;
                    h.deliver(max);
                }
            }
            let rebuilt = rebuild(&h.log);
            prop_assert_eq!(waiting(&rebuilt), waiting(&h.state));
            prop_assert_eq!(rebuilt.next_entry_id(), h.state.next_entry_id());
            let compacted = rebuild(&compact(&h));
            prop_assert_eq!(waiting(&compacted), waiting(&h.state));
            prop_assert_eq!(compacted.next_entry_id(), h.state.next_entry_id());
            for client in h.identities.iter().filter(|c| c.is_idempotent()) {
                let again = compacted.admit(client, 1, h.now_ms, h.now_ms);
                prop_assert!(matches!(again, Ok(Admission::Duplicate { .. })), "{:?}", again);
            }
        }
        h.now_ms += 10_000;
        h.deliver(usize::MAX);
        let mut order: Vec<(i64, u64)> = h.delivered.iter().map(|w| (w.deliver_at_ms, w.entry_id)).collect();
        let ids: std::collections::BTreeSet<u64> = order.iter().map(|(_, id)| *id).collect();
        prop_assert_eq!(ids.len(), order.len(), "an entry delivered twice");
        prop_assert_eq!(ids, stored, "every stored entry delivered");
        let delivered_order = order.clone();
        order.sort();
        prop_assert_eq!(delivered_order, order, "not in deliver-at order");
        prop_assert!(h.state.index().is_empty());
    }

    #[test]
    fn in_doubt_entries_are_the_assigned_ones_in_sequence_order(
        count in 1usize..30, assigned in proptest::collection::vec(any::<bool>(), 30)
    ) {
        let mut h = Harness::new();
        for i in 0..count {
            let client = ClientIdentity { producer_id: 3, producer_epoch: 0, first_sequence: i as i32, last_sequence: i as i32 };
            h.store(client, -(i as i64));
        }
        let due = h.state.due(h.now_ms, usize::MAX);
        let mut expected = Vec::new();
        for (n, w) in due.iter().enumerate().filter(|(n, _)| assigned[*n]) {
            let stamp = SchedulerStamp { producer_id: 8, producer_epoch: 0, sequence: n as i32 };
            h.write(Entry::Assigned { entry_id: w.entry_id, stamp, scan_from_offset: 0 });
            expected.push(w.entry_id);
        }
        let rebuilt = rebuild(&h.log);
        let doubt: Vec<u64> = rebuilt.in_doubt().iter().map(|w| w.entry_id).collect();
        prop_assert_eq!(doubt, expected);
    }
}

#[test]
fn limits_are_enforced_before_storing() {
    let limits = Limits {
        delay_ms_max: 100,
        entries_max: 2,
        bytes_max: 10,
        remembered_max: 1,
    };
    let mut state = TimerState::new(limits);
    let none = ClientIdentity {
        producer_id: -1,
        producer_epoch: -1,
        first_sequence: -1,
        last_sequence: -1,
    };
    assert!(matches!(
        state.admit(&none, 1, 201, 100),
        Err(AdmitError::TooLate { .. })
    ));
    assert_eq!(
        state.admit(&none, 1, 50, 100),
        Ok(Admission::Store {
            entry_id: 1,
            deliver_at_ms: 100
        })
    );
    assert!(matches!(
        state.admit(&none, 11, 100, 100),
        Err(AdmitError::Full { .. })
    ));
    for id in 1..=2 {
        let batch = Bytes::from_static(b"b");
        state.apply(
            &Entry::Stored {
                entry_id: id,
                deliver_at_ms: 0,
                stored_at_ms: 0,
                client: none,
                batch,
            },
            0,
        );
    }
    assert!(matches!(
        state.admit(&none, 1, 100, 100),
        Err(AdmitError::Full { .. })
    ));
}
