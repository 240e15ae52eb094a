//! `stockade send` and `stockade resize`: type into a session (its terminal or stdin pipe) and
//! print what it answered; change a terminal's size.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use stockade_log::answer;
use stockade_proto::rpc::{
    DEFAULT_WRITE_YIELD_MS, ResizeParams, WriteParams, encode_bytes, method,
};

use crate::global::Global;
use crate::out;

/// `stockade send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The session id (`sh-3`).
    pub id: String,
    /// What to type. Escapes: `\n` Enter, `\t` Tab, `\r`, `\\`, `\xNN` a byte (`\x03` Ctrl-C,
    /// `\x04` Ctrl-D, `\x1b` Escape), `\u{…}` a Unicode character. Nothing: only wait and print.
    #[arg(default_value = "")]
    pub text: String,
    /// Then end the input: close a stdin pipe (end of file), or type Ctrl-D on a terminal.
    #[arg(long)]
    pub close_stdin: bool,
    /// Collect output this long after writing before printing it (earlier if the session ends).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_WRITE_YIELD_MS)]
    #[arg(value_parser = crate::args::parse_ms, allow_hyphen_values = true)]
    pub yield_ms: u64,
    /// Most bytes of output to show.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<usize>,
    /// Print the structured result (the `read` result) as JSON.
    #[arg(long)]
    pub json: bool,
    /// The idempotency key of this send (1–128 printable characters). A send whose key the
    /// daemon has seen for this session types nothing and prints the answer from where that
    /// first send started, so a send retried after a timeout or a lost connection never types
    /// its input twice. Without it, one is made for each call and named if the call fails
    /// that way.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// `stockade resize`.
#[derive(Debug, Args)]
pub struct ResizeArgs {
    /// The session id (`sh-3`).
    pub id: String,
    /// Rows.
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub rows: u16,
    /// Columns.
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub cols: u16,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn send(global: &Global, args: SendArgs) -> anyhow::Result<ExitCode> {
    let bytes = unescape(&args.text).map_err(anyhow::Error::msg)?;
    let params = WriteParams {
        id: args.id.clone(),
        bytes_b64: (!bytes.is_empty()).then(|| encode_bytes(&bytes)),
        close_stdin: args.close_stdin,
        yield_ms: Some(args.yield_ms),
        max_bytes: args.max_bytes,
        idempotency_key: Some(
            args.idempotency_key.clone().unwrap_or_else(super::run::new_idempotency_key),
        ),
        ..WriteParams::default()
    };
    let key = params.idempotency_key.clone().unwrap_or_default();
    let started = Instant::now();
    // The call's deadline covers `yield_ms` (see `Method::wait_ms`).
    let result = global.connect()?.call::<method::Write>(params).map_err(|e| {
        super::run::may_have_happened(e, &format!(
            "the input may have been typed: send it again with `--idempotency-key {key}` to get that answer without typing it twice"
        ))
    })?;
    if args.json {
        out::print_json(&result)?;
    } else {
        let output = out::view_text(&result.view, Some(&result.id));
        let text = answer::render(&result.id, &result.state, started.elapsed(), &output, None);
        out::print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn resize(global: &Global, args: ResizeArgs) -> anyhow::Result<ExitCode> {
    let params = ResizeParams { id: args.id, rows: args.rows, cols: args.cols };
    let result = global.connect()?.call::<method::Resize>(params)?;
    if args.json {
        out::print_json(&result)?;
    } else {
        out::print(&format!(
            "{}: {} rows x {} columns\n",
            result.id, result.size.rows, result.size.cols
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The bytes `text` stands for: `\n`, `\t`, `\r`, `\\`, `\0`, `\e`, `\xNN` (one byte) and
/// `\u{…}` (a character, UTF-8) are escapes; everything else is itself.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let bad =
            |what: &str| format!("{what} at byte {at} of {text:?}; write \\\\ for a backslash");
        match chars.next().map(|(_, e)| e) {
            Some('n') => out.push(b'\n'),
            Some('t') => out.push(b'\t'),
            Some('r') => out.push(b'\r'),
            Some('0') => out.push(0),
            Some('e') => out.push(0x1b),
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let hex: String = (0..2).filter_map(|_| chars.next().map(|(_, h)| h)).collect();
                let byte = (hex.len() == 2)
                    .then(|| u8::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| bad("\\x needs two hex digits"))?;
                out.push(byte);
            }
            Some('u') => {
                if chars.next().map(|(_, b)| b) != Some('{') {
                    return Err(bad("\\u needs braces, as in \\u{3}"));
                }
                let mut hex = String::new();
                loop {
                    match chars.next().map(|(_, h)| h) {
                        Some('}') => break,
                        Some(h) if h.is_ascii_hexdigit() && hex.len() < 6 => hex.push(h),
                        _ => return Err(bad("\\u{…} needs 1 to 6 hex digits and a closing brace")),
                    }
                }
                let c = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| bad("\\u{…} is not a Unicode character"))?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            Some(other) => return Err(bad(&format!("unknown escape \\{other}"))),
            None => return Err(bad("a lone backslash at the end")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn escapes_become_bytes() {
        assert_eq!(unescape(r"print(6*7)\n").unwrap(), b"print(6*7)\n");
        assert_eq!(unescape(r"a\tb\rc\\d").unwrap(), b"a\tb\rc\\d");
        assert_eq!(unescape(r"\x03\x1B\xff").unwrap(), [3, 0x1b, 0xff]);
        assert_eq!(unescape(r"\u{3}\u{e9}\u{1F600}").unwrap(), "\u{3}é😀".as_bytes());
        assert_eq!(unescape("plain é").unwrap(), "plain é".as_bytes());
        assert_eq!(unescape(r"\e[A\0").unwrap(), b"\x1b[A\0");
        for bad in [r"\", r"\q", r"\x4", r"\xzz", r"\u3", r"\u{}", r"\u{110000}", r"\u{12"] {
            assert!(unescape(bad).is_err(), "{bad}");
        }
    }
}
