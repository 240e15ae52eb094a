//! The bytes of one connection's answers, bounded. A request takes, before it is handled, as
//! many bytes of its connection's [`ANSWER_BUDGET`] as its answer may hold at most
//! ([`weight`]: what its bounds allow, with room for JSON's escaping), and gives them back once
//! its answer is written to the client. So a client that pipelines large reads and reads no
//! answer holds at most the budget in the daemon's memory: past it, the connection's requests
//! wait, and once all its in-flight places are taken, the daemon stops reading its requests.
//! (Binary reads are bounded apart, by their own places: `payload`.)

use std::sync::Arc;

use serde_json::Value;
use stockade_log::limits;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most bytes of answers one connection has in the daemon at once (made or waiting to be
/// written).
pub(crate) const ANSWER_BUDGET: usize = 64 << 20;
/// The weight of an answer that carries no output (a status, a kill report, a list).
const SMALL: usize = 64 << 10;
/// JSON may write a byte of output as up to six (`\u0000`); text is mostly one.
const ESCAPE: usize = 6;

/// A connection's budget.
pub(crate) fn new() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(ANSWER_BUDGET))
}

/// Takes `method`'s weight for `params` from `budget` (waiting while the connection's answers
/// hold it); `None` only when the budget is closed.
pub(crate) async fn take(
    budget: &Arc<Semaphore>,
    method: &str,
    params: &Value,
) -> Option<OwnedSemaphorePermit> {
    let bytes = weight(method, params).min(ANSWER_BUDGET);
    let n = u32::try_from(bytes).unwrap_or(u32::MAX);
    Arc::clone(budget).acquire_many_owned(n).await.ok()
}

/// The most bytes `method`'s answer may hold for `params` (its view's or raw read's bound).
pub(crate) fn weight(method: &str, params: &Value) -> usize {
    let size = |k: &str| params.get(k).and_then(Value::as_u64).map(|n| n as usize);
    let view = || limits::view_limits(size("max_bytes"), size("max_lines")).max_bytes;
    match method {
        "read" if params.get("raw").and_then(Value::as_bool) == Some(true) => {
            if params.get("encoding").and_then(Value::as_str) == Some("binary") {
                SMALL
            } else {
                // base64: four bytes for three.
                limits::raw_bytes(size("max_bytes")).div_ceil(3) * 4 + SMALL
            }
        }
        "read" | "run" | "restart" => view().saturating_mul(ESCAPE) + SMALL,
        "grep" => stockade_log::GREP_RESULT_MAX_BYTES.saturating_mul(2) + SMALL,
        _ => SMALL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn weights_follow_the_bounds() {
        let raw4 = weight("read", &json!({"id": "a", "raw": true, "max_bytes": 4 << 20}));
        assert!(((4 << 20) * 4 / 3..6 << 20).contains(&raw4), "{raw4}");
        let huge = weight("read", &json!({"id": "a", "raw": true, "max_bytes": u64::MAX}));
        assert_eq!(huge, raw4, "clamped as the read is");
        let binary = weight("read", &json!({"raw": true, "encoding": "binary"}));
        assert_eq!(binary, SMALL);
        let tail = weight("read", &json!({"id": "a"}));
        assert!(tail < 1 << 20, "a default view is light: {tail}");
        assert_eq!(weight("status", &json!({})), SMALL);
    }
}
