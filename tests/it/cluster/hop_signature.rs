//! The replicas' hop is signed, never authenticated by the cluster secret itself: two real
//! replicas on a real Redis, the owner reached through a recording relay. What crosses the wire
//! holds a signature and not the secret; a hop that carries only the secret, an old signature,
//! a body it was not signed for, or a captured hop sent again within its window (a replay) is
//! refused with 403, and its tool does not run twice; an answer altered on the way, another
//! request's answer or one that never ends is refused by the asking replica; a short secret
//! stops the proxy at start with how to make a good one.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::harness::cluster::{recording_relay, Redis, Replica, SECRET};
use crate::harness::{until, within, Client, DEMO};
use bytes::Bytes;
use http::{Method, StatusCode};
use mcp_session_proxy::base::ids::Principal;
use mcp_session_proxy::base::keys::Keys;
use mcp_session_proxy::hop::{self, Signed, PRINCIPAL_HEADER, SIGNATURE_HEADER};
use serde_json::json;
use tokio::net::TcpListener;

#[tokio::test]
async fn hops_are_signed_never_carry_the_secret_and_unsigned_or_replayed_ones_are_refused() {
    let redis = Redis::start().await;
    let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let advertised = format!("http://{}", relay.local_addr().unwrap());
    let target = Arc::new(Mutex::new(None));
    let recorded = recording_relay(relay, target.clone());
    let a = Replica::start(&redis, "a", &["--advertise", &advertised]).await;
    *target.lock().unwrap() = Some(a.addr);
    let b = Replica::start(&redis, "b", &[]).await;

    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    let session = on_a.session.clone().unwrap();
    let mut on_b = Client::new(b.addr);
    on_b.session = Some(session.clone());
    assert_eq!(
        on_b.call_tool("echo", json!({"text": "via b"})).await,
        "via b"
    );

    let wire = String::from_utf8_lossy(&recorded.lock().unwrap()).into_owned();
    assert!(
        wire.contains(&format!("/internal/default/sessions/{session}")),
        "the hop went through the relay: {wire}"
    );
    assert!(wire.contains(SIGNATURE_HEADER), "{wire}");
    assert!(
        wire.contains(PRINCIPAL_HEADER),
        "the hop names its principal: {wire}"
    );
    assert!(
        !wire.contains(SECRET),
        "the secret crossed the wire: {wire}"
    );

    // Hops made by hand, straight to the owner.
    let path = format!("/internal/default/sessions/{session}");
    let body =
        Bytes::from(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    let key = Keys::derived(SECRET).hop;
    let signed = |at: SystemTime, body: &[u8]| {
        Signed {
            method: "POST",
            path: &path,
            body,
            node: "a",
        }
        .sign(&key, at)
    };
    let hop = |headers: Vec<(&'static str, String)>, body: Bytes| {
        let owner = Client::new(a.addr);
        let path = path.clone();
        async move {
            let mut all = vec![("content-type", "application/json".to_owned())];
            all.extend(headers);
            let headers: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let reply = owner
                .send_to(&path, Method::POST, &headers, Some(body))
                .await;
            let status = reply.status;
            (
                status,
                String::from_utf8_lossy(&reply.bytes().await).into_owned(),
            )
        }
    };
    let for_a = ("x-mcp-proxy-for-node", "a".to_owned());

    let (status, text) = hop(
        vec![for_a.clone(), ("x-mcp-proxy-secret", SECRET.to_owned())],
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the secret alone: {text}");

    let replayed = signed(SystemTime::now() - Duration::from_secs(120), &body);
    let (status, text) = hop(
        vec![for_a.clone(), (SIGNATURE_HEADER, replayed)],
        body.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("clock"), "{text}");

    let fresh = signed(SystemTime::now(), &body);
    let tampered = Bytes::from(
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "forged"}}})
        .to_string(),
    );
    let (status, text) = hop(vec![for_a.clone(), (SIGNATURE_HEADER, fresh)], tampered).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "another body: {text}");

    // The principal a hop names is bound to its signature, and must be the session's. Each hop
    // is signed anew: a signature is taken once.
    let anonymous = Principal::anonymous();
    let cases = [
        (None, StatusCode::FORBIDDEN), // its tag forged
        (Some("sub:0123456789abcdef"), StatusCode::NOT_FOUND),
        (Some(anonymous.as_str()), StatusCode::OK),
    ];
    for (principal, expected) in cases {
        let signature = signed(SystemTime::now(), &body);
        let principal = match principal {
            Some(principal) => hop::principal_header(&key, &signature, principal),
            None => format!("{};{}", anonymous.as_str(), "A".repeat(24)),
        };
        let headers = vec![
            for_a.clone(),
            (PRINCIPAL_HEADER, principal),
            (SIGNATURE_HEADER, signature),
        ];
        let (status, text) = hop(headers, body.clone()).await;
        assert_eq!(status, expected, "{text}");
    }
    drop((a, b));
}

