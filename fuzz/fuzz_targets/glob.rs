//! `session::exposure::Glob` (the operator's `*`/`?` globs on tool names and URIs) and the
//! readings of a URI (`session::exposure::uri_readings`: as sent, normalised, decoded, as a
//! path, and the normalised and decoded ones without query and fragment).
//!
//! Input `[selector, glob… 0x00 name…]`. A short glob on a short name matches exactly when the
//! textbook recursive definition says so, through `matches` and `matches_chars` alike; a long
//! name is matched in one pass per run (the run's `-timeout` fails a blow-up). Every reading of
//! any text is made without a panic; the normalised reading is a fixed point (normalising it
//! again gives it back), and a text without escapes reads the same normalised and decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::session::exposure::{uri_readings, Glob};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (glob, name) = match rest.iter().position(|&b| b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let (glob, name) = (String::from_utf8_lossy(glob), String::from_utf8_lossy(name));
    let compiled = Glob::new(glob.as_ref());
    let name_chars: Vec<char> = name.chars().collect();
    let matched = compiled.matches(&name);
    assert_eq!(matched, compiled.matches_chars(&name_chars));
    assert_eq!(compiled.as_str(), glob);
    let glob_chars: Vec<char> = glob.chars().collect();
    let stars = glob_chars.iter().filter(|c| **c == '*').count();
    // The oracle is exponential in the stars: only where it is quick.
    if name_chars.len() <= 16 && glob_chars.len() <= 16 && stars <= 6 {
        assert_eq!(
            matched,
            oracle(&glob_chars, &name_chars),
            "{glob:?} on {name:?}"
        );
    }
    if selector % 8 == 0 {
        // A long near-miss: the name repeated, then a character the glob may not want.
        let long: String = name.repeat(4096 / name.len().max(1)) + "\u{1}";
        let _ = compiled.matches(&long);
    }

    // URI readings, of the glob's text and the name's.
    for text in [glob.as_ref(), name.as_ref()] {
        let [sent, normalised, decoded, ..] = uri_readings(text);
        assert_eq!(sent, text);
        let [_, again, ..] = uri_readings(&normalised);
        assert_eq!(again, normalised, "normalising {text:?} twice");
        if !text.contains('%') {
            assert_eq!(decoded, normalised, "no escape to read two ways: {text:?}");
        }
    }
});

/// The textbook recursive definition.
fn oracle(glob: &[char], name: &[char]) -> bool {
    match glob.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| oracle(rest, &name[skip..])),
        Some((c, rest)) => name
            .split_first()
            .is_some_and(|(n, name)| (*c == '?' || c == n) && oracle(rest, name)),
    }
}
