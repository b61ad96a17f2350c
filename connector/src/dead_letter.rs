//! The dead-letter queue (SPEC 6.1) shared by the source (`scan.deserialization-failure-policy
//! = 'dead-letter'`) and the sink (`sink.failure-handler = 'dead-letter'`): a standalone
//! publisher to an **existing** topic (never created: a dead-letter destination created on
//! the fly is one nothing consumes), with credentials of its own (never inherited from the
//! table: a dead-letter topic may use another identity).
//!
//! Semantics follow the reference connector's `PubSubDeadLetterQueue`:
//! - [`PubSubDeadLetterQueue::offer`] may buffer; once `max_in_flight_messages` publishes
//!   are in flight it waits for all of them (`0`, write-through: after each one; `-1`:
//!   never, until the flush), each wait bounded by `flush_timeout`;
//! - [`PubSubDeadLetterQueue::flush`] runs at every checkpoint barrier and makes every
//!   offered letter durable within `flush_timeout`, or fails (failing the checkpoint);
//! - [`PubSubDeadLetterQueue::close`] is best effort within `shutdown_timeout`; nothing
//!   relies on it.
//!
//! An expired wait cancels nothing: the client may still deliver those publishes later, a
//! duplicate the dead-letter contract already asks consumers to expect.
//!
//! A dead letter is the original payload as data, the original message's attributes (a
//! source's) and the `dlq-*` attributes, see [`DeadLetter::into_message`].

use std::fmt;
use std::time::{Duration, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::error::PublishError;
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::publisher::PublishFuture;
use pubsub_engine_spi::Counter;
use pubsub_schema::{Authentication, DeadLetterQueueConfig, PubSubProfile};

use crate::build_error::{show, whole_ms, BuildError};
use crate::client;
use crate::diagnose::{self, Cause, Resource};

/// Counter: dead letters whose publish the server confirmed.
pub const DEAD_LETTERS_PUBLISHED: &str = "dead_letters_published";

/// Attribute: which connector produced the letter (`pubsub-source`, `pubsub-sink`).
pub const ATTR_CONNECTOR: &str = "dlq-connector";
/// Attribute: the full subscription the message was read from, or topic it was meant for.
pub const ATTR_DESTINATION: &str = "dlq-destination";
/// Attribute: why it was dead-lettered, at most [`MAX_ERROR_BYTES`] UTF-8 bytes.
pub const ATTR_ERROR: &str = "dlq-error";
/// Attribute: when it was dead-lettered, RFC 3339 UTC with milliseconds
/// (`2026-11-30T18:00:00.123Z`).
pub const ATTR_TIMESTAMP: &str = "dlq-timestamp";
/// Attribute: the index of the subtask that dead-lettered it, in decimal.
pub const ATTR_SUBTASK: &str = "dlq-subtask";
/// Attribute (when known): the id of the source message the letter comes from; a sink
/// knows it when the pipeline selected the source's `message-id` column into the row.
pub const ATTR_MESSAGE_ID: &str = "dlq-message-id";
/// Attribute (when the original had one): the original message's ordering key. Carried as
/// an attribute, not as the letter's ordering key: the queue publishes unordered, so a
/// failed letter never pauses a key.
pub const ATTR_ORDERING_KEY: &str = "dlq-ordering-key";
/// Attribute (only when some were dropped): how many of the original attributes did not
/// fit Pub/Sub's 100 per message next to the `dlq-*` ones, and their keys
/// (`2: zz1,zz2`), at most [`MAX_ERROR_BYTES`] bytes.
pub const ATTR_DROPPED: &str = "dlq-dropped-attributes";
/// Pub/Sub's limit of an attribute value, in bytes: longer reasons are cut on a character
/// boundary.
pub const MAX_ERROR_BYTES: usize = 1024;
/// Pub/Sub's limit of attributes per message.
pub const MAX_ATTRIBUTES: usize = 100;

/// `max_in_flight_messages`: publish each letter synchronously.
pub const WRITE_THROUGH: i64 = 0;
/// `max_in_flight_messages`: buffer every letter until the flush (memory not bounded by
/// the queue).
pub const UNBOUNDED: i64 = -1;
/// Default `max_in_flight_messages`.
pub const DEFAULT_MAX_IN_FLIGHT: i64 = 1000;
/// Default `flush_timeout`.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `shutdown_timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// One element to dead-letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The original payload (a source message's data, a sink's encoded row); may be empty.
    pub payload: bytes::Bytes,
    /// Which connector produced it: `pubsub-source` or `pubsub-sink`.
    pub connector: &'static str,
    /// The full subscription name it was read from, or the full topic name it was meant for.
    pub destination: String,
    /// Why it failed (cut to [`MAX_ERROR_BYTES`] in the envelope).
    pub error: String,
    /// The index of the subtask that failed it.
    pub subtask: usize,
    /// The original message's attributes (a source's; empty for a sink row).
    pub attributes: std::collections::BTreeMap<String, String>,
    /// The original message's ordering key (empty: none).
    pub ordering_key: String,
    /// The source message id, when known ([`ATTR_MESSAGE_ID`]).
    pub message_id: Option<String>,
}

