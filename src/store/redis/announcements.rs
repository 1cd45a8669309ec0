//! The Sentinels' announcements of a new master: each Sentinel is heard on a connection of its
//! own (`SUBSCRIBE +switch-master`, whose messages read `<service> <old-ip> <old-port> <new-ip>
//! <new-port>`), so the store follows a failover as soon as one announces it, not when the old
//! master fails (in a planned failover it goes on answering as a master for seconds). A
//! Sentinel that cannot be heard is tried again, less often each time up to every 5 s; one
//! silent for a while is asked whether it is still there.

use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::StreamExt;
use redis::RedisError;
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::connect::Announced;

/// The Sentinels' channel of a change of master.
const CHANNEL: &str = "+switch-master";
/// The wait before hearing a Sentinel again after a failure, doubled at each failure up to
/// `LAST_RETRY`.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(5);
/// The longest a Sentinel may take to take a subscription or answer a `PING`.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// A Sentinel that says nothing for this long is sent a `PING`.
const QUIET_AT_MOST: Duration = Duration::from_secs(5);

/// Why a Sentinel is not heard any more.
#[derive(Debug, thiserror::Error)]
enum Unheard {
    #[error(transparent)]
    Redis(#[from] RedisError),
    #[error("no answer within {0:?}")]
    Silent(Duration),
    #[error("the connection closed")]
    Closed,
}

/// Hears each of `sentinels` until `stop`: the future doing so, and the latest master they
/// announced for `service` (each announcement sent, the same one again included: three
/// Sentinels announce each failover).
pub(super) fn hear(
    sentinels: &[redis::Client],
    service: &str,
    stop: CancellationToken,
) -> (impl Future<Output = ()>, watch::Receiver<Option<Announced>>) {
    let (announced, heard) = watch::channel(None);
    let sentinels = sentinels.to_vec();
    let service = service.to_owned();
    let hearing = async move {
        let each = sentinels
            .iter()
            .map(|sentinel| keep_hearing(sentinel, &service, &announced));
        tokio::select! {
            _ = join_all(each) => {}
            () = stop.cancelled() => {}
        }
    };
    (hearing, heard)
}

/// Hears `sentinel` again and again, waiting longer after each failure to (up to `LAST_RETRY`);
/// a failure is logged once until it is heard again.
async fn keep_hearing(
    sentinel: &redis::Client,
    service: &str,
    announced: &watch::Sender<Option<Announced>>,
) {
    let mut wait = FIRST_RETRY;
    let mut told = false;
    loop {
        let mut subscribed = false;
        let why = hear_one(sentinel, service, announced, &mut subscribed).await;
        if subscribed {
            wait = FIRST_RETRY;
            told = false;
        }
        if !std::mem::replace(&mut told, true) {
            let sentinel = sentinel.get_connection_info().addr().to_string();
            info!(%sentinel, error = %why,
                "cannot hear a Sentinel's announcements of a new master: trying again");
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(LAST_RETRY);
    }
}

/// Subscribes to `sentinel`'s announcements (`subscribed` once it did) and sends on each one
/// for `service`, until the Sentinel cannot be heard.
async fn hear_one(
    sentinel: &redis::Client,
    service: &str,
    announced: &watch::Sender<Option<Announced>>,
    subscribed: &mut bool,
) -> Unheard {
    let subscribing = async {
        let mut pubsub = sentinel.get_async_pubsub().await?;
        pubsub.subscribe(CHANNEL).await?;
        Ok::<_, Unheard>(pubsub)
    };
    let mut pubsub = match timeout(ANSWER_WITHIN, subscribing).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(why)) => return why,
        Err(_) => return Unheard::Silent(ANSWER_WITHIN),
    };
    *subscribed = true;
    loop {
        let next = timeout(QUIET_AT_MOST, pubsub.on_message().next()).await;
        match next {
            Ok(Some(message)) => {
                let payload: String = message.get_payload().unwrap_or_default();
                if let Some(master) = parse(&payload, service) {
                    announced.send_replace(Some(master));
                }
            }
            Ok(None) => return Unheard::Closed,
            Err(_) => match timeout(ANSWER_WITHIN, pubsub.ping::<redis::Value>()).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return error.into(),
                Err(_) => return Unheard::Silent(ANSWER_WITHIN),
            },
        }
    }
}

/// The new master a `+switch-master` message announces, if it is `service`'s.
fn parse(payload: &str, service: &str) -> Option<Announced> {
    let words: Vec<&str> = payload.split_whitespace().collect();
    match words.as_slice() {
        [named, _, _, host, port] if *named == service && is_host(host) => Some(Announced {
            host: (*host).to_owned(),
            port: port.parse().ok()?,
        }),
        _ => None,
    }
}

/// Whether `host` reads as an address or a name, and nothing a URL would take for more (a
/// user, a path, a port, a query).
fn is_host(host: &str) -> bool {
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_names_the_new_master_of_its_service_only() {
        assert_eq!(
            parse("mcp-store 127.0.0.1 6379 10.0.0.7 6380", "mcp-store"),
            Some(Announced {
                host: "10.0.0.7".into(),
                port: 6380
            })
        );
        assert_eq!(
            parse("mcp-store ::1 6379 fd00::7 6380", "mcp-store"),
            Some(Announced {
                host: "fd00::7".into(),
                port: 6380
            })
        );
        for other in [
            "other-store 127.0.0.1 6379 10.0.0.7 6380",
            "mcp-store 127.0.0.1 6379 10.0.0.7",
            "mcp-store 127.0.0.1 6379 10.0.0.7 port",
            "mcp-store 127.0.0.1 6379 10.0.0.7 6380 more",
            "mcp-store 127.0.0.1 6379 127.0.0.2/7? 6380",
            "mcp-store 127.0.0.1 6379 user@10.0.0.7 6380",
            "mcp-store 127.0.0.1 6379 10.0.0.7#x 6380",
            "",
        ] {
            assert_eq!(parse(other, "mcp-store"), None, "{other}");
        }
    }
}
