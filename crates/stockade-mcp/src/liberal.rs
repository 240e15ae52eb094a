//! Liberal in what the server accepts: arguments a tool does not take are left out (and named
//! in the answer's notice) rather than refused. Agents add their own (Gemini CLI sends
//! `wait_for_previous` with every call); refusing them would fail every call of such an agent.
//! Answers too long for the client are cut at a line end with a notice saying how to page.

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::Value;

use crate::budget::Budget;
use crate::tools::{GREP_OUTPUT, LIST_SESSIONS, READ_OUTPUT};

/// Other names a tool accepts for its arguments (kept working for older callers).
const ALIASES: &[(&str, &str)] = &[(READ_OUTPUT, "wait_ms")];

/// Remove from `args` what `tool` does not take; the names removed, sorted.
pub fn strip_unknown(tool: &Tool, args: &mut Value) -> Vec<String> {
    let Some(map) = args.as_object_mut() else { return Vec::new() };
    let known = tool.input_schema.get("properties").and_then(Value::as_object);
    let takes = |key: &str| {
        known.is_some_and(|k| k.contains_key(key))
            || ALIASES.iter().any(|(t, alias)| *t == tool.name && *alias == key)
    };
    let unknown: Vec<String> = map.keys().filter(|k| !takes(k)).cloned().collect();
    for key in &unknown {
        map.remove(key);
    }
    unknown
}

/// The notice for arguments [`strip_unknown`] left out.
pub fn ignored_note(tool: &str, ignored: &[String]) -> Option<String> {
    (!ignored.is_empty())
        .then(|| format!("Note: {tool} does not take {}; ignored.", ignored.join(", ")))
}

/// Cut a `grep_output` or `list_sessions` answer to `budget`, at a line end, saying what was
/// left out and how to read it.
pub fn fit_listing(tool: &str, budget: Option<Budget>, result: &mut CallToolResult) {
    let Some(budget) = budget else { return };
    if ![GREP_OUTPUT, LIST_SESSIONS].contains(&tool) || result.is_error == Some(true) {
        return;
    }
    let Some(text) = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone())
    else {
        return;
    };
    let Some((kept, left, first)) = budget.cut_lines(&text) else { return };
    let how = if tool == GREP_OUTPUT {
        match offset_of(first) {
            Some(offset) => format!(
                "the next is at byte {offset}: read on with read_output after={offset}, or narrow the pattern or lower max_matches"
            ),
            None => "narrow the pattern or lower max_matches".to_owned(),
        }
    } else {
        "filter with state or source, or lower limit".to_owned()
    };
    let cut = format!(
        "{kept}[… {left} more line(s) not shown: {} passes at most {} bytes of a tool result to you; {how}.]\n",
        budget.client, budget.bytes
    );
    result.content[0] = ContentBlock::text(cut);
}

/// The byte offset of a grep line (`line:offset:text`, or `line-offset-text` for context).
fn offset_of(line: &str) -> Option<u64> {
    let rest = line.split_once([':', '-'])?.1;
    rest.split_once([':', '-'])?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_arguments_are_removed_and_named() {
        let tools = crate::tools::all();
        let exec = tools.iter().find(|t| t.name == crate::tools::EXEC_COMMAND).unwrap();
        let mut args = json!({"cmd": "ls", "wait_for_previous": true, "zzz": 1});
        assert_eq!(strip_unknown(exec, &mut args), ["wait_for_previous", "zzz"]);
        assert_eq!(args, json!({"cmd": "ls"}));
        let read = tools.iter().find(|t| t.name == READ_OUTPUT).unwrap();
        let mut args = json!({"session_id": "sh-1", "wait_ms": 5});
        assert!(strip_unknown(read, &mut args).is_empty());
        let note = ignored_note("exec_command", &["wait_for_previous".into()]).unwrap();
        assert!(note.contains("wait_for_previous"), "{note}");
    }

    #[test]
    fn grep_offsets_are_read_from_match_and_context_lines() {
        assert_eq!(offset_of("12:3456:error: x"), Some(3456));
        assert_eq!(offset_of("12-3456-context"), Some(3456));
        assert_eq!(offset_of("garbage"), None);
    }
}
