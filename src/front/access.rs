//! The access log: one line per HTTP request, under the log target `access` at level INFO
//! (`RUST_LOG=info,access=off` leaves it out): who asked what of which server, the answer's
//! status, how long until the answer's head, the session, and the trace the request belongs to.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use tracing::{info, Level};

use super::request;
use crate::telemetry::redact;
use crate::telemetry::trace_context;

/// The log target of access lines.
pub const TARGET: &str = "access";

use super::settings::AccessLog;

/// Which requests get a line, set once at start (`access_log`, `access_log_sample`).
static POLICY: OnceLock<Policy> = OnceLock::new();

struct Policy {
    which: AccessLog,
    /// The share of answers below 400 that get a line, in 2^-32ths.
    share: u64,
    /// Answers below 400 so far (modulo 2^32), for the share.
    answered: AtomicU32,
}

impl Policy {
    /// Whether an answer of `status` gets its line: with a share of `s`, the n-th answer below
    /// 400 does when ⌊(n + 1)·s⌋ > ⌊n·s⌋, which keeps exactly that share, evenly spread.
    fn keeps(&self, status: u16) -> bool {
        match self.which {
            AccessLog::Off => false,
            AccessLog::Errors => status >= 400,
            AccessLog::All if status >= 400 || self.share >= 1 << 32 => true,
            AccessLog::All => {
                let n = u128::from(self.answered.fetch_add(1, Ordering::Relaxed));
                let share = u128::from(self.share);
                ((n + 1) * share) >> 32 > (n * share) >> 32
            }
        }
    }
}

/// Sets which requests get a line (the first call counts): `which`, and of the answers below
/// 400 with `All`, the share `sample` (0 to 1).
pub fn set_policy(which: AccessLog, sample: f64) {
    let share = (sample.clamp(0.0, 1.0) * (1u64 << 32) as f64).round() as u64;
    let _ = POLICY.set(Policy {
        which,
        share,
        answered: AtomicU32::new(0),
    });
}

fn policy() -> &'static Policy {
    POLICY.get_or_init(|| Policy {
        which: AccessLog::All,
        share: 1 << 32,
        answered: AtomicU32::new(0),
    })
}

/// Whether access lines are written at all (nothing is gathered for them otherwise).
pub fn enabled() -> bool {
    policy().which != AccessLog::Off && tracing::enabled!(target: TARGET, Level::INFO)
}

/// The served server a response came from, as a response extension (never sent).
#[derive(Clone)]
pub struct Server(pub Arc<str>);

