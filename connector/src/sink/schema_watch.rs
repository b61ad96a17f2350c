//! Format `avro`: the sink follows the revision Pub/Sub validates its topic's messages
//! with first (decision 0031). Pub/Sub names each message with the newest revision, within
//! the topic's `first_revision_id`..`last_revision_id`, whose validation accepts it, and
//! that validation ignores bytes after the record and JSON keys the revision lacks
//! (measured on the emulator). Bytes written under an older revision are therefore named
//! with a newer one whenever the newer one happens to read them: a revision that drops a
//! trailing field, or reorders fields of one type. Writing under the revision validated
//! first makes the name right by construction, so the sink re-binds to it.
//!
//! A task reads the topic's binding every [`POLL`] and hands a change to the sink, which
//! applies it before its next batch: rows encoded before stay as they are (each message
//! is named by what its own bytes are). A change the columns cannot be written under, or
//! a binding that is gone for good (no schema, not Avro), fails the job at the next batch
//! with the error the start would give; a sink with nothing to write does not fail.

use std::sync::Arc;
use std::time::Duration;

use google_cloud_pubsub::client::TopicAdmin;
use pubsub_engine_format::avro::{AvroEncoding, AvroSchema};
use pubsub_schema::PubSubProfile;
use tokio::sync::watch;

use crate::avro::{fetch_revision, SchemaReader, TopicSchema};

/// How often the topic's schema settings and newest revision are read (two reads).
pub const POLL: Duration = Duration::from_secs(5);

/// A revision to write under and the topic's encoding.
pub type Binding = (Arc<AvroSchema>, AvroEncoding);

/// What the task saw last: a binding, or (for good) why there is none.
type Seen = Option<Result<Binding, String>>;

/// Watches one topic's binding while a sink subtask runs; the task ends when it drops.
pub struct RevisionWatch {
    rx: watch::Receiver<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl RevisionWatch {
    /// Starts watching `topic` (full name), bound now to revision `bound` in `encoding`.
    pub fn start(
        profile: PubSubProfile,
        topic: String,
        bound: &AvroSchema,
        encoding: AvroEncoding,
    ) -> RevisionWatch {
        let (tx, rx) = watch::channel(None);
        let last = key(bound, encoding);
        let task = tokio::spawn(watch_topic(profile, topic, last, tx));
        RevisionWatch { rx, task }
    }

    /// The binding that replaced the one in use, once; `Err` (for good) when the topic no
    /// longer has a binding the sink can write under.
    pub fn changed(&mut self) -> Option<Result<Binding, String>> {
        // Not `has_changed()`: it fails once the task ended, even with a value unseen
        // (the task ends after sending why there is no binding any more).
        let seen = self.rx.borrow_and_update();
        if !seen.has_changed() {
            return None;
        }
        seen.clone()
    }
}

impl Drop for RevisionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn key(revision: &AvroSchema, encoding: AvroEncoding) -> (String, String, AvroEncoding) {
    (
        revision.name().to_string(),
        revision.revision().to_string(),
        encoding,
    )
}

async fn watch_topic(
    profile: PubSubProfile,
    topic: String,
    mut last: (String, String, AvroEncoding),
    tx: watch::Sender<Seen>,
) {
    let mut clients = None;
    // The topic's settings at the last read that found the revision.
    let mut settings = None;
    let mut unreachable = false;
    loop {
        tokio::time::sleep(POLL).await;
        match poll(&profile, &topic, &mut clients, &mut settings).await {
            Ok(None) => unreachable = false,
            Ok(Some(Ok((revision, encoding)))) => {
                unreachable = false;
                let now = key(&revision, encoding);
                if now != last {
                    last = now;
                    let describe = revision.describe();
                    if tx.send(Some(Ok((revision, encoding)))).is_err() {
                        return;
                    }
                    // After the send: whoever sees this line, the sink sees the change.
                    tracing::info!(
                        "topic {topic}: Pub/Sub now validates its messages with {describe} ({encoding}) first: the sink's next rows are written under it if its columns fit it"
                    );
                }
            }
            Ok(Some(Err(why))) => {
                let _ = tx.send(Some(Err(why.clone())));
                tracing::warn!(
                    "topic {topic}: no schema binding the sink can write under any more ({why}): its next row fails the job"
                );
                return;
            }
            Err(e) => {
                // The sink goes on under the revision it has; said once per outage.
                if !unreachable {
                    tracing::warn!(
                        "cannot read the schema binding of topic {topic} now ({e:#}): the sink writes under the revision it has until it can (checked every {POLL:?})"
                    );
                }
                unreachable = true;
            }
        }
    }
}

/// One read of the topic's binding (the topic; the schema's newest revision unless the
/// topic names its last one and nothing changed): `None` when it is known to be as it
/// was, the revision validated first, or why there is none for good. The error is a
/// failure to ask.
async fn poll(
    profile: &PubSubProfile,
    topic: &str,
    clients: &mut Option<(TopicAdmin, SchemaReader)>,
    settings: &mut Option<TopicSchema>,
) -> anyhow::Result<Option<Result<Binding, String>>> {
    if clients.is_none() {
        *clients = Some((
            crate::client::topic_admin(profile).await?,
            SchemaReader::new(profile).await?,
        ));
    }
    let (admin, reader) = clients.as_ref().expect("set");
    let binding = match crate::avro::topic_schema_with(admin, topic).await {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Ok(Some(Err(format!(
                "format 'avro' needs a topic with a schema, and topic {topic} (the sink's topic) has none any more"
            ))))
        }
        Err(e) if pubsub_engine_spi::ConfigError::is_in(&e) => return Ok(Some(Err(format!("{e:#}")))),
        Err(e) => return Err(e),
    };
    if !binding.last_revision_id.is_empty() && settings.as_ref() == Some(&binding) {
        return Ok(None);
    }
    let last = Some(binding.last_revision_id.as_str()).filter(|r| !r.is_empty());
    let found = match fetch_revision(reader, &binding.schema, last).await? {
        Ok(revision) => Ok((Arc::new(revision), binding.encoding)),
        Err(e) => Err(format!("topic {topic}: {e}")),
    };
    *settings = Some(binding);
    Ok(Some(found))
}
