//! Where log lines go: standard error. Lines of one target (the access log, a line per request)
//! are gathered and written a batch at a time: one `write` per `BATCH_DELAY` or per
//! `BATCH_BYTES`, not one per request. Every other line is written at once, behind whatever was
//! gathered, so the order of lines is kept. What is gathered is bounded (the line that fills a
//! batch writes it) and written out at exit ([`flush`]).

use std::io::{self, Write};
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::Duration;

use tracing::Metadata;
use tracing_subscriber::fmt::MakeWriter;

/// The most a batch holds: the line that takes it past this writes the batch itself.
const BATCH_BYTES: usize = 64 * 1024;
/// The longest a gathered line waits to be written.
const BATCH_DELAY: Duration = Duration::from_millis(50);

/// Lines gathered, not yet written; the lock is also held while writing, so batches and the
/// lines written at once reach standard error in the order they were logged.
static BATCH: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Tells the writer thread that an empty batch has a line.
static GATHERED: Condvar = Condvar::new();
static WRITER_THREAD: Once = Once::new();

/// A `MakeWriter` for `tracing_subscriber::fmt`: standard error, with the lines of `batched`
/// (a log target) gathered.
#[derive(Debug, Clone, Copy)]
pub struct Stderr {
    batched: &'static str,
}

impl Stderr {
    pub fn batching(target: &'static str) -> Stderr {
        Stderr { batched: target }
    }
}

/// Writes what is gathered now (at exit).
pub fn flush() {
    write_out(&mut batch());
}

/// Writes what is gathered now unless a line is being written on this thread or another (a
/// panic's hook: the panic may have come from within the writing).
pub fn flush_before_panic() {
    if let Ok(mut batch) = BATCH.try_lock() {
        write_out(&mut batch);
    }
}

/// One line's writer.
pub struct LineWriter {
    gathered: bool,
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter { gathered: false }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> LineWriter {
        LineWriter {
            gathered: meta.target() == self.batched,
        }
    }
}

impl Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut batch = batch();
        if !self.gathered {
            if batch.is_empty() {
                // A failed write loses the line, as one of a batch is lost (`write_out`).
                let _ = io::stderr().write_all(bytes);
                return Ok(bytes.len());
            }
            batch.extend_from_slice(bytes);
            write_out(&mut batch);
            return Ok(bytes.len());
        }
        let was_empty = batch.is_empty();
        batch.extend_from_slice(bytes);
        if batch.len() >= BATCH_BYTES {
            write_out(&mut batch);
        } else if was_empty {
            drop(batch);
            WRITER_THREAD.call_once(start_writer_thread);
            GATHERED.notify_one();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn batch() -> MutexGuard<'static, Vec<u8>> {
    BATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes the batch to standard error and empties it. A failed write loses the batch, as it
/// would have lost each line (there is nowhere else to say so).
fn write_out(batch: &mut Vec<u8>) {
    if !batch.is_empty() {
        let _ = io::stderr().write_all(batch);
        batch.clear();
        // A burst's capacity is not kept past its batch.
        batch.shrink_to(BATCH_BYTES);
    }
}

/// The thread that writes a batch `BATCH_DELAY` after its first line. It sleeps while nothing
/// is gathered; if it cannot be started, the lines are written once a batch is full.
fn start_writer_thread() {
    let started = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(|| loop {
            let mut batch = batch();
            while batch.is_empty() {
                batch = GATHERED.wait(batch).unwrap_or_else(|e| e.into_inner());
            }
            drop(batch);
            std::thread::sleep(BATCH_DELAY);
            write_out(&mut self::batch());
        });
    if let Err(error) = started {
        let _ = writeln!(io::stderr(), "log lines are written by the batch: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The batch is one per process: the tests below run as one, in order.
    #[test]
    fn gathered_lines_wait_for_their_batch_and_other_lines_go_out_behind_them() {
        let gathered = |text: &str| {
            let mut line = LineWriter { gathered: true };
            line.write_all(text.as_bytes()).unwrap();
        };
        flush();

        gathered("one\n");
        gathered("two\n");
        assert_eq!(&batch()[..], b"one\ntwo\n", "gathered, not written");

        // A line of another target writes the batch, then itself.
        LineWriter { gathered: false }
            .write_all(b"three\n")
            .unwrap();
        assert!(batch().is_empty());

        // The line that fills a batch writes it: what is gathered stays bounded.
        let long = "x".repeat(1000) + "\n";
        for _ in 0..BATCH_BYTES / long.len() + 1 {
            gathered(&long);
            assert!(batch().len() < BATCH_BYTES);
        }

        // And the writer thread writes a batch on its own, soon.
        gathered("four\n");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !batch().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the batch is written");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
