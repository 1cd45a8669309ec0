//! The bundled demo MCP server (`mcp-session-proxy demo-server`): stdio, protocol 2025-11-25,
//! deterministic tools and subscribable resources for the README, the tests and benchmarks.
//! Its state (the counter, subscriptions) lives in the process, like a legacy stateful server.
//!
//! Here: the stdio loop and what every answer shares (output, questions to the client, slow
//! tools and their cancellation). `answers` answers each method, `tools` runs the demo's own
//! tools, `conformance` and `input_fixtures` hold fixtures for the test suites, `modern` and
//! `modern_http` the 2026-07-28 mode.

mod answers;
mod conformance;
mod input_fixtures;
mod modern;
mod modern_http;
mod tools;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::upstream::lines::{Line, LineReader};
use crate::wire::era::Era;
use crate::wire::methods;

pub use modern_http::serve as serve_modern_over_http;

const PROTOCOL_VERSION: &str = "2025-11-25";
const INSTRUCTIONS: &str =
    "A deterministic demo server: echo, add, counter, sleep, emit_updates, progress.";
use crate::wire::era::LEGACY_VERSIONS as KNOWN_VERSIONS;

#[derive(Default)]
struct State {
    /// `initialize` was answered: a legacy server takes nothing else before it.
    initialized: bool,
    counter: u64,
    subscriptions: HashSet<String>,
    running: HashMap<String, JoinHandle<()>>,
    client_capabilities: Value,
    /// Requests this server sent to the client, by id, awaiting the client's answer.
    asked: HashMap<String, oneshot::Sender<Value>>,
    next_ask: u64,
    /// 2026-07-28 mode: the open `subscriptions/listen` requests.
    listens: Vec<Listen>,
}

/// An open `subscriptions/listen`: what it asked for and where its notifications go.
struct Listen {
    id: Value,
    tools: bool,
    resources: bool,
    uris: Vec<String>,
    out: mpsc::UnboundedSender<Value>,
}

#[derive(Clone)]
struct Demo {
    state: Arc<Mutex<State>>,
    out: mpsc::UnboundedSender<Value>,
    protocol: Era,
    /// The 2026-07-28 request this clone serves.
    round: Option<Arc<modern::Round>>,
}

/// Serves MCP on stdin/stdout until stdin closes.
pub async fn run(protocol: Era) -> anyhow::Result<()> {
    let (out, mut lines_out) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        // Every message ready goes out in one write (tokio's stdout hands each write to a
        // blocking thread).
        while let Some(message) = lines_out.recv().await {
            let mut lines = message.to_string().into_bytes();
            lines.push(b'\n');
            while lines.len() < 64 << 10 {
                let Ok(next) = lines_out.try_recv() else {
                    break;
                };
                lines.extend_from_slice(next.to_string().as_bytes());
                lines.push(b'\n');
            }
            if stdout.write_all(&lines).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let demo = Demo {
        state: Arc::default(),
        out,
        protocol,
        round: None,
    };
    let mut input = LineReader::new(BufReader::new(tokio::io::stdin()), 16 << 20);
    while let Some(line) = input.next_line().await? {
        let Line::Text(line) = line else {
            eprintln!("demo-server: skipped an oversized line");
            continue;
        };
        match serde_json::from_slice::<Value>(&line) {
            Ok(message) => demo.handle(message),
            Err(error) => eprintln!("demo-server: not JSON: {error}"),
        }
    }
    // Stdin is closed: nothing more is answered; what still holds the output lets it go.
    {
        let mut state = demo.lock();
        state.listens.clear();
        state.running.drain().for_each(|(_, task)| task.abort());
    }
    drop(demo);
    let _ = writer.await;
    Ok(())
}

impl Demo {
    fn send(&self, message: Value) {
        let _ = self.out.send(message);
    }

    fn reply(&self, id: &Value, mut result: Value) {
        if let Some(round) = &self.round {
            modern::decorate(&mut result, &round.method);
        }
        self.send(json!({ "jsonrpc": "2.0", "id": id, "result": result }));
    }

    fn fail(&self, id: &Value, code: i64, message: &str) {
        self.send(
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }),
        );
    }

    fn notify(&self, method: &str, params: Value) {
        if self.protocol == Era::Modern {
            match method {
                methods::PROGRESS => {}
                // Only to a request that asked for log messages.
                methods::MESSAGE if self.round.as_ref().is_some_and(|r| r.log_level.is_some()) => {}
                methods::MESSAGE => return,
                // Changes go to the listens that asked for them, never to a request's stream.
                _ => return modern::publish(self, method, &params),
            }
        }
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, message: Value) {
        if self.protocol == Era::Modern && message["method"].is_string() {
            let Some(round) = modern::admit(self, &message) else {
                return;
            };
            let serving = Demo {
                round: Some(round),
                ..self.clone()
            };
            return serving.serve(message);
        }
        self.serve(message);
    }

    /// Sends a request to the client and waits for its answer (the whole response message).
    async fn ask(&self, method: &str, params: Value) -> Value {
        if let Some(round) = &self.round {
            return modern::ask(self, round, method, params).await;
        }
        let (answer, answered) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            state.next_ask += 1;
            let id = Value::from(format!("demo-{}", state.next_ask));
            state.asked.insert(id.to_string(), answer);
            id
        };
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        answered.await.unwrap_or(Value::Null)
    }

    fn client_supports(&self, capability: &str) -> bool {
        match &self.round {
            Some(round) => !round.capabilities[capability].is_null(),
            None => !self.lock().client_capabilities[capability].is_null(),
        }
    }

    fn progress(&self, token: &Value, step: u64, steps: u64) {
        if !token.is_null() {
            self.notify(
                methods::PROGRESS,
                json!({
                    "progressToken": token, "progress": step, "total": steps,
                    "message": format!("step {step} of {steps}")
                }),
            );
        }
    }

    /// Runs a slow tool in its own task, cancellable by `notifications/cancelled`.
    fn spawn_for<F, Fut>(&self, id: &Value, work: F)
    where
        F: FnOnce(Demo, Value) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let key = id.to_string();
        let demo = self.clone();
        let state = self.state.clone();
        let task_key = key.clone();
        let future = work(demo, id.clone());
        let handle = tokio::spawn(async move {
            future.await;
            state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .running
                .remove(&task_key);
        });
        self.lock().running.insert(key, handle);
    }

    fn cancel(&self, request_id: &Value) {
        // A 2026-07-28 listen ends when its request is cancelled.
        self.lock()
            .listens
            .retain(|listen| listen.id != *request_id);
        let task = self.lock().running.remove(&request_id.to_string());
        let outcome = match task {
            Some(task) => {
                task.abort();
                "cancelled a request in flight"
            }
            None => "received a cancellation for no request in flight",
        };
        self.notify(
            methods::MESSAGE,
            json!({ "level": "info", "logger": "demo", "data": outcome }),
        );
    }
}

/// The strings of a JSON array (none for anything else).
fn strings(array: &Value) -> Vec<String> {
    array
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
