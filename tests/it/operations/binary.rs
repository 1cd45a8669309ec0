//! The real binary, as an operator runs it: JSON logs with a span per session, and SIGTERM
//! (streams told when to reconnect and closed, nothing new taken, requests in flight answered,
//! the server released, a clean exit in time), on the multi-threaded runtime and on a single
//! thread.

use crate::harness::{memory_kib, modern_request, spawn_proxy, until, within, Client, DEMO};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Command;

use http::{Method, StatusCode};
use serde_json::json;

/// Children of `parent`, from /proc.
fn children_of(parent: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after_name = stat.rsplit_once(')')?.1.to_owned();
                    after_name.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

#[tokio::test]
async fn sigterm_closes_streams_with_retry_releases_servers_and_exits_cleanly() {
    serve_then_sigterm("0").await;
}

#[tokio::test]
async fn a_single_threaded_proxy_serves_and_stops_the_same_way() {
    serve_then_sigterm("1").await;
}

async fn serve_then_sigterm(workers: &str) {
    let (mut proxy, addr, mut logs, mut seen) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--shutdown-timeout",
        "5s",
        "--workers",
        workers,
        "--json-wait",
        "10ms",
        "--drain-delay",
        "3s",
    ])
    .await;
    let pid = proxy.id().unwrap();

    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    let session = client.session.clone().unwrap();
    let mut stream = client.get(None).await;
    assert_eq!(
        within("priming", stream.next_event()).await.unwrap().data,
        ""
    );
    let servers = children_of(pid);
    assert_eq!(servers.len(), 1, "one demo server for the one session");

    let in_flight = client
        .post(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": { "name": "sleep", "arguments": { "ms": 1000 } } }))
        .await;
    assert!(in_flight.is_sse(), "still in flight");

    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    // Draining: unready at once, and still serving what reaches it, each connection closed
    // after its exchange while balancers notice.
    until(
        "/readyz to answer 503",
        StatusCode::SERVICE_UNAVAILABLE,
        || async {
            client
                .send_to("/readyz", Method::GET, &[], None)
                .await
                .status
        },
    )
    .await;
    let served = client
        .post(&json!({ "jsonrpc": "2.0", "id": 8, "method": "tools/call",
                       "params": { "name": "echo", "arguments": { "text": "draining" } } }))
        .await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.headers["connection"], "close");
    let served = served.response().await;
    assert_eq!(
        served["result"]["content"][0]["text"], "draining",
        "{served}"
    );
    let mut rest = Vec::new();
    while let Some(chunk) = within("the stream to close", stream.next_chunk()).await {
        rest.extend_from_slice(&chunk);
    }
    assert!(
        String::from_utf8_lossy(&rest).contains("retry: 1000\n\n"),
        "told when to reconnect: {:?}",
        String::from_utf8_lossy(&rest)
    );
    // Then: new connections are refused (a balancer retries those elsewhere), what is in
    // flight is answered.
    until("new connections to be refused", true, || async {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    let answer = in_flight.response().await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 1000 ms",
        "{answer}"
    );
    let status = within("the proxy to exit", proxy.wait()).await.unwrap();
    assert!(status.success(), "{status}");
    assert!(
        kill(Pid::from_raw(servers[0]), None).is_err(),
        "the demo server is gone"
    );

    while let Ok(Some(line)) = logs.next_line().await {
        seen.push(serde_json::from_str(&line).expect("JSON logs"));
    }
    assert!(
        seen.iter().any(|entry| entry["span"]["name"] == "session"
            && entry["span"]["id"].as_str().is_some_and(is_session_digest)),
        "a log line inside the session's span names it by its digest"
    );
    assert!(
        !seen
            .iter()
            .any(|entry| entry.to_string().contains(&session)),
        "no log line holds the session id itself, a bearer token"
    );
    let message =
        |entry: &serde_json::Value| entry["fields"]["message"].as_str().map(str::to_owned);
    let shutting = seen
        .iter()
        .find(|entry| message(entry).is_some_and(|m| m.starts_with("shutting down")));
    let shutting = shutting.expect("the stop says what it does");
    assert_eq!(shutting["fields"]["drain"], "3s", "{shutting}");
    assert_eq!(shutting["fields"]["timeout"], "5s", "{shutting}");
    assert_eq!(
        message(seen.last().unwrap()).as_deref(),
        Some("stopped"),
        "the last line"
    );
    let ended = seen
        .iter()
        .find(|entry| message(entry).as_deref() == Some("session ended"));
    assert_eq!(ended.expect("its end")["fields"]["reason"], "shutdown");
}

