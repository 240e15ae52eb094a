//! cgroup v2: finding the hierarchy, one directory per session, `cgroup.kill`, `cgroup.events`.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A mounted cgroup2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cgroup2Mount {
    /// Where it is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
    pub mount_point: PathBuf,
    /// The cgroup path the mount shows at its root (`/` unless bind-mounted from inside).
    pub root: String,
}

impl Cgroup2Mount {
    /// The directory of the cgroup whose path (as in `/proc/<pid>/cgroup`) is `cg_path`.
    pub(crate) fn dir_of(&self, cg_path: &str) -> PathBuf {
        let root = self.root.trim_end_matches('/');
        let rel = cg_path.strip_prefix(root).unwrap_or(cg_path).trim_start_matches('/');
        if rel.is_empty() { self.mount_point.clone() } else { self.mount_point.join(rel) }
    }

    /// The cgroup path (as in `/proc/<pid>/cgroup`) of the directory `dir`, if it is inside.
    pub(crate) fn path_of(&self, dir: &Path) -> Option<String> {
        let rel = dir.strip_prefix(&self.mount_point).ok()?;
        let root = self.root.trim_end_matches('/');
        let rel = rel.to_str()?;
        Some(if rel.is_empty() {
            if root.is_empty() { "/".to_owned() } else { root.to_owned() }
        } else {
            format!("{root}/{rel}")
        })
    }
}

/// Undoes the octal escapes (`\040` for space, …) of a `/proc/self/mountinfo` field.
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds the first cgroup2 mount in the text of `/proc/self/mountinfo`.
pub(crate) fn parse_mountinfo(text: &str) -> Option<Cgroup2Mount> {
    text.lines().find_map(|line| {
        // `id parent major:minor root mount_point options [optional…] - fstype source super_options`
        let (left, right) = line.split_once(" - ")?;
        if right.split_ascii_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = left.split_ascii_whitespace();
        let root = unescape_mount_field(f.nth(3)?);
        let mount_point = PathBuf::from(unescape_mount_field(f.next()?));
        Some(Cgroup2Mount { mount_point, root })
    })
}

/// The cgroup v2 path of this process, from the text of `/proc/self/cgroup` (the `0::` line).
pub(crate) fn parse_own_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
}

/// Creates `dir` (and missing parents). An existing directory is fine.
pub(crate) fn ensure_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

/// Creates a fresh session cgroup `<instance_dir>/<leaf>` (or `<leaf>.<n>` when taken).
pub(crate) fn create_session_dir(instance_dir: &Path, leaf: &str) -> io::Result<PathBuf> {
    /// How many suffixed names to try when `<leaf>` already exists.
    const MAX_NAME_ATTEMPTS: u32 = 64;
    for attempt in 0..MAX_NAME_ATTEMPTS {
        let name = if attempt == 0 { leaf.to_owned() } else { format!("{leaf}.{attempt}") };
        let dir = instance_dir.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            // Another instance in this process may have just removed the (empty) instance dir.
            Err(e) if e.kind() == io::ErrorKind::NotFound => ensure_dir(instance_dir)?,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("no free cgroup name for {leaf}")))
}

/// Opens `<dir>/cgroup.procs` for writing (close-on-exec), for placement in a child before exec.
pub(crate) fn open_procs_for_placement(dir: &Path) -> io::Result<OwnedFd> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.procs"))?;
    Ok(OwnedFd::from(file))
}

/// The pids in `<dir>/cgroup.procs` and in every cgroup below it (a session process may create
/// sub-cgroups and move into them). Live processes only: zombies are not listed. A removed
/// directory reads as empty.
///
/// `list` counts every running session this way, so the common case costs five system calls:
/// the file is read to its end without the sizing `statx`/`lseek` of a growing read, and the
/// directory is listed only when its link count says it has subdirectories (a cgroup
/// directory links to itself, its parent and each child cgroup).
pub(crate) fn procs(dir: &Path) -> io::Result<Vec<u32>> {
    let mut text = Vec::new();
    match read_to_end(&dir.join("cgroup.procs"), &mut text) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    }
    let mut pids: Vec<u32> = text
        .split(u8::is_ascii_whitespace)
        .filter_map(|w| std::str::from_utf8(w).ok()?.parse().ok())
        .collect();
    if fs::metadata(dir).is_ok_and(|m| m.nlink() == 2) {
        return Ok(pids);
    }
    for sub in subdirs(dir) {
        pids.extend(procs(&sub)?);
    }
    Ok(pids)
}