#[tokio::test]
async fn a_secret_shorter_than_32_bytes_is_refused_with_how_to_make_one() {
    let output = tokio::process::Command::new(DEMO)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "redis://127.0.0.1:1/0",
        ])
        .env("MCP_PROXY_CLUSTER_SECRET", "short-secret")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cluster.secret") && stderr.contains("openssl rand -hex 32"),
        "{stderr}"
    );
}

#[test]
fn an_embedder_gets_no_redis_store_without_a_secret() {
    let config = mcp_session_proxy::config::Config {
        store: "redis://127.0.0.1:6379/0".into(),
        ..Default::default()
    };
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("cluster.secret"), "{error}");
}

/// What a [`tampering_relay`] does with the answers it carries back.
#[derive(Clone, Debug, PartialEq)]
enum Tamper {
    /// Carries them as they are (and keeps the last answer to a `tools/call`).
    Pass,
    /// Replaces `from` with `to` in answer bodies.
    Replace(&'static str, &'static str),
    /// Answers a `tools/call` with the answer the owner gave an earlier one.
    Stale,
    /// Answers a `tools/call` with a body that never ends (a chunk at a time, counted, up to
    /// 256 MiB), without asking the owner.
    Endless,
}

/// A relay between replicas that sees each hop whole: it keeps every request as it crossed the
/// wire and carries the owner's answers back as `mode` says.
struct TamperingRelay {
    mode: Arc<Mutex<Tamper>>,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Bytes of endless answers sent.
    endless_sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl TamperingRelay {
    fn set(&self, mode: Tamper) {
        *self.mode.lock().unwrap() = mode;
    }

    /// The first request kept whose bytes contain `text`.
    fn request_with(&self, text: &str) -> Vec<u8> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .find(|request| String::from_utf8_lossy(request).contains(text))
            .cloned()
            .unwrap_or_else(|| panic!("a hop with {text}"))
    }
}

/// Reads one HTTP/1.1 message (its head, and a body of its `Content-Length`), whole.
async fn read_message(stream: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8(head).ok()?;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some((head, body))
}

/// `head` with its `Content-Length` set to `length`.
fn with_length(head: &str, length: usize) -> String {
    let lines: Vec<String> = head
        .trim_end()
        .lines()
        .map(
            |line| match line.to_ascii_lowercase().starts_with("content-length:") {
                true => format!("content-length: {length}"),
                false => line.to_owned(),
            },
        )
        .collect();
    format!("{}\r\n\r\n", lines.join("\r\n"))
}

