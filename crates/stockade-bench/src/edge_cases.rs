//! The ten edge cases of `bench edges` themselves: what each runs and checks, and the context it
//! runs in (`Ctx`: the daemon, its client, the sizes). `edges` runs them, times them and tables
//! them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stockade_client::{Client, raw_bytes};
use stockade_proto::rpc::{
    KillParams, KillResult, ListParams, ReadParams, ReadResult, RunParams, SessionInfo, method,
};
use stockade_proto::{
    Capture, DEFAULT_RETAINED_CAP, DiskPolicy, ReadMode, RunResult, SessionState,
};

use crate::daemon::Daemon;
use crate::runner::{Load, barrier_command};
use crate::{BenchError, MIB, Result};

/// How big the cases are.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// B4 / C2 / R2: bytes per command (4 commands).
    pub four_each: u64,
    /// B6 and the single line.
    pub thirty: u64,
    /// The slow stream's duration.
    pub slow: Duration,
    /// No polling: bytes of the one command.
    pub no_poll: u64,
    /// Poll after spooling: bytes.
    pub spooled: u64,
    /// Disk cap and what is printed against it.
    pub cap: u64,
    /// Printed against the cap.
    pub cap_print: u64,
}

impl Sizes {
    /// The default sizes.
    pub const FULL: Sizes = Sizes {
        four_each: 20 * MIB,
        thirty: 30 * MIB,
        slow: Duration::from_secs(120),
        no_poll: 200 * MIB,
        spooled: 20 * MIB,
        cap: 8 * MIB,
        cap_print: 32 * MIB,
    };
    /// `--quick`: small enough for CI on two cores.
    pub const QUICK: Sizes = Sizes {
        four_each: 2 * MIB,
        thirty: 3 * MIB,
        slow: Duration::from_secs(5),
        no_poll: 16 * MIB,
        spooled: 4 * MIB,
        cap: 2 * MIB,
        cap_print: 8 * MIB,
    };
}

pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) daemon: Daemon,
    pub(crate) tmp: PathBuf,
    pub(crate) sizes: Sizes,
    /// The capture mode of every run of this case.
    pub(crate) capture: Capture,
    /// Live sessions at once (for the memory bound).
    pub(crate) sessions: u64,
    pub(crate) output: u64,
    pub(crate) checked: Vec<String>,
}

pub(crate) type Case = (&'static str, &'static str, fn(&mut Ctx) -> Result<()>);

pub(crate) const CASES: [Case; 10] = [
    // `{four}`, `{thirty}`, `{slow}`, `{no_poll}` (and `_id` forms in case ids) are replaced by
    // the sizes that really ran (see `label`), so a `--quick` table says 2 MiB, not 20 MiB.
    ("B4_stdout_4x{four_id}", "4 background commands print {four} each on stdout at once", case_b4),
    ("C2_stderr_4x{four_id}", "the same on stderr", case_c2),
    ("R2_log_stream_4x{four_id}", "4 × {four} of a real log line", case_r2),
    ("B6_small_chunks_{thirty_id}", "{thirty} written 32 bytes at a time", case_b6),
    (
        "huge_single_line_{thirty_id}",
        "{thirty} without a newline; the tail view stays bounded",
        case_line,
    ),
    ("slow_stream_{slow}", "one line every 0.5 s for {slow}, followed by long polls", case_slow),
    (
        "no_poll_background",
        "{no_poll} in the background, never read: the pipe is drained",
        case_no_poll,
    ),
    (
        "poll_after_spool",
        "read everything by cursor after it finished: bytes exact",
        case_poll_after,
    ),
    (
        "kill_while_outputting",
        "kill a pipeline mid-stream: killed, verified, no survivors",
        case_kill,
    ),
    (
        "disk_cap_edge",
        "disk cap: `kill` ends an endless `yes` at the cap; `keep-head-tail` drops an exact middle",
        case_disk_cap,
    ),
];

fn fail(m: impl Into<String>) -> BenchError {
    BenchError::msg(m)
}

