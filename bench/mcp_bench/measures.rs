//! What the load generator measures: calls through sessions, idle sessions, the log, a resume.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use mcp_session_proxy::session::log::{EventLog, StreamKey, Window};
use mcp_session_proxy::upstream::http_client::{self};
use mcp_session_proxy::wire::sse;
use serde_json::{json, Value};

use super::session::{Session, Shape};

pub(crate) async fn calls_bench(
    url: &str,
    call_url: &http::Uri,
    shape: Shape,
    tool: &str,
    arguments: Value,
) -> Result<Value, String> {
    let Shape {
        sessions,
        calls,
        warmup,
        modern,
        data_layer,
        anonymous,
        authorization,
        client,
        cpu_pid,
    } = shape;
    let mut opened = Vec::with_capacity(sessions);
    for n in 0..sessions {
        let mut session = match modern {
            true => Session::modern(&client, url, n, anonymous)?,
            false => Session::open(&client, url, "2025-06-18", authorization.clone()).await?,
        };
        if let (true, Some(authorization)) = (modern, &authorization) {
            session.principal = Some(authorization.clone());
        }
        if data_layer {
            session.create_data_session().await?;
        }
        session.url = call_url.clone();
        // Ids unique across the sessions: a server shared by every client without sessions of
        // its own (ContextForge's bridge) matches answers to requests by id alone.
        session.next = (n as u64) << 32;
        opened.push(session);
    }
    let cpu_before = cpu_pid.map(cpu_time).transpose()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut session in opened {
        let tool = tool.to_owned();
        let arguments = arguments.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..warmup {
                session.call(&tool, &arguments).await?;
            }
            let mut latencies = Vec::with_capacity(calls);
            let mut errors = 0usize;
            for _ in 0..calls {
                let sent = Instant::now();
                let reply = session.call(&tool, &arguments).await?;
                latencies.push(sent.elapsed());
                errors += usize::from(reply.get("error").is_some());
            }
            Ok::<_, String>((latencies, errors, session))
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut done = Vec::new();
    for task in tasks {
        let (mut measured, failed, session) = task.await.map_err(|e| e.to_string())??;
        latencies.append(&mut measured);
        errors += failed;
        done.push(session);
    }
    let elapsed = started.elapsed();
    let cpu_spent = match (cpu_pid, cpu_before) {
        (Some(pid), Some(before)) => Some(cpu_time(pid)?.saturating_sub(before)),
        _ => None,
    };
    for session in &done {
        session.end().await;
    }
    latencies.sort();
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index].as_secs_f64() * 1e6
    };
    let mean = latencies.iter().sum::<Duration>().as_secs_f64() * 1e6 / latencies.len() as f64;
    let cpu_us_per_call = cpu_spent
        .map(|spent| spent.as_secs_f64() * 1e6 / (latencies.len() + warmup * sessions) as f64);
    Ok(json!({
        "cpu_us_per_call": cpu_us_per_call,
        "era": match (modern, data_layer) {
            (_, true) => "data-layer",
            (true, false) if anonymous => "anonymous",
            (true, false) => "modern",
            (false, false) => "legacy",
        },
        "sessions": sessions,
        "calls": latencies.len(),
        "errors": errors,
        "p50_us": percentile(0.50),
        "p99_us": percentile(0.99),
        "mean_us": mean,
        "throughput_rps": latencies.len() as f64 / elapsed.as_secs_f64(),
    }))
}