impl DeadLetter {
    /// The envelope published for this letter at `now`: the payload as data; the
    /// attributes [`ATTR_CONNECTOR`], [`ATTR_DESTINATION`], [`ATTR_ERROR`] (cut to
    /// [`MAX_ERROR_BYTES`] on a character boundary), [`ATTR_TIMESTAMP`] (RFC 3339 UTC,
    /// exactly three fractional digits, see [`rfc3339_millis`]), [`ATTR_SUBTASK`], and
    /// when known [`ATTR_MESSAGE_ID`] and [`ATTR_ORDERING_KEY`]; then the original
    /// attributes under their own keys, as many as fit Pub/Sub's [`MAX_ATTRIBUTES`] in key
    /// order: the `dlq-*` ones win (an original key that is one of them is replaced), and
    /// the rest are dropped and named in [`ATTR_DROPPED`]. An empty payload is fine: the
    /// attributes make the message non-empty.
    pub fn into_message(self, now: SystemTime) -> Message {
        let mut attrs: Vec<(String, String)> = vec![
            (ATTR_CONNECTOR.into(), self.connector.to_string()),
            (ATTR_DESTINATION.into(), self.destination),
            (
                ATTR_ERROR.into(),
                truncate_utf8(&self.error, MAX_ERROR_BYTES).to_string(),
            ),
            (ATTR_TIMESTAMP.into(), rfc3339_millis(now)),
            (ATTR_SUBTASK.into(), self.subtask.to_string()),
        ];
        if let Some(id) = self.message_id {
            attrs.push((ATTR_MESSAGE_ID.into(), id));
        }
        if !self.ordering_key.is_empty() {
            attrs.push((ATTR_ORDERING_KEY.into(), self.ordering_key));
        }
        let ours = attrs.len();
        let mut dropped = Vec::new();
        for (k, v) in self.attributes {
            if attrs[..ours].iter().any(|(o, _)| *o == k) {
                dropped.push(k);
            } else {
                attrs.push((k, v));
            }
        }
        if attrs.len() > MAX_ATTRIBUTES || !dropped.is_empty() {
            // One slot for the note saying what was dropped.
            let keep = attrs.len().min(MAX_ATTRIBUTES - 1);
            let over: Vec<String> = attrs.drain(keep..).map(|(k, _)| k).collect();
            dropped.extend(over);
            let note = format!("{}: {}", dropped.len(), dropped.join(","));
            attrs.push((
                ATTR_DROPPED.into(),
                truncate_utf8(&note, MAX_ERROR_BYTES).to_string(),
            ));
        }
        Message::new().set_data(self.payload).set_attributes(attrs)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `t` as RFC 3339 UTC with exactly three fractional digits, its millisecond (finer
/// digits cut): `2026-11-30T18:00:00.123Z`, `...:00.600Z`, `...:00.000Z`. Fixed width, so
/// the texts sort as the instants do. Clamped to RFC 3339's four-digit years,
/// `0001-01-01T00:00:00.000Z` to `9999-12-31T23:59:59.999Z`.
pub fn rfc3339_millis(t: SystemTime) -> String {
    // 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z in ms from the epoch.
    const FIRST_MS: i128 = -62_135_596_800_000;
    const LAST_MS: i128 = 253_402_300_799_999;
    // Floored: an instant before the epoch belongs to the millisecond that starts before it.
    let ms = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i128,
        Err(e) => -(e.duration().as_nanos().div_ceil(1_000_000) as i128),
    };
    let ms = ms.clamp(FIRST_MS, LAST_MS) as i64;
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A validated dead-letter queue; open it with [`PubSubDeadLetterQueue::open`] before
/// offering. `Debug` never shows the key file's path.
pub struct PubSubDeadLetterQueue {
    config: DeadLetterQueueConfig,
    /// The project the queue's clients bill to and the topic lives in, with the queue's
    /// own authentication.
    profile: PubSubProfile,
    /// The full topic name.
    topic: String,
    publisher: Option<Publisher>,
    in_flight: FuturesUnordered<PublishFuture>,
    published: Counter,
    /// Put before the option names in runtime errors: `sink.` or `scan.` for a table.
    key_prefix: &'static str,
}

impl fmt::Debug for PubSubDeadLetterQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PubSubDeadLetterQueue")
            .field("topic", &self.topic)
            // `Authentication`'s Debug redacts the key file path.
            .field("authentication", &self.config.authentication)
            .field(
                "max_in_flight_messages",
                &self.config.max_in_flight_messages,
            )
            .field("flush_timeout_ms", &self.config.flush_timeout_ms)
            .field("shutdown_timeout_ms", &self.config.shutdown_timeout_ms)
            .field("open", &self.publisher.is_some())
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl PubSubDeadLetterQueue {
    pub fn builder() -> PubSubDeadLetterQueueBuilder {
        PubSubDeadLetterQueueBuilder::default()
    }

    /// Validates a table's queue config through the builder; `project` is the table's
    /// project, in which a topic id resolves. Errors name the option (`dead_letter.topic`,
    /// ...) and the value, never a key file path.
    pub fn from_config(project: &str, c: &DeadLetterQueueConfig) -> Result<Self, BuildError> {
        let mut b = Self::builder()
            .project(project)
            .topic(c.topic.clone())
            .max_in_flight_messages(c.max_in_flight_messages)
            .flush_timeout(Duration::from_millis(c.flush_timeout_ms))
            .shutdown_timeout(Duration::from_millis(c.shutdown_timeout_ms));
        b = match &c.authentication {
            Authentication::ApplicationDefault => b,
            Authentication::ServiceAccountKeyFile { path } => b.service_account_key_file(path),
            Authentication::Emulator { endpoint } => b.emulator_endpoint(endpoint),
        };
        b.build()
    }

    /// Names options in runtime errors by their SQL key under `prefix` (`sink.` or
    /// `scan.`: `'sink.dead-letter.topic'`); without it, as `'dead-letter.topic'`.
    pub fn with_key_prefix(mut self, prefix: &'static str) -> Self {
        self.key_prefix = prefix;
        self
    }

    /// The table config this queue was built from (topic as given).
    pub fn config(&self) -> &DeadLetterQueueConfig {
        &self.config
    }

    /// The full topic name, `projects/P/topics/T`.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Counts confirmed publishes into `c` (the subtask's [`DEAD_LETTERS_PUBLISHED`]).
    pub fn set_counter(&mut self, c: Counter) {
        self.published = c;
    }

    /// Publishes not yet confirmed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Checks that the topic exists with one bounded `GetTopic` (see
    /// [`diagnose::bounded`]). Errors: the topic is missing (the queue never creates one;
    /// a [`pubsub_engine_spi::ConfigError`], no restart fixes it), or unreachable, refused
    /// credentials, denied permission, each naming the topic.
    pub async fn check_topic(&self) -> anyhow::Result<()> {
        self.get_topic().await.map_err(|e| self.own_key(e))
    }

    async fn get_topic(&self) -> anyhow::Result<()> {
        let admin = client::topic_admin(&self.profile)
            .await
            .map_err(|e| e.context(format!("dead-letter topic {}", self.topic)))?;
        match diagnose::bounded(admin.get_topic().set_topic(self.topic.clone()))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if diagnose::cause(&e) == Cause::NotFound => {
                Err(pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
                    "dead-letter topic {} does not exist (NOT_FOUND at {}): the dead-letter queue never creates its topic; create it first (gcloud pubsub topics create {}) or fix option '{}dead-letter.topic'",
                    self.topic,
                    diagnose::endpoint(&self.profile),
                    self.topic.rsplit('/').next().unwrap_or(&self.topic),
                    self.key_prefix
                )))
            }
            Err(e) => {
                let error = anyhow::anyhow!(
                    "dead-letter queue: {}",
                    diagnose::startup_error(&self.profile, Resource::Topic(&self.topic), &e)
                );
                // A name Pub/Sub refuses: no restart fixes it.
                let invalid = e.status().is_some_and(|s| {
                    s.code == google_cloud_gax::error::rpc::Code::InvalidArgument
                });
                Err(if invalid {
                    pubsub_engine_spi::ConfigError::wrap(error)
                } else {
                    error
                })
            }
        }
    }

