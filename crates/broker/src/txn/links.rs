//! Connections from a transaction coordinator to the other brokers, for WriteTxnMarkers: one
//! per broker, as a node (the cluster's link security), reopened when closed.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_client::Connection;
use tinymq_client::Security;
use tinymq_meta::MetadataImage;
use tinymq_protocol::messages::NodeRole;
use tinymq_protocol::{messages as m, ErrorCode};

/// Connections to the other brokers, for markers; one per broker, reopened when closed.
#[derive(Debug, Default)]
pub struct MarkerLinks {
    links: Mutex<HashMap<u32, Arc<Connection>>>,
}

impl MarkerLinks {
    /// A connection to `broker` (by `image`) as node `node_id` with the cluster's `links`.
    pub async fn to(
        &self,
        image: &MetadataImage,
        node_id: u32,
        links: &Security,
        broker: u32,
    ) -> Result<Arc<Connection>, m::Error> {
        if let Some(c) = self.links.lock().get(&broker).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let record = image
            .brokers
            .get(&broker)
            .filter(|b| !b.fenced)
            .ok_or_else(|| {
                ErrorCode::LEADER_NOT_AVAILABLE.with_message(format!("broker {broker} is not live"))
            })?;
        let connection = Connection::connect_secure(
            &format!("{}:{}", record.host, record.port),
            &format!("tinymq-txn-{node_id}"),
            &image.cluster_id,
            NodeRole::Broker,
            u64::from(node_id),
            links,
        )
        .await
        .map_err(|e| ErrorCode::LEADER_NOT_AVAILABLE.with_message(e.to_string()))?;
        let connection = Arc::new(connection);
        self.links.lock().insert(broker, connection.clone());
        Ok(connection)
    }
}
