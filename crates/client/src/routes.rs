//! Routes administration on [`crate::Admin`]: create, delete and list content-based routes
//! (docs/queues.md, "Routes").
//!
//! Owner: the routes work of issue 18 (a stub until it lands).
