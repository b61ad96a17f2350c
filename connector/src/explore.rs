//! What a UI asks of the connector before a table exists (Arroyo's `test_profile`,
//! `get_autocomplete` and table `test`): reach the project, list its topics and
//! subscriptions, and read a few messages without acknowledging them. Every call is
//! bounded (SPEC 10); no message names a key file's path.

use std::time::{Duration, Instant};

use google_cloud_pubsub::model::Message;
use pubsub_schema::PubSubProfile;

use crate::client;
use crate::diagnose::{self, Resource};

/// At most this many topics and subscriptions are listed (1000 per page, 10 pages): a UI
/// suggestion list, not an inventory.
pub const MAX_LISTED: usize = 10_000;

/// Topic and subscription ids of the profile's project, each sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub topics: Vec<String>,
    pub subscriptions: Vec<String>,
}

/// Lists the project's topics and subscriptions (ids, sorted; at most [`MAX_LISTED`] of
/// each), each request bounded as start-up checks are ([`diagnose::bounded`]). Errors name
/// the endpoint and the cause (unreachable, authentication, permission).
pub async fn list_resources(profile: &PubSubProfile) -> anyhow::Result<Resources> {
    let project = format!("projects/{}", profile.project);
    let what = |e: &google_cloud_pubsub::Error| list_error(profile, e);
    let admin = client::topic_admin(profile).await?;
    let mut topics = Vec::new();
    let mut token = String::new();
    loop {
        let page = diagnose::bounded(
            admin
                .list_topics()
                .set_project(project.clone())
                .set_page_size(1000)
                .set_page_token(token.clone()),
        )
        .send()
        .await
        .map_err(|e| what(&e))?;
        topics.extend(page.topics.into_iter().map(|t| id_of(&t.name)));
        token = page.next_page_token;
        if token.is_empty() || topics.len() >= MAX_LISTED {
            break;
        }
    }
    let admin = client::subscription_admin(profile).await?;
    let mut subscriptions = Vec::new();
    let mut token = String::new();
    loop {
        let page = diagnose::bounded(
            admin
                .list_subscriptions()
                .set_project(project.clone())
                .set_page_size(1000)
                .set_page_token(token.clone()),
        )
        .send()
        .await
        .map_err(|e| what(&e))?;
        subscriptions.extend(page.subscriptions.into_iter().map(|s| id_of(&s.name)));
        token = page.next_page_token;
        if token.is_empty() || subscriptions.len() >= MAX_LISTED {
            break;
        }
    }
    topics.sort();
    subscriptions.sort();
    Ok(Resources {
        topics,
        subscriptions,
    })
}

/// Checks that the profile reaches its project: lists it and says what it sees, e.g.
/// `connected to project 'p' at emulator endpoint localhost:8085: 3 topics, 2
/// subscriptions`.
pub async fn test_profile(profile: &PubSubProfile) -> anyhow::Result<String> {
    let r = list_resources(profile).await?;
    Ok(format!(
        "connected to project '{}' at {}: {} topics, {} subscriptions",
        profile.project,
        diagnose::endpoint(profile),
        r.topics.len(),
        r.subscriptions.len()
    ))
}

fn id_of(name: &str) -> String {
    name.rsplit('/').next().unwrap_or(name).to_string()
}

fn list_error(profile: &PubSubProfile, e: &google_cloud_pubsub::Error) -> anyhow::Error {
    let endpoint = diagnose::endpoint(profile);
    match diagnose::cause(e) {
        diagnose::Cause::Unreachable => anyhow::anyhow!(
            "cannot reach Pub/Sub at {endpoint}: {e} (is the endpoint up and reachable? gave up after {} attempts, each bounded by {:?})",
            diagnose::ATTEMPTS,
            diagnose::ATTEMPT_TIMEOUT
        ),
        diagnose::Cause::PermissionDenied => anyhow::anyhow!(
            "permission denied listing project '{}' at {endpoint}: the credentials need pubsub.topics.list and pubsub.subscriptions.list (roles/pubsub.viewer)",
            profile.project
        ),
        diagnose::Cause::Authentication => anyhow::anyhow!(
            "authentication to Pub/Sub at {endpoint} failed; check the profile's credentials"
        ),
        _ => anyhow::anyhow!(
            "cannot list project '{}' at {endpoint}: {e}",
            profile.project
        ),
    }
}

/// One message read by [`sample`], with its delivery attempt (subscriptions with a
/// dead-letter policy only).
#[derive(Debug, Clone)]
pub struct Sampled {
    pub message: Message,
    pub delivery_attempt: Option<i32>,
}

/// Reads up to `max` messages of subscription `id` and **nacks each one at once**, so
/// they are redelivered as if never read (their delivery attempt counts up, as Pub/Sub
/// counts every delivery). Returns when `max` arrived or no message came for `quiet`
/// (the first one may take `quiet` plus the stream's start). Errors before reading when
/// the subscription cannot be read (named cause, as at a job's start).
pub async fn sample(
    profile: &PubSubProfile,
    id: &str,
    max: usize,
    quiet: Duration,
) -> anyhow::Result<Vec<Sampled>> {
    let name = client::subscription_path(&profile.project, id);
    let admin = client::subscription_admin(profile).await?;
    diagnose::bounded(admin.get_subscription().set_subscription(name.clone()))
        .send()
        .await
        .map_err(|e| diagnose::startup_error(profile, Resource::Subscription(&name), &e))?;
    let subscriber = client::subscriber(profile).await?;
    let mut stream = subscriber.subscribe(name).build();
    let shutdown = stream.shutdown_token();
    let mut out = Vec::new();
    let mut last = Instant::now();
    while out.len() < max {
        let left = quiet.saturating_sub(last.elapsed());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok((message, h)))) => {
                let delivery_attempt = h.delivery_attempt();
                h.nack();
                out.push(Sampled {
                    message,
                    delivery_attempt,
                });
                last = Instant::now();
            }
            Ok(Some(Err(e))) => {
                close(&mut stream, &shutdown).await;
                anyhow::bail!("reading {id} failed: {e}");
            }
            Ok(None) | Err(_) => break,
        }
    }
    close(&mut stream, &shutdown).await;
    Ok(out)
}

/// Stops the stream, nacking deliveries still in its buffer while the client sends the
/// pending nacks; bounded by [`diagnose::ATTEMPT_TIMEOUT`].
async fn close(
    stream: &mut google_cloud_pubsub::subscriber::MessageStream,
    shutdown: &google_cloud_pubsub::subscriber::ShutdownToken,
) {
    let drain = async {
        while let Ok(Some(Ok((_, h)))) =
            tokio::time::timeout(Duration::from_millis(200), stream.next()).await
        {
            h.nack();
        }
    };
    let _ = tokio::time::timeout(diagnose::ATTEMPT_TIMEOUT, async {
        tokio::join!(shutdown.shutdown(), drain)
    })
    .await;
}

/// Whether topic `id` (an id in the profile's project, or a full name) exists. Errors
/// name the cause when Pub/Sub cannot tell.
pub async fn topic_exists(profile: &PubSubProfile, id: &str) -> anyhow::Result<bool> {
    let name = if id.starts_with("projects/") {
        id.to_string()
    } else {
        client::topic_path(&profile.project, id)
    };
    let admin = client::topic_admin(profile).await?;
    match diagnose::bounded(admin.get_topic().set_topic(name.clone()))
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if diagnose::cause(&e) == diagnose::Cause::NotFound => Ok(false),
        Err(e) => Err(diagnose::startup_error(profile, Resource::Topic(&name), &e)),
    }
}
