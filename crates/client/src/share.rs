//! Share-group members (docs/queues.md, "Share groups"): `ShareConsumer` fetches records
//! acquired under a lock from every partition leader of its topics and acknowledges each one
//! (accept, release, reject).
//!
//! Owner: the share-groups client work of issue 18 (a stub until it lands).
