//! The OTLP/HTTP exporter: finished spans wait in a bounded queue (a full queue drops, and
//! counts, the newest) and go to the collector in batches, protobuf over the hyper client the
//! proxy already has.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{info, warn};

use super::{otlp, Finished};
use crate::telemetry::metrics::SpanMetrics;

/// Where spans go and how they are batched.
#[derive(Debug, Clone)]
pub struct ExporterSettings {
    /// The collector's traces URL (`…/v1/traces`).
    pub endpoint: Uri,
    /// How an https:// collector is verified and what the proxy shows it
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`, `…_CLIENT_CERTIFICATE`, `…_CLIENT_KEY`).
    pub tls: crate::tls::ClientTls,
    /// Sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`: an API key, say).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `service.name` of every span.
    pub service_name: String,
    /// `service.instance.id`: this replica.
    pub instance: String,
    /// Spans waiting for export at most; past it new ones are dropped (and counted).
    pub max_queue: usize,
    /// Spans per export at most.
    pub max_batch: usize,
    /// How long a span may wait for others to join its batch.
    pub delay: Duration,
    /// How long the collector has to answer an export.
    pub timeout: Duration,
}

/// The exporter's end of the queue: spans wait in a buffer that the export task takes every
/// `delay` (or once a batch is full), so a span costs a push, never a wake-up.
#[derive(Debug)]
pub struct Exporter {
    queue: Arc<Queue>,
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    metrics: SpanMetrics,
}

#[derive(Debug)]
struct Queue {
    spans: Mutex<Vec<Finished>>,
    /// Woken when a batch is full.
    full: Notify,
    max_queue: usize,
    max_batch: usize,
}

impl Exporter {
    /// Starts the export task (on the current runtime). Its TLS settings were read at start;
    /// ones that cannot be used now trust no collector (the exports fail, counted).
    pub fn start(settings: ExporterSettings, metrics: SpanMetrics) -> Exporter {
        let queue = Arc::new(Queue {
            spans: Mutex::new(Vec::new()),
            full: Notify::new(),
            max_queue: settings.max_queue.max(1),
            max_batch: settings.max_batch.max(1),
        });
        let (flushes, flushed) = mpsc::channel(4);
        info!(endpoint = %settings.endpoint, "exporting spans over OTLP/HTTP");
        let task = Task {
            client: client(&settings.tls),
            settings,
            metrics: metrics.clone(),
            failing: false,
        };
        tokio::spawn(task.run(queue.clone(), flushed));
        Exporter {
            queue,
            flushes,
            metrics,
        }
    }

    /// Queues a finished span; drops it (counted) if the queue is full.
    pub fn submit(&self, span: Finished) {
        let mut spans = self.queue.spans.lock().unwrap_or_else(|e| e.into_inner());
        if spans.len() >= self.queue.max_queue {
            self.metrics.dropped.inc();
            return;
        }
        spans.push(span);
        if spans.len() == self.queue.max_batch {
            self.queue.full.notify_one();
        }
    }

    /// Exports every span queued so far, waiting at most `bound`.
    pub async fn flush(&self, bound: Duration) {
        let (done, flushed) = oneshot::channel();
        let _ = tokio::time::timeout(bound, async {
            if self.flushes.send(done).await.is_ok() {
                let _ = flushed.await;
            }
        })
        .await;
    }
}

struct Task {
    settings: ExporterSettings,
    metrics: SpanMetrics,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Whether the last export failed: a failure is logged once, not at every batch.
    failing: bool,
}

impl Task {
    async fn run(mut self, queue: Arc<Queue>, mut flushes: mpsc::Receiver<oneshot::Sender<()>>) {
        loop {
            let flush = tokio::select! {
                () = tokio::time::sleep(self.settings.delay) => None,
                () = queue.full.notified() => None,
                done = flushes.recv() => match done {
                    Some(done) => Some(done),
                    None => return, // the exporter is gone
                },
            };
            let batch = std::mem::take(&mut *queue.spans.lock().unwrap_or_else(|e| e.into_inner()));
            for chunk in batch.chunks(self.settings.max_batch) {
                self.export(chunk).await;
            }
            if let Some(done) = flush {
                let _ = done.send(());
            }
        }
    }

    async fn export(&mut self, spans: &[Finished]) {
        let body =
            otlp::encode_request(&self.settings.service_name, &self.settings.instance, spans);
        let mut request = Request::post(self.settings.endpoint.clone())
            .header(header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .expect("a POST to a valid URI with valid headers");
        for (name, value) in &self.settings.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let outcome = tokio::time::timeout(self.settings.timeout, async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(ExportFailed::Unreachable)?;
            let status = response.status();
            // Read to the end, so the connection goes back to the pool.
            let _ = response.into_body().collect().await;
            match status.is_success() {
                true => Ok(()),
                false => Err(ExportFailed::Refused(status)),
            }
        })
        .await
        .unwrap_or(Err(ExportFailed::Silent(self.settings.timeout)));
        match outcome {
            Ok(()) => {
                self.metrics.exported.inc_by(spans.len() as u64);
                if std::mem::take(&mut self.failing) {
                    info!(endpoint = %self.settings.endpoint, "span export works again");
                }
            }
            Err(cause) => {
                self.metrics.exports_failed.inc();
                self.metrics.dropped.inc_by(spans.len() as u64);
                if !std::mem::replace(&mut self.failing, true) {
                    warn!(endpoint = %self.settings.endpoint, %cause, "span export failed; spans are dropped until it works");
                }
            }
        }
    }
}

/// Why a batch of spans did not reach the collector.
#[derive(Debug, thiserror::Error)]
enum ExportFailed {
    #[error(transparent)]
    Unreachable(hyper_util::client::legacy::Error),
    #[error("the collector answered {0}")]
    Refused(http::StatusCode),
    #[error("no answer within {0:?}")]
    Silent(std::time::Duration),
}

/// The client exports go through: http://, or https:// verified as `tls` says.
fn client(tls: &crate::tls::ClientTls) -> Client<HttpsConnector<HttpConnector>, Full<Bytes>> {
    let config = tls.config().unwrap_or_else(|error| {
        warn!(%error, "the collector's TLS settings cannot be used: no https:// collector is trusted");
        crate::tls::client::trusting_nothing()
    });
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(config))
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Client::builder(TokioExecutor::new()).build(connector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_new_spans() {
        let settings = ExporterSettings {
            endpoint: "http://127.0.0.1:9/v1/traces".parse().unwrap(),
            tls: Default::default(),
            headers: Vec::new(),
            service_name: "test".into(),
            instance: "test".into(),
            max_queue: 2,
            max_batch: 512,
            delay: Duration::from_secs(3600),
            timeout: Duration::from_secs(1),
        };
        let metrics = crate::telemetry::metrics::Metrics::default().spans;
        let exporter = Exporter::start(settings, metrics.clone());
        for _ in 0..5 {
            exporter.submit(Finished::default());
        }
        assert_eq!(metrics.dropped.get(), 3);
        assert_eq!(exporter.queue.spans.lock().unwrap().len(), 2);
    }
}
