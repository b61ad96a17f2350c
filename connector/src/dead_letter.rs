//! Placeholder of the dead-letter queue (SPEC 6.1) while it is built on its own branch.

use pubsub_schema::DeadLetterQueueConfig;

use crate::build_error::BuildError;

pub struct PubSubDeadLetterQueue;

pub struct DeadLetter {
    pub payload: bytes::Bytes,
    pub connector: &'static str,
    pub destination: String,
    pub error: String,
    pub subtask: usize,
}

impl PubSubDeadLetterQueue {
    pub fn from_config(_project: &str, _c: &DeadLetterQueueConfig) -> Result<Self, BuildError> {
        Ok(PubSubDeadLetterQueue)
    }
    pub async fn open(&mut self) -> anyhow::Result<()> {
        anyhow::bail!("the dead-letter queue is not built yet")
    }
    pub async fn offer(&mut self, _letter: DeadLetter) -> anyhow::Result<()> {
        Ok(())
    }
    pub async fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    pub async fn close(&mut self) {}
}
