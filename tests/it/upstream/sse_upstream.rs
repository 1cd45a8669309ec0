//! The legacy HTTP+SSE upstream over real sockets: the proxy as a 2024-11-05 client of the demo
//! (behind a legacy front) and of npm server-everything in its `sse` mode; a server announcing
//! an endpoint on another origin gets nothing sent there.

use crate::harness::{within, Proxy};
use serde_json::json;

async fn in_front_of_sse(url: String) -> Proxy {
    Proxy::start_with(|c| {
        c.upstream.stdio = None;
        c.upstream.sse = Some(url);
    })
    .await
}

#[tokio::test]
async fn sessions_calls_notifications_and_resume_through_an_sse_upstream() {
    let upstream = Proxy::start().await; // the demo behind a legacy front
    let front = in_front_of_sse(format!("http://{}/sse", upstream.addr())).await;
    let mut a = front.initialized_client("2025-11-25").await;
    let mut b = front.initialized_client("2025-11-25").await;
    assert_eq!(a.call_tool("counter", json!({})).await, "1");
    assert_eq!(a.call_tool("counter", json!({})).await, "2");
    assert_eq!(
        b.call_tool("counter", json!({})).await,
        "1",
        "a stream (a session) each"
    );

    a.request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    let mut events = a.get(None).await;
    a.call_tool("counter", json!({})).await;
    assert_eq!(
        events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter"
    );

    let mut call = a
        .post(&json!({ "jsonrpc": "2.0", "id": 50, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 3 }, "_meta": { "progressToken": 9 } } }))
        .await;
    let first = within("first progress", call.next_message()).await.unwrap();
    drop(call);
    let mut resumed = a.get(first.id.as_deref()).await;
    let rest = within("the rest", resumed.remaining_messages()).await;
    assert_eq!(rest.len(), 3, "progress 2, 3 and the response");
    assert_eq!(rest[2].message["id"], 50);
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn a_cut_upstream_stream_is_reopened_re_initialized_and_re_subscribed() {
    let upstream = Proxy::start().await;
    let addr = upstream.addr();
    let front = in_front_of_sse(format!("http://{addr}/sse")).await;
    let mut client = front.initialized_client("2025-06-18").await;
    client
        .request("resources/subscribe", json!({ "uri": "demo://counter" }))
        .await;
    assert_eq!(client.call_tool("counter", json!({})).await, "1");

    upstream.stop().await; // the stream, and the upstream session with it, are gone
    let upstream = Proxy::start_with(|c| c.listen = addr).await;

    let mut events = client.get(None).await;
    assert_eq!(
        client.call_tool("counter", json!({})).await,
        "1",
        "a new upstream session (a new server process), transparently initialized"
    );
    assert_eq!(
        events
            .next_with_method("notifications/resources/updated")
            .await["params"]["uri"],
        "demo://counter",
        "re-subscribed"
    );
    front.stop().await;
    upstream.stop().await;
}

#[tokio::test]
async fn typescript_sdk_client_through_the_proxy_to_server_everything_over_sse() {
    let (mut server, port) = crate::harness::server_everything("sse").await;
    let front = in_front_of_sse(format!("http://127.0.0.1:{port}/sse")).await;
    let report =
        crate::harness::sdk_client(&format!("http://{}/mcp", front.addr()), &["everything"]).await;
    assert_eq!(report["echoed"], "Echo: hi");
    front.stop().await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn a_request_in_flight_when_the_stream_is_cut_gets_an_error_and_the_session_goes_on() {
    let upstream = Proxy::start().await;
    let addr = upstream.addr();
    let front = in_front_of_sse(format!("http://{addr}/sse")).await;
    let mut client = front.initialized_client("2025-06-18").await;
    let mut call = client
        .post(&json!({ "jsonrpc": "2.0", "id": 70, "method": "tools/call",
            "params": { "name": "progress", "arguments": { "steps": 50, "delay_ms": 100 },
                        "_meta": { "progressToken": 1 } } }))
        .await;
    let first = within("the first progress", call.next_message())
        .await
        .unwrap();
    assert_eq!(
        first.message["method"], "notifications/progress",
        "in flight"
    );

    upstream.stop().await; // the stream, and the answer with it, are gone
    let upstream = Proxy::start_with(|c| c.listen = addr).await;
    let answer = loop {
        let message = within("the answer", call.next_message())
            .await
            .expect("an answer before the stream ends");
        if message.message["id"] == 70 {
            break message.message;
        }
    };
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("answer was lost"),
        "{answer}"
    );
    assert_eq!(
        client.call_tool("echo", json!({ "text": "after" })).await,
        "after",
        "the session goes on, on a new upstream session"
    );
    front.stop().await;
    upstream.stop().await;
}