    /// Checks that the topic exists ([`Self::check_topic`]) and builds the publisher.
    /// Errors as `check_topic`, or when the queue's key file cannot be used (named by its
    /// option, never by its path).
    pub async fn open(&mut self) -> anyhow::Result<()> {
        self.check_topic().await?;
        let publisher = client::publisher(&self.profile, &self.topic)
            .map_err(|e| self.own_key(e))?
            .build()
            .await
            .map_err(|e| self.own_key(diagnose::client_build_error(&self.profile, e)))?;
        self.publisher = Some(publisher);
        Ok(())
    }

    /// The credential errors (`credentials`, `diagnose`) name the table's key-file option;
    /// the queue's key file is its own option, so name that one instead. Keeps a
    /// [`pubsub_engine_spi::ConfigError`] or [`pubsub_engine_spi::PermanentError`] marker.
    fn own_key(&self, e: anyhow::Error) -> anyhow::Error {
        let table_key = format!("'{}'", pubsub_table_options::SERVICE_ACCOUNT_KEY_FILE);
        let text = format!("{e:#}");
        if !matches!(
            self.config.authentication,
            Authentication::ServiceAccountKeyFile { .. }
        ) || !text.contains(&table_key)
        {
            return e;
        }
        let renamed = anyhow::anyhow!(
            "{}",
            text.replace(
                &table_key,
                &format!(
                    "'{}{}'",
                    self.key_prefix,
                    pubsub_table_options::DLQ_KEY_FILE
                )
            )
        );
        if pubsub_engine_spi::ConfigError::is_in(&e) {
            pubsub_engine_spi::ConfigError::wrap(renamed)
        } else if pubsub_engine_spi::PermanentError::is_in(&e) {
            pubsub_engine_spi::PermanentError::wrap(renamed)
        } else {
            renamed
        }
    }

    /// Publishes `letter` (see [`DeadLetter::into_message`]). Once `max_in_flight_messages`
    /// publishes are in flight (every one under write-through, never under unbounded) it
    /// waits for all of them, within `flush_timeout`. Errors: the queue is not open, a
    /// publish failed (naming the topic and the gRPC status), or the wait expired.
    pub async fn offer(&mut self, letter: DeadLetter) -> anyhow::Result<()> {
        let Some(publisher) = self.publisher.as_ref() else {
            anyhow::bail!(
                "dead-letter queue for topic {} is not open: a letter was offered before open() or after close()",
                self.topic
            );
        };
        self.in_flight
            .push(publisher.publish(letter.into_message(SystemTime::now())));
        let max = self.config.max_in_flight_messages;
        if max != UNBOUNDED && self.in_flight.len() as i64 >= max.max(1) {
            self.await_all("an offer").await?;
        }
        Ok(())
    }

