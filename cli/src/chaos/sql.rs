//! The campaign's two pipelines.
//!
//! - **hop1**, under faults: the input subscription (JSON, or Avro on alternate seeds)
//!   through the source's cutter; a message that does not decode, or whose row fails in
//!   SQL, goes to the dead-letter topic through the queue's cutter (policy
//!   `dead-letter`); the query ([`super::payload::query`]) filters by a WHERE and computes
//!   expressions; the sink writes JSON rows to the output topic through the sink's
//!   cutter, stamping each row's record id in attribute [`RID`]. A 10 s lease extension
//!   keeps a dead run's leases at 10 s. A second query reads the same rows into 1 s
//!   windows of publish time (the default 1 s out-of-orderness), written to the windows
//!   topic through the proxy with record ids: windows fire during the faults, held
//!   behind the input's oldest unacknowledged message by the backlog probe (decision
//!   0047), and the open ones' state crosses every fault to the final, drained run.
//! - **hop2**, without faults: every subscription it has on hop1's output topic (one per
//!   incarnation of the topic), deduplicating on [`RID`], to the last topic; each row
//!   carries the record id it was deduplicated on, so the checker can match it.

use super::payload::{query, Format, ROW_COLUMNS, WINDOW_COLUMNS, WINDOW_QUERY};

/// The attribute hop1 stamps record ids in and hop2 deduplicates on.
pub const RID: &str = "rid";

/// Where hop1's paths reach the service (each its own cutter), and its resources.
pub struct Hop1<'a> {
    pub project: &'a str,
    pub format: Format,
    pub input_sub: &'a str,
    pub output: &'a str,
    pub dead_letter: &'a str,
    pub source: &'a str,
    pub sink: &'a str,
    pub dead_letter_endpoint: &'a str,
    /// The windows' topic, and where it is reached (no cutter).
    pub windows: &'a str,
    pub windows_endpoint: &'a str,
}

pub fn hop1(h: &Hop1<'_>) -> String {
    let Hop1 {
        project,
        format,
        input_sub,
        output,
        dead_letter,
        source,
        sink,
        dead_letter_endpoint,
        windows,
        windows_endpoint,
    } = h;
    let columns = match format {
        Format::Json => "seq BIGINT NOT NULL, body JSON",
        // `small` only checks its value fits an INT (a poison message's does not).
        Format::Avro => "seq BIGINT NOT NULL, body TEXT, small INT NOT NULL",
    };
    format!(
        "CREATE TABLE src ({columns}, mid TEXT NOT NULL METADATA FROM 'message-id', attrs JSON NOT NULL METADATA FROM 'attributes')
         WITH ('connector' = 'pubsub', 'project' = '{project}', 'subscription' = '{input_sub}', 'emulator-endpoint' = '{source}',
               'format' = '{format}', 'scan.ack.max-duration-per-extension' = '10s',
               'scan.deserialization-failure-policy' = 'dead-letter', 'scan.dead-letter.topic' = '{dead_letter}',
               'scan.dead-letter.emulator-endpoint' = '{dead_letter_endpoint}',
               'scan.watermark.backlog-probe-interval' = '500ms');
         CREATE TABLE dst ({ROW_COLUMNS})
         WITH ('connector' = 'pubsub', 'project' = '{project}', 'topic' = '{output}', 'emulator-endpoint' = '{sink}', 'format' = 'json',
               'sink.record-id-attribute' = '{RID}');
         CREATE TABLE win ({WINDOW_COLUMNS})
         WITH ('connector' = 'pubsub', 'project' = '{project}', 'topic' = '{windows}', 'emulator-endpoint' = '{windows_endpoint}',
               'format' = 'json', 'sink.record-id-attribute' = '{RID}');
         INSERT INTO dst {query};
         INSERT INTO win {WINDOW_QUERY};\n",
        format = format.name(),
        query = query(*format),
    )
}

/// hop2: `subscriptions` (hop1's output) deduplicated on [`RID`] into `last`, all through
/// `endpoint` (the emulator's proxy, no cutter).
pub fn hop2(project: &str, subscriptions: &[String], last: &str, endpoint: &str) -> String {
    let subscriptions = subscriptions.join(";");
    format!(
        "CREATE TABLE hop1 ({ROW_COLUMNS}, hop1_attrs JSON NOT NULL METADATA FROM 'attributes')
         WITH ('connector' = 'pubsub', 'project' = '{project}', 'subscription' = '{subscriptions}', 'emulator-endpoint' = '{endpoint}',
               'format' = 'json', 'scan.ack.max-duration-per-extension' = '10s', 'scan.dedup.attribute' = '{RID}');
         CREATE TABLE last ({ROW_COLUMNS}, rid TEXT)
         WITH ('connector' = 'pubsub', 'project' = '{project}', 'topic' = '{last}', 'emulator-endpoint' = '{endpoint}', 'format' = 'json',
               'sink.create-disposition' = 'create-never');
         INSERT INTO last SELECT seq, body, mid, attrs, tripled, quotient, label, event, parity, json_get_str(hop1_attrs, '{RID}') AS rid FROM hop1;\n"
    )
}
