//! What a UI asks of the connector before a table exists (Arroyo's `test_profile`,
//! `get_autocomplete` and table `test`): reach the project, list its topics and
//! subscriptions, and read a few messages from a copy of a subscription ([`copy`]) so
//! that the subscription itself is left as it was. Every call is bounded (SPEC 10); no
//! message names a key file's path.

pub mod copy;

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
    let failed = |e: google_cloud_pubsub::Error| list_error(profile, &e);
    let admin = client::topic_admin(profile).await?;
    let topics = all_pages(|token| {
        let request = admin.list_topics().set_project(&project);
        async move {
            let p = diagnose::bounded(request.set_page_size(1000).set_page_token(token))
                .send()
                .await
                .map_err(failed)?;
            Ok((
                p.topics.into_iter().map(|t| t.name).collect(),
                p.next_page_token,
            ))
        }
    })
    .await?;
    let admin = client::subscription_admin(profile).await?;
    let subscriptions = all_pages(|token| {
        let request = admin.list_subscriptions().set_project(&project);
        async move {
            let p = diagnose::bounded(request.set_page_size(1000).set_page_token(token))
                .send()
                .await
                .map_err(failed)?;
            Ok((
                p.subscriptions.into_iter().map(|s| s.name).collect(),
                p.next_page_token,
            ))
        }
    })
    .await?;
    Ok(Resources {
        topics,
        subscriptions,
    })
}

/// Follows page tokens (`page(token)` gives the page's full names and the next token)
/// until the last page or [`MAX_LISTED`] names; returns the ids, sorted.
async fn all_pages<F, Fut>(mut page: F) -> anyhow::Result<Vec<String>>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(Vec<String>, String)>>,
{
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let (names, next) = page(token).await?;
        ids.extend(names.iter().map(|n| id_of(n)));
        if next.is_empty() || ids.len() >= MAX_LISTED {
            break;
        }
        token = next;
    }
    ids.sort();
    Ok(ids)
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
/// dead-letter policy only; never for a sample, read from a copy without one).
#[derive(Debug, Clone)]
pub struct Sampled {
    pub message: Message,
    pub delivery_attempt: Option<i32>,
}

/// What [`sample`] read, and what of its copy could not be removed (with the reason).
#[derive(Debug, Clone)]
pub struct Sample {
    pub messages: Vec<Sampled>,
    pub leftovers: Vec<String>,
}

/// Reads up to `max` distinct messages of subscription `id` **from a copy of it**
/// ([`copy::Copy`]: a snapshot and a temporary subscription seeked to it, both deleted
/// before this returns), so no message of the subscription is delivered, its delivery
/// attempts do not count up and its dead-letter policy forwards nothing. A copied
/// message's `delivery_attempt` is `None` (the copy has no dead-letter policy). Returns
/// when `max` arrived or no new message came for `quiet` (for the first one: `first`).
/// `copied` is called with the copy's name once it exists, before reading: a message
/// published to the topic from then on reaches the copy too. Errors before reading when
/// the subscription cannot be read or copied (named cause and permission); it never falls
/// back to reading the subscription itself.
///
/// The Pub/Sub emulator does not replay a snapshot into a new subscription (measured,
/// docs/decisions/0016): there the copy holds only what is published after `copied`.
pub async fn sample(
    profile: &PubSubProfile,
    id: &str,
    max: usize,
    (first, quiet): (Duration, Duration),
    copied: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<Sample> {
    let name = client::subscription_path(&profile.project, id);
    let copy = copy::Copy::create(profile, &name).await?;
    copied.await;
    let read = read(profile, copy.subscription_id(), max, first, quiet).await;
    let leftovers = copy.remove().await;
    match read {
        Ok(messages) => Ok(Sample {
            messages,
            leftovers,
        }),
        Err(e) if leftovers.is_empty() => Err(e),
        Err(e) => Err(anyhow::anyhow!("{e:#}; {}", leftovers.join("; "))),
    }
}

/// Reads up to `max` distinct messages of subscription `id`, acknowledging none.
async fn read(
    profile: &PubSubProfile,
    id: &str,
    max: usize,
    first: Duration,
    quiet: Duration,
) -> anyhow::Result<Vec<Sampled>> {
    let name = client::subscription_path(&profile.project, id);
    let subscriber = client::subscriber(profile).await?;
    let mut stream = subscriber.subscribe(name).build();
    let shutdown = stream.shutdown_token();
    let mut out: Vec<Sampled> = Vec::new();
    let mut held = Vec::new();
    let mut last = Instant::now();
    let mut failed = None;
    while out.len() < max {
        let wait = if out.is_empty() { first } else { quiet };
        let left = wait.saturating_sub(last.elapsed());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok((message, h)))) => {
                let seen = out
                    .iter()
                    .any(|s| s.message.message_id == message.message_id);
                if !seen {
                    out.push(Sampled {
                        delivery_attempt: h.delivery_attempt(),
                        message,
                    });
                    last = Instant::now();
                }
                held.push(h);
            }
            Ok(Some(Err(e))) => {
                failed = Some(e);
                break;
            }
            Ok(None) | Err(_) => break,
        }
    }
    // Take what the client already received, then drop the stream before nacking: a
    // nack sent while the stream is open brings the message straight back into it, where
    // it is stranded for the stream's ack deadline once the stream closes.
    if failed.is_none() {
        held.extend(crate::source::drain_buffered(&mut stream).await);
    }
    drop(stream);
    held.into_iter().for_each(|h| h.nack());
    // The nacks are sent by the lease loop, which ends once every request completed.
    let _ = tokio::time::timeout(diagnose::ATTEMPT_TIMEOUT, shutdown.shutdown()).await;
    match failed {
        Some(e) => anyhow::bail!("reading the copy {id} failed: {e}"),
        None => Ok(out),
    }
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
