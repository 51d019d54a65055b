//! The broker as a client of its own cluster: the one producer and admin client that queue
//! features share when they write to a partition this broker may not lead (a dead-letter
//! topic, a route's target) or change topics. Connections go to the broker's own advertised
//! address with the node's link security (TLS and the node login from the cluster secret), so
//! the cluster treats them as a node's requests; routes are then refreshed from there.

use std::sync::Arc;

use crate::config::Advertised;
use parking_lot::Mutex;
use tinymq_client::{Admin, ClientConfig, ClientError, Producer, ProducerConfig, Security};

/// How long the half-message producer tries to append one committed half.
pub const HALF_DELIVERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The half-message producer's request timeout (within the delivery timeout).
pub const HALF_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Created on first use (inside the runtime), kept for the broker's life.
pub struct InternalClient {
    config: ClientConfig,
    producer: Mutex<Option<Arc<Producer>>>,
    half_producer: Mutex<Option<Arc<Producer>>>,
    admin: Mutex<Option<Arc<Admin>>>,
}

impl InternalClient {
    /// Connects to `advertised` as written: a name is resolved at connect time and is the
    /// name TLS checks the certificate against, as for any client.
    pub fn new(advertised: &Advertised, links: Security, node_id: u32) -> InternalClient {
        let mut config = ClientConfig::new(&advertised.to_string());
        config.client_id = format!("tinymq-broker-{node_id}");
        config.security = links;
        InternalClient {
            config,
            producer: Mutex::new(None),
            half_producer: Mutex::new(None),
            admin: Mutex::new(None),
        }
    }

    /// Settings for another client of the cluster (a consumer, a second producer).
    pub fn client_config(&self) -> ClientConfig {
        self.config.clone()
    }

    /// The shared idempotent producer (acks = all).
    pub fn producer(&self) -> Result<Arc<Producer>, ClientError> {
        let mut slot = self.producer.lock();
        if let Some(producer) = slot.as_ref() {
            return Ok(producer.clone());
        }
        let mut config = ProducerConfig::new("");
        config.client = self.config.clone();
        let producer = Arc::new(Producer::new(config)?);
        *slot = Some(producer.clone());
        Ok(producer)
    }

    /// The producer of committed half messages: idempotent, acks = all, and giving up on a
    /// batch after [`HALF_DELIVERY_TIMEOUT`] so that a coordinator taking over knows when an
    /// append in flight elsewhere has landed or failed.
    pub fn half_producer(&self) -> Result<Arc<Producer>, ClientError> {
        let mut slot = self.half_producer.lock();
        if let Some(producer) = slot.as_ref() {
            return Ok(producer.clone());
        }
        let mut config = ProducerConfig::new("");
        config.client = self.config.clone();
        config.client.request_timeout = HALF_REQUEST_TIMEOUT;
        config.delivery_timeout = HALF_DELIVERY_TIMEOUT;
        let producer = Arc::new(Producer::new(config)?);
        *slot = Some(producer.clone());
        Ok(producer)
    }

    /// The shared admin client.
    pub fn admin(&self) -> Result<Arc<Admin>, ClientError> {
        let mut slot = self.admin.lock();
        if let Some(admin) = slot.as_ref() {
            return Ok(admin.clone());
        }
        let admin = Arc::new(Admin::new(self.config.clone())?);
        *slot = Some(admin.clone());
        Ok(admin)
    }
}

impl std::fmt::Debug for InternalClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalClient")
            .field("bootstrap", &self.config.bootstrap)
            .finish_non_exhaustive()
    }
}
