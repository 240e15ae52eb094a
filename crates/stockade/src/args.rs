//! Flags, value parsers and value enums shared by several subcommands (`run`, `read`, `logs`,
//! `daemon run`, `schedule add`): one size syntax, one `KEY=VALUE` syntax and one spelling of
//! each run option everywhere. The subcommands in `cmd/` import from here; this file imports
//! none of them.

use clap::{Args, ValueEnum};
use stockade_proto::{Capture, DiskPolicy, Stream};

/// `--capture`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CaptureArg {
    /// One pipe for stdout and stderr, as a terminal merges them: the log keeps the write order.
    Pipe,
    /// A pipe per stream: `--stream` reads each exactly; the order across them is best-effort.
    Split,
    /// stdout and stderr are the spool file itself; Stockade copies nothing.
    File,
}

impl From<CaptureArg> for Capture {
    fn from(c: CaptureArg) -> Capture {
        match c {
            CaptureArg::Pipe => Capture::Pipe,
            CaptureArg::Split => Capture::Split,
            CaptureArg::File => Capture::File,
        }
    }
}

/// `--disk-policy`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DiskPolicyArg {
    /// Terminate the command's tree at the cap.
    Kill,
    /// Keep the head on disk and the newest bytes; report the dropped middle exactly.
    KeepHeadTail,
}

impl From<DiskPolicyArg> for DiskPolicy {
    fn from(p: DiskPolicyArg) -> DiskPolicy {
        match p {
            DiskPolicyArg::Kill => DiskPolicy::Kill,
            DiskPolicyArg::KeepHeadTail => DiskPolicy::KeepHeadTail,
        }
    }
}

/// Output bounds shared by `run` and `read`.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Most bytes of output to show (e.g. 50KiB, 2000, 1MiB).
    #[arg(long, value_name = "SIZE", default_value_t = stockade_proto::DEFAULT_MAX_BYTES, value_parser = parse_size_usize)]
    pub max_bytes: usize,
    /// Most lines of output to show.
    #[arg(long, value_name = "N", default_value_t = stockade_proto::DEFAULT_MAX_LINES)]
    pub max_lines: usize,
}

/// `--stream`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StreamArg {
    /// Standard output only.
    Stdout,
    /// Standard error only.
    Stderr,
}

impl From<StreamArg> for Stream {
    fn from(s: StreamArg) -> Stream {
        match s {
            StreamArg::Stdout => Stream::Stdout,
            StreamArg::Stderr => Stream::Stderr,
        }
    }
}

/// A size in binary units (`4096`, `64KiB`, `20MiB`, `1GiB`); shared by every subcommand.
pub(crate) fn parse_size_u64(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|_| "is not a size; write one such as 4096, 64KiB, 20MiB or 1GiB".to_owned())
}

/// A size that must fit in `usize` (a memory budget).
pub(crate) fn parse_size_usize(s: &str) -> Result<usize, String> {
    // The messages follow the flag and the value the user typed (see `usage.rs`).
    let n = parse_size_u64(s)?;
    usize::try_from(n).map_err(|_| "is too large for this machine".to_owned())
}

/// An age such as `90s`, `30m`, `12h` or `7d`.
pub(crate) fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let bad = || "is not an age; write a number and a unit, e.g. 90s, 30m, 12h, 7d".to_owned();
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => 24 * 60 * 60,
        _ => return Err(bad()),
    };
    n.checked_mul(secs).map(std::time::Duration::from_secs).ok_or_else(bad)
}

/// A duration for a flag that takes a time (`--timeout`, `wait --timeout`): `500ms`, `5s`, `2m`,
/// `1h 30m`; a plain number is seconds, as GNU `timeout` reads it.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    duration_or_number(s, std::time::Duration::from_secs).map_err(|e| match e {
        DurationError::Negative => "is negative; write a duration such as 30s or 500ms".to_owned(),
        DurationError::Bad => {
            "is not a duration; write e.g. 30s, 500ms, 10m or 1h (a plain number is seconds)"
                .to_owned()
        }
    })
}

/// A time for a `--…-ms` flag, in milliseconds: a plain number is milliseconds (`500`), and a
/// duration with a unit (`2s`, `1m`) is taken too, so one spelling works for every flag.
pub(crate) fn parse_ms(s: &str) -> Result<u64, String> {
    let d = duration_or_number(s, std::time::Duration::from_millis).map_err(|e| match e {
        DurationError::Negative => "is negative; write milliseconds (500) or a duration (2s)",
        DurationError::Bad => {
            "is not a time; write milliseconds (500) or a duration with a unit (2s, 1m)"
        }
    })?;
    u64::try_from(d.as_millis()).map_err(|_| "is too long; write at most a few days".to_owned())
}

