//! The harness's own bounds: every helper that waits on the proxy or a peer fails the test when
//! the peer never answers, instead of hanging it; a tighter bound outside still sees a silent
//! stream as silent; and the bounds are real time, so they hold on tokio's paused clock too.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::harness::cluster::Redis;
use crate::harness::ws::Ws;
use crate::harness::{with_bound, within, Client, WAIT};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// The helpers' bound in these tests, instead of [`WAIT`].
const BOUND: Duration = Duration::from_millis(300);

/// Runs `helper` with the helpers' bound at [`BOUND`]: it must fail the test, saying what it
/// timed out waiting for, after [`BOUND`] and long before [`WAIT`].
async fn gives_up<T: Send + 'static>(what: &str, helper: impl Future<Output = T> + Send + 'static) {
    let started = Instant::now();
    let outcome = within(what, tokio::spawn(with_bound(BOUND, helper))).await;
    let waited = started.elapsed();
    let Err(failure) = outcome else {
        panic!("{what}: finished, though its peer never answered");
    };
    let payload = failure.into_panic();
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        message.starts_with("timed out waiting for"),
        "{what}: failed otherwise: {message}"
    );
    assert!(waited >= BOUND, "{what}: gave up after {waited:?}");
    assert!(
        waited < WAIT / 4,
        "{what}: gave up after {waited:?}, not at its bound"
    );
}

/// A listener that accepts every connection, holds it open, and never reads or writes a byte.
async fn silent_listener() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}

/// A listener that reads each request's head, answers `head` (a response head, say, of a body
/// that never comes), and then holds the connection open in silence.
async fn answers_then_silent(head: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                read_request_head(&mut socket).await;
                socket.write_all(head).await.unwrap();
                // Held open, silent, until the client leaves.
                let mut rest = [0u8; 1024];
                while let Ok(1..) = socket.read(&mut rest).await {}
            });
        }
    });
    addr
}

async fn read_request_head(socket: &mut TcpStream) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buffer).await.unwrap();
        assert!(n > 0, "a request head");
        head.extend_from_slice(&buffer[..n]);
    }
}

/// A listener whose accept queue is full: a new connection's SYN goes unanswered, so connecting
/// waits. The returned listener (never accepting) and the connections that fill it must be kept.
async fn full_listener() -> (SocketAddr, Vec<TcpStream>, tokio::net::TcpListener) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    // Fill the queue: connect until a connection stays unanswered.
    while let Ok(Ok(stream)) =
        tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
    {
        queued.push(stream);
        assert!(queued.len() < 64, "the accept queue never filled");
    }
    (addr, queued, listener)
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
const JSON_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";

#[tokio::test]
async fn a_request_to_a_peer_that_never_answers_fails_within_the_bound() {
    let silent = silent_listener().await;
    let client = Client::new(silent);
    gives_up("send_to", {
        let client = client.clone();
        async move { client.send_to("/mcp", Method::GET, &[], None).await }
    })
    .await;
    gives_up("post", {
        let client = client.clone();
        async move {
            client
                .post(&json!({ "jsonrpc": "2.0", "method": "ping" }))
                .await
        }
    })
    .await;
    gives_up("get", {
        let client = client.clone();
        async move { client.get(None).await }
    })
    .await;
    gives_up("delete", {
        let client = client.clone();
        async move { client.delete().await }
    })
    .await;
    gives_up("initialize", {
        let mut client = client.clone();
        async move { client.initialize("2025-11-25").await }
    })
    .await;
    gives_up("request", {
        let mut client = client.clone();
        async move { client.request("tools/list", json!({})).await }
    })
    .await;
    gives_up("call_tool", {
        let mut client = client.clone();
        async move { client.call_tool("echo", json!({ "text": "hi" })).await }
    })
    .await;
    gives_up("open_legacy_sse", {
        let client = client.clone();
        async move { client.open_legacy_sse("/sse").await }
    })
    .await;
}

