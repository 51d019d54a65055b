//! Route commands against an image: creation and its refusals, deletion, the limit, ids never
//! reused, routes deleted with their topics, and images from before routes still loading.

use std::collections::BTreeMap;

use super::*;
use crate::{execute_and_apply, Command};
use tinymq_protocol::ErrorCode;

fn image_with_topics(topics: &[&str]) -> MetadataImage {
    let mut image = MetadataImage::default();
    let register = Command::RegisterBroker {
        id: 1,
        host: "h".into(),
        port: 1,
        clean_shutdown: true,
        kafka: None,
    };
    execute_and_apply(&mut image, &register).unwrap();
    for name in topics {
        let create = Command::CreateTopic {
            name: (*name).into(),
            partitions: 2,
            replication_factor: 1,
            config: BTreeMap::new(),
        };
        execute_and_apply(&mut image, &create).unwrap();
    }
    image
}

fn route(name: &str, from: &str, to: &str, filter: &str) -> Command {
    Command::CreateRoute {
        name: name.into(),
        from: from.into(),
        to: to.into(),
        filter: filter.into(),
    }
}

fn code(image: &mut MetadataImage, command: &Command) -> ErrorCode {
    execute_and_apply(image, command).unwrap_err().error_code()
}

#[test]
fn a_route_is_created_once_and_deleted_once() {
    let mut image = image_with_topics(&["orders", "orders-eu"]);
    let eu = route("eu", "orders", "orders-eu", "header.region = 'eu'");
    execute_and_apply(&mut image, &eu).unwrap();
    let stored = &image.routes["eu"];
    assert_eq!(
        (stored.from.as_str(), stored.to.as_str()),
        ("orders", "orders-eu")
    );
    assert_eq!(stored.filter, "header.region = 'eu'");
    assert_eq!(code(&mut image, &eu), ErrorCode::ROUTE_ALREADY_EXISTS);
    let delete = Command::DeleteRoute { name: "eu".into() };
    execute_and_apply(&mut image, &delete).unwrap();
    assert!(image.routes.is_empty());
    assert_eq!(code(&mut image, &delete), ErrorCode::ROUTE_NOT_FOUND);
}

#[test]
fn bad_routes_are_refused_with_their_codes() {
    let mut image = image_with_topics(&["a", "b"]);
    let cases = [
        (route("", "a", "b", ""), ErrorCode::INVALID_REQUEST),
        (route("x/y", "a", "b", ""), ErrorCode::INVALID_REQUEST),
        (
            route(&"n".repeat(ROUTE_NAME_BYTES_MAX + 1), "a", "b", ""),
            ErrorCode::INVALID_REQUEST,
        ),
        (
            route("r", "missing", "b", ""),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ),
        (
            route("r", "a", "missing", ""),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ),
        (route("r", "a", "a", ""), ErrorCode::INVALID_REQUEST),
        (
            route("r", "__consumer_offsets", "b", ""),
            ErrorCode::INVALID_TOPIC,
        ),
        (
            route("r", "a", "b", "tag = AND x"),
            ErrorCode::INVALID_FILTER,
        ),
    ];
    for (command, want) in cases {
        assert_eq!(code(&mut image, &command), want, "{command:?}");
    }
    assert!(image.routes.is_empty());
    let longest = "n".repeat(ROUTE_NAME_BYTES_MAX);
    execute_and_apply(&mut image, &route(&longest, "a", "b", "")).unwrap();
}

#[test]
fn a_bad_filter_is_refused_naming_its_column() {
    let mut image = image_with_topics(&["a", "b"]);
    let error = execute_and_apply(&mut image, &route("r", "a", "b", "tag = AND x")).unwrap_err();
    assert!(error.to_string().contains("column"), "{error}");
}

