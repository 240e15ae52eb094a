//! A `multipart/form-data` body read part by part as it arrives: each part's head, then its
//! bytes in pieces, so an upload of any size goes to disk with a few chunks in memory (the
//! delimiter may straddle two chunks: the last delimiter-length bytes wait for the next one).

use axum::body::{Body, BodyDataStream};
use axum::http::StatusCode;
use futures_util::StreamExt as _;

/// Longest part head taken (its `Content-Disposition` and `Content-Type` lines).
const MAX_HEAD: usize = 16 * 1024;

/// A refused or broken body: the status and the sentence.
pub(crate) type Failed = (StatusCode, String);

#[derive(PartialEq)]
enum At {
    /// Before the first delimiter (a preamble may come first).
    Start,
    /// Just after a delimiter: a head, or `--` for the end.
    Delimiter,
    /// In a part's bytes.
    Data,
    /// After the closing delimiter.
    Done,
}

/// The parts of one body.
pub(crate) struct Parts {
    stream: BodyDataStream,
    buf: Vec<u8>,
    /// `\r\n--BOUNDARY`: what ends a part's bytes.
    delimiter: Vec<u8>,
    at: At,
}

/// The first place `needle` occurs in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&b| b == first) {
        let at = from + i;
        if hay.len() - at < needle.len() {
            return None;
        }
        if &hay[at + 1..at + needle.len()] == rest {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

fn broke_off(what: &str) -> Failed {
    (StatusCode::BAD_REQUEST, format!("the multipart upload broke off {what}"))
}

impl Parts {
    pub(crate) fn new(body: Body, boundary: &str) -> Parts {
        Parts {
            stream: body.into_data_stream(),
            buf: Vec::new(),
            delimiter: format!("\r\n--{boundary}").into_bytes(),
            at: At::Start,
        }
    }

    /// One more chunk into the buffer; false at the body's end.
    async fn fill(&mut self) -> Result<bool, Failed> {
        match self.stream.next().await {
            Some(Ok(chunk)) => {
                self.buf.extend_from_slice(&chunk);
                Ok(true)
            }
            Some(Err(e)) => Err(broke_off(&format!("({e})"))),
            None => Ok(false),
        }
    }

    /// The next part's head (its raw header lines), or `None` after the closing delimiter.
    pub(crate) async fn next_head(&mut self) -> Result<Option<String>, Failed> {
        while self.at == At::Data {
            self.next_data().await?; // the rest of a part the caller did not read
        }
        if self.at == At::Start {
            let first = self.delimiter[2..].to_vec();
            loop {
                if let Some(i) = find(&self.buf, &first) {
                    self.buf.drain(..i + first.len());
                    break;
                }
                let keep = self.buf.len().saturating_sub(first.len());
                self.buf.drain(..keep);
                if !self.fill().await? {
                    return Err((StatusCode::BAD_REQUEST, "the multipart body has no part".into()));
                }
            }
            self.at = At::Delimiter;
        }
        if self.at == At::Done {
            return Ok(None);
        }
        while self.buf.len() < 2 {
            if !self.fill().await? {
                return Err(broke_off("after a delimiter"));
            }
        }
        if self.buf.starts_with(b"--") {
            self.at = At::Done;
            return Ok(None);
        }
        loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 4);
                self.at = At::Data;
                return Ok(Some(head));
            }
            if self.buf.len() > MAX_HEAD {
                let why = format!("a part's head is longer than {MAX_HEAD} bytes");
                return Err((StatusCode::BAD_REQUEST, why));
            }
            if !self.fill().await? {
                return Err(broke_off("in a part's head"));
            }
        }
    }

    /// The next piece of the current part's bytes, or `None` at its end.
    pub(crate) async fn next_data(&mut self) -> Result<Option<Vec<u8>>, Failed> {
        if self.at != At::Data {
            return Ok(None);
        }
        loop {
            if let Some(i) = find(&self.buf, &self.delimiter) {
                let data: Vec<u8> = self.buf.drain(..i).collect();
                self.buf.drain(..self.delimiter.len());
                self.at = At::Delimiter;
                return Ok(Some(data));
            }
            let safe = self.buf.len().saturating_sub(self.delimiter.len() - 1);
            if safe > 0 {
                return Ok(Some(self.buf.drain(..safe).collect()));
            }
            if !self.fill().await? {
                return Err(broke_off("inside a part"));
            }
        }
    }
}

/// The file name a part's head gives (`Content-Disposition: …; filename="…"`).
pub(crate) fn file_name(head: &str) -> Option<String> {
    head.split("filename=\"").nth(1).and_then(|r| r.split('"').next()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of a two-part body into two chunks gives the same parts.
    #[tokio::test]
    async fn parts_survive_any_chunking() {
        let body: &[u8] = b"preamble\r\n--XYZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nfirst\r\n--XY not yet\r\n--XYZ\r\nContent-Disposition: form-data; filename=\"b\"\r\n\r\n\r\n--XYZ--\r\n";
        for cut in 0..body.len() {
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                vec![Ok(body[..cut].to_vec()), Ok(body[cut..].to_vec())];
            let mut parts =
                Parts::new(Body::from_stream(futures_util::stream::iter(chunks)), "XYZ");
            let mut got = Vec::new();
            while let Some(head) = parts.next_head().await.unwrap() {
                let mut data = Vec::new();
                while let Some(piece) = parts.next_data().await.unwrap() {
                    data.extend(piece);
                }
                got.push((file_name(&head).unwrap(), String::from_utf8(data).unwrap()));
            }
            let want = [("a.txt", "first\r\n--XY not yet"), ("b", "")];
            let want: Vec<(String, String)> =
                want.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect();
            assert_eq!(got, want, "cut at {cut}");
        }
    }

    #[tokio::test]
    async fn a_body_cut_short_is_refused() {
        let body = Body::from("--XYZ\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nabc");
        let mut parts = Parts::new(body, "XYZ");
        assert!(parts.next_head().await.unwrap().is_some());
        let mut result = Ok(Some(Vec::new()));
        while let Ok(Some(_)) = result {
            result = parts.next_data().await;
        }
        assert!(result.is_err());
    }
}
