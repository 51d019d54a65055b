//! Route commands (docs/queues.md, "Routes"): `CreateRoute` and `DeleteRoute` as pure
//! functions of the image, their limits, and what deleting a topic does to the routes that
//! name it (they are deleted with it, in the same log entry).

use crate::command::{MetaError, Outcome, Reply};
use crate::image::{MetadataImage, MetadataRecord, RouteRecord};

pub use tinymq_protocol::names::ROUTE_NAME_BYTES_MAX;
/// Most routes a cluster holds. Each route runs, on the leader of every partition of its
/// source, one reader and one writer with connections of their own, so this bounds the
/// tasks, connections and buffers routes may take on a broker.
pub const ROUTES_MAX: usize = 100;

/// Whether `name` is a route name ([`tinymq_protocol::names::validate_route_name`]).
pub fn valid_route_name(name: &str) -> bool {
    tinymq_protocol::names::validate_route_name(name).is_ok()
}

/// Checks a filter expression: empty (every record) or one that parses. The error is the
/// parser's, naming the column.
pub fn check_filter(filter: &str) -> Result<(), MetaError> {
    if filter.is_empty() {
        return Ok(());
    }
    tinymq_filter::Filter::parse(filter)
        .map(drop)
        .map_err(|e| MetaError::InvalidFilter(e.to_string()))
}

pub(crate) fn create_route(
    image: &MetadataImage,
    name: &str,
    from: &str,
    to: &str,
    filter: &str,
) -> Outcome {
    if !valid_route_name(name) {
        return Err(MetaError::Invalid(format!(
            "invalid route name {name:?}: 1 to {ROUTE_NAME_BYTES_MAX} characters of [A-Za-z0-9._-]"
        )));
    }
    if image.routes.contains_key(name) {
        return Err(MetaError::RouteExists(name.into()));
    }
    for topic in [from, to] {
        if crate::is_internal_topic(topic) {
            return Err(MetaError::InvalidTopic(topic.into()));
        }
        if !image.topics.contains_key(topic) {
            return Err(MetaError::UnknownTopic(topic.into()));
        }
    }
    if from == to {
        return Err(MetaError::Invalid(format!(
            "route {name}: the source and the target are both {from}; a route into its own \
             source would copy its copies again"
        )));
    }
    if let Some(path) = route_path(image, to, from) {
        return Err(MetaError::Invalid(format!(
            "route {name}: routes already lead from {to} back to {from} ({}); a cycle would \
             copy every record around it forever, growing it by its origin headers each time",
            path.join(" -> ")
        )));
    }
    check_filter(filter)?;
    if image.routes.len() >= ROUTES_MAX {
        return Err(MetaError::LimitReached {
            what: "routes".into(),
            max: ROUTES_MAX,
        });
    }
    let route = RouteRecord {
        id: image.next_route_id.max(1),
        from: from.into(),
        to: to.into(),
        filter: filter.into(),
    };
    let name = name.into();
    Ok((
        vec![MetadataRecord::CreateRoute { name, route }],
        Reply::Done,
    ))
}

/// The topics of a chain of routes leading from `start` to `goal` (filters ignored: a
/// filter may pass everything), if there is one. Breadth first over at most `ROUTES_MAX`
/// routes, visiting the routes in name order, so every replica decides alike.
fn route_path(image: &MetadataImage, start: &str, goal: &str) -> Option<Vec<String>> {
    let mut came_from: std::collections::BTreeMap<&str, &str> = Default::default();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(topic) = queue.pop_front() {
        if topic == goal {
            let mut path = vec![goal.to_string()];
            let mut at = goal;
            while let Some(previous) = came_from.get(at) {
                path.push(previous.to_string());
                at = previous;
            }
            path.reverse();
            return Some(path);
        }
        for route in image.routes.values().filter(|r| r.from == topic) {
            if route.to != start && !came_from.contains_key(route.to.as_str()) {
                came_from.insert(&route.to, topic);
                queue.push_back(&route.to);
            }
        }
    }
    None
}

pub(crate) fn delete_route(image: &MetadataImage, name: &str) -> Outcome {
    if !image.routes.contains_key(name) {
        return Err(MetaError::RouteNotFound(name.into()));
    }
    let name = name.into();
    Ok((vec![MetadataRecord::DeleteRoute { name }], Reply::Done))
}

/// The records that delete every route reading from or writing to `topic`, which is being
/// deleted: a route never outlives either of its topics (a topic created again under the
/// name is a new topic, and routing into it or out of it needs a new route).
pub(crate) fn routes_of_deleted_topic(image: &MetadataImage, topic: &str) -> Vec<MetadataRecord> {
    image
        .routes
        .iter()
        .filter(|(_, r)| r.from == topic || r.to == topic)
        .map(|(name, _)| MetadataRecord::DeleteRoute { name: name.clone() })
        .collect()
}

#[cfg(test)]
mod tests;