#[tokio::test]
async fn connecting_to_a_listener_that_takes_no_more_connections_fails_within_the_bound() {
    let (full, _queued, _listener) = full_listener().await;
    gives_up("send_to (connecting)", async move {
        Client::new(full)
            .send_to("/mcp", Method::GET, &[], None)
            .await
    })
    .await;
}

#[tokio::test]
async fn a_body_that_never_comes_fails_within_the_bound() {
    let sse = answers_then_silent(SSE_HEAD).await;
    let json = answers_then_silent(JSON_HEAD).await;
    let opened = |addr: SocketAddr| async move {
        let reply = Client::new(addr)
            .send_to("/mcp", Method::GET, &[], None)
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        reply
    };
    gives_up("bytes", async move { opened(json).await.bytes().await }).await;
    gives_up("json", async move { opened(json).await.json().await }).await;
    gives_up("response (JSON)", async move {
        opened(json).await.response().await
    })
    .await;
    gives_up("response (SSE)", async move {
        opened(sse).await.response().await
    })
    .await;
    gives_up(
        "next_chunk",
        async move { opened(sse).await.next_chunk().await },
    )
    .await;
    gives_up(
        "next_event",
        async move { opened(sse).await.next_event().await },
    )
    .await;
    gives_up("next_message", async move {
        opened(sse).await.next_message().await
    })
    .await;
    gives_up("next_with_method", async move {
        opened(sse).await.next_with_method("ping").await
    })
    .await;
    gives_up("remaining_messages", async move {
        opened(sse).await.remaining_messages().await
    })
    .await;
    gives_up("keep_alives", async move {
        crate::harness::keep_alives(&mut opened(sse).await, 1).await
    })
    .await;
}

/// A response that never comes, while its stream keeps sending other messages, still fails
/// within the bound.
#[tokio::test]
async fn a_response_drowned_in_other_messages_fails_within_the_bound() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                read_request_head(&mut socket).await;
                socket.write_all(SSE_HEAD).await.unwrap();
                let event = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n";
                let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                loop {
                    tick.tick().await;
                    if socket.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    gives_up("response (other messages only)", async move {
        let reply = Client::new(addr)
            .send_to("/mcp", Method::GET, &[], None)
            .await;
        reply.response().await
    })
    .await;
}

/// A test that wants to see a stream stay silent bounds the read more tightly: its bound ends
/// first, and the stream is still there to be read afterwards.
#[tokio::test]
async fn a_tighter_bound_outside_still_sees_a_silent_stream_as_silent() {
    let sse = answers_then_silent(SSE_HEAD).await;
    let mut reply = Client::new(sse)
        .send_to("/mcp", Method::GET, &[], None)
        .await;
    let quiet = tokio::time::timeout(Duration::from_millis(100), reply.next_message()).await;
    assert!(quiet.is_err(), "nothing came, and the helper did not fail");
    let quiet = tokio::time::timeout(Duration::from_millis(100), reply.next_chunk()).await;
    assert!(quiet.is_err(), "still nothing, and still no failure");
}

/// A WebSocket peer that completes the handshake and then neither sends nor reads.
async fn silent_websocket() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(tokio_tungstenite::accept_async(socket).await.unwrap());
        }
    });
    addr
}

async fn ws(addr: SocketAddr) -> Ws {
    Ws::connect_with(addr, "/mcp", &[])
        .await
        .expect("the handshake")
}

