//! The stream index: an on-disk list of stream transitions, so a `stream=stderr` read works over
//! the whole log without an in-memory list that grows with output.
//!
//! Each record is fixed-size (binary-searchable with `pread`): the log offset where a stream
//! starts, the stream, and how many bytes each stream had printed before that offset (so "bytes
//! of stderr before offset X" is one lookup, not a walk). New records collect in a small fixed
//! buffer, kept in the log's state so readers see them, and are written when it fills up and on
//! `finish()`. A crash loses at most [`PENDING_RECORDS`] transitions; recovery then attributes
//! the rest of the log to the last stream on disk.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use stockade_proto::Stream;

use super::OutputError;

/// Bytes per record: offset, 4 per-stream counters, stream tag (padded).
pub(crate) const RECORD_BYTES: usize = 48;
/// Records buffered in memory before they are written (about 4.7 KiB).
pub(crate) const PENDING_RECORDS: usize = 100;

/// Position of a stream in per-stream arrays.
pub(crate) fn stream_slot(s: Stream) -> usize {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
        Stream::Pty => 2,
        Stream::Combined => 3,
    }
}

fn slot_stream(slot: u8) -> Option<Stream> {
    Some(match slot {
        0 => Stream::Stdout,
        1 => Stream::Stderr,
        2 => Stream::Pty,
        3 => Stream::Combined,
        _ => return None,
    })
}

/// From `offset` on, bytes belong to `stream` (until the next transition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transition {
    pub(crate) offset: u64,
    pub(crate) stream: Stream,
    /// Bytes each stream printed before `offset`, by [`stream_slot`].
    pub(crate) before: [u64; 4],
}

impl Transition {
    fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[..8].copy_from_slice(&self.offset.to_le_bytes());
        for (i, v) in self.before.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        b[40] = stream_slot(self.stream) as u8;
        b
    }

    fn decode(b: &[u8]) -> Option<Transition> {
        let u = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?))
        };
        Some(Transition {
            offset: u(0)?,
            before: [u(8)?, u(16)?, u(24)?, u(32)?],
            stream: slot_stream(*b.get(40)?)?,
        })
    }

    /// Bytes of `s` printed before log offset `x` (`x` at or after this record's offset).
    pub(crate) fn stream_bytes_before(&self, s: Stream, x: u64) -> u64 {
        let own = if self.stream == s { x.saturating_sub(self.offset) } else { 0 };
        self.before[stream_slot(s)] + own
    }
}

/// Records not yet on disk, plus how many are.
#[derive(Debug)]
pub(crate) struct PendingIndex {
    recs: [Transition; PENDING_RECORDS],
    len: usize,
    /// Records already written to the index file.
    pub(crate) durable: u64,
}

impl PendingIndex {
    pub(crate) fn new(durable: u64) -> PendingIndex {
        let blank = Transition { offset: 0, stream: Stream::Stdout, before: [0; 4] };
        PendingIndex { recs: [blank; PENDING_RECORDS], len: 0, durable }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == PENDING_RECORDS
    }

    pub(crate) fn push(&mut self, t: Transition) {
        if self.len < PENDING_RECORDS {
            self.recs[self.len] = t;
            self.len += 1;
        }
    }

    pub(crate) fn records(&self) -> &[Transition] {
        &self.recs[..self.len]
    }

    /// The pending records, encoded for one write.
    pub(crate) fn encoded(&self) -> ([u8; PENDING_RECORDS * RECORD_BYTES], usize) {
        let mut out = [0u8; PENDING_RECORDS * RECORD_BYTES];
        for (i, r) in self.records().iter().enumerate() {
            out[i * RECORD_BYTES..(i + 1) * RECORD_BYTES].copy_from_slice(&r.encode());
        }
        (out, self.len * RECORD_BYTES)
    }

    /// The first `n` pending records reached the disk.
    pub(crate) fn mark_durable(&mut self, n: usize) {
        let n = n.min(self.len);
        self.recs.copy_within(n..self.len, 0);
        self.len -= n;
        self.durable += n as u64;
    }
}

