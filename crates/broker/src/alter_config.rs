//! `AlterTopicConfig` on a broker: checks the change against the MetaServer's rules on this
//! broker's image and against its own storage limits and defaults (as a create is), forwards
//! it, and answers once this broker's partitions of the topic have the new settings. Other
//! brokers apply them when their image shows the change (their next reconciliation).

use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::{MetadataRecord, TopicRecord};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::state::BrokerState;
use crate::topic::TopicSettings;

/// How long the answer waits for the change to show in this broker's image.
const VISIBLE_WAIT: Duration = Duration::from_secs(5);

fn refuse(error: m::Error) -> m::AlterTopicConfigResponse {
    m::AlterTopicConfigResponse {
        error: Some(error),
        config: None,
    }
}

/// The topic's settings after the change, as this broker would use them, or the refusal.
fn checked(
    state: &BrokerState,
    command: &tinymq_meta::Command,
    name: &str,
) -> Result<TopicRecord, m::Error> {
    let image = state.cluster.image();
    let (records, _) = tinymq_meta::execute(&image, command)
        .map_err(|e| e.error_code().with_message(e.to_string()))?;
    let mut topic = image.topics.get(name).cloned().ok_or_else(|| {
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.with_message(format!("unknown topic {name}"))
    })?;
    for record in records {
        if let MetadataRecord::SetTopicConfig { config, .. } = record {
            topic.config = config;
        }
    }
    TopicSettings::from_record(&topic, &state.config.topic_defaults)
        .map_err(|(code, why)| code.with_message(why))?;
    Ok(topic)
}

pub async fn alter_topic_config(
    state: Arc<BrokerState>,
    req: m::AlterTopicConfigRequest,
) -> m::AlterTopicConfigResponse {
    let name = req.name.clone();
    let command = tinymq_meta::server::alter_topic_config_command(req.name, req.set, req.unset);
    let wanted = match checked(&state, &command, &name) {
        Ok(topic) => topic,
        Err(e) => return refuse(e),
    };
    if !req.validate_only {
        if let Err(e) = state.cluster.write(command).await {
            return refuse(e);
        }
        let visible = state
            .cluster
            .wait_until(VISIBLE_WAIT, |image| {
                image
                    .topics
                    .get(&name)
                    .is_some_and(|t| t.config == wanted.config)
            })
            .await;
        if visible {
            // Here at once rather than at the next reconciliation: a client that acts on the
            // answer finds this broker's partitions with the new settings. On a blocking
            // thread: a smaller retention removes segments.
            let here = state.clone();
            let applied = tokio::task::spawn_blocking(move || {
                here.apply_topic_settings(&here.cluster.image())
            })
            .await;
            if let Err(e) = applied {
                tracing::error!(topic = %name, error = %e, "applying the topic's settings failed");
            }
        }
        tracing::info!(topic = %name, "topic settings altered");
    }
    m::AlterTopicConfigResponse {
        error: None,
        config: Some(state.settings_of(&name, &wanted).to_wire()),
    }
}
