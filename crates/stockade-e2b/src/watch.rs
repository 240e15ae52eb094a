//! `filesystem.Filesystem`'s watches over inotify: `WatchDir` streams a directory's events
//! while the client listens; `CreateWatcher` keeps them for `GetWatcherEvents` to collect
//! until `RemoveWatcher`. Event types as envd reports them: a name created or moved in is
//! `create`, a write `write`, a deletion `remove`, a name moved away `rename`, a change of
//! mode, owner or times `chmod`; names are relative to the watched directory.
//!
//! Bounded: at most [`MAX_WATCHERS`] watches are open per door (streaming and polled
//! together), a recursive watch follows at most [`MAX_DIRS`] directories, and a polled
//! watcher queues at most [`MAX_QUEUED`] events between two collections — the events past
//! that (and any the kernel's own queue dropped) are counted, logged by the daemon and lost,
//! as envd loses them. A watch is one inotify descriptor read on the runtime, no thread of its
//! own; it is closed when its stream ends or its watcher is removed.

use std::collections::{HashMap, VecDeque};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

use crate::Door;
use crate::connect::{self, RpcError};
use crate::filesystem::{entry, io_error, resolve};
use crate::messages::{
    CreateWatcherResponse, Empty, FilesystemEvent, WatchDirResponse, WatchRequest,
    WatcherEventsResponse, WatcherRequest,
};

/// Most watches open at once on one door.
pub const MAX_WATCHERS: usize = 64;
/// Most events a polled watcher keeps between two `GetWatcherEvents`.
pub const MAX_QUEUED: usize = 4096;
/// Most directories one recursive watch follows.
pub const MAX_DIRS: usize = 4096;
/// Most events taken from the kernel in one go (then the runtime gets its turn).
const MAX_BATCH: usize = 1024;
/// Silence after which a `WatchDir` stream sends a keepalive when the client asked for none.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);

/// The door's watches: how many are open and the polled ones by id.
#[derive(Default)]
pub struct Watchers {
    open: Arc<AtomicUsize>,
    polled: Mutex<HashMap<String, Arc<Polled>>>,
    next_id: AtomicU64,
}

/// A polled watcher's queue, filled by its task.
struct Polled {
    queue: Mutex<VecDeque<FilesystemEvent>>,
    dropped: AtomicU64,
    stop: CancellationToken,
}

/// One open watch's place among the door's [`MAX_WATCHERS`], given back when it is dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One inotify descriptor watching a directory (and, recursively, those below it).
struct Watch {
    fd: AsyncFd<OwnedFd>,
    /// Each watch descriptor's directory, relative to the watched one.
    dirs: HashMap<i32, PathBuf>,
    root: PathBuf,
    recursive: bool,
    include_entry: bool,
    /// Events the kernel's queue dropped (its overflow), counted when reported.
    overflowed: u64,
    _slot: Slot,
}

const FLAGS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::ONLYDIR);

impl Watch {
    /// Opens a watch of `r.path`: `not_found` when it does not exist, `invalid_argument` when
    /// it is not a directory, `resource_exhausted` past the door's [`MAX_WATCHERS`].
    async fn open(door: &Door, r: WatchRequest) -> Result<Watch, RpcError> {
        let slot = door.watchers.take_slot()?;
        let root = resolve(&r.path, &door.hall, stockade_daemon::FileAccess::Read)?;
        let recursive = r.recursive;
        let walk_root = root.clone();
        let (fd, dirs) = tokio::task::spawn_blocking(move || add_watches(&walk_root, recursive))
            .await
            .map_err(|e| RpcError::internal(e.to_string()))??;
        // SAFETY: `fd` is an open inotify descriptor owned by the AsyncFd for its whole life.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| RpcError::internal(format!("inotify: {e}")))?;
        Ok(Watch {
            fd,
            dirs,
            root,
            recursive,
            include_entry: r.include_entry,
            overflowed: 0,
            _slot: slot,
        })
    }