    /// Sends everything buffered and awaits every outstanding publish within
    /// `flush_timeout` (one deadline for the whole wait). Runs at every checkpoint barrier;
    /// an error fails that checkpoint. Errors: a publish failed (naming the topic and the
    /// gRPC status) or the wait expired (the publishes are not cancelled).
    pub async fn flush(&mut self) -> anyhow::Result<()> {
        if self.in_flight.is_empty() {
            return Ok(());
        }
        self.await_all("the checkpoint flush").await
    }

    /// Best effort: flushes within `shutdown_timeout`, then drops the publisher. Failures
    /// are logged, never returned: nothing relies on a close (every letter that matters was
    /// made durable by a flush).
    pub async fn close(&mut self) {
        let Some(publisher) = self.publisher.take() else {
            return;
        };
        let timeout = Duration::from_millis(self.config.shutdown_timeout_ms);
        let n = self.in_flight.len();
        let in_flight = &mut self.in_flight;
        let published = &self.published;
        let drained = tokio::time::timeout(timeout, async {
            publisher.flush().await;
            let mut failed = 0usize;
            while let Some(r) = in_flight.next().await {
                match r {
                    Ok(_) => published.add(1),
                    Err(_) => failed += 1,
                }
            }
            failed
        })
        .await;
        match drained {
            Ok(0) => {}
            Ok(failed) => tracing::warn!(
                "dead-letter queue: {failed} of {n} publishes to {} failed while closing (they belonged to no completed checkpoint)",
                self.topic
            ),
            Err(_) => tracing::warn!(
                "dead-letter queue: {} of {n} publishes to {} still outstanding after the shutdown timeout ({}) while closing",
                self.in_flight.len(),
                self.topic,
                show(timeout)
            ),
        }
        self.in_flight = FuturesUnordered::new();
    }

    /// Flushes the publisher and awaits every outstanding publish, all within one
    /// `flush_timeout`. `during` names the caller in errors.
    async fn await_all(&mut self, during: &str) -> anyhow::Result<()> {
        let timeout = Duration::from_millis(self.config.flush_timeout_ms);
        let n = self.in_flight.len();
        let topic = &self.topic;
        let publisher = self.publisher.as_ref();
        let in_flight = &mut self.in_flight;
        let published = &self.published;
        let waited = tokio::time::timeout(timeout, async {
            if let Some(p) = publisher {
                p.flush().await;
            }
            while let Some(r) = in_flight.next().await {
                match r {
                    Ok(_) => published.add(1),
                    Err(e) => return Err(publish_error(topic, &e)),
                }
            }
            Ok(())
        })
        .await;
        match waited {
            Ok(r) => r.map_err(|e| anyhow::anyhow!("{e} during {during}; the checkpoint in progress fails and none of its messages is acknowledged")),
            Err(_) => Err(anyhow::anyhow!(
                "dead-letter queue: {} of {n} publishes to topic {topic} were not confirmed within the flush timeout ({}, option '{}dead-letter.flush-timeout') during {during}; the checkpoint in progress fails and none of its messages is acknowledged",
                self.in_flight.len(),
                show(timeout),
                self.key_prefix
            )),
        }
    }
}

/// Refuses a queue that would go to real Pub/Sub (application default credentials, no
/// endpoint of its own) beside a table on an emulator: the queue does not inherit the
/// table's endpoint, and without this the start fails with a credentials error from the
/// real service. `prefix` (`sink.`, `scan.`) names the options. A
/// [`pubsub_engine_spi::ConfigError`] (exit 2): no restart fixes it. A queue with its own key
/// file goes to real Pub/Sub on purpose and is left alone.
pub fn check_not_inherited(
    table: &PubSubProfile,
    queue: &PubSubDeadLetterQueue,
    prefix: &str,
) -> anyhow::Result<()> {
    let Authentication::Emulator { endpoint } = &table.authentication else {
        return Ok(());
    };
    if queue.config.authentication != Authentication::ApplicationDefault {
        return Ok(());
    }
    Err(pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
        "the table uses the emulator at {endpoint} ('{}'), but its dead-letter queue (topic {}) has no endpoint of its own: the queue does not inherit the table's endpoint and would publish to real Pub/Sub with application default credentials. Set '{prefix}{}' = '{endpoint}' (or run with --emulator, which sets it), or give the queue '{prefix}{}' to use real Pub/Sub on purpose",
        pubsub_table_options::EMULATOR_ENDPOINT,
        queue.topic,
        pubsub_table_options::DLQ_EMULATOR_ENDPOINT,
        pubsub_table_options::DLQ_KEY_FILE,
    )))
}

/// A failed publish, naming the topic and the gRPC status.
fn publish_error(topic: &str, e: &PublishError) -> String {
    let status = match e {
        PublishError::Rpc(err) => err.status().map(|s| (s.code, s.message.clone())),
        _ => None,
    };
    match status {
        Some((code, message)) => format!(
            "dead-letter queue: publish to topic {topic} failed with status {code}: {message}"
        ),
        None => format!("dead-letter queue: publish to topic {topic} failed: {e}"),
    }
}