/// The JSON-RPC method of the request (its metrics label), as a response extension.
#[derive(Clone, Copy)]
pub struct Rpc(pub &'static str);

/// The trace of the request's span (tracing on), as a response extension: the line names it
/// whether or not the client sent a `traceparent`.
#[derive(Clone, Copy)]
pub struct Trace(pub [u8; 16]);

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

/// Notes `rpc` on `response` for its access line.
pub fn note_rpc<B>(response: &mut Response<B>, rpc: &'static str) {
    if enabled() {
        response.extensions_mut().insert(Rpc(rpc));
    }
}

/// What an access line takes from the request, before the request is handed on: nothing is
/// copied (the URI and headers share the request's bytes), so gathering a line allocates
/// nothing; what it shows is worked out only for a line that is written.
pub struct Asked {
    peer: SocketAddr,
    method: Method,
    uri: Uri,
    session: Option<HeaderValue>,
    traceparent: Option<HeaderValue>,
}

impl Asked {
    pub fn of<B>(request: &Request<B>, peer: SocketAddr) -> Asked {
        let headers = request.headers();
        Asked {
            peer,
            method: request.method().clone(),
            uri: request.uri().clone(),
            session: headers.get("mcp-session-id").cloned(),
            traceparent: headers.get(trace_context::TRACEPARENT).cloned(),
        }
    }

    /// Writes the line for `response`, given `elapsed` until its head.
    pub fn answered<B>(self, response: &Response<B>, elapsed: Duration) {
        if !policy().keeps(response.status().as_u16()) {
            return;
        }
        let extensions = response.extensions();
        let server = extensions.get::<Server>().map(|s| &*s.0);
        let rpc = extensions.get::<Rpc>().map(|r| r.0);
        // Never the id itself (a bearer token): its digest.
        let session = (self.session.as_ref())
            .and_then(|value| value.to_str().ok())
            .or_else(|| request::query_session(self.uri.query()?))
            .or_else(|| header(response.headers(), "mcp-session-id"))
            .map(redact::session);
        let sent_trace = self
            .traceparent
            .as_ref()
            .and_then(|value| value.to_str().ok())
            .and_then(trace_context::trace_id);
        let trace_id = match (extensions.get::<Trace>(), sent_trace) {
            (Some(trace), _) => Inline::<32>::of(trace),
            (None, sent) => Inline::of(sent.unwrap_or("-")),
        };
        // Every field is a number or a `&str`: formatters take those as they are (a Display
        // field would be formatted into a String of its own by the JSON format).
        info!(
            target: TARGET,
            peer = Inline::<48>::of(self.peer).as_str(),
            method = self.method.as_str(),
            path = self.uri.path(),
            server = server.unwrap_or("-"),
            rpc = rpc.unwrap_or("-"),
            status = response.status().as_u16(),
            duration_us = elapsed.as_micros() as u64,
            session = match session {
                Some(digest) => Inline::<20>::of(digest),
                None => Inline::of("-"),
            }
            .as_str(),
            trace_id = trace_id.as_str(),
            "request"
        );
    }
}

/// A value written out on the stack, at most `N` bytes of it (a longer one is cut at a
/// character's boundary; none of the fields here is ever that long).
struct Inline<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Inline<N> {
    fn of(value: impl fmt::Display) -> Inline<N> {
        use fmt::Write;
        let mut inline = Inline {
            bytes: [0; N],
            len: 0,
        };
        let _ = write!(inline, "{value}");
        inline
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl<const N: usize> fmt::Write for Inline<N> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut take = text.len().min(N - self.len);
        while !text.is_char_boundary(take) {
            take -= 1;
        }
        self.bytes[self.len..self.len + take].copy_from_slice(&text.as_bytes()[..take]);
        self.len += take;
        match take == text.len() {
            true => Ok(()),
            false => Err(fmt::Error),
        }
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_written_inline_is_cut_at_a_character_boundary_when_too_long() {
        assert_eq!(
            Inline::<48>::of("127.0.0.1:8787").as_str(),
            "127.0.0.1:8787"
        );
        assert_eq!(Inline::<4>::of("abcdef").as_str(), "abcd");
        assert_eq!(Inline::<4>::of("abcé").as_str(), "abc");
    }

    #[test]
    fn a_sampled_share_keeps_that_share_evenly_and_every_error() {
        let policy = |which, sample: f64| Policy {
            which,
            share: (sample * (1u64 << 32) as f64).round() as u64,
            answered: AtomicU32::new(0),
        };
        let kept =
            |policy: &Policy, status: u16| (0..1000).filter(|_| policy.keeps(status)).count();
        let tenth = policy(AccessLog::All, 0.1);
        assert_eq!(kept(&tenth, 200), 100);
        assert_eq!(kept(&tenth, 404), 1000);
        let kept_of_ten: Vec<bool> = (0..10).map(|_| tenth.keeps(200)).collect();
        assert_eq!(kept_of_ten.iter().filter(|kept| **kept).count(), 1);
        assert_eq!(kept(&policy(AccessLog::All, 1.0), 200), 1000);
        assert_eq!(kept(&policy(AccessLog::All, 0.0), 200), 0);
        assert_eq!(kept(&policy(AccessLog::Errors, 1.0), 200), 0);
        assert_eq!(kept(&policy(AccessLog::Errors, 1.0), 503), 1000);
        assert_eq!(kept(&policy(AccessLog::Off, 1.0), 503), 0);
    }

    #[test]
    fn a_trace_is_shown_as_32_hex_digits() {
        let mut id = [0u8; 16];
        id[0] = 0x4b;
        id[15] = 0x36;
        let shown = Inline::<32>::of(Trace(id));
        assert_eq!(shown.as_str(), "4b000000000000000000000000000036");
    }
}
