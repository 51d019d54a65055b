//! Share groups as pure logic (docs/queues.md, "Share groups"): one share partition's state
//! (its start offset, the in-flight records with their state, holder, lock deadline and
//! delivery count), the transitions (acquire, accept, release, reject, lock expiry,
//! dead-lettering), and the records of the state log it is rebuilt from. Time is passed in.
//!
//! Owner: the share-groups server work of issue 18 (a skeleton until it lands).
