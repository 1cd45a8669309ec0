//! A server's answer read whole, bounded in bytes (`upstream.max_line_bytes`, the most one
//! message may take) and in time (`upstream.request_timeout`): a server that sends too much, or
//! never stops, fails the request it answers and nothing else.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;

/// Why an answer could not be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("the server's answer exceeded {0} bytes (upstream.max_line_bytes)")]
    TooLarge(usize),
    #[error("the server's answer did not arrive in full within {0:?} (upstream.request_timeout)")]
    TooSlow(Duration),
    #[error("reading the server's answer failed: {0}")]
    Broken(String),
}

impl From<crate::wire::sse::DecodeError> for BodyError {
    fn from(error: crate::wire::sse::DecodeError) -> BodyError {
        match error {
            crate::wire::sse::DecodeError::TooLarge(max) => BodyError::TooLarge(max),
            crate::wire::sse::DecodeError::NotUtf8 => BodyError::Broken(error.to_string()),
        }
    }
}

/// The whole body, if it ends within `timeout` and holds at most `max_bytes`. A body that
/// announces more (`Content-Length`) is refused unread; reading stops at the first byte over.
pub async fn read<B>(body: B, max_bytes: usize, timeout: Duration) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    tokio::time::timeout(timeout, read_to_end(body, max_bytes))
        .await
        .unwrap_or(Err(BodyError::TooSlow(timeout)))
}

/// At most the first `max_bytes` of the body (what arrives within `timeout`; the rest is left
/// unread): for an error's text.
pub async fn head<B>(mut body: B, max_bytes: usize, timeout: Duration) -> Bytes
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut head = BytesMut::new();
    let _ = tokio::time::timeout(timeout, async {
        while head.len() < max_bytes {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        head.extend_from_slice(&data);
                    }
                }
                _ => return,
            }
        }
    })
    .await;
    head.truncate(max_bytes);
    head.freeze()
}

async fn read_to_end<B>(mut body: B, max_bytes: usize) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let announced = body.size_hint().lower();
    if announced > max_bytes as u64 {
        return Err(BodyError::TooLarge(max_bytes));
    }
    let mut whole = BytesMut::with_capacity(announced as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if whole.len() + data.len() > max_bytes {
            return Err(BodyError::TooLarge(max_bytes));
        }
        whole.extend_from_slice(&data);
    }
    Ok(whole.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    use futures_util::{stream, StreamExt};
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};

    const PATIENCE: Duration = Duration::from_secs(5);

    fn chunks(
        parts: Vec<&'static [u8]>,
    ) -> StreamBody<impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Unpin>
    {
        StreamBody::new(stream::iter(
            parts
                .into_iter()
                .map(|part| Ok(Frame::data(Bytes::from_static(part)))),
        ))
    }

    #[tokio::test]
    async fn reads_a_body_up_to_the_bound_and_no_further() {
        let body = read(chunks(vec![b"ab", b"cd"]), 4, PATIENCE).await;
        assert_eq!(body.unwrap(), "abcd");
        let over = read(chunks(vec![b"ab", b"cd", b"e"]), 4, PATIENCE).await;
        assert_eq!(over, Err(BodyError::TooLarge(4)));
    }

    #[tokio::test]
    async fn refuses_an_announced_length_over_the_bound_unread() {
        let body = Full::new(Bytes::from_static(b"12345"));
        assert_eq!(read(body, 4, PATIENCE).await, Err(BodyError::TooLarge(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_is_too_slow() {
        let endless = StreamBody::new(
            stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"{")))])
                .chain(stream::pending()),
        );
        let timeout = Duration::from_secs(3);
        assert_eq!(
            read(endless, 1 << 20, timeout).await,
            Err(BodyError::TooSlow(timeout))
        );
    }

    #[tokio::test]
    async fn the_head_of_a_long_body_is_its_first_bytes() {
        let body = chunks(vec![b"abc", b"def", b"ghi"]);
        assert_eq!(head(body, 5, PATIENCE).await, "abcde");
    }
}
