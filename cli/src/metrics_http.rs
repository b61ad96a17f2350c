//! `--metrics-addr`: `GET /metrics` in the Prometheus text format (0.0.4), read from the
//! job's engine registry at scrape time (decision 0014): a `prometheus-client` collector
//! walks the registry, so nothing is recorded twice and nothing is kept between scrapes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use pubsub_engine_spi::{MetricSample, Metrics};

use crate::metrics_catalog::{self, Described};

/// Every family name starts with this (then `_`).
pub const PREFIX: &str = "pubsub_connector";

/// Reads the engine registry on each scrape.
#[derive(Debug)]
struct EngineCollector {
    metrics: Metrics,
}

/// One family's samples, in label order.
struct Family {
    kind: MetricType,
    help: Cow<'static, str>,
    unit: Option<Unit>,
    /// Values are milliseconds shown as seconds.
    millis_as_seconds: bool,
    /// (operator, subtask, extra label (name, value) such as the publish error's `code`
    /// or a source's `subscription`) -> value.
    series: Vec<(String, usize, Option<(String, String)>, u64)>,
}

/// Groups registry samples into Prometheus families (one HELP/TYPE each, as the format
/// requires), keyed by family name without prefix.
fn families(counters: Vec<MetricSample>, gauges: Vec<MetricSample>) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    let kinds = [(MetricType::Counter, counters), (MetricType::Gauge, gauges)];
    for (kind, samples) in kinds {
        for s in samples {
            let (described, label) = match metrics_catalog::send_error_code(&s.name) {
                Some(code) => (
                    Some(metrics_catalog::SEND_ERRORS),
                    Some(("code".to_string(), code.to_string())),
                ),
                None => (metrics_catalog::describe(&s.name), s.label),
            };
            let (family, help, unit, millis_as_seconds) = match described {
                Some(Described {
                    family,
                    unit,
                    help,
                    millis_as_seconds,
                    ..
                }) => (
                    family.to_string(),
                    Cow::Borrowed(help),
                    unit,
                    millis_as_seconds,
                ),
                None => (
                    metrics_catalog::sanitize(&s.name),
                    Cow::Owned(format!("Operator metric '{}' (not described).", s.name)),
                    None,
                    false,
                ),
            };
            // A name used as a counter and as a gauge would give one family two types.
            let key = match out.get(&family) {
                Some(f) if f.kind != kind => format!("{family}_{}", kind.as_str()),
                _ => family,
            };
            out.entry(key)
                .or_insert_with(|| Family {
                    kind,
                    help,
                    unit: unit.map(|u| match u {
                        "bytes" => Unit::Bytes,
                        "seconds" => Unit::Seconds,
                        other => Unit::Other(other.to_string()),
                    }),
                    millis_as_seconds,
                    series: Vec::new(),
                })
                .series
                .push((s.operator_id, s.subtask, label, s.value));
        }
    }
    out
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let families = families(self.metrics.counter_samples(), self.metrics.gauge_samples());
        for (name, f) in &families {
            let mut family = encoder.encode_descriptor(name, &f.help, f.unit.as_ref(), f.kind)?;
            for (operator, subtask, label, value) in &f.series {
                let mut labels = vec![
                    ("operator".to_string(), operator.clone()),
                    ("subtask".to_string(), subtask.to_string()),
                ];
                labels.extend(label.clone());
                let mut series = family.encode_family(&labels)?;
                match f.kind {
                    MetricType::Counter => {
                        series.encode_counter::<NoLabelSet, u64, u64>(value, None)?
                    }
                    _ if f.millis_as_seconds => series.encode_gauge(&(*value as f64 / 1000.0))?,
                    _ => series.encode_gauge(value)?,
                }
            }
        }
        Ok(())
    }
}

/// The text of one scrape: every metric of `metrics`, labelled `pipeline`, `operator`
/// and `subtask` (and `code` for publish errors).
pub fn render(metrics: &Metrics, pipeline: &str) -> String {
    let mut registry = Registry::with_prefix_and_labels(
        PREFIX,
        [(Cow::Borrowed("pipeline"), Cow::Owned(pipeline.to_string()))].into_iter(),
    );
    registry.register_collector(Box::new(EngineCollector {
        metrics: metrics.clone(),
    }));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
    out
}

/// A bound metrics endpoint; [`MetricsServer::serve`] answers scrapes until the returned
/// guard is dropped or shut down.
pub struct MetricsServer {
    listener: tokio::net::TcpListener,
    addr: String,
}

/// Serves scrapes until [`Serving::shutdown`]; dropping it also stops the server.
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` (`host:port`; port 0 picks a free one). Errors name `--metrics-addr`
    /// and the address: it does not resolve, or cannot be bound (in use, not local).
    pub async fn bind(addr: &str) -> anyhow::Result<MetricsServer> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics-addr {addr}: cannot listen there"))?;
        let bound = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| addr.to_string());
        Ok(MetricsServer {
            listener,
            addr: bound,
        })
    }

    /// The address it listens on (`ip:port`).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Answers `GET /metrics` from `metrics` (404 elsewhere) on the tokio runtime.
    pub fn serve(self, metrics: Metrics, pipeline: String) -> Serving {
        let state = Arc::new((metrics, pipeline));
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let state = state.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                        )],
                        render(&state.0, &state.1),
                    )
                }
            }),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let addr = self.addr.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(self.listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!("metrics endpoint {addr} stopped: {e}");
            }
        });
        Serving {
            stop: Some(tx),
            task,
        }
    }
}

impl Serving {
    /// Stops accepting scrapes and waits (at most 1 s) for those in progress.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let abort = self.task.abort_handle();
        if tokio::time::timeout(std::time::Duration::from_secs(1), &mut self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_end_in_total_with_units_and_labels() {
        let m = Metrics::default();
        m.counter("messages_received", "source-src", 1).add(7);
        m.counter("bytes_sent", "q1-sink-dst", 0).add(100);
        m.counter("send_errors_NOT_FOUND", "q1-sink-dst", 0).add(2);
        m.gauge("checkpoint_lag_ms", "source-src", 1).set(40);
        let text = render(&m, "p");
        assert!(
            text.contains("# TYPE pubsub_connector_messages_received_total counter"),
            "{text}"
        );
        assert!(text.contains(
            "pubsub_connector_messages_received_total{pipeline=\"p\",operator=\"source-src\",subtask=\"1\"} 7"
        ), "{text}");
        assert!(
            text.contains("pubsub_connector_sent_bytes_total{"),
            "{text}"
        );
        assert!(text.contains(
            "pubsub_connector_send_errors_total{pipeline=\"p\",operator=\"q1-sink-dst\",subtask=\"0\",code=\"NOT_FOUND\"} 2"
        ), "{text}");
        assert!(
            text.contains("# TYPE pubsub_connector_checkpoint_lag_ms gauge"),
            "{text}"
        );
        assert!(
            text.contains("# HELP pubsub_connector_checkpoint_lag_ms Milliseconds"),
            "{text}"
        );
    }

    #[test]
    fn every_code_shares_one_help_and_type_line() {
        let m = Metrics::default();
        m.counter("send_errors_NOT_FOUND", "s", 0).add(1);
        m.counter("send_errors_UNAVAILABLE", "s", 0).add(1);
        let text = render(&m, "p");
        assert_eq!(
            text.matches("# TYPE pubsub_connector_send_errors_total")
                .count(),
            1,
            "{text}"
        );
        assert_eq!(
            text.matches("pubsub_connector_send_errors_total{").count(),
            2,
            "{text}"
        );
    }
}
