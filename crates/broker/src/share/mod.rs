//! Share groups on the broker (docs/queues.md, "Share groups"): for each partition led here,
//! each share group's share-partition state (acquisition locks, delivery counts, the start
//! offset), kept durable in a state log (`store`) and rebuilt when first used after this
//! broker starts leading the partition (or by the background task's scan, within a second); ShareFetch (`fetch`), ShareAcknowledge and
//! DescribeShareGroup (`answer`); lock expiry, state-log rewrites and dead-lettering in the
//! background task (`run`, `dead_letter`).

mod acquire;
mod answer;
mod dead_letter;
mod fetch;
pub(crate) mod lookup;
pub(crate) mod registry;
mod store;

pub use answer::{describe_share_group, share_acknowledge};
pub use dead_letter::run;
pub use fetch::share_fetch;
pub use lookup::groups_led_here;
