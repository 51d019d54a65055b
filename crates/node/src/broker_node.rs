//! A broker node — the standalone server or a cluster broker — with its HTTP and Kafka
//! listeners.

use std::net::SocketAddr;
use std::sync::Arc;

use tinymq_broker::{Advertised, Broker, BrokerConfig};
use tinymq_http::HttpServer;
use tinymq_kafka::KafkaListener;

use crate::http_listener::{self, HttpListenerConfig};
use crate::views::BrokerView;
use crate::NodeError;

/// A broker node's settings.
pub struct BrokerNodeConfig {
    /// The broker's, resolved (security, links and the first super user included).
    pub broker: BrokerConfig,
    pub http: Option<HttpListenerConfig>,
    pub kafka: Option<KafkaListenerConfig>,
}

/// The Kafka listener's settings.
#[derive(Debug, Clone, Default)]
pub struct KafkaListenerConfig {
    pub listen: Option<SocketAddr>,
    /// `HOST:PORT` Kafka clients are told (not resolved here); `None`: the bound address, with
    /// the native advertised host when it listens on every address.
    pub advertise: Option<String>,
    /// Kafka's `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// Fetch sessions kept (Kafka's `max.incremental.fetch.session.cache.slots`); `None`:
    /// `tinymq_kafka::FETCH_SESSIONS_MAX`, 0: none.
    pub fetch_sessions_max: Option<usize>,
}

impl KafkaListenerConfig {
    /// The address Kafka clients are told, for a listener bound at `bound`.
    pub fn advertised(
        &self,
        bound: SocketAddr,
        native_advertise: Option<&Advertised>,
    ) -> Result<(String, u16), NodeError> {
        let bad = |why: String| NodeError::Config(why);
        if let Some(text) = &self.advertise {
            let (host, port) = text
                .rsplit_once(':')
                .ok_or_else(|| bad(format!("--kafka-advertise must be HOST:PORT, not {text:?}")))?;
            let port: u16 = port
                .parse()
                .map_err(|_| bad(format!("--kafka-advertise: bad port in {text:?}")))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() || port == 0 {
                return Err(bad(
                    "--kafka-advertise must name a host and a port other than 0".into(),
                ));
            }
            return Ok((host.to_string(), port));
        }
        let host = match (bound.ip().is_unspecified(), native_advertise) {
            (false, _) => bound.ip().to_string(),
            (true, Some(native)) => native.host.clone(),
            (true, None) => {
                return Err(bad(format!(
                    "--kafka-listen {bound} listens on every address: give --kafka-advertise HOST:PORT (or --advertise) so clients know where to connect"
                )))
            }
        };
        Ok((host, bound.port()))
    }
}

/// A running broker node.
pub struct BrokerNode {
    pub(crate) broker: Broker,
    pub(crate) http: Option<HttpServer>,
    pub(crate) kafka: Option<KafkaListener>,
}

pub(crate) async fn start(
    mut config: BrokerNodeConfig,
    standalone: bool,
) -> Result<BrokerNode, NodeError> {
    match (standalone, config.broker.meta.is_empty()) {
        (true, false) => {
            return Err(NodeError::Config(
                "--meta is for `tinymq broker`; `tinymq server` runs its own MetaServer".into(),
            ))
        }
        (false, true) => {
            return Err(NodeError::Config(
                "tinymq broker needs --meta with the MetaServer addresses".into(),
            ))
        }
        _ => {}
    }
    // Bound before the broker starts, so that it registers the Kafka address clients will
    // be told (port 0 becomes the port bound).
    let kafka_listener = match config.kafka.as_ref().and_then(|k| k.listen.map(|l| (k, l))) {
        Some((kafka, addr)) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| NodeError::KafkaListen { addr, source })?;
            let bound = listener
                .local_addr()
                .map_err(|source| NodeError::KafkaListen { addr, source })?;
            let advertised = kafka.advertised(bound, config.broker.advertise.as_ref())?;
            config.broker.kafka_advertised = Some(advertised.clone());
            Some((listener, advertised))
        }
        None => None,
    };
    // Before the broker: /health/ready answers "starting" while it joins and opens partitions.
    let limiter = config.broker.security.login_limiter.clone();
    let http = http_listener::bind(config.http.as_ref(), &limiter).await?;
    let broker = match Broker::start(config.broker).await {
        Ok(broker) => broker,
        Err(e) => {
            // In a test process the node's failure is not the process's end: nothing it
            // started may keep listening.
            if let Some(http) = http {
                http.shutdown().await;
            }
            return Err(e.into());
        }
    };
    let kafka = match kafka_listener {
        Some((listener, advertised)) => {
            let kafka_config = tinymq_kafka::KafkaConfig {
                advertised,
                limits: broker.state().config.listener.clone(),
                auto_create_topics: config.kafka.as_ref().is_some_and(|k| k.auto_create_topics),
                fetch_sessions_max: config
                    .kafka
                    .as_ref()
                    .and_then(|k| k.fetch_sessions_max)
                    .unwrap_or(tinymq_kafka::FETCH_SESSIONS_MAX),
            };
            match KafkaListener::start(listener, broker.front(), kafka_config) {
                Ok(k) => Some(k),
                Err(source) => {
                    let addr = broker.local_addr;
                    broker.shutdown().await;
                    if let Some(http) = http {
                        http.shutdown().await;
                    }
                    return Err(NodeError::KafkaListen { addr, source });
                }
            }
        }
        None => None,
    };
    let view = Arc::new(BrokerView {
        state: broker.state().clone(),
        meta: broker.embedded_meta().map(|m| m.node.clone()),
        kafka: kafka.as_ref().map(KafkaListener::stats),
    });
    http_listener::attach(http.as_ref(), config.http, view, broker.local_addr, true);
    Ok(BrokerNode {
        broker,
        http,
        kafka,
    })
}

impl BrokerNode {
    pub(crate) async fn shutdown(self) {
        if let Some(kafka) = self.kafka {
            kafka.shutdown().await;
        }
        self.broker.shutdown().await;
        if let Some(http) = self.http {
            http.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Advertised, KafkaListenerConfig};

    #[test]
    fn a_kafka_listener_on_every_address_advertises_the_native_host_name() {
        let settings = KafkaListenerConfig::default();
        let native = Advertised::parse("mq1.example.com:21581").unwrap();
        let bound = "0.0.0.0:9092".parse().unwrap();
        let advertised = settings.advertised(bound, Some(&native)).unwrap();
        assert_eq!(advertised, ("mq1.example.com".to_string(), 9092));
        let explicit = KafkaListenerConfig {
            advertise: Some("kafka.example.com:9093".into()),
            ..KafkaListenerConfig::default()
        };
        let advertised = explicit.advertised(bound, Some(&native)).unwrap();
        assert_eq!(advertised, ("kafka.example.com".to_string(), 9093));
    }
}