/// A legacy SSE server on 127.0.0.1 whose stream announces `endpoint` (an absolute URL), and
/// holds the stream open; the request heads it got are kept in `heads`.
async fn sse_server_announcing(endpoint: String, heads: Heads) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (endpoint, heads) = (endpoint.clone(), heads.clone());
            tokio::spawn(async move {
                let head = read_head(&mut socket).await;
                heads.lock().unwrap().push(head);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                     cache-control: no-cache\r\n\r\nevent: endpoint\ndata: {endpoint}\n\n"
                );
                if socket.write_all(answer.as_bytes()).await.is_ok() {
                    // The stream stays open until the proxy lets it go.
                    let mut rest = [0u8; 1024];
                    while let Ok(1..) = socket.read(&mut rest).await {}
                }
            });
        }
    });
    format!("http://{addr}/sse")
}

type Heads = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A request's head (up to its blank line), as text.
async fn read_head(socket: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
        match socket.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A listener that keeps whatever reaches it (every connection's bytes, as text).
async fn recording_listener() -> (u16, Heads) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let reached: Heads = Heads::default();
    let record = reached.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let at = {
                    let mut reached = record.lock().unwrap();
                    reached.push("(connected)".into());
                    reached.len() - 1
                };
                let mut buffer = [0u8; 4096];
                while let Ok(n @ 1..) = socket.read(&mut buffer).await {
                    record.lock().unwrap()[at].push_str(&String::from_utf8_lossy(&buffer[..n]));
                }
            });
        }
    });
    (port, reached)
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_nothing_is_sent_there() {
    let (other_port, reached) = recording_listener().await;
    let heads = Heads::default();
    let url = sse_server_announcing(
        format!("http://127.0.0.1:{other_port}/steal"),
        heads.clone(),
    )
    .await;
    let stream_origin = url.trim_end_matches("/sse").to_owned();
    let secret = std::env::temp_dir().join(format!("mcp-proxy-sse-origin-{}", std::process::id()));
    std::fs::write(&secret, "operator-credential-1\n").unwrap();
    let secret_file = secret.clone();
    let front = Proxy::start_with(move |c| {
        c.upstream.stdio = None;
        c.upstream.sse = Some(url);
        c.upstream.auth = mcp_session_proxy::config::UpstreamAuth::Static;
        c.upstream.auth_secret = Some(mcp_session_proxy::config::SecretSource::File(secret_file));
        c.upstream.request_timeout = std::time::Duration::from_secs(5);
    })
    .await;

    let client = front.client();
    let reply = within(
        "the answer to initialize",
        client.post(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": { "name": "harness", "version": "1" } } })),
    )
    .await;
    let status = reply.status;
    let answer = String::from_utf8_lossy(&within("its body", reply.bytes()).await).into_owned();
    std::fs::remove_file(&secret).unwrap();

    assert!(
        heads
            .lock()
            .unwrap()
            .iter()
            .any(|head| head.contains("operator-credential-1")),
        "the stream itself carries the credential: {:?}",
        heads.lock().unwrap()
    );
    assert_eq!(
        *reached.lock().unwrap(),
        Vec::<String>::new(),
        "nothing reached the other origin"
    );
    let other_origin = format!("http://127.0.0.1:{other_port}");
    assert!(
        answer.contains("another origin")
            && answer.contains(&other_origin)
            && answer.contains(&stream_origin),
        "{status}: {answer}"
    );
    assert!(!answer.contains("operator-credential-1"), "{answer}");
    assert!(!answer.contains("/steal"), "origins only: {answer}");
    assert_eq!(
        front.metric("mcp_proxy_upstream_foreign_endpoints_total"),
        1
    );
    front.stop().await;
}
