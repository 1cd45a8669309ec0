//! Newline-delimited framing with a length bound, for stdio: an oversized line is skipped and
//! reported, and the reader carries on with the next one.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One framed line (without its `\n` or a trailing `\r`), or the report of one too long to
/// keep, with its first bytes (enough to tell whose answer it was).
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Text(Vec<u8>),
    TooLong { max: usize, head: Vec<u8> },
}

/// Bytes of an oversized line kept for diagnosis.
const HEAD: usize = 512;

pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        LineReader { inner, max }
    }

    /// The next line; `None` at end of input (a final line without `\n` still counts).
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut head = Vec::new();
        let mut too_long = false;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return Ok(match (too_long, line.is_empty()) {
                    (true, _) => Some(Line::TooLong {
                        max: self.max,
                        head,
                    }),
                    (false, true) => None,
                    (false, false) => Some(Line::Text(line)),
                });
            }
            let (chunk, found_newline) = match available.iter().position(|b| *b == b'\n') {
                Some(end) => (&available[..end], true),
                None => (available, false),
            };
            if !too_long && line.len() + chunk.len() <= self.max {
                line.extend_from_slice(chunk);
            } else if !too_long {
                too_long = true;
                line.extend_from_slice(chunk);
                line.truncate(HEAD);
                head = std::mem::take(&mut line);
            }
            let used = chunk.len() + usize::from(found_newline);
            self.inner.consume(used);
            if found_newline {
                if too_long {
                    return Ok(Some(Line::TooLong {
                        max: self.max,
                        head,
                    }));
                }
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(Line::Text(line)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines(input: &[u8], max: usize, buffer: usize) -> Vec<Line> {
        let mut reader = LineReader::new(BufReader::with_capacity(buffer, input), max);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn frames_lines_across_buffer_boundaries() {
        for buffer in [1, 2, 3, 64] {
            let got = lines(b"ab\r\ncde\n\nf", 10, buffer).await;
            assert_eq!(
                got,
                [
                    Line::Text(b"ab".to_vec()),
                    Line::Text(b"cde".to_vec()),
                    Line::Text(vec![]),
                    Line::Text(b"f".to_vec())
                ]
            );
        }
    }

    #[tokio::test]
    async fn skips_an_oversized_line_and_keeps_going() {
        for buffer in [1, 4, 64] {
            let got = lines(b"0123456789abc\nok\n", 5, buffer).await;
            assert!(
                matches!(&got[0], Line::TooLong { max: 5, head } if b"0123456789abc".starts_with(head) && !head.is_empty())
            );
            assert_eq!(got[1], Line::Text(b"ok".to_vec()));
        }
    }
}
