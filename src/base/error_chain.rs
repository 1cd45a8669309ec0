//! An error with its causes as one line, for messages that say what really went wrong (a
//! connection refused, not just "client error"), each said once.

/// `error: cause: cause of the cause …`, leaving out a cause whose text the line says already
/// (an error that prints its source, as a resolver's or an I/O wrapper's often does).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot reach the store: {0}")]
    struct Wrapping(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot reach the store")]
    struct Plain(#[source] std::io::Error);

    #[test]
    fn each_cause_is_said_once() {
        let lookup = || std::io::Error::other("failed to lookup address information");
        assert_eq!(
            error_chain(&Wrapping(lookup())),
            "cannot reach the store: failed to lookup address information"
        );
        assert_eq!(
            error_chain(&Plain(lookup())),
            "cannot reach the store: failed to lookup address information"
        );
    }
}
