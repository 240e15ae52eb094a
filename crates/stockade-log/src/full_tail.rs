//! The newest output of a session whose spool a full disk stopped: when a log finishes, its hot
//! tail is released (every byte it held is on disk) — except when the disk was full, where the
//! newest [`FULL_TAIL_BYTES`] are kept in memory, so the end of the output (a `df`, a `du`, the
//! last lines of a build) still reaches the reader, and `keep-head-tail`'s tail is not lost when
//! it could not be written after the gap.

use super::REASON_DISK_FULL;
use super::hot_tail::HotTail;
use super::state::State;

/// Most bytes a finished log keeps in memory after a full disk.
pub(crate) const FULL_TAIL_BYTES: usize = 8 * 1024;

/// Releases the hot tail of a finishing log, keeping its newest bytes when a full disk kept
/// them off the spool (and no tail segment was written after the gap).
pub(super) fn release_ring(st: &mut State) {
    let end = st.total;
    let full = st.stop.as_ref().is_some_and(|s| s.hit.reason == REASON_DISK_FULL);
    let keep = if full && st.tail.is_none() { st.ring.len().min(FULL_TAIL_BYTES) } else { 0 };
    let mut kept = HotTail::empty_at(keep, end.saturating_sub(keep as u64));
    if keep > 0 {
        let mut buf = vec![0u8; keep];
        if st.ring.copy_to(end - keep as u64, &mut buf) {
            kept.push(&buf);
        } else {
            kept = HotTail::empty_at(0, end);
        }
    }
    st.ring = kept;
}
