//! A PTY (or stdin-pipe) session driven the way the session layer drives it: `spawn_pty` /
//! `spawn`, the output drained by the shared drain thread (`stockade_log::Drainer`, as the
//! engine drains) into a temporary `OutputLog`, input through `write_input`. Every wait is
//! bounded; dropping a [`Run`] kills what it started (through the process tests' [`Guard`]) and
//! cancels its drain, passed or failed.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use stockade_log::{DrainHandle, DrainSummary, Drainer, OutputConfig, OutputLog, strip_ansi};
use stockade_proc::{
    DEFAULT_INPUT_TIMEOUT, ProcessTree, SpawnSpec, StdioSpec, TerminateOptions, spawn, spawn_pty,
    try_clone_master, write_input,
};
use stockade_proto::Stream;
use stockade_proto::rpc::PtySize;

use crate::process_common::{Guard, Mode, marked_pids, unique_marker};

/// Upper bound on any one wait (for output, exit, EOF): a hang detector, not a timer.
pub const BOUND: Duration = Duration::from_secs(20);
/// How often waits poll.
pub const POLL: Duration = Duration::from_millis(20);
/// Grace before SIGKILL in these tests (an interactive shell ignores SIGTERM).
pub const GRACE: Duration = Duration::from_millis(300);

pub struct Run {
    pub tree: Arc<ProcessTree>,
    pub log: Arc<OutputLog>,
    /// A duplicate of the PTY master (write, resize), when on a PTY.
    pub master: Option<OwnedFd>,
    /// The stdin pipe's write end, when not on a PTY and asked for.
    pub stdin: Option<OwnedFd>,
    pub entry: String,
    /// The session's drain until it is joined.
    drain: Mutex<Option<DrainHandle>>,
    summary: OnceLock<DrainSummary>,
    // Dropped after the fields above (declaration order): processes first, then the directory.
    _guard: Guard,
    _dir: tempfile::TempDir,
}

fn output_config() -> OutputConfig {
    OutputConfig::default()
}

impl Run {
    /// `program args…` on a PTY of `size`, with `env` added.
    pub fn pty(
        mode: Mode,
        test: &str,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        size: PtySize,
    ) -> Run {
        let marker = unique_marker(test, mode);
        let spec = SpawnSpec {
            program: program.into(),
            args: args.iter().map(OsString::from).collect(),
            cwd: None,
            base_env: None,
            env: env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            stdin: StdioSpec::Null,
            stdout: StdioSpec::Null,
            stderr: StdioSpec::Null,
            marker,
            sandbox: None,
            file_size_limit: None,
        };
        let spawned = spawn_pty(spec, size, &mode.containment()).unwrap();
        let master = spawned.pty_master.unwrap();
        let writer = try_clone_master(&master).unwrap();
        Run::start(spawned.tree, vec![(Stream::Pty, master)], Some(writer), None)
    }

    /// `/bin/sh -c command` with stdin, stdout and stderr as pipes (no terminal).
    pub fn piped(mode: Mode, test: &str, command: &str) -> Run {
        let mut spec = SpawnSpec::shell(command, unique_marker(test, mode));
        spec.stdin = StdioSpec::Pipe;
        spec.stdout = StdioSpec::Pipe;
        spec.stderr = StdioSpec::Pipe;
        let spawned = spawn(spec, &mode.containment()).unwrap();
        let sources = vec![
            (Stream::Stdout, spawned.stdout.unwrap()),
            (Stream::Stderr, spawned.stderr.unwrap()),
        ];
        Run::start(spawned.tree, sources, None, spawned.stdin)
    }

