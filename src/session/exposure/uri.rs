//! The ways a server may read a resource URI, so that a rule holds however it reads it. A
//! server may take the URI as an opaque string (`as sent`), normalise it as RFC 3986 §6.2.2
//! says (scheme and host in lower case, percent-encoded unreserved characters decoded, hex
//! digits in upper case, dot segments removed: `normalised`), or decode every escape before
//! resolving dot segments, as a file server that maps URIs to paths does (`decoded`:
//! `file:///public/..%2Fsecret` is `/secret` to it). A rule's globs are read the same three
//! ways; a resource is shown when every reading passes.

use std::borrow::Cow;

/// How many readings there are.
pub const READINGS: usize = 3;

/// The readings of a URI (or of a glob on URIs): as sent, normalised, decoded.
pub fn readings(uri: &str) -> [Cow<'_, str>; READINGS] {
    [
        Cow::Borrowed(uri),
        Cow::Owned(normalised(uri, Escapes::Unreserved)),
        Cow::Owned(normalised(uri, Escapes::All)),
    ]
}

/// Which percent-escapes are decoded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Escapes {
    /// Only those of unreserved characters (RFC 3986 §2.3), the others put in upper case.
    Unreserved,
    /// Every one.
    All,
}

/// The URI with its scheme and host in lower case, its escapes decoded as `escapes` says, and
/// its path's dot segments removed (RFC 3986 §5.2.4).
fn normalised(uri: &str, escapes: Escapes) -> String {
    let (scheme, rest) = match scheme_end(uri) {
        Some(end) => (&uri[..=end], &uri[end + 1..]),
        None => ("", uri),
    };
    let (authority, rest) = match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find(['/', '?', '#']).unwrap_or(after.len());
            (Some(&after[..end]), &after[end..])
        }
        None => (None, rest),
    };
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, tail) = rest.split_at(path_end);

    let mut out = String::with_capacity(uri.len());
    out.push_str(&scheme.to_ascii_lowercase());
    if let Some(authority) = authority {
        out.push_str("//");
        let (user, host) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        out.push_str(&decode(user, escapes));
        out.push_str(&decode(host, escapes).to_ascii_lowercase());
    }
    out.push_str(&remove_dot_segments(&decode(path, escapes)));
    out.push_str(&decode(tail, escapes));
    out
}

/// The index of the `:` that ends a scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`).
fn scheme_end(uri: &str) -> Option<usize> {
    let colon = uri.find(':')?;
    let scheme = &uri[..colon];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(colon)
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// `text` with its escapes decoded as `escapes` says (a stray `%` is left as it is).
fn decode(text: &str, escapes: Escapes) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) if escapes == Escapes::All || is_unreserved(byte) => {
                out.push(byte);
                at += 3;
            }
            Some(_) => {
                out.push(b'%');
                out.extend(bytes[at + 1..at + 3].iter().map(u8::to_ascii_uppercase));
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// RFC 3986 §5.2.4.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path;
    let mut output: Vec<&str> = Vec::new();
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest;
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") {
            input = &input[3..];
            output.pop();
        } else if input == "/.." {
            input = "/";
            output.pop();
        } else if input == "." || input == ".." {
            input = "";
        } else {
            let from = usize::from(input.starts_with('/'));
            let end = input[from..].find('/').map_or(input.len(), |i| i + from);
            output.push(&input[..end]);
            input = &input[end..];
        }
    }
    output.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(uri: &str) -> (String, String) {
        let [_, normalised, decoded] = readings(uri);
        (normalised.into_owned(), decoded.into_owned())
    }

    #[test]
    fn scheme_and_host_are_read_in_lower_case() {
        assert_eq!(both("DEMO://Internal/X").0, "demo://internal/X");
        assert_eq!(
            both("HTTP://User@Example.COM:80/A").0,
            "http://User@example.com:80/A"
        );
        assert_eq!(both("urn:ISBN:0451450523").0, "urn:ISBN:0451450523");
    }

    #[test]
    fn unreserved_escapes_are_decoded_and_the_others_kept_in_upper_case() {
        assert_eq!(
            both("demo://x/%7Euser/%61%2f%zz").0,
            "demo://x/~user/a%2F%zz"
        );
        assert_eq!(both("demo://x/%7Euser/%61%2f%zz").1, "demo://x/~user/a/%zz");
    }

    #[test]
    fn dot_segments_are_removed() {
        assert_eq!(both("file:///public/../secret").0, "file:///secret");
        assert_eq!(both("file:///public/%2E%2E/secret").0, "file:///secret");
        assert_eq!(both("file:///public/./a/b/../c").0, "file:///public/a/c");
        assert_eq!(
            both("file:///public/..%2Fsecret").0,
            "file:///public/..%2Fsecret"
        );
        assert_eq!(both("file:///public/..%2Fsecret").1, "file:///secret");
        assert_eq!(both("demo://x/a/..?q=../..").0, "demo://x/?q=../..");
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("mid/content=5/../6"), "mid/6");
    }
}
