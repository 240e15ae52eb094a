//! envd's `/files`: `GET ?path=` downloads a file (streamed from disk), `POST ?path=` uploads
//! one — as `application/octet-stream` or `multipart/form-data` (each part a file; the part's
//! file name is its path when `path` is not given), both streamed to disk as they arrive. Parent directories are
//! made as envd makes them.

use std::io::Write as _;
use std::path::Path;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio_util::io::ReaderStream;

use crate::filesystem::{entry, make_dirs, resolve_in};
use crate::http_error;
use crate::multipart::{Failed, Parts, file_name};
use crate::user::{self, RunAs};
use stockade_daemon::{FileAccess, Hall};

/// The value of query parameter `name`, percent-decoded.
pub fn query(req: &Request, name: &str) -> Option<String> {
    let q = req.uri().query()?;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The user a `/files` request names (`username`), or the answer refusing it.
pub fn requester(req: &Request) -> Result<Option<RunAs>, (StatusCode, String)> {
    user::by_name(&query(req, "username").unwrap_or_default()).map_err(|e| {
        let status = match e.code {
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, e.message)
    })
}

pub async fn download(
    hall: &Hall,
    headers: &HeaderMap,
    path: Option<String>,
    user: Option<RunAs>,
) -> Response {
    let Some(path) = path else {
        return http_error(StatusCode::BAD_REQUEST, "the path parameter is missing");
    };
    let path = match resolve_in(&path, user::home(user.as_ref()), hall, FileAccess::Read) {
        Ok(p) => p,
        Err(e) => return http_error(refused_status(&e), e.message),
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return http_error(StatusCode::NOT_FOUND, format!("{}: no such file", path.display()));
        }
        Err(e) => return http_error(StatusCode::BAD_REQUEST, format!("{}: {e}", path.display())),
    };
    match file.metadata().await {
        Ok(m) if m.is_dir() => {
            return http_error(
                StatusCode::BAD_REQUEST,
                format!("{} is a directory", path.display()),
            );
        }
        Ok(_) => {}
        Err(e) => return http_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
    let gzip = accepts_gzip(headers);
    let body = if gzip { gzipped(file) } else { Body::from_stream(ReaderStream::new(file)) };
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/octet-stream"));
    if gzip {
        r.headers_mut().insert(header::CONTENT_ENCODING, header::HeaderValue::from_static("gzip"));
    }
    r
}

/// Whether the request's `Accept-Encoding` takes gzip (and does not refuse it with `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let value = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("");
    value.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let refused = parts
            .any(|p| p.strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()) == Some(0.0));
        name.eq_ignore_ascii_case("gzip") && !refused
    })
}

/// The file's bytes gzip-encoded as they are read.
fn gzipped(file: tokio::fs::File) -> Body {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let state = (ReaderStream::new(file), Some(encoder));
    let stream = futures_util::stream::unfold(state, |(mut chunks, mut encoder)| async move {
        let e = encoder.as_mut()?;
        let piece = match chunks.next().await {
            Some(Ok(chunk)) => e.write_all(&chunk).map(|()| std::mem::take(e.get_mut())),
            Some(Err(err)) => Err(err),
            None => encoder.take()?.finish(),
        };
        let encoder = if piece.is_ok() { encoder } else { None };
        Some((piece.map(bytes::Bytes::from), (chunks, encoder)))
    });
    Body::from_stream(stream)
}

pub async fn upload(hall: &Hall, req: Request, user: Option<RunAs>) -> Response {
    if let Some(refused) = unsupported_upload(&req) {
        // Read to its end first (bounded): a client still sending its body when the answer
        // comes and the connection closes sees a broken connection, not the sentence.
        let mut body = req.into_body().into_data_stream();
        let mut drained = 0usize;
        while let Some(Ok(chunk)) = body.next().await {
            drained += chunk.len();
            if drained > MAX_DRAINED {
                break;
            }
        }
        return refused;
    }
    let path = query(&req, "path");
    let user = user.as_ref();
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let written = if let Some(boundary) = ct.strip_prefix("multipart/form-data") {
        let Some(boundary) = boundary.split("boundary=").nth(1) else {
            return http_error(StatusCode::BAD_REQUEST, "a multipart body without a boundary");
        };
        let boundary = boundary.split(';').next().unwrap_or("").trim_matches('"').to_owned();
        multipart(hall, req.into_body(), &boundary, path, user).await
    } else {
        let Some(path) = path else {
            return http_error(StatusCode::BAD_REQUEST, "the path parameter is missing");
        };
        let gzip = content_encoding(&req) == Ok(Encoding::Gzip);
        octet_stream(hall, req.into_body(), &path, user, gzip).await.map(|e| vec![e])
    };
    match written {
        Ok(entries) => {
            let mut r = Response::new(Body::from(serde_json::Value::Array(entries).to_string()));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
            r
        }
        Err((status, message)) => http_error(status, message),
    }
}

/// How an upload's body is encoded.
#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Identity,
    Gzip,
}

/// The upload's `Content-Encoding`: identity or gzip, else the name refused.
fn content_encoding(req: &Request) -> Result<Encoding, String> {
    let value = req.headers().get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
    match value.map(str::trim) {
        None | Some("") => Ok(Encoding::Identity),
        Some(e) if e.eq_ignore_ascii_case("identity") => Ok(Encoding::Identity),
        Some(e) if e.eq_ignore_ascii_case("gzip") || e.eq_ignore_ascii_case("x-gzip") => {
            Ok(Encoding::Gzip)
        }
        Some(e) => Err(e.to_owned()),
    }
}

