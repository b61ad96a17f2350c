//! Pub/Sub's schema service for `format = 'avro'` (issue 18): the schema a topic is bound
//! to, and schema revisions fetched once each and kept (bounded) for the messages that
//! name them.
//!
//! Each revision a message names comes with the schema's other revisions: Pub/Sub names
//! the newest revision its validation accepts, which may not be the one the payload was
//! written with (decision 0031), and the decoder takes the one that reads it whole.
//!
//! A revision that cannot be read for good (deleted, not Avro, not valid Avro) is a decode
//! failure of each message naming it, handled by the failure policy. A revision that
//! cannot be read for now (the service is unreachable) fails the job, which restarts and
//! gets the unacknowledged messages again: never a message dropped for a network fault.

use std::collections::HashMap;
use std::sync::Arc;

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::client::SchemaService;
use google_cloud_pubsub::model::{schema, Encoding, SchemaView};
use pubsub_engine_format::avro::{AvroEncoding, AvroSchema};
use pubsub_engine_spi::ConfigError;
use pubsub_schema::{Authentication, PubSubProfile};

use crate::client;
use crate::diagnose::bounded;

/// Attribute naming the schema a message was validated against (set by Pub/Sub).
pub const SCHEMA_NAME: &str = "googclient_schemaname";
/// Attribute naming the schema revision id (set by Pub/Sub).
pub const SCHEMA_REVISION: &str = "googclient_schemarevisionid";
/// Attribute naming the encoding, `JSON` or `BINARY` (set by Pub/Sub).
pub const SCHEMA_ENCODING: &str = "googclient_schemaencoding";

/// The revision id Pub/Sub puts in `googclient_schemarevisionid` of a message whose
/// revision was deleted (seen on the emulator).
pub const DELETED_REVISION: &str = "_deleted-schema-revision_";

/// Most revisions kept per source subtask. Pub/Sub keeps at most 20 revisions per
/// schema; when the cache is full it is emptied and filled again on demand.
pub const MAX_REVISIONS: usize = 1_000;

/// A topic's schema binding (`Topic.schema_settings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSchema {
    /// `projects/P/schemas/S`.
    pub schema: String,
    pub encoding: AvroEncoding,
    /// The newest revision a message may be written with (empty: the newest there is).
    pub last_revision_id: String,
}

/// Reads schemas from the schema service: through the crate's client, or against the
/// emulator through its REST gateway directly. The crate always sends `view` as an
/// integer (`?view=0`, `?view=2`), which the emulator's gateway cannot map ("Unmapped enum
/// value") and never answers; the same request without `view` is answered with the full
/// schema (measured on the emulator, decision 0027).
pub enum SchemaReader {
    Service(SchemaService),
    Emulator { base: String, http: reqwest::Client },
}

/// One schema revision as the service returned it.
struct Got {
    r#type: schema::Type,
    definition: String,
    revision_id: String,
}

impl SchemaReader {
    /// A reader for `profile`. Errors when the client cannot be built (credentials).
    pub async fn new(profile: &PubSubProfile) -> anyhow::Result<SchemaReader> {
        Ok(match &profile.authentication {
            Authentication::Emulator { endpoint } => SchemaReader::Emulator {
                base: if endpoint.starts_with("http") {
                    format!("{}/v1/", endpoint.trim_end_matches('/'))
                } else {
                    format!("http://{endpoint}/v1/")
                },
                http: reqwest::Client::builder()
                    .timeout(std::time::Duration::from_secs(30))
                    .no_proxy()
                    .build()?,
            },
            _ => SchemaReader::Service(client::schema_service(profile).await?),
        })
    }

