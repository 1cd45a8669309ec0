//! Sessions with one stream, on replicas sharing a real `redis-server`: a 2024-11-05 SSE session
//! and a protocol-level session over Streamable HTTP whose client reads its stream on the owner
//! while its messages go to another replica (as a round-robin balancer sends them). The owner
//! takes each message over the hop and the answers come on the client's stream, which stays
//! open: the hop reads the answer beside the client's reader, never in its place.

use crate::harness::cluster::{metric, Redis, Replica};

use super::owner_routing::{legacy_session, protocol_session};

#[tokio::test]
async fn a_2024_11_05_session_keeps_its_stream_while_its_messages_go_to_another_replica() {
    let redis = Redis::start().await;
    let (a, b) = tokio::join!(
        Replica::start(&redis, "a", &[]),
        Replica::start(&redis, "b", &[])
    );
    assert_eq!(legacy_session(a.addr, b.addr).await, "a");
    assert!(metric(&a, "mcp_proxy_sessions_forwarded_total").await >= 2);
}

#[tokio::test]
async fn a_protocol_level_session_keeps_its_channel_while_its_messages_go_to_another_replica() {
    let redis = Redis::start().await;
    let (a, b) = tokio::join!(
        Replica::start(&redis, "a", &[]),
        Replica::start(&redis, "b", &[])
    );
    assert_eq!(protocol_session(a.addr, b.addr).await, "a");
    assert!(metric(&a, "mcp_proxy_sessions_forwarded_total").await >= 2);
}