/// Builder of [`PubSubDeadLetterQueue`]; every rule is checked in [`Self::build`].
/// `Debug` never shows the key file's path.
#[derive(Clone, Default)]
pub struct PubSubDeadLetterQueueBuilder {
    topic: Option<String>,
    project: Option<String>,
    key_file: Option<String>,
    emulator_endpoint: Option<String>,
    max_in_flight_messages: Option<i64>,
    flush_timeout: Option<Duration>,
    shutdown_timeout: Option<Duration>,
}

impl fmt::Debug for PubSubDeadLetterQueueBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PubSubDeadLetterQueueBuilder")
            .field("topic", &self.topic)
            .field("project", &self.project)
            .field(
                "service_account_key_file",
                &self.key_file.as_ref().map(|_| "<redacted>"),
            )
            .field("emulator_endpoint", &self.emulator_endpoint)
            .field("max_in_flight_messages", &self.max_in_flight_messages)
            .field("flush_timeout", &self.flush_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish()
    }
}

const TOPIC: &str = "dead_letter.topic";
const KEY_FILE: &str = "dead_letter.service_account_key_file";
const ENDPOINT: &str = "dead_letter.emulator_endpoint";
const MAX_IN_FLIGHT: &str = "dead_letter.max_in_flight_messages";
const FLUSH_TIMEOUT: &str = "dead_letter.flush_timeout";
const SHUTDOWN_TIMEOUT: &str = "dead_letter.shutdown_timeout";

impl PubSubDeadLetterQueueBuilder {
    /// The topic every dead letter is published to: an id (resolved in [`Self::project`])
    /// or a full name `projects/P/topics/T`. Required; it must exist (never created).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// The project a topic id resolves in (the table's project). Needed unless the topic
    /// is a full name, whose project then wins.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Authenticates with the service-account JSON key at `path` (read when the queue
    /// opens) instead of application default credentials. Not inherited from the table;
    /// cannot be combined with [`Self::emulator_endpoint`]. The path never appears in an
    /// error or a log line.
    pub fn service_account_key_file(mut self, path: impl Into<String>) -> Self {
        self.key_file = Some(path.into());
        self
    }

    /// Publishes to a Pub/Sub emulator at `host:port` (port 1..65535) over plaintext,
    /// without credentials. Checked in `build()`.
    pub fn emulator_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.emulator_endpoint = Some(endpoint.into());
        self
    }

    /// Publishes in flight before an offer waits for them all: positive, [`WRITE_THROUGH`]
    /// (0: each offer waits for its own publish) or [`UNBOUNDED`] (-1: only the flush
    /// waits; memory not bounded by the queue). Default 1000.
    pub fn max_in_flight_messages(mut self, n: i64) -> Self {
        self.max_in_flight_messages = Some(n);
        self
    }

    /// The budget of one wait for the queue's publishes (a flush, or an offer at the
    /// in-flight bound): positive, whole milliseconds. On expiry the wait fails. Default
    /// 60 s.
    pub fn flush_timeout(mut self, d: Duration) -> Self {
        self.flush_timeout = Some(d);
        self
    }

    /// How long closing waits for the queue's publisher, after the host connector's own
    /// shutdown: positive, whole milliseconds. Default 30 s.
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = Some(d);
        self
    }

    /// Validates: a topic, a valid id (with a project) or full name; key file and emulator
    /// endpoint not both; the endpoint `host:port` with port 1..65535; in-flight >= -1;
    /// timeouts positive whole milliseconds. Errors name the option
    /// (`dead_letter.topic`, ...) and the value; a key file path is never shown.
    pub fn build(self) -> Result<PubSubDeadLetterQueue, BuildError> {
        let given = self.topic.unwrap_or_default();
        if given.is_empty() {
            return Err(BuildError::new(
                TOPIC,
                "",
                "is required: the dead-letter topic (an id or projects/P/topics/T)",
            ));
        }
        let (project, id) = match given.strip_prefix("projects/") {
            Some(rest) => {
                let parts: Vec<&str> = rest.split('/').collect();
                match parts.as_slice() {
                    [p, "topics", t] if valid_id(p) && valid_id(t) => {
                        (p.to_string(), t.to_string())
                    }
                    _ => {
                        return Err(BuildError::new(
                            TOPIC,
                            &given,
                            "must be a topic id or a full name projects/P/topics/T",
                        ))
                    }
                }
            }
            None => {
                if !valid_id(&given) {
                    return Err(BuildError::new(
                        TOPIC,
                        &given,
                        "must be a topic id without '/' or surrounding spaces, or a full name projects/P/topics/T",
                    ));
                }
                let project = self.project.clone().unwrap_or_default();
                if !valid_id(&project) {
                    return Err(BuildError::new(
                        "project",
                        &project,
                        "must be a non-blank id without '/' or surrounding spaces (the project the dead-letter topic id resolves in)",
                    ));
                }
                (project, given.clone())
            }
        };
        let authentication = match (self.key_file, self.emulator_endpoint) {
            (Some(_), Some(endpoint)) => {
                return Err(BuildError::between(
                    ENDPOINT,
                    KEY_FILE,
                    endpoint,
                    "cannot be combined with {other}: an emulator's plaintext channel carries no credentials",
                ))
            }
            (Some(path), None) => {
                if path.trim().is_empty() {
                    return Err(BuildError::new(KEY_FILE, "", "must be a non-blank path"));
                }
                Authentication::ServiceAccountKeyFile { path }
            }
            (None, Some(endpoint)) => {
                pubsub_schema::check_endpoint(&endpoint)
                    .map_err(|why| BuildError::new(ENDPOINT, &endpoint, why))?;
                Authentication::Emulator { endpoint }
            }
            (None, None) => Authentication::ApplicationDefault,
        };
        let max_in_flight_messages = self.max_in_flight_messages.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
        if max_in_flight_messages < UNBOUNDED {
            return Err(BuildError::new(
                MAX_IN_FLIGHT,
                max_in_flight_messages,
                "must be positive, 0 (write-through) or -1 (unbounded until the flush)",
            ));
        }
        let flush_timeout_ms = timeout_ms(
            FLUSH_TIMEOUT,
            self.flush_timeout.unwrap_or(DEFAULT_FLUSH_TIMEOUT),
        )?;
        let shutdown_timeout_ms = timeout_ms(
            SHUTDOWN_TIMEOUT,
            self.shutdown_timeout.unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT),
        )?;
        let topic = client::topic_path(&project, &id);
        Ok(PubSubDeadLetterQueue {
            config: DeadLetterQueueConfig {
                topic: given,
                authentication: authentication.clone(),
                max_in_flight_messages,
                flush_timeout_ms,
                shutdown_timeout_ms,
            },
            profile: PubSubProfile {
                project,
                authentication,
            },
            topic,
            publisher: None,
            in_flight: FuturesUnordered::new(),
            published: Counter::default(),
            key_prefix: "",
        })
    }
}

