//! The ways a server may read a resource URI, so that a rule holds however it reads it. A
//! server may take the URI as an opaque string (`as sent`), normalise it as RFC 3986 §6.2.2
//! says (scheme and host in lower case, percent-encoded unreserved characters decoded, hex
//! digits in upper case, dot segments removed: `normalised`), decode every escape before
//! resolving dot segments (`decoded`: `file:///public/..%2Fsecret` is `/secret` then), or map
//! what follows the scheme to a file system path as a file server does (`as a path`): every
//! escape decoded, `\` read as `/`, runs of `/` as one, `localhost` as no host for `file:`, dot
//! segments resolved from the root, and where the authority ends and the path begins forgotten
//! (`file:////etc/passwd`, `file:/..//etc/passwd`, `file://localhost/etc/passwd` and
//! `file:///public//../etc/passwd` are all `file:etc/passwd` then), or leave the query and
//! the fragment off as a server that reads the URL's path does (the normalised and the decoded
//! reading again, each without them: `file:///private/secret?a=1`, `…#x` and `…%3Fa` are
//! `file:///private/secret` then). A rule's globs are read the same ways, except that a glob's
//! `?` is its own (any one character), not a query: against the last two readings a glob is
//! held as normalised and decoded, whole. A resource is shown when every reading passes.

use std::borrow::Cow;

/// How many readings there are.
pub const READINGS: usize = 6;

/// The readings of a URI (or of a glob on URIs): as sent, normalised, decoded, as a path, and
/// the normalised and the decoded reading without query and fragment.
pub fn readings(uri: &str) -> [Cow<'_, str>; READINGS] {
    read(uri, without_query_and_fragment)
}

/// The readings of a glob on URIs, each to be held against the same reading of a URI: those
/// of [`readings`], but a glob's `?` stands for any one character, so the last two are the
/// glob normalised and decoded, whole.
pub fn glob_readings(glob: &str) -> [Cow<'_, str>; READINGS] {
    read(glob, |whole| whole)
}

fn read(uri: &str, path_of: fn(&str) -> &str) -> [Cow<'_, str>; READINGS] {
    let normal = normalised(uri, Escapes::Unreserved);
    let decoded = normalised(uri, Escapes::All);
    let normal_path = path_of(&normal).to_owned();
    let decoded_path = path_of(&decoded).to_owned();
    [
        Cow::Borrowed(uri),
        Cow::Owned(normal),
        Cow::Owned(decoded),
        Cow::Owned(as_a_path(uri)),
        Cow::Owned(normal_path),
        Cow::Owned(decoded_path),
    ]
}

/// A URI up to its query or fragment: what a server that reads the URL's path reads. (In a
/// normalised reading the first `?` or `#` starts them: neither stands in a scheme, an
/// authority or a path.)
fn without_query_and_fragment(uri: &str) -> &str {
    &uri[..uri.find(['?', '#']).unwrap_or(uri.len())]
}

