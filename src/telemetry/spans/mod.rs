//! Spans of the proxy's own work (a client request, the exchange with the server, the replica
//! hop, a replay, an `input_required` round), exported over OTLP/HTTP when tracing is on. A
//! span joins the trace of the W3C context it was started under, and the context passed on
//! names the span, so one trace runs client → proxy → replica → server.

mod exporter;
mod message;
mod otlp;

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub use exporter::{Exporter, ExporterSettings};
pub use message::{describe, name_of};

/// A place in a trace: `traceparent` in parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The `sampled` flag: a caller that does not record its trace is not recorded here either.
    pub sampled: bool,
}

impl SpanContext {
    /// The context of a valid W3C `traceparent`.
    pub fn parse(traceparent: &str) -> Option<SpanContext> {
        crate::telemetry::trace_context::trace_id(traceparent)?;
        let mut parts = traceparent.trim().split('-').skip(1);
        let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
        Some(SpanContext {
            trace_id: unhex(trace)?,
            span_id: unhex(parent)?,
            sampled: u8::from_str_radix(flags, 16).ok()? & 1 == 1,
        })
    }

    /// This context as a `traceparent` (version 00).
    pub fn traceparent(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        hex_into(&mut out, &self.trace_id);
        out.push('-');
        hex_into(&mut out, &self.span_id);
        out.push_str(if self.sampled { "-01" } else { "-00" });
        out
    }

    pub fn trace_id_hex(&self) -> String {
        let mut out = String::with_capacity(32);
        hex_into(&mut out, &self.trace_id);
        out
    }
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0; N];
    if text.len() != 2 * N {
        return None;
    }
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

fn hex_into(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// A new span or trace id: unique (a bijective mix of a counter), unpredictable across
/// processes (the counter starts at a seed from the operating system's CSPRNG), and cheap: no
/// system call per span.
fn random<const N: usize>() -> [u8; N] {
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let mut seed = [0; 8];
        if getrandom::fill(&mut seed).is_err() {
            seed = now_nanos().to_le_bytes();
        }
        AtomicU64::new(u64::from_le_bytes(seed))
    });
    let mut out = [0; N];
    while out.iter().all(|b| *b == 0) {
        for chunk in out.chunks_mut(8) {
            let n = splitmix64(next.fetch_add(1, Ordering::Relaxed));
            chunk.copy_from_slice(&n.to_le_bytes()[..chunk.len()]);
        }
    }
    out
}

/// SplitMix64's output function: a bijection of u64 that scatters consecutive inputs.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What a span is to its trace (OTLP `SpanKind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpanKind {
    #[default]
    Internal = 1,
    /// A client's request, as the proxy serves it.
    Server = 2,
    /// A request the proxy makes (to a server, to another replica).
    Client = 3,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Cow<'static, str>),
    Int(i64),
    Bool(bool),
}

impl From<&'static str> for Value {
    fn from(text: &'static str) -> Value {
        Value::Str(Cow::Borrowed(text))
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value::Str(Cow::Owned(text))
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Int(n)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Int(n as i64)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// A span that has ended, as exported.
#[derive(Debug, Clone, Default)]
pub struct Finished {
    pub context: SpanContext,
    pub parent: Option<[u8; 8]>,
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    pub start_nanos: u64,
    pub end_nanos: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// `Some` for a span that failed, with what went wrong.
    pub error: Option<String>,
}

/// Where one server's spans go: nowhere unless tracing is on. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Spans {
    exporter: Option<Arc<Exporter>>,
}

impl Spans {
    pub fn new(exporter: Option<Arc<Exporter>>) -> Spans {
        Spans { exporter }
    }

    pub fn on(&self) -> bool {
        self.exporter.is_some()
    }

    /// Starts a span under `parent` (a new trace without one); `None` when tracing is off or
    /// the parent's trace is not sampled.
    pub fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&SpanContext>,
    ) -> Option<Span> {
        let exporter = self.exporter.as_ref()?;
        if parent.is_some_and(|p| !p.sampled) {
            return None;
        }
        Some(Span {
            finished: Finished {
                context: SpanContext {
                    trace_id: parent.map_or_else(random, |p| p.trace_id),
                    span_id: random(),
                    sampled: true,
                },
                parent: parent.map(|p| p.span_id),
                name: name.into(),
                kind,
                start_nanos: now_nanos(),
                end_nanos: 0,
                attributes: Vec::with_capacity(8),
                error: None,
            },
            exporter: exporter.clone(),
        })
    }
}

/// A span in progress: it ends, and is queued for export, when dropped.
#[derive(Debug)]
pub struct Span {
    finished: Finished,
    exporter: Arc<Exporter>,
}

impl Span {
    pub fn context(&self) -> &SpanContext {
        &self.finished.context
    }

    /// Sets `key` (a later value replaces an earlier one).
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        let value = value.into();
        match self.finished.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => *old = value,
            None => self.finished.attributes.push((key, value)),
        }
    }

    /// Adds `n` to the integer attribute `key`.
    pub fn add(&mut self, key: &'static str, n: u64) {
        match self.finished.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, Value::Int(old))) => *old += n as i64,
            _ => self.set(key, n),
        }
    }

    /// Marks the span failed, with what went wrong.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.finished.error = Some(message.into());
    }

    /// Marks the span failed by a JSON-RPC error answer with `code`.
    pub fn fail_with_code(&mut self, code: i64) {
        self.set("rpc.jsonrpc.error_code", code);
        self.set("error.type", code.to_string());
        self.fail(format!("JSON-RPC error {code}"));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.finished.end_nanos = now_nanos().max(self.finished.start_nanos);
        self.exporter.submit(std::mem::take(&mut self.finished));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_keeps_its_sampled_flag() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = SpanContext::parse(text).unwrap();
        assert!(context.sampled);
        assert_eq!(context.traceparent(), text);
        assert_eq!(context.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let unsampled =
            SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled);
        assert_eq!(SpanContext::parse("00-garbage"), None);
    }

    #[test]
    fn ids_are_unique_and_never_zero() {
        let ids: std::collections::HashSet<[u8; 8]> = (0..10_000).map(|_| random()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(!ids.contains(&[0; 8]));
        let trace: [u8; 16] = random();
        assert_ne!(trace[..8], trace[8..], "two draws per trace id");
    }

    #[test]
    fn tracing_off_starts_nothing() {
        assert!(Spans::default()
            .start("x", SpanKind::Server, None)
            .is_none());
    }
}