/// Writes `bytes` (whole records) at record position `durable`.
pub(crate) fn write_records(file: &File, durable: u64, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all_at(bytes, durable * RECORD_BYTES as u64)
}

/// A reader's view of the index: the durable records (read from disk on demand) followed by a
/// copy of the pending ones, ending at log offset `total`.
pub(crate) struct IndexView {
    file: Arc<File>,
    durable: u64,
    pending: Vec<Transition>,
    pub(crate) total: u64,
}

impl IndexView {
    pub(crate) fn new(
        file: Arc<File>,
        durable: u64,
        pending: &[Transition],
        total: u64,
    ) -> IndexView {
        IndexView { file, durable, pending: pending.to_vec(), total }
    }

    pub(crate) fn len(&self) -> u64 {
        self.durable + self.pending.len() as u64
    }

    pub(crate) fn get(&self, i: u64) -> Result<Transition, OutputError> {
        if i >= self.durable {
            let p = (i - self.durable) as usize;
            return self.pending.get(p).copied().ok_or(OutputError::IndexCorrupt { record: i });
        }
        let mut b = [0u8; RECORD_BYTES];
        self.file
            .read_exact_at(&mut b, i * RECORD_BYTES as u64)
            .map_err(|e| OutputError::io("read stream index", e))?;
        Transition::decode(&b).ok_or(OutputError::IndexCorrupt { record: i })
    }

    /// Index of the last record whose offset is `<= x` (None before the first record).
    pub(crate) fn find(&self, x: u64) -> Result<Option<u64>, OutputError> {
        let (mut lo, mut hi) = (0u64, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.get(mid)?.offset <= x {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo.checked_sub(1))
    }

    /// The log range `[start, end)` covered by record `i`, clipped to `total`.
    pub(crate) fn segment(&self, i: u64) -> Result<(Transition, u64), OutputError> {
        let t = self.get(i)?;
        let end = if i + 1 < self.len() { self.get(i + 1)?.offset } else { self.total };
        Ok((t, end.min(self.total)))
    }

    /// Bytes of stream `s` before log offset `x`.
    pub(crate) fn stream_bytes_before(&self, s: Stream, x: u64) -> Result<u64, OutputError> {
        Ok(match self.find(x)? {
            Some(i) => self.get(i)?.stream_bytes_before(s, x),
            None => 0,
        })
    }

    /// Stream of the byte at log offset `x`, if recorded.
    pub(crate) fn stream_at(&self, x: u64) -> Result<Option<Stream>, OutputError> {
        Ok(match self.find(x)? {
            Some(i) => Some(self.get(i)?.stream),
            None => None,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_search() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.path().join("i"))
                .unwrap(),
        );
        let mut p = PendingIndex::new(0);
        let a = Transition { offset: 0, stream: Stream::Stdout, before: [0; 4] };
        let b = Transition { offset: 10, stream: Stream::Stderr, before: [10, 0, 0, 0] };
        let c = Transition { offset: 15, stream: Stream::Stdout, before: [10, 5, 0, 0] };
        p.push(a);
        p.push(b);
        let (bytes, n) = p.encoded();
        write_records(&file, p.durable, &bytes[..n]).unwrap();
        p.mark_durable(2);
        p.push(c);
        let v = IndexView::new(file, p.durable, p.records(), 20);
        assert_eq!(v.len(), 3);
        assert_eq!(v.get(1).unwrap(), b);
        assert_eq!(v.find(9).unwrap(), Some(0));
        assert_eq!(v.find(10).unwrap(), Some(1));
        assert_eq!(v.find(99).unwrap(), Some(2));
        assert_eq!(v.segment(2).unwrap(), (c, 20));
        assert_eq!(v.stream_bytes_before(Stream::Stdout, 18).unwrap(), 13);
        assert_eq!(v.stream_bytes_before(Stream::Stderr, 18).unwrap(), 5);
        assert_eq!(v.stream_bytes_before(Stream::Stderr, 12).unwrap(), 2);
        assert_eq!(v.stream_at(12).unwrap(), Some(Stream::Stderr));
    }
}