    /// Schema resource `path` (`projects/P/schemas/S[@R]`); `None` if it does not exist.
    async fn get(&self, path: &str) -> anyhow::Result<Option<Got>> {
        match self {
            SchemaReader::Service(service) => {
                match bounded(service.get_schema().set_name(path)).send().await {
                    Ok(s) => Ok(Some(Got {
                        r#type: s.r#type,
                        definition: s.definition,
                        revision_id: s.revision_id,
                    })),
                    Err(e) if e.status().is_some_and(|s| s.code == Code::NotFound) => Ok(None),
                    Err(e) => Err(anyhow::anyhow!("cannot read schema {path}: {e}")),
                }
            }
            SchemaReader::Emulator { base, http } => {
                let Some(v) = Self::rest(http.get(format!("{base}{path}")), path).await? else {
                    return Ok(None);
                };
                Ok(Some(Got::from_rest(&v)))
            }
        }
    }

    /// Every revision of schema `name` (`projects/P/schemas/S`) with its definition;
    /// `None` if the schema does not exist.
    async fn list(&self, name: &str) -> anyhow::Result<Option<Vec<Got>>> {
        let mut all = Vec::new();
        let mut token = String::new();
        loop {
            let next = match self {
                SchemaReader::Service(service) => {
                    let page = bounded(
                        service
                            .list_schema_revisions()
                            .set_name(name)
                            .set_view(SchemaView::Full)
                            .set_page_size(100)
                            .set_page_token(token.clone()),
                    )
                    .send()
                    .await;
                    match page {
                        Ok(p) => {
                            all.extend(p.schemas.into_iter().map(|s| Got {
                                r#type: s.r#type,
                                definition: s.definition,
                                revision_id: s.revision_id,
                            }));
                            p.next_page_token
                        }
                        Err(e) if e.status().is_some_and(|s| s.code == Code::NotFound) => {
                            return Ok(None)
                        }
                        Err(e) if e.status().is_some_and(|s| s.code == Code::PermissionDenied) => {
                            tracing::warn!(
                                "cannot list the revisions of schema {name} ({e}): a message is decoded only by the revision Pub/Sub names, and one that revision does not read whole is a decode failure (grant pubsub.schemas.listRevisions to decode it by the revision that wrote it)"
                            );
                            return Ok(Some(Vec::new()));
                        }
                        Err(e) => {
                            anyhow::bail!("cannot list the revisions of schema {name}: {e}")
                        }
                    }
                }
                SchemaReader::Emulator { base, http } => {
                    let mut url = reqwest::Url::parse(&format!("{base}{name}:listRevisions"))?;
                    url.query_pairs_mut().append_pair("pageSize", "100");
                    if !token.is_empty() {
                        url.query_pairs_mut().append_pair("pageToken", &token);
                    }
                    let Some(v) = Self::rest(http.get(url), name).await? else {
                        return Ok(None);
                    };
                    if let Some(revisions) = v["schemas"].as_array() {
                        all.extend(revisions.iter().map(Got::from_rest));
                    }
                    v["nextPageToken"].as_str().unwrap_or_default().to_string()
                }
            };
            if next.is_empty() {
                return Ok(Some(all));
            }
            token = next;
        }
    }

    /// `get` from the emulator's REST gateway, about schema `what`: the JSON body, or
    /// `None` for NOT_FOUND.
    async fn rest(
        get: reqwest::RequestBuilder,
        what: &str,
    ) -> anyhow::Result<Option<serde_json::Value>> {
        let r = get
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot read schema {what}: {e}"))?;
        if r.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let status = r.status();
        let body = r
            .text()
            .await
            .map_err(|e| anyhow::anyhow!("cannot read schema {what}: {e}"))?;
        anyhow::ensure!(
            status.is_success(),
            "cannot read schema {what}: HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        );
        serde_json::from_str(&body)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("cannot read schema {what}: {e}"))
    }
}

impl Got {
    /// A schema revision in the REST gateway's JSON.
    fn from_rest(v: &serde_json::Value) -> Got {
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        Got {
            r#type: match v["type"].as_str() {
                Some("AVRO") => schema::Type::Avro,
                Some("PROTOCOL_BUFFER") => schema::Type::ProtocolBuffer,
                _ => schema::Type::Unspecified,
            },
            definition: text("definition"),
            revision_id: text("revisionId"),
        }
    }
}

