//! envd's messages in their JSON form (the SDKs speak Connect with the JSON codec): field names
//! in lowerCamelCase, `bytes` as base64, enums by name, 64-bit integers as strings. Requests
//! accept the proto field names too, as a JSON parser of the protocol must.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `bytes` fields: base64 text on the wire.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        // Proto JSON accepts either alphabet, padded or not.
        let clean: String = text
            .trim_end_matches('=')
            .chars()
            .map(|c| match c {
                '-' => '+',
                '_' => '/',
                c => c,
            })
            .collect();
        let engine = base64::engine::general_purpose::STANDARD_NO_PAD;
        engine.decode(clean.as_bytes()).map(Bytes).map_err(serde::de::Error::custom)
    }
}

/// `process.ProcessConfig`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProcessConfig {
    pub cmd: String,
    pub args: Vec<String>,
    pub envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `process.PTY` (its only field, `size`).
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
#[serde(default)]
pub struct Pty {
    pub size: Option<PtySize>,
}

/// `process.PTY.Size`.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
#[serde(default)]
pub struct PtySize {
    pub cols: u32,
    pub rows: u32,
}

/// `process.StartRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    pub process: Option<ProcessConfig>,
    pub pty: Option<Pty>,
    pub tag: Option<String>,
    /// Absent means a stdin pipe (older SDKs relied on one).
    pub stdin: Option<bool>,
}

/// `process.ProcessSelector`: a `oneof` of `pid` and `tag`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct ProcessSelector {
    pub pid: Option<u32>,
    pub tag: Option<String>,
}

/// Requests that only select a process (`Connect`, `CloseStdin`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SelectRequest {
    pub process: Option<ProcessSelector>,
}

/// `process.ProcessInput`: a `oneof` of `stdin` and `pty` bytes.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProcessInput {
    pub stdin: Option<Bytes>,
    pub pty: Option<Bytes>,
}

impl ProcessInput {
    /// The bytes, whichever of the two carries them.
    pub fn into_bytes(self) -> Vec<u8> {
        self.stdin.or(self.pty).map(|b| b.0).unwrap_or_default()
    }
}

/// `process.SendInputRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SendInputRequest {
    pub process: Option<ProcessSelector>,
    pub input: Option<ProcessInput>,
}

/// `process.StreamInputRequest`: a `oneof` of `start`, `data` and `keepalive`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputRequest {
    pub start: Option<SelectRequest>,
    pub data: Option<StreamInputData>,
}

/// `process.StreamInputRequest.DataEvent`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputData {
    pub input: Option<ProcessInput>,
}

/// `process.SendSignalRequest`; the signal by name (`SIGNAL_SIGKILL`) or number.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SendSignalRequest {
    pub process: Option<ProcessSelector>,
    pub signal: Option<serde_json::Value>,
}

/// `process.UpdateRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UpdateRequest {
    pub process: Option<ProcessSelector>,
    pub pty: Option<Pty>,
}

/// `process.ProcessInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessInfo {
    pub config: ProcessConfig,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `process.ListResponse`.
#[derive(Debug, Serialize)]
pub struct ListResponse {
    pub processes: Vec<ProcessInfo>,
}

/// `process.ProcessEvent`, each variant one arm of its `oneof`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessEvent {
    Start { pid: u32 },
    Data(DataEvent),
    End(EndEvent),
    Keepalive {},
}

/// `process.ProcessEvent.DataEvent`: a `oneof` of `stdout`, `stderr` and `pty`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DataEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    Pty(Bytes),
}

/// `process.ProcessEvent.EndEvent`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    pub exit_code: i32,
    pub exited: bool,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `process.StartResponse` and `process.ConnectResponse` (one shape).
#[derive(Debug, Serialize)]
pub struct EventResponse {
    pub event: ProcessEvent,
}

/// `filesystem.EntryInfo`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: String,
    /// int64: a string in proto JSON.
    pub size: String,
    pub mode: u32,
    pub permissions: String,
    pub owner: String,
    pub group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    pub is_symlink: bool,
}

/// Filesystem requests that name one path (`Stat`, `MakeDir`, `Remove`) or a directory and a
/// depth (`ListDir`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PathRequest {
    pub path: String,
    pub depth: Option<u32>,
}

/// `filesystem.MoveRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    pub source: String,
    pub destination: String,
}

/// `filesystem.StatResponse`, `MakeDirResponse` and `MoveResponse` (one shape).
#[derive(Debug, Serialize)]
pub struct EntryResponse {
    pub entry: EntryInfo,
}

/// `filesystem.ListDirResponse`.
#[derive(Debug, Serialize)]
pub struct ListDirResponse {
    pub entries: Vec<EntryInfo>,
}

/// An empty message (the answer of most unary calls).
#[derive(Debug, Serialize)]
pub struct Empty {}

/// `filesystem.WatchDirRequest` and `filesystem.CreateWatcherRequest` (one shape).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchRequest {
    pub path: String,
    pub recursive: bool,
    #[serde(alias = "include_entry")]
    pub include_entry: bool,
}

/// Requests that name a polled watcher (`GetWatcherEvents`, `RemoveWatcher`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatcherRequest {
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

/// `filesystem.CreateWatcherResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    pub watcher_id: String,
}

/// `filesystem.FilesystemEvent`: the name is relative to the watched directory.
#[derive(Debug, Clone, Serialize)]
pub struct FilesystemEvent {
    pub name: String,
    /// `filesystem.EventType` by name (`EVENT_TYPE_CREATE`, …).
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.GetWatcherEventsResponse`.
#[derive(Debug, Serialize)]
pub struct WatcherEventsResponse {
    pub events: Vec<FilesystemEvent>,
}

/// `filesystem.WatchDirResponse`, each variant one arm of its `oneof`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WatchDirResponse {
    Start {},
    Filesystem(Box<FilesystemEvent>),
    Keepalive {},
}
