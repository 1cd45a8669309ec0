//! The stdio upstream (MCP spec, basic/transports §stdio): one child process per session,
//! newline-delimited JSON on stdin/stdout, stderr to the log. An actor task owns the child;
//! shutdown is close stdin → SIGTERM → SIGKILL, each step after a grace period.

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn, Instrument};

use super::lines::{Line, LineReader};
use super::{EventSink, UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::{self, Message};

mod spec;
mod stderr;
mod warm_up;

pub use spec::{own_directories, ChildHolds, CommandError, Role, StdioSpec};
pub use warm_up::warm_cache;

/// Lines of stderr kept to explain a crash.
const STDERR_TAIL: usize = 10;
/// What one read of the child's stdout takes at most (longer lines take several): small, as
/// every child has one, idle or not.
const STDOUT_BUFFER: usize = 4 << 10;

/// Messages queued for the child's stdin before senders wait: backpressure onto clients.
const STDIN_QUEUE: usize = 64;

/// Handle to a session's child. Cloning shares it; a child that exited can be replaced by a new
/// one (`restart`), which every clone then speaks to.
#[derive(Debug, Clone)]
pub struct StdioUpstream {
    current: Arc<Mutex<Running>>,
    start: Arc<Start>,
    /// Cancelled at release: the child then running is stopped, and no other is started.
    released: CancellationToken,
}

/// The child running now: where its stdin's messages queue, and its process.
#[derive(Debug)]
struct Running {
    outbox: mpsc::Sender<Bytes>,
    /// Cancelled to stop this child only (a restart replacing it, or the release).
    stop: CancellationToken,
    pid: Option<u32>,
}

/// What starting a child again takes: the same command, its events to the same sink.
struct Start {
    spec: Arc<StdioSpec>,
    events: EventSink,
    tasks: TaskTracker,
}

impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start")
            .field("command", &self.spec.display())
            .finish()
    }
}

impl StdioUpstream {
    /// Starts the child; its messages and its end are delivered to `events`.
    /// The actor runs on `tasks`, so shutdown can wait for every child to be released.
    pub fn spawn(
        spec: &Arc<StdioSpec>,
        events: EventSink,
        tasks: &TaskTracker,
    ) -> Result<StdioUpstream, UpstreamError> {
        let start = Arc::new(Start {
            spec: spec.clone(),
            events,
            tasks: tasks.clone(),
        });
        let released = CancellationToken::new();
        let running = start.child(released.child_token())?;
        Ok(StdioUpstream {
            current: Arc::new(Mutex::new(running)),
            start,
            released,
        })
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Running> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pid(&self) -> Option<u32> {
        self.current().pid
    }

    /// Queues `message` for the child's stdin, waiting at most the request timeout for room
    /// (a child that stops reading is stopped by then, and its queue closed).
    pub async fn send(&self, message: Bytes) -> Result<(), UpstreamError> {
        let outbox = self.current().outbox.clone();
        let timeout = self.start.spec.request_timeout;
        match tokio::time::timeout(timeout, outbox.send(message)).await {
            Ok(sent) => sent.map_err(|_| UpstreamError::Gone),
            Err(_) => Err(UpstreamError::StoppedReading(timeout)),
        }
    }

    /// Starts a new child in place of the one running or ended (it is stopped if it still
    /// runs); `Gone` once released.
    pub fn restart(&self) -> Result<(), UpstreamError> {
        if self.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        let running = self.start.child(self.released.child_token())?;
        let replaced = std::mem::replace(&mut *self.current(), running);
        replaced.stop.cancel();
        Ok(())
    }

    pub fn release(&self) {
        self.released.cancel();
    }
}

impl Start {
    /// Starts one child, stopped when `stop` is cancelled.
    fn child(&self, stop: CancellationToken) -> Result<Running, UpstreamError> {
        let spec = &self.spec;
        let (mut command, holds) = spec.command().map_err(|source| UpstreamError::Spawn {
            command: spec.display(),
            source: Arc::new(source),
        })?;
        let mut child =
            command
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| UpstreamError::Spawn {
                    command: spec.display(),
                    source: Arc::new(source),
                })?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three pipes were requested");
        };
        let span = tracing::info_span!("upstream", pid);
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let events = self.events.clone();
        let reader = tokio::spawn(
            read_stdout(
                stdout,
                spec.max_line_bytes,
                events.clone(),
                spec.stderr_dropped.clone(),
            )
            .instrument(span.clone()),
        );
        let dropped = spec.stderr_dropped.clone();
        tokio::spawn(stderr::read(stderr, tail.clone(), dropped).instrument(span.clone()));
        let (outbox, inbox) = mpsc::channel(STDIN_QUEUE);
        let actor = Actor {
            child,
            holds: Some(holds),
            stdin: Some(stdin),
            inbox,
            stop: stop.clone(),
            reader,
            tail,
            events,
            grace: spec.shutdown_grace,
            write_timeout: spec.request_timeout,
        };
        self.tasks.spawn(actor.run().instrument(span));
        debug!(pid, command = %spec.display(), "upstream started");
        Ok(Running { outbox, stop, pid })
    }
}