    /// The next events (at least one), as they come.
    async fn next_batch(&mut self) -> std::io::Result<Vec<FilesystemEvent>> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut raw = Vec::new();
            let mut drained = false;
            {
                let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
                let mut reader = inotify::Reader::new(guard.get_inner(), &mut buf);
                // Past the bound, only what is already read is taken (the rest of a read
                // buffer would be lost otherwise).
                while raw.len() < MAX_BATCH || !reader.is_buffer_empty() {
                    match reader.next() {
                        Ok(e) => raw.push((
                            e.wd(),
                            e.events(),
                            e.file_name().map(|n| n.to_string_lossy().into_owned()),
                        )),
                        Err(rustix::io::Errno::AGAIN) => {
                            drained = true;
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            if drained {
                guard.clear_ready();
            }
            let events = self.events(raw);
            if !events.is_empty() {
                return Ok(events);
            }
        }
    }

    /// envd's events for the kernel's, following new directories of a recursive watch.
    fn events(&mut self, raw: Vec<(i32, ReadFlags, Option<String>)>) -> Vec<FilesystemEvent> {
        let mut out = Vec::with_capacity(raw.len());
        for (wd, flags, name) in raw {
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                self.overflowed += 1;
                continue;
            }
            if flags.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&wd);
                continue;
            }
            let (Some(dir), Some(name)) = (self.dirs.get(&wd), name) else { continue };
            let rel = dir.join(&name);
            let is_dir = flags.contains(ReadFlags::ISDIR);
            let created = flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO);
            let found =
                if created && is_dir && self.recursive { self.follow(&rel) } else { vec![] };
            for (flag, kind) in KINDS {
                if flags.contains(flag) {
                    let gone = matches!(kind, "EVENT_TYPE_REMOVE" | "EVENT_TYPE_RENAME");
                    let entry = (self.include_entry && !gone)
                        .then(|| entry(&self.root.join(&rel)).ok())
                        .flatten();
                    let name = rel.to_string_lossy().into_owned();
                    out.push(FilesystemEvent { name, kind, entry });
                }
            }
            for rel in found {
                let entry = self.include_entry.then(|| entry(&self.root.join(&rel)).ok()).flatten();
                let name = rel.to_string_lossy().into_owned();
                out.push(FilesystemEvent { name, kind: "EVENT_TYPE_CREATE", entry });
            }
        }
        out
    }

    /// Watches a directory that appeared below a recursive watch (and those inside it), then
    /// reports as created what is already in them: what appeared between the directory's
    /// creation and its watch (`mkdir -p a/b/c` makes `b` before `a` is watched) would be lost
    /// otherwise. A name made just after the watch may be reported twice; none is missed.
    fn follow(&mut self, rel: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut todo = vec![rel.to_path_buf()];
        while let Some(rel) = todo.pop() {
            if self.dirs.len() >= MAX_DIRS {
                tracing::warn!(
                    "a recursive watch of {} follows at most {MAX_DIRS} directories",
                    self.root.display()
                );
                break;
            }
            let abs = self.root.join(&rel);
            let Ok(wd) = inotify::add_watch(self.fd.get_ref(), &abs, FLAGS) else { continue };
            self.dirs.insert(wd, rel.clone());
            for (name, is_dir) in entries(&abs) {
                let sub = rel.join(name);
                found.push(sub.clone());
                if is_dir {
                    todo.push(sub);
                }
            }
        }
        found
    }
}

/// inotify's flags and envd's event type for each, in the order reported.
const KINDS: [(ReadFlags, &str); 6] = [
    (ReadFlags::CREATE, "EVENT_TYPE_CREATE"),
    (ReadFlags::MOVED_TO, "EVENT_TYPE_CREATE"),
    (ReadFlags::MODIFY, "EVENT_TYPE_WRITE"),
    (ReadFlags::DELETE, "EVENT_TYPE_REMOVE"),
    (ReadFlags::MOVED_FROM, "EVENT_TYPE_RENAME"),
    (ReadFlags::ATTRIB, "EVENT_TYPE_CHMOD"),
];

/// A new inotify descriptor watching `root` (and, when `recursive`, every directory below it,
/// up to [`MAX_DIRS`]).
fn add_watches(root: &Path, recursive: bool) -> Result<(OwnedFd, HashMap<i32, PathBuf>), RpcError> {
    let meta = std::fs::metadata(root).map_err(|e| io_error(root, &e))?;
    if !meta.is_dir() {
        return Err(RpcError::invalid(format!("{} is not a directory", root.display())));
    }
    let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)
        .map_err(|e| RpcError::new("resource_exhausted", format!("inotify: {e}")))?;
    let mut dirs = HashMap::new();
    let wd = inotify::add_watch(&fd, root, FLAGS)
        .map_err(|e| io_error(root, &std::io::Error::from(e)))?;
    dirs.insert(wd, PathBuf::new());
    let mut todo = if recursive { vec![PathBuf::new()] } else { Vec::new() };
    while let Some(rel) = todo.pop() {
        for name in subdirs(&root.join(&rel)) {
            if dirs.len() >= MAX_DIRS {
                return Err(RpcError::new(
                    "resource_exhausted",
                    format!("{} holds over {MAX_DIRS} directories to watch", root.display()),
                ));
            }
            let sub = rel.join(name);
            if let Ok(wd) = inotify::add_watch(&fd, root.join(&sub), FLAGS) {
                dirs.insert(wd, sub.clone());
                todo.push(sub);
            }
        }
    }
    Ok((fd, dirs))
}

/// The names of the directories in `dir` (not following symlinks).
fn subdirs(dir: &Path) -> Vec<std::ffi::OsString> {
    entries(dir).into_iter().filter(|(_, is_dir)| *is_dir).map(|(n, _)| n).collect()
}

/// The names in `dir`, each with whether it is a directory (not following symlinks).
fn entries(dir: &Path) -> Vec<(std::ffi::OsString, bool)> {
    let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
    read.flatten().map(|e| (e.file_name(), e.file_type().is_ok_and(|t| t.is_dir()))).collect()
}