/// Reads a small kernel file to its end into `out`: open, reads until one returns 0, close.
fn read_to_end(path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
    use std::io::Read as _;
    let mut file = fs::File::open(path)?;
    let mut chunk = [0u8; 4096];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether anything in the cgroup (or below) is alive, from `cgroup.events`.
pub(crate) fn populated(dir: &Path) -> io::Result<bool> {
    match fs::read_to_string(dir.join("cgroup.events")) {
        Ok(text) => Ok(text.lines().any(|l| l.trim() == "populated 1")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// SIGKILLs every process in the cgroup and below, atomically with respect to forks.
pub(crate) fn kill(dir: &Path) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(dir.join("cgroup.kill"))?;
    f.write_all(b"1")
}

/// Removes an empty cgroup directory. A missing one is fine.
pub(crate) fn remove(dir: &Path) -> io::Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes a session cgroup and the (empty) sub-cgroups its processes may have made. Only for a
/// session's own directory: never for the per-daemon directory other sessions live in.
pub(crate) fn remove_session(dir: &Path) -> io::Result<()> {
    for sub in subdirs(dir) {
        remove_session(&sub)?;
    }
    remove(dir)
}

/// Checks that a child really can be moved into a cgroup under `instance_dir`: creates a probe
/// cgroup, forks a child that writes itself into it and exits, and removes the probe.
pub(crate) fn probe_placement(instance_dir: &Path) -> Result<(), String> {
    let dir = create_session_dir(instance_dir, "probe")
        .map_err(|e| format!("cannot create a cgroup under {}: {e}", instance_dir.display()))?;
    let result = probe_in(&dir);
    let _ = remove(&dir);
    result
}

fn probe_in(dir: &Path) -> Result<(), String> {
    if !dir.join("cgroup.kill").exists() {
        return Err("cgroup.kill is missing (kernel older than 5.14)".to_owned());
    }
    let procs = open_procs_for_placement(dir)
        .map_err(|e| format!("cannot open {}/cgroup.procs: {e}", dir.display()))?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&procs);
    // SAFETY: the child only calls async-signal-safe functions (write, _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork for the cgroup probe failed: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls only, on a valid fd and static buffer.
        unsafe {
            let ok = libc::write(raw, b"0".as_ptr().cast(), 1) == 1;
            libc::_exit(if ok { 0 } else { 1 });
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the specific child forked above, nothing else.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(format!("waiting for the cgroup probe failed: {err}"));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("moving a child into {} was refused", dir.display()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_hybrid_cgroup2_mount() {
        let m = parse_mountinfo(HYBRID).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m.root, "/");
        assert_eq!(m.dir_of("/"), PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m.dir_of("/a/b"), PathBuf::from("/sys/fs/cgroup/unified/a/b"));
        assert_eq!(m.path_of(Path::new("/sys/fs/cgroup/unified/a/b")).as_deref(), Some("/a/b"));
        assert_eq!(m.path_of(Path::new("/sys/fs/cgroup/unified")).as_deref(), Some("/"));
    }

    #[test]
    fn finds_unified_mount_with_optional_fields_and_escapes() {
        let text = "29 23 0:26 /sub /sys/fs/cg\\040x rw,nosuid shared:4 master:1 - cgroup2 cgroup2 rw,nsdelegate\n";
        let m = parse_mountinfo(text).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cg x"));
        assert_eq!(m.root, "/sub");
        assert_eq!(m.dir_of("/sub/user.slice"), PathBuf::from("/sys/fs/cg x/user.slice"));
        assert_eq!(m.path_of(Path::new("/sys/fs/cg x/s")).as_deref(), Some("/sub/s"));
    }

    #[test]
    fn no_cgroup2_mount() {
        assert!(
            parse_mountinfo("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
                .is_none()
        );
    }

    #[test]
    fn own_cgroup_line() {
        assert_eq!(parse_own_cgroup("9:name=systemd:/\n0::/\n").as_deref(), Some("/"));
        assert_eq!(
            parse_own_cgroup("0::/user.slice/x.scope\n").as_deref(),
            Some("/user.slice/x.scope")
        );
        assert!(parse_own_cgroup("1:cpu:/\n").is_none());
    }
}