struct Actor {
    child: Child,
    /// A confined child's directory and its user id from a range, let go once the actor is
    /// done with the child.
    holds: Option<ChildHolds>,
    stdin: Option<ChildStdin>,
    inbox: mpsc::Receiver<Bytes>,
    /// Cancelled to stop the child (released, or replaced by a restart).
    stop: CancellationToken,
    reader: JoinHandle<()>,
    tail: Arc<Mutex<VecDeque<String>>>,
    events: EventSink,
    grace: Duration,
    /// Longest a write to the child's stdin may take.
    write_timeout: Duration,
}

/// Why the actor stopped serving its child.
enum End {
    Released,
    Exited(std::io::Result<ExitStatus>),
    /// The child stopped reading its stdin: a write did not finish within the request timeout.
    StoppedReading,
}

/// How a write to the child's stdin went.
enum Written {
    Done,
    Released,
    Stalled,
}

impl Actor {
    async fn run(mut self) {
        let end = loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break End::Released,
                status = self.child.wait() => break End::Exited(status),
                message = self.inbox.recv() => match message {
                    Some(message) => match self.write(message).await {
                        Written::Done => {}
                        Written::Released => break End::Released,
                        Written::Stalled => break End::StoppedReading,
                    },
                    None => break End::Released,
                },
            }
        };
        match end {
            End::Released => {
                self.stdin = None;
                let status = terminate(&mut self.child, self.grace).await;
                debug!(?status, "upstream released");
            }
            End::Exited(status) => {
                // Exited on its own: let the reader deliver what it printed before reporting
                // the end.
                let _ = (&mut self.reader).await;
                let cause = describe_exit(status, &self.tail);
                warn!(%cause, "upstream exited");
                self.events.deliver(UpstreamEvent::Exited(cause));
            }
            End::StoppedReading => self.stop_stuck_child().await,
        }
        if let Some(holds) = self.holds.take() {
            holds.release(self.grace.max(Duration::from_secs(1))).await;
        }
    }

    /// The child stopped reading its stdin: messages waiting for it fail, nothing it says any
    /// more is taken, its sessions are told it is gone, and it is killed (it would not see its
    /// stdin close).
    async fn stop_stuck_child(&mut self) {
        let cause = UpstreamError::StoppedReading(self.write_timeout);
        warn!(%cause, "upstream stuck");
        self.inbox.close();
        self.reader.abort();
        self.events.deliver(UpstreamEvent::Exited(cause));
        self.stdin = None;
        let killed = end_now(&mut self.child).await;
        debug!(?killed, "stuck upstream killed");
    }

    /// Writes `message`, and with it every message already waiting (up to `WRITE_BATCH` bytes):
    /// one write for many when sessions are busy. Bounded by the write timeout, and given up at
    /// release.
    async fn write(&mut self, message: Bytes) -> Written {
        let Some(stdin) = self.stdin.as_mut() else {
            return Written::Done;
        };
        let mut lines = Vec::with_capacity(message.len() + 1);
        push_line(&mut lines, &message);
        while lines.len() < WRITE_BATCH {
            match self.inbox.try_recv() {
                Ok(next) => push_line(&mut lines, &next),
                Err(_) => break,
            }
        }
        let written = tokio::select! {
            written = tokio::time::timeout(self.write_timeout, stdin.write_all(&lines)) => written,
            () = self.stop.cancelled() => return Written::Released,
        };
        match written {
            Ok(Ok(())) => Written::Done,
            Ok(Err(error)) => {
                warn!(%error, "writing to the upstream's stdin failed");
                self.stdin = None;
                Written::Done
            }
            Err(_) => Written::Stalled,
        }
    }
}

/// Bytes written to a child's stdin at once, at most (past one message).
const WRITE_BATCH: usize = 64 << 10;

/// Appends `message` as one line. A JSON text holds raw newlines only as whitespace, so they can
/// become spaces.
fn push_line(lines: &mut Vec<u8>, message: &[u8]) {
    lines.extend(
        message
            .iter()
            .map(|b| if matches!(b, b'\n' | b'\r') { b' ' } else { *b }),
    );
    lines.push(b'\n');
}