/// A resource id: non-blank, no surrounding whitespace, no `/` (SPEC 5.1).
fn valid_id(id: &str) -> bool {
    !id.trim().is_empty() && id.trim() == id && !id.contains('/')
}

fn timeout_ms(option: &'static str, d: Duration) -> Result<u64, BuildError> {
    let ms = whole_ms(option, d)?;
    if ms == 0 {
        return Err(BuildError::new(option, show(d), "must be positive"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> PubSubDeadLetterQueueBuilder {
        PubSubDeadLetterQueue::builder()
            .project("p")
            .topic("dead")
            .emulator_endpoint("localhost:8085")
    }

    fn err(b: PubSubDeadLetterQueueBuilder) -> BuildError {
        b.build().unwrap_err()
    }

    #[test]
    fn error_is_cut_on_a_char_boundary() {
        let s = "é".repeat(600);
        assert_eq!(s.len(), 1200);
        let cut = truncate_utf8(&s, MAX_ERROR_BYTES);
        assert_eq!(cut.len(), 1024);
        assert!(cut.chars().all(|c| c == 'é'));
        // An odd limit lands inside a character: the cut goes below it.
        assert_eq!(truncate_utf8(&s, 1023).len(), 1022);
        assert_eq!(truncate_utf8("abc", 1024), "abc");
        let euro = "€".repeat(400); // 3 bytes each
        let cut = truncate_utf8(&euro, MAX_ERROR_BYTES);
        assert_eq!(cut.len(), 1023);
        assert!(std::str::from_utf8(cut.as_bytes()).is_ok());
    }

    fn letter(attributes: &[(&str, &str)]) -> DeadLetter {
        DeadLetter {
            payload: bytes::Bytes::new(),
            connector: "pubsub-source",
            destination: "projects/p/subscriptions/s".into(),
            error: "é".repeat(600),
            subtask: 3,
            attributes: attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ordering_key: String::new(),
            message_id: None,
        }
    }

    #[test]
    fn original_attributes_ride_along_and_the_overflow_is_named() {
        let now = SystemTime::UNIX_EPOCH;
        let mut l = letter(&[("eventType", "OBJECT_FINALIZE"), ("dlq-error", "old")]);
        l.ordering_key = "k1".into();
        l.message_id = Some("42".into());
        let m = l.into_message(now);
        assert_eq!(m.attributes["eventType"], "OBJECT_FINALIZE");
        assert_eq!(m.attributes[ATTR_ORDERING_KEY], "k1");
        assert_eq!(m.attributes[ATTR_MESSAGE_ID], "42");
        assert!(m.ordering_key.is_empty(), "the letter itself is unordered");
        // The envelope's own key wins over an original one, which is named as dropped.
        assert_eq!(m.attributes[ATTR_ERROR].len(), 1024);
        assert_eq!(m.attributes[ATTR_DROPPED], "1: dlq-error");
        // 100 originals: 7 dlq-* attributes, 92 originals in key order, the note.
        let many: Vec<(String, String)> =
            (0..100).map(|i| (format!("a{i:03}"), "v".into())).collect();
        let refs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut l = letter(&refs);
        l.ordering_key = "k".into();
        l.message_id = Some("1".into());
        let m = l.into_message(now);
        assert_eq!(m.attributes.len(), MAX_ATTRIBUTES);
        assert!(m.attributes.contains_key("a091") && !m.attributes.contains_key("a092"));
        let note = &m.attributes[ATTR_DROPPED];
        assert!(
            note.starts_with("8: a092,a093,") && note.ends_with("a099"),
            "{note}"
        );
        // 95 originals fit exactly next to the five: no note.
        let refs95 = &refs[..95];
        let m = letter(refs95).into_message(now);
        assert_eq!(m.attributes.len(), 100);
        assert!(!m.attributes.contains_key(ATTR_DROPPED));
        let m = letter(&refs[..96]).into_message(now);
        assert_eq!(m.attributes.len(), 100);
        assert_eq!(m.attributes[ATTR_DROPPED], "2: a094,a095");
    }

    /// The instant `ms` milliseconds (and `sub_ns` nanoseconds) from the Unix epoch,
    /// before it when negative.
    fn at(ms: i64, sub_ns: u32) -> SystemTime {
        let ns = i128::from(ms) * 1_000_000 + i128::from(sub_ns);
        let d = |n: i128| Duration::new((n / 1_000_000_000) as u64, (n % 1_000_000_000) as u32);
        if ns >= 0 {
            SystemTime::UNIX_EPOCH + d(ns)
        } else {
            SystemTime::UNIX_EPOCH - d(-ns)
        }
    }

    /// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z in seconds from the epoch: the
    /// years RFC 3339 writes in four digits.
    const FIRST_S: i64 = -62_135_596_800;
    const LAST_S: i64 = 253_402_300_799;

    #[test]
    fn dlq_timestamps_have_three_fraction_digits_always() {
        for (ms, want) in [
            (1_796_061_600_000, "2026-11-30T18:00:00.000Z"),
            (1_796_061_600_030, "2026-11-30T18:00:00.030Z"),
            (1_796_061_600_600, "2026-11-30T18:00:00.600Z"),
            (1_796_061_600_123, "2026-11-30T18:00:00.123Z"),
            (0, "1970-01-01T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (FIRST_S * 1000, "0001-01-01T00:00:00.000Z"),
            (LAST_S * 1000 + 999, "9999-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        ] {
            assert_eq!(rfc3339_millis(at(ms, 0)), want, "{ms}");
        }
        // Sub-millisecond digits are cut, never rounded up into the next millisecond.
        assert_eq!(
            rfc3339_millis(at(1_796_061_600_599, 999_999)),
            "2026-11-30T18:00:00.599Z"
        );
        assert_eq!(rfc3339_millis(at(-1, 1)), "1969-12-31T23:59:59.999Z");
        // Outside RFC 3339's four-digit years: the nearest end.
        assert_eq!(
            rfc3339_millis(at(LAST_S * 1000 + 1000, 0)),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            rfc3339_millis(at(FIRST_S * 1000 - 1, 0)),
            "0001-01-01T00:00:00.000Z"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Every instant of the years 0001..9999 writes as `YYYY-MM-DDTHH:MM:SS.mmmZ`,
        /// parses back (by the Google client's own RFC 3339 parser) to its millisecond,
        /// and two of them compare as text as they do in time.
        #[test]
        fn dlq_timestamps_parse_back_and_sort_as_the_instants(
            a in (FIRST_S..=LAST_S, proptest::prop_oneof![
                proptest::strategy::Just(0i64),
                proptest::strategy::Just(30),
                proptest::strategy::Just(600),
                0i64..1000
            ], 0u32..1_000_000),
            b in (FIRST_S..=LAST_S, 0i64..1000, 0u32..1_000_000),
            near in -2_000i64..2_000,
        ) {
            let ms = |(s, f, _): (i64, i64, u32)| s * 1000 + f;
            let text = |x: (i64, i64, u32)| rfc3339_millis(at(ms(x), x.2));
            // `b` near `a` too: neighbours differ in their last digits only.
            let c = {
                let m = (ms(a) + near).clamp(FIRST_S * 1000, LAST_S * 1000 + 999);
                (m.div_euclid(1000), m.rem_euclid(1000), b.2)
            };
            for x in [a, b, c] {
                let t = text(x);
                proptest::prop_assert_eq!(t.len(), 24, "{}", t);
                let shape = t.bytes().enumerate().all(|(i, ch)| match i {
                    4 | 7 => ch == b'-',
                    10 => ch == b'T',
                    13 | 16 => ch == b':',
                    19 => ch == b'.',
                    23 => ch == b'Z',
                    _ => ch.is_ascii_digit(),
                });
                proptest::prop_assert!(shape, "{}", t);
                let back = google_cloud_wkt::Timestamp::try_from(t.as_str())
                    .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{t}: {e}")))?;
                proptest::prop_assert_eq!(
                    (back.seconds(), back.nanos()),
                    (x.0, (x.1 * 1_000_000) as i32),
                    "{}", t
                );
            }
            for (x, y) in [(a, b), (a, c), (b, c)] {
                proptest::prop_assert_eq!(text(x).cmp(&text(y)), ms(x).cmp(&ms(y)));
            }
        }
    }

    #[test]
    fn envelope_without_context_has_exactly_the_five_attributes() {
        let letter = letter(&[]);
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_061_600_123);
        let m = letter.into_message(now);
        assert!(m.data.is_empty());
        let mut keys: Vec<&str> = m.attributes.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                ATTR_CONNECTOR,
                ATTR_DESTINATION,
                ATTR_ERROR,
                ATTR_SUBTASK,
                ATTR_TIMESTAMP
            ]
        );
        assert_eq!(m.attributes[ATTR_CONNECTOR], "pubsub-source");
        assert_eq!(m.attributes[ATTR_DESTINATION], "projects/p/subscriptions/s");
        assert_eq!(m.attributes[ATTR_ERROR].len(), 1024);
        assert_eq!(m.attributes[ATTR_TIMESTAMP], "2026-11-30T18:00:00.123Z");
        assert_eq!(m.attributes[ATTR_SUBTASK], "3");
        assert_eq!(
            rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_061_600)),
            "2026-11-30T18:00:00.000Z"
        );
    }

    #[test]
    fn builds_with_defaults_and_resolves_the_topic() {
        let q = base().build().unwrap();
        assert_eq!(q.topic(), "projects/p/topics/dead");
        let c = q.config();
        assert_eq!(c.topic, "dead");
        assert_eq!(c.max_in_flight_messages, 1000);
        assert_eq!(c.flush_timeout_ms, 60_000);
        assert_eq!(c.shutdown_timeout_ms, 30_000);
        // A full name keeps its own project.
        let q = base().topic("projects/other/topics/d").build().unwrap();
        assert_eq!(q.topic(), "projects/other/topics/d");
        // ... and needs no project.
        let q = PubSubDeadLetterQueue::builder()
            .topic("projects/other/topics/d")
            .build()
            .unwrap();
        assert_eq!(q.topic(), "projects/other/topics/d");
        for n in [UNBOUNDED, WRITE_THROUGH, 1, 5000] {
            assert_eq!(
                base()
                    .max_in_flight_messages(n)
                    .build()
                    .unwrap()
                    .config()
                    .max_in_flight_messages,
                n
            );
        }
        // Round trip through the config.
        let c = base()
            .flush_timeout(Duration::from_millis(1500))
            .build()
            .unwrap()
            .config()
            .clone();
        let again = PubSubDeadLetterQueue::from_config("p", &c).unwrap();
        assert_eq!(again.config(), &c);
        assert_eq!(again.topic(), "projects/p/topics/dead");
    }

    #[test]
    fn rejections_name_the_option_and_value() {
        let e = err(PubSubDeadLetterQueue::builder().project("p"));
        assert_eq!(e.option, "dead_letter.topic");
        assert!(e.to_string().contains("is required"), "{e}");
        for bad in [
            "a/b",
            " dead",
            "projects/p/topics/",
            "projects/p/subscriptions/s",
            "projects//topics/t",
            "projects/p/topics/t/x",
        ] {
            let e = err(base().topic(bad));
            assert_eq!((e.option, e.value.as_str()), ("dead_letter.topic", bad));
        }
        let e = err(PubSubDeadLetterQueue::builder().topic("dead"));
        assert_eq!(e.option, "project");
        let e = err(base().emulator_endpoint("nope"));
        assert_eq!(
            (e.option, e.value.as_str()),
            ("dead_letter.emulator_endpoint", "nope")
        );
        assert!(err(base().emulator_endpoint("h:0"))
            .to_string()
            .contains("1..65535"));
        assert!(err(base().emulator_endpoint("h:65536"))
            .to_string()
            .contains("1..65535"));
        let e = err(base().service_account_key_file("/secret/k-9f3a.json"));
        assert_eq!(e.option, "dead_letter.emulator_endpoint");
        assert_eq!(e.other, Some("dead_letter.service_account_key_file"));
        assert!(!e.to_string().contains("9f3a"), "{e}");
        let e = err(base().max_in_flight_messages(-2));
        assert_eq!(
            e.to_string(),
            "option 'dead_letter.max_in_flight_messages' is invalid: must be positive, 0 (write-through) or -1 (unbounded until the flush), was '-2'"
        );
        let e = err(base().flush_timeout(Duration::ZERO));
        assert_eq!(
            (e.option, e.value.as_str()),
            ("dead_letter.flush_timeout", "0s")
        );
        let e = err(base().flush_timeout(Duration::from_micros(1500)));
        assert!(
            e.to_string().contains("whole number of milliseconds"),
            "{e}"
        );
        let e = err(base().shutdown_timeout(Duration::ZERO));
        assert_eq!(e.option, "dead_letter.shutdown_timeout");
    }

    #[test]
    fn debug_never_shows_the_key_file() {
        let b = PubSubDeadLetterQueue::builder()
            .project("p")
            .topic("dead")
            .service_account_key_file("/secret/k-9f3a.json");
        assert!(!format!("{b:?}").contains("9f3a"));
        let q = b.build().unwrap();
        assert!(!format!("{q:?}").contains("9f3a"), "{q:?}");
        assert_eq!(q.topic(), "projects/p/topics/dead");
    }

    #[test]
    fn an_offer_before_open_is_an_error() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut q = base().build().unwrap();
        let e = rt
            .block_on(q.offer(DeadLetter {
                payload: bytes::Bytes::from_static(b"x"),
                connector: "pubsub-sink",
                destination: "projects/p/topics/t".into(),
                error: "bad".into(),
                subtask: 0,
                attributes: Default::default(),
                ordering_key: String::new(),
                message_id: None,
            }))
            .unwrap_err();
        assert!(e.to_string().contains("projects/p/topics/dead"), "{e}");
        assert!(rt.block_on(q.flush()).is_ok());
    }
}