/// The schema topic `topic` (full name) is bound to, or `None`. Errors: the topic does
/// not exist (a `ConfigError`), cannot be read, or its encoding is neither JSON nor
/// BINARY.
pub async fn topic_schema(
    profile: &PubSubProfile,
    topic: &str,
) -> anyhow::Result<Option<TopicSchema>> {
    topic_schema_with(&client::topic_admin(profile).await?, topic).await
}

/// [`topic_schema`] through `admin`.
pub async fn topic_schema_with(
    admin: &google_cloud_pubsub::client::TopicAdmin,
    topic: &str,
) -> anyhow::Result<Option<TopicSchema>> {
    let t = match bounded(admin.get_topic().set_topic(topic.to_string()))
        .send()
        .await
    {
        Ok(t) => t,
        // No restart makes it: a sink of format avro does not create its topic.
        Err(e) if e.status().is_some_and(|s| s.code == Code::NotFound) => {
            return Err(ConfigError::wrap(anyhow::anyhow!(
                "topic {topic} does not exist, and format 'avro' reads its schema from it: create it bound to an Avro schema"
            )))
        }
        Err(e) => return Err(anyhow::anyhow!("cannot read topic {topic}: {e}")),
    };
    let Some(s) = t.schema_settings.filter(|s| !s.schema.is_empty()) else {
        return Ok(None);
    };
    let encoding = match s.encoding {
        Encoding::Json => AvroEncoding::Json,
        Encoding::Binary => AvroEncoding::Binary,
        other => anyhow::bail!(
            "topic {topic} has schema {} with encoding {other:?}, which is neither JSON nor BINARY",
            s.schema
        ),
    };
    Ok(Some(TopicSchema {
        schema: s.schema,
        encoding,
        last_revision_id: s.last_revision_id,
    }))
}

/// Revision `revision` of schema `name` (the newest when `None`). The outer error is a
/// failure to ask (retry later); the inner one is for good: the revision does not exist,
/// the schema is not Avro (Protocol Buffers is not supported yet), or its definition is
/// not a valid Avro record.
pub async fn fetch_revision(
    reader: &SchemaReader,
    name: &str,
    revision: Option<&str>,
) -> anyhow::Result<Result<AvroSchema, String>> {
    let path = match revision {
        Some(r) => format!("{name}@{r}"),
        None => name.to_string(),
    };
    let Some(s) = reader.get(&path).await? else {
        return Ok(Err(match revision {
            Some(r) => {
                format!("schema {name} has no revision {r} (it was deleted, or the schema was)")
            }
            None => format!("schema {name} does not exist"),
        }));
    };
    let revision = if s.revision_id.is_empty() {
        revision.unwrap_or_default().to_string()
    } else {
        s.revision_id.clone()
    };
    Ok(match s.r#type {
        schema::Type::Avro => AvroSchema::parse(name, &revision, &s.definition),
        schema::Type::ProtocolBuffer => Err(format!(
            "schema {name} is a Protocol Buffers schema: format 'avro' reads Avro schemas only (Protocol Buffers is not supported yet)"
        )),
        other => Err(format!("schema {name} has type {other:?}, not AVRO")),
    })
}