#[test]
fn the_cluster_holds_at_most_routes_max_routes() {
    let mut image = image_with_topics(&["a", "b"]);
    for i in 0..ROUTES_MAX {
        execute_and_apply(&mut image, &route(&format!("r{i}"), "a", "b", "")).unwrap();
    }
    let error = execute_and_apply(&mut image, &route("one-more", "a", "b", "")).unwrap_err();
    assert!(matches!(error, MetaError::LimitReached { .. }), "{error}");
    execute_and_apply(&mut image, &Command::DeleteRoute { name: "r0".into() }).unwrap();
    execute_and_apply(&mut image, &route("one-more", "a", "b", "")).unwrap();
}

#[test]
fn a_route_created_again_under_its_name_gets_a_new_id() {
    let mut image = image_with_topics(&["a", "b"]);
    execute_and_apply(&mut image, &route("r", "a", "b", "")).unwrap();
    let first = image.routes["r"].id;
    execute_and_apply(&mut image, &Command::DeleteRoute { name: "r".into() }).unwrap();
    execute_and_apply(&mut image, &route("r", "a", "b", "")).unwrap();
    assert!(first >= 1);
    assert!(image.routes["r"].id > first);
}

#[test]
fn deleting_a_topic_deletes_the_routes_from_or_into_it() {
    let mut image = image_with_topics(&["a", "b", "c"]);
    for (name, from, to) in [("ab", "a", "b"), ("bc", "b", "c"), ("ac", "a", "c")] {
        execute_and_apply(&mut image, &route(name, from, to, "")).unwrap();
    }
    execute_and_apply(&mut image, &Command::DeleteTopic { name: "b".into() }).unwrap();
    assert_eq!(image.routes.keys().collect::<Vec<_>>(), ["ac"]);
    // Created again, the topic has no route: the old ones do not come back.
    let create = Command::CreateTopic {
        name: "b".into(),
        partitions: 1,
        replication_factor: 1,
        config: BTreeMap::new(),
    };
    execute_and_apply(&mut image, &create).unwrap();
    assert_eq!(image.routes.len(), 1);
}

#[test]
fn routes_survive_a_snapshot_and_images_from_before_routes_load() {
    let mut image = image_with_topics(&["a", "b"]);
    execute_and_apply(&mut image, &route("r", "a", "b", "tag = 'red'")).unwrap();
    let again = MetadataImage::from_snapshot(&image.to_snapshot()).unwrap();
    assert_eq!(again, image);
    let mut old: serde_json::Value = serde_json::from_slice(&image.to_snapshot()).unwrap();
    let fields = old.as_object_mut().unwrap();
    fields.remove("routes");
    fields.remove("next_route_id");
    let old = MetadataImage::from_snapshot(&serde_json::to_vec(&old).unwrap()).unwrap();
    assert!(old.routes.is_empty());
    assert_eq!(old.topics, image.topics);
}

#[test]
fn a_route_closing_a_cycle_is_refused_naming_the_path() {
    let mut image = image_with_topics(&["a", "b", "c", "d"]);
    execute_and_apply(&mut image, &route("ab", "a", "b", "")).unwrap();
    execute_and_apply(&mut image, &route("bc", "b", "c", "tag = 'x'")).unwrap();
    // A fork and a join are fine: no path leads back.
    execute_and_apply(&mut image, &route("ac", "a", "c", "")).unwrap();
    execute_and_apply(&mut image, &route("cd", "c", "d", "")).unwrap();
    assert_eq!(
        code(&mut image, &route("ba", "b", "a", "")),
        ErrorCode::INVALID_REQUEST
    );
    let closing = route("da", "d", "a", "tag = 'y'");
    let refused = execute_and_apply(&mut image, &closing).unwrap_err();
    assert!(refused.to_string().contains("a -> c -> d"), "{refused}");
    assert_eq!(image.routes.len(), 4);
    // Deleting a route of the cycle lets it be created.
    execute_and_apply(&mut image, &Command::DeleteRoute { name: "cd".into() }).unwrap();
    execute_and_apply(&mut image, &closing).unwrap();
}
