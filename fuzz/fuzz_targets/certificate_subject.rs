//! `tls::subject_of` on arbitrary bytes: a certificate's subject (RFC 4514), or an error, never
//! a panic; a subject it names is never empty, and every special character in a value is
//! escaped, so no subject reads as another (a comma or plus sign ends an attribute only where
//! it is not escaped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::tls::subject_of;

fuzz_target!(|data: &[u8]| {
    let Ok(subject) = subject_of(data) else {
        return;
    };
    assert!(!subject.is_empty());
    // Every attribute is `type=value`: each piece between unescaped separators has its `=`.
    let mut piece = String::new();
    let mut chars = subject.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                piece.push(c);
                piece.push(chars.next().expect("an escape is never the last character"));
            }
            ',' | '+' => {
                assert!(piece.contains('='), "{subject:?}: {piece:?}");
                piece.clear();
            }
            c => {
                assert!(!c.is_control(), "{subject:?}");
                piece.push(c);
            }
        }
    }
    assert!(piece.contains('='), "{subject:?}: {piece:?}");
});
