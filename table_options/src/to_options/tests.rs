//! Both directions between the typed configs (and so `schema/table.json`) and the SQL
//! options: every config property survives a trip through `WITH` options, and every
//! option key is written for some config.

use std::collections::BTreeSet;

use pubsub_engine_spi::ConnectorOptions;
use pubsub_schema::*;

use super::*;

fn source_full() -> SourceConfig {
    let create = |topic: &str| SubscriptionCreateConfig {
        topic: topic.into(),
        ack_deadline_ms: Some(20_000),
        message_ordering: true,
        message_retention_ms: Some(3_600_000),
        retain_acked_messages: true,
        expiration: Some(Expiration::Ttl {
            ttl_ms: 172_800_000,
        }),
        dead_letter: Some(DeadLetterConfig {
            topic: "dead".into(),
            max_delivery_attempts: 7,
        }),
        filter: Some("attributes.kind = \"bid\"".into()),
    };
    let mut s = SourceConfig::new("a");
    s.subscriptions = vec![
        SubscriptionConfig {
            id: "a".into(),
            create: Some(create("ta")),
        },
        SubscriptionConfig {
            id: "b".into(),
            create: Some(create("tb")),
        },
        SubscriptionConfig {
            id: "c".into(),
            create: None,
        },
    ];
    s.start_position = StartPosition::Timestamp {
        millis: 1_764_460_800_000,
    };
    s.ordering_mode = OrderingMode::PerKey;
    s.deserialization_failure_policy = DeserializationFailurePolicy::DeadLetter;
    s.max_consecutive_failures = -1;
    s.subscriber = SubscriberOptionsConfig {
        max_outstanding_messages: Some(11),
        max_outstanding_bytes: 12,
        subscriber_buffer_max_messages: Some(13),
        subscriber_buffer_max_bytes: Some(14),
        paused_split_buffer_max_messages: Some(15),
        paused_split_buffer_max_bytes: Some(16),
        parallel_pull_count: 17,
        max_ack_extension_period_ms: 18_000,
        min_duration_per_ack_extension_ms: Some(19_000),
        max_duration_per_ack_extension_ms: Some(20_000),
        await_ack_confirmation_ms: Some(21),
        shutdown_timeout_ms: 22,
        max_records_per_fetch: 23,
        first_checkpoint_timeout_ms: 0,
        rate_limit_messages_per_second: Some(25),
        watermark_idle_timeout_ms: 26,
        watermark_out_of_orderness_ms: Some(27_000),
        watermark_backlog_probe: false,
        watermark_backlog_probe_interval_ms: 28_000,
    };
    let mut d = DeadLetterQueueConfig::new("projects/other/topics/dl");
    d.authentication = Authentication::ServiceAccountKeyFile {
        path: "/k.json".into(),
    };
    d.max_in_flight_messages = -1;
    d.flush_timeout_ms = 26;
    d.shutdown_timeout_ms = 27;
    s.dead_letter = Some(d);
    s.dedup = Some(pubsub_schema::DedupConfig {
        attribute: "record-id".into(),
        window_ms: 90_000,
        max_ids: 5_000,
    });
    s.event_time_attribute = Some("event-time".into());
    s.alignment = Some(pubsub_schema::AlignmentConfig {
        group: "clicks".into(),
        max_drift_ms: 30_000,
        update_interval_ms: 250,
    });
    s
}

fn source_other_variants() -> Vec<SourceConfig> {
    let mut never = SourceConfig::new("x");
    never.start_position = StartPosition::EarliestRetained;
    never.subscriptions[0].create = Some(SubscriptionCreateConfig {
        topic: "t".into(),
        ack_deadline_ms: None,
        message_ordering: false,
        message_retention_ms: None,
        retain_acked_messages: false,
        expiration: Some(Expiration::Never),
        dead_letter: Some(DeadLetterConfig {
            topic: "dead".into(),
            max_delivery_attempts: 5,
        }),
        filter: None,
    });
    let mut d = DeadLetterQueueConfig::new("dl");
    d.authentication = Authentication::Emulator {
        endpoint: "127.0.0.1:8085".into(),
    };
    never.dead_letter = Some(d);
    never.dedup = Some(pubsub_schema::DedupConfig::new("id"));
    never.alignment = Some(pubsub_schema::AlignmentConfig {
        group: "g".into(),
        max_drift_ms: 1,
        update_interval_ms: pubsub_schema::DEFAULT_ALIGNMENT_UPDATE_INTERVAL_MS,
    });
    let mut latest = SourceConfig::new("y");
    latest.start_position = StartPosition::Latest;
    latest.deserialization_failure_policy = DeserializationFailurePolicy::Nack;
    latest.max_consecutive_failures = 7;
    vec![never, latest, SourceConfig::new("z")]
}

