//! An error with its causes as one line, for messages that say what really went wrong (a
//! connection refused, not just "client error").

/// `error: cause: cause of the cause …`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
