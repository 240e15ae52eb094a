//! The one bound on what a read answers with, whichever door asked (CLI, daemon, MCP): a view's
//! `max_bytes`/`max_lines` and a raw read's byte count. Every read goes through
//! [`OutputLog::read`](crate::OutputLog::read) or
//! [`OutputLog::read_raw`](crate::OutputLog::read_raw), which apply these clamps, so a
//! foreground and a background `run` with the same arguments answer alike. A larger request is
//! clamped, never refused: the rest stays readable from `next_cursor`. `docs/protocol.md` lists
//! the values.

use stockade_proto::{DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, OutputLimits};

/// Most bytes one view shows (a larger `max_bytes` gets this much). Views are for reading: a
/// model has no use for more in one answer, and a reader that wants everything pages with
/// `after` or reads raw bytes.
pub const MAX_VIEW_BYTES: usize = 4 * 1024 * 1024;
/// Most lines one view shows.
pub(crate) const MAX_VIEW_LINES: usize = 1_000_000;
/// Bytes of a raw read when no `max_bytes` is given.
pub(crate) const DEFAULT_RAW_BYTES: usize = 1024 * 1024;
/// Most bytes of one raw read (before any encoding for the wire).
pub(crate) const MAX_RAW_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of a raw read sent as binary (no base64, no JSON) when no `max_bytes` is given: large,
/// so a bulk reader pays the per-answer cost rarely.
pub(crate) const DEFAULT_BINARY_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes of one raw read sent as binary: what one answer may hold in the daemon's memory.
pub const MAX_BINARY_BYTES: usize = 16 * 1024 * 1024;

/// `limits` within `1..=`[`MAX_VIEW_BYTES`] and `1..=``MAX_VIEW_LINES`.
pub fn clamp(limits: OutputLimits) -> OutputLimits {
    OutputLimits {
        max_bytes: limits.max_bytes.clamp(1, MAX_VIEW_BYTES),
        max_lines: limits.max_lines.clamp(1, MAX_VIEW_LINES),
    }
}

/// A door's optional `max_bytes`/`max_lines`, defaults filled in (`stockade_proto`'s 50 KiB and
/// 2000 lines) and clamped.
pub fn view_limits(max_bytes: Option<usize>, max_lines: Option<usize>) -> OutputLimits {
    clamp(OutputLimits {
        max_bytes: max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
        max_lines: max_lines.unwrap_or(DEFAULT_MAX_LINES),
    })
}

/// A raw read's byte count: `DEFAULT_RAW_BYTES` when not given, at most `MAX_RAW_BYTES`.
pub fn raw_bytes(max_bytes: Option<usize>) -> usize {
    max_bytes.unwrap_or(DEFAULT_RAW_BYTES).min(MAX_RAW_BYTES)
}

/// A binary raw read's byte count: `DEFAULT_BINARY_BYTES` when not given, at most
/// [`MAX_BINARY_BYTES`].
pub fn binary_bytes(max_bytes: Option<usize>) -> usize {
    max_bytes.unwrap_or(DEFAULT_BINARY_BYTES).min(MAX_BINARY_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_filled_in_and_clamped() {
        assert_eq!(view_limits(None, None), OutputLimits::default());
        let huge = view_limits(Some(usize::MAX), Some(usize::MAX));
        assert_eq!((huge.max_bytes, huge.max_lines), (MAX_VIEW_BYTES, MAX_VIEW_LINES));
        let tiny = view_limits(Some(0), Some(0));
        assert_eq!((tiny.max_bytes, tiny.max_lines), (1, 1));
        assert_eq!(raw_bytes(None), DEFAULT_RAW_BYTES);
        assert_eq!(raw_bytes(Some(usize::MAX)), MAX_RAW_BYTES);
        assert_eq!(raw_bytes(Some(0)), 0);
        assert_eq!(binary_bytes(None), DEFAULT_BINARY_BYTES);
        assert_eq!(binary_bytes(Some(usize::MAX)), MAX_BINARY_BYTES);
    }
}