/// `session ended` says why: a client's `DELETE`, an idle TTL run out.
#[tokio::test]
async fn a_sessions_end_is_logged_with_its_reason() {
    let (_proxy, addr, mut logs, _) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--idle-ttl", "1s"]).await;
    let mut deleted = Client::new(addr);
    deleted.initialize("2025-11-25").await;
    assert_eq!(deleted.delete().await, StatusCode::OK);
    let mut idle = Client::new(addr);
    idle.initialize("2025-11-25").await;
    let mut reasons = Vec::new();
    within("two ends logged", async {
        while reasons.len() < 2 {
            let line = logs.next_line().await.unwrap().expect("a log line");
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
            if entry["fields"]["message"] == "session ended" {
                reasons.push(entry["fields"]["reason"].as_str().unwrap().to_owned());
            }
        }
    })
    .await;
    assert_eq!(reasons, ["deleted", "idle"]);
}

/// Whether `shown` is how logs show a session id: `s-` and 16 hex digits.
fn is_session_digest(shown: &str) -> bool {
    shown.len() == 18
        && shown.starts_with("s-")
        && shown[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// Runs the proxy as `command` says, expects it to refuse to start, and returns what it said.
async fn refused_start(command: &mut Command) -> String {
    let output = within(
        "the proxy to refuse to start",
        command.kill_on_drop(true).output(),
    )
    .await
    .unwrap();
    assert!(!output.status.success(), "started: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn a_proxy_whose_log_reader_went_away_goes_on_serving() {
    // Its standard error is a pipe nobody reads any more (a log collector that died): every
    // log line fails to be written, and no request may fail for it.
    let (mut child, addr, logs, _) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    drop(logs);
    let mut client = Client::new(addr);
    for _ in 0..3 {
        let mut fresh = Client::new(addr);
        fresh.initialize("2025-11-25").await;
        assert_eq!(
            fresh.call_tool("echo", json!({ "text": "still" })).await,
            "still"
        );
        assert_eq!(fresh.delete().await, StatusCode::OK);
    }
    client.initialize("2025-11-25").await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");
    assert!(child.try_wait().unwrap().is_none(), "the proxy runs on");
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    let status = within("the proxy to stop", child.wait()).await.unwrap();
    assert!(status.success(), "{status}");
}

/// A path the file names is read from the file's folder, whatever the working directory; one a
/// flag gives, from the working directory; the start says which absolute paths it uses.
#[tokio::test]
async fn a_files_relative_paths_are_read_from_its_folder_and_a_flags_from_the_working_one() {
    let dir = std::env::temp_dir().join(format!("mcp-proxy-paths-{}", std::process::id()));
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let file = dir.join("proxy.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\n[tls]\ncert_file = \"certs/proxy.pem\"\nkey_file = \"certs/key.pem\"\n",
    )
    .unwrap();
    let message = refused_start(
        Command::new(DEMO)
            .current_dir(&elsewhere)
            .arg("--config")
            .arg(&file)
            .args(["--trusted-proxy-token-file", "token"]),
    )
    .await;
    let cert = dir.join("certs/proxy.pem");
    let token = elsewhere.join("token");
    assert!(
        message.contains(&format!("path={}", cert.display())),
        "the file's path from its folder: {message}"
    );
    assert!(
        message.contains(&format!("path={}", token.display())),
        "the flag's path from the working directory: {message}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_bad_configuration_stops_start_up_with_the_key_and_line() {
    let dir = std::env::temp_dir().join(format!("mcp-proxy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\n\n[session]\nwindow_evnts = 5\n",
    )
    .unwrap();
    let message = refused_start(Command::new(DEMO).arg("--config").arg(&file)).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        message.contains("window_evnts") && message.contains("line 4"),
        "{message}"
    );
}

#[tokio::test]
async fn a_stdio_command_that_does_not_exist_stops_start_up() {
    let message = refused_start(
        Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--stdio", "mcp-no-such-server --flag"]),
    )
    .await;
    assert!(
        message.contains("upstream.stdio")
            && message.contains("`mcp-no-such-server` was not found"),
        "{message}"
    );

    let dir = std::env::temp_dir().join(format!("mcp-proxy-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_a_program = dir.join("notes.txt");
    std::fs::write(&not_a_program, "not a program\n").unwrap();
    let file = dir.join("gateway.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\n[servers.docs.upstream]\nstdio = \"{} --serve\"\n",
            not_a_program.display()
        ),
    )
    .unwrap();
    let message = refused_start(Command::new(DEMO).arg("--config").arg(&file)).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        message.contains("servers.docs.upstream.stdio")
            && message.contains(&format!(
                "{} is not an executable file",
                not_a_program.display()
            )),
        "{message}"
    );
}

/// An address of TEST-NET-1 (RFC 5737): beyond loopback, and never this machine's, so a
/// proxy told to listen there never listens anywhere.
const BEYOND_LOOPBACK: &str = "192.0.2.1:8787";

#[tokio::test]
async fn a_principal_header_beyond_loopback_needs_the_proxies_it_trusts() {
    let message = refused_start(
        Command::new(DEMO)
            .args(["--listen", BEYOND_LOOPBACK])
            .args(["--principal-header", "x-authenticated-user"]),
    )
    .await;
    assert!(
        message.contains("http.principal_header") && message.contains("http.trusted_proxies"),
        "{message}"
    );
    let message = refused_start(
        Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--trusted-proxy", "10.0.0.1/8"]),
    )
    .await;
    assert!(
        message.contains("10.0.0.1/8") && message.contains("10.0.0.0/8"),
        "{message}"
    );
    // On loopback, only local peers may send it: no list needed, where the proxy's own
    // children reach no network.
    let (mut proxy, addr, _logs, _) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--principal-header",
        "x-authenticated-user",
        "--sandbox",
        "--sandbox-network",
        "none",
    ])
    .await;
    let reply = Client::new(addr)
        .send_to("/healthz", Method::GET, &[], None)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    proxy.kill().await.unwrap();
}

/// Bodies that declare 4 MB and trickle in a byte at a time: the proxy's memory grows with the
/// bytes received (a few KiB), not with a transport buffer kept per byte (≈4 KiB a byte before).
#[tokio::test]
async fn slow_bodies_cost_memory_by_the_bytes_received() {
    use tokio::io::AsyncWriteExt;
    let (proxy, addr, mut logs, _) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--body-timeout", "60s"]).await;
    let pid = proxy.id().unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = logs.next_line().await {} });
    let mut senders = Vec::new();
    for _ in 0..20 {
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        socket.set_nodelay(true).unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\ncontent-length: 4000000\r\n\r\n"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        senders.push(socket);
    }
    let before = memory_kib(pid, "VmRSS");
    // 300 bytes on each connection, paced like a slow client (the pace is the load, not a wait
    // for anything), so each arrives on its own.
    for _ in 0..300 {
        for socket in &mut senders {
            socket.write_all(b" ").await.unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let received = 20 * 300;
    let grown = memory_kib(pid, "VmRSS").saturating_sub(before);
    assert!(
        grown < 8 * 1024,
        "{received} bytes received on 20 stalled bodies grew the proxy by {grown} KiB"
    );
    drop(senders);
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
}

/// One access line per HTTP request (JSON with `--log-format json`): the server, the JSON-RPC
/// method, the status, the session, and the trace the client's `traceparent` names.
#[tokio::test]
async fn every_request_writes_one_access_line() {
    let (_child, addr, mut lines, _) = spawn_proxy(&["--listen", "127.0.0.1:0"]).await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    let session = client.session.clone().unwrap();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    client.extra_headers.push((
        "traceparent".into(),
        format!("00-{trace}-00f067aa0ba902b7-01"),
    ));
    assert_eq!(
        client.call_tool("echo", json!({ "text": "hi" })).await,
        "hi"
    );
    let unserved = client
        .send_to("/servers/nowhere/mcp", http::Method::POST, &[], None)
        .await;
    assert_eq!(unserved.status, StatusCode::NOT_FOUND);

    let mut access = Vec::new();
    within("the access lines", async {
        while access
            .last()
            .is_none_or(|line: &serde_json::Value| line["status"] != 404)
        {
            let line = lines.next_line().await.unwrap().expect("the proxy logs on");
            let line: serde_json::Value = serde_json::from_str(&line).unwrap();
            if line["target"] == "access" {
                access.push(line["fields"].clone());
            }
        }
    })
    .await;
    let rpcs: Vec<&str> = access.iter().map(|l| l["rpc"].as_str().unwrap()).collect();
    assert_eq!(
        rpcs,
        ["initialize", "notifications/initialized", "tools/call", "-"],
        "{access:#?}"
    );
    let [initialize, initialized, call, unserved] = &access[..] else {
        unreachable!()
    };
    let digest = &initialize["session"];
    assert!(
        digest.as_str().is_some_and(is_session_digest),
        "{initialize}"
    );
    for line in [initialize, initialized, call] {
        assert_eq!(line["server"], "default", "{line}");
        assert_eq!(line["method"], "POST", "{line}");
        assert_eq!(line["path"], "/mcp", "{line}");
        assert_eq!(&line["session"], digest, "one session, one digest: {line}");
        assert!(!line.to_string().contains(&session), "{line}");
        assert!(
            line["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{line}"
        );
        assert!(line["duration_us"].as_u64().is_some(), "{line}");
    }
    assert_eq!(initialize["status"], 200);
    assert_eq!(initialized["status"], 202);
    assert_eq!(initialize["trace_id"], "-", "no traceparent sent");
    assert_eq!(call["status"], 200);
    assert_eq!(call["trace_id"], trace);
    assert_eq!(unserved["server"], "-");
    assert_eq!(unserved["path"], "/servers/nowhere/mcp");
}

/// `--access-log-sample 0.5` writes every second success and every error; `--access-log
/// errors` only the errors; `--access-log off` none.
#[tokio::test]
async fn access_lines_can_be_sampled_kept_for_errors_or_cut() {
    for (options, successes_logged, errors_logged) in [
        (&["--access-log-sample", "0.5"][..], 6, 1),
        (&["--access-log", "errors"][..], 0, 1),
        (&["--access-log", "off"][..], 0, 0),
    ] {
        let args = [&["--listen", "127.0.0.1:0"][..], options].concat();
        let (_child, addr, mut lines, _) = spawn_proxy(&args).await;
        let mut client = Client::new(addr);
        client.initialize("2025-11-25").await;
        for n in 0..10 {
            let text = n.to_string();
            assert_eq!(
                client.call_tool("echo", json!({ "text": text })).await,
                text
            );
        }
        let unserved = client
            .send_to("/servers/nowhere/mcp", http::Method::POST, &[], None)
            .await;
        assert_eq!(unserved.status, StatusCode::NOT_FOUND);
        // A second session's "session created" comes after every access line of the above
        // (lines keep their order), written or not.
        Client::new(addr).initialize("2025-11-25").await;

        let mut statuses = Vec::new();
        within("the second session's line", async {
            let mut created = 0;
            while created < 2 {
                let line = lines.next_line().await.unwrap().expect("the proxy logs on");
                let line: serde_json::Value = serde_json::from_str(&line).unwrap();
                if line["fields"]["message"] == "session created" {
                    created += 1;
                } else if line["target"] == "access" {
                    statuses.push(line["fields"]["status"].as_u64().unwrap());
                }
            }
        })
        .await;
        let successes = statuses.iter().filter(|status| **status < 400).count();
        assert_eq!(successes, successes_logged, "{options:?}: {statuses:?}");
        let errors = statuses.iter().filter(|status| **status == 404).count();
        assert_eq!(errors, errors_logged, "{options:?}: {statuses:?}");
    }
}

#[tokio::test]
async fn durations_past_a_year_and_zero_waits_or_limits_stop_start_up_naming_their_key() {
    for (flag, value, key) in [
        ("--request-timeout", "5000000h", "upstream.request_timeout"),
        ("--json-wait", "9000000h", "http.json_wait"),
        ("--sse-keep-alive", "900000000m", "http.sse_keep_alive"),
        ("--shutdown-timeout", "8785h", "shutdown_timeout"),
    ] {
        let message = refused_start(
            Command::new(DEMO)
                .args(["--listen", "127.0.0.1:0"])
                .args([flag, value]),
        )
        .await;
        assert!(
            message.contains(key) && message.contains("at most"),
            "{flag} {value}: {message}"
        );
    }
    let dir = std::env::temp_dir().join(format!("mcp-proxy-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (setting, key) in [
        ("input_ttl = \"0s\"", "session.input_ttl"),
        (
            "max_held_per_principal = 0",
            "session.max_held_per_principal",
        ),
        (
            "data_session_lifetime = \"9000000h\"",
            "session.data_session_lifetime",
        ),
    ] {
        let file = dir.join("limits.toml");
        std::fs::write(
            &file,
            format!("listen = \"127.0.0.1:0\"\n[session]\n{setting}\n"),
        )
        .unwrap();
        let message = refused_start(Command::new(DEMO).arg("--config").arg(&file)).await;
        assert!(message.contains(key), "{setting}: {message}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn allowed_hosts_come_from_the_environment_as_the_image_takes_them() {
    let (_proxy, addr, _logs, _) = crate::harness::spawn_proxy_with_env(
        &["--listen", "127.0.0.1:0"],
        &[("MCP_PROXY_ALLOWED_HOSTS", "mcp.example,other.example:9")],
    )
    .await;
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "x", "version": "1" } } });
    let local = addr.to_string();
    for (host, allowed) in [
        ("mcp.example", true),
        ("other.example:9", true),
        (local.as_str(), false),
        ("evil.example", false),
    ] {
        let reply = Client::new(addr)
            .send_to(
                "/mcp",
                http::Method::POST,
                &[
                    ("host", host),
                    ("content-type", "application/json"),
                    ("accept", "application/json, text/event-stream"),
                ],
                Some(initialize.to_string().into()),
            )
            .await;
        let expected = match allowed {
            true => StatusCode::OK,
            false => StatusCode::FORBIDDEN,
        };
        assert_eq!(reply.status, expected, "Host: {host}");
    }
}

#[tokio::test]
async fn in_front_of_a_2026_07_28_http_server_the_defaults_serve_both_eras() {
    let (_server, server) = crate::harness::modern_demo_over_http().await;
    let url = format!("http://{server}/mcp");
    let (_proxy, addr, _logs, _) = spawn_proxy(&["--listen", "127.0.0.1:0", "--http", &url]).await;

    let mut legacy = Client::new(addr);
    legacy.initialize("2025-11-25").await;
    assert_eq!(
        legacy.call_tool("echo", json!({ "text": "old" })).await,
        "old"
    );

    let params = json!({ "name": "echo", "arguments": { "text": "new" } });
    let call = modern_request(2, "tools/call", params, json!({}));
    let reply = Client::new(addr).post_modern(&call, &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let answer = within("the modern answer", reply.response()).await;
    assert_eq!(answer["result"]["content"][0]["text"], "new", "{answer}");
}

/// A gateway's start line names every path it serves, and what each virtual server composes.
#[tokio::test]
async fn a_gateways_start_line_names_every_path_it_serves() {
    let dir = std::env::temp_dir().join(format!("mcp-proxy-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gateway.toml");
    std::fs::write(
        &file,
        format!(
            "[servers.notes.upstream]\nstdio = \"{DEMO} demo-server\"\n\
             [servers.tasks.upstream]\nstdio = \"{DEMO} demo-server\"\n\
             [virtual.work]\nservers = [\"notes\", \"tasks\"]\n"
        ),
    )
    .unwrap();
    let config = file.to_str().unwrap();
    let (_proxy, addr, _logs, lines) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--config", config]).await;
    let message = lines.last().unwrap()["fields"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = |path: &str| format!("http://{addr}{path}");
    for served in [
        url("/servers/notes/mcp"),
        url("/servers/tasks/mcp"),
        format!("{} (virtual: notes, tasks)", url("/servers/work/mcp")),
    ] {
        assert!(message.contains(&served), "{served} in: {message}");
    }
    assert!(!message.contains(&url("/mcp,")), "no /mcp: {message}");
    let fields = &lines.last().unwrap()["fields"];
    assert!(
        fields.get("upstream").is_none(),
        "no top-level upstream: {fields}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A stdio server whose child exits at start without answering: a warning with how it ended
/// and the end of its standard error; with `--upstream-require-start`, no start at all.
#[tokio::test]
async fn a_server_that_cannot_start_is_named_at_the_start_with_its_last_words() {
    // Its last words on two lines, with a terminal's escape: one line of plain text in the log.
    let failing =
        "sh -c 'printf \"\\033[2Jcannot open /data/db:\\npermission denied\" >&2; exit 3'";
    let (_proxy, _, _logs, lines) =
        spawn_proxy(&["--listen", "127.0.0.1:0", "--stdio", failing]).await;
    let warning = lines
        .iter()
        .find(|line| line["level"] == "WARN" && line["fields"]["status"].is_string())
        .expect("a warning at the start");
    assert_eq!(warning["fields"]["status"], "exit status: 3", "{warning}");
    let stderr = warning["fields"]["stderr"].as_str().unwrap();
    assert!(
        stderr.ends_with("cannot open /data/db: permission denied")
            && !stderr.contains(char::is_control)
            && stderr.contains("\\u{1b}[2J"),
        "the escape written out, as in its stderr lines: {warning}"
    );
    let message = refused_start(Command::new(DEMO).args([
        "--listen",
        "127.0.0.1:0",
        "--stdio",
        failing,
        "--upstream-require-start",
    ]))
    .await;
    assert!(
        message.contains("upstream: the server could not start")
            && message.contains("exit status: 3")
            && message.contains("permission denied"),
        "{message}"
    );
}

/// A store whose name does not resolve: the start stops with the resolver's words, once.
#[tokio::test]
async fn a_start_error_says_each_cause_once() {
    let message = refused_start(
        Command::new(DEMO)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--store", "redis://no-such-host.invalid:6379/0"])
            .env(
                "MCP_PROXY_CLUSTER_SECRET",
                "0123456789abcdef0123456789abcdef",
            ),
    )
    .await;
    let last = message.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("mcp-session-proxy: cannot reach the Redis store"),
        "{last}"
    );
    let cause = last.rsplit(": ").next().unwrap();
    assert_eq!(last.matches(cause).count(), 1, "{last}");
}

/// The binary's `--help` lists its flags under the table of their key, each naming its key.
#[tokio::test]
async fn the_binarys_help_groups_its_flags_by_table_and_names_their_keys() {
    let help = crate::harness::stdout_of("--help", Command::new(DEMO).arg("--help")).await;
    let help = String::from_utf8(help).unwrap();
    for said in [
        "[upstream.sandbox]:",
        "[cluster]:",
        "--sandbox-memory <SIZE>",
        "(upstream.sandbox.memory)",
        "(session.idle_ttl) [default: 10m]",
    ] {
        assert!(help.contains(said), "{said:?} in the help");
    }
}