/// The revisions of schema `name` but `rev`, for payloads Pub/Sub names `rev` that `rev`
/// does not read whole; those that are not valid Avro records are left out (no payload
/// was written with them).
async fn siblings(
    reader: &SchemaReader,
    name: &str,
    rev: &str,
) -> anyhow::Result<Vec<Arc<AvroSchema>>> {
    Ok(reader
        .list(name)
        .await?
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.revision_id != rev && matches!(g.r#type, schema::Type::Avro))
        .filter_map(|g| AvroSchema::parse(name, &g.revision_id, &g.definition).ok())
        .map(Arc::new)
        .collect())
}

/// A revision as read: the schema, or why no message naming it can be decoded.
type Fetched = Result<Arc<AvroSchema>, String>;

/// The writer schema revisions a source subtask has met, by schema name, then revision
/// id (looked up by the attributes' own strings: no key is built per message).
pub struct Revisions {
    reader: Option<SchemaReader>,
    profile: PubSubProfile,
    cache: HashMap<String, HashMap<String, Fetched>>,
    /// Revisions in `cache`, at most [`MAX_REVISIONS`].
    cached: usize,
}

impl Revisions {
    pub fn new(profile: PubSubProfile) -> Revisions {
        Revisions {
            reader: None,
            profile,
            cache: HashMap::new(),
            cached: 0,
        }
    }

    /// Makes sure the revision a message's `attributes` name is known, with the schema's
    /// other revisions as they are now (for a payload it does not read whole). Errors only when
    /// the schema service cannot be asked now (the job fails and restarts; the message
    /// is not acknowledged).
    pub async fn fetch(&mut self, attributes: &HashMap<String, String>) -> anyhow::Result<()> {
        let (Some(name), Some(rev)) =
            (attributes.get(SCHEMA_NAME), attributes.get(SCHEMA_REVISION))
        else {
            return Ok(());
        };
        if rev == DELETED_REVISION || self.get(name, rev).is_some() {
            return Ok(());
        }
        if self.reader.is_none() {
            self.reader = Some(SchemaReader::new(&self.profile).await?);
        }
        let reader = self.reader.as_ref().expect("set");
        let got = match fetch_revision(reader, name, Some(rev)).await? {
            Ok(label) => Ok(label.with_siblings(siblings(reader, name, rev).await?)),
            Err(e) => Err(e),
        };
        if self.cached >= MAX_REVISIONS {
            self.cache.clear();
            self.cached = 0;
        }
        self.cache
            .entry(name.clone())
            .or_default()
            .insert(rev.clone(), got.map(Arc::new));
        self.cached += 1;
        Ok(())
    }

    fn get(&self, name: &str, rev: &str) -> Option<&Fetched> {
        self.cache.get(name).and_then(|revs| revs.get(rev))
    }

    /// The revision and encoding a message was written with, as [`fetch`](Self::fetch)
    /// left them; an error says why the message cannot be decoded.
    pub fn writer(
        &self,
        attributes: &HashMap<String, String>,
    ) -> Result<(Arc<AvroSchema>, AvroEncoding), String> {
        let get = |key: &str| {
            attributes.get(key).ok_or_else(|| {
                format!("the message has no attribute '{key}': it was not published to a topic with a schema (format 'avro' reads messages Pub/Sub validated against an Avro schema)")
            })
        };
        let (name, rev, enc) = (
            get(SCHEMA_NAME)?,
            get(SCHEMA_REVISION)?,
            get(SCHEMA_ENCODING)?,
        );
        if rev == DELETED_REVISION {
            return Err(format!("the message was written with a revision of schema {name} that was deleted since (Pub/Sub names it '{DELETED_REVISION}'): its writer schema is gone"));
        }
        let encoding = AvroEncoding::parse(enc).ok_or_else(|| {
            format!("attribute '{SCHEMA_ENCODING}' is '{enc}', neither JSON nor BINARY")
        })?;
        match self.get(name, rev) {
            Some(Ok(s)) => Ok((s.clone(), encoding)),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("schema {name} revision {rev} was not fetched")),
        }
    }
}

/// The start-up check of a source or sink of format `avro` on `topic` (full name): the
/// topic has a schema and it is Avro. Returns the binding; errors are
/// [`ConfigError`]s (no restart binds a schema), but for a failure to ask.
pub async fn require_avro_topic(
    profile: &PubSubProfile,
    topic: &str,
    whose: &str,
) -> anyhow::Result<TopicSchema> {
    let binding = topic_schema(profile, topic).await?.ok_or_else(|| {
        ConfigError::wrap(anyhow::anyhow!(
            "format 'avro' needs a topic with a schema, and topic {topic} ({whose}) has none: bind an Avro schema to it, or use format 'json'"
        ))
    })?;
    let reader = SchemaReader::new(profile).await?;
    if let Err(e) = fetch_revision(&reader, &binding.schema, None).await? {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "topic {topic} ({whose}): {e}"
        )));
    }
    Ok(binding)
}
