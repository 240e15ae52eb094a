//! Newline-delimited framing with a bound: a response line is read into memory only up to
//! [`MAX_RESPONSE_BYTES`](crate::MAX_RESPONSE_BYTES), never without limit.

use std::io::{self, BufRead};

/// How reading one line ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line is in the buffer (newline removed).
    Complete,
    /// The peer closed the connection before a newline.
    Eof,
    /// The line grew past the bound; the rest is unread.
    TooLarge,
}

/// Read one `\n`-terminated line into `buf` (cleared first), at most `max` bytes.
pub(crate) fn read_line_bounded(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Line::Eof);
        }
        let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        if buf.len() + chunk.len() > max {
            return Ok(Line::TooLarge);
        }
        buf.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(found);
        reader.consume(used);
        if found {
            return Ok(Line::Complete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        // A tiny buffer so lines span several fills.
        let mut reader = io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            let line = read_line_bounded(&mut reader, &mut buf, max).unwrap();
            let stop = line != Line::Complete;
            out.push((line, buf));
            if stop {
                return out;
            }
        }
    }

    #[test]
    fn lines_are_split_across_fills() {
        let got = read_all(b"hello\nworld\n", 100);
        assert_eq!(got[0], (Line::Complete, b"hello".to_vec()));
        assert_eq!(got[1], (Line::Complete, b"world".to_vec()));
        assert_eq!(got[2].0, Line::Eof);
    }

    #[test]
    fn a_line_over_the_bound_stops_reading() {
        let got = read_all(b"0123456789\n", 5);
        assert_eq!(got[0].0, Line::TooLarge);
        assert!(got[0].1.len() <= 5);
        // Exactly at the bound is fine.
        assert_eq!(read_all(b"01234\n", 5)[0], (Line::Complete, b"01234".to_vec()));
    }
}
