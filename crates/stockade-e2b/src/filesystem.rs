//! `filesystem.Filesystem`: stat, list, make, move and remove, on the daemon's own filesystem
//! with the daemon's rights (directories it makes for a named user are theirs). A relative path
//! is taken from the named user's home, else the daemon user's, as envd takes it from the
//! user's. Watches are served by the `watch` module.

use std::fs::Metadata;

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use stockade_daemon::{FileAccess, Hall};

use crate::connect::{self, RpcError};
use crate::messages::{Empty, EntryInfo, EntryResponse, ListDirResponse, MoveRequest, PathRequest};
use crate::user::{self, RunAs};

/// Most entries one `ListDir` answers with (a bound on the answer, not on the directory).
const MAX_ENTRIES: usize = 100_000;

/// Serves one call of `filesystem.Filesystem`.
pub async fn call(hall: &Hall, method: &str, headers: &HeaderMap, body: Body) -> Response {
    let ct = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    let streaming = connect::is_streaming(ct);
    if streaming {
        return connect::stream_error(RpcError::new(
            "unimplemented",
            format!("filesystem.Filesystem/{method} is not served by Stockade's E2B door"),
        ));
    }
    let method = method.to_owned();
    let hall = hall.clone();
    let result = async move {
        let user = user::from_headers(headers)?;
        match method.as_str() {
            "Move" => {
                let r: MoveRequest = connect::request_message(body, false).await?;
                blocking(move || rename(&hall, &r, user.as_ref())).await
            }
            "Stat" | "MakeDir" | "ListDir" | "Remove" => {
                let r: PathRequest = connect::request_message(body, false).await?;
                blocking(move || path_call(&hall, &method, &r, user.as_ref())).await
            }
            other => Err(RpcError::new(
                "unimplemented",
                format!("filesystem.Filesystem/{other} is not served by Stockade's E2B door"),
            )),
        }
    }
    .await;
    connect::unary(result)
}

async fn blocking<F>(f: F) -> Result<serde_json::Value, RpcError>
where
    F: FnOnce() -> Result<serde_json::Value, RpcError> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| RpcError::internal(e.to_string()))?
}

fn value<T: Serialize>(m: T) -> Result<serde_json::Value, RpcError> {
    serde_json::to_value(m).map_err(|e| RpcError::internal(e.to_string()))
}

fn path_call(
    hall: &Hall,
    method: &str,
    r: &PathRequest,
    user: Option<&RunAs>,
) -> Result<serde_json::Value, RpcError> {
    let access = match method {
        "MakeDir" | "Remove" => FileAccess::Write,
        _ => FileAccess::Read,
    };
    let path = resolve_in(&r.path, user::home(user), hall, access)?;
    match method {
        "Stat" => value(EntryResponse { entry: entry(&path)? }),
        "MakeDir" => {
            if path.exists() {
                return Err(RpcError::new(
                    "already_exists",
                    format!("{} already exists", path.display()),
                ));
            }
            make_dirs(&path, user).map_err(|e| io_error(&path, &e))?;
            value(EntryResponse { entry: entry(&path)? })
        }
        "Remove" => {
            let meta = std::fs::symlink_metadata(&path).map_err(|e| io_error(&path, &e))?;
            let removed = if meta.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| io_error(&path, &e))?;
            value(Empty {})
        }
        _ => {
            let meta = std::fs::metadata(&path).map_err(|e| io_error(&path, &e))?;
            if !meta.is_dir() {
                return Err(RpcError::invalid(format!("{} is not a directory", path.display())));
            }
            let mut entries = Vec::new();
            list(hall, &path, r.depth.unwrap_or(1).max(1), &mut entries)?;
            value(ListDirResponse { entries })
        }
    }
}

fn list(hall: &Hall, dir: &Path, depth: u32, out: &mut Vec<EntryInfo>) -> Result<(), RpcError> {
    let read = std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))?;
    for item in read {
        let item = item.map_err(|e| io_error(dir, &e))?;
        if out.len() >= MAX_ENTRIES {
            return Err(RpcError::new("resource_exhausted", format!("over {MAX_ENTRIES} entries")));
        }
        let path = item.path();
        if hall.hides(&path) {
            continue; // Stockade's home or a door's secret: not shown, not entered
        }
        let Ok(info) = entry(&path) else { continue }; // gone since the listing
        let recurse = depth > 1 && info.kind == "FILE_TYPE_DIRECTORY" && !info.is_symlink;
        out.push(info);
        if recurse {
            list(hall, &path, depth - 1, out)?;
        }
    }
    Ok(())
}