fn sink_full() -> SinkConfig {
    let mut s = SinkConfig::new("out");
    s.create_disposition = CreateDisposition::CreateIfNeeded;
    s.topic_create = TopicCreateConfig {
        message_retention_ms: Some(600_000),
        kms_key_name: Some("projects/p/locations/l/keyRings/r/cryptoKeys/k".into()),
        allowed_persistence_regions: vec!["europe-west1".into(), "europe-west4".into()],
        enforce_in_transit: true,
    };
    s.publisher = PublisherConfig {
        batching_element_count_threshold: 11,
        batching_request_byte_threshold: 12,
        batching_delay_threshold_ms: 13,
        retry: RetryConfig {
            total_timeout_ms: Some(14),
            initial_delay_ms: Some(15),
            delay_multiplier: Some(1.6),
            max_delay_ms: Some(17),
            initial_rpc_timeout_ms: Some(18),
            rpc_timeout_multiplier: Some(1.9),
            max_rpc_timeout_ms: Some(20),
            max_attempts: Some(21),
        },
        message_ordering: true,
        max_in_flight_messages: 22,
        max_in_flight_bytes: 23,
        publish_progress_timeout_ms: 24,
        recovery: RecoveryConfig {
            initial_backoff_ms: 25,
            max_backoff_ms: 26,
            max_attempts: 27,
        },
        max_consecutive_rejections: -1,
        shutdown_timeout_ms: 28,
    };
    s.failure_handler = FailureHandler::DeadLetter;
    s.record_id_attribute = Some("record-id".into());
    let mut d = DeadLetterQueueConfig::new("dl");
    d.authentication = Authentication::Emulator {
        endpoint: "127.0.0.1:8085".into(),
    };
    d.max_in_flight_messages = 0;
    d.flush_timeout_ms = 29;
    d.shutdown_timeout_ms = 30;
    s.dead_letter = Some(d);
    s
}

fn sink_other_variants() -> Vec<SinkConfig> {
    let mut never = SinkConfig::new("o2");
    never.create_disposition = CreateDisposition::CreateNever;
    never.failure_handler = FailureHandler::LogAndDrop;
    let mut keyed = SinkConfig::new("o3");
    let mut d = DeadLetterQueueConfig::new("dl");
    d.authentication = Authentication::ServiceAccountKeyFile {
        path: "/k.json".into(),
    };
    keyed.dead_letter = Some(d);
    vec![never, keyed, SinkConfig::new("o4")]
}

fn tables() -> Vec<PubSubTable> {
    let mut t = vec![
        PubSubTable::Source(source_full()),
        PubSubTable::Sink(sink_full()),
    ];
    t.extend(source_other_variants().into_iter().map(PubSubTable::Source));
    t.extend(sink_other_variants().into_iter().map(PubSubTable::Sink));
    t
}

fn profiles() -> Vec<PubSubProfile> {
    [
        Authentication::ApplicationDefault,
        Authentication::Emulator {
            endpoint: "localhost:8085".into(),
        },
        Authentication::ServiceAccountKeyFile {
            path: "/etc/key.json".into(),
        },
    ]
    .into_iter()
    .map(|authentication| PubSubProfile {
        project: "p".into(),
        authentication,
    })
    .collect()
}

fn parse(pairs: &[(String, String)]) -> ConnectorOptions {
    ConnectorOptions::new(pairs.iter().cloned())
}