/// Why a time was refused.
enum DurationError {
    Negative,
    Bad,
}

/// `s` as a humantime duration (`1h 30m`, `500ms`), or a plain whole number in the unit `plain`.
fn duration_or_number(
    s: &str,
    plain: fn(u64) -> std::time::Duration,
) -> Result<std::time::Duration, DurationError> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(plain).map_err(|_| DurationError::Bad);
    }
    humantime::parse_duration(s).map_err(|_| DurationError::Bad)
}

/// The value parser of every flag that takes a path: a leading `~` or `~/` is this user's
/// home, as a shell would have expanded it had the value not been quoted
/// (`STOCKADE_HOME='~/x'`, `--cwd '~/src'`). Paths may be any bytes, so the value is not
/// required to be UTF-8.
pub(crate) fn path_parser() -> impl clap::builder::TypedValueParser<Value = std::path::PathBuf> {
    use clap::builder::TypedValueParser as _;
    clap::builder::OsStringValueParser::new().try_map(|s| expand_tilde(s, std::env::var_os("HOME")))
}

/// `s` with a leading `~` or `~/` replaced by `home`; `~user` forms are refused, not guessed.
pub(crate) fn expand_tilde(
    s: std::ffi::OsString,
    home: Option<std::ffi::OsString>,
) -> Result<std::path::PathBuf, String> {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = s.as_bytes();
    if bytes.first() != Some(&b'~') {
        return Ok(s.into());
    }
    let rest = &bytes[1..];
    if !rest.is_empty() && rest[0] != b'/' {
        return Err("starts with ~NAME, which is not expanded; write the full path".to_owned());
    }
    let home = home
        .filter(|h| !h.is_empty())
        .ok_or_else(|| "starts with ~ but HOME is not set; write the full path".to_owned())?;
    let mut path = std::path::PathBuf::from(home);
    let rest = std::ffi::OsStr::from_bytes(rest).to_owned();
    let rest = std::path::Path::new(&rest).strip_prefix("/").map(|p| p.to_owned());
    if let Ok(rest) = rest
        && !rest.as_os_str().is_empty()
    {
        path.push(rest);
    }
    Ok(path)
}

/// The hot-tail size of one run: a size within the engine's bounds.
pub(crate) fn parse_retained_cap(s: &str) -> Result<usize, String> {
    use stockade_engine::{MAX_RETAINED_CAP, MIN_RETAINED_CAP};
    let n = parse_size_usize(s)?;
    if (MIN_RETAINED_CAP..=MAX_RETAINED_CAP).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "is out of range; write a size from {} to {} MiB",
            "4KiB",
            MAX_RETAINED_CAP >> 20
        ))
    }
}

/// `KEY=VALUE` for `--env`; shared by every subcommand.
pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err("is not KEY=VALUE; write e.g. --env RUST_LOG=debug".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size_u64("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size_u64("20MB"), Ok(20 << 20));
        assert!(parse_size_u64("lots").is_err());
    }

    #[test]
    fn retention_ages_need_a_unit() {
        use std::time::Duration;
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        for bad in ["7", "d", "7w", "-1d", ""] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
    #[test]
    fn times_take_units_and_plain_numbers() {
        use std::time::Duration;
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_ms("1500"), Ok(1500));
        assert_eq!(parse_ms("1s"), Ok(1000));
        assert_eq!(parse_ms("2m"), Ok(120_000));
        for bad in ["5x", "-1s", "", "s", "1.5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
            assert!(parse_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_leading_tilde_is_the_home() {
        let home = Some(std::ffi::OsString::from("/home/u"));
        let t = |s: &str| expand_tilde(s.into(), home.clone());
        assert_eq!(t("~/x"), Ok("/home/u/x".into()));
        assert_eq!(t("~"), Ok("/home/u".into()));
        assert_eq!(t("~/"), Ok("/home/u".into()));
        assert_eq!(t("a/~/b"), Ok("a/~/b".into()));
        assert!(t("~bob/x").is_err());
        assert!(expand_tilde("~/x".into(), None).is_err());
    }
}