/// Stops a child whose stdin was closed: after `grace`, SIGTERM to its launcher, which passes it
/// on and, after `grace` again, ends the server and everything it started; a second past that,
/// the launcher and its process group are killed.
pub(crate) async fn terminate(child: &mut Child, grace: Duration) -> std::io::Result<ExitStatus> {
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status;
    }
    let pid = child.id().and_then(|pid| i32::try_from(pid).ok());
    if let Some(pid) = pid {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let launchers_grace = grace.max(Duration::from_secs(1)) + Duration::from_secs(1);
    if let Ok(status) = tokio::time::timeout(launchers_grace, child.wait()).await {
        return status;
    }
    end_now(child).await
}

/// Ends a child at once: its launcher told to end the server and everything of it; a second
/// later, the launcher and its process group killed (while the launcher, the group's leader, is
/// not yet reaped).
pub(crate) async fn end_now(child: &mut Child) -> std::io::Result<ExitStatus> {
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return child.wait().await;
    };
    let _ = kill(Pid::from_raw(pid), crate::upstream::sandbox::END_NOW);
    if let Ok(status) = tokio::time::timeout(Duration::from_secs(1), child.wait()).await {
        return status;
    }
    let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
    child.kill().await?;
    child.wait().await
}

fn describe_exit(
    status: std::io::Result<ExitStatus>,
    tail: &Mutex<VecDeque<String>>,
) -> UpstreamError {
    let status = match status {
        Ok(status) => match over_limit(&status) {
            Some(limit) => format!("{status}: over its {limit}"),
            None => status.to_string(),
        },
        Err(error) => format!("status unknown ({error})"),
    };
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    UpstreamError::Exited {
        status,
        stderr: tail.iter().cloned().collect(),
    }
}

/// The resource limit a child's end says it went past, when the system tells which: SIGXCPU
/// past its CPU time, SIGXFSZ past its file size (`upstream.sandbox`).
fn over_limit(status: &ExitStatus) -> Option<&'static str> {
    use std::os::unix::process::ExitStatusExt;
    match status.signal()? {
        signal if signal == Signal::SIGXCPU as i32 => Some("CPU time (sandbox.cpu_seconds)"),
        signal if signal == Signal::SIGXFSZ as i32 => Some("file size (sandbox.file_size)"),
        _ => None,
    }
}

/// Delivers the child's messages in the order it wrote them. Before taking each, it waits for
/// room in the sink's write-behind queue: while the queue is full the child's stdout is not read,
/// and the child blocks on its full pipe (nothing is dropped, nothing piles up here). What is
/// said of a line that is not a message is logged within a budget (the rest counted in
/// `unlogged`, as stderr's lines are).
async fn read_stdout(
    stdout: tokio::process::ChildStdout,
    max_line: usize,
    events: EventSink,
    unlogged: prometheus_client::metrics::counter::Counter,
) {
    let mut lines = LineReader::new(BufReader::with_capacity(STDOUT_BUFFER, stdout), max_line);
    let mut budget = stderr::Budget::new(tokio::time::Instant::now());
    loop {
        super::room_to_read(events.as_ref()).await;
        match lines.next_line().await {
            Ok(Some(Line::Text(line))) if line.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Some(Line::Text(line))) => match Message::parse_from_server(Bytes::from(line)) {
                Ok(message) => events.deliver(UpstreamEvent::Message(Box::new(message))),
                Err(error) => budget.log(
                    &unlogged,
                    || warn!(%error, "upstream wrote a line that is not JSON-RPC; dropped"),
                ),
            },
            Ok(Some(Line::TooLong { max, head })) => {
                let id = jsonrpc::top_level_id(&head);
                budget.log(&unlogged, || {
                    let id = id.as_ref().map_or_else(String::new, ToString::to_string);
                    warn!(
                        max,
                        %id,
                        "upstream wrote a message longer than max_line_bytes; dropped"
                    )
                });
                events.deliver(UpstreamEvent::Oversized {
                    id: id.map(Box::new),
                    max,
                });
            }
            Ok(None) => return,
            Err(error) => {
                warn!(%error, "reading the upstream's stdout failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_past_a_limit_names_it() {
        use std::os::unix::process::ExitStatusExt;
        let named = |signal: Signal| over_limit(&ExitStatus::from_raw(signal as i32));
        assert_eq!(
            named(Signal::SIGXCPU),
            Some("CPU time (sandbox.cpu_seconds)")
        );
        assert_eq!(
            named(Signal::SIGXFSZ),
            Some("file size (sandbox.file_size)")
        );
        assert_eq!(named(Signal::SIGKILL), None);
        assert_eq!(
            over_limit(&ExitStatus::from_raw(3 << 8)),
            None,
            "an exit code"
        );
    }
}