/// The CPU time a process has spent so far, all its threads together (the scheduler's own
/// nanoseconds, finer than the clock ticks of `/proc/<pid>/stat`).
pub(crate) fn cpu_time(pid: u32) -> Result<Duration, String> {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("process {pid}: {e}"))?;
    let mut nanos = 0u64;
    for thread in threads.flatten() {
        // A thread that ended since the listing has nothing left to count.
        let Ok(stat) = std::fs::read_to_string(thread.path().join("schedstat")) else {
            continue;
        };
        nanos += stat
            .split_whitespace()
            .next()
            .and_then(|field| field.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(Duration::from_nanos(nanos))
}

pub(crate) async fn idle(url: &str, sessions: usize, concurrency: usize) -> Result<Value, String> {
    let client = http_client::plain_client();
    let started = Instant::now();
    let concurrency = concurrency.clamp(1, sessions.max(1));
    let openers = (0..concurrency).map(|n| {
        let (client, url) = (client.clone(), url.to_owned());
        // The sessions are left open on the proxy; nothing of them is kept here.
        let share = sessions / concurrency + usize::from(n < sessions % concurrency);
        tokio::spawn(async move {
            for _ in 0..share {
                Session::open(&client, &url, "2025-06-18", None).await?;
            }
            Ok::<_, String>(())
        })
    });
    for opener in openers.collect::<Vec<_>>() {
        opener.await.map_err(|e| e.to_string())??;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({ "sessions": sessions, "seconds": seconds, "per_second": sessions as f64 / seconds }))
}

pub(crate) fn log_bench(events: usize) -> Value {
    let payload = Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"demo://doc/1"}}"#,
    );
    let window = Window {
        max_events: 1024,
        max_bytes: 1 << 30,
        max_age: Duration::from_secs(3600),
    };
    let now = tokio::time::Instant::now();
    let mut log = EventLog::new(window);
    let started = Instant::now();
    for _ in 0..events {
        log.append(
            StreamKey::Standalone,
            payload.clone(),
            false,
            None,
            true,
            now,
        );
    }
    let append = started.elapsed();

    let mut coalescing = EventLog::new(window);
    let keys: Vec<String> = (0..10).map(|i| format!("demo://doc/{i}")).collect();
    let started = Instant::now();
    for i in 0..events {
        coalescing.append(
            StreamKey::Standalone,
            payload.clone(),
            false,
            Some(keys[i % 10].clone()),
            false,
            now,
        );
    }
    let coalesce = started.elapsed();

    let mut full = EventLog::new(Window {
        max_events: 1000,
        ..window
    });
    for _ in 0..1000 {
        full.append(
            StreamKey::Standalone,
            payload.clone(),
            false,
            None,
            false,
            now,
        );
    }
    let rounds = 1000;
    let started = Instant::now();
    let mut replayed = 0;
    for _ in 0..rounds {
        // A resume: everything is caught up on (and would be coalesced, had it keys).
        replayed += full
            .read(StreamKey::Standalone, 0, u64::MAX, now)
            .events
            .len();
    }
    let replay = started.elapsed() / rounds;
    json!({
        "append_per_second": events as f64 / append.as_secs_f64(),
        "append_coalescing_per_second": events as f64 / coalesce.as_secs_f64(),
        "replay_1000_us": replay.as_secs_f64() * 1e6,
        "replayed_per_round": replayed / rounds as usize,
    })
}

pub(crate) async fn resume(url: &str, missed: usize) -> Result<Value, String> {
    let client = http_client::plain_client();
    let mut session = Session::open(&client, url, "2025-11-25", None).await?;
    // Note the GET stream's position, then let `missed` distinct updates pile up.
    let position = {
        let response = get(&session, None).await?;
        let mut body = response.into_body();
        let mut decoder = sse::Decoder::new(1 << 20);
        loop {
            let frame = body
                .frame()
                .await
                .ok_or("no priming event (negotiate 2025-11-25?)")?;
            if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
                decoder.feed(&data);
            }
            if let Some(event) = decoder.next_event().map_err(|e| e.to_string())? {
                break event.id.ok_or("the first event has no id")?;
            }
        }
    };
    let uris: Vec<String> = (0..missed).map(|i| format!("demo://bench/{i}")).collect();
    session
        .call("emit_updates", &json!({ "uris": uris, "count": missed }))
        .await?;
    let started = Instant::now();
    let response = get(&session, Some(&position)).await?;
    let mut body = response.into_body();
    let mut decoder = sse::Decoder::new(1 << 20);
    let mut received = 0;
    while received < missed {
        let frame = body.frame().await.ok_or("the stream ended early")?;
        if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
            decoder.feed(&data);
        }
        while let Some(event) = decoder.next_event().map_err(|e| e.to_string())? {
            received += usize::from(!event.data.is_empty());
        }
    }
    Ok(
        json!({ "missed": missed, "received": received, "resume_ms": started.elapsed().as_secs_f64() * 1e3 }),
    )
}

pub(crate) async fn get(
    session: &Session,
    last_event_id: Option<&str>,
) -> Result<Response<Incoming>, String> {
    let mut request = Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = session.url.clone();
    let headers = request.headers_mut();
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    if let Some(id) = &session.id {
        headers.insert("mcp-session-id", id.clone());
    }
    if let Some(position) = last_event_id.and_then(|p| HeaderValue::from_str(p).ok()) {
        headers.insert("last-event-id", position);
    }
    session
        .client
        .request(request)
        .await
        .map_err(|e| e.to_string())
}
