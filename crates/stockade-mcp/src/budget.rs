//! What each MCP client passes on to its model, and how this server fits its answers inside.
//!
//! Agents bound a tool result before their model reads it, each its own way (measured with the
//! real agents by the `agents_*` tests; see README.md "What your agent's model sees"):
//!
//! * **Codex CLI** cuts the middle out of anything over its tool-output limit (10,000 bytes for
//!   a model it has no metadata for; 10,000 tokens for its own models), silently.
//! * **Claude Code** replaces a result above `MAX_MCP_OUTPUT_TOKENS` (default 25,000) with a
//!   note that it was saved to a file; it counts only when its rough estimate (bytes / 4) is over
//!   half of that.
//! * **opencode** keeps the first 2,000 lines or 51,200 bytes, whichever comes first.
//! * **Gemini CLI** cuts a result over 40,000 characters mid-line. A character is at least one
//!   byte, so 40,000 bytes fit.
//! * **Qwen Code**, built from Gemini CLI, saves a result over 28,000 characters (its
//!   `truncateToolOutputThreshold`, 25,000, plus 3,000 of headroom) to a file and hands its model
//!   a 2,000-character preview instead: 25,000 bytes fit.
//!
//! The client names itself in `initialize` (`clientInfo.name`), or, on protocol revisions
//! without `initialize`, in each request's `_meta`. For a known client, a call that
//! leaves `max_output_tokens`/`max_lines` out gets a view that, with the answer's own lines,
//! fits that client's limit; a call that asks for more is held to it and the answer says so.
//! Other clients get the engine's defaults.

use serde_json::Value;

use crate::tools::{BYTES_PER_TOKEN, EXEC_COMMAND, READ_OUTPUT, WRITE_STDIN};

/// Room left for the answer's own lines (status, wall time, the notice before and after the
/// output, a note): bytes and lines.
const FRAME_BYTES: usize = 1_500;
const FRAME_LINES: usize = 12;

/// How much of one tool result a client hands its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Which client this is, as the answers name it.
    pub client: &'static str,
    /// Bytes of text the client passes on unchanged.
    pub bytes: usize,
    /// Lines the client passes on (`None`: no line limit).
    pub lines: Option<usize>,
}

impl Budget {
    /// The budget of the client that introduced itself as `name` (`clientInfo.name`), if known.
    /// `claude_tokens` is Claude Code's `MAX_MCP_OUTPUT_TOKENS` when set (this server inherits
    /// Claude Code's environment).
    pub fn for_client(name: &str, claude_tokens: Option<usize>) -> Option<Budget> {
        let name = name.to_ascii_lowercase();
        if name.contains("codex") {
            Some(Budget { client: "Codex", bytes: 10_000, lines: None })
        } else if name.contains("claude") {
            // Below half its limit by its own rough count (bytes / 4), so it never replaces
            // the answer, whatever its exact token count says.
            let tokens = claude_tokens.unwrap_or(25_000);
            Some(Budget { client: "Claude Code", bytes: tokens.saturating_mul(8) / 5, lines: None })
        } else if name.contains("opencode") {
            Some(Budget { client: "opencode", bytes: 51_200, lines: Some(2_000) })
        } else if name.contains("gemini") {
            Some(Budget { client: "Gemini CLI", bytes: 40_000, lines: None })
        } else if name.contains("qwen") {
            Some(Budget { client: "Qwen Code", bytes: 25_000, lines: None })
        } else {
            None
        }
    }

    /// The budget for the output view alone.
    fn view_bytes(&self) -> usize {
        self.bytes.saturating_sub(FRAME_BYTES)
    }

    fn view_lines(&self) -> Option<usize> {
        self.lines.map(|l| l.saturating_sub(FRAME_LINES))
    }

    /// Fill in or hold `tool`'s bounds in `args` to this budget; the sentence to show when the
    /// caller asked for more than this client passes on.
    pub fn fit(&self, tool: &str, args: &mut Value) -> Option<String> {
        if ![EXEC_COMMAND, READ_OUTPUT, WRITE_STDIN].contains(&tool) {
            return None;
        }
        let map = args.as_object_mut()?;
        let mut held = Vec::new();
        let max_tokens = (self.view_bytes() as u64) / BYTES_PER_TOKEN;
        match map.get("max_output_tokens").and_then(Value::as_u64) {
            Some(asked) if asked > max_tokens => {
                held.push(format!("max_output_tokens={asked} to {max_tokens}"));
                map.insert("max_output_tokens".into(), max_tokens.into());
            }
            Some(_) => {}
            None => {
                map.insert("max_output_tokens".into(), max_tokens.into());
            }
        }
        // write_stdin has no line bound of its own; its byte bound is what holds it.
        if let (Some(max_lines), true) = (self.view_lines(), tool != WRITE_STDIN) {
            match map.get("max_lines").and_then(Value::as_u64) {
                Some(asked) if asked > max_lines as u64 => {
                    held.push(format!("max_lines={asked} to {max_lines}"));
                    map.insert("max_lines".into(), max_lines.into());
                }
                Some(_) => {}
                None => {
                    map.insert("max_lines".into(), max_lines.into());
                }
            }
        }
        if held.is_empty() {
            return None;
        }
        let lines = self.lines.map(|l| format!(" or {l} lines")).unwrap_or_default();
        Some(format!(
            "Note: {} passes at most {} bytes{lines} of a tool result to you, so {} was held to that; page through the rest with read_output after=next_cursor.",
            self.client,
            self.bytes,
            held.join(" and ")
        ))
    }
}

