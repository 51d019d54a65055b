//! Filter expressions (docs/queues.md, "Filters"): `tag = 'red'`,
//! `header.region IN ('eu', 'us') AND header.priority > 3`. Parsing with errors that point at
//! a column, evaluation against one record, and the selection of matching records out of
//! record batches, which the broker uses so that non-matching records never cross the network.
//!
//! Owner: the filters work of issue 18 (a skeleton until it lands).
