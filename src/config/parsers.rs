//! How flags read the values whose types have no parser of their own: `--post-response`,
//! `--access-log`, the words of a type that reads its own (`choices`), `--env NAME=VALUE`.

use std::str::FromStr;

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

/// One of `words`, read by the type's own `FromStr`: the help and the reference list the words.
pub(super) fn choices<T>(words: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: FromStr + Clone + Send + Sync + 'static,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    PossibleValuesParser::new(words).try_map(|word| word.parse::<T>())
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
