//! How flags read the values whose types have no parser of their own: `--post-response`,
//! `--access-log`, `--env NAME=VALUE`.

use clap::builder::{PossibleValuesParser, TypedValueParser};

use crate::front::settings::{AccessLog, PostResponse};

/// `--post-response`: auto, sse or json.
pub(super) fn post_response() -> impl TypedValueParser<Value = PostResponse> {
    PossibleValuesParser::new(["auto", "sse", "json"]).map(|mode| match mode.as_str() {
        "sse" => PostResponse::Sse,
        "json" => PostResponse::Json,
        _ => PostResponse::Auto,
    })
}

/// `--access-log`: all, errors or off.
pub(super) fn access_log() -> impl TypedValueParser<Value = AccessLog> {
    PossibleValuesParser::new(["all", "errors", "off"]).map(|which| match which.as_str() {
        "errors" => AccessLog::Errors,
        "off" => AccessLog::Off,
        _ => AccessLog::All,
    })
}

/// A text that is not `NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not NAME=VALUE")]
pub struct NotAnEnvPair(String);

/// `NAME=VALUE`, as `--env` takes it.
pub(super) fn parse_env_pair(text: &str) -> Result<(String, String), NotAnEnvPair> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(NotAnEnvPair(text.to_owned())),
    }
}