fn tampering_relay(listener: TcpListener, owner: std::net::SocketAddr) -> TamperingRelay {
    use tokio::io::AsyncWriteExt;
    let relay = TamperingRelay {
        mode: Arc::new(Mutex::new(Tamper::Pass)),
        requests: Arc::default(),
        endless_sent: Arc::default(),
    };
    let (mode, requests, sent) = (
        relay.mode.clone(),
        relay.requests.clone(),
        relay.endless_sent.clone(),
    );
    let earlier_call_answer: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let (mode, requests, sent) = (mode.clone(), requests.clone(), sent.clone());
            let earlier = earlier_call_answer.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(owner).await else {
                    return;
                };
                while let Some((head, body)) = read_message(&mut inbound).await {
                    let mut request = head.clone().into_bytes();
                    request.extend_from_slice(&body);
                    requests.lock().unwrap().push(request.clone());
                    let call = String::from_utf8_lossy(&body).contains("tools/call");
                    let mode = mode.lock().unwrap().clone();
                    if call && mode == Tamper::Endless {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                    transfer-encoding: chunked\r\nx-mcp-proxy-node: a\r\n\r\n";
                        let chunk = format!("10000\r\n{}\r\n", "x".repeat(1 << 16));
                        let mut written = inbound.write_all(head.as_bytes()).await;
                        while written.is_ok() && sent.load(Ordering::SeqCst) < 256 << 20 {
                            written = inbound.write_all(chunk.as_bytes()).await;
                            sent.fetch_add(1 << 16, Ordering::SeqCst);
                        }
                        return;
                    }
                    if outbound.write_all(&request).await.is_err() {
                        return;
                    }
                    let Some((head, body)) = read_message(&mut outbound).await else {
                        return;
                    };
                    let mut answer = head.clone().into_bytes();
                    answer.extend_from_slice(&body);
                    let answer = match mode {
                        Tamper::Replace(from, to) => {
                            let body = String::from_utf8_lossy(&body).replace(from, to);
                            let mut answer = with_length(&head, body.len()).into_bytes();
                            answer.extend_from_slice(body.as_bytes());
                            answer
                        }
                        Tamper::Stale if call => {
                            earlier.lock().unwrap().clone().expect("an earlier answer")
                        }
                        _ => {
                            if call {
                                *earlier.lock().unwrap() = Some(answer.clone());
                            }
                            answer
                        }
                    };
                    if inbound.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    relay
}

/// Replica `a` reached by `b` only through a tampering relay, and a session on `a`.
async fn owner_behind_a_relay(
    redis: &Redis,
    b_args: &[&str],
) -> (Replica, Replica, TamperingRelay, Client) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let advertised = format!("http://{}", listener.local_addr().unwrap());
    let a = Replica::start(redis, "a", &["--advertise", &advertised]).await;
    let relay = tampering_relay(listener, a.addr);
    let b = Replica::start(redis, "b", b_args).await;
    let mut on_a = Client::new(a.addr);
    on_a.initialize("2025-11-25").await;
    (a, b, relay, on_a)
}