impl Ctx {
    fn run(&mut self, mut params: RunParams) -> Result<RunResult> {
        // Every run of the case on this variant's capture (a PTY has its own; a case that needs
        // the streams apart asks for a pipe each, which is still the pipe variant).
        let split = params.capture == stockade_proto::Capture::Split
            && self.capture == stockade_proto::Capture::Pipe;
        if params.pty.is_none() && !split {
            params.capture = self.capture;
        }
        let res = self.client.call::<method::Run>(params)?;
        self.daemon.track_session(res.pid);
        Ok(res)
    }

    fn run_bg(&mut self, command: String) -> Result<RunResult> {
        self.run(RunParams {
            command,
            background: true,
            yield_ms: Some(0),
            max_bytes: Some(1024),
            ..RunParams::default()
        })
    }

    fn list(&mut self) -> Result<Vec<SessionInfo>> {
        let l = self.client.call::<method::List>(ListParams::default())?;
        Ok(l.sessions)
    }

    /// Wait until every session has ended; their final records.
    fn wait_all(&mut self, limit: Duration) -> Result<Vec<SessionInfo>> {
        let start = Instant::now();
        loop {
            let all = self.list()?;
            if all.iter().all(|s| s.state.is_terminal()) {
                return Ok(all);
            }
            if start.elapsed() > limit {
                return Err(fail(format!("sessions still running after {}s", limit.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn read(&mut self, p: ReadParams) -> Result<ReadResult> {
        Ok(self.client.call::<method::Read>(p)?)
    }

    fn barrier(&self) -> PathBuf {
        self.tmp.join("barrier")
    }
}

fn limit_for(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (8 * MIB))
}

/// Every session exited 0 with exactly `bytes` printed and on disk.
fn check_exact(sessions: &[SessionInfo], bytes: u64, checked: &mut Vec<String>) -> Result<()> {
    for s in sessions {
        if s.state != (SessionState::Exited { code: 0 }) {
            return Err(fail(format!("{} ended {:?}", s.id, s.state)));
        }
        if s.total_bytes != bytes {
            return Err(fail(format!("{} counted {} bytes, printed {bytes}", s.id, s.total_bytes)));
        }
        let on_disk = std::fs::metadata(&s.spool_path).map(|m| m.len()).unwrap_or(0);
        if on_disk != bytes {
            return Err(fail(format!("{} has {on_disk} bytes on disk, printed {bytes}", s.id)));
        }
    }
    checked.push(format!("{}× {bytes} B exact in counts and spools", sessions.len()));
    Ok(())
}

fn four_at_once(ctx: &mut Ctx, load: Load) -> Result<()> {
    let bytes = ctx.sizes.four_each;
    let stderr = matches!(load, Load::Stderr);
    let cmd = barrier_command(&ctx.barrier(), bytes, 0, load);
    for _ in 0..4 {
        // Output on stderr is checked for its stream: a pipe each (the default merges them).
        ctx.run(RunParams {
            command: cmd.clone(),
            background: true,
            yield_ms: Some(0),
            max_bytes: Some(1024),
            capture: if stderr { stockade_proto::Capture::Split } else { Default::default() },
            ..RunParams::default()
        })?;
    }
    ctx.sessions = 4;
    ctx.output = 4 * bytes;
    std::fs::write(ctx.barrier(), b"go").map_err(|e| BenchError::io("release the barrier", e))?;
    let all = ctx.wait_all(limit_for(4 * bytes))?;
    check_exact(&all, bytes, &mut ctx.checked)
}

fn case_b4(ctx: &mut Ctx) -> Result<()> {
    four_at_once(ctx, Load::Stdout)
}

fn case_c2(ctx: &mut Ctx) -> Result<()> {
    four_at_once(ctx, Load::Stderr)?;
    // Every byte must be attributed to stderr.
    let ids: Vec<String> = ctx.list()?.into_iter().map(|s| s.id).collect();
    for id in ids {
        let r = ctx.read(ReadParams {
            id: id.clone(),
            mode: Some(ReadMode::Tail),
            stream: Some(stockade_proto::Stream::Stdout),
            max_bytes: Some(64),
            ..ReadParams::default()
        })?;
        // A log whose streams were not kept apart (file capture) answers for its one combined
        // stream and says so; only bytes the log calls stdout would be wrong.
        let stdout = r.view.stream == Some(stockade_proto::Stream::Stdout);
        if stdout && !r.view.output.trim().is_empty() && !r.view.output.contains('[') {
            return Err(fail(format!("{id}: stderr bytes shown as stdout")));
        }
    }
    ctx.checked.push("nothing attributed to stdout".into());
    Ok(())
}

fn case_r2(ctx: &mut Ctx) -> Result<()> {
    four_at_once(ctx, Load::LogStream)
}

fn case_b6(ctx: &mut Ctx) -> Result<()> {
    let bytes = ctx.sizes.thirty;
    ctx.output = bytes;
    ctx.run_bg(format!("yes X | head -c {bytes} | dd bs=32 status=none"))?;
    let all = ctx.wait_all(limit_for(bytes * 8))?;
    check_exact(&all, bytes, &mut ctx.checked)
}

fn case_line(ctx: &mut Ctx) -> Result<()> {
    let bytes = ctx.sizes.thirty;
    ctx.output = bytes;
    let res = ctx.run_bg(format!("head -c {bytes} /dev/zero | tr '\\0' x"))?;
    let all = ctx.wait_all(limit_for(bytes))?;
    check_exact(&all, bytes, &mut ctx.checked)?;
    let max = 50 * 1024;
    let r = ctx.read(ReadParams {
        id: res.id,
        mode: Some(ReadMode::Tail),
        max_bytes: Some(max),
        ..ReadParams::default()
    })?;
    if r.view.output.len() > max + 4096 {
        return Err(fail(format!(
            "tail view is {} bytes for max_bytes {max}",
            r.view.output.len()
        )));
    }
    if !r.view.truncated || r.view.total_lines != 1 {
        return Err(fail(format!(
            "tail view truncated={} total_lines={} (want true, 1)",
            r.view.truncated, r.view.total_lines
        )));
    }
    ctx.checked.push(format!("tail view {} B, 1 line, truncated", r.view.output.len()));
    Ok(())
}

fn case_slow(ctx: &mut Ctx) -> Result<()> {
    let lines = (ctx.sizes.slow.as_millis() / 500).max(2);
    let res = ctx.run_bg(format!(
        "i=0; while [ $i -lt {lines} ]; do echo \"slow line $i\"; i=$((i+1)); sleep 0.5; done"
    ))?;
    let expected: String = (0..lines).map(|i| format!("slow line {i}\n")).collect();
    ctx.output = expected.len() as u64;
    let mut got = Vec::new();
    let mut cursor = 0u64;
    let mut polls = 0u32;
    let deadline = Instant::now() + ctx.sizes.slow + Duration::from_secs(60);
    loop {
        let r = ctx.read(ReadParams {
            id: res.id.clone(),
            after: Some(cursor),
            mode: Some(ReadMode::Delta),
            raw: true,
            wait_ms: Some(2_000),
            max_bytes: Some(64 * 1024),
            ..ReadParams::default()
        })?;
        polls += 1;
        got.extend(raw_bytes(&r)?.unwrap_or_default());
        cursor = r.view.next_cursor;
        if r.state.is_terminal() && cursor >= r.view.total_bytes {
            break;
        }
        if Instant::now() > deadline {
            return Err(fail("the slow stream did not end in time"));
        }
    }
    if got != expected.as_bytes() {
        return Err(fail(format!(
            "read {} bytes by cursor, printed {}",
            got.len(),
            expected.len()
        )));
    }
    ctx.checked.push(format!("{lines} lines exact over {polls} long polls"));
    Ok(())
}

fn case_no_poll(ctx: &mut Ctx) -> Result<()> {
    let bytes = ctx.sizes.no_poll;
    ctx.output = bytes;
    ctx.run_bg(format!("yes X | head -c {bytes}"))?;
    let all = ctx.wait_all(limit_for(bytes))?;
    check_exact(&all, bytes, &mut ctx.checked)
}

fn case_poll_after(ctx: &mut Ctx) -> Result<()> {
    let bytes = ctx.sizes.spooled;
    ctx.output = bytes;
    let res = ctx.run_bg(format!("yes X | head -c {bytes}"))?;
    ctx.wait_all(limit_for(bytes))?;
    let mut cursor = 0u64;
    let mut n = 0u64;
    let mut reads = 0u32;
    loop {
        let r = ctx.read(ReadParams {
            id: res.id.clone(),
            after: Some(cursor),
            mode: Some(ReadMode::Delta),
            raw: true,
            max_bytes: Some(MIB as usize),
            ..ReadParams::default()
        })?;
        reads += 1;
        let chunk = raw_bytes(&r)?.unwrap_or_default();
        for (i, b) in chunk.iter().enumerate() {
            let want = if (cursor + i as u64).is_multiple_of(2) { b'X' } else { b'\n' };
            if *b != want {
                return Err(fail(format!(
                    "byte {} is {b:#x}, printed {want:#x}",
                    cursor + i as u64
                )));
            }
        }
        n += chunk.len() as u64;
        if r.view.next_cursor <= cursor || r.view.next_cursor >= r.view.total_bytes {
            cursor = r.view.next_cursor;
            break;
        }
        cursor = r.view.next_cursor;
    }
    if n != bytes || cursor != bytes {
        return Err(fail(format!("read {n} bytes (cursor {cursor}) by cursor, printed {bytes}")));
    }
    ctx.checked.push(format!("{bytes} B read back exact in {reads} reads, from the spool"));
    Ok(())
}

fn case_kill(ctx: &mut Ctx) -> Result<()> {
    let res = ctx.run_bg("(yes A | cat) & yes B | cat; wait".into())?;
    let start = Instant::now();
    loop {
        let all = ctx.list()?;
        if all.iter().any(|s| s.total_bytes > MIB) {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err(fail("no output before the kill"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let k: KillResult = ctx
        .client
        .call::<method::Kill>(KillParams { id: res.id.clone(), ..KillParams::default() })?;
    let printed = ctx.list()?.first().map_or(0, |s| s.total_bytes);
    ctx.output = printed;
    if !matches!(k.state, SessionState::Killed { .. }) {
        return Err(fail(format!("state after kill is {}", k.state.name())));
    }
    if !k.report.terminated || !k.report.survivors.is_empty() {
        return Err(fail(format!(
            "terminated={} survivors={:?}",
            k.report.terminated, k.report.survivors
        )));
    }
    let alive: Vec<u32> = k
        .report
        .pids_signalled
        .iter()
        .copied()
        .filter(|&p| stockade_procfs::rss_and_peak(Some(p)).is_some())
        .collect();
    if !alive.is_empty() {
        return Err(fail(format!("still running after kill: {alive:?}")));
    }
    ctx.checked.push(format!(
        "killed, {} pids signalled, none left, {} B printed",
        k.report.pids_signalled.len(),
        printed
    ));
    Ok(())
}

fn case_disk_cap(ctx: &mut Ctx) -> Result<()> {
    let (cap, print) = (ctx.sizes.cap, ctx.sizes.cap_print);
    ctx.sessions = 2;
    let base = RunParams {
        command: format!("yes X | head -c {print}"),
        background: true,
        yield_ms: Some(0),
        max_bytes: Some(1024),
        disk_cap: Some(cap),
        ..RunParams::default()
    };
    // Only the cap can end this one.
    let killed = ctx.run(RunParams {
        command: "yes X".into(),
        disk_policy: Some(DiskPolicy::Kill),
        ..base.clone()
    })?;
    let kept = RunParams { disk_policy: Some(DiskPolicy::KeepHeadTail), ..base };
    if ctx.capture == Capture::File {
        return file_capture_disk_cap(ctx, kept, &killed.id);
    }
    let kept = ctx.run(kept)?;
    let all = ctx.wait_all(limit_for(2 * print))?;
    let find = |id: &str| all.iter().find(|s| s.id == id).cloned();
    let (Some(k), Some(h)) = (find(&killed.id), find(&kept.id)) else {
        return Err(fail("a session is missing from list"));
    };
    let (k_disk, _) = check_killed_at_cap(&k, cap)?;
    // `keep-head-tail`: the head up to the cap, the newest retained_cap bytes, the middle dropped.
    if h.state != (SessionState::Exited { code: 0 }) || h.total_bytes != print {
        return Err(fail(format!(
            "keep-head-tail: ended {} with {} B (want exited 0, {print} B)",
            h.state.name(),
            h.total_bytes
        )));
    }
    let want_gap = (cap, print - DEFAULT_RETAINED_CAP as u64);
    let r = ctx.read(ReadParams {
        id: h.id.clone(),
        mode: Some(ReadMode::Tail),
        max_bytes: Some(64),
        ..ReadParams::default()
    })?;
    let gaps: Vec<(u64, u64)> = r.view.gaps.iter().map(|g| (g.start, g.end)).collect();
    if gaps != vec![want_gap] || h.dropped_bytes != want_gap.1 - want_gap.0 {
        return Err(fail(format!(
            "keep-head-tail: gaps {gaps:?}, dropped {} (want [{}..{}), {})",
            h.dropped_bytes,
            want_gap.0,
            want_gap.1,
            want_gap.1 - want_gap.0
        )));
    }
    ctx.output = k.total_bytes + h.total_bytes;
    let h_disk = std::fs::metadata(&h.spool_path).map(|m| m.len()).unwrap_or(0);
    if h_disk + h.dropped_bytes != print {
        return Err(fail(format!(
            "keep-head-tail: {h_disk} B on disk + {} dropped ≠ {print}",
            h.dropped_bytes
        )));
    }
    ctx.checked.push(format!(
        "kill: killed at {k_disk} B, {} B dropped; keep-head-tail: gap [{}..{}) exact",
        k.dropped_bytes, want_gap.0, want_gap.1
    ));
    Ok(())
}

/// The disk cap under file capture: the child writes the spool itself, so no middle can be
/// dropped — the daemon must refuse keep-head-tail, and only the kill policy is measured.
fn file_capture_disk_cap(ctx: &mut Ctx, kept: RunParams, killed: &str) -> Result<()> {
    let (cap, print) = (ctx.sizes.cap, ctx.sizes.cap_print);
    ctx.sessions = 1;
    match ctx.run(kept) {
        Ok(r) => Err(fail(format!("keep-head-tail with file capture was accepted ({})", r.id))),
        Err(e) if e.to_string().contains("file capture supports only the kill disk policy") => {
            let all = ctx.wait_all(limit_for(print))?;
            let Some(k) = all.iter().find(|s| s.id == killed).cloned() else {
                return Err(fail("a session is missing from list"));
            };
            // The child writes the spool itself; the cap is its file-size limit, so the
            // kernel stops it at the cap: everything written stays on disk, nothing is
            // dropped, and the spool may not pass the cap by more than 1 MiB.
            if !matches!(k.state, SessionState::Killed { .. }) {
                return Err(fail(format!("kill policy: state {} (want killed)", k.state.name())));
            }
            let k_disk = std::fs::metadata(&k.spool_path).map(|m| m.len()).unwrap_or(0);
            if k_disk < cap
                || k_disk > cap + (1 << 20)
                || k_disk != k.total_bytes
                || k.dropped_bytes != 0
            {
                return Err(fail(format!(
                    "kill policy: {k_disk} B on disk (cap {cap}), total {}, dropped {} (want total = disk, cap ≤ disk ≤ cap + 1 MiB, none dropped)",
                    k.total_bytes, k.dropped_bytes
                )));
            }
            ctx.output = k.total_bytes;
            ctx.checked.push(format!(
                "kill: killed with {k_disk} B on disk, {} B past the cap, none dropped; keep-head-tail: refused for file capture",
                k_disk - cap
            ));
            Ok(())
        }
        Err(e) => Err(fail(format!("keep-head-tail with file capture: {e}"))),
    }
}

/// `kill` policy on pipe capture: terminated at the cap, the spool holds at most the cap, the
/// rest is reported dropped. Bytes on disk and dropped.
fn check_killed_at_cap(k: &SessionInfo, cap: u64) -> Result<(u64, u64)> {
    if !matches!(k.state, SessionState::Killed { .. }) {
        return Err(fail(format!("kill policy: state {} (want killed)", k.state.name())));
    }
    let k_disk = std::fs::metadata(&k.spool_path).map(|m| m.len()).unwrap_or(0);
    if k_disk > cap || k.total_bytes.saturating_sub(k_disk) != k.dropped_bytes {
        return Err(fail(format!(
            "kill policy: {k_disk} B on disk (cap {cap}), total {}, dropped {} (want total − disk)",
            k.total_bytes, k.dropped_bytes
        )));
    }
    Ok((k_disk, k.dropped_bytes))
}