/// `scheme:` and what follows it as one path from the root, without its leading `/` (see the
/// module's doc): the reading that leaves a file server no way around a rule.
fn as_a_path(uri: &str) -> String {
    let (scheme, rest) = match scheme_end(uri) {
        Some(end) => (uri[..=end].to_ascii_lowercase(), &uri[end + 1..]),
        None => (String::new(), uri),
    };
    let tail_at = rest.find(['?', '#']).unwrap_or(rest.len());
    let (hierarchy, tail) = rest.split_at(tail_at);
    let decoded = decode(hierarchy, Escapes::All).replace('\\', "/");
    let mut from_root = String::with_capacity(decoded.len() + 1);
    for segment in decoded.split('/').filter(|segment| !segment.is_empty()) {
        from_root.push('/');
        from_root.push_str(segment);
    }
    if decoded.ends_with('/') && !from_root.ends_with('/') {
        from_root.push('/');
    }
    let resolved = remove_dot_segments(&from_root);
    let resolved = resolved.trim_start_matches('/');
    // What stands where a host would: without its user, in lower case; none for a local file.
    let (first, path) = resolved.split_at(resolved.find('/').unwrap_or(resolved.len()));
    let host = match first.rsplit_once('@') {
        Some((_, host)) if !matches!(host, "" | "." | "..") => host,
        _ => first,
    };
    let mut out = scheme;
    if out == "file:" && host.eq_ignore_ascii_case("localhost") {
        out.push_str(path.trim_start_matches('/'));
    } else {
        out.push_str(&host.to_ascii_lowercase());
        out.push_str(path);
    }
    out.push_str(&decode(tail, Escapes::All));
    out
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
    let path = remove_dot_segments(&decode(path, escapes));
    if authority.is_none() && path.starts_with("//") {
        // Without an authority a path may not begin with `//` (RFC 3986 §3.3): written so, it
        // would read as one (`a:/..//x` is the path `//x`, not the host `x`). `/.` keeps it a
        // path, as URL serializers do.
        out.push_str("/.");
    } else if scheme.is_empty() && authority.is_none() && first_segment_has_colon(&path) {
        // Nor may a relative path's first segment hold a `:` (RFC 3986 §4.2): it would read as
        // a scheme (`./a:b` is the path `a:b`, not the scheme `a`). `./` keeps it a path.
        out.push_str("./");
    }
    out.push_str(&path);
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

fn first_segment_has_colon(path: &str) -> bool {
    path.split('/')
        .next()
        .is_some_and(|first| first.contains(':'))
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// `text` with its escapes decoded as `escapes` says (a stray `%` is left as it is, unless,
/// when only unreserved ones are decoded, it would start an escape: then it is written `%25`).
fn decode(text: &str, escapes: Escapes) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    // Where a `%` that starts no escape went in `out`.
    let mut strays = Vec::new();
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
                if bytes[at] == b'%' {
                    strays.push(out.len());
                }
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    if escapes == Escapes::Unreserved {
        // A stray `%` that now stands before two hex digits (`%4%44` is `%4D` once decoded)
        // would make an escape the next reading decodes: written `%25`, it stays what it was.
        for &stray in strays.iter().rev() {
            let hex = |at: usize| out.get(at).is_some_and(u8::is_ascii_hexdigit);
            if hex(stray + 1) && hex(stray + 2) {
                out.splice(stray + 1..stray + 1, *b"25");
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
        let [_, normalised, decoded, ..] = readings(uri);
        (normalised.into_owned(), decoded.into_owned())
    }

    #[test]
    fn without_query_and_fragment_the_path_is_read_as_a_url_parser_reads_it() {
        for spelling in [
            "file:///private/secret",
            "file:///private/secret?",
            "file:///private/secret#x",
            "file:///private/secret?a=1",
            "file:///private/secret?a=1#x",
            "file:///private/%73ecret",
            "file:///private/x/../secret",
            "FILE:///private/secret?%3F",
        ] {
            let [.., normal, _] = readings(spelling);
            assert_eq!(normal, "file:///private/secret", "{spelling}");
        }
        let [.., normal, decoded] = readings("file:///private/secret%3Fa=1");
        assert_eq!(normal, "file:///private/secret%3Fa=1");
        assert_eq!(
            decoded, "file:///private/secret",
            "an escaped `?` once decoded"
        );
        let [.., normal, _] = readings("demo://Host?q#f");
        assert_eq!(normal, "demo://host");
    }

    #[test]
    fn as_a_path_every_spelling_of_a_file_is_one() {
        for spelling in [
            "file:///etc/passwd",
            "FILE:////etc/passwd",
            "file:/..//etc/passwd",
            "file://localhost/etc/passwd",
            "file://LocalHost/etc//passwd",
            "file:///public//../etc/passwd",
            "file:///public/%2F../etc/passwd",
            "file:///public/..%5C..%5Cetc/passwd",
            "file:etc/passwd",
        ] {
            assert_eq!(as_a_path(spelling), "file:etc/passwd", "{spelling}");
        }
        assert_eq!(as_a_path("file:///public/*"), "file:public/*");
        assert_eq!(
            as_a_path("demo://evil@Internal/x?a=%2F"),
            "demo:internal/x?a=/"
        );
        assert_eq!(as_a_path("demo:/internal/x"), "demo:internal/x");
        assert_eq!(as_a_path("urn:isbn:0451450523"), "urn:isbn:0451450523");
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

    /// Found by the `glob` fuzz target (inputs in fuzz/regressions/glob/): removing dot
    /// segments (or decoding) could leave a path starting with `//` without an authority, a
    /// relative path whose first segment has a `:`, or a new escape, which read again is an
    /// authority, a scheme or another character: the normalised reading was not a fixed point
    /// (`a:/..//X` gave `a://X`, then `a://x`; `./eN:` gave `eN:`, then `en:`).
    #[test]
    fn a_path_that_would_read_as_an_authority_stays_a_path() {
        assert_eq!(both("a:/..//X").0, "a:/.//X");
        assert_eq!(both("a:/.//X").0, "a:/.//X");
        assert_eq!(both("file:/..//etc/passwd").1, "file:/.//etc/passwd");
        assert_eq!(both("/..//x").0, "/.//x");
        assert_eq!(
            both("demo://h/..//x").0,
            "demo://h//x",
            "with an authority: as it is"
        );
        // Nor, without a scheme, one whose first segment would read as a scheme.
        assert_eq!(both("./eN:").0, "./eN:");
        assert_eq!(both("%41b:c").0, "./Ab:c");
        assert_eq!(both("x/../a:b/c").1, "/a:b/c");
        assert_eq!(both("./x:%2F").1, "./x:/");
        assert_eq!(both("a/b:c").0, "a/b:c");
        // Nor one whose stray `%` and decoded characters make a new escape.
        assert_eq!(both("x/%4%44E").0, "x/%254DE");
        assert_eq!(both("x/%254DE").0, "x/%254DE");
        assert_eq!(
            both("x/%4%44E").1,
            "x/%4DE",
            "decoded once, as a server would"
        );
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