/// Most bytes of a refused upload read (and dropped) before the refusal is sent.
const MAX_DRAINED: usize = 64 * 1024 * 1024;

/// What this door does not store, refused before a byte is written rather than dropped: file
/// metadata (`X-Metadata-*`, envd's extended attributes) and a compressed body.
fn unsupported_upload(req: &Request) -> Option<Response> {
    let headers = req.headers();
    if let Some(name) = headers.keys().find(|k| k.as_str().starts_with("x-metadata-")) {
        return Some(http_error(
            StatusCode::BAD_REQUEST,
            format!(
                "file metadata ({name}) is not stored by this door; write the file without metadata"
            ),
        ));
    }
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("multipart/"));
    match content_encoding(req) {
        Ok(Encoding::Gzip) if multipart => Some(http_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a gzip-encoded multipart upload is not decoded by this door; send it as application/octet-stream",
        )),
        Ok(_) => None,
        Err(e) => Some(http_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "a {e}-encoded upload is not decoded by this door; send it gzip-encoded or uncompressed"
            ),
        )),
    }
}

/// The HTTP status of a path the door refused: 403 when the daemon's hall kept it, 400 for a
/// malformed one.
fn refused_status(e: &crate::connect::RpcError) -> StatusCode {
    if e.code == "permission_denied" { StatusCode::FORBIDDEN } else { StatusCode::BAD_REQUEST }
}

/// An `application/octet-stream` upload, streamed to disk; a gzip-encoded one (the SDKs'
/// `gzip`) is stored decoded, as it arrives.
async fn octet_stream(
    hall: &Hall,
    body: Body,
    path: &str,
    user: Option<&RunAs>,
    gzip: bool,
) -> Result<serde_json::Value, Failed> {
    let path = resolve_in(path, user::home(user), hall, FileAccess::Write)
        .map_err(|e| (refused_status(&e), e.message))?;
    let mut file = create(&path, user).await?;
    let mut stream = body.into_data_stream();
    let mut decoder = gzip.then(|| flate2::write::MultiGzDecoder::new(Vec::new()));
    let not_gzip =
        |e: std::io::Error| (StatusCode::BAD_REQUEST, format!("the gzip body is broken: {e}"));
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| (StatusCode::BAD_REQUEST, format!("the upload broke off: {e}")))?;
        let bytes = match decoder.as_mut() {
            Some(d) => {
                d.write_all(&chunk).map_err(not_gzip)?;
                std::mem::take(d.get_mut())
            }
            None => chunk.to_vec(),
        };
        file.write_all(&bytes).await.map_err(|e| write_failed(&path, &e))?;
    }
    if let Some(d) = decoder {
        let rest = d.finish().map_err(not_gzip)?;
        file.write_all(&rest).await.map_err(|e| write_failed(&path, &e))?;
    }
    file.flush().await.map_err(|e| write_failed(&path, &e))?;
    written(&path)
}

/// The file at `path` (its parents made), truncated, and given to `user` when one is named.
async fn create(path: &Path, user: Option<&RunAs>) -> Result<tokio::fs::File, Failed> {
    if let Some(parent) = path.parent() {
        let (dir, owner) = (parent.to_path_buf(), user.cloned());
        tokio::task::spawn_blocking(move || make_dirs(&dir, owner.as_ref()))
            .await
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
            .map_err(|e| write_failed(parent, &e))?;
    }
    let file = tokio::fs::File::create(path).await.map_err(|e| write_failed(path, &e))?;
    if let Some(u) = user {
        u.own(path).map_err(|e| write_failed(path, &e))?;
    }
    Ok(file)
}

fn write_failed(path: &Path, e: &std::io::Error) -> Failed {
    let status = match e.kind() {
        std::io::ErrorKind::PermissionDenied => StatusCode::UNAUTHORIZED,
        std::io::ErrorKind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::BAD_REQUEST,
    };
    (status, format!("cannot write {}: {e}", path.display()))
}

/// envd's answer for a written file: its name, type and path.
fn written(path: &Path) -> Result<serde_json::Value, Failed> {
    let e = entry(path).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.message))?;
    Ok(serde_json::json!({ "name": e.name, "type": "file", "path": e.path }))
}

async fn multipart(
    hall: &Hall,
    body: Body,
    boundary: &str,
    path: Option<String>,
    user: Option<&RunAs>,
) -> Result<Vec<serde_json::Value>, Failed> {
    let mut parts = Parts::new(body, boundary);
    let mut out = Vec::new();
    while let Some(head) = parts.next_head().await? {
        let Some(target) = path.clone().or_else(|| file_name(&head)) else {
            return Err((StatusCode::BAD_REQUEST, "a part names no file".into()));
        };
        let target = resolve_in(&target, user::home(user), hall, FileAccess::Write)
            .map_err(|e| (refused_status(&e), e.message))?;
        let mut file = create(&target, user).await?;
        while let Some(piece) = parts.next_data().await? {
            file.write_all(&piece).await.map_err(|e| write_failed(&target, &e))?;
        }
        file.flush().await.map_err(|e| write_failed(&target, &e))?;
        out.push(written(&target)?);
    }
    if out.is_empty() {
        return Err((StatusCode::BAD_REQUEST, "the multipart body holds no file".into()));
    }
    Ok(out)
}
