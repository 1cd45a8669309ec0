//! Every way an upstream fails, as one enum: what the session fails its requests with, what it
//! answers its client, and what is logged. Each variant's text is what clients read.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::body::BodyError;
use super::modern::error::ModernHttpError;
use super::owner::HopError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("could not start the upstream server `{command}`: {source}")]
    Spawn {
        command: String,
        source: Arc<std::io::Error>,
    },
    #[error("the upstream server is gone")]
    Gone,
    /// The TLS handshake with an https:// server failed.
    #[error("TLS with the upstream server {url} failed: {failure}")]
    Tls {
        url: String,
        failure: crate::tls::TlsFailure,
    },
    /// A request before `initialize` on a session whose server starts at `initialize`.
    #[error("the server of this session starts at initialize: send initialize first")]
    NotStarted,
    /// A stdio server took nothing from its stdin for the request timeout: it was stopped.
    #[error(
        "the upstream server stopped reading its stdin: a write to it did not finish within \
         {0:?} (upstream.request_timeout); it was stopped"
    )]
    StoppedReading(Duration),
    /// A stdio server went away on its own: its exit status (or why that is unknown), and the
    /// last lines it wrote to stderr.
    #[error("upstream server exited ({status}){}", last_stderr(.stderr))]
    Exited { status: String, stderr: Vec<String> },
    /// The server's answer did not begin within the request timeout.
    #[error("the upstream server did not answer within {0:?}")]
    Silent(Duration),
    /// The server could not be reached: its (redacted) URL, and the transport's words.
    #[error("the upstream server is unreachable ({url}): {cause}")]
    Unreachable { url: String, cause: String },
    #[error("the upstream server answered HTTP {0}")]
    Status(StatusCode),
    /// The server refused a message: its status and the start of what it said.
    #[error("the upstream server answered HTTP {status}: {text}")]
    Refused { status: StatusCode, text: String },
    /// The server's answer could not be read (too large, too slow, broken).
    #[error(transparent)]
    Body(#[from] BodyError),
    /// A stdio server's answer over the line limit: dropped.
    #[error(
        "the upstream server's answer exceeded the {0}-byte line limit \
         (upstream.max_line_bytes) and was dropped"
    )]
    Oversized(usize),
    /// A legacy SSE stream was cut: the answers it would have carried are lost.
    #[error("the upstream server's stream was cut; this request's answer was lost")]
    StreamCut,
    #[error("the upstream server's stream ended before its answer")]
    StreamEnded,
    #[error("the upstream server's stream did not announce an endpoint within {0:?}")]
    NoEndpoint(Duration),
    /// A legacy SSE stream named an endpoint on another origin than its own: the origins (no
    /// path, query or userinfo), and nothing was sent there.
    #[error(
        "the upstream server's stream announced an endpoint on another origin ({announced}) \
         than its own ({expected}): nothing is sent there"
    )]
    ForeignEndpoint { announced: String, expected: String },
    /// A legacy SSE server's new session was not initialized within the request timeout.
    #[error("the upstream session was not re-established within {0:?}")]
    NotReestablished(Duration),
    /// The server forgot the upstream session, and it was not back within the request timeout.
    #[error("the upstream session was lost and could not be re-established: not within {0:?}")]
    LostNotBackWithin(Duration),
    /// The server forgot the upstream session, and re-initializing it failed (why).
    #[error("the upstream session was lost and could not be re-established: {0}")]
    LostNotBack(Box<UpstreamError>),
    #[error("the upstream server lost the session again")]
    LostAgain,
    /// A client request the server stayed silent on past the request timeout: it was cancelled.
    #[error(
        "the upstream server did not answer {method} within {timeout:?} \
         (upstream.request_timeout); the request was cancelled"
    )]
    Unanswered { method: String, timeout: Duration },
    /// The server answered a request of the proxy's own with an error (its JSON-RPC error
    /// object, as the server wrote it).
    #[error("the upstream refused {method}: {error}")]
    RefusedOwn { method: String, error: String },
    /// A request of the proxy's own got no answer (in time, or at all).
    #[error("the upstream did not answer {method}")]
    OwnUnanswered { method: String },
    /// The server answered a client's `initialize`, made by the proxy on its behalf, with an
    /// error (the JSON-RPC error object, as text).
    #[error("the server refused initialize: {0}")]
    InitializeRefused(String),
    /// A server that forgot the session cannot be re-initialized without the client's params.
    #[error("the client's initialize params are unknown")]
    NoInitializeParams,
    /// A virtual server's member answered one of its own requests with more than its share of
    /// a merged answer: left out of that answer.
    #[error(
        "its answer to {method} ({bytes} bytes) is more than its share of a merged answer \
         ({share} bytes: half of session.window_bytes, shared by the members); left out"
    )]
    OverShare {
        method: String,
        bytes: usize,
        share: usize,
    },
    /// A virtual server's member's resources could not be read in full (a bound, or the time
    /// its reading had): a URI it might list goes to no member after it.
    #[error(
        "its resources could not be read in full, so a URI it might list is not given to a \
         member after it"
    )]
    CatalogNotWhole,
    /// A virtual server's member could not be opened to read its resources (why): a URI it
    /// might list goes to no member after it.
    #[error("its resources could not be read ({0}), so a URI it might list is not given to a member after it")]
    CatalogUnread(Box<UpstreamError>),
    /// A virtual server's member answered `initialize` with what cannot be used.
    #[error("its initialize result cannot be used: {0}")]
    UnusableInitialize(&'static str),
    /// A member of a virtual server failed (why): its own requests fail, the others go on.
    #[error("{member} (a member of this virtual server): {cause}")]
    Member {
        member: String,
        cause: Box<UpstreamError>,
    },
    /// The replica owning the session could not carry the message there.
    #[error(transparent)]
    Hop(#[from] HopError),
    /// The transport to a 2026-07-28 HTTP server could not carry a request.
    #[error(transparent)]
    ModernHttp(#[from] ModernHttpError),
}

/// `; last stderr: a | b`, or nothing when the server wrote nothing to stderr.
fn last_stderr(lines: &[String]) -> String {
    match lines.is_empty() {
        true => String::new(),
        false => format!("; last stderr: {}", lines.join(" | ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_names_its_status_and_the_last_stderr_lines() {
        let quiet = UpstreamError::Exited {
            status: "exit status: 3".into(),
            stderr: Vec::new(),
        };
        assert_eq!(quiet.to_string(), "upstream server exited (exit status: 3)");
        let loud = UpstreamError::Exited {
            status: "exit status: 3".into(),
            stderr: vec!["first".into(), "second".into()],
        };
        assert_eq!(
            loud.to_string(),
            "upstream server exited (exit status: 3); last stderr: first | second"
        );
    }
}
