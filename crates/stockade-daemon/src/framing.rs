//! Newline-delimited JSON framing with a bound: a line longer than the limit is skipped as it
//! streams in (never buffered whole) and reported, so a client cannot make the daemon hold an
//! unbounded request in memory.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One frame read from a connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A complete line (without its `\n`).
    Line(Vec<u8>),
    /// A line longer than the limit; `len` bytes were skipped.
    TooLong {
        /// Bytes of the line (newline excluded).
        len: u64,
    },
}

/// Reads bounded lines from `reader`.
pub(crate) struct LineReader<R> {
    reader: R,
    max: usize,
    buf: Vec<u8>,
    /// Bytes of an over-long line skipped so far (`Some` while skipping).
    skipping: Option<u64>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R, max: usize) -> LineReader<R> {
        LineReader { reader, max, buf: Vec::new(), skipping: None }
    }

    /// The underlying reader.
    pub(crate) fn into_inner(self) -> R {
        self.reader
    }

    /// The next frame, or `None` at end of stream. A last line without `\n` counts as a line.
    /// Cancel-safe: bytes are consumed from the reader only after they are kept or skipped.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                if let Some(len) = self.skipping.take() {
                    return Ok(Some(Frame::TooLong { len }));
                }
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Frame::Line(std::mem::take(&mut self.buf))));
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(available.len());
            if let Some(skipped) = self.skipping.as_mut() {
                *skipped += take as u64;
            } else if self.buf.len() + take > self.max {
                self.skipping = Some((self.buf.len() + take) as u64);
                self.buf = Vec::new(); // release the partial line's memory
            } else {
                self.buf.extend_from_slice(&available[..take]);
            }
            let consumed = take + usize::from(newline.is_some());
            self.reader.consume(consumed);
            if newline.is_some() {
                if let Some(len) = self.skipping.take() {
                    return Ok(Some(Frame::TooLong { len }));
                }
                return Ok(Some(Frame::Line(std::mem::take(&mut self.buf))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn frames(input: &[u8], max: usize, chunk: usize) -> Vec<Frame> {
        let reader = tokio::io::BufReader::with_capacity(chunk, input);
        let mut lines = LineReader::new(reader, max);
        let mut out = Vec::new();
        while let Some(f) = lines.next().await.unwrap() {
            out.push(f);
        }
        out
    }

    #[tokio::test]
    async fn long_lines_are_skipped_and_reported() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(vec![b'x'; 100]);
        input.extend(b"\nok\nlast");
        for chunk in [1, 7, 64, 4096] {
            let got = frames(&input, 16, chunk).await;
            assert_eq!(
                got,
                vec![
                    Frame::Line(b"{\"a\":1}".to_vec()),
                    Frame::TooLong { len: 100 },
                    Frame::Line(b"ok".to_vec()),
                    Frame::Line(b"last".to_vec()),
                ],
                "chunk {chunk}"
            );
        }
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_limit_is_kept() {
        let got = frames(b"abcd\nabcde\n", 4, 2).await;
        assert_eq!(got, vec![Frame::Line(b"abcd".to_vec()), Frame::TooLong { len: 5 }]);
    }
}