fn rename(
    hall: &Hall,
    r: &MoveRequest,
    user: Option<&RunAs>,
) -> Result<serde_json::Value, RpcError> {
    let home = user::home(user);
    let from = resolve_in(&r.source, home, hall, FileAccess::Write)?;
    let to = resolve_in(&r.destination, home, hall, FileAccess::Write)?;
    if let Some(parent) = to.parent() {
        make_dirs(parent, user).map_err(|e| io_error(parent, &e))?;
    }
    std::fs::rename(&from, &to).map_err(|e| io_error(&from, &e))?;
    value(EntryResponse { entry: entry(&to)? })
}

/// `create_dir_all`, the directories it makes given to `user` (as envd makes them theirs).
pub(crate) fn make_dirs(path: &Path, user: Option<&RunAs>) -> std::io::Result<()> {
    let missing: Vec<&Path> = path.ancestors().take_while(|p| !p.exists()).collect();
    std::fs::create_dir_all(path)?;
    if let Some(u) = user {
        for dir in missing {
            u.own(dir)?;
        }
    }
    Ok(())
}

/// The path a client's `path` comes to (relative ones from the daemon's user's home), checked
/// by the daemon's hall for `access` (see [`resolve_in`]).
pub(crate) fn resolve(path: &str, hall: &Hall, access: FileAccess) -> Result<PathBuf, RpcError> {
    resolve_in(path, None, hall, access)
}

/// The path a client's `path` comes to — relative ones from `home`, else the daemon's user's
/// home — as the daemon's hall allows it for `access` (Stockade's home and the doors' secrets
/// never, writes only where the operator's sandbox allows): the resolved path the request
/// then uses, or `permission_denied` in one sentence.
pub(crate) fn resolve_in(
    path: &str,
    home: Option<&Path>,
    hall: &Hall,
    access: FileAccess,
) -> Result<PathBuf, RpcError> {
    let asked = given_in(path, home)?;
    hall.reach(&asked, access).map_err(|why| RpcError::new("permission_denied", why))
}

/// An absolute path for a client's path: relative ones from `home`, else the daemon's home.
fn given_in(path: &str, home: Option<&Path>) -> Result<PathBuf, RpcError> {
    if path.is_empty() {
        return Err(RpcError::invalid("an empty path"));
    }
    let p = Path::new(path);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let home = match home {
        Some(h) => h.to_path_buf(),
        None => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/")),
    };
    Ok(match p.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        Err(_) => home.join(p),
    })
}

pub(crate) fn io_error(path: &Path, e: &std::io::Error) -> RpcError {
    let message = format!("{}: {e}", path.display());
    match e.kind() {
        std::io::ErrorKind::NotFound => RpcError::not_found(message),
        std::io::ErrorKind::PermissionDenied => RpcError::new("permission_denied", message),
        std::io::ErrorKind::AlreadyExists => RpcError::new("already_exists", message),
        _ => RpcError::internal(message),
    }
}

/// envd's `EntryInfo` of `path` (not following a last symlink for its type).
pub(crate) fn entry(path: &Path) -> Result<EntryInfo, RpcError> {
    let link = std::fs::symlink_metadata(path).map_err(|e| io_error(path, &e))?;
    let is_symlink = link.file_type().is_symlink();
    let meta = if is_symlink { std::fs::metadata(path).unwrap_or(link) } else { link };
    let kind = if meta.is_dir() { "FILE_TYPE_DIRECTORY" } else { "FILE_TYPE_FILE" };
    Ok(EntryInfo {
        name: path.file_name().map_or_else(|| "/".into(), |n| n.to_string_lossy().into_owned()),
        kind,
        path: path.display().to_string(),
        size: meta.len().to_string(),
        mode: meta.permissions().mode() & 0o777,
        permissions: permissions(&meta),
        owner: user_name(meta.uid()),
        group: group_name(meta.gid()),
        modified_time: meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| rfc3339(d.as_secs(), d.subsec_nanos())),
        symlink_target: is_symlink
            .then(|| std::fs::read_link(path).ok().map(|t| t.display().to_string()))
            .flatten(),
        is_symlink,
    })
}

fn permissions(meta: &Metadata) -> String {
    let mode = meta.permissions().mode();
    let mut s = String::from(if meta.is_dir() { "d" } else { "-" });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn user_name(uid: u32) -> String {
    crate::accounts::by_uid(uid).map_or_else(|| uid.to_string(), |a| a.name)
}

fn group_name(gid: u32) -> String {
    crate::accounts::group_name(gid).unwrap_or_else(|| gid.to_string())
}

/// A UTC timestamp as RFC 3339 (proto JSON's `Timestamp`).
fn rfc3339(secs: u64, nanos: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        assert_eq!(super::rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(super::rfc3339(1_709_251_199, 5), "2024-02-29T23:59:59.000000005Z");
    }
}
