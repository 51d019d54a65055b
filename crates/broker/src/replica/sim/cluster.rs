//! The simulated MetaServer: the production metadata state machine
//! ([`tinymq_meta::execute_and_apply`] on a [`MetadataImage`]: registration, fencing,
//! `AlterPartition`'s compare-and-set, preferred-leader election, all with the production
//! election rule) without its Raft log, plus the broker sessions the MetaServer's server keeps
//! (heartbeats, and fencing once a session times out), on the simulation's clock.

use std::collections::BTreeMap;

use tinymq_meta::{execute_and_apply, Command, MetadataImage, PartitionRecord, Reply};

use crate::topic::TopicSettings;

pub const TOPIC: &str = "sim";
/// A broker not heard from for this long is fenced: the MetaServer's own session timeout.
pub const SESSION_TIMEOUT_MS: i64 = tinymq_meta::command::BROKER_SESSION_TIMEOUT.as_millis() as i64;

pub struct Cluster {
    pub image: MetadataImage,
    /// Last heartbeat per registered broker.
    heartbeats: BTreeMap<u32, i64>,
}

impl Cluster {
    /// Registers `replicas` and creates the one simulated partition on them.
    pub fn new(replicas: &[u32], settings: &TopicSettings, now: i64) -> Result<Cluster, String> {
        let mut c = Cluster {
            image: MetadataImage::default(),
            heartbeats: BTreeMap::new(),
        };
        for &id in replicas {
            c.register(id, true, now)?;
        }
        let create = Command::CreateTopic {
            name: TOPIC.into(),
            partitions: 1,
            replication_factor: replicas.len() as u32,
            config: settings.to_config_map(),
        };
        c.run(&create)?;
        Ok(c)
    }

    fn run(&mut self, command: &Command) -> Result<Reply, String> {
        execute_and_apply(&mut self.image, command).map_err(|e| e.to_string())
    }

    /// The partition as the MetaServer has it.
    pub fn record(&self) -> Option<&PartitionRecord> {
        self.image.topics.get(TOPIC)?.partitions.first()
    }

    pub fn broker_epoch(&self, id: u32) -> Option<u64> {
        self.image.brokers.get(&id).map(|b| b.epoch)
    }

    pub fn fenced(&self, id: u32) -> bool {
        self.image.brokers.get(&id).is_none_or(|b| b.fenced)
    }

    /// A broker (re)starting: a new broker epoch, unfenced; partitions move as the
    /// production rule says for a clean or unclean shutdown.
    pub fn register(&mut self, id: u32, clean_shutdown: bool, now: i64) -> Result<(), String> {
        self.run(&Command::RegisterBroker {
            id,
            host: "sim".into(),
            port: 9000 + id as u16,
            clean_shutdown,
            kafka: None,
        })?;
        self.heartbeats.insert(id, now);
        Ok(())
    }

    /// A heartbeat; a fenced broker registers again, as the broker's heartbeat loop does
    /// (with a clean shutdown: it did not stop, its data is as it was).
    pub fn heartbeat(&mut self, id: u32, now: i64) -> Result<bool, String> {
        if self.fenced(id) {
            self.register(id, true, now)?;
            return Ok(true);
        }
        self.heartbeats.insert(id, now);
        Ok(false)
    }

    /// Fences every broker whose session timed out; returns them.
    pub fn expire_sessions(&mut self, now: i64) -> Vec<u32> {
        let expired: Vec<u32> = self
            .heartbeats
            .iter()
            .filter(|(id, last)| now - **last > SESSION_TIMEOUT_MS && !self.fenced(**id))
            .map(|(id, _)| *id)
            .collect();
        for &id in &expired {
            if let Some(epoch) = self.broker_epoch(id) {
                // A fence for a broker epoch that moved on changes nothing; not an error here.
                let _ = self.run(&Command::FenceBroker { id, epoch });
            }
        }
        expired
    }

    /// A leader's ISR proposal; the partition as it is after it (applied or refused at the
    /// current epochs), or why it was refused outright (stale epochs).
    pub fn alter(&mut self, command: &Command) -> Result<PartitionRecord, String> {
        match self.run(command)? {
            Reply::Partition(record) => Ok(record),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    pub fn elect_preferred(&mut self) -> Result<(), String> {
        self.run(&Command::ElectPreferredLeaders {
            topic: Some(TOPIC.into()),
            except_brokers: vec![],
        })
        .map(|_| ())
    }
}
