//! What a result file records about the run that made it: the version and commit measured, the
//! date, the machine (cores, memory, kernel) and the exact command line, and — in words — what
//! ran (sizes, counts, durations), so a `--quick` table never carries the labels of a full run.

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// One invocation of a bench, as its result files record it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// `stockade --version`'s number.
    pub version: String,
    /// The source tree's commit (`git rev-parse --short HEAD`, `+dirty` with local changes), or
    /// `unknown` outside a git checkout.
    pub commit: String,
    /// When the run started, UTC (RFC 3339).
    pub date: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// The CPU model, from /proc/cpuinfo.
    pub cpu: String,
    /// Total memory, MiB (/proc/meminfo).
    pub memory_mib: u64,
    /// The kernel (`uname -sr`).
    pub kernel: String,
    /// The command line, as typed (arguments shell-quoted).
    pub command_line: String,
    /// Whether `--quick` sizes were used.
    pub quick: bool,
    /// What ran, in words: sizes, counts and durations actually used.
    pub ran: String,
}

impl RunMeta {
    /// Collect everything but `ran` from this process and machine (Linux: /proc).
    pub fn collect(version: &str, quick: bool) -> RunMeta {
        RunMeta {
            version: version.to_owned(),
            commit: commit(Path::new(env!("CARGO_MANIFEST_DIR"))),
            date: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: cpu_model().unwrap_or_else(|| "unknown".into()),
            memory_mib: mem_total_kib().map_or(0, |k| k / 1024),
            kernel: kernel(),
            command_line: std::env::args().map(|a| quote(&a)).collect::<Vec<_>>().join(" "),
            quick,
            ran: String::new(),
        }
    }

    /// The record as Markdown lines (for the top of `summary.md` and `edges.md`).
    pub fn markdown(&self) -> String {
        format!(
            "- Ran: {}{}\n- Stockade {} (commit {}), {}\n- Machine: {} cores ({}), {:.1} GiB memory, {}\n- Command: `{}`\n",
            self.ran,
            if self.quick { " (`--quick`)" } else { "" },
            self.version,
            self.commit,
            self.date,
            self.cores,
            self.cpu,
            self.memory_mib as f64 / 1024.0,
            self.kernel,
            self.command_line.replace('`', "'"),
        )
    }
}

/// A size as the labels say it: `20 MiB`, `1 GiB`, `512 KiB`, `1.50 MiB`.
pub fn size_label(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    } else if bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

fn commit(dir: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c) if !c.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{c}+dirty") } else { c }
        }
        _ => "unknown (not built from a git checkout)".into(),
    }
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn mem_total_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn kernel() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let name = std::fs::read_to_string("/proc/sys/kernel/ostype").unwrap_or_default();
    match (name.trim(), release.trim()) {
        ("", "") => "unknown kernel".into(),
        (n, r) => format!("{n} {r}").trim().to_owned(),
    }
}

fn quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe { word.to_owned() } else { format!("'{}'", word.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_labelled_as_they_are() {
        assert_eq!(size_label(20 << 20), "20 MiB");
        assert_eq!(size_label(2 << 20), "2 MiB");
        assert_eq!(size_label(1 << 30), "1 GiB");
        assert_eq!(size_label(512 << 10), "512 KiB");
        assert_eq!(size_label(3 << 19), "1.50 MiB");
    }

    #[test]
    fn the_record_names_the_machine_and_the_command() {
        let mut m = RunMeta::collect("9.9.9", true);
        m.ran = "N = 1, 2; 1 MiB each".into();
        let md = m.markdown();
        assert!(md.contains("- Ran: N = 1, 2; 1 MiB each (`--quick`)"), "{md}");
        assert!(md.contains("Stockade 9.9.9 (commit "), "{md}");
        assert!(m.cores > 0 && m.memory_mib > 0, "{m:?}");
        assert!(m.kernel.starts_with("Linux"), "{m:?}");
        assert!(md.contains("- Command: `"), "{md}");
    }
}
