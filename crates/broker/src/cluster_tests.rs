//! Registration against a real (single-node, in-process) MetaServer.

use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::link::MetaLink;
use tinymq_meta::service::MetaService;
use tinymq_meta::Command;

use super::ClusterView;

async fn meta(dir: &std::path::Path) -> Arc<MetaService> {
    let peers = [(1, "127.0.0.1:1".to_string())].into();
    let service = MetaService::start(1, peers, dir, None)
        .await
        .expect("start");
    for _ in 0..400 {
        if service.node.current_leader() == Some(1) {
            return service;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the single MetaServer node did not become leader");
}

/// A broker whose session ended before it saw its own registration (the image came late on a
/// loaded machine) used to wait for that fenced epoch to turn live forever, so its process
/// never started serving: it must register again instead.
#[tokio::test]
async fn a_registration_fenced_before_it_is_seen_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let service = meta(dir.path()).await;
    let cluster = ClusterView::new(7, MetaLink::Local(service.clone()));
    let register = Command::RegisterBroker {
        id: 7,
        host: "127.0.0.1".into(),
        port: 9,
        clean_shutdown: true,
        kafka: None,
    };
    let first = cluster.send_registration(&register).await.unwrap();
    let fence = Command::FenceBroker {
        id: 7,
        epoch: first,
    };
    assert!(service.write(fence).await.error.is_none());
    let seen = tokio::time::timeout(Duration::from_secs(10), cluster.await_registration(first));
    assert!(
        !seen.await.expect("answers, not hangs"),
        "a fenced epoch is not live"
    );

    let again = tokio::time::timeout(
        Duration::from_secs(10),
        cluster.register("127.0.0.1", 9, true),
    )
    .await
    .expect("registers, not hangs")
    .unwrap();
    assert!(again > first, "a new epoch: {again} after {first}");
    let image = cluster.image();
    let broker = &image.brokers[&7];
    assert_eq!((broker.epoch, broker.fenced), (again, false));
    assert_eq!(cluster.epoch(), again);
    service.shutdown().await;
}