#[tokio::test]
async fn a_websocket_peer_that_never_answers_fails_within_the_bound() {
    let silent = silent_listener().await;
    gives_up("Ws::connect_with (no handshake)", async move {
        Ws::connect_with(silent, "/mcp", &[]).await.is_ok()
    })
    .await;
    let peer = silent_websocket().await;
    gives_up("Ws::recv", async move { ws(peer).await.recv().await }).await;
    gives_up("Ws::next_frame", async move {
        ws(peer).await.next_frame().await
    })
    .await;
    gives_up("Ws::request", async move {
        ws(peer).await.request("tools/list", json!({})).await
    })
    .await;
    gives_up("Ws::response_to", async move {
        ws(peer).await.response_to(json!(1)).await
    })
    .await;
    gives_up("Ws::initialize", async move {
        ws(peer).await.initialize().await
    })
    .await;
    gives_up("Ws::until_closed", async move {
        ws(peer).await.until_closed().await.0
    })
    .await;
    // A peer that never reads: the frame fills the socket's buffers on both sides, then waits.
    gives_up("Ws::send_frame", async move {
        let big = "x".repeat(64 << 20);
        ws(peer)
            .await
            .send_frame(tokio_tungstenite::tungstenite::Message::text(big))
            .await
    })
    .await;
}

#[tokio::test]
async fn peers_and_children_that_never_answer_fail_within_the_bound() {
    let silent = silent_listener().await;
    gives_up("Redis::connection", async move {
        drop(Redis::at(silent.port()).connection().await)
    })
    .await;
    gives_up("cluster::metric", async move {
        let replica_like = Client::new(silent);
        replica_like
            .send_to("/metrics", Method::GET, &[], None)
            .await
            .bytes()
            .await
    })
    .await;
    gives_up("spawn_announcing", async move {
        let mut sleeper = tokio::process::Command::new("sleep");
        sleeper.arg("3600");
        drop(crate::harness::spawn_announcing("a silent child", &mut sleeper).await)
    })
    .await;
    gives_up("stdout_of", async move {
        let mut sleeper = tokio::process::Command::new("sleep");
        sleeper.arg("3600");
        crate::harness::stdout_of("a silent child", &mut sleeper).await
    })
    .await;
    gives_up("spawn_proxy_command (no listening line)", async move {
        let mut silent_proxy = tokio::process::Command::new("sh");
        silent_proxy.args(["-c", "exec sleep 3600"]);
        drop(crate::harness::spawn_proxy_command(silent_proxy, &[], &[]).await)
    })
    .await;
    gives_up("eventually", crate::harness::eventually("never", || false)).await;
    gives_up(
        "until",
        crate::harness::until("never", true, || async { false }),
    )
    .await;
}

/// A peer on a thread of its own that answers one request late, in real time: the head after
/// `delay`, the body after another `delay`.
fn late_peer(delay: Duration, body: &'static str) -> SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buffer).unwrap();
            assert!(n > 0, "a request head");
            head.extend_from_slice(&buffer[..n]);
        }
        // Slow on purpose: the peer under test answers late, in real time.
        std::thread::sleep(delay);
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        socket.write_all(answer.as_bytes()).unwrap();
        std::thread::sleep(delay);
        socket.write_all(body.as_bytes()).unwrap();
    });
    addr
}

/// On tokio's paused clock, time leaps to the next timer whenever the runtime waits on a
/// socket: a bound in tokio's time would run out at once while a real peer is still answering.
/// The helpers' bounds are real time, so a late answer is still awaited.
#[tokio::test(start_paused = true)]
async fn the_bounds_are_real_time_so_they_hold_on_a_paused_clock() {
    let peer = late_peer(Duration::from_millis(100), r#"{"late":true}"#);
    let reply = Client::new(peer)
        .send(Method::POST, &[], Some(Bytes::from_static(b"{}")))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json().await, json!({ "late": true }));
}

/// The same on the paused clock with a peer that never answers: the helper still gives up,
/// after its bound in real time.
#[tokio::test(start_paused = true)]
async fn on_a_paused_clock_a_peer_that_never_answers_still_fails_within_the_bound() {
    let silent = silent_listener().await;
    gives_up("send_to on a paused clock", async move {
        Client::new(silent)
            .send_to("/mcp", Method::GET, &[], None)
            .await
    })
    .await;
}
