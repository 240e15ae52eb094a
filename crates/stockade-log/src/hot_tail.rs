//! The hot tail: the newest bytes of a log that are *not* in the spool, in a ring of at most
//! `cap` bytes.
//!
//! While the spool takes every byte, the ring holds nothing: the log only moves its end along
//! ([`HotTail::advance`]) and every read is served from the spool by `pread` (the page cache).
//! Only once the spool stops (disk cap or disk full) does the ring keep the newest bytes, so
//! `keep-head-tail` can write them after the gap at the end and reads still see them meanwhile.
//!
//! The buffer is allocated lazily and grows (at most doubling) until it reaches `cap`; after that
//! it never reallocates and new bytes overwrite the oldest.

/// Smallest step the ring grows by, so tiny appends do not reallocate on every call.
const MIN_GROWTH_BYTES: usize = 4 * 1024;

/// The newest bytes of a log, addressed by log offset.
#[derive(Debug)]
pub(crate) struct HotTail {
    /// `buf.len() <= cap`. While `buf.len() < cap` the bytes are in order and `head == 0`; once
    /// full, the oldest byte is at `buf[head]`.
    buf: Vec<u8>,
    cap: usize,
    head: usize,
    /// Log offset one past the newest byte pushed (pushed bytes, not retained ones).
    end: u64,
}

impl HotTail {
    pub(crate) fn new(cap: usize) -> HotTail {
        HotTail { buf: Vec::new(), cap, head: 0, end: 0 }
    }

    /// An empty ring positioned at log offset `end` (a re-opened log: nothing retained).
    pub(crate) fn empty_at(cap: usize, end: u64) -> HotTail {
        HotTail { buf: Vec::new(), cap, head: 0, end }
    }

    /// Log offset of the oldest retained byte.
    pub(crate) fn start(&self) -> u64 {
        self.end - self.buf.len() as u64
    }

    /// Log offset one past the newest byte.
    #[cfg(test)]
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Bytes retained.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes allocated (what the ring costs in memory).
    pub(crate) fn allocated(&self) -> usize {
        self.buf.capacity()
    }

    /// Moves the end along by `n` bytes that the ring does not keep (they are in the spool).
    /// Anything retained before them is no longer the newest run of bytes, so it is dropped.
    pub(crate) fn advance(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        self.buf.clear();
        self.head = 0;
        self.end += n;
    }

    /// Drops the retained bytes before log offset `x` (they reached the spool); the newer ones
    /// stay, in order.
    pub(crate) fn drop_before(&mut self, x: u64) {
        let n = x.saturating_sub(self.start()).min(self.buf.len() as u64) as usize;
        if n == 0 {
            return;
        }
        if self.buf.len() == n {
            self.buf.clear();
        } else {
            self.buf.rotate_left(self.head);
            self.buf.drain(..n);
        }
        self.head = 0;
    }

    /// Appends bytes, evicting the oldest once `cap` is reached.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.end += data.len() as u64;
        if self.cap == 0 || data.is_empty() {
            return;
        }
        if data.len() >= self.cap {
            let newest = &data[data.len() - self.cap..];
            self.reserve_for(self.cap);
            self.buf.clear();
            self.buf.extend_from_slice(newest);
            self.head = 0;
            return;
        }
        let mut data = data;
        if self.buf.len() < self.cap {
            let n = data.len().min(self.cap - self.buf.len());
            self.reserve_for(self.buf.len() + n);
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if data.is_empty() {
                return;
            }
        }
        // Full ring: overwrite the oldest bytes, in at most two slices.
        let first = data.len().min(self.cap - self.head);
        self.buf[self.head..self.head + first].copy_from_slice(&data[..first]);
        let rest = &data[first..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.head = (self.head + data.len()) % self.cap;
    }

    /// Grows the allocation (never past `cap`) so `needed` bytes fit.
    fn reserve_for(&mut self, needed: usize) {
        let capacity = self.buf.capacity();
        if needed <= capacity {
            return;
        }
        let target = needed.max(capacity.saturating_mul(2)).max(MIN_GROWTH_BYTES).min(self.cap);
        self.buf.reserve_exact(target - self.buf.len());
    }

