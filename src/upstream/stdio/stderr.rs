//! A child's stderr, to the proxy's log: each line as it comes (its control characters
//! escaped), up to a budget of lines a second (a burst more at first), so that a child that
//! floods stderr costs the proxy's log and CPU no more than that (what is said of lines on its
//! stdout that are not messages has a budget of its own); what is over it is read and dropped, and how much is logged once a
//! second while it lasts (and counted: `mcp_proxy_upstream_stderr_lines_dropped_total`). The
//! last lines, dropped or not, are kept to explain a crash.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::BufReader;
use tokio::time::Instant;
use tracing::{info, warn};

use super::super::lines::{Line, LineReader};
use super::STDERR_TAIL;
use crate::base::text::printable;

/// Longest stderr line kept whole.
const MAX_STDERR_LINE: usize = 8 << 10;
/// What one read of it takes at most: it is read a line at a time and rarely.
const STDERR_BUFFER: usize = 512;
/// Lines a second logged, once the burst is spent.
const LINES_PER_SECOND: f64 = 100.0;
/// Lines logged at once before the rate holds.
const BURST: f64 = 1000.0;

/// Reads `stderr` to its end: lines to the log within the budget, the last ones to `tail`.
/// Each line dropped is counted in `dropped`.
pub(super) async fn read(
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    dropped: Counter,
) {
    let mut lines = LineReader::new(
        BufReader::with_capacity(STDERR_BUFFER, stderr),
        MAX_STDERR_LINE,
    );
    let mut budget = Budget::new(Instant::now());
    while let Ok(Some(line)) = lines.next_line().await {
        let text = match line {
            Line::Text(bytes) => printable(&String::from_utf8_lossy(&bytes)),
            Line::TooLong { max, .. } => format!("[a stderr line over {max} bytes]"),
        };
        budget.log(&dropped, || {
            info!(target: "mcp_session_proxy::upstream::stderr", "{text}");
        });
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(text);
    }
}

/// Lines that may be logged now (a token bucket), and those dropped since last said: one per
/// child for its stderr, one for what is said of its stdout.
pub(super) struct Budget {
    tokens: f64,
    refilled: Instant,
    dropped: u64,
    said: Instant,
}

impl Budget {
    pub(super) fn new(now: Instant) -> Budget {
        Budget {
            tokens: BURST,
            refilled: now,
            dropped: 0,
            said: now,
        }
    }

    /// Whether a line may be logged at `now` (else it is counted as dropped).
    fn take(&mut self, now: Instant) -> bool {
        let earned = now.duration_since(self.refilled).as_secs_f64() * LINES_PER_SECOND;
        self.tokens = (self.tokens + earned).min(BURST);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return true;
        }
        self.dropped += 1;
        false
    }

    /// Logs a line by `log` when the budget allows, else counts it in `dropped`; and says once a
    /// second how many were not logged.
    pub(super) fn log(&mut self, dropped: &Counter, log: impl FnOnce()) {
        let now = Instant::now();
        match self.take(now) {
            true => log(),
            false => drop(dropped.inc()),
        }
        if let Some(dropped) = self.dropped_to_say(now) {
            warn!(dropped, "the server writes more than is logged ({LINES_PER_SECOND} lines a second): lines dropped");
        }
    }

    /// The lines dropped since last said, once a second at most.
    fn dropped_to_say(&mut self, now: Instant) -> Option<u64> {
        if self.dropped == 0 || now.duration_since(self.said) < Duration::from_secs(1) {
            return None;
        }
        self.said = now;
        Some(std::mem::take(&mut self.dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_line_shows_no_escape_and_no_reordering() {
        let line = "ok \u{1b}[2J \u{202e}gnp.exe\tdone";
        assert_eq!(printable(line), "ok \\u{1b}[2J \\u{202e}gnp.exe\tdone");
    }

    #[test]
    fn past_its_burst_a_flood_is_logged_at_the_rate_and_what_is_dropped_said_once_a_second() {
        let start = Instant::now();
        let mut budget = Budget::new(start);
        let logged = (0..5000).filter(|_| budget.take(start)).count();
        assert_eq!(logged, BURST as usize);
        assert_eq!(budget.dropped_to_say(start), None, "not within the second");
        let later = start + Duration::from_secs(2);
        assert_eq!(budget.dropped_to_say(later), Some(4000));
        let refilled = (0..1000).filter(|_| budget.take(later)).count();
        assert_eq!(refilled, 2 * LINES_PER_SECOND as usize);
    }
}
