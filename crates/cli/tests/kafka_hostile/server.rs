//! The hostile-input tests' server: a `tinymq server` with a Kafka listener and a topic `good`
//! the native tools list, and the health check run after each case.

use std::time::Duration;

use super::common::kafka::{KafkaServer, Launch};
use super::common::retry;
use super::wire::{api_versions, supported_table};

/// `tinymq server` with a Kafka listener and `extra` flags, once topic `good` exists.
pub fn start_server(extra: &[&str]) -> KafkaServer {
    with_topic_good(Launch::server().args(extra))
}

/// [`start_server`] whose first super user `admin` has `admin_password` (for `--auth scram`);
/// the native tools log in as admin.
pub fn start_server_with_admin(extra: &[&str], admin_password: &str) -> KafkaServer {
    with_topic_good(Launch::server().args(extra).admin_password(admin_password))
}

fn with_topic_good(launch: Launch) -> KafkaServer {
    let server = launch.start();
    // With --auth scram, `admin` is written shortly after the server listens.
    let created = retry(100, Duration::from_millis(100), || {
        let created = server.tool(&["topic", "create", "good"]).output().unwrap();
        created.status.success().then_some(())
    });
    assert!(created.is_some(), "topic good never created");
    server
}

/// The check after each case.
pub trait Healthy {
    /// Still running, answers a fresh ApiVersions, and serves native clients.
    fn assert_healthy(&mut self, after: &str);
}

impl Healthy for KafkaServer {
    fn assert_healthy(&mut self, after: &str) {
        if let Some(status) = self.try_wait() {
            panic!("the server exited after {after}: {status}");
        }
        let mut probe = self.connect_raw();
        let Some(answer) = api_versions(&mut probe, 0, 4242) else {
            panic!(
                "no ApiVersions answer after {after}; {}",
                self.exit_status()
            );
        };
        assert_eq!(answer.correlation_id, 4242, "after {after}");
        assert_eq!(answer.error_code, 0, "after {after}");
        assert_eq!(answer.apis, supported_table(), "after {after}");
        let listed = self.tool(&["topic", "list"]).output().unwrap();
        assert!(
            listed.status.success(),
            "topic list after {after}: {listed:?}"
        );
        assert!(
            String::from_utf8_lossy(&listed.stdout).contains("good"),
            "topic list after {after}: {listed:?}"
        );
    }
}