/// The status line and the body of the answer to `request`, sent as it is to `to`.
async fn send_raw(to: std::net::SocketAddr, request: &[u8]) -> (String, String) {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(to).await.unwrap();
    stream.write_all(request).await.unwrap();
    let (head, body) = within("the answer", read_message(&mut stream))
        .await
        .expect("an answer");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The error a tool call through `client` was answered with (panics on a result).
async fn call_error(client: &mut Client, tool: &str, arguments: serde_json::Value) -> String {
    let answer = within(
        "the call's answer",
        client.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        ),
    )
    .await;
    assert!(answer["result"].is_null(), "not refused: {answer}");
    answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_captured_hop_replayed_within_its_window_is_refused_and_its_tool_runs_once() {
    let redis = Redis::start().await;
    let (a, b, relay, on_a) = owner_behind_a_relay(&redis, &[]).await;
    let mut on_b = crate::harness::cluster::through(&on_a, &b);
    assert_eq!(on_b.call_tool("counter", json!({})).await, "1", "via b");

    let captured = relay.request_with("\"counter\"");
    let (status, text) = send_raw(a.addr, &captured).await;
    assert!(
        status.contains(" 403 "),
        "replayed to its owner: {status} {text}"
    );
    assert!(text.contains("replay"), "{text}");
    let (status, text) = send_raw(b.addr, &captured).await;
    assert!(
        status.contains(" 421 "),
        "replayed to another replica: {status} {text}"
    );

    let mut on_a = on_a;
    assert_eq!(
        on_a.call_tool("counter", json!({})).await,
        "2",
        "the captured call ran once"
    );
    assert_eq!(
        crate::harness::cluster::metric(&a, "mcp_proxy_hop_replays_refused_total").await,
        1
    );
    drop((a, b));
}

#[tokio::test]
async fn an_altered_or_misbound_hop_answer_is_refused_by_the_asker() {
    let redis = Redis::start().await;
    let (a, b, relay, on_a) = owner_behind_a_relay(&redis, &[]).await;
    let mut on_b = crate::harness::cluster::through(&on_a, &b);
    assert_eq!(
        on_b.call_tool("echo", json!({ "text": "first" })).await,
        "first"
    );

    relay.set(Tamper::Replace("AAAA", "BBBB"));
    let error = call_error(&mut on_b, "echo", json!({ "text": "AAAA" })).await;
    assert!(
        error.contains("does not match this request"),
        "altered: {error}"
    );

    relay.set(Tamper::Stale);
    let error = call_error(&mut on_b, "echo", json!({ "text": "second" })).await;
    assert!(
        error.contains("does not match this request"),
        "another request's answer: {error}"
    );

    relay.set(Tamper::Pass);
    assert_eq!(
        on_b.call_tool("echo", json!({ "text": "third" })).await,
        "third",
        "the session goes on"
    );
    assert_eq!(
        crate::harness::cluster::metric(&b, "mcp_proxy_hop_answers_refused_total").await,
        2
    );
    drop((a, b));
}

#[tokio::test]
async fn an_endless_hop_answer_is_refused_at_its_bound() {
    let redis = Redis::start().await;
    let small = ["--max-body-bytes", "65536", "--max-line-bytes", "65536"];
    let (a, b, relay, on_a) = owner_behind_a_relay(&redis, &small).await;
    let mut on_b = crate::harness::cluster::through(&on_a, &b);
    assert_eq!(on_b.call_tool("echo", json!({ "text": "x" })).await, "x");

    relay.set(Tamper::Endless);
    let error = call_error(&mut on_b, "echo", json!({ "text": "y" })).await;
    assert!(error.contains("exceeded"), "{error}");
    let sent = relay.endless_sent.load(Ordering::SeqCst);
    assert!(sent < 64 << 20, "{sent} bytes were taken in");
    assert_eq!(
        crate::harness::cluster::metric(&b, "mcp_proxy_hop_answers_refused_total").await,
        1
    );
    drop((a, b));
}

#[tokio::test]
async fn a_captured_hop_is_refused_by_the_owner_restarted_under_the_same_name() {
    let redis = Redis::start().await;
    let (mut a, b, relay, on_a) = owner_behind_a_relay(&redis, &[]).await;
    let mut on_b = crate::harness::cluster::through(&on_a, &b);
    assert_eq!(on_b.call_tool("counter", json!({})).await, "1", "via b");
    let captured = relay.request_with("\"counter\"");
    let signed_at = String::from_utf8_lossy(&captured)
        .lines()
        .find_map(|line| line.strip_prefix("x-mcp-proxy-signature: t="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|time| time.parse::<u64>().ok())
        .expect("the hop's time");

    // The new process forgot what the old one took: it takes no hop signed before it started.
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    until("a second after the hop", true, || async {
        unix_now() > signed_at
    })
    .await;
    a.kill().await;
    a.restart(&redis).await;
    let (status, text) = send_raw(a.addr, &captured).await;
    assert!(status.contains(" 503 "), "{status} {text}");
    assert!(text.contains("before this replica started"), "{text}");
    assert_eq!(
        crate::harness::cluster::metric(&a, "mcp_proxy_hop_too_old_refused_total").await,
        1
    );
    drop((a, b));
}