impl Budget {
    /// `text` cut at a line end to fit this budget with room for a notice: the text kept, how
    /// many lines were left out and the first of them. `None` when it fits whole.
    pub fn cut_lines<'a>(&self, text: &'a str) -> Option<(&'a str, usize, &'a str)> {
        let max_lines = self.lines.map(|l| l.saturating_sub(2)).unwrap_or(usize::MAX);
        if text.len() <= self.bytes && text.lines().count() <= max_lines {
            return None;
        }
        let room = self.bytes.saturating_sub(NOTICE_BYTES);
        let mut end = 0;
        for (n, line) in text.split_inclusive('\n').enumerate() {
            if end + line.len() > room || n >= max_lines {
                break;
            }
            end += line.len();
        }
        let (kept, rest) = text.split_at(end);
        let first = rest.lines().next().unwrap_or_default();
        Some((kept, rest.lines().count(), first))
    }
}

/// Room kept for the notice that says what a cut answer left out.
const NOTICE_BYTES: usize = 600;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn known_clients_get_their_budget_and_others_none() {
        assert_eq!(Budget::for_client("codex-mcp-client", None).unwrap().bytes, 10_000);
        assert_eq!(Budget::for_client("claude-code", None).unwrap().bytes, 40_000);
        assert_eq!(Budget::for_client("claude-code", Some(10_000)).unwrap().bytes, 16_000);
        assert_eq!(Budget::for_client("opencode", None).unwrap().lines, Some(2_000));
        assert_eq!(Budget::for_client("gemini-cli-mcp-client", None).unwrap().bytes, 40_000);
        assert_eq!(Budget::for_client("qwen-cli-mcp-client", None).unwrap().bytes, 25_000);
        assert_eq!(Budget::for_client("mcp", None), None);
    }

    #[test]
    fn long_texts_are_cut_at_a_line_end_with_room_for_a_notice() {
        let b = Budget { client: "Codex", bytes: 10_000, lines: None };
        let text: String = (0..2_000).map(|i| format!("{i}:{}:match {i}\n", i * 20)).collect();
        let (kept, left, first) = b.cut_lines(&text).unwrap();
        assert!(kept.len() <= 10_000 - NOTICE_BYTES, "{}", kept.len());
        assert!(kept.ends_with('\n'));
        assert_eq!(kept.lines().count() + left, 2_000);
        assert!(text[kept.len()..].starts_with(first));
        assert_eq!(b.cut_lines("short\n"), None);
        let lines = Budget { client: "opencode", bytes: 51_200, lines: Some(100) };
        let (kept, left, _) = lines.cut_lines(&text[..5_000]).unwrap();
        assert_eq!(kept.lines().count(), 98);
        assert!(left > 0);
    }

    #[test]
    fn missing_bounds_are_filled_and_larger_ones_held_with_a_note() {
        let b = Budget::for_client("opencode", None).unwrap();
        let mut args = json!({"cmd": "make"});
        assert_eq!(b.fit(EXEC_COMMAND, &mut args), None);
        assert_eq!(args["max_output_tokens"], (51_200 - FRAME_BYTES) as u64 / 4);
        assert_eq!(args["max_lines"], 2_000 - FRAME_LINES as u64);

        let mut args = json!({"session_id": "sh-1", "max_output_tokens": 65_536});
        let note = b.fit(READ_OUTPUT, &mut args).unwrap();
        assert!(note.contains("opencode passes at most 51200 bytes or 2000 lines"), "{note}");
        assert!(note.contains("max_output_tokens=65536"), "{note}");
        assert_eq!(args["max_output_tokens"], (51_200 - FRAME_BYTES) as u64 / 4);

        let mut args = json!({"session_id": "sh-1", "chars": "x"});
        assert_eq!(b.fit(WRITE_STDIN, &mut args), None);
        assert!(args.get("max_lines").is_none(), "write_stdin takes no max_lines");
        let mut args = json!({"session_id": "sh-1", "pattern": "x"});
        assert_eq!(b.fit("grep_output", &mut args), None);
        assert_eq!(args, json!({"session_id": "sh-1", "pattern": "x"}));
    }
}
