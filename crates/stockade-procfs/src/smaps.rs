//! `/proc/<pid>/smaps`: a process's mappings and how much of each is resident, and which of them
//! map the process's own executable (matched by device and inode, so a binary replaced or
//! deleted on disk is still recognised).

use std::os::unix::fs::MetadataExt;

/// One mapping of `/proc/<pid>/smaps`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions as printed: `r-xp`, `rw-p`, …
    pub perms: String,
    /// Device as `(major, minor)`; `(0, 0)` for anonymous memory.
    pub dev: (u32, u32),
    /// Inode; 0 for anonymous memory.
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `[stack]`); empty for anonymous memory.
    pub path: String,
    /// `Rss`, KiB.
    pub rss_kib: u64,
    /// `Anonymous`, KiB: private pages copied on write (never file pages).
    pub anonymous_kib: u64,
}

impl Mapping {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// An empty range (never printed by the kernel; here for `len`'s sake).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writable (`w` in the permissions).
    pub fn writable(&self) -> bool {
        self.perms.as_bytes().get(1) == Some(&b'w')
    }

    /// Executable (`x` in the permissions).
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

/// Parses the text of `/proc/<pid>/smaps`. Lines it does not know are skipped.
pub fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        if let Some(m) = parse_header(line) {
            out.push(m);
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(v) = line.strip_prefix("Rss:") {
            cur.rss_kib = kib(v);
        } else if let Some(v) = line.strip_prefix("Anonymous:") {
            cur.anonymous_kib = kib(v);
        }
    }
    out
}

/// `start-end perms offset major:minor inode [path]`, or `None` for a field line.
fn parse_header(line: &str) -> Option<Mapping> {
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = f.next()?;
    if perms.len() != 4 {
        return None;
    }
    let _offset = f.next()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let dev = (u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?);
    let inode = f.next()?.parse().ok()?;
    let path = f.collect::<Vec<_>>().join(" ");
    Some(Mapping {
        start,
        end,
        perms: perms.to_owned(),
        dev,
        inode,
        path,
        rss_kib: 0,
        anonymous_kib: 0,
    })
}

fn kib(v: &str) -> u64 {
    v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0)
}

/// The mappings of a process (`pid: None`: this one); `None` once it is gone or unreadable.
pub fn read_smaps(pid: Option<u32>) -> Option<Vec<Mapping>> {
    let text = std::fs::read_to_string(proc_path(pid, "smaps")).ok()?;
    Some(parse_smaps(&text))
}

/// The `(major, minor)` device and inode of a process's executable (`pid: None`: this one).
pub fn exe_id(pid: Option<u32>) -> Option<((u32, u32), u64)> {
    let meta = std::fs::metadata(proc_path(pid, "exe")).ok()?;
    Some((dev_parts(meta.dev()), meta.ino()))
}

/// The mappings among `maps` of the executable `exe` (from [`exe_id`]).
pub fn exe_mappings(maps: &[Mapping], exe: ((u32, u32), u64)) -> impl Iterator<Item = &Mapping> {
    maps.iter().filter(move |m| m.inode != 0 && (m.dev, m.inode) == exe)
}

/// KiB of a process's own executable resident now (`pid: None`: this one).
pub fn exe_rss_kib(pid: Option<u32>) -> Option<u64> {
    let exe = exe_id(pid)?;
    let maps = read_smaps(pid)?;
    Some(exe_mappings(&maps, exe).map(|m| m.rss_kib).sum())
}

fn proc_path(pid: Option<u32>, name: &str) -> String {
    match pid {
        Some(p) => format!("/proc/{p}/{name}"),
        None => format!("/proc/self/{name}"),
    }
}

/// Splits a `st_dev` into the `(major, minor)` that `/proc/<pid>/maps` prints (glibc encoding).
fn dev_parts(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
5623bedfc000-5623bedfe000 r--p 00000000 fe:00 247282                     /usr/bin/head
Size:                  8 kB
Rss:                   8 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
5623bedfe000-5623bee03000 r-xp 00002000 fe:00 247282                     /usr/bin/my tool
Rss:                  20 kB
Anonymous:             4 kB
7ffd1000-7ffd3000 rw-p 00000000 00:00 0                          [stack]
Rss:                  12 kB
Anonymous:            12 kB
";

    #[test]
    fn parses_headers_and_sizes() {
        let m = parse_smaps(SAMPLE);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].start, 0x5623_bedf_c000);
        assert_eq!(m[0].len(), 0x2000);
        assert_eq!(m[0].dev, (0xfe, 0));
        assert_eq!(m[0].inode, 247_282);
        assert_eq!(m[0].rss_kib, 8);
        assert!(!m[0].writable() && !m[0].executable());
        assert_eq!(m[1].path, "/usr/bin/my tool");
        assert_eq!((m[1].rss_kib, m[1].anonymous_kib), (20, 4));
        assert!(m[1].executable());
        assert_eq!(m[2].path, "[stack]");
        assert!(m[2].writable());
        let exe: Vec<_> = exe_mappings(&m, ((0xfe, 0), 247_282)).collect();
        assert_eq!(exe.len(), 2);
    }

    #[test]
    fn finds_this_test_binarys_own_pages() {
        let rss = exe_rss_kib(None).unwrap();
        assert!(rss > 0, "the running test binary has resident text");
    }
}