    /// Copies the log bytes `[from, from + out.len())` into `out`. The range must lie within
    /// `[start(), end())`; returns `false` (copying nothing) if it does not.
    pub(crate) fn copy_to(&self, from: u64, out: &mut [u8]) -> bool {
        let Some(to) = from.checked_add(out.len() as u64) else { return false };
        if from < self.start() || to > self.end {
            return false;
        }
        if out.is_empty() {
            return true;
        }
        let len = self.buf.len();
        let i = (self.head + (from - self.start()) as usize) % len;
        let first = out.len().min(len - i);
        out[..first].copy_from_slice(&self.buf[i..i + first]);
        let rest = out.len() - first;
        out[first..].copy_from_slice(&self.buf[..rest]);
        true
    }

    /// Newlines in the retained bytes `[from, end())` (`from` clamped to the retained range).
    pub(crate) fn count_newlines_from(&self, from: u64) -> u64 {
        let from = from.max(self.start());
        if from >= self.end {
            return 0;
        }
        let len = self.buf.len();
        let i = (self.head + (from - self.start()) as usize) % len;
        let n = (self.end - from) as usize;
        let first = n.min(len - i);
        super::count_newlines(&self.buf[i..i + first])
            + super::count_newlines(&self.buf[..n - first])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn contents(t: &HotTail) -> Vec<u8> {
        let mut out = vec![0; t.len()];
        assert!(t.copy_to(t.start(), &mut out));
        out
    }

    #[test]
    fn matches_a_reference_tail_across_wraps() {
        let mut t = HotTail::new(10);
        let mut all = Vec::new();
        for (i, n) in [3usize, 4, 2, 5, 1, 9, 10, 11, 0, 7].iter().enumerate() {
            let chunk: Vec<u8> = (0..*n).map(|k| (i * 16 + k) as u8).collect();
            t.push(&chunk);
            all.extend_from_slice(&chunk);
            let keep = all.len().min(10);
            assert_eq!(contents(&t), all[all.len() - keep..]);
            assert_eq!(t.end(), all.len() as u64);
            assert!(t.allocated() <= 10);
        }
        // Sub-ranges straddling the wrap point.
        let mut two = [0u8; 2];
        assert!(t.copy_to(t.end() - 2, &mut two));
        assert_eq!(two, all[all.len() - 2..]);
        assert!(!t.copy_to(t.start() - 1, &mut two));
        assert_eq!(t.count_newlines_from(0), 0);
    }

    #[test]
    fn grows_lazily_up_to_cap() {
        let mut t = HotTail::new(1 << 20);
        t.push(b"hello\n");
        assert!(t.allocated() <= MIN_GROWTH_BYTES);
        t.push(&vec![b'x'; 3 << 20]);
        assert_eq!(t.allocated(), 1 << 20);
        assert_eq!(t.count_newlines_from(0), 0);
    }

    #[test]
    fn advance_keeps_nothing_and_moves_the_end() {
        let mut t = HotTail::new(16);
        t.advance(1 << 30);
        assert_eq!((t.start(), t.end(), t.allocated()), (1 << 30, 1 << 30, 0));
        t.push(b"tail");
        let mut out = [0u8; 4];
        assert!(t.copy_to(1 << 30, &mut out));
        assert_eq!(&out, b"tail");
        t.advance(2);
        assert_eq!((t.start(), t.end(), t.len()), ((1 << 30) + 6, (1 << 30) + 6, 0));
    }

    #[test]
    fn drop_before_keeps_the_newer_bytes_in_order() {
        let mut t = HotTail::new(8);
        t.push(b"abcdefghij");
        assert_eq!(contents(&t), b"cdefghij");
        t.drop_before(5);
        assert_eq!((t.start(), contents(&t)), (5, b"fghij".to_vec()));
        t.push(b"klm");
        assert_eq!(contents(&t), b"fghijklm");
        t.drop_before(99);
        assert_eq!((t.start(), t.len()), (13, 0));
    }

    #[test]
    fn zero_cap_keeps_nothing() {
        let mut t = HotTail::new(0);
        t.push(b"abc");
        assert_eq!((t.start(), t.end(), t.allocated()), (3, 3, 0));
    }
}
