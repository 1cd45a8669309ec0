//! `config::Config::from_toml` and `config::parse_duration` on arbitrary UTF-8.
//!
//! `from_toml` returns Ok or Err and never panics; a configuration it accepts gives its settings
//! and a server spec for every upstream it names. `parse_duration` agrees with an overflow-checked
//! reading of `<digits><unit>`.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::config::{self, Config};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::from_toml(text) {
        config
            .validate()
            .expect("from_toml returned an invalid configuration");
        let _ = config.session_settings();
        let _ = config.http_settings();
        let _ = config.serves_default();
        // (Without a named server the spec is this executable's demo server: not looked up.)
        if names_a_server(&config.upstream) {
            config
                .upstream_spec()
                .expect("a validated upstream has no spec");
        }
        for (name, server) in &config.servers {
            if names_a_server(&server.upstream) {
                server
                    .upstream
                    .spec(&config.child_secrets())
                    .unwrap_or_else(|e| panic!("servers.{name}: validated but {e}"));
            }
        }
    }
    check_duration(text);
    for line in text.lines().take(16) {
        check_duration(line);
        // The value of a `key = "value"` line, as a duration.
        if let Some((_, value)) = line.split_once('=') {
            check_duration(value.trim().trim_matches('"'));
        }
    }
});

fn names_a_server(upstream: &config::UpstreamConfig) -> bool {
    upstream.stdio.is_some() || upstream.http.is_some() || upstream.sse.is_some()
}

fn check_duration(text: &str) {
    let got = config::parse_duration(text);
    let want = expected_duration(text);
    match (&got, want) {
        (Ok(got), Some(Ok(want))) => assert_eq!(*got, want, "{text:?}"),
        // Not a duration, or one too long to hold: an error (not a wrapped-around number).
        (Err(_), Some(Err(())) | None) => {}
        _ => panic!("parse_duration({text:?}) = {got:?}, expected {want:?} (None: overflow)"),
    }
}

/// `Some(Ok)` for a duration, `Some(Err)` for text that is none, `None` for one too long for
/// `Duration` arithmetic on u64 seconds.
fn expected_duration(text: &str) -> Option<Result<Duration, ()>> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let Ok(number) = number.parse::<u64>() else {
        return Some(Err(()));
    };
    Some(Ok(match unit.trim() {
        "ms" => Duration::from_millis(number),
        "" | "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.checked_mul(60)?),
        "h" => Duration::from_secs(number.checked_mul(3600)?),
        _ => return Some(Err(())),
    }))
}
