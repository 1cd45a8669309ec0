//! The OTLP/HTTP exporter: finished spans wait in a bounded queue (a full queue drops, and
//! counts, the newest) and go to the collector in batches, protobuf over the hyper client the
//! proxy already has.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{otlp, Finished};
use crate::metrics::SpanMetrics;

/// Where spans go and how they are batched.
#[derive(Debug, Clone)]
pub struct ExporterSettings {
    /// The collector's traces URL (`…/v1/traces`).
    pub endpoint: Uri,
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

/// The exporter's end of the queue.
#[derive(Debug)]
pub struct Exporter {
    queue: mpsc::Sender<Finished>,
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    metrics: SpanMetrics,
}

impl Exporter {
    /// Starts the export task (on the current runtime).
    pub fn start(settings: ExporterSettings, metrics: SpanMetrics) -> Exporter {
        let (queue, spans) = mpsc::channel(settings.max_queue.max(1));
        let (flushes, flushed) = mpsc::channel(4);
        info!(endpoint = %settings.endpoint, "exporting spans over OTLP/HTTP");
        let task = Task {
            settings,
            metrics: metrics.clone(),
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            failing: false,
        };
        tokio::spawn(task.run(spans, flushed));
        Exporter {
            queue,
            flushes,
            metrics,
        }
    }

    /// Queues a finished span; drops it (counted) if the queue is full.
    pub fn submit(&self, span: Finished) {
        if self.queue.try_send(span).is_err() {
            self.metrics.dropped.inc();
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
    client: Client<HttpConnector, Full<Bytes>>,
    /// Whether the last export failed: a failure is logged once, not at every batch.
    failing: bool,
}

impl Task {
    async fn run(
        mut self,
        mut spans: mpsc::Receiver<Finished>,
        mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        let mut batch = Vec::with_capacity(self.settings.max_batch);
        loop {
            let mut flush = tokio::select! {
                span = spans.recv() => match span {
                    Some(span) => { batch.push(span); None }
                    None => return,
                },
                Some(done) = flushes.recv() => Some(done),
            };
            let deadline = Instant::now() + self.settings.delay;
            while flush.is_none() && batch.len() < self.settings.max_batch {
                tokio::select! {
                    span = spans.recv() => match span {
                        Some(span) => batch.push(span),
                        None => break,
                    },
                    Some(done) = flushes.recv() => flush = Some(done),
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
            if flush.is_some() {
                while let Ok(span) = spans.try_recv() {
                    batch.push(span);
                }
            }
            for chunk in batch.chunks(self.settings.max_batch) {
                self.export(chunk).await;
            }
            batch.clear();
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
                .map_err(|e| e.to_string())?;
            let status = response.status();
            // Read to the end, so the connection goes back to the pool.
            let _ = response.into_body().collect().await;
            match status.is_success() {
                true => Ok(()),
                false => Err(format!("the collector answered {status}")),
            }
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.settings.timeout)));
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