#[test]
fn every_table_config_survives_a_trip_through_with_options() {
    for t in tables() {
        let pairs = table_to_options(&t).unwrap();
        let mut o = parse(&pairs);
        let back = table_from_options(&mut o).unwrap_or_else(|e| panic!("{e}: {pairs:?}"));
        assert_eq!(back, t, "{pairs:?}");
        o.finish(&KNOWN_OPTIONS).unwrap();
    }
    for p in profiles() {
        let pairs = profile_to_options(&p);
        let mut o = parse(&pairs);
        assert_eq!(profile_from_options(&mut o).unwrap(), p);
        o.finish(&[]).unwrap();
    }
}

#[test]
fn defaults_write_only_the_subscription_or_topic() {
    let s = table_to_options(&PubSubTable::Source(SourceConfig::new("s"))).unwrap();
    assert_eq!(s, [("subscription".to_string(), "s".to_string())]);
    let t = table_to_options(&PubSubTable::Sink(SinkConfig::new("t"))).unwrap();
    assert_eq!(t, [("topic".to_string(), "t".to_string())]);
}

#[test]
fn every_option_key_is_written_for_some_config() {
    let mut written: BTreeSet<String> = BTreeSet::new();
    for t in tables() {
        written.extend(table_to_options(&t).unwrap().into_iter().map(|(k, _)| k));
    }
    for p in profiles() {
        written.extend(profile_to_options(&p).into_iter().map(|(k, _)| k));
    }
    // A saved profile's name is written by the statement's author, not from a config.
    let known: BTreeSet<String> = KNOWN_OPTIONS
        .iter()
        .filter(|k| **k != CONNECTION_PROFILE)
        .map(|k| k.to_string())
        .collect();
    assert_eq!(written, known);
}

#[test]
fn create_options_that_differ_between_subscriptions_are_refused_naming_the_field() {
    let mut s = source_full();
    s.subscriptions[1].create.as_mut().unwrap().ack_deadline_ms = Some(30_000);
    let e = table_to_options(&PubSubTable::Source(s)).unwrap_err();
    assert_eq!(e.field, "/subscriptions/1/create");
    assert!(e.message.contains("scan.auto-create"), "{}", e.message);
}

/// Property paths of a JSON Schema (`a.b[].c`), through `$ref`, `oneOf`/`anyOf`/`allOf`
/// and `items`.
fn schema_paths(
    root: &serde_json::Value,
    node: &serde_json::Value,
    path: &str,
    out: &mut BTreeSet<String>,
) {
    if let Some(r) = node.get("$ref").and_then(|r| r.as_str()) {
        let pointer = r.trim_start_matches('#');
        let target = root.pointer(pointer).unwrap_or_else(|| panic!("{r}"));
        schema_paths(root, target, path, out);
    }
    for k in ["oneOf", "anyOf", "allOf"] {
        for n in node.get(k).and_then(|v| v.as_array()).into_iter().flatten() {
            schema_paths(root, n, path, out);
        }
    }
    if let Some(props) = node.get("properties").and_then(|p| p.as_object()) {
        for (k, v) in props {
            let p = format!("{path}.{k}");
            out.insert(p.clone());
            schema_paths(root, v, &p, out);
        }
    }
    if let Some(items) = node.get("items") {
        schema_paths(root, items, &format!("{path}[]"), out);
    }
}

fn value_paths(v: &serde_json::Value, path: &str, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{path}.{k}");
                out.insert(p.clone());
                value_paths(v, &p, out);
            }
        }
        serde_json::Value::Array(a) => {
            for v in a {
                value_paths(v, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_table_schema_property_is_carried_by_the_options_layer() {
    let schema: serde_json::Value = serde_json::from_str(&table_schema()).unwrap();
    let mut in_schema = BTreeSet::new();
    schema_paths(&schema, &schema, "", &mut in_schema);
    let mut covered = BTreeSet::new();
    for t in tables() {
        value_paths(&serde_json::to_value(&t).unwrap(), "", &mut covered);
    }
    let missing: Vec<&String> = in_schema.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "not covered by the trip test: {missing:?}"
    );
    let extra: Vec<&String> = covered.difference(&in_schema).collect();
    assert!(extra.is_empty(), "not in the schema: {extra:?}");
}