impl Watchers {
    fn take_slot(&self) -> Result<Slot, RpcError> {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_WATCHERS).then_some(n + 1)
        });
        match taken {
            Ok(_) => Ok(Slot(Arc::clone(&self.open))),
            Err(_) => Err(RpcError::new(
                "resource_exhausted",
                format!(
                    "{MAX_WATCHERS} watches are open on this door, the most it keeps: stop one first"
                ),
            )),
        }
    }

    fn polled(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Polled>>> {
        self.polled.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves `WatchDir`, `CreateWatcher`, `GetWatcherEvents` and `RemoveWatcher`; gives the body
/// back for another method.
pub async fn call(
    door: &Arc<Door>,
    method: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Body> {
    Ok(match method {
        "WatchDir" => watch_dir(Arc::clone(door), headers, body).await,
        "CreateWatcher" => connect::unary(create(door, body).await),
        "GetWatcherEvents" => connect::unary(collect(door, body).await),
        "RemoveWatcher" => connect::unary(remove(door, body).await),
        _ => return Err(body),
    })
}

async fn watch_dir(door: Arc<Door>, headers: &HeaderMap, body: Body) -> Response {
    let opened = match connect::request_message::<WatchRequest>(body, true).await {
        Ok(r) => Watch::open(&door, r).await,
        Err(e) => Err(e),
    };
    let mut watch = match opened {
        Ok(w) => w,
        Err(e) => return connect::stream_error(e),
    };
    let keepalive = headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_KEEPALIVE, Duration::from_secs)
        .max(Duration::from_secs(1));
    let (tx, response) = connect::stream_response();
    tokio::spawn(async move {
        if !tx.send(&WatchDirResponse::Start {}).await {
            return;
        }
        loop {
            tokio::select! {
                batch = watch.next_batch() => match batch {
                    Ok(events) => {
                        for e in events {
                            if !tx.send(&WatchDirResponse::Filesystem(Box::new(e))).await {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        tx.end(Some(RpcError::internal(format!("the watch failed: {e}")))).await;
                        return;
                    }
                },
                () = tokio::time::sleep(keepalive) => {
                    if !tx.send(&WatchDirResponse::Keepalive {}).await {
                        return;
                    }
                }
                () = tx.closed() => return,
                () = door.stop.cancelled() => {
                    tx.end(None).await;
                    return;
                }
            }
        }
    });
    response
}

async fn create(door: &Arc<Door>, body: Body) -> Result<CreateWatcherResponse, RpcError> {
    let r: WatchRequest = connect::request_message(body, false).await?;
    let mut watch = Watch::open(door, r).await?;
    let n = door.watchers.next_id.fetch_add(1, Ordering::Relaxed);
    let id = format!("watcher-{n}");
    let polled = Arc::new(Polled {
        queue: Mutex::new(VecDeque::new()),
        dropped: AtomicU64::new(0),
        stop: door.stop.child_token(),
    });
    door.watchers.polled().insert(id.clone(), Arc::clone(&polled));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                batch = watch.next_batch() => match batch {
                    Ok(events) => polled.push(events),
                    Err(e) => {
                        tracing::warn!("a watch of {} failed: {e}", watch.root.display());
                        return;
                    }
                },
                () = polled.stop.cancelled() => return,
            }
            let overflowed = std::mem::take(&mut watch.overflowed);
            polled.dropped.fetch_add(overflowed, Ordering::Relaxed);
        }
    });
    Ok(CreateWatcherResponse { watcher_id: id })
}

impl Polled {
    fn push(&self, events: Vec<FilesystemEvent>) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        for e in events {
            if q.len() >= MAX_QUEUED {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                q.push_back(e);
            }
        }
    }
}

fn find(door: &Door, id: &str) -> Result<Arc<Polled>, RpcError> {
    door.watchers
        .polled()
        .get(id)
        .cloned()
        .ok_or_else(|| RpcError::not_found(format!("watcher {id} not found")))
}

async fn collect(door: &Arc<Door>, body: Body) -> Result<WatcherEventsResponse, RpcError> {
    let r: WatcherRequest = connect::request_message(body, false).await?;
    let polled = find(door, &r.watcher_id)?;
    let events: Vec<_> =
        polled.queue.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect();
    let dropped = polled.dropped.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            "watcher {} lost {dropped} events: over {MAX_QUEUED} waited between two collections",
            r.watcher_id
        );
    }
    Ok(WatcherEventsResponse { events })
}

async fn remove(door: &Arc<Door>, body: Body) -> Result<Empty, RpcError> {
    let r: WatcherRequest = connect::request_message(body, false).await?;
    let polled = door.watchers.polled().remove(&r.watcher_id);
    match polled {
        Some(p) => {
            p.stop.cancel();
            Ok(Empty {})
        }
        None => Err(RpcError::not_found(format!("watcher {} not found", r.watcher_id))),
    }
}