    fn start(
        tree: ProcessTree,
        sources: Vec<(Stream, OwnedFd)>,
        master: Option<OwnedFd>,
        stdin: Option<OwnedFd>,
    ) -> Run {
        let mut guard = Guard::new();
        let entry = tree.marker().env_entry();
        let tree = guard.track(tree);
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(OutputLog::create(dir.path().join("sh-1"), output_config()).unwrap());
        let drain = Drainer::global().unwrap().add(log.clone(), sources).unwrap();
        Run {
            tree,
            log,
            master,
            stdin,
            entry,
            drain: Mutex::new(Some(drain)),
            summary: OnceLock::new(),
            _guard: guard,
            _dir: dir,
        }
    }

    /// Writes to the terminal (or the stdin pipe), bounded.
    pub fn write(&self, bytes: &[u8]) {
        let fd = self.master.as_ref().or(self.stdin.as_ref()).expect("nothing to write to");
        write_input(fd, bytes, DEFAULT_INPUT_TIMEOUT).unwrap();
    }

    /// The whole log so far (tests print little).
    pub fn raw(&self) -> Vec<u8> {
        self.log.read_raw(0, usize::MAX).unwrap().0
    }

    /// The log so far as a model sees it by default.
    pub fn text(&self) -> String {
        strip_ansi(&self.raw())
    }

    /// Log offset now (to wait for output that comes after an input).
    pub fn offset(&self) -> u64 {
        self.log.stats().total_bytes
    }

    /// Waits (bounded) until the text printed after `from` contains `needle`; returns that text.
    pub async fn wait_for(&self, from: u64, needle: &str) -> String {
        let deadline = Instant::now() + BOUND;
        loop {
            let (bytes, _) = self.log.read_raw(from, usize::MAX).unwrap();
            let text = strip_ansi(&bytes);
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} did not appear within {BOUND:?}; output after {from}: {text:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (bounded) until some process of the session satisfies `pred` (on its pid and
    /// `/proc/<pid>/cmdline` joined by spaces); returns its pid.
    pub async fn wait_process(&self, what: &str, pred: impl Fn(u32, &str) -> bool) -> u32 {
        let deadline = Instant::now() + BOUND;
        loop {
            for pid in marked_pids(&self.entry) {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                if pred(pid, cmdline.trim_end()) {
                    return pid;
                }
            }
            assert!(Instant::now() < deadline, "no process of the session is {what}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (bounded) for the drain to reach end of file on every source.
    pub fn wait_drained(&self) -> DrainSummary {
        if let Some(s) = self.summary.get() {
            return s.clone();
        }
        let deadline = Instant::now() + BOUND;
        let mut drain = self.drain.lock().unwrap_or_else(PoisonError::into_inner);
        while !drain.as_ref().expect("the drain is joined once").is_finished() {
            assert!(Instant::now() < deadline, "drain did not reach EOF within {BOUND:?}");
            std::thread::sleep(POLL);
        }
        let summary = drain.take().expect("the drain is joined once").join().unwrap();
        assert!(!summary.cancelled);
        self.summary.get_or_init(|| summary).clone()
    }

    /// Terminates the tree through the engine's routine and checks "killed means gone": the
    /// report says terminated, the drain reaches EOF (the terminal or pipes are closed), and no
    /// process in `/proc` carries the session's marker.
    pub async fn terminate_and_verify(&self) {
        let report = tokio::time::timeout(
            BOUND,
            self.tree.terminate(&TerminateOptions { grace: GRACE, ..Default::default() }),
        )
        .await
        .expect("terminate hung");
        assert!(report.terminated, "{report:?}");
        self.wait_drained();
        self.log.finish().unwrap();
        assert_eq!(marked_pids(&self.entry), Vec::<u32>::new(), "processes left after terminate");
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // The guard (dropped after this) kills everything of the session, which closes the
        // terminal or pipes; cancelling too means the drain thread ends even if something
        // unkillable held them.
        let drain = self.drain.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(drain) = drain.take() {
            drain.cancel();
        }
    }
}

/// Both containments, for tests cheap enough to run twice.
pub const MODES: [Mode; 2] = [Mode::Cgroup, Mode::Fallback];

/// The default terminal size.
pub fn default_size() -> PtySize {
    PtySize::default()
}
